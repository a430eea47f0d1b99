"""underlayip/cache.PoolCache: the incrementally kept pool views equal a cache built from scratch."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.allocator import available
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.pool import PoolView
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
        "node_free": {n: v for n, v in cache.node_free().items() if v},
        "holders": {
            uid: [p.name for p in cache.pools_holding(uid)] for p in pools.values() for uid in p.allocations
        },
        "contexts": {
            n: (c.node_exists, str(c.blocked), c.conflicts, dict(c.held_by))
            for n, p in pools.items()
            for c in [cache.context(p)]
        },
        "available": {n: cache.available(p) for n, p in pools.items()},
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


def test_available_is_zero_when_every_free_address_is_held_by_another_pool() -> None:
    """p-old still holds 10.0.0.2 after its spec dropped it; p-new declares it: not handed out."""
    old = PoolView.from_obj(body("p-old", "node-0", 5, ["10.0.0.9"], {"u1": "10.0.0.2"}))
    new = PoolView.from_obj(body("p-new", "node-1", 5, ["10.0.0.1-10.0.0.2"], {"u2": "10.0.0.1"}))
    cache = pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {"p-old": [old], "p-new": [new]})
    assert cache.context(new).held_by == {"10.0.0.2": "p-old"}
    assert cache.available(new) == 0
    assert cache.node_free().get("node-1", 0) == 0
    # p-old releases it: p-new has one free again.
    released = PoolView.from_obj(body("p-old", "node-0", 6, ["10.0.0.9"], {}))
    cache.store_fresh(released)
    cache._pools["p-old"] = [released]  # type: ignore[index]
    assert cache.available(cache.pools()["p-new"]) == 1
    assert cache.node_free()["node-1"] == 1
    assert available(new, cache.context(new)) == 1
