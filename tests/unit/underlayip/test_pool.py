"""underlayip/pool: a NodeIPPool as the scheduler reads it (PoolView), and what is derived from
it: conflicts between pools, the Ready condition, the desired status (no server)."""

from __future__ import annotations

import datetime
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipscheduler.underlayip.addresses import AddressError, AddressSet
from ipscheduler.underlayip.allocator import PoolFull, pick, reserve
from ipscheduler.underlayip.models import MAX_POOL_ADDRESSES
from ipscheduler.underlayip.pool import (
    PoolContext,
    PoolView,
    age,
    desired_status,
    exhausted_condition,
    find_conflicts,
    foreign_holds,
    freed_by_eviction,
    network_of,
    network_of_all,
    parse_status,
    ready_condition,
    refresh,
    without_default_route,
)
from tests.builders import ALONE, NOW, SINCE, SINCE_TIME, address_set, ago, alloc, bound_allocs, with_status
from tests.builders import pool as view
from tests.builders import pool_body as body

# --------------------------------------------------------------------------- PoolView.from_obj


VALID_POOLS = [
    # (body kwargs, count_only, size of address set or None, capacity)
    ({"addresses": ["10.0.0.5", "10.0.0.7"]}, False, 2, 2),
    ({"addresses": ["10.0.1.0/28"]}, False, 14, 14),
    ({"addresses": ["10.0.1.0/28"], "exclude": ["10.0.1.1", "10.0.1.8-10.0.1.9"]}, False, 11, 11),
    ({"addresses": ["10.0.0.10-10.0.0.19"]}, False, 10, 10),
    ({"addresses": ["10.0.0.10-10.0.0.19"], "capacity": 3}, False, 10, 3),
    ({"addresses": ["fd00::/120"]}, False, 256, 256),
    ({"addresses": ["10.0.0.0/29"], "exclude": ["10.0.0.0/29"]}, False, 0, 0),
    ({"capacity": 5}, True, None, 5),
    ({"capacity": 0}, True, None, 0),
    ({}, True, None, 0),
]


@pytest.mark.parametrize(
    ("kw", "count_only", "size", "capacity"),
    VALID_POOLS,
    ids=[
        "single-ips",
        "cidr-28-drops-network-broadcast",
        "cidr-with-ip-and-range-excludes",
        "range",
        "range-capped",
        "ipv6-cidr",
        "everything-excluded",
        "count-only-with-capacity",
        "count-only-capacity-zero",
        "count-only-no-capacity",
    ],
)
def test_from_obj_valid(kw: dict[str, Any], count_only: bool, size: int | None, capacity: int) -> None:
    p = PoolView.from_obj(body(name="p1", node="node-x", generation=4, rv="42", **kw))
    assert p.spec_error is None
    assert (p.name, p.node_name, p.generation, p.resource_version, p.uid) == (
        "p1",
        "node-x",
        4,
        "42",
        "uid-p1",
    )
    assert p.deleting is False
    assert p.count_only is count_only
    if size is None:
        assert p.addresses is None
    else:
        assert p.addresses is not None
        assert p.addresses.size == size
    assert p.cap == kw.get("capacity")
    assert p.capacity() == capacity
    assert p.free() == capacity


def test_from_obj_excluded_addresses_are_not_in_the_pool() -> None:
    p = view(addresses=["10.0.1.0/28"], exclude=["10.0.1.1", "10.0.1.8-10.0.1.9"])
    assert p.addresses is not None
    assert "10.0.1.2" in p.addresses
    for ip in ("10.0.1.0", "10.0.1.1", "10.0.1.8", "10.0.1.9", "10.0.1.15"):
        assert ip not in p.addresses


def test_from_obj_metadata_edge_cases() -> None:
    assert view(deleting=True).deleting is True
    b = body()
    b["metadata"]["generation"] = "7"  # not an int
    del b["metadata"]["resourceVersion"]
    p = PoolView.from_obj(b)
    assert p.generation == 0
    assert p.resource_version == ""


@pytest.mark.parametrize(
    "b", [{}, {"metadata": {}}, {"metadata": {"name": ""}}, {"metadata": {"name": 5}}], ids=str
)
def test_from_obj_without_name_raises(b: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        PoolView.from_obj(b)


INVALID_SPECS = [
    # (spec overrides, expected node_name, substring of spec_error)
    ({"addresses": ["10.0.0.300"]}, "node-a", '"10.0.0.300"'),
    ({"addresses": ["10.0.0.9-10.0.0.1"]}, "node-a", "first address is greater than last"),
    ({"addresses": ["10.0.0.1/33"]}, "node-a", '"10.0.0.1/33"'),
    ({"addresses": ["10.0.0.1/24"]}, "node-a", "host bits"),
    ({"addresses": ["10.0.0.0/24"], "exclude": ["10.0.0.999"]}, "node-a", '"10.0.0.999"'),
    ({"nodeName": None, "addresses": ["10.0.0.1"]}, "", "spec.nodeName"),
    ({"capacity": -1}, "node-a", "spec.capacity"),
    ({"addresses": "10.0.0.1"}, "node-a", "spec.addresses"),
]


@pytest.mark.parametrize(
    ("overrides", "node_name", "error"),
    INVALID_SPECS,
    ids=[
        "octet-out-of-range",
        "reversed-range",
        "prefix-too-long",
        "cidr-host-bits",
        "bad-exclude",
        "missing-node-name",
        "negative-capacity",
        "addresses-not-a-list",
    ],
)
def test_from_obj_invalid_spec(overrides: dict[str, Any], node_name: str, error: str) -> None:
    b = body(allocations={"uid-1": alloc("10.0.0.1"), "uid-2": alloc(None, phase="Bound")})
    for k, v in overrides.items():
        if v is None:
            b["spec"].pop(k, None)
        else:
            b["spec"][k] = v
    p = PoolView.from_obj(b)  # never raises
    assert p.spec_error is not None
    assert error in p.spec_error
    assert p.node_name == node_name
    assert p.addresses is None
    assert p.capacity() == 0
    assert p.free() == 0
    assert set(p.allocations) == {"uid-1", "uid-2"}  # allocations are kept
    assert p.allocations["uid-1"].ip == "10.0.0.1"
    assert pick(p, ALONE, "uid-new") == (False, None)
    assert pick(p, ALONE, "uid-1") == (True, "10.0.0.1")  # a holder keeps its address


def test_from_obj_spec_not_a_mapping() -> None:
    b = body()
    b["spec"] = "garbage"
    p = PoolView.from_obj(b)
    assert p.spec_error is not None
    assert "spec.nodeName" in p.spec_error
    assert p.node_name == ""
    assert p.capacity() == 0


# --------------------------------------------------------------------------- parse_status


def test_parse_status_drops_only_broken_allocations() -> None:
    raw = {
        "capacity": 4,
        "allocated": 9,
        "free": 0,
        "observedGeneration": 3,
        "allocations": {
            "good": alloc("10.0.0.1", pod="ns/good", phase="Bound"),
            "good-count-only": alloc(None, pod="ns/slot"),
            "no-since": {"ip": "10.0.0.2", "pod": "ns/x", "phase": "Bound"},
            "bad-phase": alloc("10.0.0.3", phase="Pending"),
            "ip-not-str": alloc("10.0.0.4") | {"ip": 5},
            "not-a-dict": "10.0.0.5",
            "no-pod": {"ip": "10.0.0.6", "phase": "Bound", "since": SINCE},
        },
    }
    st = parse_status(raw)
    assert set(st.allocations) == {"good", "good-count-only"}
    assert st.allocations["good"].ip == "10.0.0.1"
    assert st.allocations["good"].pod == "ns/good"
    assert st.allocations["good"].phase == "Bound"
    assert st.allocations["good"].since == SINCE_TIME
    assert st.allocations["good-count-only"].ip is None
    assert (st.capacity, st.allocated, st.free, st.observed_generation) == (4, 9, 0, 3)


PARSE_STATUS_CASES = [
    # (raw, expected allocation uids, expected capacity)
    (None, set(), 0),
    ("garbage", set(), 0),
    ([], set(), 0),
    ({"capacity": 3, "allocations": ["10.0.0.1"]}, set(), 3),
    ({"capacity": "lots", "allocations": {"a": alloc("10.0.0.1")}}, {"a"}, 0),
    ({"capacity": 3, "conditions": [{"type": "Ready"}], "allocations": {"a": alloc("10.0.0.1")}}, {"a"}, 0),
    ({"capacity": 3, "conditions": "bad", "allocations": {"a": alloc(None)}}, {"a"}, 0),
]


@pytest.mark.parametrize(
    ("raw", "uids", "capacity"),
    PARSE_STATUS_CASES,
    ids=[
        "none",
        "string",
        "list",
        "allocations-not-a-map",
        "bad-counts-keep-allocations",
        "bad-condition-keeps-allocations",
        "conditions-not-a-list-keeps-allocations",
    ],
)
def test_parse_status_never_fails(raw: Any, uids: set[str], capacity: int) -> None:
    st = parse_status(raw)
    assert set(st.allocations) == uids
    assert st.capacity == capacity


def test_from_obj_with_broken_status_keeps_valid_allocations() -> None:
    b = body(
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"ok": alloc("10.0.0.2"), "broken": {"ip": "10.0.0.1"}},
    )
    p = PoolView.from_obj(b)
    assert set(p.allocations) == {"ok"}
    # The broken allocation's address is not protected any more, the valid one is.
    assert pick(p, ALONE, "new") == (True, "10.0.0.1")


# --------------------------------------------------------------------------- capacity / free

CAPACITY_CASES = [
    # (body kwargs, blocked entries, expected capacity)
    ({"addresses": ["10.0.0.1-10.0.0.10"]}, (), 10),
    ({"addresses": ["10.0.0.1-10.0.0.10"], "capacity": 4}, (), 4),
    ({"addresses": ["10.0.0.1-10.0.0.10"], "capacity": 50}, (), 10),
    ({"addresses": ["10.0.0.1-10.0.0.10"]}, ("10.0.0.1-10.0.0.3",), 7),
    ({"addresses": ["10.0.0.1-10.0.0.10"], "capacity": 8}, ("10.0.0.1-10.0.0.4",), 6),
    ({"addresses": ["10.0.0.1-10.0.0.10"], "capacity": 5}, ("10.0.0.1-10.0.0.2",), 5),
    ({"addresses": ["10.0.0.1-10.0.0.10"]}, ("10.0.0.0/24",), 0),
    ({"addresses": ["10.0.0.1-10.0.0.10"]}, ("10.0.9.1",), 10),
    ({"addresses": ["10.0.0.1-10.0.0.10"], "exclude": ["10.0.0.10"]}, ("10.0.0.9-10.0.0.10",), 8),
    ({"capacity": 7}, ("10.0.0.1",), 7),
    ({}, (), 0),
    ({"addresses": ["fd00::/64"], "capacity": MAX_POOL_ADDRESSES}, (), MAX_POOL_ADDRESSES),
    ({"addresses": ["fd00::/64"], "capacity": 400}, (), 400),
]


@pytest.mark.parametrize(
    ("kw", "blocked_entries", "expected"),
    CAPACITY_CASES,
    ids=[
        "plain",
        "capped",
        "cap-above-size",
        "blocked",
        "cap-and-blocked-blocked-wins",
        "cap-and-blocked-cap-wins",
        "all-blocked",
        "blocked-outside-pool",
        "blocked-overlaps-exclude",
        "count-only-ignores-blocked",
        "count-only-no-cap",
        "ipv6-64-capped-at-the-ceiling",
        "ipv6-64-capped",
    ],
)
def test_capacity(kw: dict[str, Any], blocked_entries: tuple[str, ...], expected: int) -> None:
    p = view(**kw)
    b = address_set(*blocked_entries) if blocked_entries else None
    assert p.capacity(b) == expected
    assert p.free(b) == expected


def test_free_is_capacity_minus_allocated_never_negative() -> None:
    allocs = {f"u{i}": alloc(f"10.0.0.{i}") for i in range(1, 4)}
    assert view(addresses=["10.0.0.1-10.0.0.10"], allocations=allocs).free() == 7
    assert view(addresses=["10.0.0.1-10.0.0.10"], capacity=2, allocations=allocs).free() == 0
    blocked = address_set("10.0.0.1-10.0.0.9")
    assert view(addresses=["10.0.0.1-10.0.0.10"], allocations=allocs).free(blocked) == 0


def test_holder_of() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.2"), "b": alloc(None)})
    assert p.holder_of("10.0.0.2") == "a"
    assert p.holder_of("10.0.0.3") is None


# --------------------------------------------------------------------------- find_conflicts


def conflicts_of(pools: list[PoolView]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {name: (str(c.blocked), c.conflicts) for name, c in find_conflicts(pools).items()}


CONFLICT_CASES = [
    (
        [("a", ["10.0.0.1-10.0.0.10"]), ("b", ["10.0.0.5-10.0.0.20"])],
        {"a": ("10.0.0.5-10.0.0.10", ("b",)), "b": ("10.0.0.5-10.0.0.10", ("a",))},
    ),
    (
        [("a", ["10.0.0.1-10.0.0.10"]), ("b", ["10.0.0.5-10.0.0.15"]), ("c", ["10.0.0.8-10.0.0.20"])],
        {
            "a": ("10.0.0.5-10.0.0.10", ("b", "c")),
            "b": ("10.0.0.5-10.0.0.15", ("a", "c")),
            "c": ("10.0.0.8-10.0.0.15", ("a", "b")),
        },
    ),
    (
        [("c", ["10.0.0.10-10.0.0.15"]), ("a", ["10.0.0.1-10.0.0.5"]), ("b", ["10.0.0.5-10.0.0.10"])],
        {
            "a": ("10.0.0.5", ("b",)),
            "b": ("10.0.0.5, 10.0.0.10", ("a", "c")),
            "c": ("10.0.0.10", ("b",)),
        },
    ),
    (
        [("a", ["10.0.0.1-10.0.0.10"]), ("b", ["10.0.0.5-10.0.0.6"]), ("c", ["10.0.1.0/24"])],
        {"a": ("10.0.0.5-10.0.0.6", ("b",)), "b": ("10.0.0.5-10.0.0.6", ("a",))},
    ),
    ([("a", ["10.0.0.1-10.0.0.5"]), ("b", ["10.0.0.6-10.0.0.10"])], {}),
    ([("a", ["10.0.0.0/24"]), ("b", ["fd00::/120"])], {}),
    ([("a", ["10.0.0.0/24"])], {}),
    ([], {}),
]


@pytest.mark.parametrize(
    ("spec", "expected"),
    CONFLICT_CASES,
    ids=[
        "two-overlapping",
        "three-overlapping",
        "chain-a-b-c",
        "two-overlap-third-apart",
        "adjacent-no-overlap",
        "v4-and-v6",
        "single-pool",
        "no-pools",
    ],
)
def test_find_conflicts(
    spec: list[tuple[str, list[str]]], expected: dict[str, tuple[str, tuple[str, ...]]]
) -> None:
    pools = [view(name=name, addresses=addrs) for name, addrs in spec]
    assert conflicts_of(pools) == expected
    assert conflicts_of(list(reversed(pools))) == expected


def test_find_conflicts_ignores_count_only_invalid_and_excluded() -> None:
    pools = [
        view(name="a", addresses=["10.0.0.0/24"]),
        view(name="count", capacity=5),
        view(name="bad", addresses=["10.0.0.1", "10.0.0.300"]),
        view(name="excl", addresses=["10.0.0.1-10.0.0.3", "10.0.1.1"], exclude=["10.0.0.0/24"]),
    ]
    assert find_conflicts(pools) == {}


def test_find_conflicts_accepts_a_generator() -> None:
    pools = [view(name="a", addresses=["10.0.0.1"]), view(name="b", addresses=["10.0.0.1"])]
    assert set(find_conflicts(p for p in pools)) == {"a", "b"}


def _pairwise_conflicts(pools: list[PoolView]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The definition: intersect every pair of pools."""
    out: dict[str, tuple[AddressSet, set[str]]] = {}
    for i, a in enumerate(pools):
        for b in pools[i + 1 :]:
            if not a.addresses or not b.addresses:
                continue
            shared = a.addresses.intersection(b.addresses)
            if shared:
                for me, other in ((a, b), (b, a)):
                    blocked, names = out.get(me.name, (AddressSet.empty(), set()))
                    out[me.name] = (blocked.union(shared), names | {other.name})
    return {n: (str(b), tuple(sorted(o))) for n, (b, o) in out.items()}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8), st.booleans()), min_size=0, max_size=3),
        min_size=0,
        max_size=8,
    )
)
def test_find_conflicts_matches_pairwise_intersection(specs: list[list[tuple[int, int, bool]]]) -> None:
    """The interval sweep finds exactly the overlaps that intersecting every pair finds."""
    pools = []
    for n, entries in enumerate(specs):
        addrs = [
            f"10.0.0.{lo}-10.0.0.{lo + width}" if not v6 else f"fd00::{lo:x}-fd00::{lo + width:x}"
            for lo, width, v6 in entries
        ]
        pools.append(view(name=f"p{n}", addresses=addrs) if addrs else view(name=f"p{n}", capacity=1))
    assert conflicts_of(pools) == _pairwise_conflicts(pools)


# --------------------------------------------------------------------------- ready_condition

READY_CASES = [
    # (body kwargs, ctx, status, reason, message fragment)
    ({"addresses": ["10.0.0.300"]}, PoolContext(), "False", "InvalidSpec", '"10.0.0.300"'),
    ({"addresses": ["10.0.0.300"]}, PoolContext(node_exists=False), "False", "InvalidSpec", "10.0.0.300"),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        PoolContext(node_exists=False),
        "False",
        "NodeNotFound",
        'node "node-a" does not exist',
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        PoolContext(blocked=address_set("10.0.0.1-10.0.0.2"), conflicts=("pool-b", "pool-c")),
        "False",
        "AddressConflict",
        "10.0.0.1-10.0.0.2 also declared by pool(s) pool-b, pool-c",
    ),
    (
        {
            "addresses": ["10.0.0.1-10.0.0.4"],
            "capacity": 1,
            "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")},
        },
        PoolContext(),
        "False",
        "OverCommitted",
        "2 allocated but capacity is 1",
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.2"], "exclude": ["10.0.0.1-10.0.0.2"]},
        PoolContext(),
        "False",
        "NoAddresses",
        "no usable addresses",
    ),
    ({"addresses": ["10.0.0.1-10.0.0.2"], "capacity": 0}, PoolContext(), "False", "NoAddresses", "no usable"),
    ({}, PoolContext(), "False", "NoCapacity", "no usable addresses"),
    ({"capacity": 0}, PoolContext(), "False", "NoCapacity", "no usable addresses"),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.1")}},
        PoolContext(),
        "True",
        "Ready",
        "3 of 4 free",
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.2"], "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")}},
        PoolContext(),
        "True",
        "Ready",
        "0 of 2 free",
    ),
    ({"capacity": 5}, PoolContext(), "True", "Ready", "5 of 5 free"),
]


@pytest.mark.parametrize(
    ("kw", "ctx", "status", "reason", "fragment"),
    READY_CASES,
    ids=[
        "invalid-spec",
        "invalid-spec-beats-node-not-found",
        "node-not-found",
        "address-conflict",
        "over-committed",
        "no-addresses-all-excluded",
        "no-addresses-capacity-zero",
        "no-capacity-count-only",
        "no-capacity-count-only-zero",
        "ready",
        "ready-but-full",
        "ready-count-only",
    ],
)
def test_ready_condition(
    kw: dict[str, Any], ctx: PoolContext, status: str, reason: str, fragment: str
) -> None:
    got_status, got_reason, message = ready_condition(view(**kw), ctx)
    assert (got_status, got_reason) == (status, reason)
    assert fragment in message


# --------------------------------------------------------------------------- desired_status / refresh

COUNT_CASES = [
    # (body kwargs, ctx blocked entries, capacity, allocated, free)
    ({"addresses": ["10.0.0.1-10.0.0.8"], "allocations": {"a": alloc("10.0.0.1")}}, (), 8, 1, 7),
    (
        {"addresses": ["10.0.0.1-10.0.0.8"], "allocations": {"a": alloc("10.0.0.1")}},
        ("10.0.0.5-10.0.0.8",),
        4,
        1,
        3,
    ),
    (
        {
            "addresses": ["10.0.0.1-10.0.0.8"],
            "capacity": 1,
            "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")},
        },
        (),
        1,
        2,
        0,
    ),
    ({"addresses": ["10.0.0.300"], "allocations": {"a": alloc("10.0.0.1")}}, (), 0, 1, 0),
    ({"capacity": 3, "allocations": {"a": alloc(None)}}, (), 3, 1, 2),
    (
        {"addresses": ["fd00::/64"], "capacity": MAX_POOL_ADDRESSES},
        (),
        MAX_POOL_ADDRESSES,
        0,
        MAX_POOL_ADDRESSES,
    ),
]


@pytest.mark.parametrize(
    ("kw", "blocked_entries", "capacity", "allocated", "free"),
    COUNT_CASES,
    ids=["plain", "blocked", "over-committed", "invalid-spec", "count-only", "huge-ipv6"],
)
def test_desired_status_counts(
    kw: dict[str, Any], blocked_entries: tuple[str, ...], capacity: int, allocated: int, free: int
) -> None:
    ctx = PoolContext(blocked=address_set(*blocked_entries) if blocked_entries else None)
    st = desired_status(view(generation=7, **kw), ctx, now=NOW)
    assert (st.capacity, st.allocated, st.free) == (capacity, allocated, free)
    assert min(st.capacity, st.allocated, st.free) >= 0
    assert st.observed_generation == 7
    ready = [c for c in st.conditions if c.type == "Ready"]
    assert len(ready) == 1
    assert ready[0].observed_generation == 7
    assert ready[0].last_transition_time == NOW


def test_desired_status_with_explicit_allocations() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.2"], allocations={"a": alloc("10.0.0.1")})
    st = desired_status(p, ALONE, allocations={}, now=NOW)
    assert (st.capacity, st.allocated, st.free) == (2, 0, 2)
    assert st.allocations == {}
    assert st.conditions[0].message == "2 of 2 free"


def test_desired_status_keeps_other_conditions_after_ready() -> None:
    other = {"type": "Audited", "status": "True", "reason": "X", "lastTransitionTime": SINCE}
    p = view(addresses=["10.0.0.1"], status={"conditions": [other]})
    st = desired_status(p, ALONE, now=NOW)
    assert [c.type for c in st.conditions] == ["Ready", "Exhausted", "Audited"]
    assert st.conditions[2].reason == "X"


def settled(**kw: Any) -> tuple[dict[str, Any], PoolView]:
    """A pool body whose status is exactly what desired_status says, at SINCE_TIME."""
    b = body(**kw)
    st = desired_status(PoolView.from_obj(b), ALONE, now=SINCE_TIME)
    return b, with_status(b, st)


def test_refresh_none_when_status_is_right() -> None:
    _, p = settled(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1")})
    assert p.status.conditions[0].last_transition_time == SINCE_TIME
    assert refresh(p, ALONE, now=NOW) is None


def test_refresh_when_counts_are_stale() -> None:
    b = body(
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"a": alloc("10.0.0.1")},
        status={"capacity": 4, "allocated": 0, "free": 4},
    )
    p = PoolView.from_obj(b)
    new = refresh(p, ALONE, now=NOW)
    assert new is not None
    assert (new.capacity, new.allocated, new.free) == (4, 1, 3)
    assert new.observed_generation == 1
    assert new.conditions[0].status == "True"
    # Written back, it is stable.
    assert refresh(with_status(b, new), ALONE, now=NOW) is None


STALE_CASES = [
    ("generation", lambda b: b["metadata"].__setitem__("generation", 2)),
    ("capacity", lambda b: b["spec"].__setitem__("capacity", 2)),
    ("exclude", lambda b: b["spec"].__setitem__("exclude", ["10.0.0.4"])),
    ("allocation-removed", lambda b: b["status"]["allocations"].clear()),
    ("observed-generation-missing", lambda b: b["status"].pop("observedGeneration")),
    ("condition-missing", lambda b: b["status"].__setitem__("conditions", [])),
]


@pytest.mark.parametrize(("what", "change"), STALE_CASES, ids=[c[0] for c in STALE_CASES])
def test_refresh_detects_stale_status(what: str, change: Any) -> None:
    b, _ = settled(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1")})
    change(b)
    p = PoolView.from_obj(b)
    new = refresh(p, ALONE, now=NOW)
    assert new is not None, what
    assert refresh(with_status(b, new), ALONE, now=NOW) is None


def test_refresh_on_context_change() -> None:
    _, p = settled(addresses=["10.0.0.1-10.0.0.4"])
    new = refresh(p, PoolContext(node_exists=False), now=NOW)
    assert new is not None
    cond = new.conditions[0]
    assert (cond.status, cond.reason, cond.last_transition_time) == ("False", "NodeNotFound", NOW)


def test_last_transition_time_kept_while_ready_status_unchanged() -> None:
    b, p = settled(addresses=["10.0.0.1-10.0.0.4"])
    # True -> True (message changes): time kept.
    new, _, _, _ = reserve(p, ALONE, "a", "ns/a", now=NOW)
    assert new is not None
    assert new.conditions[0].status == "True"
    assert new.conditions[0].message == "3 of 4 free"
    assert new.conditions[0].last_transition_time == SINCE_TIME
    p = with_status(b, new)
    # True -> False: time moves.
    later = NOW + datetime.timedelta(hours=1)
    st = desired_status(p, PoolContext(node_exists=False), now=later)
    assert st.conditions[0].last_transition_time == later
    p = with_status(b, st)
    # False -> False with a different reason: time kept.
    even_later = later + datetime.timedelta(hours=1)
    st = desired_status(p, PoolContext(blocked=address_set("10.0.0.1"), conflicts=("x",)), now=even_later)
    assert (st.conditions[0].status, st.conditions[0].reason) == ("False", "AddressConflict")
    assert st.conditions[0].last_transition_time == later


# --------------------------------------------------------------------------- age


@pytest.mark.parametrize(
    ("since", "expected"),
    [(ago(30), 30.0), (ago(-30), 0.0), (datetime.datetime(2024, 6, 1, 11, 59, 0), 60.0)],
    ids=["past", "future-counts-as-now", "naive-is-utc"],
)
def test_age(since: str | datetime.datetime, expected: float) -> None:
    t = since if isinstance(since, datetime.datetime) else datetime.datetime.fromisoformat(since)
    assert age(t, NOW) == expected


# --------------------------------------------------------------------------- spec.subnets


def with_subnets(subnets: list[dict[str, Any]], addresses: list[str]) -> PoolView:
    b = body(addresses=addresses)
    b["spec"]["subnets"] = subnets
    return PoolView.from_obj(b)


@pytest.mark.parametrize(
    ("subnets", "addresses", "fragment"),
    [
        (
            [{"cidr": "10.0.1.0/24"}],
            ["10.0.2.1"],
            "spec.addresses: 10.0.2.1 is not inside any of spec.subnets",
        ),
        (
            [{"cidr": "10.0.1.0/24", "gateway": "10.0.2.1"}],
            ["10.0.1.5"],
            "spec.subnets[0].gateway: 10.0.2.1 is not inside",
        ),
        ([{"cidr": "10.0.1.0/24", "routes": [{"dst": "x/0"}]}], ["10.0.1.5"], "spec.subnets.0.routes.0.dst"),
    ],
    ids=["address-outside", "gateway-outside", "malformed-route"],
)
def test_invalid_subnets_are_a_spec_error_and_the_pool_hands_out_nothing(
    subnets: list[dict[str, Any]], addresses: list[str], fragment: str
) -> None:
    p = with_subnets(subnets, addresses)
    assert p.spec_error is not None and fragment in p.spec_error
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "u", "ns/u", now=NOW)
    status, reason, _ = ready_condition(p, ALONE)
    assert (status, reason) == ("False", "InvalidSpec")


# --------------------------------------------------------------------------- deletion

TERMINATING = [
    ({"addresses": ["10.0.0.0/28"]}, ALONE, 0),
    ({"addresses": ["10.0.0.0/28"], "allocations": bound_allocs(1)}, ALONE, 1),
    ({"addresses": ["10.0.0.0/28"], "allocations": bound_allocs(3)}, ALONE, 3),
    (
        {
            "capacity": 5,
            "allocations": {"u1": alloc(None, phase="Bound"), "u2": alloc(None, pod="ns/q", phase="Bound")},
        },
        ALONE,
        2,
    ),
    ({"addresses": ["not-an-ip"], "allocations": bound_allocs(2)}, ALONE, 2),
    ({"addresses": ["10.0.0.1-10.0.0.2"], "allocations": bound_allocs(4)}, ALONE, 4),
    ({"addresses": ["10.0.0.0/28"], "allocations": bound_allocs(2)}, PoolContext(node_exists=False), 2),
    ({}, ALONE, 0),
]


@pytest.mark.parametrize(
    ("kw", "ctx", "n"),
    TERMINATING,
    ids=[
        "empty",
        "one-allocation",
        "three-allocations",
        "count-only",
        "invalid-spec",
        "overcommitted",
        "node-missing",
        "no-addresses",
    ],
)
def test_ready_condition_terminating(kw: dict[str, Any], ctx: PoolContext, n: int) -> None:
    status, reason, message = ready_condition(view(deleting=True, **kw), ctx)
    assert (status, reason) == ("False", "Terminating")
    assert f"{n} allocation" in message


def test_ready_condition_not_terminating_without_deletion_timestamp() -> None:
    assert ready_condition(view(addresses=["10.0.0.0/28"], allocations=bound_allocs(3)), ALONE) == (
        "True",
        "Ready",
        "11 of 14 free",  # a /28 without network and broadcast address
    )


def test_refresh_of_deleting_pool_reports_terminating_and_keeps_allocations() -> None:
    p = view(addresses=["10.0.0.0/28"], allocations=bound_allocs(2), deleting=True)
    new = refresh(p, ALONE, NOW)
    assert new is not None
    assert set(new.allocations) == {"u1", "u2"}
    assert new.allocated == 2
    cond = next(c for c in new.conditions if c.type == "Ready")
    assert (cond.status, cond.reason) == ("False", "Terminating")
    assert "2 allocation" in cond.message


# --------------------------------------------------------------------------- metadata

FINALIZERS = [
    (None, (), False),
    ([], (), False),
    (["ipscheduler.io/allocations"], ("ipscheduler.io/allocations",), False),
    (["a.io/x", "ipscheduler.io/allocations"], ("a.io/x", "ipscheduler.io/allocations"), True),
    (["a.io/x", 5, None, {"k": "v"}, "b.io/y"], ("a.io/x", "b.io/y"), False),
]


@pytest.mark.parametrize(
    ("finalizers", "expected", "deleting"),
    FINALIZERS,
    ids=["absent", "empty", "ours", "two-deleting", "non-strings-dropped"],
)
def test_from_obj_reads_finalizers(finalizers: Any, expected: tuple[str, ...], deleting: bool) -> None:
    p = view(finalizers=finalizers, deleting=deleting, capacity=1)
    assert p.finalizers == expected
    assert p.deleting is deleting


def test_from_obj_null_finalizers() -> None:
    b = body(capacity=1)
    b["metadata"]["finalizers"] = None
    assert PoolView.from_obj(b).finalizers == ()


@pytest.mark.parametrize(
    ("capacity", "allocated", "was", "expected"),
    [
        (10, 10, None, ("True", "NoFreeAddresses")),
        (10, 9, None, ("False", "AddressesFree")),
        (10, 9, "True", ("True", "NearlyNoFreeAddresses")),  # 1 free < 2: still exhausted
        (10, 8, "True", ("False", "AddressesFree")),  # 2 free: cleared
        (100, 96, "True", ("True", "NearlyNoFreeAddresses")),  # 4 free < 5 % of 100
        (100, 95, "True", ("False", "AddressesFree")),
        (1, 0, "True", ("False", "AddressesFree")),  # a one-address pool clears at 1 free
        (0, 0, None, ("False", "NoCapacity")),
        (3, 5, None, ("True", "NoFreeAddresses")),  # over-committed
    ],
    ids=[
        "full",
        "one-free",
        "one-free-was-full",
        "two-free-clears",
        "96-of-100",
        "95-of-100",
        "tiny",
        "empty",
        "over",
    ],
)
def test_exhausted_condition_with_hysteresis(
    capacity: int, allocated: int, was: Literal["True", "False"] | None, expected: tuple[str, str]
) -> None:
    status, reason, _ = exhausted_condition(capacity, allocated, was)
    assert (status, reason) == expected


def test_desired_status_sets_exhausted_and_keeps_it_until_enough_is_free() -> None:
    full = view(
        addresses=["10.0.0.1-10.0.0.3"], allocations={u: alloc(f"10.0.0.{i}") for i, u in enumerate("abc", 1)}
    )
    st = desired_status(full, ALONE, now=NOW)
    exhausted = next(c for c in st.conditions if c.type == "Exhausted")
    assert (exhausted.status, exhausted.message) == ("True", "all 3 addresses are allocated")
    one_free = view(
        addresses=["10.0.0.1-10.0.0.3"],
        allocations={u: alloc(f"10.0.0.{i}") for i, u in enumerate("ab", 1)},
        status={"conditions": [c.model_dump(by_alias=True, mode="json") for c in st.conditions]},
    )
    again = next(c for c in desired_status(one_free, ALONE, now=SINCE).conditions if c.type == "Exhausted")
    assert (again.status, again.reason, again.last_transition_time) == ("True", "NearlyNoFreeAddresses", NOW)


def test_an_unchanged_condition_is_kept_as_it_is() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"a": alloc("10.0.0.1")})
    first = desired_status(p, ALONE, now=NOW)
    again_view = view(
        addresses=["10.0.0.1-10.0.0.3"],
        allocations={"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")},
        status={"conditions": [c.model_dump(by_alias=True, mode="json") for c in first.conditions]},
    )
    again = desired_status(again_view, ALONE, now=SINCE)
    kept = next(c for c in again.conditions if c.type == "Exhausted")
    assert kept is again_view.condition("Exhausted")  # no new model for an unchanged condition
    assert (kept.status, kept.last_transition_time) == ("False", NOW)


# --------------------------------------------------------------------------- dual-stack allocations

MIXED = ["10.0.0.1-10.0.0.4", "fd00::1-fd00::4"]


def dual(v4: str, v6: str, primary_v6: bool = False, **kw: Any) -> dict[str, Any]:
    """A wire-form dual-stack allocation (``alloc``'s keywords): ``ip`` the primary, ``ips`` both."""
    first, second = (v6, v4) if primary_v6 else (v4, v6)
    return alloc(first, **kw) | {"ips": [first, second]}


@pytest.mark.parametrize(
    ("kw", "allocated", "free", "retained", "ready"),
    [
        pytest.param(
            {"addresses": MIXED, "allocations": {"a": dual("10.0.0.1", "fd00::1")}},
            2,
            6,
            0,
            ("True", "Ready", "6 of 8 free"),
            id="one-dual-takes-two",
        ),
        pytest.param(
            {
                "addresses": MIXED,
                "allocations": {
                    "a": dual("10.0.0.1", "fd00::1", primary_v6=True),
                    "b": alloc("10.0.0.2"),
                    "c": alloc(None, phase="Nominated"),
                },
            },
            4,
            4,
            0,
            ("True", "Ready", "4 of 8 free"),
            id="dual-single-and-nominated",
        ),
        pytest.param(
            {"addresses": MIXED, "allocations": {"a": dual("10.0.0.1", "fd00::1", phase="Retained")}},
            2,
            6,
            1,
            ("True", "Ready", "6 of 8 free"),
            id="retained-dual-still-takes-two",
        ),
        pytest.param(
            {
                "addresses": MIXED,
                "capacity": 3,
                "allocations": {"a": dual("10.0.0.1", "fd00::1"), "b": alloc("fd00::2")},
            },
            3,
            0,
            0,
            ("True", "Ready", "0 of 3 free"),
            id="capped-pool-full",
        ),
        pytest.param(
            {"addresses": MIXED, "capacity": 1, "allocations": {"a": dual("10.0.0.1", "fd00::1")}},
            2,
            0,
            0,
            ("False", "OverCommitted", "2 allocated but capacity is 1"),
            id="over-committed-never-negative",
        ),
    ],
)
def test_a_dual_stack_allocation_takes_a_place_per_address(
    kw: dict[str, Any], allocated: int, free: int, retained: int, ready: tuple[str, str, str]
) -> None:
    p = view(**kw)
    assert (p.allocated, p.free()) == (allocated, free)
    st = desired_status(p, ALONE, now=NOW)
    assert (st.allocated, st.free, st.retained) == (allocated, free, retained)
    assert ready_condition(p, ALONE) == ready


def test_a_terminating_pool_counts_allocations_not_places() -> None:
    p = view(addresses=MIXED, deleting=True, allocations={"a": dual("10.0.0.1", "fd00::1")})
    assert ready_condition(p, ALONE) == (
        "False",
        "Terminating",
        "deletion waits until 1 allocation(s) are released",
    )


@pytest.mark.parametrize(
    ("ip", "holder"),
    [
        ("10.0.0.1", "a"),
        ("fd00::1", "a"),
        ("FD00:0::1", "a"),
        ("fd00::2", "b"),
        ("10.0.0.2", None),
        ("fd00::3", None),
        ("junk", None),
    ],
    ids=[
        "primary",
        "second-address",
        "second-address-other-spelling",
        "ipv6-primary",
        "free-v4",
        "free-v6",
        "junk",
    ],
)
def test_holder_of_finds_every_address_of_an_allocation(ip: str, holder: str | None) -> None:
    p = view(
        addresses=MIXED,
        allocations={"a": dual("10.0.0.1", "fd00::1"), "b": dual("10.0.0.3", "fd00::2", primary_v6=True)},
    )
    assert p.holder_of(ip) == holder


@pytest.mark.parametrize(
    ("kw", "holds"),
    [
        pytest.param({"addresses": MIXED}, {}, id="both-inside"),
        pytest.param({"addresses": ["10.0.0.1-10.0.0.4"]}, {"fd00::1": "pool-a"}, id="ipv6-outside"),
        pytest.param({"addresses": ["fd00::1-fd00::4"]}, {"10.0.0.1": "pool-a"}, id="ipv4-outside"),
        pytest.param(
            {"addresses": ["10.0.1.0/30", "fd00:1::1"]},
            {"10.0.0.1": "pool-a", "fd00::1": "pool-a"},
            id="both-outside",
        ),
        pytest.param({"capacity": 4}, {"10.0.0.1": "pool-a", "fd00::1": "pool-a"}, id="count-only"),
        pytest.param(
            {"addresses": MIXED, "exclude": ["fd00::1"]}, {"fd00::1": "pool-a"}, id="ipv6-excluded-by-an-edit"
        ),
    ],
)
def test_foreign_holds_lists_every_address_outside_the_spec(
    kw: dict[str, Any], holds: dict[str, str]
) -> None:
    allocs = {"a": dual("10.0.0.1", "FD00:0::1", phase="Bound")}
    assert foreign_holds(view(allocations=allocs, **kw)) == holds


@pytest.mark.parametrize(
    ("kw", "allocation", "freed"),
    [
        pytest.param(
            {"addresses": MIXED}, dual("10.0.0.1", "fd00::1", phase="Bound"), True, id="both-inside"
        ),
        pytest.param(
            {"addresses": MIXED},
            dual("10.0.0.1", "fd00::1", primary_v6=True),
            True,
            id="ipv6-primary-reserved",
        ),
        pytest.param(
            {"addresses": ["10.0.0.1-10.0.0.4"]},
            dual("10.0.0.1", "fd00::1", phase="Bound"),
            False,
            id="ipv6-outside",
        ),
        pytest.param(
            {"addresses": ["fd00::1-fd00::4"]},
            dual("10.0.0.1", "fd00::1", phase="Bound"),
            False,
            id="ipv4-outside",
        ),
        pytest.param(
            {"addresses": MIXED, "exclude": ["fd00::1"]},
            dual("10.0.0.1", "fd00::1", phase="Bound"),
            False,
            id="ipv6-excluded",
        ),
        pytest.param(
            {"addresses": MIXED}, dual("10.0.0.1", "fd00::1", phase="Retained"), False, id="retained-is-kept"
        ),
    ],
)
def test_freed_by_eviction_of_a_dual_stack_pod(
    kw: dict[str, Any], allocation: dict[str, Any], freed: bool
) -> None:
    assert freed_by_eviction(view(allocations={"a": allocation}, **kw), "a") is freed


DUAL_SUBNETS = [
    {
        "cidr": "10.0.1.0/24",
        "gateway": "10.0.1.1",
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.0.1.254"}],
    },
    {"cidr": "fd00:1::/64", "gateway": "fd00:1::1", "routes": [{"dst": "::/0"}]},
]
V4_ENTRY = {"address": "10.0.1.2/24", "gateway": "10.0.1.1"}
V6_ENTRY = {"address": "fd00:1::10/64", "gateway": "fd00:1::1"}
V4_ROUTES = [{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, {"dst": "10.9.0.0/16", "gw": "10.0.1.254"}]
V6_ROUTES = [{"dst": "::/0", "gw": "fd00:1::1"}]


@pytest.mark.parametrize(
    ("subnets", "ips", "expected"),
    [
        pytest.param(
            DUAL_SUBNETS,
            ("10.0.1.2", "fd00:1::10"),
            {"ips": [V4_ENTRY, V6_ENTRY], "routes": V4_ROUTES + V6_ROUTES},
            id="ipv4-primary",
        ),
        pytest.param(
            DUAL_SUBNETS,
            ("fd00:1::10", "10.0.1.2"),
            {"ips": [V6_ENTRY, V4_ENTRY], "routes": V4_ROUTES + V6_ROUTES},
            id="ipv6-primary-ips-in-order-ipv4-routes-first",
        ),
        pytest.param(
            DUAL_SUBNETS,
            ("FD00:1:0::10", "10.0.1.2"),
            {"ips": [V6_ENTRY, V4_ENTRY], "routes": V4_ROUTES + V6_ROUTES},
            id="canonical",
        ),
        pytest.param(
            DUAL_SUBNETS[:1],
            ("10.0.1.2", "fd00:1::10"),
            {"ips": [V4_ENTRY, {"address": "fd00:1::10/128"}], "routes": V4_ROUTES},
            id="ipv6-without-a-subnet-host-route",
        ),
        pytest.param(
            [],
            ("fd00:1::10", "10.0.1.2"),
            {"ips": [{"address": "fd00:1::10/128"}, {"address": "10.0.1.2/32"}]},
            id="no-subnets-no-routes",
        ),
        pytest.param(
            DUAL_SUBNETS,
            ("10.0.1.2", "10.0.1.3"),
            {"ips": [V4_ENTRY, {"address": "10.0.1.3/24", "gateway": "10.0.1.1"}], "routes": V4_ROUTES},
            id="same-subnet-routes-once",
        ),
        pytest.param(
            [{"cidr": "fd00:1::/64", "routes": [{"dst": "::/0", "gw": "fd00:1::1"}]}, DUAL_SUBNETS[0]],
            ("fd00:1::10", "10.0.1.2"),
            {"ips": [{"address": "fd00:1::10/64"}, V4_ENTRY], "routes": V4_ROUTES + V6_ROUTES},
            id="subnet-order-does-not-matter",
        ),
    ],
)
def test_network_of_all(
    subnets: list[dict[str, Any]], ips: tuple[str, ...], expected: dict[str, Any]
) -> None:
    v6_subnet = not subnets or any(":" in s["cidr"] for s in subnets)
    addresses = ["10.0.1.2-10.0.1.9", *(["fd00:1::10/126"] if v6_subnet else [])]  # inside the subnets
    p = view(addresses=addresses, subnets=subnets)
    assert p.spec_error is None
    assert network_of_all(p, ips) == expected


@pytest.mark.parametrize(
    "ip", ["10.0.1.2", "fd00:1::10", "FD00:1::10", "10.0.7.7"], ids=["v4", "v6", "v6-upper", "outside"]
)
def test_network_of_all_of_one_address_is_network_of(ip: str) -> None:
    p = view(addresses=["10.0.1.2-10.0.1.9", "fd00:1::10/126"], subnets=DUAL_SUBNETS)
    assert network_of_all(p, (ip,)) == network_of(p, ip)


def test_network_of_all_refuses_what_is_not_an_address() -> None:
    p = view(addresses=["10.0.1.2-10.0.1.9"], subnets=DUAL_SUBNETS)
    with pytest.raises(AddressError):
        network_of_all(p, ("10.0.1.2", "junk"))


# --------------------------------------------------------------------------- a further interface's network

OTHER_V4 = {"dst": "10.9.0.0/16", "gw": "10.0.1.254"}
OTHER_V6 = {"dst": "fd00:9::/48", "gw": "fd00:1::1"}


@pytest.mark.parametrize(
    ("routes", "kept"),
    [
        pytest.param([{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, OTHER_V4], [OTHER_V4], id="ipv4-default-goes"),
        pytest.param([{"dst": "::/0", "gw": "fd00:1::1"}, OTHER_V6], [OTHER_V6], id="ipv6-default-goes"),
        pytest.param(
            [{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, OTHER_V4, {"dst": "::/0", "gw": "fd00:1::1"}, OTHER_V6],
            [OTHER_V4, OTHER_V6],
            id="both-families-others-kept-in-order",
        ),
        pytest.param(
            [{"dst": "0.0.0.0/0", "gw": "10.0.1.1"}, {"dst": "::/0"}], None, id="none-left-no-routes-key"
        ),
        pytest.param([OTHER_V4], [OTHER_V4], id="no-default-unchanged"),
        pytest.param(None, None, id="no-routes"),
    ],
)
def test_without_default_route(
    routes: list[dict[str, str]] | None, kept: list[dict[str, str]] | None
) -> None:
    ips = [{"address": "10.0.1.2/24", "gateway": "10.0.1.1"}]
    network: dict[str, Any] = {"ips": ips, **({"routes": routes} if routes is not None else {})}
    got = without_default_route(network)
    assert got == {"ips": ips, **({"routes": kept} if kept is not None else {})}
    assert network == {"ips": ips, **({"routes": routes} if routes is not None else {})}, (
        "not changed in place"
    )


def test_a_pools_default_route_in_any_spelling_is_left_out_of_a_further_interfaces_network() -> None:
    """``spec.subnets`` routes are read as CIDRs: ``10.0.0.0/0`` is the default route too."""
    subnets = [
        {
            "cidr": "10.0.1.0/24",
            "gateway": "10.0.1.1",
            "routes": [{"dst": "10.0.0.0/0"}, {"dst": "10.9.0.0/16"}],
        },
        {"cidr": "fd00:1::/64", "routes": [{"dst": "0::0/0", "gw": "fd00:1::1"}]},
    ]
    p = view(addresses=["10.0.1.2-10.0.1.9", "fd00:1::10/126"], subnets=subnets)
    assert p.spec_error is None
    assert without_default_route(network_of_all(p, ("10.0.1.2", "fd00:1::10"))) == {
        "ips": [{"address": "10.0.1.2/24", "gateway": "10.0.1.1"}, {"address": "fd00:1::10/64"}],
        "routes": [{"dst": "10.9.0.0/16", "gw": "10.0.1.1"}],
    }
