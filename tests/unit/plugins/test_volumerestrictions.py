"""plugins/volumerestrictions: VolumeRestrictions PreFilter, Filter and queueing hints (no server).

Cases follow kube-scheduler 1.34's volume_restrictions_test.go (TestGCEDiskConflicts,
TestAWSDiskConflicts, TestRBDDiskConflicts, TestISCSIDiskConflicts, TestAccessModeConflicts);
pods are parsed from raw bodies, claims from raw PersistentVolumeClaims.
"""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, CycleState, FilterPlugin, PreFilterPlugin, QueueingHint
from ipscheduler.framework.types import PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, PVCInfo
from ipscheduler.plugins.volumerestrictions import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_RWOP_CONFLICT,
    VolumeRestrictions,
)
from tests.builders import claim_volume, node, pvc_body, volume_pod
from tests.unit.plugins.cycle import ask, assert_fit, assert_plugin, cycle_filter, run_filter


def listers(*pvcs: dict[str, Any]) -> MapVolumeListers:
    return MapVolumeListers.of(*(PVCInfo.from_obj(b) for b in pvcs))


def test_plugin_name_and_protocols() -> None:
    assert_plugin(VolumeRestrictions(listers()), "VolumeRestrictions", PreFilterPlugin, FilterPlugin)


def gce(pd: str, ro: bool = False) -> dict[str, Any]:
    return {"name": f"g-{pd}", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}


def ebs(volume_id: str) -> dict[str, Any]:
    return {"name": f"e-{volume_id}", "awsElasticBlockStore": {"volumeID": volume_id}}


def rbd(monitors: list[str], pool: str, image: str, ro: bool = False) -> dict[str, Any]:
    return {"name": f"r-{image}", "rbd": {"monitors": monitors, "pool": pool, "image": image, "readOnly": ro}}


def iscsi(iqn: str, ro: bool = False) -> dict[str, Any]:
    return {
        "name": f"i-{iqn}",
        "iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "lun": 0, "readOnly": ro},
    }


DISK_CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], bool]] = [
    # (id, the pod's volume, volumes of the pod on the node, fits)
    ("gce-nothing", gce("foo"), [], True),
    ("gce-other-disk", gce("foo"), [gce("bar")], True),
    ("gce-same-disk", gce("foo"), [gce("foo")], False),
    ("gce-same-disk-one-ro", gce("foo", ro=True), [gce("foo")], False),
    ("gce-same-disk-both-ro", gce("foo", ro=True), [gce("foo", ro=True)], True),
    ("ebs-other", ebs("foo"), [ebs("bar")], True),
    ("ebs-same", ebs("foo"), [ebs("foo")], False),
    ("rbd-other-image", rbd(["a", "b"], "pool", "img"), [rbd(["a", "b"], "pool", "other")], True),
    (
        "rbd-same-image-monitor-overlap",
        rbd(["a", "b"], "pool", "img"),
        [rbd(["b", "c"], "pool", "img")],
        False,
    ),
    ("rbd-same-image-no-monitor-overlap", rbd(["a"], "pool", "img"), [rbd(["c"], "pool", "img")], True),
    ("rbd-other-pool", rbd(["a"], "p1", "img"), [rbd(["a"], "p2", "img")], True),
    ("rbd-both-ro", rbd(["a"], "pool", "img", ro=True), [rbd(["a"], "pool", "img", ro=True)], True),
    ("iscsi-other-iqn", iscsi("iqn.a"), [iscsi("iqn.b")], True),
    ("iscsi-same-iqn", iscsi("iqn.a"), [iscsi("iqn.a")], False),
    ("iscsi-same-iqn-both-ro", iscsi("iqn.a", ro=True), [iscsi("iqn.a", ro=True)], True),
    ("different-kinds-same-name", gce("foo"), [ebs("foo")], True),
]


@pytest.mark.parametrize(("vol", "on_node", "fits"), [pytest.param(*c[1:], id=c[0]) for c in DISK_CASES])
def test_disk_conflicts(vol: dict[str, Any], on_node: list[dict[str, Any]], fits: bool) -> None:
    pl = VolumeRestrictions(listers())
    p = volume_pod(vol)
    n = node("n1", pods=[volume_pod(*on_node, node="n1")] if on_node else [])
    pre, got = cycle_filter(pl, p, [n])
    assert pre.code is Code.SUCCESS  # an inline disk to check: PreFilter never skips it
    assert_fit(got["n1"], fits, ERR_REASON_DISK_CONFLICT, "VolumeRestrictions")


def test_disk_conflicts_hold_in_the_lean_form_of_a_bound_pod() -> None:
    p = volume_pod(gce("foo"))
    n = node("n1", pods=[volume_pod(gce("foo"), node="n1").lean()])
    assert run_filter_after_pre(p, n).reasons == (ERR_REASON_DISK_CONFLICT,)


def run_filter_after_pre(p: PodInfo, n: Any, pl: VolumeRestrictions | None = None) -> Any:
    pl = pl or VolumeRestrictions(listers())
    _, got = cycle_filter(pl, p, [n])
    return got[n.name]


RWOP = ("ReadWriteOncePod",)

ACCESS_CASES: list[tuple[str, list[dict[str, Any]], list[str], Code, str | None]] = [
    # (id, claims in the lister, claims of a pod already on the node, PreFilter code, Filter reason)
    ("rwo-claim-in-use", [pvc_body("c1")], ["c1"], Code.SKIP, None),
    ("rwop-claim-unused", [pvc_body("c1", modes=RWOP)], [], Code.SKIP, None),
    ("rwop-claim-in-use", [pvc_body("c1", modes=RWOP)], ["c1"], Code.SUCCESS, ERR_REASON_RWOP_CONFLICT),
    ("rwop-other-claim-in-use", [pvc_body("c1", modes=RWOP), pvc_body("c2")], ["c2"], Code.SKIP, None),
]


@pytest.mark.parametrize(
    ("pvcs", "used", "pre_code", "reason"), [pytest.param(*c[1:], id=c[0]) for c in ACCESS_CASES]
)
def test_read_write_once_pod(
    pvcs: list[dict[str, Any]], used: list[str], pre_code: Code, reason: str | None
) -> None:
    pl = VolumeRestrictions(listers(*pvcs))
    p = volume_pod(claim_volume("c1"))
    other = volume_pod(*(claim_volume(c) for c in used), node="n2")
    nodes = [node("n1"), node("n2", pods=[other])]
    pre, got = cycle_filter(pl, p, nodes)
    assert pre.code is pre_code, pre
    if pre_code is Code.SKIP:
        return
    for st in got.values():  # the claim is in use somewhere: every node fails, preemption may help
        assert (st.code, st.reasons) == (Code.UNSCHEDULABLE, (reason,))


def test_a_claim_in_use_in_another_namespace_is_another_claim() -> None:
    pl = VolumeRestrictions(listers(pvc_body("c1", modes=RWOP)))
    other = volume_pod(claim_volume("c1"), node="n1", namespace="elsewhere")
    pre, _ = cycle_filter(pl, volume_pod(claim_volume("c1")), [node("n1", pods=[other])])
    assert pre.code is Code.SKIP


def test_a_missing_claim_is_unresolvable_with_the_api_servers_message() -> None:
    pre, _ = cycle_filter(VolumeRestrictions(listers()), volume_pod(claim_volume("data")), [node("n1")])
    assert (pre.code, pre.reasons, pre.plugin) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ('persistentvolumeclaim "data" not found',),
        "VolumeRestrictions",
    )


def test_filter_without_pre_filter_is_an_error() -> None:
    st = run_filter(VolumeRestrictions(listers()), volume_pod(claim_volume("c1")), node("n1"))
    assert st.code is Code.ERROR


def test_a_pod_without_volumes_is_skipped() -> None:
    assert VolumeRestrictions(listers()).pre_filter(CycleState(), volume_pod(), {}).code is Code.SKIP


POD = volume_pod(gce("foo"), claim_volume("c1"))
HINT_CASES = [
    (
        "pod-deleted-with-conflicting-disk",
        events.ASSIGNED_POD_DELETE,
        volume_pod(gce("foo"), node="n"),
        QueueingHint.QUEUE,
    ),
    (
        "pod-deleted-with-the-claim",
        events.ASSIGNED_POD_DELETE,
        volume_pod(claim_volume("c1"), node="n"),
        QueueingHint.QUEUE,
    ),
    (
        "pod-deleted-unrelated",
        events.ASSIGNED_POD_DELETE,
        volume_pod(gce("bar"), node="n"),
        QueueingHint.SKIP,
    ),
    (
        "pod-deleted-other-namespace",
        events.ASSIGNED_POD_DELETE,
        volume_pod(gce("foo"), node="n", namespace="x"),
        QueueingHint.SKIP,
    ),
]


@pytest.mark.parametrize(("event", "old", "expected"), [pytest.param(*c[1:], id=c[0]) for c in HINT_CASES])
def test_pod_deleted_hints(event: Any, old: PodInfo, expected: QueueingHint) -> None:
    assert ask(VolumeRestrictions(listers()), event, POD, old, None) is expected


@pytest.mark.parametrize(
    ("pvc", "expected"),
    [
        pytest.param(pvc_body("c1"), QueueingHint.QUEUE, id="the-pods-claim"),
        pytest.param(pvc_body("c2"), QueueingHint.SKIP, id="another-claim"),
        pytest.param(pvc_body("c1", namespace="x"), QueueingHint.SKIP, id="other-namespace"),
    ],
)
def test_pvc_added_hints(pvc: dict[str, Any], expected: QueueingHint) -> None:
    assert ask(VolumeRestrictions(listers()), events.PVC_ADD, POD, None, PVCInfo.from_obj(pvc)) is expected


def test_a_claim_update_or_a_volume_event_moves_nothing() -> None:
    pl = VolumeRestrictions(listers())
    new = PVCInfo.from_obj(pvc_body("c1"))
    assert ask(pl, events.PVC_UPDATE, POD, new, new) is QueueingHint.SKIP
    assert ask(pl, events.PV_ADD, POD, None, None) is QueueingHint.SKIP


def test_pre_filter_extensions_follow_the_pods_that_use_the_claim() -> None:
    """Preemption's what-if: removing the pod that holds the ReadWriteOncePod claim frees it on
    every node; adding it back takes it again; a pod of another namespace changes nothing."""
    pl = VolumeRestrictions(listers(pvc_body("c1", modes=RWOP)))
    p = volume_pod(claim_volume("c1"))
    holder = volume_pod(claim_volume("c1"), node="n2")
    stranger = volume_pod(claim_volume("c1"), node="n2", namespace="x")
    n1, n2 = node("n1"), node("n2", pods=[holder, stranger])
    state = CycleState()
    assert pl.pre_filter(state, p, {"n1": n1, "n2": n2}).is_success()
    assert pl.filter(state, p, n1).reasons == (ERR_REASON_RWOP_CONFLICT,)
    assert pl.remove_pod(state, p, stranger, n2).is_success()
    assert pl.filter(state, p, n1).reasons == (ERR_REASON_RWOP_CONFLICT,)
    assert pl.remove_pod(state, p, holder, n2).is_success()
    assert pl.filter(state, p, n1).is_success()
    assert pl.add_pod(state, p, holder, n2).is_success()
    assert pl.filter(state, p, n1).reasons == (ERR_REASON_RWOP_CONFLICT,)
    assert pl.add_pod(CycleState(), p, holder, n2).code is Code.ERROR
