"""underlayip/plugin: the UnderlayIP plugin over a real PoolCache and an in-memory pool writer."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.interface import BIND_ANNOTATIONS, Code, CycleState, Status
from ipscheduler.framework.types import NodeInfo, OwnerRef, PodInfo
from ipscheduler.underlayip.binder import PoolBinder
from ipscheduler.underlayip.models import ANNOTATION_IP, ANNOTATION_NETWORK, ANNOTATION_POOL, NodeIPPoolStatus
from ipscheduler.underlayip.plugin import (
    ERR_NO_FREE,
    ERR_NO_POOL,
    NAME,
    UnderlayIP,
)
from ipscheduler.underlayip.pool import PoolContext, PoolView
from ipscheduler.underlayip.retention import retention_of
from ipscheduler.underlayip.sticky import StickyAddresses, kept_address
from ipscheduler.underlayip.writer import PoolWriter
from tests import builders
from tests.builders import SINCE
from tests.unit.fakes import FakePoolApi, pool_cache

NODES = ("node-a", "node-b", "node-c")

Mutate = Callable[[PoolView, PoolContext], NodeIPPoolStatus | None]


alloc = functools.partial(builders.alloc, pod="ns/other", phase="Bound")
"""A wire-form allocation, Bound by another pod unless told."""


def pool(name: str, node: str = "node-a", **kw: Any) -> dict[str, Any]:
    """A pool body as the API server returns it, with its (maybe empty) allocations map."""
    kw["allocations"] = kw.get("allocations") or {}
    return builders.pool_body(name, node, rv="10", **kw)


class Env:
    """UnderlayIP over an in-memory API server. ``live_reads``: Unreserve reads pods from it;
    ``plugin``: more of UnderlayIP's constructor arguments (recorder, activate, ...)."""

    def __init__(
        self,
        pools: list[dict[str, Any]],
        strategy: str = "spread",
        nodes: tuple[str, ...] = NODES,
        live_reads: bool = False,
        multus_network: str | None = None,
        **plugin: Any,
    ):
        node_index = {n: [NodeInfo(name=n, ready=True)] for n in nodes}
        pool_index = {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in pools}
        self.cache = pool_cache(node_index, pool_index)
        self.api = FakePoolApi(pools)
        self.writer = PoolWriter(self.api, self.cache)  # type: ignore[arg-type]
        api = self.api if live_reads else None
        sticky = {k: plugin.pop(k) for k in ("recorder", "activate") if k in plugin}
        binder = PoolBinder(self.cache, self.writer, api=api, **plugin)  # type: ignore[arg-type]
        self.plugin = UnderlayIP(
            binder,
            StickyAddresses(self.writer, sticky.get("activate"), sticky.get("recorder")),
            strategy,  # type: ignore[arg-type]
            multus_network=multus_network,
        )

    def node(self, name: str) -> NodeInfo:
        got = self.cache.node_cache.node(name)
        assert got is not None
        return got

    def pre_filter(self, pod: PodInfo) -> CycleState:
        state = CycleState()
        assert self.plugin.pre_filter(state, pod, self.cache.node_cache.nodes()).is_success()
        return state

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reserve, then PreBind (which waits for the reservation's write)."""
        st = await self.plugin.reserve(state, pod, node)
        return await self.plugin.pre_bind(state, pod, node) if st.is_success() else st

    def allocations(self, name: str) -> dict[str, tuple[str | None, str]]:
        p = self.cache.pool(name)
        assert p is not None
        return {uid: (a.ip, a.phase) for uid, a in p.allocations.items()}


def allocated_ip(state: CycleState) -> str | None:
    """The address the cycle's PreBind put into the Binding's annotations (None: none, or a
    count-only slot)."""
    return (state.get(BIND_ANNOTATIONS) or {}).get(ANNOTATION_IP) or None


POD = PodInfo(uid="uid-me", namespace="ns", name="me")
HOST_POD = dataclasses.replace(POD, host_network=True)


# --------------------------------------------------------------------------- filter

FULL = {"x": alloc("10.0.0.1"), "y": alloc("10.0.0.2")}

FILTER_CASES = [
    # (pools, node, expected reasons: () means success)
    ([], "node-a", (ERR_NO_POOL,)),
    ([pool("p", node="node-b", addresses=["10.0.0.1"])], "node-a", (ERR_NO_POOL,)),
    ([pool("p", addresses=["10.0.0.1-10.0.0.2"])], "node-a", ()),
    ([pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL)], "node-a", (ERR_NO_FREE,)),
    ([pool("p", addresses=["10.0.0.300"])], "node-a", (ERR_NO_FREE,)),
    ([pool("p", addresses=["10.0.0.1"], deleting=True)], "node-a", (ERR_NO_FREE,)),
    ([pool("p", addresses=["10.0.0.1-10.0.0.4"], capacity=0)], "node-a", (ERR_NO_FREE,)),
    (
        [
            pool(
                "p",
                addresses=["10.0.0.1-10.0.0.2"],
                allocations={"x": alloc("10.0.0.1"), "uid-me": alloc("10.0.0.2")},
            )
        ],
        "node-a",
        (),
    ),
    ([pool("p", capacity=2, allocations={"x": alloc(None)})], "node-a", ()),
    ([pool("p", capacity=1, allocations={"x": alloc(None)})], "node-a", (ERR_NO_FREE,)),
    ([pool("p")], "node-a", (ERR_NO_FREE,)),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.1.1"], allocations={"z": alloc("10.0.1.1")}),
        ],
        "node-a",
        (ERR_NO_FREE,),
    ),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.1.1"]),
        ],
        "node-a",
        (),
    ),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.4"]),
            pool("p2", node="node-b", addresses=["10.0.0.1-10.0.0.4"]),
        ],
        "node-a",
        (ERR_NO_FREE,),
    ),
]


@pytest.mark.parametrize(
    ("pools", "node", "reasons"),
    FILTER_CASES,
    ids=[
        "no-pools-at-all",
        "pool-on-other-node",
        "free-address",
        "full",
        "invalid-spec",
        "deleting",
        "capacity-zero",
        "pod-holds-address-in-full-pool",
        "count-only-free-slot",
        "count-only-full",
        "count-only-no-capacity",
        "two-pools-both-full",
        "two-pools-one-free",
        "all-addresses-conflict-with-other-pool",
    ],
)
def test_filter(pools: list[dict[str, Any]], node: str, reasons: tuple[str, ...]) -> None:
    env = Env(pools)
    state = env.pre_filter(POD)
    st = env.plugin.filter(state, POD, env.node(node))
    if reasons:
        # No eviction can give a node a pool (upstream's UnschedulableAndUnresolvable).
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if reasons == (ERR_NO_POOL,) else Code.UNSCHEDULABLE
        assert st == Status(code, reasons, NAME)
    else:
        assert st.is_success()


def test_host_network_pod_passes_everything_and_reserves_nothing() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL)])
    state = CycleState()
    assert env.plugin.pre_filter(state, HOST_POD, env.cache.node_cache.nodes()).is_success()
    assert list(state) == []
    for node in NODES:  # node-a is full, the others have no pool at all
        assert env.plugin.filter(state, HOST_POD, env.node(node)).is_success()
        assert env.plugin.score(state, HOST_POD, env.node(node)) == 0


async def test_host_network_pod_binding_cycle_writes_nothing() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    state = CycleState()
    node = env.node("node-a")
    assert (await env.plugin.reserve(state, HOST_POD, node)).is_success()
    assert (await env.plugin.pre_bind(state, HOST_POD, node)).is_success()
    await env.plugin.post_bind(state, HOST_POD, node)
    await env.plugin.unreserve(state, HOST_POD, node)
    assert env.api.puts == []
    assert BIND_ANNOTATIONS not in state
    assert allocated_ip(state) is None
    assert env.allocations("p") == {}


# --------------------------------------------------------------------------- score


def test_several_pools_on_one_node_add_up() -> None:
    env = Env(
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"x": alloc("10.0.0.1")}),
            pool("p2", addresses=["10.0.1.1-10.0.1.2"]),
            pool("p3", capacity=5, allocations={"y": alloc(None), "z": alloc(None)}),
            pool("p4", addresses=["10.0.2.1"], deleting=True),
            pool("p5", node="node-b", addresses=["10.0.3.1"]),
        ]
    )
    state = env.pre_filter(POD)
    assert env.plugin.score(state, POD, env.node("node-a")) == 3 + 2 + 3
    assert env.plugin.score(state, POD, env.node("node-b")) == 1
    assert env.plugin.score(state, POD, env.node("node-c")) == 0


def test_score_counts_the_pods_own_allocation_as_free() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.3"], allocations={"uid-me": alloc("10.0.0.1")})])
    state = env.pre_filter(POD)
    assert env.plugin.score(state, POD, env.node("node-a")) == 3
    other = PodInfo(uid="uid-other", namespace="ns", name="other")
    assert env.plugin.score(env.pre_filter(other), other, env.node("node-a")) == 2


SCORE_CASES = [
    # (strategy, expected normalized scores) for node-a: 8 free, node-b: 2 free, node-c: 4 free
    ("spread", {"node-a": 100, "node-b": 25, "node-c": 50}),
    ("binpack", {"node-a": 0, "node-b": 75, "node-c": 50}),
]


@pytest.mark.parametrize(("strategy", "expected"), SCORE_CASES, ids=["spread", "binpack"])
def test_score_and_normalize(strategy: str, expected: dict[str, int]) -> None:
    env = Env(
        [
            pool("pa", node="node-a", addresses=["10.0.0.1-10.0.0.8"]),
            pool("pb", node="node-b", addresses=["10.0.1.1-10.0.1.4"], allocations=FULL | {}),
            pool("pc", node="node-c", capacity=4),
        ],
        strategy=strategy,
    )
    state = env.pre_filter(POD)
    raw = {n: env.plugin.score(state, POD, env.node(n)) for n in NODES}
    assert raw == {"node-a": 8, "node-b": 2, "node-c": 4}
    env.plugin.normalize_score(state, POD, raw)
    assert raw == expected


# --------------------------------------------------------------------------- reserve


async def test_reserve_takes_lowest_free_address_of_pool_with_most_free() -> None:
    env = Env(
        [
            pool(
                "p1",
                addresses=["10.0.0.1-10.0.0.4"],
                allocations={"x": alloc("10.0.0.1"), "y": alloc("10.0.0.3")},
            ),
            pool("p2", addresses=["10.0.1.1-10.0.1.5"], allocations={"z": alloc("10.0.1.1")}),
            pool("p3", node="node-b", addresses=["10.0.2.1-10.0.2.99"]),
        ]
    )
    state = env.pre_filter(POD)
    st = await env.reserve(state, POD, env.node("node-a"))
    assert st.is_success()
    assert allocated_ip(state) == "10.0.1.2"
    assert env.api.puts == ["p2"]
    assert env.api.finalizer_patches == ["p2"]  # before its first allocation
    p2 = env.cache.pool("p2")
    assert p2 is not None
    assert p2.resource_version == "12"
    mine = p2.allocations["uid-me"]
    assert (mine.ip, mine.pod, mine.phase) == ("10.0.1.2", "ns/me", "Reserved")
    assert (p2.status.allocated, p2.status.free) == (2, 3)


RESERVE_CASES = [
    # (pools on node-a, expected (pool, ip))
    (
        [pool("b", addresses=["10.0.1.1-10.0.1.2"]), pool("a", addresses=["10.0.0.1-10.0.0.2"])],
        ("a", "10.0.0.1"),
    ),
    (
        [
            pool("a", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("b", addresses=["10.0.1.1-10.0.1.2"], allocations={"x": alloc("10.0.1.1")}),
        ],
        ("b", "10.0.1.2"),
    ),
    (
        [pool("a", addresses=["10.0.0.1-10.0.0.9"], deleting=True), pool("b", addresses=["10.0.1.1"])],
        ("b", "10.0.1.1"),
    ),
    ([pool("a", addresses=["10.0.0.1-10.0.0.2"], capacity=1), pool("b", capacity=3)], ("b", None)),
    (
        [pool("a", addresses=["10.0.0.1-10.0.0.9"], capacity=3), pool("b", addresses=["10.0.1.1-10.0.1.2"])],
        ("a", "10.0.0.1"),
    ),
]


@pytest.mark.parametrize(
    ("pools", "expected"),
    RESERVE_CASES,
    ids=[
        "tie-by-name",
        "full-pool-skipped",
        "deleting-pool-skipped",
        "count-only-most-free",
        "capacity-caps-free",
    ],
)
async def test_reserve_choice(pools: list[dict[str, Any]], expected: tuple[str, str | None]) -> None:
    env = Env(pools)
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, env.node("node-a"))).is_success()
    name, ip = expected
    assert allocated_ip(state) == ip
    assert env.allocations(name)["uid-me"] == (ip, "Reserved")
    assert [p.name for p in env.cache.pools_holding(POD.uid)] == [name]


async def test_reserve_fails_when_every_pool_is_full() -> None:
    env = Env(
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.0.300"]),
            pool("p3", node="node-b", addresses=["10.0.1.1"]),
        ]
    )
    state = CycleState()
    st = await env.plugin.reserve(state, POD, env.node("node-a"))
    assert st == Status(Code.UNSCHEDULABLE, (ERR_NO_FREE,), NAME)
    assert env.api.puts == []
    assert allocated_ip(state) is None


async def test_reserve_with_stale_cache_moves_on_to_next_pool() -> None:
    """The cache said p1 had room, but by the time of the write another replica took it all."""
    env = Env([pool("p1", addresses=["10.0.0.1-10.0.0.3"]), pool("p2", addresses=["10.0.1.1-10.0.1.2"])])
    state = env.pre_filter(POD)
    env.api.racing_write("p1", {f"o{i}": alloc(f"10.0.0.{i}") for i in (1, 2, 3)})
    assert (await env.reserve(state, POD, env.node("node-a"))).is_success()
    assert allocated_ip(state) == "10.0.1.1"
    assert "uid-me" not in env.allocations("p1")
    assert env.writer.conflicts == 1
    assert env.cache.available(env.cache.pools()["p1"]) == 0  # the conflict re-read the pool


def held(
    ip: str | None, phase: str = "Reserved", since: str = SINCE, by: str | None = None
) -> dict[str, Any]:
    out = alloc(ip, pod="ns/me", phase=phase)
    out["since"] = since
    if by is not None:
        out["reservedBy"] = by
    return out


def _ago(seconds: float) -> str:
    t = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("phase", "seconds_ago", "by", "fragment"),
    [
        ("Bound", 3600, None, "Bound allocation of the pod made by an earlier cycle"),
        ("Reserved", 5, "replica-a/1234", "made by replica-a/1234"),
        ("Reserved", -3600, "replica-a/1234", "made by replica-a/1234"),
    ],
    ids=["bound-by-another-cycle", "reserved-in-flight", "reserved-since-in-the-future"],
)
async def test_another_cycles_allocation_is_never_adopted(
    phase: str, seconds_ago: float, by: str | None, fragment: str
) -> None:
    """The pod's allocation belongs to another cycle (another replica binding it right now):
    this cycle fails with an error (retried after backoff) and writes nothing."""
    allocation = held("10.0.0.3", phase=phase, since=_ago(seconds_ago), by=by)  # stamped at run time
    env = Env([pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"uid-me": allocation})])
    state = env.pre_filter(POD)
    st = await env.plugin.reserve(state, POD, env.node("node-a"))
    assert st.code == Code.ERROR and fragment in st.message
    assert env.api.puts == [] and allocated_ip(state) is None
    await env.plugin.unreserve(state, POD, env.node("node-a"))
    assert env.api.puts == [] and "uid-me" in env.allocations("p1")


async def test_an_abandoned_reservation_is_taken_over_with_its_address() -> None:
    """Reserved longer than reserved_ttl by a cycle that never bound nor released it."""
    env = Env(
        [pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"uid-me": held("10.0.0.3", by="dead/1")})]
    )
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, env.node("node-a"))).is_success()
    assert allocated_ip(state) == "10.0.0.3"
    mine = env.cache.pool("p1").allocations["uid-me"]  # type: ignore[union-attr]
    assert mine.reserved_by is not None and mine.reserved_by.startswith(env.plugin.binder.identity + "/")
    assert mine.since > datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("phase", "seconds_ago", "by", "led_since_ago", "released"),
    [
        pytest.param("Reserved", None, "dead/1", None, True, id="older-than-reserved-ttl"),
        pytest.param("Reserved", 5, "replica-a/1", -60, True, id="another-replica-before-this-one-led"),
        pytest.param("Reserved", 5, "replica-a/1", None, False, id="in-flight-elsewhere"),
        pytest.param("Bound", None, None, None, False, id="bound-with-it"),
        pytest.param("Retained", None, None, None, False, id="retained"),
    ],
)
async def test_a_pod_reserved_on_another_node_gives_up_an_abandoned_reservation(
    phase: str, seconds_ago: float | None, by: str | None, led_since_ago: float | None, released: bool
) -> None:
    """A process SIGKILLed while the pod waited at Permit left a reservation on node-b; this
    cycle reserves on node-a: the pod holds one address, not two (issue 38). Times are
    stamped at run time (``seconds_ago``: None for SINCE, long past; ``led_since_ago``:
    when this replica took the Lease, negative for the future; None: no election)."""
    since = SINCE if seconds_ago is None else _ago(seconds_ago)
    plugin: dict[str, Any] = {}
    if led_since_ago is not None:
        now = datetime.datetime.now(datetime.UTC)
        plugin["takeover_before"] = now - datetime.timedelta(seconds=led_since_ago)
    env = Env(
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.4"]),
            pool(
                "p2",
                node="node-b",
                addresses=["10.0.1.1-10.0.1.4"],
                allocations={"uid-me": held("10.0.1.3", phase=phase, since=since, by=by)},
            ),
        ],
        **plugin,
    )
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, env.node("node-a"))).is_success()
    await env.writer.flush()
    assert allocated_ip(state) == "10.0.0.1"
    assert ("uid-me" in env.api.bodies["p2"]["status"]["allocations"]) is not released
    assert ("uid-me" in env.allocations("p2")) is not released


async def test_two_replicas_one_failing_its_bind_leave_the_winner_its_allocation() -> None:
    """The SRE's finding: replica B's reservation lost its CAS to A's for the same pod and
    reused A's allocation; A's bind failed and its Unreserve released it while B bound the
    pod with it. Now B refuses A's allocation and A's Unreserve removes only its own."""
    a = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    b = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    b.api = a.api  # one API server
    b.writer.api = a.api  # type: ignore[assignment]
    node_a, node_b = a.node("node-a"), b.node("node-a")
    state_a, state_b = a.pre_filter(POD), b.pre_filter(POD)
    assert (await a.reserve(state_a, POD, node_a)).is_success()  # A's write lands first
    assert (await b.plugin.reserve(state_b, POD, node_b)).is_success()  # B's cache is stale
    st = await b.plugin.pre_bind(state_b, POD, node_b)
    assert st.code == Code.ERROR and "made by " + a.plugin.binder.identity in st.message
    await b.plugin.unreserve(state_b, POD, node_b)  # B's failure handler
    assert a.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"].startswith(
        a.plugin.binder.identity
    )
    await a.plugin.unreserve(state_a, POD, node_a)  # A's bind failed (403): A releases its own
    assert "uid-me" not in a.api.bodies["p"]["status"]["allocations"]
    # B's watch delivers A's release; B's retry gets a fresh reservation of its own.
    b.cache.store_fresh(PoolView.from_obj(a.api.bodies["p"]))
    state_b = b.pre_filter(POD)
    assert (await b.reserve(state_b, POD, node_b)).is_success()
    assert a.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"].startswith(
        b.plugin.binder.identity
    )


async def test_unreserve_never_removes_a_reservation_taken_over_meanwhile() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    node = env.node("node-a")
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, node)).is_success()
    env.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"] = "replica-b/9"
    env.api.bodies["p"]["metadata"]["resourceVersion"] = "99"
    await env.plugin.unreserve(state, POD, node)
    assert env.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"] == "replica-b/9"


async def test_unreserve_keeps_what_the_pod_is_bound_with_and_what_it_cannot_confirm() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])], live_reads=True)
    node = env.node("node-a")
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, node)).is_success()
    bound = {
        "metadata": {"uid": POD.uid, "namespace": "ns", "name": "me", "annotations": {ANNOTATION_POOL: "p"}},
        "spec": {"nodeName": "node-a", "schedulerName": "ip-scheduler"},
    }
    env.api.pods[("ns", "me")] = bound  # our Binding landed although it reported an error
    await env.plugin.unreserve(state, POD, node)
    assert "uid-me" in env.api.bodies["p"]["status"]["allocations"]

    state = env.pre_filter(PodInfo(uid="uid-2", namespace="ns", name="two"))
    two = PodInfo(uid="uid-2", namespace="ns", name="two")
    assert (await env.reserve(state, two, node)).is_success()
    env.api.pod_error = RuntimeError("connection reset")
    await env.plugin.unreserve(state, two, node)
    assert "uid-2" in env.api.bodies["p"]["status"]["allocations"]  # unknown: the GC decides


async def test_unreserve_releases() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"], allocations={"x": alloc("10.0.0.1")})])
    state = env.pre_filter(POD)
    node = env.node("node-a")
    assert (await env.reserve(state, POD, node)).is_success()
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound"), "uid-me": ("10.0.0.2", "Reserved")}
    await env.plugin.unreserve(state, POD, node)
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound")}
    await env.plugin.unreserve(state, POD, node)  # idempotent
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound")}
    # The address is free again for the next pod.
    other = PodInfo(uid="uid-other", namespace="ns", name="other")
    state2 = env.pre_filter(other)
    assert (await env.reserve(state2, other, node)).is_success()
    assert allocated_ip(state2) == "10.0.0.2"


async def test_unreserve_without_reserve_is_a_no_op() -> None:
    env = Env([pool("p", addresses=["10.0.0.1"], allocations={"uid-me": alloc("10.0.0.1")})])
    await env.plugin.unreserve(CycleState(), POD, env.node("node-a"))
    assert env.api.puts == []
    assert "uid-me" in env.allocations("p")


async def test_unreserve_swallows_writer_errors() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    state = env.pre_filter(POD)
    node = env.node("node-a")
    assert (await env.plugin.reserve(state, POD, node)).is_success()

    async def broken(name: str, mutate: Mutate) -> PoolView | None:
        raise RuntimeError("API down")

    env.writer.submit = broken  # type: ignore[method-assign]
    await env.plugin.unreserve(state, POD, node)  # waits for the reservation, release fails: logs
    assert env.allocations("p") == {"uid-me": ("10.0.0.1", "Reserved")}  # left to the GC
    await env.plugin.post_bind(state, POD, node)  # does not raise


async def test_a_failed_reservation_write_fails_pre_bind_and_frees_the_assumed_place() -> None:
    env = Env([pool("p", addresses=["10.0.0.1"])])
    state = env.pre_filter(POD)
    node = env.node("node-a")

    async def down(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        raise ApiException(status=503, reason="Service Unavailable")

    env.api.replace_cluster_status = down  # type: ignore[method-assign]
    assert (await env.plugin.reserve(state, POD, node)).is_success()
    assert env.cache.node_free()["node-a"] == 0  # assumed while the write is pending
    st = await env.plugin.pre_bind(state, POD, node)
    assert st.code == Code.ERROR
    assert "NodeIPPool p" in st.message
    assert env.cache.node_free()["node-a"] == 1
    await env.plugin.unreserve(state, POD, node)  # nothing was written: nothing to release


async def test_reservations_in_flight_are_assumed_and_coalesced_into_one_write() -> None:
    """Three pods reserved in one pool before any write lands: three addresses, one PUT;
    the fourth finds the pool full although the API server has not seen a write yet."""
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.3"])])
    node = env.node("node-a")
    pods = [PodInfo(uid=f"uid-{i}", namespace="ns", name=f"pod-{i}") for i in range(4)]
    states = []
    for pod in pods[:3]:
        state = env.pre_filter(pod)
        assert (await env.plugin.reserve(state, pod, node)).is_success()
        states.append(state)
    assert env.api.puts == []
    assert env.cache.node_free()["node-a"] == 0
    last = env.pre_filter(pods[3])
    assert env.plugin.filter(last, pods[3], node).reasons == (ERR_NO_FREE,)
    assert (await env.plugin.reserve(last, pods[3], node)).code == Code.UNSCHEDULABLE
    for pod, state in zip(pods, states, strict=False):
        assert (await env.plugin.pre_bind(state, pod, node)).is_success()
    assert env.api.puts == ["p"]
    assert sorted(allocated_ip(s) or "" for s in states) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert env.cache.node_free().get("node-a", 0) == 0


# --------------------------------------------------------------------------- pre_bind / post_bind


def with_subnets(body: dict[str, Any], *subnets: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["subnets"] = list(subnets)
    return body


BIND_CASES = [
    # (pool, existing annotations in the cycle state, expected annotations)
    (
        pool("p", addresses=["10.0.0.1-10.0.0.4"]),
        None,
        {
            ANNOTATION_POOL: "p",
            ANNOTATION_IP: "10.0.0.1",
            ANNOTATION_NETWORK: '{"ips":[{"address":"10.0.0.1/32"}]}',
        },
    ),
    (
        pool("p", addresses=["fd00::10-fd00::20"]),
        {"other/key": "v"},
        {
            "other/key": "v",
            ANNOTATION_POOL: "p",
            ANNOTATION_IP: "fd00::10",
            ANNOTATION_NETWORK: '{"ips":[{"address":"fd00::10/128"}]}',
        },
    ),
    (pool("slots", capacity=2), None, {}),  # count-only: none of the three
    (
        with_subnets(
            pool("p", addresses=["10.0.1.1-10.0.1.9"]),
            {"cidr": "10.0.1.0/24", "gateway": "10.0.1.1", "routes": [{"dst": "0.0.0.0/0"}]},
        ),
        None,
        {
            ANNOTATION_POOL: "p",
            ANNOTATION_IP: "10.0.1.2",  # 10.0.1.1 is the gateway
            ANNOTATION_NETWORK: '{"ips":[{"address":"10.0.1.2/24","gateway":"10.0.1.1"}],'
            '"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}',
        },
    ),
    (
        with_subnets(
            pool("p", addresses=["fd00:1::10/126"]),
            {"cidr": "fd00:1::/64", "routes": [{"dst": "::/0", "gw": "fd00:1::1"}]},
        ),
        None,
        {
            ANNOTATION_POOL: "p",
            ANNOTATION_IP: "fd00:1::10",
            ANNOTATION_NETWORK: '{"ips":[{"address":"fd00:1::10/64"}],'
            '"routes":[{"dst":"::/0","gw":"fd00:1::1"}]}',
        },
    ),
]


@pytest.mark.parametrize(
    ("body", "existing", "expected"),
    BIND_CASES,
    ids=["ipv4-host-route", "ipv6-merged", "count-only", "subnet-gateway-routes", "ipv6-subnet-route-gw"],
)
async def test_pre_bind_and_post_bind(
    body: dict[str, Any], existing: dict[str, str] | None, expected: dict[str, str]
) -> None:
    env = Env([body])
    name = body["metadata"]["name"]
    state = env.pre_filter(POD)
    if existing is not None:
        state.write(BIND_ANNOTATIONS, existing)
    node = env.node("node-a")
    assert (await env.plugin.reserve(state, POD, node)).is_success()
    assert (await env.plugin.pre_bind(state, POD, node)).is_success()
    assert state.read(BIND_ANNOTATIONS) == expected
    if existing is not None:
        assert existing == {"other/key": "v"}  # not mutated in place
    ip = expected.get(ANNOTATION_IP)
    assert env.allocations(name) == {"uid-me": (ip, "Reserved")}
    await env.plugin.post_bind(state, POD, node)
    assert env.allocations(name) == {"uid-me": (ip, "Reserved")}  # deferred ...
    await env.writer.flush()
    assert env.allocations(name) == {"uid-me": (ip, "Bound")}  # ... until written
    writes = len(env.api.puts)
    await env.plugin.post_bind(state, POD, node)  # already Bound: nothing to write
    await env.writer.flush()
    assert len(env.api.puts) == writes


async def test_pre_bind_of_a_count_only_slot_blanks_annotations_the_pod_came_with() -> None:
    """A Binding can only add annotations: a stale or forged address on a pod that gets a
    count-only slot is overwritten with "" (reads as "no address"); absent keys stay absent."""
    env = Env([pool("slots", capacity=2)])
    pod = PodInfo(
        uid="uid-me",
        namespace="ns",
        name="me",
        annotations={ANNOTATION_IP: "10.9.9.9", ANNOTATION_POOL: "forged", "other/key": "v"},
    )
    state = env.pre_filter(pod)
    node = env.node("node-a")
    assert (await env.plugin.reserve(state, pod, node)).is_success()
    assert (await env.plugin.pre_bind(state, pod, node)).is_success()
    assert state.read(BIND_ANNOTATIONS) == {ANNOTATION_IP: "", ANNOTATION_POOL: ""}


async def test_unreserve_keeps_a_count_only_slot_of_a_pod_bound_without_annotations() -> None:
    env = Env([pool("slots", capacity=2)], live_reads=True)
    node = env.node("node-a")
    state = env.pre_filter(POD)
    assert (await env.reserve(state, POD, node)).is_success()
    env.api.pods[("ns", "me")] = {
        "metadata": {"uid": POD.uid, "namespace": "ns", "name": "me"},
        "spec": {"nodeName": "node-a", "schedulerName": "ip-scheduler"},
    }
    await env.plugin.unreserve(state, POD, node)
    assert env.allocations("slots") == {"uid-me": (None, "Reserved")}


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
    env = Env(
        [
            with_subnets(
                pool("p", addresses=["10.0.1.1-10.0.1.9"]), {"cidr": "10.0.1.0/24", "gateway": "10.0.1.1"}
            )
        ],
        multus_network="underlay",
    )
    pod = PodInfo(
        uid="uid-me",
        namespace="ns",
        name="me",
        annotations={} if networks is None else {"k8s.v1.cni.cncf.io/networks": networks},
    )
    state = env.pre_filter(pod)
    node = env.node("node-a")
    assert (await env.plugin.reserve(state, pod, node)).is_success()
    assert (await env.plugin.pre_bind(state, pod, node)).is_success()
    annotations = state.read(BIND_ANNOTATIONS)
    assert annotations[ANNOTATION_IP] == "10.0.1.2"
    assert annotations.get("k8s.v1.cni.cncf.io/networks") == expected


async def test_pre_bind_without_reservation_adds_nothing() -> None:
    env = Env([pool("p", addresses=["10.0.0.1"])])
    state = CycleState()
    assert (await env.plugin.pre_bind(state, POD, env.node("node-a"))).is_success()
    assert BIND_ANNOTATIONS not in state


# --------------------------------------------------------------------------- choosing pools


def chooser(namespace: str = "ns", pools: str | None = None, uid: str = "uid-me") -> PodInfo:
    annotations = {"ipscheduler.io/pools": pools} if pools is not None else {}
    return PodInfo(uid=uid, namespace=namespace, name="me", annotations=annotations)


CHOICE_POOLS = [
    pool("a", "node-a", addresses=["10.0.1.1-10.0.1.4"]),
    pool("b", "node-b", addresses=["10.0.2.1-10.0.2.2"]),
    pool("team", "node-c", addresses=["10.0.3.1-10.0.3.8"], namespaces=["team-x"]),
]


@pytest.mark.parametrize(
    ("pod", "feasible", "reasons"),
    [
        (chooser(), {"node-a", "node-b"}, {"node-c": "node(s) had no NodeIPPool the pod may use"}),
        (chooser("team-x"), {"node-a", "node-b", "node-c"}, {}),
        (
            chooser(pools="b"),
            {"node-b"},
            {
                "node-a": "node(s) had no NodeIPPool the pod may use",
                "node-c": "node(s) had no NodeIPPool the pod may use",
            },
        ),
        (
            chooser("team-x", pools="team, a"),
            {"node-a", "node-c"},
            {"node-b": "node(s) had no NodeIPPool the pod may use"},
        ),
        (chooser(pools="team"), set(), {n: "node(s) had no NodeIPPool the pod may use" for n in NODES}),
    ],
    ids=[
        "namespace-reserved-pool-left-out",
        "its-namespace-may",
        "named-pool",
        "named-pools-in-its-namespace",
        "named-pool-of-another-namespace",
    ],
)
def test_a_pod_uses_only_the_pools_it_may(pod: PodInfo, feasible: set[str], reasons: dict[str, str]) -> None:
    env = Env(CHOICE_POOLS)
    state = env.pre_filter(pod)
    got = {n: env.plugin.filter(state, pod, env.node(n)) for n in NODES}
    assert {n for n, st in got.items() if st.is_success()} == feasible
    assert {n: st.reasons[0] for n, st in got.items() if not st.is_success()} == reasons
    assert all(st.plugin == NAME for st in got.values() if not st.is_success())


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ("a, nope, gone", "NodeIPPool(s) nope, gone named by ipscheduler.io/pools do not exist"),
        (
            "a,,b",
            "annotation ipscheduler.io/pools='a,,b': '' is not a NodeIPPool name "
            "(a comma-separated list of pool names)",
        ),
        (
            "A_b",
            "annotation ipscheduler.io/pools='A_b': 'A_b' is not a NodeIPPool name "
            "(a comma-separated list of pool names)",
        ),
    ],
    ids=["unknown-pools", "empty-entry", "not-a-name"],
)
def test_a_bad_pool_list_is_a_clear_reason_not_a_silent_no_fit(annotation: str, message: str) -> None:
    env = Env(CHOICE_POOLS)
    st = env.plugin.pre_filter(CycleState(), chooser(pools=annotation), env.cache.node_cache.nodes())
    assert (st.code, st.reasons, st.plugin) == (Code.UNSCHEDULABLE, (message,), NAME)


def test_the_score_prefers_the_pools_in_the_pods_order_whatever_they_have_free() -> None:
    env = Env(CHOICE_POOLS)
    pod = chooser(pools="b,a")  # b has 2 free, a has 4
    state = env.pre_filter(pod)
    scores = {n: env.plugin.score(state, pod, env.node(n)) for n in ("node-a", "node-b")}
    env.plugin.normalize_score(state, pod, scores)
    assert scores["node-b"] > scores["node-a"]
    plain = chooser()
    state = env.pre_filter(plain)
    scores = {n: env.plugin.score(state, plain, env.node(n)) for n in ("node-a", "node-b")}
    env.plugin.normalize_score(state, plain, scores)
    assert scores["node-a"] > scores["node-b"], "without a list: most free first (spread)"


async def test_reserve_takes_the_preferred_pool_on_a_node_with_several() -> None:
    env = Env(
        [
            pool("big", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
            pool("small", "node-a", addresses=["10.0.2.1-10.0.2.2"]),
            pool("team", "node-a", addresses=["10.0.3.1-10.0.3.20"], namespaces=["team-x"]),
        ]
    )
    pod = chooser(pools="small,big")
    state = env.pre_filter(pod)
    assert (await env.reserve(state, pod, env.node("node-a"))).is_success()
    assert allocated_ip(state) == "10.0.2.1"
    other = chooser(uid="uid-2")
    state = env.pre_filter(other)
    assert (await env.reserve(state, other, env.node("node-a"))).is_success()
    assert allocated_ip(state) == "10.0.1.1", "most free among the pools it may use (not team's)"


# --------------------------------------------------------------------------- retained addresses

STS = OwnerRef("StatefulSet", "web", "uid-sts")


def web0(uid: str, creation: datetime.datetime | None = None, **annotations: str) -> PodInfo:
    """Pod web-0 of StatefulSet web, as its controller makes it."""
    return PodInfo(
        uid=uid,
        namespace="ns",
        name="web-0",
        owner=STS,
        generate_name="web-",
        labels={"apps.kubernetes.io/pod-index": "0"},
        annotations=annotations,
        creation=creation or datetime.datetime.now(datetime.UTC),
    )


def kept(ip: str, since: str = SINCE, **fields: str) -> dict[str, Any]:
    """A wire-form Retained allocation of identity ns/web-0 of StatefulSet uid-sts."""
    body = builders.alloc(ip, pod="ns/web-0", phase="Bound", since=since)
    return {
        **body,
        "phase": "Retained",
        "releasePolicy": "StatefulSet",
        "identity": "ns/web-0",
        "ownerUID": "uid-sts",
        "retainedSince": since,
        **fields,
    }


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def emit(self, obj: dict[str, str], event_type: str, reason: str, message: str) -> None:
        self.seen.append((obj["name"], reason, message))


def sticky_env(allocations: dict[str, Any], **plugin: Any) -> Env:
    return Env(
        [
            pool("pa", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
            pool("pb", "node-b", addresses=["10.0.2.1-10.0.2.9"], allocations=allocations),
        ],
        **plugin,
    )


async def test_a_statefulset_pod_records_its_policy_with_its_address() -> None:
    env = sticky_env({})
    pod = web0("uid-1")
    state = env.pre_filter(pod)
    assert (await env.reserve(state, pod, env.node("node-b"))).is_success()
    got = env.cache.pool("pb")
    assert got is not None
    a = got.allocations["uid-1"]
    assert (a.release_policy, a.identity, a.owner_uid) == ("StatefulSet", "ns/web-0", "uid-sts")


async def test_the_next_pod_of_the_identity_goes_back_to_its_address_and_node() -> None:
    env = sticky_env({"uid-old": kept("10.0.2.5")})
    pod = web0("uid-new")
    state = env.pre_filter(pod)
    verdicts = {n: env.plugin.filter(state, pod, env.node(n)) for n in NODES}
    assert {n: st.reasons for n, st in verdicts.items() if not st.is_success()} == {
        "node-a": ("node(s) didn't hold the pod's retained address",),
        "node-c": ("node(s) didn't hold the pod's retained address",),
    }
    assert (await env.reserve(state, pod, env.node("node-b"))).is_success()
    assert allocated_ip(state) == "10.0.2.5"
    assert env.allocations("pb") == {"uid-new": ("10.0.2.5", "Reserved")}
    await env.plugin.unreserve(state, pod, env.node("node-b"))  # the binding failed
    assert env.allocations("pb") == {"uid-new": ("10.0.2.5", "Retained")}, "kept for the identity"
    again = env.pre_filter(pod)
    assert not env.plugin.filter(again, pod, env.node("node-a")).is_success(), "still held to node-b"
    assert (await env.reserve(again, pod, env.node("node-b"))).is_success()
    assert allocated_ip(again) == "10.0.2.5"


@pytest.mark.parametrize(
    "phase",
    ["Reserved", "Bound"],
    ids=["another-replicas-cycle-took-it-back", "bound-informer-lags"],
)
def test_a_pod_whose_identitys_address_is_recorded_for_it_waits_instead_of_taking_a_second(
    phase: str,
) -> None:
    """Two active replicas race for one pod: one took the identity's address back for it
    (re-keyed to the pod's UID). The other must not give the same pod a second address in
    another pool: it waits for that cycle's bind or Unreserve."""
    taken = {**kept("10.0.2.5"), "phase": phase, "reservedBy": "other-replica/cycle-1"}
    env = sticky_env({"uid-new": taken})
    st = env.plugin.pre_filter(CycleState(), web0("uid-new"), env.cache.node_cache.nodes())
    assert (st.code, st.reasons) == (
        Code.UNSCHEDULABLE,
        ("the pod's retained address is still recorded for its previous pod",),
    )


async def test_a_recreated_statefulset_does_not_inherit_the_address() -> None:
    env = sticky_env({"uid-old": kept("10.0.2.5", ownerUID="uid-old-sts")})
    pod = web0("uid-new")
    state = env.pre_filter(pod)
    assert env.plugin.filter(state, pod, env.node("node-a")).is_success()
    assert (await env.reserve(state, pod, env.node("node-b"))).is_success()
    assert allocated_ip(state) == "10.0.2.1"


async def test_after_its_retain_timeout_the_pod_is_placed_anew_and_says_so() -> None:
    events = Events()
    env = sticky_env({"uid-old": kept("10.0.2.5")}, recorder=events)
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=31)
    pod = web0("uid-new", created, **{"ipscheduler.io/retain-timeout": "30s"})
    state = env.pre_filter(pod)
    assert env.plugin.filter(state, pod, env.node("node-a")).is_success(), "no longer held to node-b"
    assert (await env.reserve(state, pod, env.node("node-a"))).is_success()
    assert allocated_ip(state) == "10.0.1.1"
    assert env.allocations("pb") == {}, "the old address went back to its pool"
    assert events.seen == [
        (
            "web-0",
            "AddressRehomed",
            "retained address 10.0.2.5 of NodeIPPool pb released: its node could not take the pod "
            "for 30s; the pod now has 10.0.1.1 of pa on node-a",
        )
    ]


@pytest.mark.parametrize("informer_lags", [False, True], ids=["previous-pod-gone-here", "informer-lags"])
def test_an_address_still_recorded_for_the_previous_pod_holds_the_new_one_back(informer_lags: bool) -> None:
    """The old pod is gone; its release is on its way. Even while this replica's bound-pods
    informer still shows it (a new pod of its name exists only once it is gone from the API
    server), the new pod waits instead of taking a second address (issue 38)."""
    bound = {**builders.alloc("10.0.2.5", pod="ns/web-0", phase="Bound")}
    bound.update(releasePolicy="StatefulSet", identity="ns/web-0", ownerUID="uid-sts")
    env = sticky_env({"uid-old": bound})
    if informer_lags:
        old = dataclasses.replace(web0("uid-old"), node_name="node-b", phase="Running")
        env.cache.node_cache.add_pod(old)
    st = env.plugin.pre_filter(CycleState(), web0("uid-new"), env.cache.node_cache.nodes())
    assert (st.code, st.reasons) == (
        Code.UNSCHEDULABLE,
        ("the pod's retained address is still recorded for its previous pod",),
    )


def test_an_address_releasing_for_the_force_deleted_previous_pod_holds_the_new_one_back() -> None:
    """The previous pod of the identity was force-deleted: its address is Releasing until its
    node let it go. The new pod neither takes it back yet nor gets a second one; explain says
    why (sticky.kept_address)."""
    releasing = {**kept("10.0.2.5"), "phase": "Releasing", "releasingSince": SINCE}
    del releasing["retainedSince"]
    env = sticky_env({"uid-old": releasing})
    pod = web0("uid-new")
    st = env.plugin.pre_filter(CycleState(), pod, env.cache.node_cache.nodes())
    assert (st.code, st.reasons) == (
        Code.UNSCHEDULABLE,
        ("the pod's retained address is still recorded for its previous pod",),
    )
    found = kept_address(env.cache, pod, retention_of(pod), datetime.datetime.now(datetime.UTC))
    assert found is not None and found.kind == "waiting"
    assert found.describe() == (
        "address 10.0.2.5 of pool pb is Releasing: the previous pod ns/web-0 was removed before node-b "
        "confirmed its teardown; the pod waits until it is retained"
    )


async def test_a_pod_held_to_its_retained_address_is_retried_at_its_retain_timeout() -> None:
    activated: list[set[str]] = []
    env = sticky_env({"uid-old": kept("10.0.2.5")}, activate=activated.append)
    pod = web0("uid-new", **{"ipscheduler.io/retain-timeout": "200ms"})
    env.pre_filter(pod)
    env.pre_filter(pod)  # a second attempt meanwhile: one timer per pod
    assert activated == []
    await asyncio.sleep(0.5)
    assert activated == [{"uid-new"}], "the pod itself is activated, and no other"
    state = env.pre_filter(pod)  # past its timeout now: free to go anywhere
    assert env.plugin.filter(state, pod, env.node("node-a")).is_success()


def test_a_release_policy_that_cannot_be_honoured_is_said_once() -> None:
    events = Events()
    env = sticky_env({}, recorder=events)
    pod = PodInfo(
        uid="uid-gen",
        namespace="ns",
        name="web-7d9f-x2x",
        generate_name="web-7d9f-",
        annotations={"ipscheduler.io/release-policy": "Never"},
    )
    env.pre_filter(pod)
    env.pre_filter(pod)
    assert events.seen == [
        (
            "web-7d9f-x2x",
            "ReleasePolicyRefused",
            "ipscheduler.io/release-policy=Never needs a stable pod name, and this one was generated "
            "from 'web-7d9f-'; using Pod",
        )
    ]
