"""plugins/volumebinding/binder: the volume binder, method by method (no server).

Cases follow kube-scheduler 1.34's binder_test.go (GetPodVolumeClaims, FindPodVolumes,
AssumePodVolumes, RevertAssumedPodVolumes, BindPodVolumes); claims, volumes and classes are
parsed from raw bodies, the PV controller is played by ``storage.Controller``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.volumebinding.binder import (
    ConflictReason,
    PodVolumeClaims,
    PodVolumes,
    VolumeBinder,
    VolumeBindingError,
)
from tests.builders import ephemeral_volume, volume_pod
from tests.unit.plugins.volumebinding.storage import (
    BOUND,
    N1,
    N2,
    Controller,
    claims_pod,
    listers,
    on,
    pv,
    pvc,
)

BIND_CONFLICT = ConflictReason.BIND_CONFLICT
NODE_CONFLICT = ConflictReason.NODE_CONFLICT
PV_NOT_EXIST = ConflictReason.PV_NOT_EXIST


def binder(*objs: Any) -> VolumeBinder:
    return VolumeBinder(listers(*objs), None)


# --------------------------------------------------------------------------- get_pod_volume_claims

CLAIMS_CASES: list[tuple[str, list[Any], PodInfo, str]] = [
    # (id, objects, pod, where its one claim goes: bound, to_bind or immediate)
    ("unbound-immediate", [pvc("data", storage_class="immediate")], claims_pod("data"), "immediate"),
    ("unbound-without-class", [pvc("data")], claims_pod("data"), "immediate"),
    ("unbound-unknown-class", [pvc("data", storage_class="gone")], claims_pod("data"), "immediate"),
    (
        "prebound-not-complete",
        [pvc("data", storage_class="local", volume="pv-1")],
        claims_pod("data"),
        "immediate",
    ),
    ("wait-for-first-consumer", [pvc("data", storage_class="local")], claims_pod("data"), "to_bind"),
    ("bound", [pvc("data", volume="pv-1", annotations=BOUND)], claims_pod("data"), "bound"),
    (
        "ephemeral-claim-of-the-pod",
        [pvc("web-scratch", storage_class="dynamic", owner_uid="web-uid")],
        volume_pod(ephemeral_volume("scratch"), name="web", uid="web-uid"),
        "to_bind",
    ),
]


@pytest.mark.parametrize(("objs", "p", "kind"), [pytest.param(*c[1:], id=c[0]) for c in CLAIMS_CASES])
def test_get_pod_volume_claims_sorts_the_claims(objs: list[Any], p: PodInfo, kind: str) -> None:
    claims = binder(*objs).get_pod_volume_claims(p)
    sorted_as = {k: [c.name for c in getattr(claims, k)] for k in ("bound", "to_bind", "immediate")}
    assert sorted_as == {k: [objs[0].name] if k == kind else [] for k in sorted_as}


def test_a_class_without_binding_mode_is_an_error() -> None:
    with pytest.raises(VolumeBindingError) as e:
        binder(pvc("data", storage_class="no-mode")).get_pod_volume_claims(claims_pod("data"))
    assert str(e.value) == 'VolumeBindingMode not set for StorageClass "no-mode"'


def test_the_candidates_are_the_volumes_of_the_classes_of_the_claims_to_bind() -> None:
    b = binder(
        pvc("a", storage_class="local"),
        pvc("b", volume="pv-b", annotations=BOUND),
        pv("pv-1", storage_class="local"),
        pv("pv-2", storage_class="local"),
        pv("pv-3", storage_class="dynamic"),
        pv("pv-b", claim="ns/b", phase="Bound"),
    )
    claims = b.get_pod_volume_claims(claims_pod("a", "b"))
    assert {c: [v.name for v in vs] for c, vs in claims.candidates.items()} == {"local": ["pv-1", "pv-2"]}
    immediate = binder(pvc("i", storage_class="immediate"), pvc("a", storage_class="local"), pv("pv-1"))
    assert immediate.get_pod_volume_claims(claims_pod("i", "a")).candidates == {}, "the pod goes nowhere"


# --------------------------------------------------------------------------- find_pod_volumes

FIND_CASES: list[tuple[str, list[Any], list[str], dict[str, list[ConflictReason]]]] = [
    # (id, objects, the pod's claims, node → reasons (empty: fits))
    (
        "bound-local-volume",
        [
            pvc("data", volume="pv-1", annotations=BOUND),
            pv("pv-1", node_affinity=on("n1"), claim="ns/data", phase="Bound"),
        ],
        ["data"],
        {"n1": [], "n2": [NODE_CONFLICT]},
    ),
    (
        "bound-volume-without-affinity",
        [pvc("data", volume="pv-1", annotations=BOUND), pv("pv-1", claim="ns/data", phase="Bound")],
        ["data"],
        {"n1": [], "n2": []},
    ),
    (
        "bound-volume-gone",
        [pvc("data", volume="pv-1", annotations=BOUND)],
        ["data"],
        {"n1": [PV_NOT_EXIST]},
    ),
    (
        "static-local-volume",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", node_affinity=on("n1"))],
        ["data"],
        {"n1": [], "n2": [BIND_CONFLICT]},
    ),
    (
        "static-volume-too-small",
        [
            pvc("data", storage_class="local", storage="2Gi"),
            pv("pv-1", storage_class="local", capacity="1Gi"),
        ],
        ["data"],
        {"n1": [BIND_CONFLICT]},
    ),
    (
        "static-volume-other-class",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="other")],
        ["data"],
        {"n1": [BIND_CONFLICT]},
    ),
    (
        "static-volume-missing-access-mode",
        [pvc("data", storage_class="local", modes=["ReadWriteMany"]), pv("pv-1", storage_class="local")],
        ["data"],
        {"n1": [BIND_CONFLICT]},
    ),
    (
        "static-volume-claimed-by-another",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", claim="ns/other")],
        ["data"],
        {"n1": [BIND_CONFLICT]},
    ),
    (
        "static-volume-not-available",
        [pvc("data", storage_class="local"), pv("pv-1", storage_class="local", phase="Released")],
        ["data"],
        {"n1": [BIND_CONFLICT]},
    ),
    (
        "volume-prebound-to-the-claim",
        [
            pvc("data", storage_class="local"),
            pv("pv-1", storage_class="local", claim="ns/data", phase="Pending", node_affinity=on("n2")),
        ],
        ["data"],
        {"n1": [BIND_CONFLICT], "n2": []},
    ),
    (
        "two-claims-one-volume",
        [pvc("a", storage_class="local"), pvc("b", storage_class="local"), pv("pv-1", storage_class="local")],
        ["a", "b"],
        {"n1": [BIND_CONFLICT]},
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
        {"n1": []},
    ),
    ("dynamic-provisioning", [pvc("data", storage_class="dynamic")], ["data"], {"n1": [], "n2": []}),
    (
        "provisioning-allowed-topologies",
        [pvc("data", storage_class="zone-a-only")],
        ["data"],
        {"n1": [], "n2": [BIND_CONFLICT]},
    ),
    (
        "selected-node-already",
        [pvc("data", storage_class="dynamic", annotations={"volume.kubernetes.io/selected-node": "n2"})],
        ["data"],
        {"n1": [BIND_CONFLICT], "n2": []},
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
        {"n1": [BIND_CONFLICT], "n2": [NODE_CONFLICT]},
    ),
]


def find(
    b: VolumeBinder, p: PodInfo, nodes: list[NodeInfo]
) -> dict[str, tuple[PodVolumes, list[ConflictReason]]]:
    """The pod's claims (as PreFilter gets them), then what each node needs for them."""
    claims = b.get_pod_volume_claims(p)
    assert claims.immediate == []
    return {n.name: b.find_pod_volumes(claims, n) for n in nodes}


@pytest.mark.parametrize(("objs", "claims", "want"), [pytest.param(*c[1:], id=c[0]) for c in FIND_CASES])
def test_find_pod_volumes(objs: list[Any], claims: list[str], want: dict[str, list[ConflictReason]]) -> None:
    nodes = [n for n in (N1, N2) if n.name in want]
    got = find(binder(*objs), claims_pod(*claims), nodes)
    assert {name: reasons for name, (_, reasons) in got.items()} == want


def test_the_smallest_fitting_volume_is_chosen() -> None:
    objs = [
        pvc("data", storage_class="local", storage="2Gi"),
        pv("big", storage_class="local", capacity="10Gi"),
        pv("small", storage_class="local", capacity="3Gi"),
        pv("tiny", storage_class="local", capacity="1Gi"),
    ]
    found, _ = find(binder(*objs), claims_pod("data"), [N1])["n1"]
    assert [(c.name, v.name) for c, v in found.static] == [("data", "small")]


def test_a_provision_without_class_or_with_its_class_gone_is_an_error() -> None:
    b = binder(pvc("data", storage_class="dynamic"))
    claims = b.get_pod_volume_claims(claims_pod("data"))
    b.volumes.classes.pop("dynamic")  # type: ignore[attr-defined]
    with pytest.raises(VolumeBindingError) as e:
        b.find_pod_volumes(claims, N1)
    assert str(e.value) == 'failed to find storage class "dynamic"'
    selected = pvc("data", annotations={"volume.kubernetes.io/selected-node": "n1"})
    classless = PodVolumeClaims(to_bind=[selected])
    with pytest.raises(VolumeBindingError) as e:
        b.find_pod_volumes(classless, N1)
    assert str(e.value) == 'no class for claim "ns/data"'


# --------------------------------------------------------------------------- assume, revert


def test_an_assumed_volume_is_taken_for_other_pods_until_reverted() -> None:
    b = binder(
        pvc("a", storage_class="local"), pvc("b", storage_class="local"), pv("pv-1", storage_class="local")
    )
    found, reasons = find(b, claims_pod("a"), [N1])["n1"]
    assert reasons == []
    assert b.assume_pod_volumes("n1", found) is False
    assert find(b, claims_pod("b"), [N1])["n1"][1] == [BIND_CONFLICT], "pv-1 is assumed for claim a"
    assert find(b, claims_pod("a"), [N1])["n1"][1] == [], "the claim it is assumed for still matches it"
    b.revert_assumed_pod_volumes(found)
    b.revert_assumed_pod_volumes(found)  # idempotent
    assert find(b, claims_pod("b"), [N1])["n1"][1] == []


def test_an_assumed_provision_pins_the_claim_to_its_node() -> None:
    b = binder(pvc("data", storage_class="dynamic"))
    found, _ = find(b, claims_pod("data"), [N1, N2])["n1"]
    b.assume_pod_volumes("n1", found)
    got = find(b, claims_pod("data"), [N1, N2])
    assert (got["n1"][1], got["n2"][1]) == ([], [BIND_CONFLICT])
    b.revert_assumed_pod_volumes(found)
    assert find(b, claims_pod("data"), [N1, N2])["n2"][1] == []


def test_a_pod_with_bound_claims_only_has_nothing_to_bind() -> None:
    b = binder(pvc("data", volume="pv-1", annotations=BOUND), pv("pv-1", claim="ns/data", phase="Bound"))
    found, _ = find(b, claims_pod("data"), [N1])["n1"]
    assert b.assume_pod_volumes("n1", found) is True
    assert b.assumed_pvs == {} and b.assumed_pvcs == {}


def test_reverting_leaves_a_volume_assumed_for_another_claim() -> None:
    a, other = pvc("a", storage_class="local"), pvc("b", storage_class="local")
    volume = pv("pv-1", storage_class="local")
    b = binder(a, other, volume)
    b.assume_pod_volumes("n1", PodVolumes(static=[(other, volume)]))
    b.revert_assumed_pod_volumes(PodVolumes(static=[(a, volume)]))
    assert b.assumed_pvs == {"pv-1": other}


# --------------------------------------------------------------------------- bind_pod_volumes


def reserved(ctl: Controller, claim: str, timeout: float = 5.0) -> tuple[VolumeBinder, PodInfo, PodVolumes]:
    """A binder over ``ctl`` that found and assumed on n1 what the pod of ``claim`` needs."""
    b = VolumeBinder(ctl.listers, ctl, bind_timeout=timeout, poll=0.01)
    p = claims_pod(claim)
    found, reasons = find(b, p, [N1])["n1"]
    assert reasons == []
    assert b.assume_pod_volumes("n1", found) is False
    return b, p, found


async def bind(ctl: Controller, claim: str) -> VolumeBinder:
    b, p, found = reserved(ctl, claim)
    await b.bind_pod_volumes(p, N1, found)
    return b


async def test_binding_sets_the_claim_ref_and_waits_for_the_pv_controller() -> None:
    ctl = Controller(listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local", rv="7")))
    b = await bind(ctl, "data")
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
    assert b.assumed_pvs == {} and b.assumed_pvcs == {}, "the assumption ends with the binding"


async def test_a_volume_a_user_prebound_to_the_claim_gets_no_bound_by_controller_annotation() -> None:
    ctl = Controller(
        listers(
            pvc("data", storage_class="local"), pv("pv-1", storage_class="local", claim="ns/data", rv="4")
        )
    )
    await bind(ctl, "data")
    assert ctl.patches[0][2]["metadata"] == {"resourceVersion": "4"}


async def test_binding_waits_for_the_informer_to_see_its_write() -> None:
    """The informer still holds the volume as it was before the write: not a reset claimRef."""
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    b, p, found = reserved(ctl, "data")
    task = asyncio.create_task(b.bind_pod_volumes(p, N1, found))
    await asyncio.sleep(0.05)
    assert not task.done(), "rv 1 < the written 2: waiting"
    ctl.idle = False
    await ctl.patch_persistent_volume("pv-1", ctl.patches[0][2])  # the PV controller's turn
    await asyncio.wait_for(task, 2)


async def test_binding_sets_the_selected_node_for_the_provisioner() -> None:
    ctl = Controller(listers(pvc("data", storage_class="dynamic")))
    b = await bind(ctl, "data")
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
    assert b.assumed_pvcs == {}


async def test_binding_fails_when_the_provisioner_gives_up() -> None:
    ctl = Controller(listers(pvc("data", storage_class="dynamic")), drop_selected_node=True)
    with pytest.raises(VolumeBindingError) as e:
        await bind(ctl, "data")
    assert str(e.value) == 'binding volumes: provisioning failed for PVC "data"'


async def test_binding_times_out_when_nothing_binds() -> None:
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    b, p, found = reserved(ctl, "data", timeout=0.05)
    with pytest.raises(VolumeBindingError) as e:
        await b.bind_pod_volumes(p, N1, found)
    assert str(e.value) == "binding volumes: context deadline exceeded"
    assert b.assumed_pvs == {}


async def test_binding_fails_when_the_claim_ref_is_reset() -> None:
    ctl = Controller(
        listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")), idle=True
    )
    b, p, found = reserved(ctl, "data")
    ctl.listers.pvs["pv-1"] = dataclasses.replace(
        ctl.listers.pvs["pv-1"], resource_version="9"
    )  # newer, no claimRef
    with pytest.raises(VolumeBindingError) as e:
        await b.bind_pod_volumes(p, N1, found)
    assert str(e.value) == 'binding volumes: ClaimRef got reset for pv "pv-1"'


async def test_binding_without_a_client_fails_and_drops_the_assumption() -> None:
    b = binder(pvc("data", storage_class="local"), pv("pv-1", storage_class="local"))
    p = claims_pod("data")
    found, _ = find(b, p, [N1])["n1"]
    b.assume_pod_volumes("n1", found)
    with pytest.raises(RuntimeError, match="no API client to bind volumes with"):
        await b.bind_pod_volumes(p, N1, found)
    assert b.assumed_pvs == {}
