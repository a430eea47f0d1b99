"""underlayip/plugin: UnderlayIP's extension points over a fake address binder
(:mod:`tests.unit.underlayip.fake_binder`): which binder call each point makes, and how the
plugin words the binder's results (Statuses, messages, the Binding's annotations, the
sticky-address events and timer). What the binder answers is tested in test_binder.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from ipscheduler.framework.interface import (
    BIND_ANNOTATIONS,
    LOG_FIELDS,
    SCHEDULED_NOTE,
    Code,
    CycleState,
    Status,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.underlayip.args import UnderlayIPArgs
from ipscheduler.underlayip.binder import (
    Committed,
    Fit,
    InterfaceAddresses,
    PodAddresses,
    PoolBinder,
    Problem,
    Refusal,
)
from ipscheduler.underlayip.families import (
    ANY_FAMILY,
    IPV4,
    IPV6,
    PREFER_DUAL_STACK,
    REQUIRE_DUAL_STACK,
    FamilyNeed,
)
from ipscheduler.underlayip.interfaces import InterfaceNeed
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IPS,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
)
from ipscheduler.underlayip.plugin import (
    ERR_NO_FREE,
    ERR_NO_POOL,
    ERR_NO_USABLE_POOL,
    ERR_RETAINED,
    ERR_RETAINING,
    NAME,
    UnderlayIP,
    UnderlayIPDeps,
    new,
)
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.retention import retention_of
from ipscheduler.underlayip.selection import ANY, PoolChoice
from ipscheduler.underlayip.sticky import PINNED, Claim, KeptAddress, StickyAddresses
from tests import builders
from tests.unit.fakes import pool_cache
from tests.unit.underlayip.fake_binder import FakeBinder

POD = PodInfo(uid="uid-me", namespace="ns", name="me")
HOST_POD = dataclasses.replace(POD, host_network=True)
NODE = NodeInfo(name="node-a", ready=True)
NODES = {n: NodeInfo(name=n, ready=True) for n in ("node-a", "node-b", "node-c")}
NETWORK = '{"ips":[{"address":"10.0.1.2/24","gateway":"10.0.1.1"}]}'
GIVEN = Committed(pool="p", ip="10.0.1.2", network=NETWORK)


class Events:
    """An EventRecorder keeping (object name, reason, message)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def emit(self, obj: dict[str, str], event_type: str, reason: str, message: str) -> None:
        self.seen.append((obj["name"], reason, message))


class Writer:
    """A pool writer whose writes land at once (or fail with ``error``); keeps (pool, mutation)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.submitted: list[tuple[str, Any]] = []
        self.error = error

    def submit(self, name: str, mutate: Any) -> asyncio.Future[PoolView | None]:
        self.submitted.append((name, mutate))
        future: asyncio.Future[PoolView | None] = asyncio.get_running_loop().create_future()
        if self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(None)
        return future


def plugin(
    binder: FakeBinder, strategy: str = "spread", multus: str | None = None, **sticky: Any
) -> UnderlayIP:
    """UnderlayIP over ``binder``; ``sticky``: StickyAddresses' writer, activate, recorder, rehomed."""
    writer = sticky.pop("writer", Writer())
    return UnderlayIP(binder, StickyAddresses(writer, **sticky), strategy, multus)  # type: ignore[arg-type]


def needs(pod: PodInfo = POD, **fields: Any) -> PodAddresses:
    """The binder's answer to find(pod): ``fields`` over a pod that may use any pool."""
    return dataclasses.replace(PodAddresses(ANY, retention_of(pod)), **fields)


def cycle(p: UnderlayIP, pod: PodInfo = POD) -> CycleState:
    """A cycle state after PreFilter ran (successfully) for ``pod``."""
    state = CycleState()
    assert p.pre_filter(state, pod, NODES).is_success()
    return state


# --------------------------------------------------------------------------- PreFilter / Filter


@pytest.mark.parametrize(
    ("problem", "status"),
    [
        (None, Status.success()),
        (
            Problem("pool-list", "annotation ipscheduler.io/pools='a,,b': '' is not a NodeIPPool name"),
            Status.unschedulable(
                "annotation ipscheduler.io/pools='a,,b': '' is not a NodeIPPool name", plugin=NAME
            ),
        ),
        (
            Problem("unknown-pools", pools=("nope", "gone")),
            Status.unschedulable(
                "NodeIPPool(s) nope, gone named by ipscheduler.io/pools do not exist", plugin=NAME
            ),
        ),
        (Problem("retaining"), Status.unschedulable(ERR_RETAINING, plugin=NAME)),
        (
            Problem(
                "families",
                "annotation ipscheduler.io/ip-families='IPv5': 'IPv5': supported values: IPv4, IPv6",
            ),
            Status.unschedulable(
                "annotation ipscheduler.io/ip-families='IPv5': 'IPv5': supported values: IPv4, IPv6",
                plugin=NAME,
            ),
        ),
    ],
    ids=[
        "fits-somewhere",
        "malformed-pool-list",
        "unknown-pools",
        "address-still-the-previous-pods",
        "malformed-families",
    ],
)
def test_pre_filter_words_the_binders_problem(problem: Problem | None, status: Status) -> None:
    p = plugin(FakeBinder(needs=needs(problem=problem)))
    state = CycleState()
    assert p.pre_filter(state, POD, NODES) == status
    # Filter reads the binder's answer from the cycle state, but never after a bad pool list.
    assert (f"{NAME}/cycle" in state) is (problem is None or problem.reason != "pool-list")


@pytest.mark.parametrize(
    ("fit", "status"),
    [
        (Fit.FITS, Status.success()),
        (Fit.NO_FREE, Status(Code.UNSCHEDULABLE, (ERR_NO_FREE,), NAME)),
        (Fit.NO_FREE_IPV4, Status(Code.UNSCHEDULABLE, ("node(s) had no free IPv4 underlay IP",), NAME)),
        (Fit.NO_FREE_IPV6, Status(Code.UNSCHEDULABLE, ("node(s) had no free IPv6 underlay IP",), NAME)),
        (Fit.NO_POOL, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_POOL,), NAME)),
        (Fit.NO_USABLE_POOL, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_NO_USABLE_POOL,), NAME)),
        (Fit.RETAINED_ELSEWHERE, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (ERR_RETAINED,), NAME)),
    ],
    ids=[
        "fits",
        "no-free-address",
        "no-free-ipv4",
        "no-free-ipv6",
        "no-pool",
        "no-usable-pool",
        "retained-address-elsewhere",
    ],
)
def test_filter_words_the_binders_fit_as_kube_scheduler_would(fit: Fit, status: Status) -> None:
    """Only a node without a free address may change by evicting a pod (Unschedulable); the
    others are UnschedulableAndUnresolvable (preemption and extenders skip them)."""
    binder = FakeBinder(fits={"node-a": fit})
    p = plugin(binder)
    assert p.filter(cycle(p), POD, NODE) == status
    assert binder.calls[-1] == ("fit", "me", "node-a")


def test_filter_without_pre_filter_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        plugin(FakeBinder()).filter(CycleState(), POD, NODE)


async def test_a_host_network_pod_asks_the_binder_nothing() -> None:
    binder = FakeBinder(committed=GIVEN)
    p = plugin(binder)
    state = CycleState()
    assert p.pre_filter(state, HOST_POD, NODES).is_success()
    assert p.filter(state, HOST_POD, NODE).is_success()
    assert p.score(state, HOST_POD, NODE) == 0
    assert p.room(HOST_POD, NODES) is None
    assert p.fits_after_evicting(state, HOST_POD, NODE, frozenset({"v"}))
    assert p.remove_pod(state, HOST_POD, POD, NODE).is_success()
    assert p.add_pod(state, HOST_POD, POD, NODE).is_success()
    await p.nominated(HOST_POD, "node-a", frozenset({"v"}))
    assert (await p.reserve(state, HOST_POD, NODE)).is_success()
    assert (await p.pre_bind(state, HOST_POD, NODE)).is_success()
    await p.post_bind(state, HOST_POD, NODE)
    await p.unreserve(state, HOST_POD, NODE)
    assert binder.calls == []
    assert list(state) == []


# --------------------------------------------------------------------------- sticky acts


def test_a_release_policy_that_cannot_be_honoured_is_said_once() -> None:
    events = Events()
    pod = PodInfo(
        uid="uid-gen",
        namespace="ns",
        name="web-7d9f-x2x",
        generate_name="web-7d9f-",
        annotations={"ipscheduler.io/release-policy": "Never"},
    )
    p = plugin(FakeBinder(needs=needs(pod)), recorder=events)
    cycle(p, pod)
    cycle(p, pod)
    assert events.seen == [
        (
            "web-7d9f-x2x",
            "ReleasePolicyRefused",
            "ipscheduler.io/release-policy=Never needs a stable pod name, and this one was generated "
            "from 'web-7d9f-'; using Pod",
        )
    ]


def held_to(pool: str = "pb", node: str = "node-b", timeout_in: float | None = 0.2) -> KeptAddress:
    """The binder's kept address of a pod pinned to its retained address on ``node``."""
    view = builders.pool(pool, node, addresses=["10.0.2.1-10.0.2.9"], allocations={})
    a = builders.alloc("10.0.2.5", pod="ns/web-0", phase="Retained")
    allocation = PoolView.from_obj(
        builders.pool_body(pool, node, addresses=["10.0.2.1-10.0.2.9"], allocations={"uid-old": a})
    ).allocations["uid-old"]
    return KeptAddress(PINNED, Claim(view, "uid-old", allocation), timeout_in)


async def test_a_pod_held_to_its_retained_address_is_activated_once_at_its_retain_timeout() -> None:
    activated: list[set[str]] = []
    p = plugin(FakeBinder(needs=needs(kept=held_to(timeout_in=0.2))), activate=activated.append)
    cycle(p)
    cycle(p)  # a second attempt meanwhile: one timer per pod
    assert activated == []
    await asyncio.sleep(0.5)
    assert activated == [{"uid-me"}], "the pod itself is activated, and no other"


async def test_a_pod_held_for_ever_gets_no_timer() -> None:
    activated: list[set[str]] = []
    p = plugin(FakeBinder(needs=needs(kept=held_to(timeout_in=None))), activate=activated.append)
    cycle(p)
    await asyncio.sleep(0.15)
    assert activated == []


@pytest.mark.parametrize("release_fails", [False, True], ids=["released", "release-failed-kept"])
async def test_a_pod_placed_anew_lets_its_old_address_go_and_says_so(release_fails: bool) -> None:
    events, counted = Events(), []
    writer = Writer(RuntimeError("API down") if release_fails else None)
    old = held_to().claim
    binder = FakeBinder(committed=dataclasses.replace(GIVEN, pool="pa", ip="10.0.1.1", rehome=old))
    pod = PodInfo(
        uid="uid-me", namespace="ns", name="web-0", annotations={"ipscheduler.io/retain-timeout": "30s"}
    )
    p = plugin(binder, writer=writer, recorder=events, rehomed=lambda: counted.append(1))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    assert [name for name, _ in writer.submitted] == ["pb"], "the old address's release, by CAS"
    assert state.read(BIND_ANNOTATIONS)[ANNOTATION_IP] == "10.0.1.1", "the pod binds with its new address"
    if release_fails:
        assert events.seen == [] and counted == []
    else:
        assert counted == [1]
        assert events.seen == [
            (
                "web-0",
                "AddressRehomed",
                "retained address 10.0.2.5 of NodeIPPool pb released: its node could not take the pod "
                "for 30s; the pod now has 10.0.1.1 of pa on node-a",
            )
        ]


# --------------------------------------------------------------------------- Score


def test_score_is_the_binders_free_count_and_normalizes_by_strategy() -> None:
    free = {"node-a": 8, "node-b": 2, "node-c": 4}
    for strategy, want in (
        ("spread", {"node-a": 100, "node-b": 25, "node-c": 50}),
        ("binpack", {"node-a": 0, "node-b": 75, "node-c": 50}),
    ):
        p = plugin(FakeBinder(needs=needs(free=dict(free))), strategy)
        state = cycle(p)
        scores = {n: p.score(state, POD, NODES[n]) for n in NODES}
        assert scores == free
        p.normalize_score(state, POD, scores)
        assert scores == want, strategy


def test_the_score_prefers_the_nodes_of_the_pods_first_pools_whatever_they_have_free() -> None:
    """Of n pools named, the r-th gives ((n-1-r)*100 + free score) / n."""
    answer = needs(
        choice=PoolChoice(("b", "a")), free={"node-a": 4, "node-b": 2}, ranks={"node-b": 0, "node-a": 1}
    )
    p = plugin(FakeBinder(needs=answer))
    state = cycle(p)
    scores = {n: p.score(state, POD, NODES[n]) for n in ("node-a", "node-b")}
    p.normalize_score(state, POD, scores)
    assert scores == {"node-a": 50, "node-b": 75}


@pytest.mark.parametrize(
    ("strategy", "want"),
    [
        pytest.param("spread", {"node-a": 100, "node-b": 75, "node-c": 12}, id="spread"),
        pytest.param("binpack", {"node-a": 50, "node-b": 75, "node-c": 37}, id="binpack"),
    ],
)
def test_prefer_dual_stack_scores_the_nodes_that_give_both_families_first(
    strategy: str, want: dict[str, int]
) -> None:
    """node-a and node-b give both families (8 and 4 pods like it), node-c one (2): the
    strategy orders each half, node-c stays below whatever its count."""
    answer = needs(
        free={"node-a": 8, "node-b": 4, "node-c": 0}, fallback={"node-a": 8, "node-b": 4, "node-c": 2}
    )
    p = plugin(FakeBinder(needs=answer), strategy)
    state = cycle(p)
    scores = {n: p.score(state, POD, NODES[n]) for n in NODES}
    assert scores == {"node-a": 8, "node-b": 4, "node-c": 2}
    p.normalize_score(state, POD, scores)
    assert scores == want


# --------------------------------------------------------------------------- preemption, room


def test_preemption_hooks_ask_the_binder() -> None:
    binder = FakeBinder(evicting_frees=True, room_left=3)
    p = plugin(binder)
    state = cycle(p)
    victim = PodInfo(uid="uid-v", namespace="ns", name="v")
    assert p.remove_pod(state, POD, victim, NODE).is_success()
    assert p.add_pod(state, POD, victim, NODE).is_success()
    assert p.fits_after_evicting(state, POD, NODE, frozenset({"uid-v"}))
    assert p.room(POD, NODES) == 3
    assert binder.calls[1:] == [
        ("count_eviction", "me", "uid-v", "node-a"),
        ("count_addition", "me", "uid-v", "node-a"),
        ("fits_after_evicting", "me", "node-a", frozenset({"uid-v"})),
        ("room", "me", ("node-a", "node-b", "node-c")),
    ]


def test_the_extenders_preempt_finds_the_pods_needs_itself() -> None:
    """The extender's verbs each start a new cycle state: no PreFilter ran."""
    binder = FakeBinder(evicting_frees=False)
    assert not plugin(binder).fits_after_evicting(CycleState(), POD, NODE, frozenset({"uid-v"}))
    assert [c[0] for c in binder.calls] == ["find", "fits_after_evicting"]


async def test_a_nominated_pod_gets_its_place_from_the_binder() -> None:
    binder = FakeBinder(nominated="p")
    await plugin(binder).nominated(POD, "node-a", frozenset({"uid-v"}))
    assert binder.calls == [("nominate", "me", "node-a", frozenset({"uid-v"}))]


# --------------------------------------------------------------------------- Reserve / PreBind


@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (None, Status.success()),
        (Refusal("no-free"), Status(Code.UNSCHEDULABLE, (ERR_NO_FREE,), NAME)),
        (
            Refusal("reserved-elsewhere", "pool p: Reserved allocation of the pod made by replica-a/12"),
            Status.error("pool p: Reserved allocation of the pod made by replica-a/12", plugin=NAME),
        ),
        (
            Refusal("failed", "503 Service Unavailable", pool="p"),
            Status.error("reserving an address in NodeIPPool p: 503 Service Unavailable", plugin=NAME),
        ),
    ],
    ids=["assumed", "no-free-address", "another-cycles-reservation", "write-failed"],
)
async def test_reserve_and_pre_bind_word_the_binders_refusal(refusal: Refusal | None, status: Status) -> None:
    binder = FakeBinder(assumed=refusal, committed=refusal)
    p = plugin(binder)
    state = cycle(p)
    assert await p.reserve(state, POD, NODE) == status
    if refusal is not None:
        assert await p.pre_bind(state, POD, NODE) == status
        assert BIND_ANNOTATIONS not in state


async def test_reserve_without_pre_filter_finds_the_pods_needs_first() -> None:
    binder = FakeBinder()
    assert (await plugin(binder).reserve(CycleState(), POD, NODE)).is_success()
    assert binder.calls == [("needs_of", "me"), ("assume", "me", "node-a")], "no free counts needed"


async def test_pre_bind_puts_the_address_into_the_binding_and_post_bind_marks_it_bound() -> None:
    binder = FakeBinder(committed=GIVEN)
    p = plugin(binder)
    state = cycle(p)
    existing = {"other/key": "v"}
    state.write(BIND_ANNOTATIONS, existing)
    assert (await p.pre_bind(state, POD, NODE)).is_success()
    assert state.read(BIND_ANNOTATIONS) == {
        "other/key": "v",
        ANNOTATION_POOL: "p",
        ANNOTATION_IP: "10.0.1.2",
        ANNOTATION_NETWORK: NETWORK,
    }
    assert existing == {"other/key": "v"}, "not changed in place"
    assert state.read(SCHEDULED_NOTE) == "IP 10.0.1.2"
    assert state.read(LOG_FIELDS) == {"pool": "p", "ip": "10.0.1.2"}
    await p.post_bind(state, POD, NODE)
    await p.unreserve(state, POD, NODE)
    assert binder.calls[1:] == [
        ("commit", "me", "node-a"),
        ("mark_bound", "uid-me"),
        ("revert", "me", "node-a"),
    ]


async def test_pre_bind_of_a_count_only_slot_blanks_annotations_the_pod_came_with() -> None:
    """A Binding can only add annotations: a stale or forged address on a pod that gets a
    count-only slot is overwritten with "" (reads as "no address"); absent keys stay absent."""
    pod = dataclasses.replace(
        POD, annotations={ANNOTATION_IP: "10.9.9.9", ANNOTATION_POOL: "forged", "o/k": "v"}
    )
    p = plugin(FakeBinder(committed=Committed(pool="slots", ip=None)))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    assert state.read(BIND_ANNOTATIONS) == {ANNOTATION_IP: "", ANNOTATION_POOL: ""}
    assert SCHEDULED_NOTE not in state


DUAL = Committed(pool="p", ip="10.0.1.2", network="{}", ips=("10.0.1.2", "fd00::2"))


@pytest.mark.parametrize(
    ("family", "pod_annotations", "committed", "written"),
    [
        pytest.param(
            FamilyNeed(REQUIRE_DUAL_STACK, (IPV4, IPV6)),
            {},
            DUAL,
            {ANNOTATION_IPS: "10.0.1.2,fd00::2"},
            id="dual-stack",
        ),
        pytest.param(
            FamilyNeed(PREFER_DUAL_STACK, (IPV4, IPV6)),
            {},
            GIVEN,
            {ANNOTATION_IPS: "10.0.1.2"},
            id="prefer-fell-back-to-one",
        ),
        pytest.param(ANY_FAMILY, {}, GIVEN, {}, id="single-stack-looks-as-before"),
        pytest.param(
            ANY_FAMILY,
            {ANNOTATION_IPS: "10.9.9.9,fd00::9"},
            GIVEN,
            {ANNOTATION_IPS: ""},
            id="stale-ips-blanked",
        ),
    ],
)
async def test_pre_bind_lists_every_address_of_a_pod_that_asked_for_dual_stack(
    family: FamilyNeed, pod_annotations: dict[str, str], committed: Committed, written: dict[str, str]
) -> None:
    pod = dataclasses.replace(POD, annotations=pod_annotations)
    p = plugin(FakeBinder(needs=needs(pod, family=family), committed=committed))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    annotations = state.read(BIND_ANNOTATIONS)
    assert annotations[ANNOTATION_IP] == "10.0.1.2"
    assert {k: v for k, v in annotations.items() if k == ANNOTATION_IPS} == written
    assert state.read(SCHEDULED_NOTE) == (
        "IPs 10.0.1.2, fd00::2" if len(committed.ips) == 2 else "IP 10.0.1.2"
    )


async def test_pre_bind_with_nothing_reserved_adds_nothing() -> None:
    for state in (CycleState(), cycle(plugin(FakeBinder()))):
        p = plugin(FakeBinder(committed=None))
        assert (await p.pre_bind(state, POD, NODE)).is_success()
        assert BIND_ANNOTATIONS not in state


@pytest.mark.parametrize(
    ("networks", "expected"),
    [
        ("underlay@net1", '[{"name":"underlay","interface":"net1","ips":["10.0.1.2/24"]}]'),
        (None, None),
        ("other", None),
        ("a/b/c", None),  # Multus refuses it with its own message; we leave it alone
    ],
    ids=["short-form-converted", "no-annotation", "other-network", "malformed-left-alone"],
)
async def test_pre_bind_puts_the_address_into_the_multus_element(
    networks: str | None, expected: str | None
) -> None:
    annotations = {} if networks is None else {"k8s.v1.cni.cncf.io/networks": networks}
    pod = dataclasses.replace(POD, annotations=annotations)
    p = plugin(FakeBinder(committed=GIVEN), multus="underlay")
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    got = state.read(BIND_ANNOTATIONS)
    assert got[ANNOTATION_IP] == "10.0.1.2"
    assert got.get("k8s.v1.cni.cncf.io/networks") == expected
    if expected is not None:
        assert json.loads(expected)[0]["ips"] == ["10.0.1.2/24"]


# --------------------------------------------------------------------------- factory


@dataclasses.dataclass
class Handle:
    """What UnderlayIP's factory reads of the framework handle."""

    client: Any
    recorder: Any

    def activate(self, uids: set[str]) -> None:
        pass


def test_the_factory_builds_the_binder_and_the_sticky_acts_from_deps_and_handle() -> None:
    cache = pool_cache()
    writer, events = Writer(), Events()
    handle = Handle(client="the-client", recorder=events)
    deps = UnderlayIPDeps(cache, writer, identity="replica-a", reserved_ttl=7.0)  # type: ignore[arg-type]
    got = new(UnderlayIPArgs(strategy="binpack", multusNetwork="ns/underlay"), handle, deps)  # type: ignore[arg-type]
    assert (got.strategy, got.multus_network) == ("binpack", "ns/underlay")
    assert isinstance(got.binder, PoolBinder)
    binder = got.binder
    assert (binder.cache, binder.writer, binder.api) == (cache, writer, "the-client")
    assert (binder.identity, binder.reserved_ttl) == ("replica-a", 7.0)
    assert (got.sticky.writer, got.sticky.recorder, got.sticky.activate) == (writer, events, handle.activate)


# --------------------------------------------------------------------------- several interfaces

MULTUS = "k8s.v1.cni.cncf.io/networks"


@pytest.mark.parametrize(
    ("fit", "interface", "status"),
    [
        pytest.param(
            Fit.INTERFACE_NO_FREE,
            "net1",
            Status(Code.UNSCHEDULABLE, ("node(s) had no free underlay IP for interface net1",), NAME),
            id="no-free-address-for-net1",
        ),
        pytest.param(
            Fit.INTERFACE_NO_POOL,
            "rdma0",
            Status(
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                ("node(s) had no NodeIPPool interface rdma0 may use",),
                NAME,
            ),
            id="no-pool-net1-may-use",
        ),
    ],
)
def test_filter_names_the_further_interface_a_node_cannot_serve(
    fit: Fit, interface: str, status: Status
) -> None:
    """A further interface without a free address may change by evicting a pod (Unschedulable);
    one without a pool it may use cannot (UnschedulableAndUnresolvable)."""
    binder = FakeBinder(fits={"node-a": fit}, short={"node-a": interface})
    p = plugin(binder)
    assert p.filter(cycle(p), POD, NODE) == status


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        pytest.param(
            Problem("unknown-pools", "annotation ipscheduler.io/interface-pools (net1)", ("nope",)),
            "NodeIPPool(s) nope named by annotation ipscheduler.io/interface-pools (net1) do not exist",
            id="unknown-pools-of-a-further-interface",
        ),
        pytest.param(
            Problem("interfaces", "interface net1 is asked for twice"),
            "interface net1 is asked for twice",
            id="unreadable-interfaces",
        ),
    ],
)
def test_pre_filter_words_a_further_interfaces_problem(problem: Problem, message: str) -> None:
    p = plugin(FakeBinder(needs=needs(problem=problem)))
    assert p.pre_filter(CycleState(), POD, NODES) == Status.unschedulable(message, plugin=NAME)


async def test_reserve_and_pre_bind_name_the_further_interface_left_without_an_address() -> None:
    refusal = Refusal("no-free", "net1")
    p = plugin(FakeBinder(assumed=refusal, committed=refusal))
    state = cycle(p)
    status = Status(Code.UNSCHEDULABLE, ("node(s) had no free underlay IP for interface net1",), NAME)
    assert await p.reserve(state, POD, NODE) == status
    assert await p.pre_bind(state, POD, NODE) == status
    assert BIND_ANNOTATIONS not in state


RDMA_NETWORK = {
    "ips": [{"address": "10.1.0.1/24", "gateway": "10.1.0.254"}],
    "routes": [{"dst": "10.9.0.0/16", "gw": "10.1.0.253"}],
}
STOR_NETWORK = {"ips": [{"address": "fd00:2::1/64"}, {"address": "10.2.0.1/24"}]}


def given_interfaces(*elements: int) -> Committed:
    """GIVEN with net1 (rdma-a) and stor0 (stor-a, dual-stack), from the Multus elements at
    positions ``elements`` (-1: the ``ipscheduler.io/interface-pools`` annotation)."""
    net1 = InterfaceNeed("net1", PoolChoice(("rdma-a",)), network="ns/rdma", element=elements[0])
    stor0 = InterfaceNeed("stor0", PoolChoice(("stor-a",)), network="ns/stor", element=elements[1])
    return dataclasses.replace(
        GIVEN,
        interfaces=(
            InterfaceAddresses("net1", "rdma-a", ("10.1.0.1",), RDMA_NETWORK, net1),
            InterfaceAddresses("stor0", "stor-a", ("fd00:2::1", "10.2.0.1"), STOR_NETWORK, stor0),
        ),
    )


INTERFACES = (
    '{"net1":{"pool":"rdma-a","ips":["10.1.0.1"],"network":{"ips":[{"address":"10.1.0.1/24",'
    '"gateway":"10.1.0.254"}],"routes":[{"dst":"10.9.0.0/16","gw":"10.1.0.253"}]}},'
    '"stor0":{"pool":"stor-a","ips":["fd00:2::1","10.2.0.1"],"network":{"ips":[{"address":"fd00:2::1/64"},'
    '{"address":"10.2.0.1/24"}]}}}'
)


@pytest.mark.parametrize(
    ("networks", "positions", "multus", "written"),
    [
        pytest.param(None, (-1, -1), None, None, id="listed-interfaces-no-multus"),
        pytest.param(
            '[{"name": "rdma", "ipscheduler.io/pools": "rdma-a"}, {"name": "plain"},'
            ' {"name": "stor", "interface": "stor0", "ipscheduler.io/pools": "stor-a"}]',
            (0, 2),
            None,
            [
                {"name": "rdma", "ipscheduler.io/pools": "rdma-a", "ips": ["10.1.0.1/24"]},
                {"name": "plain"},
                {
                    "name": "stor",
                    "interface": "stor0",
                    "ipscheduler.io/pools": "stor-a",
                    "ips": ["fd00:2::1/64", "10.2.0.1/24"],
                },
            ],
            id="each-element-gets-its-interfaces-addresses",
        ),
        pytest.param(
            '[{"name": "underlay"}, {"name": "rdma", "ipscheduler.io/pools": "rdma-a"}]',
            (1, -1),
            "underlay",
            [
                {"name": "underlay", "ips": ["10.0.1.2/24"]},
                {"name": "rdma", "ipscheduler.io/pools": "rdma-a", "ips": ["10.1.0.1/24"]},
            ],
            id="with-the-first-interfaces-multus-network",
        ),
    ],
)
async def test_pre_bind_writes_each_further_interfaces_pool_addresses_and_network(
    networks: str | None, positions: tuple[int, int], multus: str | None, written: list[Any] | None
) -> None:
    pod = dataclasses.replace(POD, annotations={} if networks is None else {MULTUS: networks})
    p = plugin(FakeBinder(committed=given_interfaces(*positions)), multus=multus)
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    annotations = state.read(BIND_ANNOTATIONS)
    assert annotations[ANNOTATION_INTERFACES] == INTERFACES, "compact JSON, interface → pool, ips, network"
    assert (annotations[ANNOTATION_POOL], annotations[ANNOTATION_IP]) == ("p", "10.0.1.2"), (
        "the first's as before"
    )
    assert annotations[ANNOTATION_NETWORK] == NETWORK
    got = annotations.get(MULTUS)
    assert (json.loads(got) if got is not None else None) == written
    if got is not None:
        assert got == json.dumps(written, separators=(",", ":"))


async def test_pre_bind_leaves_a_multus_annotation_it_cannot_parse_alone() -> None:
    pod = dataclasses.replace(POD, annotations={MULTUS: "a/b/c"})
    p = plugin(FakeBinder(committed=given_interfaces(0, 1)))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    annotations = state.read(BIND_ANNOTATIONS)
    assert annotations[ANNOTATION_INTERFACES] == INTERFACES
    assert MULTUS not in annotations


@pytest.mark.parametrize(
    ("pod_annotations", "written"),
    [
        pytest.param(
            {ANNOTATION_INTERFACES: '{"net1":{"pool":"forged"}}'},
            {ANNOTATION_INTERFACES: ""},
            id="stale-blanked",
        ),
        pytest.param({}, {}, id="absent-stays-absent"),
    ],
)
async def test_pre_bind_of_a_pod_without_further_interfaces_blanks_a_stale_interfaces_annotation(
    pod_annotations: dict[str, str], written: dict[str, str]
) -> None:
    pod = dataclasses.replace(POD, annotations=pod_annotations)
    p = plugin(FakeBinder(committed=GIVEN))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    annotations = state.read(BIND_ANNOTATIONS)
    assert {k: v for k, v in annotations.items() if k == ANNOTATION_INTERFACES} == written
    assert annotations[ANNOTATION_IP] == "10.0.1.2"


@pytest.mark.parametrize(
    ("pod_annotations", "committed", "written"),
    [
        pytest.param(
            {ANNOTATION_IP: "10.9.9.9", ANNOTATION_POOL: "forged"},
            GIVEN,
            {ANNOTATION_POOL: "p", ANNOTATION_IP: "10.0.1.2", ANNOTATION_NETWORK: NETWORK},
            id="an-address-given-overwrites-a-stale-one",
        ),
        pytest.param(
            {ANNOTATION_IP: "10.9.9.9", ANNOTATION_POOL: "forged"},
            dataclasses.replace(given_interfaces(-1, -1), pool="slots", ip=None, network="", ips=()),
            {ANNOTATION_POOL: "", ANNOTATION_IP: "", ANNOTATION_INTERFACES: INTERFACES},
            id="a-count-only-slot-with-further-interfaces-blanks-a-stale-one",
        ),
    ],
)
async def test_pre_bind_overwrites_the_first_interfaces_stale_annotations_with_what_it_got(
    pod_annotations: dict[str, str], committed: Committed, written: dict[str, str]
) -> None:
    pod = dataclasses.replace(POD, annotations=pod_annotations)
    p = plugin(FakeBinder(committed=committed))
    state = cycle(p, pod)
    assert (await p.pre_bind(state, pod, NODE)).is_success()
    assert state.read(BIND_ANNOTATIONS) == written
