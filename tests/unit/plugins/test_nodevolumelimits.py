"""plugins/nodevolumelimits: NodeVolumeLimits (CSI) PreFilter, Filter and queueing hints (no server).

Cases follow kube-scheduler 1.34's csi_test.go (TestCSILimits): volumes counted by driver and
handle, shared volumes counted once, unbound claims counted by their class's provisioner,
limits from the CSINode and from the node's ``attachable-volumes-*`` allocatable.
"""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, FilterPlugin, PreFilterPlugin, QueueingHint
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import CSINodeInfo, MapVolumeListers, PVCInfo, PVInfo, StorageClassInfo
from ipscheduler.plugins.nodevolumelimits import (
    ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,
    NodeVolumeLimits,
    attach_limit_key,
)
from tests.builders import (
    claim_volume,
    csi_node_body,
    ephemeral_volume,
    node,
    pv_body,
    pvc_body,
    storage_class_body,
    volume_pod,
)
from tests.unit.plugins.cycle import ask, assert_fit, assert_plugin, cycle_filter

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"


def listers(csi_node: dict[str, Any] | None = None) -> MapVolumeListers:
    """Claims ``ebs-<n>`` bound to EBS CSI volumes with handle ``h<n>`` (n in 0..3), ``gce-0``
    bound to a GCE one, ``host`` bound to a hostPath volume, ``unbound-<n>`` of a CSI class,
    ``unbound-intree`` of an in-tree one, ``no-class`` unbound without a class,
    ``lost-pv`` whose volume is gone (counted by its class)."""
    objs: list[Any] = []
    for n in range(4):
        objs += [PVCInfo.from_obj(pvc_body(f"ebs-{n}", volume=f"pv-ebs-{n}"))]
        objs += [PVInfo.from_obj(pv_body(f"pv-ebs-{n}", csi=(EBS, f"h{n}")))]
    objs += [
        PVCInfo.from_obj(pvc_body("gce-0", volume="pv-gce-0")),
        PVInfo.from_obj(pv_body("pv-gce-0", csi=(GCE, "g0"))),
        PVCInfo.from_obj(pvc_body("host", volume="pv-host")),
        PVInfo.from_obj(pv_body("pv-host")),
        PVCInfo.from_obj(pvc_body("unbound-0", storage_class="ebs")),
        PVCInfo.from_obj(pvc_body("unbound-1", storage_class="ebs")),
        PVCInfo.from_obj(pvc_body("unbound-intree", storage_class="intree")),
        PVCInfo.from_obj(pvc_body("no-class")),
        PVCInfo.from_obj(pvc_body("lost-pv", volume="gone", storage_class="ebs")),
        StorageClassInfo.from_obj(storage_class_body("ebs", provisioner=EBS)),
        StorageClassInfo.from_obj(storage_class_body("intree", provisioner="kubernetes.io/aws-ebs")),
    ]
    if csi_node is not None:
        objs.append(CSINodeInfo.from_obj(csi_node))
    return MapVolumeListers.of(*objs)


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodeVolumeLimits(listers()), "NodeVolumeLimits", PreFilterPlugin, FilterPlugin)


def claims_pod(*claims: str, **kw: Any) -> PodInfo:
    return volume_pod(*(claim_volume(c) for c in claims), **kw)


LIMIT_2 = csi_node_body("n1", ebs_csi_aws_com=2)

CASES: list[tuple[str, list[str], list[list[str]], dict[str, Any] | None, bool]] = [
    # (id, the pod's claims, claims of each pod on the node, CSINode, fits)
    ("under-limit", ["ebs-0"], [["ebs-1"]], LIMIT_2, True),
    ("at-limit", ["ebs-0"], [["ebs-1"], ["ebs-2"]], LIMIT_2, False),
    ("two-new-over-limit", ["ebs-0", "ebs-1"], [["ebs-2"]], LIMIT_2, False),
    ("same-volume-counted-once", ["ebs-0"], [["ebs-0"], ["ebs-1"]], LIMIT_2, True),
    ("other-driver-not-limited", ["gce-0"], [["ebs-1"], ["ebs-2"]], LIMIT_2, True),
    ("no-csinode-no-limit", ["ebs-0"], [["ebs-1"], ["ebs-2"]], None, True),
    (
        "driver-without-count",
        ["ebs-0"],
        [["ebs-1"], ["ebs-2"]],
        csi_node_body("n1", ebs_csi_aws_com=None),
        True,
    ),
    (
        "non-csi-volume-not-counted",
        ["host"],
        [["ebs-1"], ["ebs-2"]],
        csi_node_body("n1", ebs_csi_aws_com=0),
        True,
    ),
    ("unbound-counted-by-provisioner", ["unbound-0"], [["ebs-1"], ["ebs-2"]], LIMIT_2, False),
    ("unbound-counted-per-claim", ["unbound-0"], [["unbound-1"]], LIMIT_2, True),
    ("unbound-twice-same-claim", ["unbound-0"], [["unbound-0"], ["ebs-1"]], LIMIT_2, True),
    ("volume-gone-counted-by-class", ["lost-pv"], [["ebs-1"], ["ebs-2"]], LIMIT_2, False),
    ("unbound-in-tree-class-not-counted", ["unbound-intree"], [["ebs-1"], ["ebs-2"]], LIMIT_2, True),
    ("unbound-without-class-not-counted", ["no-class"], [["ebs-1"], ["ebs-2"]], LIMIT_2, True),
    ("missing-claim-of-a-placed-pod-not-counted", ["ebs-0"], [["nope"], ["ebs-1"]], LIMIT_2, True),
    ("limit-zero", ["ebs-0"], [], csi_node_body("n1", ebs_csi_aws_com=0), False),
]


@pytest.mark.parametrize(
    ("claims", "on_node", "csi_node", "fits"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_filter(
    claims: list[str], on_node: list[list[str]], csi_node: dict[str, Any] | None, fits: bool
) -> None:
    pl = NodeVolumeLimits(listers(csi_node))
    n = node("n1", pods=[claims_pod(*c, node="n1").lean() for c in on_node])
    pre, got = cycle_filter(pl, claims_pod(*claims), [n])
    assert pre.code is Code.SUCCESS
    assert_fit(got["n1"], fits, ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, "NodeVolumeLimits")


def test_the_nodes_allocatable_limit_applies_without_a_csinode() -> None:
    pl = NodeVolumeLimits(listers())
    n = node(
        "n1",
        pods=[claims_pod("ebs-1", node="n1")],
        allocatable={attach_limit_key(EBS): 1},
    )
    _, got = cycle_filter(pl, claims_pod("ebs-0"), [n])
    assert got["n1"].reasons == (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)


def test_the_csinode_overrides_the_nodes_allocatable_limit() -> None:
    pl = NodeVolumeLimits(listers(csi_node_body("n1", ebs_csi_aws_com=5)))
    n = node("n1", pods=[claims_pod("ebs-1", node="n1")], allocatable={attach_limit_key(EBS): 1})
    _, got = cycle_filter(pl, claims_pod("ebs-0"), [n])
    assert got["n1"].is_success()


def test_a_missing_claim_of_the_pod_is_unresolvable() -> None:
    pl = NodeVolumeLimits(listers(LIMIT_2))
    _, got = cycle_filter(pl, claims_pod("nope"), [node("n1")])
    st = got["n1"]
    assert (st.code, st.reasons) == (
        Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ('looking up PVC ns/nope: persistentvolumeclaim "nope" not found',),
    )


def ephemeral_listers(owner: str) -> MapVolumeListers:
    got = listers(csi_node_body("n1", ebs_csi_aws_com=1))
    got.pvcs["ns/eph-pod-scratch"] = PVCInfo.from_obj(
        pvc_body("eph-pod-scratch", storage_class="ebs", owner_uid=owner)
    )
    return got


def test_an_ephemeral_claim_counts_when_the_pod_owns_it() -> None:
    p = volume_pod(ephemeral_volume("scratch"), name="eph-pod", uid="eph-uid")
    assert p.ephemeral_pvc_names == ("eph-pod-scratch",)
    n = node("n1", pods=[claims_pod("ebs-1", node="n1")])
    _, got = cycle_filter(NodeVolumeLimits(ephemeral_listers("eph-uid")), p, [n])
    assert got["n1"].reasons == (ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED,)


def test_an_ephemeral_claim_the_pod_does_not_own_is_an_error() -> None:
    p = volume_pod(ephemeral_volume("scratch"), name="eph-pod", uid="eph-uid")
    _, got = cycle_filter(NodeVolumeLimits(ephemeral_listers("someone-else")), p, [node("n1")])
    st = got["n1"]
    assert (st.code, st.reasons) == (
        Code.ERROR,
        ("PVC ns/eph-pod-scratch was not created for pod ns/eph-pod (pod is not owner)",),
    )


def test_a_pod_without_claims_is_skipped() -> None:
    pre, _ = cycle_filter(
        NodeVolumeLimits(listers()), volume_pod({"name": "e", "emptyDir": {}}), [node("n1")]
    )
    assert pre.code is Code.SKIP


@pytest.mark.parametrize(
    ("driver", "key"),
    [
        pytest.param(EBS, "attachable-volumes-csi-ebs.csi.aws.com", id="short"),
        pytest.param(
            "a" * 40,
            "attachable-volumes-csi-" + "a" * 23 + "a56559418dc7908c",
            id="hashed",
        ),
    ],
)
def test_attach_limit_key(driver: str, key: str) -> None:
    assert attach_limit_key(driver) == key
    assert len(key) <= 63


POD = claims_pod("ebs-0")
HINT_CASES: list[tuple[str, Any, Any, Any, QueueingHint]] = [
    ("csinode-added", events.CSI_NODE_ADD, None, CSINodeInfo(name="n1"), QueueingHint.QUEUE),
    (
        "csinode-updated",
        events.CSI_NODE_UPDATE,
        CSINodeInfo(name="n1"),
        CSINodeInfo(name="n1"),
        QueueingHint.QUEUE,
    ),
    (
        "pod-with-claim-deleted",
        events.ASSIGNED_POD_DELETE,
        claims_pod("ebs-1", node="n1"),
        None,
        QueueingHint.QUEUE,
    ),
    ("pod-without-claim-deleted", events.ASSIGNED_POD_DELETE, volume_pod(node="n1"), None, QueueingHint.SKIP),
    ("the-pods-claim-added", events.PVC_ADD, None, PVCInfo.from_obj(pvc_body("ebs-0")), QueueingHint.QUEUE),
    ("another-claim-added", events.PVC_ADD, None, PVCInfo.from_obj(pvc_body("ebs-3")), QueueingHint.SKIP),
    ("node-added", events.NODE_ADD, None, NodeInfo(name="n2"), QueueingHint.SKIP),
]


@pytest.mark.parametrize(
    ("event", "old", "new", "expected"), [pytest.param(*c[1:], id=c[0]) for c in HINT_CASES]
)
def test_hints(event: Any, old: Any, new: Any, expected: QueueingHint) -> None:
    assert ask(NodeVolumeLimits(listers()), event, POD, old, new) is expected
