"""plugins/volumebinding/plugin: VolumeBinding's extension points over a fake binder (no server).

Cases follow kube-scheduler 1.34's volume_binding_test.go: what the plugin checks itself (the
pod's claims, in PreFilter), how it words the binder's answers, and which binder call each
extension point makes; the binder's own cases are in test_binder.py. Claims are parsed from
raw bodies (``storage.py``).
"""

from __future__ import annotations

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
    Status,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins import volumebinding
from ipscheduler.plugins.volumebinding import (
    ERR_REASON_BIND_CONFLICT,
    ERR_REASON_NODE_CONFLICT,
    ERR_REASON_PV_NOT_EXIST,
    ERR_REASON_UNBOUND_IMMEDIATE,
    VolumeBinding,
    VolumeBindingArgs,
)
from ipscheduler.plugins.volumebinding.binder import (
    ConflictReason,
    PodVolumeClaims,
    PodVolumes,
    VolumeBinder,
    VolumeBindingError,
)
from tests.builders import ephemeral_volume, volume_pod
from tests.unit import fakes
from tests.unit.plugins.cycle import ask, assert_plugin
from tests.unit.plugins.volumebinding.fake_binder import FakeBinder
from tests.unit.plugins.volumebinding.storage import (
    BOUND,
    CLASSES,
    N1,
    N2,
    Controller,
    claims_pod,
    listers,
    pv,
    pvc,
)

UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
DATA = pvc("data", storage_class="local")
"""The claim of :data:`POD`, for the scheduler to bind."""
POD = claims_pod("data")


def plugin(binder: FakeBinder, *objs: Any) -> VolumeBinding:
    """VolumeBinding over ``binder``, the listers holding ``objs`` (:data:`DATA` if none)."""
    return VolumeBinding(listers(*(objs or [DATA])), binder)


def cycle(pl: VolumeBinding, p: PodInfo, nodes: list[NodeInfo]) -> tuple[CycleState, dict[str, Status]]:
    state = CycleState()
    pre = pl.pre_filter(state, p, {n.name: n for n in nodes})
    assert pre.code is Code.SUCCESS, pre
    return state, {n.name: pl.filter(state, p, n) for n in nodes}


def test_plugin_name_and_protocols() -> None:
    assert_plugin(
        VolumeBinding(listers(), FakeBinder()),
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


def test_new_builds_the_binder_over_the_handles_listers_and_client() -> None:
    ctl = Controller(listers())
    handle = fakes.handle(client=ctl, volumes=ctl.listers)
    pl = volumebinding.new(VolumeBindingArgs.model_validate({"bindTimeoutSeconds": 30}), handle)
    assert isinstance(pl.binder, VolumeBinder) and pl.volumes is ctl.listers
    assert (pl.binder.volumes, pl.binder.writer, pl.binder.bind_timeout) == (ctl.listers, ctl, 30)
    bare = volumebinding.new(None, fakes.handle())
    assert isinstance(bare.binder, VolumeBinder)
    assert (bare.binder.writer, bare.binder.bind_timeout) == (None, 600)


async def test_a_cycle_over_the_binder_new_builds_binds_a_static_volume() -> None:
    """The extension points over the real binder, once: a static volume bound in PreBind."""
    ctl = Controller(listers(pvc("data", storage_class="local"), pv("pv-1", storage_class="local")))
    pl = volumebinding.new(None, fakes.handle(client=ctl, volumes=ctl.listers))
    state, got = cycle(pl, POD, [N1])
    assert got["n1"].is_success()
    assert (await pl.reserve(state, POD, N1)).is_success()
    assert (await pl.pre_bind(state, POD, N1)).is_success()
    assert [(kind, name) for kind, name, _ in ctl.patches] == [("pv", "pv-1")]
    assert ctl.listers.pvcs["ns/data"].volume_name == "pv-1"


# --------------------------------------------------------------------------- PreFilter

PRE_CASES: list[tuple[str, list[Any], PodInfo, Code, str | None]] = [
    # (id, objects, pod, code, reason): the plugin's own checks of the pod's claims
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
    ("wait-for-first-consumer", [pvc("data", storage_class="local")], POD, Code.SUCCESS, None),
    ("bound", [pvc("data", volume="pv-1", annotations=BOUND)], POD, Code.SUCCESS, None),
    (
        "ephemeral-claim-of-the-pod",
        [pvc("web-scratch", storage_class="dynamic", owner_uid="web-uid")],
        volume_pod(ephemeral_volume("scratch"), name="web", uid="web-uid"),
        Code.SUCCESS,
        None,
    ),
]


@pytest.mark.parametrize(("objs", "p", "code", "reason"), [pytest.param(*c[1:], id=c[0]) for c in PRE_CASES])
def test_pre_filter_checks_the_pods_claims(
    objs: list[Any], p: PodInfo, code: Code, reason: str | None
) -> None:
    """A claim that stops the pod does so before the binder is asked."""
    binder = FakeBinder()
    st = VolumeBinding(listers(*objs), binder).pre_filter(CycleState(), p, {})
    assert st.code is code, st
    if reason is not None:
        assert (st.reasons, st.plugin) == ((reason,), "VolumeBinding")
    assert binder.called() == (["claims"] if code is Code.SUCCESS else [])


PRE_BINDER_CASES: list[tuple[str, FakeBinder, Code, str | None]] = [
    # (id, the binder, code, reason): the binder's sorting of the pod's claims, worded
    (
        "an-immediate-claim",
        FakeBinder(claims=PodVolumeClaims(immediate=[DATA])),
        UNRESOLVABLE,
        ERR_REASON_UNBOUND_IMMEDIATE,
    ),
    (
        "an-immediate-claim-beside-one-to-bind",
        FakeBinder(claims=PodVolumeClaims(to_bind=[DATA], immediate=[DATA])),
        UNRESOLVABLE,
        ERR_REASON_UNBOUND_IMMEDIATE,
    ),
    (
        "a-binder-error",
        FakeBinder(claims_error=VolumeBindingError('VolumeBindingMode not set for StorageClass "no-mode"')),
        Code.ERROR,
        'VolumeBindingMode not set for StorageClass "no-mode"',
    ),
    ("claims-to-bind", FakeBinder(claims=PodVolumeClaims(to_bind=[DATA])), Code.SUCCESS, None),
    ("bound-claims", FakeBinder(claims=PodVolumeClaims(bound=[DATA])), Code.SUCCESS, None),
]


@pytest.mark.parametrize(
    ("binder", "code", "reason"), [pytest.param(*c[1:], id=c[0]) for c in PRE_BINDER_CASES]
)
def test_pre_filter_words_the_binders_claims(binder: FakeBinder, code: Code, reason: str | None) -> None:
    st = plugin(binder).pre_filter(CycleState(), POD, {})
    assert st.code is code, st
    if reason is not None:
        assert (st.reasons, st.plugin) == ((reason,), "VolumeBinding")


# --------------------------------------------------------------------------- Filter

FILTER_CASES: list[tuple[str, list[ConflictReason], tuple[str, ...]]] = [
    # (id, the binder's reasons, the status's reasons (empty: fits))
    ("fits", [], ()),
    ("volume-gone", [ConflictReason.PV_NOT_EXIST], (ERR_REASON_PV_NOT_EXIST,)),
    ("node-affinity-conflict", [ConflictReason.NODE_CONFLICT], (ERR_REASON_NODE_CONFLICT,)),
    ("nothing-to-bind", [ConflictReason.BIND_CONFLICT], (ERR_REASON_BIND_CONFLICT,)),
    (
        "two-reasons",
        [ConflictReason.NODE_CONFLICT, ConflictReason.BIND_CONFLICT],
        (ERR_REASON_NODE_CONFLICT, ERR_REASON_BIND_CONFLICT),
    ),
]


@pytest.mark.parametrize(("reasons", "want"), [pytest.param(*c[1:], id=c[0]) for c in FILTER_CASES])
def test_filter_words_the_binders_reasons(reasons: list[ConflictReason], want: tuple[str, ...]) -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), reasons=reasons)
    _, got = cycle(plugin(binder), POD, [N1])
    st = got["n1"]
    if not want:
        assert st.is_success(), st
    else:
        assert (st.code, st.reasons, st.plugin) == (UNRESOLVABLE, want, "VolumeBinding")
    assert binder.calls[1] == ("find", binder.claims, "n1"), "asked about PreFilter's claims"


def test_a_binder_error_in_filter_is_an_error() -> None:
    binder = FakeBinder(find_error=VolumeBindingError('failed to find storage class "dynamic"'))
    _, got = cycle(plugin(binder), POD, [N1])
    assert (got["n1"].code, got["n1"].reasons) == (Code.ERROR, ('failed to find storage class "dynamic"',))


def test_filter_without_pre_filter_is_an_error() -> None:
    assert VolumeBinding(listers(), FakeBinder()).filter(CycleState(), POD, N1).code is Code.ERROR


# --------------------------------------------------------------------------- Reserve, Unreserve, PreBind

FOUND = PodVolumes(provision=[DATA])


async def test_reserve_and_unreserve_assume_and_revert_what_filter_found_on_the_node() -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), volumes=FOUND)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1, N2])
    assert (await pl.reserve(state, POD, N1)).is_success()
    await pl.unreserve(state, POD, N1)
    await pl.unreserve(state, POD, N1)
    assert binder.calls[3:] == [("assume", "n1", FOUND), ("revert", FOUND), ("revert", FOUND)]


async def test_pre_bind_binds_what_reserve_assumed() -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), volumes=FOUND)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1])
    await pl.reserve(state, POD, N1)
    assert (await pl.pre_bind(state, POD, N1)).is_success()
    assert binder.calls[-1] == ("bind", POD.name, "n1", FOUND)


async def test_a_pod_with_bound_claims_only_has_nothing_to_bind() -> None:
    binder = FakeBinder(claims=PodVolumeClaims(bound=[DATA]), all_bound=True)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1])
    await pl.reserve(state, POD, N1)
    assert (await pl.pre_bind(state, POD, N1)).is_success()
    assert "bind" not in binder.called()


async def test_a_node_filter_did_not_see_has_nothing_to_assume_or_bind() -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), volumes=FOUND)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1])
    assert (await pl.reserve(state, POD, N2)).is_success()
    assert (await pl.pre_bind(state, POD, N2)).is_success()
    await pl.unreserve(state, POD, N2)
    assert binder.called() == ["claims", "find"]


async def test_a_pod_without_claims_never_asks_the_binder() -> None:
    binder = FakeBinder()
    pl = plugin(binder)
    state = CycleState()
    p = volume_pod()
    assert pl.pre_filter(state, p, {}).code is Code.SKIP
    assert (await pl.reserve(state, p, N1)).is_success()
    assert (await pl.pre_bind(state, p, N1)).is_success()
    await pl.unreserve(state, p, N1)
    assert binder.calls == []


async def test_pre_bind_on_another_node_than_reserves_is_an_error() -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), volumes=FOUND)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1])
    await pl.reserve(state, POD, N1)
    st = await pl.pre_bind(state, POD, N2)
    assert (st.code, st.reasons) == (Code.ERROR, ('no pod volumes found for node "n2"',))


PRE_BIND_CASES: list[tuple[str, Exception, str]] = [
    # (id, what the binder raises, the Error status's reason)
    (
        "the-provisioner-gave-up",
        VolumeBindingError('binding volumes: provisioning failed for PVC "data"'),
        'binding volumes: provisioning failed for PVC "data"',
    ),
    (
        "timeout",
        VolumeBindingError("binding volumes: context deadline exceeded"),
        "binding volumes: context deadline exceeded",
    ),
    (
        "claim-ref-reset",
        VolumeBindingError('binding volumes: ClaimRef got reset for pv "pv-1"'),
        'binding volumes: ClaimRef got reset for pv "pv-1"',
    ),
    (
        "no-client",
        RuntimeError("no API client to bind volumes with"),
        "RuntimeError: no API client to bind volumes with",
    ),
    ("a-write-failed", ConnectionError("refused"), "ConnectionError: refused"),
]


@pytest.mark.parametrize(("error", "reason"), [pytest.param(*c[1:], id=c[0]) for c in PRE_BIND_CASES])
async def test_a_failed_binding_is_an_error(error: Exception, reason: str) -> None:
    binder = FakeBinder(claims=PodVolumeClaims(to_bind=[DATA]), volumes=FOUND, bind_error=error)
    pl = plugin(binder)
    state, _ = cycle(pl, POD, [N1])
    await pl.reserve(state, POD, N1)
    st = await pl.pre_bind(state, POD, N1)
    assert (st.code, st.reasons, st.plugin) == (Code.ERROR, (reason,), "VolumeBinding")


# --------------------------------------------------------------------------- queueing hints

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
    assert ask(VolumeBinding(listers(), FakeBinder()), event, p, old, new) is expected
