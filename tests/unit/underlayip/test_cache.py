"""underlayip/cache.PoolCache: the incrementally kept pool views equal a cache built from scratch;
the changes the address ledger follows."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.allocator import available, pick, pick_families
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.ledger import AddressLedger
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.selection import NamespaceDefaults
from tests.builders import alloc, pool_body
from tests.unit.fakes import pool_cache

NODES = [f"node-{i}" for i in range(4)]


def body(name: str, node: str, rv: int, addresses: list[str] | None, allocs: dict[str, str | None]) -> Any:
    """A pool of ``addresses`` (count-only with room for 3 when None), ``allocs`` Bound (uid → ip)."""
    return pool_body(
        name,
        node,
        rv=str(rv),
        addresses=addresses,
        capacity=3 if addresses is None else None,
        allocations={uid: alloc(ip, pod=f"ns/{uid}", phase="Bound") for uid, ip in allocs.items()},
    )


def derived(cache: PoolCache) -> dict[str, Any]:
    """Everything the scheduler reads from the cache, in comparable form."""
    pools = cache.pools()
    return {
        "pools": {n: p.resource_version for n, p in pools.items()},
        "by_node": {n: [p.name for p in cache.pools_for_node(n)] for n in NODES},
        "holders": {
            uid: [p.name for p in cache.pools_holding(uid)] for p in pools.values() for uid in p.allocations
        },
        "contexts": {
            n: (c.node_exists, str(c.blocked), c.conflicts, dict(c.held_by))
            for n, p in pools.items()
            for c in [cache.context(p)]
        },
    }


@pytest.mark.parametrize("seed", range(12), ids=lambda s: f"seed{s}")
def test_incremental_upkeep_matches_a_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    node_index: dict[str, list[object]] = {n: [NodeInfo(name=n, ready=True)] for n in NODES[:3]}
    pool_index: dict[str, list[object]] = {}
    specs: dict[str, tuple[str, list[str] | None]] = {}
    cache = pool_cache(node_index, pool_index)
    rv = 1
    for _ in range(60):
        rv += 1
        action = rng.choice(["put", "put", "put", "delete", "fresh", "node"])
        name = f"p{rng.randrange(5)}"
        if action == "put":
            base = rng.randrange(4)
            addresses = None if rng.random() < 0.2 else [f"10.0.0.{base * 2 + 1}-10.0.0.{base * 2 + 4}"]
            ips = [f"10.0.0.{i}" for i in range(1, 12)]
            allocs = {f"u{rng.randrange(8)}": (rng.choice(ips) if addresses else None) for _ in range(2)}
            node = rng.choice(NODES)
            specs[name] = (node, addresses)
            pool_index[name] = [PoolView.from_obj(body(name, node, rv, addresses, allocs))]
            cache.invalidate(name)
        elif action == "delete":
            pool_index.pop(name, None)
            cache.invalidate(name)
        elif action == "fresh":  # our own write: same spec, one allocation fewer, newer version
            current = cache.pool(name)
            if current is None:
                continue
            allocs = {uid: a.ip for uid, a in current.allocations.items()}
            allocs.pop(next(iter(allocs), ""), None)
            node, addresses = specs[name]
            cache.store_fresh(PoolView.from_obj(body(name, node, rv, addresses, allocs)))
        else:
            node = rng.choice(NODES)
            if node in node_index:
                del node_index[node]
                cache.node_cache.remove_node(node)
            else:
                node_index[node] = [NodeInfo(name=node, ready=True)]
                cache.node_cache.add_node(node_index[node][0])  # type: ignore[arg-type]
        fresh = pool_cache(node_index, pool_index)
        for p in cache.pools().values():  # the overlay of our own writes is part of the state
            entry = cache._fresh.get(p.name)
            if fresh.pool(p.name) is not None and entry is not None and entry[0] is p:
                fresh.store_fresh(p)
        assert derived(cache) == derived(fresh)


def test_changes_name_the_pools_a_ledger_must_recount() -> None:
    """A feed of changes: None (all) at first and after a rebuild, then exactly the pools
    whose view or context changed, each said once to every feed."""
    p1 = PoolView.from_obj(body("p1", "node-0", 5, ["10.0.0.1-10.0.0.4"], {}))
    p2 = PoolView.from_obj(body("p2", "node-1", 5, ["10.0.1.1-10.0.1.4"], {}))
    index: dict[str, list[object]] = {"p1": [p1], "p2": [p2]}
    cache = pool_cache({n: [NodeInfo(name=n)] for n in NODES}, index)
    feed, other = cache.changes(), cache.changes()
    assert feed.take() is None
    assert feed.take() == set()
    cache.carry("u9", "p2", "10.0.1.3", "node-1")  # a running pod's address: p2's context
    assert feed.take() == {"p2"}
    cache.store_fresh(PoolView.from_obj(body("p1", "node-0", 6, ["10.0.0.1-10.0.0.4"], {"u1": "10.0.0.1"})))
    assert feed.take() == {"p1"}
    assert feed.take() == set()
    cache.uncarry("u9")
    cache.uncarry("u9")  # gone already: no change
    assert feed.take() == {"p2"}
    assert other.take() is None, "every feed is told, the first time everything"
    cache.node_cache.remove_node("node-3")  # the node set changed: everything is recounted
    assert (feed.take(), other.take()) == (None, None)


def test_what_running_pods_carry_is_kept_until_they_are_gone() -> None:
    cache = pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {})
    cache.carry("u1", "p", "10.0.0.1", "node-0")
    cache.carry("u2", "p", None, "node-0")
    assert cache.carried() == {"u1": ("p", "10.0.0.1"), "u2": ("p", None)}
    assert cache.carriers_of("p") == {"u1", "u2"}
    cache.carry("u1", "q", "10.0.0.7", "node-1")  # its annotations changed
    assert (cache.carriers_of("p"), cache.carriers_of("q")) == ({"u2"}, {"u1"})
    cache.uncarry("u1")
    cache.uncarry("u2")
    assert cache.carried() == {} and cache.carriers_of("p") == frozenset()


# --------------------------------------------------------------------------- dual-stack pods

MIXED = ["10.0.0.1-10.0.0.4", "fd00::1-fd00::4"]


def mixed_cache(capacity: int | None = None) -> PoolCache:
    """A cache holding pool ``p`` of 4 IPv4 and 4 IPv6 addresses on node-0, no allocation."""
    p = PoolView.from_obj(pool_body("p", "node-0", addresses=MIXED, capacity=capacity))
    return pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {"p": [p]})


def pod_held(cache: PoolCache) -> dict[str, set[str]]:
    p = cache.pools()["p"]
    return {ip: set(uids) for ip, uids in cache.context(p).pod_held.items() if uids}


@pytest.mark.parametrize(
    ("carries", "held"),
    [
        pytest.param(
            [("u1", "10.0.0.1", ("fd00::1",))], {"10.0.0.1": {"u1"}, "fd00::1": {"u1"}}, id="both-addresses"
        ),
        pytest.param(
            [("u1", "fd00::2", ("10.0.0.2",))], {"fd00::2": {"u1"}, "10.0.0.2": {"u1"}}, id="ipv6-primary"
        ),
        pytest.param([("u1", None, ("fd00::1",))], {"fd00::1": {"u1"}}, id="no-primary"),
        pytest.param(
            [("u1", "10.0.0.1", ("fd00::1",)), ("u1", "10.0.0.1", ("fd00::3",))],
            {"10.0.0.1": {"u1"}, "fd00::3": {"u1"}},
            id="carried-again-other-second-address",
        ),
        pytest.param(
            [("u1", "10.0.0.1", ("fd00::1",)), ("u1", "10.0.0.1", ())],
            {"10.0.0.1": {"u1"}},
            id="carried-again-single-stack",
        ),
        pytest.param(
            [("u1", "10.0.0.1", ()), ("u1", "10.0.0.1", ("fd00::1",))],
            {"10.0.0.1": {"u1"}, "fd00::1": {"u1"}},
            id="carried-again-dual-stack",
        ),
        pytest.param(
            [("u1", "10.0.0.1", ("fd00::1",)), ("u2", "10.0.0.2", ("fd00::1",))],
            {"10.0.0.1": {"u1"}, "10.0.0.2": {"u2"}, "fd00::1": {"u1", "u2"}},
            id="two-pods-one-address",
        ),
    ],
)
def test_every_address_a_running_pod_carries_is_held(
    carries: list[tuple[str, str | None, tuple[str, ...]]], held: dict[str, set[str]]
) -> None:
    cache = mixed_cache()
    for uid, ip, more in carries:
        cache.carry(uid, "p", ip, "node-0", more)
    assert pod_held(cache) == held
    p = cache.pools()["p"]
    picked = pick_families(p, cache.context(p), (4, 6))
    assert picked is not None and not set(picked) & set(held), "never handed out"
    for uid in {uid for uid, _, _ in carries}:
        cache.uncarry(uid)
    assert pod_held(cache) == {}
    assert cache.carried() == {}


def test_carrying_again_changes_the_pool_only_when_an_address_changed() -> None:
    cache = mixed_cache()
    feed = cache.changes()
    assert feed.take() is None
    cache.carry("u1", "p", "10.0.0.1", "node-0", ("fd00::1",))
    assert feed.take() == {"p"}
    cache.carry("u1", "p", "10.0.0.1", "node-0", ("fd00::1",))
    assert feed.take() == set(), "the same addresses: no change"
    cache.carry("u1", "p", "10.0.0.1", "node-0", ("fd00::2",))
    assert feed.take() == {"p"}
    cache.uncarry("u1")
    assert feed.take() == {"p"}


def test_a_running_dual_stack_pod_no_allocation_records_takes_two_places() -> None:
    cache = mixed_cache(capacity=3)
    cache.carry("u1", "p", "10.0.0.1", "node-0", ("fd00::1",))
    p = cache.pools()["p"]
    assert available(p, cache.context(p)) == 1, "three places, two taken by the pod's addresses"
    assert pick_families(p, cache.context(p), (4, 6)) is None, "capacity 3: no room for two more"


@pytest.mark.parametrize(
    ("namespace", "pools", "families"),
    [
        pytest.param("both", "a,b", {"ipscheduler.io/ip-family-policy": "RequireDualStack"}, id="both"),
        pytest.param("pools-only", "a", None, id="pools-only"),
        pytest.param(
            "families-only",
            None,
            {"ipscheduler.io/ip-family-policy": "PreferDualStack", "ipscheduler.io/ip-families": "IPv6"},
            id="families-only",
        ),
        pytest.param("unknown", None, None, id="not-in-the-index"),
    ],
)
def test_a_namespaces_defaults(namespace: str, pools: str | None, families: dict[str, str] | None) -> None:
    cache = pool_cache({}, {})
    assert (cache.default_pools(namespace), cache.default_families(namespace)) == (None, None), (
        "namespaces not watched"
    )
    cache.attach_namespaces(
        {
            "both": (NamespaceDefaults("a,b", (("ipscheduler.io/ip-family-policy", "RequireDualStack"),)),),
            "pools-only": (NamespaceDefaults("a"),),
            "families-only": (
                NamespaceDefaults(
                    None,
                    (
                        ("ipscheduler.io/ip-family-policy", "PreferDualStack"),
                        ("ipscheduler.io/ip-families", "IPv6"),
                    ),
                ),
            ),
        }
    )
    assert (cache.default_pools(namespace), cache.default_families(namespace)) == (pools, families)


# --------------------------------------------------------------------------- further interfaces


def two_pools(rdma: list[str] | None = None) -> PoolCache:
    """Pool ``p`` (the first interface's: 10.0.0.1-4) and pool ``q`` (a further interface's:
    ``rdma``, default 10.1.0.1-2) on node-0, no allocation."""
    p = PoolView.from_obj(pool_body("p", "node-0", addresses=["10.0.0.1-10.0.0.4"]))
    q = PoolView.from_obj(pool_body("q", "node-0", addresses=rdma or ["10.1.0.1-10.1.0.2"]))
    return pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {"p": [p], "q": [q]})


def held_in(cache: PoolCache, name: str) -> dict[str, set[str]]:
    pool = cache.pools()[name]
    return {ip: set(uids) for ip, uids in cache.context(pool).pod_held.items() if uids}


@pytest.mark.parametrize(
    ("carries", "held", "picked"),
    [
        pytest.param(
            [("10.0.0.1", (), ("10.1.0.1",))],
            {"10.0.0.1": {"u1"}, "10.1.0.1": {"u1"}},
            "10.1.0.2",
            id="a-further-interfaces-address",
        ),
        pytest.param(
            [("10.0.0.1", ("fd00::1",), ("10.1.0.1", "10.1.0.2"))],
            {"10.0.0.1": {"u1"}, "fd00::1": {"u1"}, "10.1.0.1": {"u1"}, "10.1.0.2": {"u1"}},
            None,
            id="with-the-first-interfaces-other-address",
        ),
        pytest.param(
            [(None, (), ("10.1.0.2",))], {"10.1.0.2": {"u1"}}, "10.1.0.1", id="a-count-only-first-interface"
        ),
        pytest.param(
            [("10.0.0.1", (), ("10.1.0.1",)), ("10.0.0.1", (), ("10.1.0.2",))],
            {"10.0.0.1": {"u1"}, "10.1.0.2": {"u1"}},
            "10.1.0.1",
            id="carried-again-another-address",
        ),
        pytest.param(
            [("10.0.0.1", (), ("10.1.0.1",)), ("10.0.0.1", (), ())],
            {"10.0.0.1": {"u1"}},
            "10.1.0.1",
            id="carried-again-without",
        ),
    ],
)
def test_the_addresses_of_a_running_pods_further_interfaces_are_held(
    carries: list[tuple[str | None, tuple[str, ...], tuple[str, ...]]],
    held: dict[str, set[str]],
    picked: str | None,
) -> None:
    cache = two_pools()
    for ip, more, elsewhere in carries:
        cache.carry("u1", "p", ip, "node-0", more, elsewhere=elsewhere)
    assert held_in(cache, "q") == held
    q = cache.pools()["q"]
    assert pick(q, cache.context(q), "other")[1] == picked, "never handed out"
    cache.uncarry("u1")
    assert held_in(cache, "q") == {}
    assert pick(q, cache.context(q), "other")[1] == "10.1.0.1"


def test_a_further_interfaces_address_takes_no_place_in_the_first_interfaces_pool() -> None:
    """The pod's first pool records no allocation of it: its own address takes a place there
    (unrecorded), its further interface's (of another pool) does not."""
    cache = two_pools()
    cache.carry("u1", "p", "10.0.0.1", "node-0", elsewhere=("10.1.0.1",))
    p = cache.pools()["p"]
    assert available(p, cache.context(p)) == 3
    assert cache.carriers_of("p") == {"u1"} and cache.carriers_of("q") == frozenset()


def test_the_ledger_recounts_the_pool_of_a_further_interfaces_carried_address() -> None:
    cache = two_pools(rdma=["10.1.0.1"])
    ledger = AddressLedger(cache)
    assert ledger.available(cache.pools()["q"]) == 1
    cache.carry("u1", "p", "10.0.0.1", "node-0", elsewhere=("10.1.0.1",))
    q = cache.pools()["q"]
    assert available(q, cache.context(q)) == 0, "its only address is the running pod's"
    assert ledger.available(q) == 0


def test_a_read_older_than_our_own_write_never_takes_its_place() -> None:
    """The GC sweep's LIST answered before our reservation's write landed, arriving after it
    (a CI run: Reserve then counted the written place as free, and the write found the pool
    full): the cache keeps the write; a newer read replaces it."""
    indexed = PoolView.from_obj(body("p1", "node-0", 5, ["10.0.0.1-10.0.0.2"], {}))
    cache = pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {"p1": [indexed]})
    cache.store_fresh(
        PoolView.from_obj(body("p1", "node-0", 7, ["10.0.0.1-10.0.0.2"], {"u1": "10.0.0.1"})), own_write=True
    )
    cache.store_fresh(PoolView.from_obj(body("p1", "node-0", 6, ["10.0.0.1-10.0.0.2"], {})))  # the late LIST
    seen = cache.pool("p1")
    assert seen is not None and (seen.resource_version, set(seen.allocations)) == ("7", {"u1"})
    assert set(cache.pools()["p1"].allocations) == {"u1"}
    newer = {"u1": "10.0.0.1", "u2": "10.0.0.2"}
    cache.store_fresh(PoolView.from_obj(body("p1", "node-0", 8, ["10.0.0.1-10.0.0.2"], newer)))
    assert set(cache.pools()["p1"].allocations) == {"u1", "u2"}
