"""underlayip/ledger.AddressLedger: assumed places and free counts, kept incrementally from the
pool index's changes and the binder's assumptions, equal a ledger built from scratch."""

from __future__ import annotations

import random

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.allocator import available
from ipscheduler.underlayip.ledger import AddressLedger
from ipscheduler.underlayip.pool import PoolView
from tests.builders import alloc, pool_body
from tests.unit.fakes import pool_cache

NODES = [f"node-{i}" for i in range(3)]


def view(name: str, node: str, rv: int, addresses: list[str], allocs: dict[str, str]) -> PoolView:
    """Pool ``name`` on ``node`` at version ``rv``: ``allocs`` Bound (uid → ip)."""
    body = pool_body(
        name,
        node,
        rv=str(rv),
        addresses=addresses,
        allocations={uid: alloc(ip, pod=f"ns/{uid}", phase="Bound") for uid, ip in allocs.items()},
    )
    return PoolView.from_obj(body)


def counts(ledger: AddressLedger) -> tuple[dict[str, int], dict[str, int]]:
    """(free by node, nodes with none left out; available by pool)."""
    pools = ledger.index.pools()
    return (
        {n: v for n, v in ledger.node_free().items() if v},
        {n: ledger.available(p) for n, p in pools.items()},
    )


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_incremental_counts_match_a_ledger_built_from_scratch(seed: int) -> None:
    """Random pool writes, deletions, running pods' addresses, assumptions and their end: the
    counts kept step by step equal those of a new ledger over the same pools, given the
    same assumptions."""
    rng = random.Random(seed)
    pool_index: dict[str, list[object]] = {}
    nodes = {n: [NodeInfo(name=n, ready=True)] for n in NODES}
    ledger = AddressLedger(pool_cache(nodes, pool_index))
    assumed: set[tuple[str, str]] = set()
    carried: dict[str, tuple[str, str, str]] = {}
    ranges: dict[str, list[str]] = {}
    for rv in range(2, 80):
        action = rng.choice(["put", "put", "delete", "assume", "assume", "forget", "carry"])
        name, uid = f"p{rng.randrange(4)}", f"u{rng.randrange(10)}"
        if action == "put":
            base = rng.randrange(3) * 4
            ips = [f"10.0.0.{base + i}" for i in range(1, 5)]
            allocs = {f"u{rng.randrange(10)}": rng.choice(ips) for _ in range(rng.randrange(3))}
            pool_index[name] = [view(name, rng.choice(NODES), rv, [f"{ips[0]}-{ips[-1]}"], allocs)]
            ranges[name] = ips
            ledger.index.invalidate(name)
        elif action == "delete":
            pool_index.pop(name, None)
            ledger.index.invalidate(name)
        elif action == "assume":
            ledger.assume(name, uid)
            assumed.add((name, uid))
        elif action == "forget" and assumed:
            name, uid = sorted(assumed)[rng.randrange(len(assumed))]
            ledger.forget_assumed(name, uid)
            assumed.discard((name, uid))
        elif action == "carry" and name in pool_index:
            # A running pod carries an address of the pool its annotation names (one named
            # under another pool's name counts there at that pool's next change).
            carried[uid] = (name, rng.choice(ranges[name]), rng.choice(NODES))
            ledger.index.carry(uid, *carried[uid])
        fresh = AddressLedger(pool_cache(nodes, pool_index))
        for p, u in assumed:
            fresh.assume(p, u)
        for u, (p, ip, node) in carried.items():
            fresh.index.carry(u, p, ip, node)
        assert counts(ledger) == counts(fresh), f"step {rv}: {action} {name} {uid}"


def test_an_assumed_place_is_taken_until_its_write_lands_or_fails() -> None:
    ledger = AddressLedger(
        pool_cache(
            {"node-0": [NodeInfo(name="node-0")]}, {"p": [view("p", "node-0", 5, ["10.0.0.1-10.0.0.2"], {})]}
        )
    )
    pool = ledger.index.pools()["p"]
    assert (ledger.available(pool), ledger.node_free()["node-0"]) == (2, 2)
    ledger.assume("p", "u1")
    ledger.assume("p", "u1")  # the same pod twice: one place
    ledger.assume("p", "u2")
    assert (ledger.available(pool), ledger.node_free()["node-0"]) == (0, 0)
    assert ledger.assumed("p") == {"u1", "u2"}
    ledger.forget_assumed("p", "u1")
    ledger.forget_assumed("p", "u9")  # never assumed: nothing changes
    assert (ledger.available(pool), ledger.node_free()["node-0"]) == (1, 1)
    # The write of u2 landed: its allocation is in the pool, counted once, not twice.
    written = view("p", "node-0", 6, ["10.0.0.1-10.0.0.2"], {"u2": "10.0.0.1"})
    ledger.index.store_fresh(written)
    assert ledger.available(written) == 1
    ledger.forget_assumed("p", "u2")
    assert (ledger.available(written), ledger.node_free()["node-0"]) == (1, 1)


def test_available_is_zero_when_every_free_address_is_held_by_another_pool() -> None:
    """p-old still holds 10.0.0.2 after its spec dropped it; p-new declares it: not handed out."""
    old = view("p-old", "node-0", 5, ["10.0.0.9"], {"u1": "10.0.0.2"})
    new = view("p-new", "node-1", 5, ["10.0.0.1-10.0.0.2"], {"u2": "10.0.0.1"})
    cache = pool_cache({n: [NodeInfo(name=n)] for n in NODES}, {"p-old": [old], "p-new": [new]})
    ledger = AddressLedger(cache)
    assert cache.context(new).held_by == {"10.0.0.2": "p-old"}
    assert ledger.available(new) == 0
    assert ledger.node_free().get("node-1", 0) == 0
    # p-old releases it: p-new has one free again.
    released = view("p-old", "node-0", 6, ["10.0.0.9"], {})
    cache.store_fresh(released)
    cache._pools["p-old"] = [released]  # type: ignore[index]
    assert ledger.available(cache.pools()["p-new"]) == 1
    assert ledger.node_free()["node-1"] == 1
    assert available(new, cache.context(new)) == 1


def test_a_version_the_index_does_not_hold_is_counted_as_it_is() -> None:
    pool = view("p", "node-0", 5, ["10.0.0.1-10.0.0.4"], {})
    ledger = AddressLedger(pool_cache({"node-0": [NodeInfo(name="node-0")]}, {"p": [pool]}))
    ledger.assume("p", "u1")
    newer = view("p", "node-0", 9, ["10.0.0.1-10.0.0.4"], {"u7": "10.0.0.4"})
    assert ledger.available(newer) == 2, "four, one allocated, one assumed"
    assert ledger.available(pool) == 3


# --------------------------------------------------------------------------- dual-stack pods

MIXED = ["10.0.0.1-10.0.0.4", "fd00::1-fd00::4"]


def mixed_ledger(allocs: dict[str, str] | None = None, rv: int = 5) -> AddressLedger:
    """A ledger over pool ``p`` of 4 IPv4 and 4 IPv6 addresses on node-0 (``allocs`` Bound)."""
    pools = {"p": [view("p", "node-0", rv, MIXED, allocs or {})]}
    return AddressLedger(pool_cache({"node-0": [NodeInfo(name="node-0")]}, pools))


@pytest.mark.parametrize(
    ("assumed", "allocs", "available_", "family_free"),
    [
        pytest.param([], {}, 8, {4: 4, 6: 4}, id="none"),
        pytest.param([("u1", (4, 6))], {}, 6, {4: 3, 6: 3}, id="dual-takes-one-of-each"),
        pytest.param([("u1", (6, 4))], {}, 6, {4: 3, 6: 3}, id="ipv6-primary-the-same"),
        pytest.param([("u1", (6,))], {}, 7, {4: 4, 6: 3}, id="single-stack-ipv6"),
        pytest.param([("u1", ())], {}, 7, {4: 4, 6: 4}, id="any-family-one-place-no-family"),
        pytest.param([("u1", (4, 6)), ("u1", (4, 6))], {}, 6, {4: 3, 6: 3}, id="the-same-pod-twice"),
        pytest.param([("u1", ()), ("u1", (4, 6))], {}, 6, {4: 3, 6: 3}, id="assumed-again-with-families"),
        pytest.param([("u1", (4, 6)), ("u2", (4,)), ("u3", ())], {}, 4, {4: 2, 6: 3}, id="three-pods"),
        pytest.param([("u1", (4, 6))], {"u1": "10.0.0.1"}, 7, {4: 3, 6: 4}, id="landed-counted-once"),
        pytest.param(
            [(f"u{i}", (4, 6)) for i in range(5)], {}, 0, {4: 0, 6: 0}, id="more-than-there-is-never-negative"
        ),
    ],
)
def test_assumed_dual_stack_places_are_deducted_per_family(
    assumed: list[tuple[str, tuple[int, ...]]],
    allocs: dict[str, str],
    available_: int,
    family_free: dict[int, int],
) -> None:
    ledger = mixed_ledger(allocs)
    for uid, versions in assumed:
        ledger.assume("p", uid, versions)
    pool = ledger.index.pools()["p"]
    assert (ledger.available(pool), ledger.node_free().get("node-0", 0)) == (available_, available_)
    assert ledger.family_free(pool) == family_free
    assert ledger.assumed("p") == {uid for uid, _ in assumed}


def test_family_free_is_kept_until_the_pools_next_change() -> None:
    ledger = mixed_ledger()
    pool = ledger.index.pools()["p"]
    first = ledger.family_free(pool)
    assert first == {4: 4, 6: 4}
    assert ledger.family_free(pool) is first, "memoized"
    ledger.assume("p", "u1", (4, 6))
    assumed = ledger.family_free(pool)
    assert assumed == {4: 3, 6: 3} and assumed is not first
    assert ledger.family_free(pool) is assumed
    ledger.forget_assumed("p", "u9")  # never assumed: no change
    assert ledger.family_free(pool) is assumed
    written = view("p", "node-0", 6, MIXED, {"u1": "10.0.0.1", "u2": "fd00::4"})
    ledger.index.store_fresh(written)
    assert ledger.family_free(written) == {4: 3, 6: 3}, "u1's write landed (one address), u2 came along"
    ledger.forget_assumed("p", "u1")
    assert ledger.family_free(written) == {4: 3, 6: 3}
    assert ledger.available(written) == 6


def test_family_free_follows_the_pool_context() -> None:
    """A running pod carrying addresses of the pool (a context change) takes them from the
    families at once."""
    ledger = mixed_ledger()
    pool = ledger.index.pools()["p"]
    assert ledger.family_free(pool) == {4: 4, 6: 4}
    ledger.index.carry("r1", "p", "10.0.0.2", "node-0", ("fd00::3",))
    assert ledger.family_free(pool) == {4: 3, 6: 3}
    ledger.index.uncarry("r1")
    assert ledger.family_free(pool) == {4: 4, 6: 4}


def test_family_free_of_a_version_the_index_does_not_hold() -> None:
    ledger = mixed_ledger()
    ledger.assume("p", "u1", (6,))
    newer = view("p", "node-0", 9, MIXED, {"u7": "fd00::4"})
    assert ledger.family_free(newer) == {4: 4, 6: 2}, "one allocated, one assumed"
    assert ledger.family_free(ledger.index.pools()["p"]) == {4: 4, 6: 3}


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed{s}")
def test_incremental_family_counts_match_a_ledger_built_from_scratch(seed: int) -> None:
    """As the incremental test above, with mixed pools and pods of one or two families: the
    free counts and the free addresses per family kept (and memoized) step by step equal those
    of a new ledger given the same assumptions."""
    rng = random.Random(seed)
    pool_index: dict[str, list[object]] = {}
    nodes = {n: [NodeInfo(name=n, ready=True)] for n in NODES}
    ledger = AddressLedger(pool_cache(nodes, pool_index))
    assumed: dict[tuple[str, str], tuple[int, ...]] = {}
    choices: list[tuple[int, ...]] = [(), (4,), (6,), (4, 6), (6, 4)]
    for rv in range(2, 80):
        action = rng.choice(["put", "put", "delete", "assume", "assume", "forget"])
        name, uid = f"p{rng.randrange(3)}", f"u{rng.randrange(8)}"
        if action == "put":
            v4 = [f"10.0.0.{i}" for i in range(1, 4)]
            v6 = [f"fd00::{i}" for i in range(1, 4)]
            allocs = {f"u{rng.randrange(8)}": rng.choice(v4 + v6) for _ in range(rng.randrange(3))}
            addresses = ["10.0.0.1-10.0.0.3", "fd00::1-fd00::3"][: rng.randrange(1, 3)]
            pool_index[name] = [view(name, rng.choice(NODES), rv, addresses, allocs)]
            ledger.index.invalidate(name)
        elif action == "delete":
            pool_index.pop(name, None)
            ledger.index.invalidate(name)
        elif action == "assume":
            assumed[(name, uid)] = rng.choice(choices)
            ledger.assume(name, uid, assumed[(name, uid)])
        elif action == "forget" and assumed:
            name, uid = sorted(assumed)[rng.randrange(len(assumed))]
            ledger.forget_assumed(name, uid)
            del assumed[(name, uid)]
        fresh = AddressLedger(pool_cache(nodes, pool_index))
        for (p, u), versions in assumed.items():
            fresh.assume(p, u, versions)
        assert counts(ledger) == counts(fresh), f"step {rv}: {action} {name} {uid}"
        # Asked at every step: memoized until the next change of the pool.
        families = {n: dict(ledger.family_free(p)) for n, p in ledger.index.pools().items()}
        assert families == {n: dict(fresh.family_free(p)) for n, p in fresh.index.pools().items()}
