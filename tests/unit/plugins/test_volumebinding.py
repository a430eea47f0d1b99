"""plugins/volumebinding: VolumeBinding PreFilter, Filter, Reserve/Unreserve and PreBind (no server).

Cases follow kube-scheduler 1.34's volume_binding_test.go and binder_test.go (FindPodVolumes,
AssumePodVolumes, BindPodVolumes); claims, volumes and classes are parsed from raw bodies; the
PV controller is played by the fake writer below.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    Code,
    CycleState,
    FilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    QueueingHint,
    ReservePlugin,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, PVCInfo, PVInfo, StorageClassInfo
from ipscheduler.plugins.volumebinding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_PV_NOT_EXIST,
    ERR_REASON_UNBOUND_IMMEDIATE,
    VolumeBinding,
    VolumeBindingArgs,
)
from tests.builders import (
    claim_volume,
    ephemeral_volume,
    node,
    node_selector_expr,
    node_selector_term,
    pv_body,
    pvc_body,
    storage_class_body,
    volume_pod,
)
from tests.unit.plugins.cycle import ask, assert_plugin

UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
BOUND = {"pv.kubernetes.io/bind-completed": "yes"}
N1 = node("n1", {"kubernetes.io/hostname": "n1", "zone": "a"})
N2 = node("n2", {"kubernetes.io/hostname": "n2", "zone": "b"})


def on(host: str) -> dict[str, Any]:
    """A local volume's node affinity: ``kubernetes.io/hostname In (host)``."""
    return {
        "nodeSelectorTerms": [node_selector_term(node_selector_expr("kubernetes.io/hostname", "In", host))]
    }


def pv(name: str, *, phase: str = "Available", rv: str = "1", **kw: Any) -> PVInfo:
    body = pv_body(name, **kw)
    body["status"] = {"phase": phase}
    body["metadata"]["resourceVersion"] = rv
    return PVInfo.from_obj(body)


def pvc(name: str, *, rv: str = "1", phase: str = "", deleting: bool = False, **kw: Any) -> PVCInfo:
    body = pvc_body(name, **kw)
    body["metadata"]["resourceVersion"] = rv
    if phase:
        body["status"] = {"phase": phase}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return PVCInfo.from_obj(body)


CLASSES = [
    StorageClassInfo.from_obj(
        storage_class_body("local", "WaitForFirstConsumer", "kubernetes.io/no-provisioner")
    ),
    StorageClassInfo.from_obj(storage_class_body("dynamic", "WaitForFirstConsumer", "csi.example.com")),
    StorageClassInfo.from_obj(storage_class_body("immediate", "Immediate")),
    StorageClassInfo.from_obj(storage_class_body("no-mode", None)),
    StorageClassInfo.from_obj(
        {
            "metadata": {"name": "zone-a-only"},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}],
        }
    ),
]


def listers(*objs: Any) -> MapVolumeListers:
    return MapVolumeListers.of(*CLASSES, *objs)


def claims_pod(*claims: str, **kw: Any) -> PodInfo:
    return volume_pod(*(claim_volume(c) for c in claims), **kw)


def test_plugin_name_and_protocols() -> None:
    assert_plugin(
        VolumeBinding(listers(), None),
        "VolumeBinding",
        PreFilterPlugin,
        FilterPlugin,
        ReservePlugin,
        PreBindPlugin,
    )


def test_args() -> None:
    assert VolumeBindingArgs.model_validate({}).bind_timeout_seconds == 600
    assert VolumeBindingArgs.model_validate({"bindTimeoutSeconds": 30}).bind_timeout_seconds == 30
    with pytest.raises(ValueError, match="greater than 0"):
        VolumeBindingArgs.model_validate({"bindTimeoutSeconds": 0})


# --------------------------------------------------------------------------- PreFilter

PRE_CASES: list[tuple[str, list[Any], PodInfo, Code, str | None]] = [
    # (id, objects, pod, code, reason)
    ("no-claims", [], volume_pod(), Code.SKIP, None),
    ("claim-not-found", [], claims_pod("data"), UNRESOLVABLE, 'persistentvolumeclaim "data" not found'),
    (
        "ephemeral-claim-not-created-yet",
        [],
        volume_pod(ephemeral_volume("scratch"), name="web"),
        UNRESOLVABLE,
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "web-scratch"',
    ),
    (
        "ephemeral-claim-of-another-pod",
        [pvc("web-scratch", storage_class="dynamic", owner_uid="other")],
        volume_pod(ephemeral_volume("scratch"), name="web", uid="web-uid"),
        UNRESOLVABLE,
        "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)",
    ),
    (
        "claim-lost",
        [pvc("data", volume="gone", phase="Lost")],
        claims_pod("data"),
        UNRESOLVABLE,
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"',
    ),
    (
        "claim-being-deleted",
        [pvc("data", storage_class="local", deleting=True)],
        claims_pod("data"),
        UNRESOLVABLE,
        'persistentvolumeclaim "data" is being deleted',
    ),
    (
        "unbound-immediate",
        [pvc("data", storage_class="immediate")],
        claims_pod("data"),
        UNRESOLVABLE,
        ERR_REASON_UNBOUND_IMMEDIATE,
    ),
    ("unbound-without-class", [pvc("data")], claims_pod("data"), UNRESOLVABLE, ERR_REASON_UNBOUND_IMMEDIATE),
    (
        "unbound-unknown-class",
        [pvc("data", storage_class="gone")],
        claims_pod("data"),
        UNRESOLVABLE,
        ERR_REASON_UNBOUND_IMMEDIATE,
    ),
    (
        "prebound-not-complete",
        [pvc("data", storage_class="local", volume="pv-1")],
        claims_pod("data"),
        UNRESOLVABLE,
        ERR_REASON_UNBOUND_IMMEDIATE,
    ),
    (
        "class-without-mode",
        [pvc("data", storage_class="no-mode")],
        claims_pod("data"),
        Code.ERROR,
        'VolumeBindingMode not set for StorageClass "no-mode"',
    ),
    ("wait-for-first-consumer", [pvc("data", storage_class="local")], claims_pod("data"), Code.SUCCESS, None),
    ("bound", [pvc("data", volume="pv-1", annotations=BOUND)], claims_pod("data"), Code.SUCCESS, None),
    (
        "ephemeral-claim-of-the-pod",
        [pvc("web-scratch", storage_class="dynamic", owner_uid="web-uid")],
        volume_pod(ephemeral_volume("scratch"), name="web", uid="web-uid"),
        Code.SUCCESS,
        None,
    ),
]


@pytest.mark.parametrize(("objs", "p", "code", "reason"), [pytest.param(*c[1:], id=c[0]) for c in PRE_CASES])
def test_pre_filter(objs: list[Any], p: PodInfo, code: Code, reason: str | None) -> None:
    st = VolumeBinding(listers(*objs), None).pre_filter(CycleState(), p, {})
    assert st.code is code, st
    if reason is not None:
        assert (st.reasons, st.plugin) == ((reason,), "VolumeBinding")


# --------------------------------------------------------------------------- Filter

FILTER_CASES: list[tuple[str, list[Any], list[str], dict[str, tuple[str, ...]]]] = [
    # (id, objects, the pod's claims, node → reasons (empty: fits))
    (
        "bound-local-volume",
        [
            pvc("data", volume="pv-1", annotations=BOUND),
            pv("pv-1", node_affinity=on("n1"), claim="ns/data", phase="Bound"),
        ],
        ["data"],
        {"n1": (), "n2": (ERR_REASON_NODE_CONFLICT,)},
    ),
    (
        "bound-volume-without-affinity",
        [pvc("data", volume="pv-1", annotations=BOUND), pv("pv-1", claim="ns/data", phase="Bound")],
        ["data"],
        {"n1": (), "n2": ()},
    ),
    (
        "bound-volume-gone",
        [pvc("data", volume="pv-1", annotations=BOUND)],
        ["data"],
        {"n1": (ERR_REASON_PV_NOT_EXIST,)},
    ),
    (
        "static-local-volume",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", node_affinity=on("n1"))],
        ["data"],
        {"n1": (), "n2": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "static-volume-too-small",
        [
            pvc("data", storage_class="local", storage="2Gi"),
            pv("pv-1", storage_class="local", capacity="1Gi"),
        ],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "static-volume-other-class",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="other")],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "static-volume-missing-access-mode",
        [pvc("data", storage_class="local", modes=["ReadWriteMany"]), pv("pv-1", storage_class="local")],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "static-volume-claimed-by-another",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", claim="ns/other")],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "static-volume-not-available",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", phase="Released")],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "volume-prebound-to-the-claim",
        [
            pvc("data", storage_class="local"),
            pv("pv-1", storage_class="local", claim="ns/data", phase="Pending", node_affinity=on("n2")),
        ],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,), "n2": ()},
    ),
    (
        "two-claims-one-volume",
        [pvc("a", storage_class="local"), pvc("b", storage_class="local"), pv("pv-1", storage_class="local")],
        ["a", "b"],
        {"n1": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "two-claims-two-volumes",
        [
            pvc("a", storage_class="local"),
            pvc("b", storage_class="local"),
            pv("pv-1", storage_class="local"),
            pv("pv-2", storage_class="local"),
        ],
        ["a", "b"],
        {"n1": ()},
    ),
    ("dynamic-provisioning", [pvc("data", storage_class="dynamic")], ["data"], {"n1": (), "n2": ()}),
    (
        "provisioning-allowed-topologies",
        [pvc("data", storage_class="zone-a-only")],
        ["data"],
        {"n1": (), "n2": (ERR_REASON_BIND_CONFLICT,)},
    ),
    (
        "selected-node-already",
        [pvc("data", storage_class="dynamic", annotations={"volume.kubernetes.io/selected-node": "n2"})],
        ["data"],
        {"n1": (ERR_REASON_BIND_CONFLICT,), "n2": ()},
    ),
    (
        "bound-conflict-and-unbound",
        [
            pvc("a", volume="pv-1", annotations=BOUND),
            pv("pv-1", node_affinity=on("n1"), claim="ns/a", phase="Bound"),
            pvc("b", storage_class="local"),
            pv("pv-2", storage_class="local", node_affinity=on("n2")),
        ],
        ["a", "b"],
        {"n1": (ERR_REASON_BIND_CONFLICT,), "n2": (ERR_REASON_NODE_CONFLICT,)},
    ),
]


def cycle(pl: VolumeBinding, p: PodInfo, nodes: list[NodeInfo]) -> tuple[CycleState, dict[str, Any]]:
    state = CycleState()
    pre = pl.pre_filter(state, p, {n.name: n for n in nodes})
    assert pre.code is Code.SUCCESS, pre
    return state, {n.name: pl.filter(state, p, n) for n in nodes}


@pytest.mark.parametrize(("objs", "claims", "want"), [pytest.param(*c[1:], id=c[0]) for c in FILTER_CASES])
def test_filter(objs: list[Any], claims: list[str], want: dict[str, tuple[str, ...]]) -> None:
    nodes = [n for n in (N1, N2) if n.name in want]
    _, got = cycle(VolumeBinding(listers(*objs), None), claims_pod(*claims), nodes)
    for name, reasons in want.items():
        st = got[name]
        if not reasons:
            assert st.is_success(), (name, st)
        else:
            assert (st.code, st.reasons, st.plugin) == (UNRESOLVABLE, reasons, "VolumeBinding"), name


def test_the_smallest_fitting_volume_is_chosen() -> None:
    objs = [
        pvc("data", storage_class="local", storage="2Gi"),
        pv("big", storage_class="local", capacity="10Gi"),
        pv("small", storage_class="local", capacity="3Gi"),
        pv("tiny", storage_class="local", capacity="1Gi"),
    ]
    pl = VolumeBinding(listers(*objs), None)
    state, _ = cycle(pl, claims_pod("data"), [N1])
    found = state.read("PreFilterVolumeBinding").by_node["n1"]
    assert [(c.name, v.name) for c, v in found.static] == [("data", "small")]


def test_a_provision_without_class_or_with_its_class_gone_is_an_error() -> None:
    pl = VolumeBinding(listers(pvc("data", storage_class="dynamic")), None)
    state, _ = cycle(pl, claims_pod("data"), [N1])
    pl.volumes.classes.pop("dynamic")  # type: ignore[attr-defined]
    st = pl.filter(state, claims_pod("data"), N1)
    assert (st.code, st.reasons) == (Code.ERROR, ('failed to find storage class "dynamic"',))


def test_filter_without_pre_filter_is_an_error() -> None:
    assert VolumeBinding(listers(), None).filter(CycleState(), claims_pod("data"), N1).code is Code.ERROR


# --------------------------------------------------------------------------- Reserve, Unreserve


async def test_a_reserved_volume_is_taken_for_other_pods_until_unreserved() -> None:
    objs = [
        pvc("a", storage_class="local"),
        pvc("b", storage_class="local"),
        pv("pv-1", storage_class="local"),
    ]
    pl = VolumeBinding(listers(*objs), None)
    first = claims_pod("a")
    state, got = cycle(pl, first, [N1])
    assert got["n1"].is_success()
    assert (await pl.reserve(state, first, N1)).is_success()
    _, other = cycle(pl, claims_pod("b"), [N1])
    assert other["n1"].reasons == (ERR_REASON_BIND_CONFLICT,), "pv-1 is assumed for claim a"
    _, again = cycle(pl, claims_pod("a"), [N1])
    assert again["n1"].is_success(), "the claim it is assumed for still matches it"
    await pl.unreserve(state, first, N1)
    await pl.unreserve(state, first, N1)  # idempotent
    _, after = cycle(pl, claims_pod("b"), [N1])
    assert after["n1"].is_success()


async def test_a_reserved_provision_pins_the_claim_to_its_node() -> None:
    pl = VolumeBinding(listers(pvc("data", storage_class="dynamic")), None)
    p = claims_pod("data")
    state, _ = cycle(pl, p, [N1, N2])
    await pl.reserve(state, p, N1)
    _, got = cycle(pl, p, [N1, N2])
    assert got["n1"].is_success() and got["n2"].reasons == (ERR_REASON_BIND_CONFLICT,)
    await pl.unreserve(state, p, N1)
    _, got = cycle(pl, p, [N1, N2])
    assert got["n2"].is_success()


async def test_a_pod_with_bound_claims_only_has_nothing_to_bind() -> None:
    writer = Controller(
        listers(pvc("data", volume="pv-1", annotations=BOUND), pv("pv-1", claim="ns/data", phase="Bound"))
    )
    pl = VolumeBinding(writer.listers, writer)
    p = claims_pod("data")
    state, _ = cycle(pl, p, [N1])
    await pl.reserve(state, p, N1)
    assert (await pl.pre_bind(state, p, N1)).is_success()
    assert writer.patches == []


# --------------------------------------------------------------------------- PreBind


@dataclasses.dataclass
class Controller:
    """The API server and kube-controller-manager's PV controller, as far as PreBind sees
    them: each patch is recorded and (unless ``idle``) the claim is bound at once, the
    informers' views (``listers``) updated with a new resourceVersion."""

    listers: MapVolumeListers
    idle: bool = False
    drop_selected_node: bool = False
    patches: list[tuple[str, str, dict[str, Any]]] = dataclasses.field(default_factory=list)

    async def patch_persistent_volume(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(("pv", name, patch))
        written = {"metadata": {"resourceVersion": "2"}}
        if self.idle:
            return written
        ref = patch["spec"]["claimRef"]
        key = f"{ref['namespace']}/{ref['name']}"
        self.listers.pvs[name] = dataclasses.replace(
            self.listers.pvs[name], claim_ref=key, claim_uid=ref["uid"], phase="Bound", resource_version="2"
        )
        claim = self.listers.pvcs[key]
        self.listers.pvcs[key] = dataclasses.replace(
            claim, volume_name=name, annotations={**claim.annotations, **BOUND}, resource_version="2"
        )
        return written

    async def patch_persistent_volume_claim(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.patches.append(("pvc", f"{namespace}/{name}", patch))
        key = f"{namespace}/{name}"
        claim = self.listers.pvcs[key]
        written = {"metadata": {"resourceVersion": "2"}}
        if self.drop_selected_node:  # written, then the provisioner took the annotation off
            self.listers.pvcs[key] = dataclasses.replace(claim, resource_version="3")
            return written
        self.listers.pvs["pvc-new"] = pv("pvc-new", claim=key, phase="Bound", node_affinity=on("n1"))
        self.listers.pvcs[key] = dataclasses.replace(
            claim,
            volume_name="pvc-new",
            annotations={**claim.annotations, **patch["metadata"]["annotations"], **BOUND},
            resource_version="2",
        )
        return written


async def bind(ctl: Controller, claim: str, **kw: Any) -> tuple[VolumeBinding, Any]:
    pl = VolumeBinding(ctl.listers, ctl, bind_timeout=kw.get("timeout", 5.0), poll=0.01)
    p = claims_pod(claim)
    state, got = cycle(pl, p, [N1])
    assert got["n1"].is_success()
    assert (await pl.reserve(state, p, N1)).is_success()
    return pl, await pl.pre_bind(state, p, N1)


async def test_pre_bind_sets_the_claim_ref_and_waits_for_the_pv_controller() -> None:
    ctl = Controller(listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local", rv="7")))
    pl, st = await bind(ctl, "data")
    assert st.is_success(), st
    assert ctl.patches == [
        (
            "pv",
            "pv-1",
            {
                "metadata": {
                    "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
                    "resourceVersion": "7",
                },
                "spec": {
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": "ns",
                        "name": "data",
                        "uid": "pvc-uid-data",
                        "resourceVersion": "1",
                    }
                },
            },
        )
    ]
    assert pl.assumed_pvs == {} and pl.assumed_pvcs == {}, "the assumption ends with PreBind"


async def test_a_volume_a_user_prebound_to_the_claim_gets_no_bound_by_controller_annotation() -> None:
    ctl = Controller(
        listers(
            pvc("data", storage_class="local"), pv("pv-1", storage_class="local", claim="ns/data", rv="4")
        )
    )
    _, st = await bind(ctl, "data")
    assert st.is_success(), st
    assert ctl.patches[0][2]["metadata"] == {"resourceVersion": "4"}


async def test_pre_bind_waits_for_the_informer_to_see_its_write() -> None:
    """The informer still holds the volume as it was before the write: not a reset claimRef."""
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    pl = VolumeBinding(ctl.listers, ctl, bind_timeout=5.0, poll=0.01)
    p = claims_pod("data")
    state, _ = cycle(pl, p, [N1])
    await pl.reserve(state, p, N1)
    task = asyncio.create_task(pl.pre_bind(state, p, N1))
    await asyncio.sleep(0.05)
    assert not task.done(), "rv 1 < the written 2: waiting"
    ctl.idle = False
    await ctl.patch_persistent_volume("pv-1", ctl.patches[0][2])  # the PV controller's turn
    st = await asyncio.wait_for(task, 2)
    assert st.is_success(), st


async def test_pre_bind_sets_the_selected_node_for_the_provisioner() -> None:
    ctl = Controller(listers(pvc("data", storage_class="dynamic")))
    _, st = await bind(ctl, "data")
    assert st.is_success(), st
    assert ctl.patches == [
        (
            "pvc",
            "ns/data",
            {
                "metadata": {
                    "annotations": {"volume.kubernetes.io/selected-node": "n1"},
                    "resourceVersion": "1",
                }
            },
        )
    ]


async def test_pre_bind_fails_when_the_provisioner_gives_up() -> None:
    ctl = Controller(listers(pvc("data", storage_class="dynamic")), drop_selected_node=True)
    _, st = await bind(ctl, "data")
    assert (st.code, st.reasons) == (Code.ERROR, ('binding volumes: provisioning failed for PVC "data"',))


async def test_pre_bind_times_out_when_nothing_binds() -> None:
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    pl, st = await bind(ctl, "data", timeout=0.05)
    assert (st.code, st.reasons) == (Code.ERROR, ("binding volumes: context deadline exceeded",))
    assert pl.assumed_pvs == {}


async def test_pre_bind_fails_when_the_claim_ref_is_reset() -> None:
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    pl = VolumeBinding(ctl.listers, ctl, bind_timeout=5.0, poll=0.01)
    p = claims_pod("data")
    state, _ = cycle(pl, p, [N1])
    await pl.reserve(state, p, N1)
    ctl.listers.pvs["pv-1"] = dataclasses.replace(
        ctl.listers.pvs["pv-1"], resource_version="9"
    )  # newer, no claimRef
    st = await pl.pre_bind(state, p, N1)
    assert st.reasons == ('binding volumes: ClaimRef got reset for pv "pv-1"',)


async def test_pre_bind_without_a_client_is_an_error() -> None:
    pl = VolumeBinding(listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), None)
    p = claims_pod("data")
    state, _ = cycle(pl, p, [N1])
    await pl.reserve(state, p, N1)
    st = await pl.pre_bind(state, p, N1)
    assert st.code is Code.ERROR and pl.assumed_pvs == {}


# --------------------------------------------------------------------------- queueing hints

POD = claims_pod("data")
HINT_CASES: list[tuple[str, Any, Any, Any, PodInfo, QueueingHint]] = [
    ("the-pods-claim-updated", events.PVC_UPDATE, None, pvc("data"), POD, QueueingHint.QUEUE),
    ("another-claim-added", events.PVC_ADD, None, pvc("other"), POD, QueueingHint.SKIP),
    ("volume-added", events.PV_ADD, None, pv("pv-9"), POD, QueueingHint.QUEUE),
    ("volume-added-pod-without-claims", events.PV_ADD, None, pv("pv-9"), volume_pod(), QueueingHint.SKIP),
    ("class-added", events.STORAGE_CLASS_ADD, None, CLASSES[0], POD, QueueingHint.QUEUE),
    ("node-added", events.NODE_ADD, None, N1, POD, QueueingHint.QUEUE),
    ("csinode-updated", events.CSI_NODE_UPDATE, None, None, POD, QueueingHint.QUEUE),
    ("assigned-pod-deleted", events.ASSIGNED_POD_DELETE, POD, None, POD, QueueingHint.SKIP),
]


@pytest.mark.parametrize(
    ("event", "old", "new", "p", "expected"), [pytest.param(*c[1:], id=c[0]) for c in HINT_CASES]
)
def test_hints(event: Any, old: Any, new: Any, p: PodInfo, expected: QueueingHint) -> None:
    assert ask(VolumeBinding(listers(), None), event, p, old, new) is expected
