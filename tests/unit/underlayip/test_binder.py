"""underlayip/binder: PoolBinder alone, over a real PoolCache and an in-memory API server.

Each answer of the address binder as a plain value: ``find``'s needs (free counts and
ranks by node, the kept address, the Problem that leaves no node), ``fit``'s verdict by
node, ``room``, what evicting a pod frees (``frees``, ``fits_after_evicting``, the what-if
counts), the nominated place, the ``candidates`` order, ``assume`` and ``commit`` (the pool
and address chosen, the allocation written and its network, coalesced writes, stale
caches, another cycle's or replica's reservation, abandoned ones), ``revert`` and the
deferred Bound mark, and the addresses a pod's identity keeps. The Statuses, messages and
annotations the plugin makes of them are tested over a fake binder (test_plugin).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.types import NodeInfo, OwnerRef, PodInfo
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.binder import Committed, Fit, PodAddresses, PoolBinder, Problem, Refusal
from ipscheduler.underlayip.interfaces import NetworkPools
from ipscheduler.underlayip.models import ANNOTATION_POOL, NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView
from ipscheduler.underlayip.selection import NamespaceDefaults
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
    """A PoolBinder over an in-memory API server. ``live_reads``: revert reads pods from it;
    ``binder``: more of PoolBinder's keyword arguments (``takeover_before``, ...)."""

    def __init__(
        self,
        pools: list[dict[str, Any]],
        nodes: tuple[str, ...] = NODES,
        live_reads: bool = False,
        **binder: Any,
    ):
        node_index = {n: [NodeInfo(name=n, ready=True)] for n in nodes}
        pool_index = {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in pools}
        self.cache = pool_cache(node_index, pool_index)
        self.api = FakePoolApi(pools)
        self.writer = PoolWriter(self.api, self.cache)  # type: ignore[arg-type]
        api = self.api if live_reads else None
        self.binder = PoolBinder(self.cache, self.writer, api=api, **binder)  # type: ignore[arg-type]

    async def place(
        self, needs: PodAddresses, pod: PodInfo, node: str = "node-a"
    ) -> Committed | Refusal | None:
        """Assume, then commit (which waits for the assumed write): Reserve, then PreBind."""
        refusal = self.binder.assume(needs, pod, node)
        return refusal if refusal is not None else await self.binder.commit(needs, pod, node)

    def allocations(self, name: str) -> dict[str, tuple[str | None, str]]:
        p = self.cache.pool(name)
        assert p is not None
        return {uid: (a.ip, a.phase) for uid, a in p.allocations.items()}

    def phases(self, uid: str) -> dict[str, str]:
        """Pool name → the phase of pod ``uid``'s allocation there, in every pool holding one."""
        return {p.name: p.allocations[uid].phase for p in self.cache.pools_holding(uid)}


def address(done: Committed | Refusal | None) -> tuple[str, str | None]:
    """The pool and address a commit allocated (None: a count-only slot); fails otherwise."""
    assert isinstance(done, Committed), done
    return done.pool, done.ip


POD = PodInfo(uid="uid-me", namespace="ns", name="me")
OTHER = PodInfo(uid="uid-other", namespace="ns", name="other")


def by_node(free: dict[str, int]) -> dict[str, int]:
    """Free counts by node name for every node (0 where ``free`` has none)."""
    return {n: free.get(n, 0) for n in NODES}


def chooser(namespace: str = "ns", pools: str | None = None, uid: str = "uid-me") -> PodInfo:
    annotations = {"ipscheduler.io/pools": pools} if pools is not None else {}
    return PodInfo(uid=uid, namespace=namespace, name="me", annotations=annotations)


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


def created_now(pod: PodInfo) -> PodInfo:
    """``pod`` created as the test runs: a parameter's pod was made at collection, maybe
    minutes before (past a retain-timeout when the whole suite runs first)."""
    return dataclasses.replace(pod, creation=datetime.datetime.now(datetime.UTC))


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


# --------------------------------------------------------------------------- find / fit

FULL = {"x": alloc("10.0.0.1"), "y": alloc("10.0.0.2")}

FIT_CASES = [
    # (pools, node, expected fit)
    ([], "node-a", Fit.NO_POOL),
    ([pool("p", node="node-b", addresses=["10.0.0.1"])], "node-a", Fit.NO_POOL),
    ([pool("p", addresses=["10.0.0.1-10.0.0.2"])], "node-a", Fit.FITS),
    ([pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL)], "node-a", Fit.NO_FREE),
    ([pool("p", addresses=["10.0.0.300"])], "node-a", Fit.NO_FREE),
    ([pool("p", addresses=["10.0.0.1"], deleting=True)], "node-a", Fit.NO_FREE),
    ([pool("p", addresses=["10.0.0.1-10.0.0.4"], capacity=0)], "node-a", Fit.NO_FREE),
    (
        [
            pool(
                "p",
                addresses=["10.0.0.1-10.0.0.2"],
                allocations={"x": alloc("10.0.0.1"), "uid-me": alloc("10.0.0.2")},
            )
        ],
        "node-a",
        Fit.FITS,
    ),
    ([pool("p", capacity=2, allocations={"x": alloc(None)})], "node-a", Fit.FITS),
    ([pool("p", capacity=1, allocations={"x": alloc(None)})], "node-a", Fit.NO_FREE),
    ([pool("p")], "node-a", Fit.NO_FREE),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.1.1"], allocations={"z": alloc("10.0.1.1")}),
        ],
        "node-a",
        Fit.NO_FREE,
    ),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.1.1"]),
        ],
        "node-a",
        Fit.FITS,
    ),
    (
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.4"]),
            pool("p2", node="node-b", addresses=["10.0.0.1-10.0.0.4"]),
        ],
        "node-a",
        Fit.NO_FREE,
    ),
]


@pytest.mark.parametrize(
    ("pools", "node", "fit"),
    FIT_CASES,
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
def test_fit(pools: list[dict[str, Any]], node: str, fit: Fit) -> None:
    env = Env(pools)
    assert env.binder.fit(env.binder.find(POD), POD, node) is fit


CHOICE_POOLS = [
    pool("a", "node-a", addresses=["10.0.1.1-10.0.1.4"]),
    pool("b", "node-b", addresses=["10.0.2.1-10.0.2.2"]),
    pool("team", "node-c", addresses=["10.0.3.1-10.0.3.8"], namespaces=["team-x"]),
]

OWN = [pool("p", addresses=["10.0.0.1-10.0.0.3"], allocations={"uid-me": alloc("10.0.0.1")})]


@pytest.mark.parametrize(
    ("pools", "pod", "free", "ranks"),
    [
        pytest.param(
            [
                pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"x": alloc("10.0.0.1")}),
                pool("p2", addresses=["10.0.1.1-10.0.1.2"]),
                pool("p3", capacity=5, allocations={"y": alloc(None), "z": alloc(None)}),
                pool("p4", addresses=["10.0.2.1"], deleting=True),
                pool("p5", node="node-b", addresses=["10.0.3.1"]),
            ],
            POD,
            {"node-a": 3 + 2 + 3, "node-b": 1},
            {},
            id="several-pools-on-one-node-add-up",
        ),
        pytest.param(
            [
                pool("pa", node="node-a", addresses=["10.0.0.1-10.0.0.8"]),
                pool("pb", node="node-b", addresses=["10.0.1.1-10.0.1.4"], allocations=FULL),
                pool("pc", node="node-c", capacity=4),
            ],
            POD,
            {"node-a": 8, "node-b": 2, "node-c": 4},
            {},
            id="one-pool-a-node",
        ),
        pytest.param(OWN, POD, {"node-a": 3}, {}, id="the-pods-own-allocation-counts-as-free"),
        pytest.param(OWN, OTHER, {"node-a": 2}, {}, id="anothers-allocation-does-not"),
        pytest.param(
            CHOICE_POOLS, chooser(), {"node-a": 4, "node-b": 2, "node-c": 0}, {}, id="namespace-reserved-pool"
        ),
        pytest.param(
            CHOICE_POOLS,
            chooser("team-x"),
            {"node-a": 4, "node-b": 2, "node-c": 8},
            {},
            id="its-namespace-may",
        ),
        pytest.param(
            CHOICE_POOLS,
            chooser(pools="b,a"),
            {"node-a": 4, "node-b": 2},
            {"node-b": 0, "node-a": 1},
            id="named-pools-ranked-in-the-pods-order",
        ),
    ],
)
def test_find_counts_what_each_node_offers(
    pools: list[dict[str, Any]], pod: PodInfo, free: dict[str, int], ranks: dict[str, int]
) -> None:
    needs = Env(pools).binder.find(pod)
    assert needs.problem is None
    assert (by_node(needs.free), needs.ranks) == (by_node(free), ranks)


@pytest.mark.parametrize(
    ("pod", "fits"),
    [
        (chooser(), {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.NO_USABLE_POOL}),
        (chooser("team-x"), {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS}),
        (
            chooser(pools="b"),
            {"node-a": Fit.NO_USABLE_POOL, "node-b": Fit.FITS, "node-c": Fit.NO_USABLE_POOL},
        ),
        (
            chooser("team-x", pools="team, a"),
            {"node-a": Fit.FITS, "node-b": Fit.NO_USABLE_POOL, "node-c": Fit.FITS},
        ),
        (chooser(pools="team"), dict.fromkeys(NODES, Fit.NO_USABLE_POOL)),
    ],
    ids=[
        "namespace-reserved-pool-left-out",
        "its-namespace-may",
        "named-pool",
        "named-pools-in-its-namespace",
        "named-pool-of-another-namespace",
    ],
)
def test_a_pod_uses_only_the_pools_it_may(pod: PodInfo, fits: dict[str, Fit]) -> None:
    env = Env(CHOICE_POOLS)
    needs = env.binder.find(pod)
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == fits


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        ("a, nope, gone", Problem("unknown-pools", pools=("nope", "gone"))),
        (
            "a,,b",
            Problem(
                "pool-list",
                "annotation ipscheduler.io/pools='a,,b': '' is not a NodeIPPool name "
                "(a comma-separated list of pool names)",
            ),
        ),
        (
            "A_b",
            Problem(
                "pool-list",
                "annotation ipscheduler.io/pools='A_b': 'A_b' is not a NodeIPPool name "
                "(a comma-separated list of pool names)",
            ),
        ),
    ],
    ids=["unknown-pools", "empty-entry", "not-a-name"],
)
def test_a_bad_pool_list_is_a_problem_not_a_silent_no_fit(annotation: str, problem: Problem) -> None:
    needs = Env(CHOICE_POOLS).binder.find(chooser(pools=annotation))
    assert needs.problem == problem
    assert needs.free == {}


# --------------------------------------------------------------------------- room / candidates

CANDIDATE_POOLS = [
    pool("big", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
    pool("mid-b", "node-a", addresses=["10.0.2.1-10.0.2.4"]),
    pool("mid-a", "node-a", addresses=["10.0.3.1-10.0.3.4"]),
    pool("small", "node-a", addresses=["10.0.4.1-10.0.4.2"], allocations={"uid-holder": alloc("10.0.4.1")}),
    pool("team", "node-a", addresses=["10.0.5.1-10.0.5.20"], namespaces=["team-x"]),
    pool("far", "node-b", addresses=["10.0.6.1-10.0.6.20"]),
    pool("kept", "node-b", addresses=["10.0.7.1-10.0.7.4"], allocations={"uid-old": kept("10.0.7.2")}),
]
"""node-a: big 9 free, mid-a and mid-b 4 each, small 1 (the other held by uid-holder), team 20
(namespace team-x only); node-b: far 20, kept 3 (one Retained for ns/web-0); node-c: none."""


@pytest.mark.parametrize(
    ("pod", "nodes", "room"),
    [
        pytest.param(chooser(), NODES, 9 + 4 + 4 + 1 + 20 + 3, id="every-node"),
        pytest.param(chooser(), ("node-a",), 9 + 4 + 4 + 1, id="one-node"),
        pytest.param(chooser("team-x"), ("node-a",), 9 + 4 + 4 + 1 + 20, id="its-namespaces-pool-counts"),
        pytest.param(chooser(pools="small,far"), NODES, 1 + 20, id="named-pools-only"),
        pytest.param(chooser(), ("node-c",), 0, id="no-pool-on-the-nodes"),
        pytest.param(chooser(pools="nope"), NODES, 0, id="unknown-pool"),
        pytest.param(chooser(pools="a,,b"), NODES, 0, id="malformed-pool-list"),
        pytest.param(web0("uid-new"), NODES, 1, id="held-to-its-retained-address"),
    ],
)
def test_room(pod: PodInfo, nodes: tuple[str, ...], room: int) -> None:
    pod = created_now(pod)
    env = Env(CANDIDATE_POOLS)
    assert env.binder.room(pod, nodes) == room


@pytest.mark.parametrize(
    ("pod", "node", "skip", "order"),
    [
        pytest.param(
            chooser(), "node-a", "", ["big", "mid-a", "mid-b", "small"], id="most-available-then-name"
        ),
        pytest.param(
            chooser(uid="uid-holder"),
            "node-a",
            "",
            ["small", "big", "mid-a", "mid-b"],
            id="the-pool-holding-the-pod-first",
        ),
        pytest.param(
            chooser(pools="small,mid-b,big"),
            "node-a",
            "",
            ["small", "mid-b", "big"],
            id="the-pods-preference",
        ),
        pytest.param(
            chooser("team-x"),
            "node-a",
            "",
            ["team", "big", "mid-a", "mid-b", "small"],
            id="its-namespaces-pool",
        ),
        pytest.param(chooser(), "node-a", "big", ["mid-a", "mid-b", "small"], id="skip-the-pool-tried"),
        pytest.param(chooser(), "node-b", "", ["far", "kept"], id="only-the-nodes-pools"),
        pytest.param(chooser(), "node-c", "", [], id="no-pool"),
        pytest.param(web0("uid-new"), "node-b", "", ["kept"], id="held-to-its-retained-address"),
        pytest.param(web0("uid-new"), "node-a", "", [], id="held-to-another-node"),
        pytest.param(web0("uid-new"), "node-b", "kept", [], id="held-and-tried"),
    ],
)
def test_candidates_order(pod: PodInfo, node: str, skip: str, order: list[str]) -> None:
    pod = created_now(pod)
    env = Env(CANDIDATE_POOLS)
    needs = env.binder.find(pod)
    assert [p.name for p in env.binder.candidates(pod, node, needs, skip=skip)] == order


# --------------------------------------------------------------------------- eviction


def victim(ip: str | None, **fields: Any) -> dict[str, Any]:
    """A wire-form allocation of pod ns/victim, Bound unless told."""
    return {**alloc(ip, pod="ns/victim"), **fields}


STICKY = {"releasePolicy": "StatefulSet", "identity": "ns/db-0", "ownerUID": "uid-db"}
"""What makes an allocation sticky: kept (Retained) for its identity when its pod goes."""


def full_with(v: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    """node-a's pool p, full: another pod at 10.0.0.1 and ``v``, the victim's allocation."""
    return [pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations={"x": alloc("10.0.0.1"), "v": v}, **kw)]


def beside(name: str, node: str = "node-a", **kw: Any) -> list[dict[str, Any]]:
    """node-a's pool p, full, and the victim at 10.0.1.1 of pool ``name`` on ``node``."""
    theirs = pool(name, node, addresses=["10.0.1.1"], allocations={"v": victim("10.0.1.1")}, **kw)
    return [pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL), theirs]


@pytest.mark.parametrize(
    ("pools", "pod", "frees"),
    [
        pytest.param(full_with(victim("10.0.0.2")), POD, True, id="pod-policy-victim"),
        pytest.param(
            [pool("p", capacity=2, allocations={"x": alloc(None), "v": victim(None)})],
            POD,
            True,
            id="count-only-slot",
        ),
        pytest.param(full_with(victim("10.0.0.2", **STICKY)), POD, False, id="sticky-statefulset-victim"),
        pytest.param(full_with(victim(None, phase="Nominated")), POD, False, id="nominated-place"),
        pytest.param(full_with(victim("10.0.9.9")), POD, False, id="foreign-hold"),
        pytest.param(full_with(victim("10.0.0.2"), deleting=True), POD, False, id="pool-being-deleted"),
        pytest.param(beside("q", "node-b"), POD, False, id="victim-on-another-node"),
        pytest.param(beside("team", namespaces=["team-x"]), POD, False, id="pool-of-another-namespace"),
        pytest.param(beside("q"), chooser(pools="p"), False, id="pool-not-in-the-pods-list"),
        pytest.param(beside("q"), POD, True, id="another-pool-of-the-node"),
    ],
)
def test_what_evicting_a_victim_frees(pools: list[dict[str, Any]], pod: PodInfo, frees: bool) -> None:
    """node-a is full for the pod: it fits once pod ``v`` is evicted exactly when that frees a
    place it may use there."""
    env = Env(pools)
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-a") is Fit.NO_FREE
    assert env.binder.frees(needs.choice, pod, "v", "node-a") is frees
    assert env.binder.fits_after_evicting(needs, pod, "node-a", frozenset({"v"})) is frees


PREEMPT_POOLS = [
    pool(
        "pa",
        "node-a",
        addresses=["10.0.0.1-10.0.0.2"],
        allocations={"v": victim("10.0.0.1"), "s": victim("10.0.0.2", **STICKY)},
    ),
    pool("pb", "node-b", addresses=["10.0.2.1-10.0.2.9"], allocations={"uid-old": kept("10.0.2.5")}),
]
"""node-a full: ``v`` (policy Pod) and ``s`` (sticky); node-b: 8 free and ns/web-0's Retained
address; node-c: no pool."""


@pytest.mark.parametrize(
    ("pod", "node", "victims", "fits"),
    [
        pytest.param(POD, "node-b", set(), True, id="fits-already"),
        pytest.param(POD, "node-a", {"v"}, True, id="a-victim-frees-a-place"),
        pytest.param(POD, "node-a", {"s", "v"}, True, id="one-of-two-victims-frees"),
        pytest.param(POD, "node-a", {"s"}, False, id="a-sticky-victim-alone"),
        pytest.param(POD, "node-a", set(), False, id="no-victims"),
        pytest.param(POD, "node-c", {"v"}, False, id="no-pool-on-the-node"),
        pytest.param(web0("uid-new"), "node-a", {"v"}, False, id="held-to-its-retained-address-elsewhere"),
        pytest.param(web0("uid-new"), "node-b", set(), True, id="held-to-this-node"),
    ],
)
def test_fits_after_evicting(pod: PodInfo, node: str, victims: set[str], fits: bool) -> None:
    pod = created_now(pod)
    env = Env(PREEMPT_POOLS)
    needs = env.binder.find(pod)
    assert env.binder.fits_after_evicting(needs, pod, node, frozenset(victims)) is fits


@pytest.mark.parametrize(
    ("steps", "free"),
    [
        pytest.param([("evict", "v", "node-a")], {"node-a": 1, "node-b": 8}, id="evict-a-pod-policy-victim"),
        pytest.param([("evict", "s", "node-a")], {"node-b": 8}, id="evict-a-sticky-victim"),
        pytest.param([("evict", "v", "node-b")], {"node-b": 8}, id="evict-from-another-node"),
        pytest.param(
            [("evict", "v", "node-a"), ("evict", "s", "node-a"), ("add", "v", "node-a")],
            {"node-a": 0, "node-b": 8},
            id="the-victim-given-back-retakes-its-place",
        ),
        pytest.param([("add", "s", "node-a")], {"node-b": 8}, id="a-sticky-pod-added"),
        pytest.param([("add", "pending", "node-b")], {"node-b": 7}, id="a-nominated-pod-takes-one"),
    ],
)
def test_what_if_counts(steps: list[tuple[str, str, str]], free: dict[str, int]) -> None:
    """Preemption's dry run evicts (count_eviction) and adds (count_addition) pods on a node."""
    env = Env(PREEMPT_POOLS)
    needs = env.binder.find(POD)
    assert by_node(needs.free) == {"node-a": 0, "node-b": 8, "node-c": 0}
    for op, uid, node in steps:
        if op == "evict":
            env.binder.count_eviction(needs, POD, uid, node)
        else:
            env.binder.count_addition(needs, POD, chooser(uid=uid), node)
    assert by_node(needs.free) == by_node(free)


def nominate_pools(mine: dict[str, str]) -> list[dict[str, Any]]:
    """pa on node-a, full (``v`` of policy Pod, ``s`` sticky), and pc on node-c; ``mine``: the
    phase of POD's allocation by pool (a Nominated one has no address)."""

    def own(name: str, ip: str) -> dict[str, Any]:
        phase = mine.get(name)
        if phase is None:
            return {}
        return {POD.uid: alloc(None if phase == "Nominated" else ip, pod=POD.key, phase=phase)}

    return [
        pool(
            "pa",
            "node-a",
            addresses=["10.0.0.1-10.0.0.2"],
            allocations={"v": victim("10.0.0.1"), "s": victim("10.0.0.2", **STICKY)} | own("pa", "10.0.0.9"),
        ),
        pool("pc", "node-c", addresses=["10.0.3.1-10.0.3.4"], allocations=own("pc", "10.0.3.1")),
    ]


@pytest.mark.parametrize(
    ("mine", "node", "victims", "held", "phases", "puts"),
    [
        pytest.param({}, "node-a", {"v"}, "pa", {"pa": "Nominated"}, ["pa"], id="in-the-victims-pool"),
        pytest.param({}, "node-a", {"s"}, None, {}, [], id="a-sticky-victim-frees-none"),
        pytest.param({}, "node-c", {"v"}, None, {}, [], id="a-victim-on-another-node-frees-none"),
        pytest.param(
            {"pc": "Nominated"},
            "node-a",
            {"v"},
            "pa",
            {"pa": "Nominated"},
            ["pc", "pa"],
            id="drops-its-place-on-another-node",
        ),
        pytest.param({"pc": "Nominated"}, "", {"v"}, None, {}, ["pc"], id="nominated-to-no-node"),
        pytest.param(
            {"pc": "Reserved"},
            "node-a",
            {"v"},
            "pa",
            {"pa": "Nominated", "pc": "Reserved"},
            ["pa"],
            id="a-reservation-elsewhere-stays",
        ),
        pytest.param(
            {"pc": "Reserved"},
            "node-c",
            {"v"},
            "pc",
            {"pc": "Reserved"},
            [],
            id="holds-one-on-the-node-already",
        ),
    ],
)
async def test_nominate(
    mine: dict[str, str],
    node: str,
    victims: set[str],
    held: str | None,
    phases: dict[str, str],
    puts: list[str],
) -> None:
    env = Env(nominate_pools(mine))
    assert await env.binder.nominate(POD, node, frozenset(victims)) == held
    assert env.phases(POD.uid) == phases
    assert env.api.puts == puts


@pytest.mark.parametrize(
    ("mine", "deferred"),
    [
        pytest.param({"pc": "Nominated"}, set(), id="the-nominated-place-becomes-the-reservation"),
        pytest.param({"pa": "Nominated"}, {"pa"}, id="one-elsewhere-goes-with-its-pools-next-write"),
    ],
)
async def test_commit_leaves_the_pod_no_nominated_place(mine: dict[str, str], deferred: set[str]) -> None:
    env = Env(nominate_pools(mine))
    assert address(await env.place(env.binder.find(POD), POD, "node-c")) == ("pc", "10.0.3.1")
    assert env.writer.deferred_pools() == deferred
    assert env.phases(POD.uid) == {**mine, "pc": "Reserved"}
    await env.writer.flush()
    assert env.phases(POD.uid) == {"pc": "Reserved"}


# --------------------------------------------------------------------------- assume / commit


async def test_commit_takes_lowest_free_address_of_pool_with_most_free() -> None:
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
    done = await env.place(env.binder.find(POD), POD)
    assert address(done) == ("p2", "10.0.1.2")
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
async def test_commit_choice(pools: list[dict[str, Any]], expected: tuple[str, str | None]) -> None:
    env = Env(pools)
    assert address(await env.place(env.binder.find(POD), POD)) == expected
    name, ip = expected
    assert env.allocations(name)["uid-me"] == (ip, "Reserved")
    assert [p.name for p in env.cache.pools_holding(POD.uid)] == [name]


async def test_assume_refuses_when_every_pool_is_full() -> None:
    env = Env(
        [
            pool("p1", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL),
            pool("p2", addresses=["10.0.0.300"]),
            pool("p3", node="node-b", addresses=["10.0.1.1"]),
        ]
    )
    needs = env.binder.find(POD)
    assert env.binder.assume(needs, POD, "node-a") == Refusal("no-free")
    assert await env.binder.commit(needs, POD, "node-a") is None  # nothing was assumed
    assert env.api.puts == []
    assert env.cache.pools_holding(POD.uid) == []


def filled_by_another_replica(api: FakePoolApi) -> None:
    api.racing_write("p1", {f"o{i}": alloc(f"10.0.0.{i}") for i in (1, 2, 3)})


def moved_to_node_b(api: FakePoolApi) -> None:
    body = api.bodies["p1"]
    body["spec"]["nodeName"] = "node-b"
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)


@pytest.mark.parametrize(
    ("race", "free"),
    [
        pytest.param(filled_by_another_replica, {"node-a": 1}, id="pool-filled-by-another-replica"),
        pytest.param(moved_to_node_b, {"node-a": 1, "node-b": 3}, id="pool-moved-to-another-node"),
    ],
)
async def test_commit_with_stale_cache_moves_on_to_next_pool(
    race: Callable[[FakePoolApi], None], free: dict[str, int]
) -> None:
    """The cache said p1 (node-a) had room, but by the time of the write it had none for
    node-a: the write conflicts, re-reads p1, and the node's next pool is tried."""
    env = Env([pool("p1", addresses=["10.0.0.1-10.0.0.3"]), pool("p2", addresses=["10.0.1.1-10.0.1.2"])])
    needs = env.binder.find(POD)
    race(env.api)
    assert address(await env.place(needs, POD)) == ("p2", "10.0.1.1")
    assert "uid-me" not in env.allocations("p1")
    assert env.writer.conflicts == 1
    assert by_node(env.binder.find(OTHER).free) == by_node(free)  # the conflict re-read p1


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
    this cycle is refused (retried after backoff) and writes nothing, nor does its revert."""
    allocation = held("10.0.0.3", phase=phase, since=_ago(seconds_ago), by=by)  # stamped at run time
    env = Env([pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"uid-me": allocation})])
    needs = env.binder.find(POD)
    refusal = env.binder.assume(needs, POD, "node-a")
    assert refusal is not None and refusal.reason == "reserved-elsewhere"
    assert fragment in refusal.detail
    await env.binder.revert(needs, POD, "node-a")
    assert env.api.puts == []
    assert env.allocations("p1") == {"uid-me": ("10.0.0.3", phase)}


async def test_an_abandoned_reservation_is_taken_over_with_its_address() -> None:
    """Reserved longer than reserved_ttl by a cycle that never bound nor released it."""
    env = Env(
        [pool("p1", addresses=["10.0.0.1-10.0.0.4"], allocations={"uid-me": held("10.0.0.3", by="dead/1")})]
    )
    assert address(await env.place(env.binder.find(POD), POD)) == ("p1", "10.0.0.3")
    mine = env.cache.pool("p1").allocations["uid-me"]  # type: ignore[union-attr]
    assert mine.reserved_by is not None and mine.reserved_by.startswith(env.binder.identity + "/")
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
    cycle reserves on node-a: the pod holds one address, never two. Times are stamped at run
    time (``seconds_ago``: None for SINCE, long past; ``led_since_ago``: when this replica
    took the Lease, negative for the future; None: no election)."""
    since = SINCE if seconds_ago is None else _ago(seconds_ago)
    binder: dict[str, Any] = {}
    if led_since_ago is not None:
        now = datetime.datetime.now(datetime.UTC)
        binder["takeover_before"] = now - datetime.timedelta(seconds=led_since_ago)
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
        **binder,
    )
    assert address(await env.place(env.binder.find(POD), POD)) == ("p1", "10.0.0.1")
    await env.writer.flush()
    assert ("uid-me" in env.api.bodies["p2"]["status"]["allocations"]) is not released
    assert ("uid-me" in env.allocations("p2")) is not released


async def test_two_replicas_one_failing_its_bind_leave_the_winner_its_allocation() -> None:
    """Replica B's reservation lost its CAS to A's for the same pod: B must not reuse A's
    allocation, and when A's bind fails A's revert removes only its own."""
    a = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    b = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    b.api = a.api  # one API server
    b.writer.api = a.api  # type: ignore[assignment]
    needs_a, needs_b = a.binder.find(POD), b.binder.find(POD)
    assert address(await a.place(needs_a, POD)) == ("p", "10.0.0.1")  # A's write lands first
    assert b.binder.assume(needs_b, POD, "node-a") is None  # B's cache is stale
    refused = await b.binder.commit(needs_b, POD, "node-a")
    assert isinstance(refused, Refusal) and refused.reason == "failed" and refused.pool == "p"
    assert "made by " + a.binder.identity in refused.detail
    await b.binder.revert(needs_b, POD, "node-a")  # B's failure handler
    assert a.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"].startswith(a.binder.identity)
    await a.binder.revert(needs_a, POD, "node-a")  # A's bind failed (403): A releases its own
    assert "uid-me" not in a.api.bodies["p"]["status"]["allocations"]
    # B's watch delivers A's release; B's retry gets a fresh reservation of its own.
    b.cache.store_fresh(PoolView.from_obj(a.api.bodies["p"]))
    assert address(await b.place(b.binder.find(POD), POD)) == ("p", "10.0.0.1")
    assert a.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"].startswith(b.binder.identity)


async def test_a_failed_reservation_write_is_refused_and_frees_the_assumed_place() -> None:
    env = Env([pool("p", addresses=["10.0.0.1"])])
    needs = env.binder.find(POD)

    async def down(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        raise ApiException(status=503, reason="Service Unavailable")

    env.api.replace_cluster_status = down  # type: ignore[method-assign]
    assert env.binder.assume(needs, POD, "node-a") is None
    assert env.binder.room(OTHER, NODES) == 0  # assumed while the write is pending
    refused = await env.binder.commit(needs, POD, "node-a")
    assert isinstance(refused, Refusal) and (refused.reason, refused.pool) == ("failed", "p")
    assert "Service Unavailable" in refused.detail
    assert env.binder.room(OTHER, NODES) == 1
    await env.binder.revert(needs, POD, "node-a")  # nothing was written: nothing to release
    assert env.allocations("p") == {}


async def test_reservations_in_flight_are_assumed_and_coalesced_into_one_write() -> None:
    """Three pods assumed in one pool before any write lands: three addresses, one PUT; the
    fourth finds the pool full although the API server has not seen a write yet."""
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.3"])])
    pods = [PodInfo(uid=f"uid-{i}", namespace="ns", name=f"pod-{i}") for i in range(4)]
    cycles = []
    for pod in pods[:3]:
        needs = env.binder.find(pod)
        assert env.binder.assume(needs, pod, "node-a") is None
        cycles.append(needs)
    assert env.api.puts == []
    assert env.binder.room(pods[3], NODES) == 0
    last = env.binder.find(pods[3])
    assert env.binder.fit(last, pods[3], "node-a") is Fit.NO_FREE
    assert env.binder.assume(last, pods[3], "node-a") == Refusal("no-free")
    done = [await env.binder.commit(needs, pod, "node-a") for pod, needs in zip(pods, cycles, strict=False)]
    assert env.api.puts == ["p"]
    assert sorted(address(d) for d in done) == [("p", "10.0.0.1"), ("p", "10.0.0.2"), ("p", "10.0.0.3")]
    assert env.binder.room(pods[3], NODES) == 0


async def test_commit_takes_the_preferred_pool_on_a_node_with_several() -> None:
    env = Env(
        [
            pool("big", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
            pool("small", "node-a", addresses=["10.0.2.1-10.0.2.2"]),
            pool("team", "node-a", addresses=["10.0.3.1-10.0.3.20"], namespaces=["team-x"]),
        ]
    )
    pod = chooser(pools="small,big")
    assert address(await env.place(env.binder.find(pod), pod)) == ("small", "10.0.2.1")
    other = chooser(uid="uid-2")
    assert address(await env.place(env.binder.find(other), other)) == ("big", "10.0.1.1"), (
        "most free among the pools it may use (not team's)"
    )


def with_subnets(body: dict[str, Any], *subnets: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["subnets"] = list(subnets)
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            pool("p", addresses=["10.0.0.1-10.0.0.4"]),
            Committed("p", "10.0.0.1", '{"ips":[{"address":"10.0.0.1/32"}]}'),
            id="ipv4-host-route",
        ),
        pytest.param(
            pool("p", addresses=["fd00::10-fd00::20"]),
            Committed("p", "fd00::10", '{"ips":[{"address":"fd00::10/128"}]}'),
            id="ipv6",
        ),
        pytest.param(pool("slots", capacity=2), Committed("slots", None, ""), id="count-only"),
        pytest.param(
            with_subnets(
                pool("p", addresses=["10.0.1.1-10.0.1.9"]),
                {"cidr": "10.0.1.0/24", "gateway": "10.0.1.1", "routes": [{"dst": "0.0.0.0/0"}]},
            ),
            Committed(
                "p",
                "10.0.1.2",  # 10.0.1.1 is the gateway
                '{"ips":[{"address":"10.0.1.2/24","gateway":"10.0.1.1"}],'
                '"routes":[{"dst":"0.0.0.0/0","gw":"10.0.1.1"}]}',
            ),
            id="subnet-gateway-routes",
        ),
        pytest.param(
            with_subnets(
                pool("p", addresses=["fd00:1::10/126"]),
                {"cidr": "fd00:1::/64", "routes": [{"dst": "::/0", "gw": "fd00:1::1"}]},
            ),
            Committed(
                "p",
                "fd00:1::10",
                '{"ips":[{"address":"fd00:1::10/64"}],"routes":[{"dst":"::/0","gw":"fd00:1::1"}]}',
            ),
            id="ipv6-subnet-route-gw",
        ),
    ],
)
async def test_commit_returns_the_allocation_and_its_network(
    body: dict[str, Any], expected: Committed
) -> None:
    env = Env([body])
    needs = env.binder.find(POD)
    assert await env.place(needs, POD) == expected
    assert env.allocations(expected.pool) == {"uid-me": (expected.ip, "Reserved")}
    assert await env.binder.commit(needs, POD, "node-a") == expected  # a second call: the same outcome
    assert len(env.api.puts) == 1


# --------------------------------------------------------------------------- revert


async def test_revert_never_removes_a_reservation_taken_over_meanwhile() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    needs = env.binder.find(POD)
    assert address(await env.place(needs, POD)) == ("p", "10.0.0.1")
    env.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"] = "replica-b/9"
    env.api.bodies["p"]["metadata"]["resourceVersion"] = "99"
    await env.binder.revert(needs, POD, "node-a")
    assert env.api.bodies["p"]["status"]["allocations"]["uid-me"]["reservedBy"] == "replica-b/9"


async def test_revert_keeps_what_the_pod_is_bound_with_and_what_it_cannot_confirm() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])], live_reads=True)
    needs = env.binder.find(POD)
    assert address(await env.place(needs, POD)) == ("p", "10.0.0.1")
    bound = {
        "metadata": {"uid": POD.uid, "namespace": "ns", "name": "me", "annotations": {ANNOTATION_POOL: "p"}},
        "spec": {"nodeName": "node-a", "schedulerName": "ip-scheduler"},
    }
    env.api.pods[("ns", "me")] = bound  # our Binding landed although it reported an error
    await env.binder.revert(needs, POD, "node-a")
    assert "uid-me" in env.api.bodies["p"]["status"]["allocations"]

    two = PodInfo(uid="uid-2", namespace="ns", name="two")
    needs = env.binder.find(two)
    assert address(await env.place(needs, two)) == ("p", "10.0.0.2")
    env.api.pod_error = RuntimeError("connection reset")
    await env.binder.revert(needs, two, "node-a")
    assert "uid-2" in env.api.bodies["p"]["status"]["allocations"]  # unknown: the GC decides


async def test_revert_keeps_a_count_only_slot_of_a_pod_bound_without_annotations() -> None:
    env = Env([pool("slots", capacity=2)], live_reads=True)
    needs = env.binder.find(POD)
    assert address(await env.place(needs, POD)) == ("slots", None)
    env.api.pods[("ns", "me")] = {
        "metadata": {"uid": POD.uid, "namespace": "ns", "name": "me"},
        "spec": {"nodeName": "node-a", "schedulerName": "ip-scheduler"},
    }
    await env.binder.revert(needs, POD, "node-a")
    assert env.allocations("slots") == {"uid-me": (None, "Reserved")}


async def test_revert_releases() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"], allocations={"x": alloc("10.0.0.1")})])
    needs = env.binder.find(POD)
    assert address(await env.place(needs, POD)) == ("p", "10.0.0.2")
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound"), "uid-me": ("10.0.0.2", "Reserved")}
    await env.binder.revert(needs, POD, "node-a")
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound")}
    await env.binder.revert(needs, POD, "node-a")  # idempotent
    assert env.allocations("p") == {"x": ("10.0.0.1", "Bound")}
    # The address is free again for the next pod.
    assert address(await env.place(env.binder.find(OTHER), OTHER)) == ("p", "10.0.0.2")


async def test_revert_without_assume_is_a_no_op() -> None:
    env = Env([pool("p", addresses=["10.0.0.1"], allocations={"uid-me": alloc("10.0.0.1")})])
    await env.binder.revert(env.binder.find(POD), POD, "node-a")
    assert env.api.puts == []
    assert "uid-me" in env.allocations("p")


async def test_revert_waits_for_the_assumed_write_and_swallows_writer_errors() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    needs = env.binder.find(POD)
    assert env.binder.assume(needs, POD, "node-a") is None

    async def broken(name: str, mutate: Mutate) -> PoolView | None:
        raise RuntimeError("API down")

    env.writer.submit = broken  # type: ignore[method-assign,assignment]
    await env.binder.revert(needs, POD, "node-a")  # waits for the reservation, release fails: logs
    assert env.allocations("p") == {"uid-me": ("10.0.0.1", "Reserved")}  # left to the GC
    assert address(needs.committed) == ("p", "10.0.0.1")


# --------------------------------------------------------------------------- mark_bound


@pytest.mark.parametrize(
    ("pools", "deferred", "after"),
    [
        pytest.param(
            [pool("p", addresses=["10.0.0.1-10.0.0.2"])],
            {"p"},
            {"uid-me": ("10.0.0.1", "Bound")},
            id="committed",
        ),
        pytest.param(
            [pool("slots", capacity=2)], {"slots"}, {"uid-me": (None, "Bound")}, id="count-only-slot"
        ),
        pytest.param(
            [pool("p", addresses=["10.0.0.1-10.0.0.2"], allocations=FULL)],
            set(),
            {"x": ("10.0.0.1", "Bound"), "y": ("10.0.0.2", "Bound")},
            id="refused",
        ),
    ],
)
async def test_mark_bound_is_deferred_until_a_write_carries_it(
    pools: list[dict[str, Any]], deferred: set[str], after: dict[str, tuple[str | None, str]]
) -> None:
    env = Env(pools)
    name = pools[0]["metadata"]["name"]
    needs = env.binder.find(POD)
    await env.place(needs, POD)
    before, puts = env.allocations(name), len(env.api.puts)
    env.binder.mark_bound(needs, POD.uid)
    assert env.writer.deferred_pools() == deferred
    assert (env.allocations(name), len(env.api.puts)) == (before, puts)  # no write of its own
    await env.writer.flush()
    assert env.allocations(name) == after
    puts = len(env.api.puts)
    env.binder.mark_bound(needs, POD.uid)  # already Bound: nothing to write
    await env.writer.flush()
    assert len(env.api.puts) == puts


async def test_mark_bound_rides_along_with_the_pools_next_write() -> None:
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.4"])])
    needs = env.binder.find(POD)
    assert address(await env.place(needs, POD)) == ("p", "10.0.0.1")
    env.binder.mark_bound(needs, POD.uid)
    assert address(await env.place(env.binder.find(OTHER), OTHER)) == ("p", "10.0.0.2")
    assert env.api.puts == ["p", "p"]
    assert env.allocations("p") == {"uid-me": ("10.0.0.1", "Bound"), "uid-other": ("10.0.0.2", "Reserved")}
    assert env.writer.deferred_pools() == set()


# --------------------------------------------------------------------------- retained addresses


def sticky_env(allocations: dict[str, Any]) -> Env:
    return Env(
        [
            pool("pa", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
            pool("pb", "node-b", addresses=["10.0.2.1-10.0.2.9"], allocations=allocations),
        ]
    )


async def test_a_statefulset_pod_records_its_policy_with_its_address() -> None:
    env = sticky_env({})
    pod = web0("uid-1")
    assert address(await env.place(env.binder.find(pod), pod, "node-b")) == ("pb", "10.0.2.1")
    got = env.cache.pool("pb")
    assert got is not None
    a = got.allocations["uid-1"]
    assert (a.release_policy, a.identity, a.owner_uid) == ("StatefulSet", "ns/web-0", "uid-sts")


PINNED_ELSEWHERE = {"node-a": Fit.RETAINED_ELSEWHERE, "node-b": Fit.FITS, "node-c": Fit.RETAINED_ELSEWHERE}
"""fit by node for web-0 pinned to its retained address in pb (node-b)."""


@pytest.mark.parametrize(
    ("created_ago", "timeout", "kind", "timeout_in", "fits"),
    [
        pytest.param(0, None, "pinned", 300, PINNED_ELSEWHERE, id="pinned-for-the-default-5m"),
        pytest.param(0, "0", "pinned", None, PINNED_ELSEWHERE, id="pinned-for-ever"),
        pytest.param(0, "30s", "pinned", 30, PINNED_ELSEWHERE, id="pinned-for-its-retain-timeout"),
        pytest.param(
            31,
            "30s",
            "rehome",
            None,
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.NO_POOL},
            id="past-its-retain-timeout",
        ),
    ],
)
def test_find_pins_a_pod_to_its_retained_address_until_its_retain_timeout(
    created_ago: float, timeout: str | None, kind: str, timeout_in: float | None, fits: dict[str, Fit]
) -> None:
    env = sticky_env({"uid-old": kept("10.0.2.5")})
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=created_ago)
    annotations = {} if timeout is None else {"ipscheduler.io/retain-timeout": timeout}
    pod = web0("uid-new", created, **annotations)
    needs = env.binder.find(pod)
    assert needs.kept is not None and needs.kept.kind == kind
    assert (needs.kept.claim.uid, needs.kept.claim.allocation.ip) == ("uid-old", "10.0.2.5")
    assert (needs.pinned.name if needs.pinned is not None else None) == ("pb" if kind == "pinned" else None)
    assert needs.retain_timeout_in == (None if timeout_in is None else pytest.approx(timeout_in, abs=1))
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == fits


async def test_the_next_pod_of_the_identity_goes_back_to_its_address_and_node() -> None:
    env = sticky_env({"uid-old": kept("10.0.2.5")})
    pod = web0("uid-new")
    needs = env.binder.find(pod)
    done = await env.place(needs, pod, "node-b")
    assert done == Committed("pb", "10.0.2.5", '{"ips":[{"address":"10.0.2.5/32"}]}', taken_back=True)
    assert env.allocations("pb") == {"uid-new": ("10.0.2.5", "Reserved")}
    await env.binder.revert(needs, pod, "node-b")  # the binding failed
    assert env.allocations("pb") == {"uid-new": ("10.0.2.5", "Retained")}, "kept for the identity"
    again = env.binder.find(pod)
    assert env.binder.fit(again, pod, "node-a") is Fit.RETAINED_ELSEWHERE, "still held to node-b"
    assert address(await env.place(again, pod, "node-b")) == ("pb", "10.0.2.5")


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
    another pool: it waits for that cycle's bind or revert."""
    taken = {**kept("10.0.2.5"), "phase": phase, "reservedBy": "other-replica/cycle-1"}
    env = sticky_env({"uid-new": taken})
    assert env.binder.find(web0("uid-new")).problem == Problem("retaining")


async def test_a_recreated_statefulset_does_not_inherit_the_address() -> None:
    env = sticky_env({"uid-old": kept("10.0.2.5", ownerUID="uid-old-sts")})
    pod = web0("uid-new")
    needs = env.binder.find(pod)
    assert needs.kept is None
    assert env.binder.fit(needs, pod, "node-a") is Fit.FITS
    assert address(await env.place(needs, pod, "node-b")) == ("pb", "10.0.2.1")


@pytest.mark.parametrize(
    ("node", "placed", "rehome"),
    [
        pytest.param(
            "node-a", ("pa", "10.0.1.1", False), ("pb", "uid-old", "10.0.2.5"), id="placed-elsewhere"
        ),
        pytest.param("node-b", ("pb", "10.0.2.5", True), None, id="its-node-took-it-at-last"),
    ],
)
async def test_past_its_retain_timeout_the_pod_placed_anew_hands_back_the_old_claim(
    node: str, placed: tuple[str, str, bool], rehome: tuple[str, str, str] | None
) -> None:
    """The pod waited for its retained address's node longer than its retain-timeout: placed
    anew, the commit hands back the old claim for the plugin to release (the binder leaves it
    Retained); placed on that node after all, it takes the address back and lets go of none."""
    env = sticky_env({"uid-old": kept("10.0.2.5")})
    created = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=31)
    pod = web0("uid-new", created, **{"ipscheduler.io/retain-timeout": "30s"})
    done = await env.place(env.binder.find(pod), pod, node)
    assert isinstance(done, Committed)
    assert (done.pool, done.ip, done.taken_back) == placed
    got = None if done.rehome is None else (done.rehome.pool.name, done.rehome.uid, done.rehome.allocation.ip)
    assert got == rehome
    if rehome is not None:
        assert env.allocations("pb") == {"uid-old": ("10.0.2.5", "Retained")}


@pytest.mark.parametrize("informer_lags", [False, True], ids=["previous-pod-gone-here", "informer-lags"])
def test_an_address_still_recorded_for_the_previous_pod_holds_the_new_one_back(informer_lags: bool) -> None:
    """The old pod is gone; its release is on its way. Even while this replica's bound-pods
    informer still shows it (a new pod of its name exists only once it is gone from the API
    server), the new pod waits instead of taking a second address: one address per identity."""
    bound = {**builders.alloc("10.0.2.5", pod="ns/web-0", phase="Bound")}
    bound.update(releasePolicy="StatefulSet", identity="ns/web-0", ownerUID="uid-sts")
    env = sticky_env({"uid-old": bound})
    if informer_lags:
        old = dataclasses.replace(web0("uid-old"), node_name="node-b", phase="Running")
        env.cache.node_cache.add_pod(old)
    assert env.binder.find(web0("uid-new")).problem == Problem("retaining")


def test_an_address_releasing_for_the_force_deleted_previous_pod_holds_the_new_one_back() -> None:
    """The previous pod of the identity was force-deleted: its address is Releasing until its
    node let it go. The new pod neither takes it back yet nor gets a second one; the kept
    address says why (for explain)."""
    releasing = {**kept("10.0.2.5"), "phase": "Releasing", "releasingSince": SINCE}
    del releasing["retainedSince"]
    env = sticky_env({"uid-old": releasing})
    needs = env.binder.find(web0("uid-new"))
    assert needs.problem == Problem("retaining")
    assert needs.kept is not None and needs.kept.kind == "waiting"
    assert needs.kept.describe() == (
        "address 10.0.2.5 of pool pb is Releasing: the previous pod ns/web-0 was removed before node-b "
        "confirmed its teardown; the pod waits until it is retained"
    )


def test_needs_of_is_find_without_the_nodes_free_counts() -> None:
    """Reserve without PreFilter (the extender's bind) needs what the pod asks, its pinned
    address included, and no free counts."""
    env = sticky_env({"uid-old": kept("10.0.2.5")})
    pinned, plain = created_now(web0("uid-new")), chooser(pools="pa")
    assert env.binder.find(plain).free and not env.binder.needs_of(plain).free
    assert env.binder.needs_of(plain).choice == env.binder.find(plain).choice
    assert env.binder.needs_of(pinned).pinned is not None and env.binder.needs_of(pinned).pinned.name == "pb"


# -- dual-stack pods: one address of each family from one pool --------------------------

MIXED = ["10.0.0.1-10.0.0.4", "fd00::1-fd00::4"]
REQUIRE = {"ipscheduler.io/ip-family-policy": "RequireDualStack"}
PREFER = {"ipscheduler.io/ip-family-policy": "PreferDualStack"}
ONLY_V6 = {"ipscheduler.io/ip-families": "IPv6"}
ONLY_V4 = {"ipscheduler.io/ip-families": "IPv4"}


def asking(annotations: dict[str, str], uid: str = "uid-me", name: str = "me") -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name=name, annotations=annotations)


def dual_pools() -> list[dict[str, Any]]:
    """node-a: both families; node-b: IPv4 only; node-c: both families, but room for one."""
    return [
        pool("mixed", "node-a", addresses=MIXED),
        pool("v4", "node-b", addresses=["10.0.1.1-10.0.1.4"]),
        pool("tight", "node-c", addresses=["10.0.2.1-10.0.2.4", "fd00:2::1-fd00:2::4"], capacity=1),
    ]


@pytest.mark.parametrize(
    ("annotations", "fits", "free"),
    [
        pytest.param(
            {},
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS},
            {"node-a": 8, "node-b": 4, "node-c": 1},
            id="no-annotations-any-family",
        ),
        pytest.param(
            REQUIRE,
            {"node-a": Fit.FITS, "node-b": Fit.NO_FREE_IPV6, "node-c": Fit.NO_FREE},
            {"node-a": 4, "node-b": 0, "node-c": 0},
            id="require-dual-stack",
        ),
        pytest.param(
            {**REQUIRE, "ipscheduler.io/ip-families": "IPv6,IPv4"},
            {"node-a": Fit.FITS, "node-b": Fit.NO_FREE_IPV6, "node-c": Fit.NO_FREE},
            {"node-a": 4, "node-b": 0, "node-c": 0},
            id="require-dual-stack-ipv6-first",
        ),
        pytest.param(
            PREFER,
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS},
            {"node-a": 4, "node-b": 0, "node-c": 0},
            id="prefer-dual-stack-falls-back",
        ),
        pytest.param(
            ONLY_V6,
            {"node-a": Fit.FITS, "node-b": Fit.NO_FREE_IPV6, "node-c": Fit.FITS},
            {"node-a": 4, "node-b": 0, "node-c": 1},
            id="single-stack-ipv6",
        ),
        pytest.param(
            ONLY_V4,
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS},
            {"node-a": 4, "node-b": 4, "node-c": 1},
            id="single-stack-ipv4",
        ),
    ],
)
def test_a_pod_that_names_families_fits_where_one_pool_gives_each(
    annotations: dict[str, str], fits: dict[str, Fit], free: dict[str, int]
) -> None:
    env = Env(dual_pools())
    pod = asking(annotations)
    needs = env.binder.find(pod)
    assert needs.problem is None
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == fits
    assert by_node(needs.free) == free


def test_prefer_dual_stack_counts_the_one_family_nodes_apart() -> None:
    env = Env(dual_pools())
    needs = env.binder.find(asking(PREFER))
    assert by_node(needs.fallback) == {"node-a": 4, "node-b": 4, "node-c": 1}


@pytest.mark.parametrize(
    ("annotations", "namespace", "detail"),
    [
        pytest.param(
            {"ipscheduler.io/ip-family-policy": "DualStack"},
            None,
            "annotation ipscheduler.io/ip-family-policy='DualStack'",
            id="unknown-policy",
        ),
        pytest.param(
            {"ipscheduler.io/ip-families": "IPv4,IPv6"},
            None,
            "when multiple IP families are specified",
            id="two-families-single-stack",
        ),
        pytest.param(
            {},
            {"ipscheduler.io/ip-families": "IPv5"},
            "namespace default annotation ipscheduler.io/ip-families='IPv5'",
            id="namespace-default-malformed",
        ),
    ],
)
def test_malformed_families_leave_no_node(
    annotations: dict[str, str], namespace: dict[str, str] | None, detail: str
) -> None:
    env = Env(dual_pools())
    if namespace is not None:
        env.cache.attach_namespaces({"ns": (NamespaceDefaults(families=tuple(namespace.items())),)})
    needs = env.binder.find(asking(annotations))
    assert needs.problem is not None and needs.problem.reason == "families"
    assert detail in needs.problem.detail


def test_a_namespace_default_makes_its_pods_dual_stack_unless_they_say_otherwise() -> None:
    env = Env(dual_pools())
    env.cache.attach_namespaces({"ns": (NamespaceDefaults(families=tuple(REQUIRE.items())),)})
    assert env.binder.fit(env.binder.find(asking({})), asking({}), "node-b") is Fit.NO_FREE_IPV6
    own = asking(ONLY_V4)
    assert env.binder.fit(env.binder.find(own), own, "node-b") is Fit.FITS


async def test_a_dual_stack_pod_gets_both_addresses_in_one_write() -> None:
    env = Env(
        [
            pool(
                "mixed",
                addresses=MIXED,
                subnets=[
                    {"cidr": "10.0.0.0/24", "gateway": "10.0.0.254"},
                    {"cidr": "fd00::/64", "gateway": "fd00::ff"},
                ],
            )
        ]
    )
    pod = asking({**REQUIRE, "ipscheduler.io/ip-families": "IPv6,IPv4"})
    needs = env.binder.find(pod)
    assert env.binder.assume(needs, pod, "node-a") is None
    view = env.cache.pool("mixed")
    assert view is not None and env.binder.ledger.available(view) == 6  # two places assumed
    done = await env.binder.commit(needs, pod, "node-a")
    assert isinstance(done, Committed)
    assert (done.ip, done.ips) == ("fd00::1", ("fd00::1", "10.0.0.1"))
    assert done.network == (
        '{"ips":[{"address":"fd00::1/64","gateway":"fd00::ff"},'
        '{"address":"10.0.0.1/24","gateway":"10.0.0.254"}]}'
    )
    written = env.cache.pool("mixed")
    assert written is not None
    a = written.allocations["uid-me"]
    assert (a.ip, a.ips, a.phase) == ("fd00::1", ["fd00::1", "10.0.0.1"], "Reserved")
    assert (written.status.allocated, written.status.free) == (2, 6)
    assert len(env.api.puts) == 1


async def test_dual_stack_pods_stop_where_a_family_runs_out() -> None:
    env = Env([pool("mixed", addresses=["10.0.0.1-10.0.0.4", "fd00::1-fd00::2"])])
    got = []
    for i in range(3):
        pod = asking(REQUIRE, uid=f"u{i}", name=f"p{i}")
        needs = env.binder.find(pod)
        if env.binder.fit(needs, pod, "node-a") is not Fit.FITS:
            got.append(env.binder.fit(needs, pod, "node-a"))
            continue
        done = await env.place(needs, pod)
        assert isinstance(done, Committed)
        got.append(done.ips)
    assert got == [("10.0.0.1", "fd00::1"), ("10.0.0.2", "fd00::2"), Fit.NO_FREE_IPV6]


async def test_prefer_dual_stack_takes_one_family_where_the_node_has_one() -> None:
    env = Env(dual_pools())
    pod = asking(PREFER)
    needs = env.binder.find(pod)
    assert address(await env.place(needs, pod, "node-b")) == ("v4", "10.0.1.1")
    assert isinstance(needs.committed, Committed) and needs.committed.ips == ("10.0.1.1",)
    other = asking(PREFER, uid="u2", name="p2")
    done = await env.place(env.binder.find(other), other, "node-a")
    assert isinstance(done, Committed) and done.ips == ("10.0.0.1", "fd00::1")


async def test_unreserve_gives_both_addresses_back() -> None:
    env = Env([pool("mixed", addresses=MIXED)], live_reads=True)
    pod = asking(REQUIRE)
    needs = env.binder.find(pod)
    assert isinstance(await env.place(needs, pod), Committed)
    await env.binder.revert(needs, pod, "node-a")
    view = env.cache.pool("mixed")
    assert view is not None and view.allocations == {} and view.status.free == 8


@pytest.mark.parametrize(
    ("victim", "annotations", "frees"),
    [
        pytest.param(alloc("10.0.0.1"), REQUIRE, False, id="ipv4-victim-no-ipv6-free"),
        pytest.param({**alloc("10.0.0.1"), "ips": ["10.0.0.1", "fd00::1"]}, REQUIRE, True, id="dual-victim"),
        pytest.param(alloc("10.0.0.1"), {}, True, id="single-stack-pod"),
        pytest.param(alloc("10.0.0.1"), PREFER, True, id="prefer-takes-the-ipv4"),
        pytest.param(alloc("fd00::1"), ONLY_V6, True, id="ipv6-victim-ipv6-pod"),
    ],
)
def test_what_evicting_a_victim_frees_for_a_pod_naming_families(
    victim: dict[str, Any], annotations: dict[str, str], frees: bool
) -> None:
    """A full pool: 10.0.0.1-2 and fd00::1 held (one by the victim), 10.0.0.2 by another pod."""
    held = {"v": victim, "w": alloc("10.0.0.2", pod="ns/w")}
    if "fd00::1" not in victim.get("ips", [victim["ip"]]):
        held["x"] = alloc("fd00::1", pod="ns/x")
    env = Env([pool("p", addresses=["10.0.0.1-10.0.0.2", "fd00::1"], allocations=held)])
    pod = asking(annotations)
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-a") is not Fit.FITS
    assert env.binder.fits_after_evicting(needs, pod, "node-a", frozenset({"v"})) is frees


async def test_a_sticky_dual_stack_pod_keeps_both_addresses_through_its_next_pod() -> None:
    env = Env([pool("mixed", "node-b", addresses=["10.0.2.1-10.0.2.9", "fd00:2::1-fd00:2::9"])])
    first = web0("uid-1", **{"ipscheduler.io/release-policy": "StatefulSet", **REQUIRE})
    done = await env.place(env.binder.find(first), first, "node-b")
    assert isinstance(done, Committed) and done.ips == ("10.0.2.1", "fd00:2::1")
    view = env.cache.pool("mixed")
    assert view is not None
    retained = env.writer.submit("mixed", functools.partial(allocator.retain, uid="uid-1"))
    await retained
    second = web0("uid-2", **{"ipscheduler.io/release-policy": "StatefulSet", **REQUIRE})
    needs = env.binder.find(second)
    assert env.binder.fit(needs, second, "node-a") is Fit.RETAINED_ELSEWHERE
    again = await env.place(needs, second, "node-b")
    assert isinstance(again, Committed)
    assert (again.ips, again.taken_back) == (("10.0.2.1", "fd00:2::1"), True)
    view = env.cache.pool("mixed")
    assert view is not None and view.allocations["uid-2"].ips == ["10.0.2.1", "fd00:2::1"]


# ===========================================================================================
# Several interfaces per pod: a pod's further underlay interfaces (net1, net2, ...), each
# from its own NodeIPPool, in the same cycle (underlayip/interfaces, docs/pools.md "Several
# interfaces"). Everything below is about them; the sections above are about the first.
# ===========================================================================================

IF_LIST = "ipscheduler.io/interface-pools"
IF_NETWORKS = "k8s.v1.cni.cncf.io/networks"
IF_FIRST = {"ipscheduler.io/pools": "gen-a,gen-b,gen-c"}
"""The first interface's pools: one general pool per node."""
NET1 = {IF_LIST: '{"net1": "rdma-a,rdma-b,rdma-c"}'}


def rdma_subnet(cidr: str, gateway: str, *routes: dict[str, str]) -> list[dict[str, Any]]:
    return [{"cidr": cidr, "gateway": gateway, "routes": list(routes)}]


def if_pools() -> list[dict[str, Any]]:
    """node-a: gen-a (4 free), rdma-a (3 free; its subnet routes 0.0.0.0/0 and 10.9.0.0/16),
    stor-a (IPv6, 4 free; its subnet routes ::/0 only); node-b: gen-b, and rdma-b reserved for
    namespace team; node-c: gen-c, and rdma-c full."""
    return [
        pool("gen-a", "node-a", addresses=["10.0.0.1-10.0.0.4"]),
        pool(
            "rdma-a",
            "node-a",
            addresses=["10.1.0.1-10.1.0.3"],
            subnets=rdma_subnet(
                "10.1.0.0/24", "10.1.0.254", {"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.253"}
            ),
        ),
        pool(
            "stor-a",
            "node-a",
            addresses=["fd00:2::1-fd00:2::4"],
            subnets=rdma_subnet("fd00:2::/64", "fd00:2::ff", {"dst": "::/0"}),
        ),
        pool("gen-b", "node-b", addresses=["10.0.1.1-10.0.1.4"]),
        pool("rdma-b", "node-b", addresses=["10.1.1.1-10.1.1.2"], namespaces=["team"]),
        pool("gen-c", "node-c", addresses=["10.0.2.1-10.0.2.4"]),
        pool("rdma-c", "node-c", addresses=["10.1.2.1"], allocations={"x": alloc("10.1.2.1")}),
    ]


def multi(
    uid: str = "uid-me",
    namespace: str = "ns",
    name: str = "me",
    first: dict[str, str] = IF_FIRST,
    **more: str,
) -> PodInfo:
    """A pod with its first interface's pools ``first`` and the annotations ``more``."""
    return PodInfo(uid=uid, namespace=namespace, name=name, annotations={**first, **more})


def further(done: Committed | Refusal | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(interface, pool, addresses) of each further interface a commit gave; fails otherwise."""
    assert isinstance(done, Committed), done
    return [(i.interface, i.pool, i.ips) for i in done.interfaces]


def interface_of(env: Env, pool_name: str, uid: str = "uid-me") -> str | None:
    p = env.cache.pool(pool_name)
    assert p is not None
    return p.allocations[uid].interface


def own_net1(interface: str | None = "net1") -> list[dict[str, Any]]:
    """if_pools() with pod uid-me's allocation of ``interface`` (None: its first) at 10.1.0.1 of
    rdma-a."""
    bodies = if_pools()
    held = {**alloc("10.1.0.1", pod="ns/me"), **({"interface": interface} if interface else {})}
    bodies[1]["status"]["allocations"] = {"uid-me": held}
    return bodies


@pytest.mark.parametrize(
    ("pools", "pod", "free"),
    [
        pytest.param(if_pools(), multi(**NET1), {"net1": {"node-a": 3, "node-c": 0}}, id="net1"),
        pytest.param(
            if_pools(),
            multi(namespace="team", **NET1),
            {"net1": {"node-a": 3, "node-b": 2, "node-c": 0}},
            id="a-pool-reserved-for-its-namespace",
        ),
        pytest.param(
            own_net1(), multi(**NET1), {"net1": {"node-a": 2 + 1, "node-c": 0}}, id="its-own-net1-counts"
        ),
        pytest.param(
            own_net1(interface=None),
            multi(**NET1),
            {"net1": {"node-a": 2, "node-c": 0}},
            id="its-first-interfaces-allocation-does-not",
        ),
        pytest.param(
            if_pools(),
            multi(**{IF_LIST: '{"net1": "rdma-a", "net2": "stor-a,gen-a"}'}),
            {"net1": {"node-a": 3}, "net2": {"node-a": 4 + 4}},
            id="two-interfaces-pools-of-a-node-add-up",
        ),
        pytest.param(
            if_pools(),
            multi(**{IF_NETWORKS: '[{"name": "x"}, {"name": "rdma", "ipscheduler.io/pools": "rdma-c"}]'}),
            {"net2": {"node-c": 0}},
            id="a-multus-element",
        ),
    ],
)
def test_find_counts_what_each_node_offers_each_further_interface(
    pools: list[dict[str, Any]], pod: PodInfo, free: dict[str, dict[str, int]]
) -> None:
    needs = Env(pools).binder.find(pod)
    assert needs.problem is None
    assert needs.interface_free == free
    assert by_node(needs.free) == {"node-a": 4, "node-b": 4, "node-c": 4}, "the first interface's, as before"


@pytest.mark.parametrize(
    ("pod", "fits", "short"),
    [
        pytest.param(
            multi(**NET1),
            {"node-a": Fit.FITS, "node-b": Fit.INTERFACE_NO_POOL, "node-c": Fit.INTERFACE_NO_FREE},
            {"node-b": "net1", "node-c": "net1"},
            id="net1",
        ),
        pytest.param(
            multi(namespace="team", **NET1),
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.INTERFACE_NO_FREE},
            {"node-c": "net1"},
            id="its-namespaces-pool",
        ),
        pytest.param(
            multi(**{IF_LIST: '{"net2": "stor-a", "net1": "rdma-a,rdma-c"}'}),
            {"node-a": Fit.FITS, "node-b": Fit.INTERFACE_NO_POOL, "node-c": Fit.INTERFACE_NO_POOL},
            {"node-b": "net2", "node-c": "net2"},
            id="the-first-interface-short-is-named",
        ),
        pytest.param(
            multi(first={"ipscheduler.io/pools": "gen-a"}, **NET1),
            {"node-a": Fit.FITS, "node-b": Fit.NO_USABLE_POOL, "node-c": Fit.NO_USABLE_POOL},
            {},
            id="the-first-interfaces-verdict-first",
        ),
        pytest.param(
            multi(),
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS},
            {},
            id="no-further-interface",
        ),
    ],
)
def test_a_node_fits_where_every_further_interface_has_an_address(
    pod: PodInfo, fits: dict[str, Fit], short: dict[str, str]
) -> None:
    env = Env(if_pools())
    needs = env.binder.find(pod)
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == fits
    assert needs.short == short


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        pytest.param(
            {IF_LIST: '{"net1": "rdma-a, nope, gone"}'},
            Problem("unknown-pools", "annotation ipscheduler.io/interface-pools (net1)", ("nope", "gone")),
            id="listed",
        ),
        pytest.param(
            {IF_NETWORKS: '[{"name": "rdma", "ipscheduler.io/pools": "gone"}]'},
            Problem(
                "unknown-pools",
                "annotation k8s.v1.cni.cncf.io/networks[0] (rdma) ipscheduler.io/pools",
                ("gone",),
            ),
            id="multus-element",
        ),
        pytest.param(
            {IF_LIST: '{"eth0": "rdma-a"}'},
            Problem(
                "interfaces",
                "interface eth0 is the pod's first interface (its ipscheduler.io/pools), not a further one",
            ),
            id="unreadable",
        ),
    ],
)
def test_a_further_interfaces_bad_pools_are_a_problem(annotations: dict[str, str], problem: Problem) -> None:
    env = Env(if_pools())
    pod = multi(**annotations)
    needs = env.binder.find(pod)
    assert needs.problem == problem
    assert env.binder.room(pod, NODES) == 0


ELEMENTS = (
    '[{"name": "rdma", "ipscheduler.io/pools": "rdma-a"},'
    ' {"name": "stor", "namespace": "infra", "interface": "stor0", "ipscheduler.io/pools": "stor-a"}]'
)


async def test_each_further_interface_gets_its_address_in_its_own_pool_in_the_same_cycle() -> None:
    env = Env(if_pools())
    pod = multi(**{IF_NETWORKS: ELEMENTS})
    needs = env.binder.find(pod)
    assert env.binder.assume(needs, pod, "node-a") is None
    assert env.api.puts == [], "assumed: nothing written before PreBind"
    done = await env.binder.commit(needs, pod, "node-a")
    assert address(done) == ("gen-a", "10.0.0.1")
    assert isinstance(done, Committed)
    assert [(i.interface, i.pool, i.ips, i.network) for i in done.interfaces] == [
        (
            "net1",
            "rdma-a",
            ("10.1.0.1",),
            {
                "ips": [{"address": "10.1.0.1/24", "gateway": "10.1.0.254"}],
                "routes": [{"dst": "10.9.0.0/16", "gw": "10.1.0.253"}],
            },
        ),
        ("stor0", "stor-a", ("fd00:2::1",), {"ips": [{"address": "fd00:2::1/64", "gateway": "fd00:2::ff"}]}),
    ]
    assert [(i.need.network, i.need.element) for i in done.interfaces] == [("ns/rdma", 0), ("infra/stor", 1)]
    assert sorted(env.api.puts) == ["gen-a", "rdma-a", "stor-a"]
    assert env.allocations("rdma-a") == {"uid-me": ("10.1.0.1", "Reserved")}
    assert env.allocations("stor-a") == {"uid-me": ("fd00:2::1", "Reserved")}
    assert [interface_of(env, p) for p in ("gen-a", "rdma-a", "stor-a")] == [None, "net1", "stor0"]
    assert env.api.bodies["rdma-a"]["status"]["allocations"]["uid-me"]["interface"] == "net1"
    assert "interface" not in env.api.bodies["gen-a"]["status"]["allocations"]["uid-me"]
    assert await env.binder.commit(needs, pod, "node-a") == done, "a second call: the same outcome"


@pytest.mark.parametrize(
    ("networks", "want"),
    [
        pytest.param(
            {"ns/rdma": NetworkPools("rdma-a"), "infra/stor": NetworkPools("stor-a")},
            [("net1", "rdma-a", "ns/rdma"), ("stor0", "stor-a", "infra/stor")],
            id="both-from-their-nads",
        ),
        pytest.param(
            {"ns/rdma": NetworkPools("rdma-a")},
            [("net1", "rdma-a", "ns/rdma")],
            id="an-element-whose-nad-names-no-pools-asks-for-none",
        ),
        pytest.param({"ns/stor": NetworkPools("stor-a")}, [], id="the-elements-namespace-names-the-nad"),
    ],
)
async def test_an_element_naming_only_a_nad_with_pools_gets_its_address_from_the_nads_pools(
    networks: dict[str, NetworkPools], want: list[tuple[str, str, str]]
) -> None:
    """The pool cache's NAD index (the informer's) reaches find: the same cycle as for pools
    named in the elements."""
    env = Env(if_pools())
    env.cache.attach_networks({key: (value,) for key, value in networks.items()})
    pod = multi(
        **{IF_NETWORKS: '[{"name": "rdma"}, {"name": "stor", "namespace": "infra", "interface": "stor0"}]'}
    )
    needs = env.binder.find(pod)
    assert needs.problem is None
    done = await env.place(needs, pod)
    assert isinstance(done, Committed)
    assert [(i.interface, i.pool, i.need.network) for i in done.interfaces] == want


async def test_a_further_interface_asking_for_dual_stack_gets_both_families_from_its_pool() -> None:
    env = Env(
        [
            pool("gen-a", "node-a", addresses=["10.0.0.1-10.0.0.4"]),
            pool("mixed", "node-a", addresses=["10.1.0.1-10.1.0.4", "fd00:1::1-fd00:1::4"]),
        ]
    )
    element = (
        '[{"name": "m", "ipscheduler.io/pools": "mixed",'
        ' "ipscheduler.io/ip-family-policy": "RequireDualStack"}]'
    )
    pod = multi(first={"ipscheduler.io/pools": "gen-a"}, **{IF_NETWORKS: element})
    assert further(await env.place(env.binder.find(pod), pod)) == [
        ("net1", "mixed", ("10.1.0.1", "fd00:1::1"))
    ]
    mixed = env.cache.pool("mixed")
    assert mixed is not None and mixed.allocations["uid-me"].ips == ["10.1.0.1", "fd00:1::1"]


async def test_a_pod_holds_one_allocation_per_pool_so_net1_cannot_share_the_first_interfaces() -> None:
    """node-a's only pool is the one both interfaces may use: the cycle is refused naming
    net1, and its Unreserve gives back the first interface's place."""
    env = Env([pool("shared", "node-a", addresses=["10.0.0.1-10.0.0.4"])])
    pod = multi(first={"ipscheduler.io/pools": "shared"}, **{IF_LIST: '{"net1": "shared"}'})
    needs = env.binder.find(pod)
    assert env.binder.assume(needs, pod, "node-a") == Refusal("no-free", "net1")
    await env.binder.revert(needs, pod, "node-a")
    assert env.allocations("shared") == {}
    assert env.binder.ledger.available(env.cache.pools()["shared"]) == 4


def test_filter_refuses_a_node_whose_only_pool_for_net1_is_the_first_interfaces() -> None:
    env = Env([pool("shared", "node-a", addresses=["10.0.0.1-10.0.0.4"])])
    pod = multi(first={"ipscheduler.io/pools": "shared"}, **{IF_LIST: '{"net1": "shared"}'})
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-a") is not Fit.FITS
    assert needs.short == {"node-a": "net1"}


async def test_the_first_interface_leaves_a_further_interface_its_only_pool() -> None:
    env = Env(
        [
            pool("gen", "node-a", addresses=["10.0.0.1-10.0.0.2"]),
            pool("rdma", "node-a", addresses=["10.1.0.1-10.1.0.3"]),  # most available
        ]
    )
    pod = multi(first={}, **{IF_LIST: '{"net1": "rdma"}'})
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-a") is Fit.FITS
    done = await env.place(needs, pod)
    assert address(done) == ("gen", "10.0.0.1")
    assert further(done) == [("net1", "rdma", ("10.1.0.1",))]


async def test_a_further_interfaces_pool_found_full_at_commit_moves_on_to_its_next() -> None:
    env = Env(
        [
            pool("gen-a", "node-a", addresses=["10.0.0.1-10.0.0.4"]),
            pool("rdma-1", "node-a", addresses=["10.1.0.1-10.1.0.2"]),
            pool("rdma-2", "node-a", addresses=["10.1.1.1-10.1.1.2"]),
        ]
    )
    pod = multi(first={"ipscheduler.io/pools": "gen-a"}, **{IF_LIST: '{"net1": "rdma-1,rdma-2"}'})
    needs = env.binder.find(pod)
    env.api.racing_write("rdma-1", {"o1": alloc("10.1.0.1"), "o2": alloc("10.1.0.2")})  # another replica
    done = await env.place(needs, pod)
    assert address(done) == ("gen-a", "10.0.0.1")
    assert further(done) == [("net1", "rdma-2", ("10.1.1.1",))]
    assert "uid-me" not in env.allocations("rdma-1")
    assert env.writer.conflicts == 1
    assert {p.name for p in env.cache.pools_holding(pod.uid)} == {"gen-a", "rdma-2"}


async def test_no_pool_left_for_net1_at_commit_refuses_naming_it() -> None:
    env = Env(
        [
            pool("gen-a", "node-a", addresses=["10.0.0.1-10.0.0.4"]),
            pool("rdma-1", "node-a", addresses=["10.1.0.1"]),
        ]
    )
    pod = multi(first={"ipscheduler.io/pools": "gen-a"}, **{IF_LIST: '{"net1": "rdma-1"}'})
    needs = env.binder.find(pod)
    env.api.racing_write("rdma-1", {"o1": alloc("10.1.0.1")})
    assert await env.place(needs, pod) == Refusal("no-free", "net1")
    await env.binder.revert(needs, pod, "node-a")
    assert env.allocations("gen-a") == {}
    assert env.allocations("rdma-1") == {"o1": ("10.1.0.1", "Bound")}


def bound_pod_body(annotations: dict[str, str]) -> dict[str, Any]:
    """Pod ns/me (uid-me) as the API server returns it once bound to node-a."""
    return {
        "metadata": {"uid": "uid-me", "namespace": "ns", "name": "me", "annotations": annotations},
        "spec": {"nodeName": "node-a", "schedulerName": "ip-scheduler"},
    }


@pytest.mark.parametrize(
    ("live", "left"),
    [
        pytest.param(None, set(), id="not-bound-every-pool-released"),
        pytest.param(
            {
                "ipscheduler.io/pool": "gen-a",
                "ipscheduler.io/interfaces": '{"net1":{"pool":"rdma-a","ips":["10.1.0.1"]},'
                '"stor0":{"pool":"stor-a","ips":["fd00:2::1"]}}',
            },
            {"gen-a", "rdma-a", "stor-a"},
            id="bound-with-every-pool-keeps-them",
        ),
        pytest.param(
            {"ipscheduler.io/pool": "gen-a", "ipscheduler.io/interfaces": '{"net1":{"pool":"rdma-a"}}'},
            {"gen-a", "rdma-a"},
            id="bound-with-two-keeps-those",
        ),
        pytest.param({"ipscheduler.io/pool": "gen-a"}, {"gen-a"}, id="bound-with-the-first-only"),
    ],
)
async def test_revert_releases_every_pool_written_but_those_the_pod_is_bound_with(
    live: dict[str, str] | None, left: set[str]
) -> None:
    env = Env(if_pools(), live_reads=True)
    pod = multi(**{IF_NETWORKS: ELEMENTS})
    needs = env.binder.find(pod)
    assert isinstance(await env.place(needs, pod), Committed)
    assert {p.name for p in env.cache.pools_holding(pod.uid)} == {"gen-a", "rdma-a", "stor-a"}
    if live is not None:
        env.api.pods[("ns", "me")] = bound_pod_body(live)  # our Binding landed although it said it failed
    await env.binder.revert(needs, pod, "node-a")
    assert {p.name for p in env.cache.pools_holding(pod.uid)} == left
    assert all(env.phases(pod.uid)[p] == "Reserved" for p in left)


async def test_mark_bound_is_deferred_in_every_pool_of_the_pod() -> None:
    env = Env(if_pools())
    pod = multi(**NET1)
    needs = env.binder.find(pod)
    assert further(await env.place(needs, pod)) == [("net1", "rdma-a", ("10.1.0.1",))]
    puts = len(env.api.puts)
    env.binder.mark_bound(needs, pod.uid)
    assert env.writer.deferred_pools() == {"gen-a", "rdma-a"}
    assert len(env.api.puts) == puts, "no write of its own"
    await env.writer.flush()
    assert env.phases(pod.uid) == {"gen-a": "Bound", "rdma-a": "Bound"}


def sticky_if_pools(rb: list[str] | None = None) -> list[dict[str, Any]]:
    """node-a: pa, ra; node-b: pb, rb (``rb``: its addresses; default nine)."""
    return [
        pool("pa", "node-a", addresses=["10.0.1.1-10.0.1.9"]),
        pool("ra", "node-a", addresses=["10.1.1.1-10.1.1.9"]),
        pool("pb", "node-b", addresses=["10.0.2.1-10.0.2.9"]),
        pool("rb", "node-b", addresses=rb or ["10.1.2.1-10.1.2.9"]),
    ]


def web0_net1(uid: str) -> PodInfo:
    """web-0 of StatefulSet web (policy StatefulSet), first interface in pa or pb, net1 in ra or rb."""
    return web0(uid, **{"ipscheduler.io/pools": "pa,pb", IF_LIST: '{"net1": "ra,rb"}'})


async def retained_web0(env: Env) -> None:
    """web-0's first pod (uid-1) placed on node-b, then ended: both its addresses Retained."""
    first = web0_net1("uid-1")
    done = await env.place(env.binder.find(first), first, "node-b")
    assert address(done) == ("pb", "10.0.2.1") and further(done) == [("net1", "rb", ("10.1.2.1",))]
    for name in ("pb", "rb"):
        await env.writer.submit(name, functools.partial(allocator.retain, uid="uid-1"))
    assert env.phases("uid-1") == {"pb": "Retained", "rb": "Retained"}


async def test_a_sticky_pods_further_interface_takes_back_its_address_where_the_first_pins_it() -> None:
    env = Env(sticky_if_pools())
    await retained_web0(env)
    pod = web0_net1("uid-2")
    needs = env.binder.find(pod)
    assert needs.pinned is not None and needs.pinned.name == "pb", "pinned by its first interface's address"
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == PINNED_ELSEWHERE
    done = await env.place(needs, pod, "node-b")
    assert isinstance(done, Committed) and (done.pool, done.ip, done.taken_back) == ("pb", "10.0.2.1", True)
    assert further(done) == [("net1", "rb", ("10.1.2.1",))]
    assert env.allocations("rb") == {"uid-2": ("10.1.2.1", "Reserved")}
    assert interface_of(env, "rb", "uid-2") == "net1"
    assert env.phases("uid-1") == {}


async def test_a_sticky_pods_further_interface_takes_back_its_address_in_a_full_pool() -> None:
    env = Env(sticky_if_pools(rb=["10.1.2.1"]))
    await retained_web0(env)
    pod = web0_net1("uid-2")
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-b") is Fit.FITS
    assert further(await env.place(needs, pod, "node-b")) == [("net1", "rb", ("10.1.2.1",))]


async def test_revert_retains_again_what_a_further_interface_took_back() -> None:
    env = Env(sticky_if_pools())
    await retained_web0(env)
    pod = web0_net1("uid-2")
    needs = env.binder.find(pod)
    assert further(await env.place(needs, pod, "node-b")) == [("net1", "rb", ("10.1.2.1",))]
    await env.binder.revert(needs, pod, "node-b")  # the binding failed
    assert env.allocations("pb") == {"uid-2": ("10.0.2.1", "Retained")}
    assert env.allocations("rb") == {"uid-2": ("10.1.2.1", "Retained")}, "kept for the identity"


@pytest.mark.parametrize(
    ("first", "fits", "free"),
    [
        pytest.param({}, Fit.NO_USABLE_POOL, 0, id="names-no-pool"),
        pytest.param({"ipscheduler.io/pools": "rdma"}, Fit.INTERFACE_NO_FREE, 3, id="names-it-too"),
    ],
)
def test_a_pool_a_further_interface_names_is_the_first_interfaces_only_if_it_names_it_too(
    first: dict[str, str], fits: Fit, free: int
) -> None:
    """The node's only pool is the one net1 names (3 free): the first interface, naming no
    pool, does not count or take it (no pool it may use); naming it too, it may, but then net1
    has nothing left (one allocation per pool)."""
    env = Env([pool("rdma", "node-a", addresses=["10.1.0.1-10.1.0.3"])])
    pod = multi(first=first, **{IF_LIST: '{"net1": "rdma"}'})
    needs = env.binder.find(pod)
    assert needs.reserved == (frozenset() if first else frozenset({"rdma"}))
    assert needs.free.get("node-a", 0) == free
    assert env.binder.fit(needs, pod, "node-a") is fits
    assert env.binder.candidates(pod, "node-a", needs) == ([] if not first else [env.cache.pool("rdma")])


@pytest.mark.parametrize(
    ("first", "listed", "disjoint"),
    [
        pytest.param({}, '{"net1": "a", "net2": "b"}', True, id="apart"),
        pytest.param({}, '{"net1": "a", "net2": "a,b"}', False, id="two-interfaces-share-a"),
        pytest.param({"ipscheduler.io/pools": "a"}, '{"net1": "a"}', False, id="first-names-it-too"),
        pytest.param(
            {"ipscheduler.io/pools": "c"}, '{"net1": "a", "net2": "b"}', True, id="first-names-another"
        ),
    ],
)
def test_filter_skips_the_assignment_only_when_no_pool_can_be_wanted_twice(
    first: dict[str, str], listed: str, disjoint: bool
) -> None:
    env = Env([pool(n, "node-a", addresses=[f"10.{i}.0.1-10.{i}.0.3"]) for i, n in enumerate("abc")])
    pod = multi(first=first, **{IF_LIST: listed})
    needs = env.binder.find(pod)
    assert needs.disjoint is disjoint


def rdma_victims() -> list[dict[str, Any]]:
    """if_pools() with rdma-c (node-c, net1's only pool there) full by pod ``x`` (Bound,
    policy Pod: evicting it frees its place) and gen-c (the first interface's) holding pod
    ``s`` (evicting it frees a place there, none for net1)."""
    bodies = if_pools()
    bodies[5]["status"]["allocations"] = {"s": victim("10.0.2.4")}
    return bodies


@pytest.mark.parametrize(
    ("pod", "node", "victims", "fits"),
    [
        pytest.param(multi(**NET1), "node-c", {"x"}, True, id="the-victim-frees-net1s-place"),
        pytest.param(multi(**NET1), "node-c", set(), False, id="no-victims"),
        pytest.param(multi(**NET1), "node-c", {"s"}, False, id="another-pools-victim-frees-none-for-net1"),
        pytest.param(multi(**NET1), "node-b", {"x"}, False, id="no-pool-for-net1-on-the-node"),
        pytest.param(
            multi(first={"ipscheduler.io/pools": "gen-c,rdma-c"}, **NET1),
            "node-c",
            {"x"},
            True,
            id="pools-two-interfaces-may-share-the-assignment-counts-the-freed-place",
        ),
    ],
)
def test_fits_after_evicting_counts_a_further_interfaces_freed_place(
    pod: PodInfo, node: str, victims: set[str], fits: bool
) -> None:
    env = Env(rdma_victims())
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-c") is Fit.INTERFACE_NO_FREE
    assert env.binder.fits_after_evicting(needs, pod, node, frozenset(victims)) is fits
    assert needs.interface_free["net1"].get("node-c") == 0, "the what-if ran on a copy"


def test_the_what_if_counts_of_a_further_interface() -> None:
    """Preemption's dry run: evicting ``x`` frees net1's place on node-c (Filter passes), and
    ``x`` given back retakes it."""
    env = Env(rdma_victims())
    pod = multi(**NET1)
    needs = env.binder.find(pod)
    env.binder.count_eviction(needs, pod, "x", "node-c")
    assert (needs.interface_free["net1"]["node-c"], needs.free["node-c"]) == (1, 3)
    assert env.binder.fit(needs, pod, "node-c") is Fit.FITS
    env.binder.count_addition(needs, pod, chooser(uid="x"), "node-c")
    assert needs.interface_free["net1"]["node-c"] == 0
    assert env.binder.fit(needs, pod, "node-c") is Fit.INTERFACE_NO_FREE


async def test_the_nominated_place_of_a_further_interface_records_it_and_becomes_its_reservation() -> None:
    env = Env(rdma_victims())
    pod = multi(**NET1)
    assert await env.binder.nominate(pod, "node-c", frozenset({"x"})) == "rdma-c"
    assert env.phases(pod.uid) == {"rdma-c": "Nominated"}
    assert interface_of(env, "rdma-c") == "net1"
    needs = env.binder.find(pod)
    assert needs.interface_free["net1"]["node-c"] == 0, "x still holds the only address"
    await env.writer.submit("rdma-c", functools.partial(allocator.release, uid="x"))
    done = await env.place(env.binder.find(pod), pod, "node-c")
    assert further(done) == [("net1", "rdma-c", ("10.1.2.1",))]
    assert address(done)[0] == "gen-c", "the first interface never took net1's place"


# ===========================================================================================
# Dual-stack from two pools: the first interface's primary family from one NodeIPPool, its
# second from another of the same node (an allocation recording interface eth0), when no
# one pool gives both (docs/pools.md "Dual-stack pods").
# ===========================================================================================


def split_pools() -> list[dict[str, Any]]:
    """node-a: v4a (IPv4, 2) and v6a (IPv6, 3), each routing its default; node-b: mixed (one
    of each family) and v6b (IPv6, 2); node-c: v4c (IPv4 only)."""
    return [
        pool(
            "v4a",
            "node-a",
            addresses=["10.0.0.1-10.0.0.2"],
            subnets=[{"cidr": "10.0.0.0/24", "gateway": "10.0.0.254", "routes": [{"dst": "0.0.0.0/0"}]}],
        ),
        pool(
            "v6a",
            "node-a",
            addresses=["fd00::1-fd00::3"],
            subnets=[{"cidr": "fd00::/64", "gateway": "fd00::ff", "routes": [{"dst": "::/0"}]}],
        ),
        pool("mixed", "node-b", addresses=["10.0.1.1", "fd00:1::1"]),
        pool("v6b", "node-b", addresses=["fd00:2::1-fd00:2::2"]),
        pool("v4c", "node-c", addresses=["10.0.3.1-10.0.3.4"]),
    ]


@pytest.mark.parametrize(
    ("annotations", "fits", "free"),
    [
        pytest.param(
            REQUIRE,
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.NO_FREE_IPV6},
            {"node-a": 2, "node-b": 1, "node-c": 0},
            id="require-two-pools-where-no-one-gives-both",
        ),
        pytest.param(
            PREFER,
            {"node-a": Fit.FITS, "node-b": Fit.FITS, "node-c": Fit.FITS},
            {"node-a": 2, "node-b": 1, "node-c": 0},
            id="prefer-two-pools-before-one-family",
        ),
    ],
)
def test_a_dual_stack_pod_fits_where_two_pools_give_one_family_each(
    annotations: dict[str, str], fits: dict[str, Fit], free: dict[str, int]
) -> None:
    env = Env(split_pools())
    pod = asking(annotations)
    needs = env.binder.find(pod)
    assert {n: env.binder.fit(needs, pod, n) for n in NODES} == fits
    assert by_node(needs.free) == free


@pytest.mark.parametrize(
    ("families", "ips", "first", "second"),
    [
        pytest.param("IPv4,IPv6", ("10.0.0.1", "fd00::1"), "v4a", "v6a", id="ipv4-primary"),
        pytest.param("IPv6,IPv4", ("fd00::1", "10.0.0.1"), "v6a", "v4a", id="ipv6-primary"),
    ],
)
async def test_a_dual_stack_pod_gets_one_family_from_each_pool_in_one_cycle(
    families: str, ips: tuple[str, str], first: str, second: str
) -> None:
    env = Env(split_pools())
    pod = asking({**REQUIRE, "ipscheduler.io/ip-families": families})
    done = await env.place(env.binder.find(pod), pod, "node-a")
    assert isinstance(done, Committed)
    assert (done.pool, done.ip, done.ips) == (first, ips[0], ips)
    assert further(done) == [("eth0", second, (ips[1],))]
    network = json.loads(done.network)
    assert [e["address"].split("/")[0] for e in network["ips"]] == list(ips)
    assert [r["dst"] for r in network["routes"]] == ["0.0.0.0/0", "::/0"], "the first interface routes both"
    assert "routes" not in done.interfaces[0].network, "the eth0 entry, like a further interface's, has none"
    assert (interface_of(env, first), interface_of(env, second)) == (None, "eth0")
    assert sorted(env.api.puts) == ["v4a", "v6a"]


async def test_two_pool_dual_stack_is_all_or_nothing_and_unreserve_gives_both_back() -> None:
    env = Env(split_pools(), live_reads=True)
    got = []
    for i in range(3):
        pod = asking(REQUIRE, uid=f"u{i}", name=f"p{i}")
        needs = env.binder.find(pod)
        fit = env.binder.fit(needs, pod, "node-a")
        got.append(fit if fit is not Fit.FITS else getattr(await env.place(needs, pod), "ips", None))
    assert got == [("10.0.0.1", "fd00::1"), ("10.0.0.2", "fd00::2"), Fit.NO_FREE_IPV4]
    pod = asking(REQUIRE, uid="u1", name="p1")
    needs = env.binder.find(pod)
    needs.written = {"v4a", "v6a"}
    needs.owner = env.cache.pool("v4a").allocations["u1"].reserved_by  # type: ignore[union-attr]
    await env.binder.revert(needs, pod, "node-a")
    assert set(env.allocations("v4a")) == {"u0"} and set(env.allocations("v6a")) == {"u0"}


async def test_a_sticky_pod_keeps_both_families_of_two_pools_through_its_next_pod() -> None:
    env = Env(split_pools())
    sticky = {"ipscheduler.io/release-policy": "StatefulSet", **REQUIRE}
    first = web0("uid-1", **sticky)
    done = await env.place(env.binder.find(first), first, "node-a")
    assert isinstance(done, Committed) and done.ips == ("10.0.0.1", "fd00::1")
    for name in ("v4a", "v6a"):
        await env.writer.submit(name, functools.partial(allocator.retain, uid="uid-1"))
    second = web0("uid-2", **sticky)
    needs = env.binder.find(second)
    assert env.binder.fit(needs, second, "node-b") is Fit.RETAINED_ELSEWHERE
    again = await env.place(needs, second, "node-a")
    assert isinstance(again, Committed)
    assert (again.ips, further(again)) == (("10.0.0.1", "fd00::1"), [("eth0", "v6a", ("fd00::1",))])
    assert set(env.allocations("v4a")) == {"uid-2"} and set(env.allocations("v6a")) == {"uid-2"}


@pytest.mark.parametrize(
    ("v6_free", "fits"),
    [
        pytest.param(True, True, id="the-other-pool-gives-the-other-family"),
        pytest.param(False, False, id="it-does-not"),
    ],
)
async def test_preemption_frees_one_family_where_another_pool_gives_the_other(
    v6_free: bool, fits: bool
) -> None:
    """v4a full by a victim of policy Pod; v6a with (or without) a free address: evicting the
    victim lets a RequireDualStack pod take both, one from each pool; the place held for it is
    in v4a, and it becomes its reservation once the victim is gone."""
    bodies = split_pools()[:2]
    bodies[0]["status"]["allocations"] = {"v": victim("10.0.0.1"), "w": victim("10.0.0.2", **STICKY)}
    if not v6_free:
        bodies[1]["status"]["allocations"] = {f"x{i}": alloc(f"fd00::{i}") for i in (1, 2, 3)}
    env = Env(bodies)
    pod = asking(REQUIRE)
    needs = env.binder.find(pod)
    assert env.binder.fit(needs, pod, "node-a") is not Fit.FITS
    assert env.binder.fits_after_evicting(needs, pod, "node-a", frozenset({"v"})) is fits
    if not fits:
        return
    assert await env.binder.nominate(pod, "node-a", frozenset({"v"})) == "v4a"
    await env.writer.submit("v4a", functools.partial(allocator.release, uid="v"))
    done = await env.place(env.binder.find(pod), pod, "node-a")
    assert isinstance(done, Committed) and (done.pool, done.ips) == ("v4a", ("10.0.0.1", "fd00::1"))
    assert further(done) == [("eth0", "v6a", ("fd00::1",))]


LAYOUTS: dict[str, list[dict[str, Any]]] = {
    "one-pool-both": [pool("both", addresses=["10.0.0.1-10.0.0.2", "fd00::1-fd00::2"])],
    "two-pools": [pool("v4", addresses=["10.0.0.1-10.0.0.2"]), pool("v6", addresses=["fd00::1-fd00::2"])],
    "ipv4-only": [pool("v4", addresses=["10.0.0.1-10.0.0.2"])],
    "ipv6-only": [pool("v6", addresses=["fd00::1-fd00::2"])],
}
"""node-a's pools in each layout."""
ASKS: dict[str, dict[str, str]] = {
    "none": {},
    "single-ipv4": {"ipscheduler.io/ip-families": "IPv4"},
    "single-ipv6": {"ipscheduler.io/ip-families": "IPv6"},
    "prefer": PREFER,
    "prefer-ipv6-first": {**PREFER, "ipscheduler.io/ip-families": "IPv6,IPv4"},
    "require": REQUIRE,
    "require-ipv6-first": {**REQUIRE, "ipscheduler.io/ip-families": "IPv6,IPv4"},
}
V4, V6, BOTH_46, BOTH_64 = ("10.0.0.1",), ("fd00::1",), ("10.0.0.1", "fd00::1"), ("fd00::1", "10.0.0.1")
GOT: dict[tuple[str, str], tuple[str, ...] | Fit] = {
    ("one-pool-both", "none"): V4,
    ("one-pool-both", "single-ipv4"): V4,
    ("one-pool-both", "single-ipv6"): V6,
    ("one-pool-both", "prefer"): BOTH_46,
    ("one-pool-both", "prefer-ipv6-first"): BOTH_64,
    ("one-pool-both", "require"): BOTH_46,
    ("one-pool-both", "require-ipv6-first"): BOTH_64,
    ("two-pools", "none"): V4,
    ("two-pools", "single-ipv4"): V4,
    ("two-pools", "single-ipv6"): V6,
    ("two-pools", "prefer"): BOTH_46,
    ("two-pools", "prefer-ipv6-first"): BOTH_64,
    ("two-pools", "require"): BOTH_46,
    ("two-pools", "require-ipv6-first"): BOTH_64,
    ("ipv4-only", "none"): V4,
    ("ipv4-only", "single-ipv4"): V4,
    ("ipv4-only", "single-ipv6"): Fit.NO_FREE_IPV6,
    ("ipv4-only", "prefer"): V4,
    ("ipv4-only", "prefer-ipv6-first"): V4,
    ("ipv4-only", "require"): Fit.NO_FREE_IPV6,
    ("ipv4-only", "require-ipv6-first"): Fit.NO_FREE_IPV6,
    ("ipv6-only", "none"): V6,
    ("ipv6-only", "single-ipv4"): Fit.NO_FREE_IPV4,
    ("ipv6-only", "single-ipv6"): V6,
    ("ipv6-only", "prefer"): V6,
    ("ipv6-only", "prefer-ipv6-first"): V6,
    ("ipv6-only", "require"): Fit.NO_FREE_IPV4,
    ("ipv6-only", "require-ipv6-first"): Fit.NO_FREE_IPV4,
}
"""What a pod asking ``ASKS[ask]`` gets on node-a in ``LAYOUTS[layout]``: its addresses,
primary first, or Filter's verdict."""


@pytest.mark.parametrize(("layout", "ask"), list(GOT), ids=[f"{layout}-{ask}" for layout, ask in GOT])
async def test_every_policy_and_families_over_every_pool_layout(layout: str, ask: str) -> None:
    env = Env(LAYOUTS[layout])
    pod = asking(ASKS[ask])
    needs = env.binder.find(pod)
    fit = env.binder.fit(needs, pod, "node-a")
    want = GOT[(layout, ask)]
    if isinstance(want, Fit):
        assert fit is want
        return
    assert fit is Fit.FITS
    done = await env.place(needs, pod)
    assert isinstance(done, Committed) and done.ips == want
    assert json.loads(done.network)["ips"][0]["address"].split("/")[0] == want[0]
    held = sum(
        len(p.allocations) for p in (env.cache.pool(b["metadata"]["name"]) for b in LAYOUTS[layout]) if p
    )
    assert held == (2 if layout == "two-pools" and len(want) == 2 else 1), "one allocation per pool it took"
