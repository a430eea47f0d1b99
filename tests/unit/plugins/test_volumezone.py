"""plugins/volumezone: VolumeZone PreFilter, Filter and queueing hints (no server).

Cases follow kube-scheduler 1.34's volume_zone_test.go (TestSingleZone, TestMultiZone,
TestWithBinding); claims, volumes and classes are parsed from raw bodies.
"""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, FilterPlugin, PreFilterPlugin, QueueingHint
from ipscheduler.framework.volumes import MapVolumeListers, PVCInfo, PVInfo, StorageClassInfo
from ipscheduler.plugins.volumezone import ERR_REASON_CONFLICT, VolumeZone, label_zones
from tests.builders import claim_volume, node, pv_body, pvc_body, storage_class_body, volume_pod
from tests.unit.plugins.cycle import ask, assert_plugin, cycle_filter, run_filter

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def listers() -> MapVolumeListers:
    """Claims ``pvc_<x>`` bound to volumes ``vol_<x>`` with these labels, plus unbound claims
    of each kind of class, as upstream's test fixtures."""
    pvs = [
        pv_body("vol_a", labels={BETA_ZONE: "us-west1-a"}),
        pv_body("vol_b", labels={BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
        pv_body("vol_ga", labels={ZONE: "us-west1-a"}),
        pv_body("vol_region", labels={BETA_REGION: "us-west1", BETA_ZONE: "us-west1-b"}),
        pv_body("vol_multi", labels={BETA_ZONE: "us-west1-b__us-west1-c"}),
        pv_body("vol_bad_label", labels={ZONE: "us-west1-a__"}),
        pv_body("vol_none"),
    ]
    pvcs = [pvc_body(f"pvc_{b['metadata']['name'][4:]}", volume=b["metadata"]["name"]) for b in pvs]
    pvcs += [
        pvc_body("pvc_missing_pv", volume="vol_gone"),
        pvc_body("pvc_unbound_no_class"),
        pvc_body("pvc_wffc", storage_class="wffc"),
        pvc_body("pvc_immediate", storage_class="immediate"),
        pvc_body("pvc_no_mode", storage_class="no-mode"),
        pvc_body("pvc_unknown_class", storage_class="gone"),
    ]
    classes = [
        storage_class_body("wffc", "WaitForFirstConsumer"),
        storage_class_body("immediate", "Immediate"),
        storage_class_body("no-mode", None),
    ]
    return MapVolumeListers.of(
        *(PVInfo.from_obj(b) for b in pvs),
        *(PVCInfo.from_obj(b) for b in pvcs),
        *(StorageClassInfo.from_obj(b) for b in classes),
    )


def test_plugin_name_and_protocols() -> None:
    assert_plugin(VolumeZone(listers()), "VolumeZone", PreFilterPlugin, FilterPlugin)


FILTER_CASES: list[tuple[str, list[str], dict[str, str], str | None]] = [
    # (id, the pod's claims, the node's labels, Filter reason or None)
    ("no-topology-on-node", ["pvc_a"], {"uselessLabel": "none"}, None),
    ("beta-zone-match", ["pvc_a"], {BETA_ZONE: "us-west1-a"}, None),
    ("beta-zone-mismatch", ["pvc_a"], {BETA_ZONE: "us-west1-b"}, ERR_REASON_CONFLICT),
    ("beta-volume-ga-node", ["pvc_a"], {ZONE: "us-west1-a"}, None),
    ("ga-volume-beta-node", ["pvc_ga"], {BETA_ZONE: "us-west1-a"}, ERR_REASON_CONFLICT),
    ("ga-zone-match", ["pvc_ga"], {ZONE: "us-west1-a", "uselessLabel": "none"}, None),
    ("region-and-zone-match", ["pvc_region"], {BETA_REGION: "us-west1", BETA_ZONE: "us-west1-b"}, None),
    (
        "region-mismatch",
        ["pvc_region"],
        {BETA_REGION: "us-east1", BETA_ZONE: "us-west1-b"},
        ERR_REASON_CONFLICT,
    ),
    ("zone-missing-on-node-with-region", ["pvc_region"], {REGION: "us-west1"}, ERR_REASON_CONFLICT),
    ("multi-zone-value-match", ["pvc_multi"], {BETA_ZONE: "us-west1-c"}, None),
    ("multi-zone-value-mismatch", ["pvc_multi"], {BETA_ZONE: "us-west1-a"}, ERR_REASON_CONFLICT),
    ("two-claims-one-mismatch", ["pvc_a", "pvc_b"], {BETA_ZONE: "us-west1-a"}, ERR_REASON_CONFLICT),
]


@pytest.mark.parametrize(
    ("claims", "labels", "reason"), [pytest.param(*c[1:], id=c[0]) for c in FILTER_CASES]
)
def test_filter(claims: list[str], labels: dict[str, str], reason: str | None) -> None:
    pl = VolumeZone(listers())
    pre, got = cycle_filter(pl, volume_pod(*(claim_volume(c) for c in claims)), [node("n1", labels)])
    assert pre.code is Code.SUCCESS, pre
    st = got["n1"]
    if reason is None:
        assert st.is_success(), st
    else:
        assert (st.code, st.reasons, st.plugin) == (UNRESOLVABLE, (reason,), "VolumeZone")


PRE_CASES: list[tuple[str, str, Code, str | None]] = [
    # (id, the pod's claim, PreFilter code, reason)
    ("no-topology-labels", "pvc_none", Code.SKIP, None),
    ("malformed-label-ignored", "pvc_bad_label", Code.SKIP, None),
    ("unbound-wait-for-first-consumer", "pvc_wffc", Code.SKIP, None),
    ("claim-without-name", "", UNRESOLVABLE, "PersistentVolumeClaim had no name"),
    ("claim-not-found", "nope", UNRESOLVABLE, 'persistentvolumeclaim "nope" not found'),
    ("volume-not-found", "pvc_missing_pv", UNRESOLVABLE, 'persistentvolume "vol_gone" not found'),
    (
        "unbound-without-class",
        "pvc_unbound_no_class",
        UNRESOLVABLE,
        "PersistentVolumeClaim had no pv name and storageClass name",
    ),
    ("unbound-immediate", "pvc_immediate", UNRESOLVABLE, "PersistentVolume had no name"),
    (
        "class-without-mode",
        "pvc_no_mode",
        UNRESOLVABLE,
        'VolumeBindingMode not set for StorageClass "no-mode"',
    ),
    ("class-not-found", "pvc_unknown_class", UNRESOLVABLE, 'storageclass.storage.k8s.io "gone" not found'),
]


@pytest.mark.parametrize(("claim", "code", "reason"), [pytest.param(*c[1:], id=c[0]) for c in PRE_CASES])
def test_pre_filter(claim: str, code: Code, reason: str | None) -> None:
    pre, _ = cycle_filter(VolumeZone(listers()), volume_pod(claim_volume(claim)), [node("n1", {ZONE: "x"})])
    assert pre.code is code, pre
    if reason is not None:
        assert (pre.reasons, pre.plugin) == ((reason,), "VolumeZone")


def test_a_pod_without_claims_is_skipped_and_passes_filter() -> None:
    pl = VolumeZone(listers())
    pre, got = cycle_filter(pl, volume_pod(), [node("n1", {ZONE: "x"})])
    assert pre.code is Code.SKIP
    assert got["n1"].is_success()


def test_filter_without_pre_filter_is_an_error() -> None:
    assert run_filter(VolumeZone(listers()), volume_pod(claim_volume("pvc_a")), node("n1")).code is Code.ERROR


@pytest.mark.parametrize(
    ("value", "zones"),
    [
        pytest.param("a", {"a"}, id="one"),
        pytest.param("a__b", {"a", "b"}, id="two"),
        pytest.param(" a __ b ", {"a", "b"}, id="trimmed"),
        pytest.param("a__", None, id="empty-part"),
        pytest.param("", None, id="empty"),
    ],
)
def test_label_zones(value: str, zones: set[str] | None) -> None:
    assert label_zones(value) == (frozenset(zones) if zones is not None else None)


POD = volume_pod(claim_volume("pvc_a"))
PV_A = PVInfo.from_obj(pv_body("vol_a", labels={BETA_ZONE: "us-west1-a"}))
HINT_CASES: list[tuple[str, Any, Any, Any, QueueingHint]] = [
    (
        "wffc-class-added",
        events.STORAGE_CLASS_ADD,
        None,
        StorageClassInfo.from_obj(storage_class_body("s", "WaitForFirstConsumer")),
        QueueingHint.QUEUE,
    ),
    (
        "immediate-class-added",
        events.STORAGE_CLASS_ADD,
        None,
        StorageClassInfo.from_obj(storage_class_body("s")),
        QueueingHint.SKIP,
    ),
    ("the-pods-claim-added", events.PVC_ADD, None, PVCInfo.from_obj(pvc_body("pvc_a")), QueueingHint.QUEUE),
    (
        "another-claim-updated",
        events.PVC_UPDATE,
        None,
        PVCInfo.from_obj(pvc_body("pvc_b")),
        QueueingHint.SKIP,
    ),
    (
        "claim-of-another-namespace",
        events.PVC_ADD,
        None,
        PVCInfo.from_obj(pvc_body("pvc_a", "x")),
        QueueingHint.SKIP,
    ),
    ("volume-added", events.PV_ADD, None, PV_A, QueueingHint.QUEUE),
    (
        "volume-zone-changed",
        events.PV_UPDATE,
        PV_A,
        PVInfo.from_obj(pv_body("vol_a", labels={BETA_ZONE: "us-west1-b"})),
        QueueingHint.QUEUE,
    ),
    (
        "volume-other-label-changed",
        events.PV_UPDATE,
        PV_A,
        PVInfo.from_obj(pv_body("vol_a", labels={BETA_ZONE: "us-west1-a", "x": "y"})),
        QueueingHint.SKIP,
    ),
    ("csinode-added", events.CSI_NODE_ADD, None, None, QueueingHint.SKIP),
]


@pytest.mark.parametrize(
    ("event", "old", "new", "expected"), [pytest.param(*c[1:], id=c[0]) for c in HINT_CASES]
)
def test_hints(event: Any, old: Any, new: Any, expected: QueueingHint) -> None:
    assert ask(VolumeZone(listers()), event, POD, old, new) is expected
