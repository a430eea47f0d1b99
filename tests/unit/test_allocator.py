"""Unit tests for ipscheduler.underlayip.allocator (pure functions over NodeIPPool views, no server)."""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipscheduler.underlayip.addresses import AddressSet
from ipscheduler.underlayip.allocator import (
    AdoptConflict,
    PoolFull,
    ReservedElsewhere,
    adopt,
    available,
    mark_bound,
    pick,
    release,
    reserve,
)
from ipscheduler.underlayip.models import NodeIPPoolStatus
from ipscheduler.underlayip.pool import (
    MAX_REPORTED,
    PoolContext,
    PoolView,
    age,
    desired_status,
    find_conflicts,
    parse_status,
    ready_condition,
    refresh,
)

SINCE = "2024-01-01T00:00:00Z"
T0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
NOW = datetime.datetime(2024, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
CTX = PoolContext()


def alloc(ip: str | None, pod: str = "ns/p", phase: str = "Reserved", since: str = SINCE) -> dict[str, Any]:
    """A wire-form allocation."""
    out: dict[str, Any] = {"pod": pod, "phase": phase, "since": since}
    if ip is not None:
        out["ip"] = ip
    return out


def body(
    name: str = "pool-a",
    node: str | None = "node-a",
    addresses: list[str] | None = None,
    exclude: list[str] | None = None,
    capacity: int | None = None,
    allocations: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    rv: str = "1",
    deleting: bool = False,
) -> dict[str, Any]:
    """A NodeIPPool body as the API server would return it."""
    spec: dict[str, Any] = {}
    if node is not None:
        spec["nodeName"] = node
    if addresses is not None:
        spec["addresses"] = addresses
    if exclude is not None:
        spec["exclude"] = exclude
    if capacity is not None:
        spec["capacity"] = capacity
    meta: dict[str, Any] = {
        "name": name,
        "resourceVersion": rv,
        "generation": generation,
        "uid": f"uid-{name}",
    }
    if deleting:
        meta["deletionTimestamp"] = SINCE
    st = dict(status or {})
    if allocations is not None:
        st["allocations"] = allocations
    out: dict[str, Any] = {"apiVersion": "ipscheduler.io/v1alpha1", "kind": "NodeIPPool", "metadata": meta}
    out["spec"] = spec
    if st:
        out["status"] = st
    return out


def view(**kw: Any) -> PoolView:
    return PoolView.from_obj(body(**kw))


def blocked(*entries: str) -> AddressSet:
    return AddressSet.from_entries(list(entries))


def ips(status: NodeIPPoolStatus) -> dict[str, str | None]:
    return {uid: a.ip for uid, a in status.allocations.items()}


def with_status(b: dict[str, Any], status: NodeIPPoolStatus) -> PoolView:
    """Write ``status`` into body ``b`` (as the API server would), bump the RV, re-parse."""
    b["status"] = status.to_wire()
    b["metadata"]["resourceVersion"] = str(int(b["metadata"]["resourceVersion"]) + 1)
    return PoolView.from_obj(b)


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
    assert pick(p, CTX, "uid-new") == (False, None)
    assert pick(p, CTX, "uid-1") == (True, "10.0.0.1")  # a holder keeps its address


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
    assert st.allocations["good"].since == T0
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
    assert pick(p, CTX, "new") == (True, "10.0.0.1")


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
    ({"addresses": ["fd00::/64"]}, (), MAX_REPORTED),
    ({"addresses": ["fd00::/64"], "capacity": 1000}, (), 1000),
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
        "ipv6-64-clamped",
        "ipv6-64-capped",
    ],
)
def test_capacity(kw: dict[str, Any], blocked_entries: tuple[str, ...], expected: int) -> None:
    p = view(**kw)
    b = blocked(*blocked_entries) if blocked_entries else None
    assert p.capacity(b) == expected
    assert p.free(b) == expected


def test_free_is_capacity_minus_allocated_never_negative() -> None:
    allocs = {f"u{i}": alloc(f"10.0.0.{i}") for i in range(1, 4)}
    assert view(addresses=["10.0.0.1-10.0.0.10"], allocations=allocs).free() == 7
    assert view(addresses=["10.0.0.1-10.0.0.10"], capacity=2, allocations=allocs).free() == 0
    assert view(addresses=["10.0.0.1-10.0.0.10"], allocations=allocs).free(blocked("10.0.0.1-10.0.0.9")) == 0


def test_holder_of() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.2"), "b": alloc(None)})
    assert p.holder_of("10.0.0.2") == "a"
    assert p.holder_of("10.0.0.3") is None


# --------------------------------------------------------------------------- pick

PICK_CASES = [
    # (body kwargs, blocked entries, uid, expected)
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, (), "new", (True, "10.0.0.1")),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")}},
        (),
        "new",
        (True, "10.0.0.3"),
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.3")}},
        (),
        "new",
        (True, "10.0.0.2"),
    ),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.1"]}, (), "new", (True, "10.0.0.2")),
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, ("10.0.0.1-10.0.0.2",), "new", (True, "10.0.0.3")),
    ({"addresses": ["10.0.0.9", "10.0.0.3", "10.0.0.5"]}, (), "new", (True, "10.0.0.3")),
    ({"addresses": ["fd00::1", "10.0.0.200"]}, (), "new", (True, "10.0.0.200")),
    (
        {"addresses": ["fd00::1-fd00::3"], "allocations": {"a": alloc("FD00:0::1")}},
        (),
        "new",
        (True, "fd00::2"),
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.3")}},
        (),
        "a",
        (True, "10.0.0.3"),
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.2"], "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")}},
        (),
        "b",
        (True, "10.0.0.2"),
    ),
    (
        {"addresses": ["10.0.0.1"], "deleting": True, "allocations": {"a": alloc("10.0.0.1")}},
        (),
        "a",
        (True, "10.0.0.1"),
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.4")}},
        ("10.0.0.0/24",),
        "a",
        (True, "10.0.0.4"),
    ),
    (
        {"addresses": ["10.0.0.1-10.0.0.2"], "allocations": {"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")}},
        (),
        "new",
        (False, None),
    ),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "deleting": True}, (), "new", (False, None)),
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, ("10.0.0.1-10.0.0.4",), "new", (False, None)),
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "capacity": 1, "allocations": {"a": alloc("10.0.0.1")}},
        (),
        "new",
        (False, None),
    ),
    ({"capacity": 2, "allocations": {"a": alloc(None)}}, (), "new", (True, None)),
    ({"capacity": 1, "allocations": {"a": alloc(None)}}, (), "new", (False, None)),
    ({"capacity": 1, "allocations": {"a": alloc(None)}}, (), "a", (True, None)),
]


@pytest.mark.parametrize(
    ("kw", "blocked_entries", "uid", "expected"),
    PICK_CASES,
    ids=[
        "empty-pool-lowest",
        "skips-taken",
        "fills-gap-first",
        "skips-excluded",
        "skips-blocked",
        "lowest-regardless-of-entry-order",
        "ipv4-before-ipv6",
        "non-canonical-taken-still-taken",
        "holder-keeps-its-ip",
        "holder-keeps-ip-in-full-pool",
        "holder-keeps-ip-in-deleting-pool",
        "holder-keeps-blocked-ip",
        "full",
        "deleting",
        "all-blocked",
        "capacity-cap-reached",
        "count-only-slot",
        "count-only-full",
        "count-only-holder",
    ],
)
def test_pick(
    kw: dict[str, Any], blocked_entries: tuple[str, ...], uid: str, expected: tuple[bool, str | None]
) -> None:
    ctx = PoolContext(blocked=blocked(*blocked_entries) if blocked_entries else None)
    assert pick(view(**kw), ctx, uid) == expected


# --------------------------------------------------------------------------- reserve


def test_reserve_writes_a_reserved_allocation_and_is_pure() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1", phase="Bound")})
    new, ip = reserve(p, CTX, "b", "ns/b", now=NOW)
    assert ip == "10.0.0.2"
    assert new is not None
    assert ips(new) == {"a": "10.0.0.1", "b": "10.0.0.2"}
    got = new.allocations["b"]
    assert (got.pod, got.phase, got.since) == ("ns/b", "Reserved", NOW)
    assert new.allocations["a"].phase == "Bound"
    assert (new.capacity, new.allocated, new.free) == (4, 2, 2)
    assert set(p.allocations) == {"a"}  # the input view is not mutated


def test_reserve_already_holding_writes_nothing() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.3")})
    assert reserve(p, CTX, "a", "ns/a") == (None, "10.0.0.3")


RESERVE_FULL_CASES = [
    ({"addresses": ["10.0.0.1"], "allocations": {"a": alloc("10.0.0.1")}}, ()),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "capacity": 1, "allocations": {"a": alloc("10.0.0.4")}}, ()),
    ({"addresses": ["10.0.0.300"]}, ()),
    ({"node": None, "addresses": ["10.0.0.1"]}, ()),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "deleting": True}, ()),
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, ("10.0.0.1-10.0.0.4",)),
    ({"addresses": ["10.0.0.0/30"], "exclude": ["10.0.0.0/30"]}, ()),
    ({"capacity": 1, "allocations": {"a": alloc(None)}}, ()),
    ({}, ()),
]


@pytest.mark.parametrize(
    ("kw", "blocked_entries"),
    RESERVE_FULL_CASES,
    ids=[
        "all-taken",
        "capacity-reached",
        "invalid-address",
        "invalid-missing-node",
        "deleting",
        "all-blocked",
        "all-excluded",
        "count-only-full",
        "count-only-no-capacity",
    ],
)
def test_reserve_raises_pool_full(kw: dict[str, Any], blocked_entries: tuple[str, ...]) -> None:
    ctx = PoolContext(blocked=blocked(*blocked_entries) if blocked_entries else None)
    p = view(name="the-pool", **kw)
    with pytest.raises(PoolFull, match="the-pool"):
        reserve(p, ctx, "new", "ns/new")


def test_reserve_count_only_gives_no_ip_and_respects_capacity() -> None:
    b = body(capacity=2)
    p = PoolView.from_obj(b)
    for uid in ("a", "b"):
        new, ip = reserve(p, CTX, uid, f"ns/{uid}", now=NOW)
        assert ip is None
        assert new is not None
        assert new.allocations[uid].ip is None
        p = with_status(b, new)
    assert (p.status.capacity, p.status.allocated, p.status.free) == (2, 2, 0)
    with pytest.raises(PoolFull):
        reserve(p, CTX, "c", "ns/c")
    assert reserve(p, CTX, "a", "ns/a") == (None, None)


def test_reserve_never_double_allocates() -> None:
    """Reserve 50 pods one by one on a /26 (62 usable) with excludes: all distinct, in the pool."""
    exclude = ["10.20.30.1", "10.20.30.10-10.20.30.12", "10.20.30.40/30"]
    b = body(addresses=["10.20.30.0/26"], exclude=exclude)
    p = PoolView.from_obj(b)
    excluded = AddressSet.from_entries(exclude)
    network = ipaddress.ip_network("10.20.30.0/26")
    usable = 62 - 1 - 3 - 4
    assert p.capacity() == usable
    got: list[str] = []
    for i in range(50):
        uid = f"uid-{i}"
        new, ip = reserve(p, CTX, uid, f"ns/pod-{i}", now=NOW)
        assert new is not None
        assert ip is not None
        got.append(ip)
        p = with_status(b, new)
        assert p.allocations[uid].ip == ip
        assert (p.status.allocated, p.status.free) == (i + 1, usable - i - 1)
    assert len(set(got)) == 50
    assert got == sorted(got, key=ipaddress.ip_address)  # lowest first
    for ip in got:
        addr = ipaddress.ip_address(ip)
        assert addr in network
        assert addr not in (network.network_address, network.broadcast_address)
        assert ip not in excluded
        assert p.addresses is not None
        assert ip in p.addresses
    # Re-reserving is idempotent, the rest fills up, then the pool is full.
    assert reserve(p, CTX, "uid-7", "ns/pod-7") == (None, got[7])
    for i in range(50, usable):
        new, ip = reserve(p, CTX, f"uid-{i}", f"ns/pod-{i}")
        assert new is not None
        assert ip is not None
        got.append(ip)
        p = with_status(b, new)
    assert len(set(got)) == usable
    with pytest.raises(PoolFull):
        reserve(p, CTX, "one-too-many", "ns/x")
    # Releasing one frees exactly that address, which is handed out next.
    freed = got[20]
    rel = release(p, CTX, "uid-20")
    assert rel is not None
    p = with_status(b, rel)
    assert reserve(p, CTX, "late", "ns/late")[1] == freed


# --------------------------------------------------------------------------- mark_bound / release


def test_mark_bound() -> None:
    p = view(
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"a": alloc("10.0.0.1", pod="ns/a"), "b": alloc("10.0.0.2", phase="Bound")},
    )
    new = mark_bound(p, CTX, "a")
    assert new is not None
    assert new.allocations["a"].phase == "Bound"
    assert new.allocations["a"].ip == "10.0.0.1"
    assert new.allocations["a"].pod == "ns/a"
    assert new.allocations["a"].since == T0
    assert new.allocations["b"].phase == "Bound"
    assert new.allocated == 2
    assert p.allocations["a"].phase == "Reserved"  # pure
    assert mark_bound(p, CTX, "b") is None  # already Bound
    assert mark_bound(p, CTX, "nobody") is None


def test_release() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")})
    new = release(p, CTX, "a")
    assert new is not None
    assert ips(new) == {"b": "10.0.0.2"}
    assert (new.capacity, new.allocated, new.free) == (4, 1, 3)
    assert release(p, CTX, "nobody") is None
    assert set(p.allocations) == {"a", "b"}


def test_release_from_invalid_pool_still_works() -> None:
    p = view(addresses=["10.0.0.300"], allocations={"a": alloc("10.0.0.1")})
    new = release(p, CTX, "a")
    assert new is not None
    assert new.allocations == {}


# --------------------------------------------------------------------------- adopt

ADOPT_OK = [
    # (body kwargs, uid, ip)
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, "x", "10.0.0.3"),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.1")}}, "x", "10.0.0.2"),
    ({"addresses": ["10.0.0.1"], "allocations": {"a": alloc("10.0.0.1")}, "capacity": 1}, "x", None),
    ({"capacity": 3}, "x", None),
]


@pytest.mark.parametrize(
    ("kw", "uid", "ip"),
    ADOPT_OK,
    ids=["free-ip", "next-to-another", "no-ip-over-capacity", "count-only"],
)
def test_adopt_ok(kw: dict[str, Any], uid: str, ip: str | None) -> None:
    p = view(**kw)
    new = adopt(p, CTX, uid, "ns/x", ip, now=NOW)
    assert new is not None
    got = new.allocations[uid]
    assert (got.ip, got.pod, got.phase, got.since) == (ip, "ns/x", "Bound", NOW)
    assert new.allocated == len(p.allocations) + 1
    for other, a in p.allocations.items():
        assert new.allocations[other] == a


def test_adopt_already_recorded_returns_none() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1")})
    assert adopt(p, CTX, "a", "ns/a", "10.0.0.1") is None
    assert adopt(p, CTX, "a", "ns/a", "10.0.0.4") is None


ADOPT_CONFLICTS = [
    # (body kwargs, ip, message fragment)
    (
        {"addresses": ["10.0.0.1-10.0.0.4"], "allocations": {"a": alloc("10.0.0.2")}},
        "10.0.0.2",
        r"held by pod ns/p \(UID a\)",
    ),
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, "10.0.0.9", "not in pool"),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.3"]}, "10.0.0.3", "not in pool"),
    ({"addresses": ["10.0.0.0/30"]}, "10.0.0.0", "not in pool"),
    ({"addresses": ["10.0.0.1-10.0.0.4"]}, "not-an-ip", "is not an IP"),
    ({"capacity": 3}, "10.0.0.1", "not in pool"),
    ({"addresses": ["10.0.0.300"]}, "10.0.0.1", "not in pool"),
]


@pytest.mark.parametrize(
    ("kw", "ip", "fragment"),
    ADOPT_CONFLICTS,
    ids=[
        "held-by-another",
        "outside",
        "excluded",
        "network-address",
        "garbage",
        "count-only-with-ip",
        "invalid-spec",
    ],
)
def test_adopt_conflict(kw: dict[str, Any], ip: str, fragment: str) -> None:
    with pytest.raises(AdoptConflict, match=fragment):
        adopt(view(**kw), CTX, "x", "ns/x", ip)


@pytest.mark.parametrize("ip", ["FD00::1", "fd00:0::1", " fd00::1"], ids=["uppercase", "zeros", "whitespace"])
def test_adopt_non_canonical_spelling_of_held_ip_conflicts(ip: str) -> None:
    p = view(addresses=["fd00::1-fd00::4"], allocations={"a": alloc("fd00::1", phase="Bound")})
    with pytest.raises(AdoptConflict):
        adopt(p, CTX, "x", "ns/x", ip)


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
        PoolContext(blocked=blocked("10.0.0.1-10.0.0.2"), conflicts=("pool-b", "pool-c")),
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
    ({"addresses": ["fd00::/64"]}, (), MAX_REPORTED, 0, MAX_REPORTED),
]


@pytest.mark.parametrize(
    ("kw", "blocked_entries", "capacity", "allocated", "free"),
    COUNT_CASES,
    ids=["plain", "blocked", "over-committed", "invalid-spec", "count-only", "huge-ipv6"],
)
def test_desired_status_counts(
    kw: dict[str, Any], blocked_entries: tuple[str, ...], capacity: int, allocated: int, free: int
) -> None:
    ctx = PoolContext(blocked=blocked(*blocked_entries) if blocked_entries else None)
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
    st = desired_status(p, CTX, allocations={}, now=NOW)
    assert (st.capacity, st.allocated, st.free) == (2, 0, 2)
    assert st.allocations == {}
    assert st.conditions[0].message == "2 of 2 free"


def test_desired_status_keeps_other_conditions_after_ready() -> None:
    other = {"type": "Audited", "status": "True", "reason": "X", "lastTransitionTime": SINCE}
    p = view(addresses=["10.0.0.1"], status={"conditions": [other]})
    st = desired_status(p, CTX, now=NOW)
    assert [c.type for c in st.conditions] == ["Ready", "Audited"]
    assert st.conditions[1].reason == "X"


def settled(**kw: Any) -> tuple[dict[str, Any], PoolView]:
    """A pool body whose status is exactly what desired_status says, at T0."""
    b = body(**kw)
    st = desired_status(PoolView.from_obj(b), CTX, now=T0)
    return b, with_status(b, st)


def test_refresh_none_when_status_is_right() -> None:
    _, p = settled(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1")})
    assert p.status.conditions[0].last_transition_time == T0
    assert refresh(p, CTX, now=NOW) is None


def test_refresh_when_counts_are_stale() -> None:
    b = body(
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"a": alloc("10.0.0.1")},
        status={"capacity": 4, "allocated": 0, "free": 4},
    )
    p = PoolView.from_obj(b)
    new = refresh(p, CTX, now=NOW)
    assert new is not None
    assert (new.capacity, new.allocated, new.free) == (4, 1, 3)
    assert new.observed_generation == 1
    assert new.conditions[0].status == "True"
    # Written back, it is stable.
    assert refresh(with_status(b, new), CTX, now=NOW) is None


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
    new = refresh(p, CTX, now=NOW)
    assert new is not None, what
    assert refresh(with_status(b, new), CTX, now=NOW) is None


def test_refresh_on_context_change() -> None:
    _, p = settled(addresses=["10.0.0.1-10.0.0.4"])
    new = refresh(p, PoolContext(node_exists=False), now=NOW)
    assert new is not None
    cond = new.conditions[0]
    assert (cond.status, cond.reason, cond.last_transition_time) == ("False", "NodeNotFound", NOW)


def test_last_transition_time_kept_while_ready_status_unchanged() -> None:
    b, p = settled(addresses=["10.0.0.1-10.0.0.4"])
    # True -> True (message changes): time kept.
    new, _ = reserve(p, CTX, "a", "ns/a", now=NOW)
    assert new is not None
    assert new.conditions[0].status == "True"
    assert new.conditions[0].message == "3 of 4 free"
    assert new.conditions[0].last_transition_time == T0
    p = with_status(b, new)
    # True -> False: time moves.
    later = NOW + datetime.timedelta(hours=1)
    st = desired_status(p, PoolContext(node_exists=False), now=later)
    assert st.conditions[0].last_transition_time == later
    p = with_status(b, st)
    # False -> False with a different reason: time kept.
    even_later = later + datetime.timedelta(hours=1)
    st = desired_status(p, PoolContext(blocked=blocked("10.0.0.1"), conflicts=("x",)), now=even_later)
    assert (st.conditions[0].status, st.conditions[0].reason) == ("False", "AddressConflict")
    assert st.conditions[0].last_transition_time == later


# --------------------------------------------------------------------------- ownership of reservations


def owned(ip: str, by: str | None, phase: str = "Reserved", since: str = SINCE) -> dict[str, Any]:
    out = alloc(ip, pod="ns/a", phase=phase, since=since)
    if by is not None:
        out["reservedBy"] = by
    return out


def at(seconds_before_now: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds_before_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


OWNERSHIP = [
    # (existing allocation of pod "a", expected: "write"/"none" + ip, or the exception)
    (None, ("write", "10.0.0.1")),
    (owned("10.0.0.3", "me/1"), ("none", "10.0.0.3")),
    (owned("10.0.0.3", "other/7", since=at(5)), ReservedElsewhere),
    (owned("10.0.0.3", None, since=at(5)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", since=at(60)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", since=at(61)), ("write", "10.0.0.3")),
    (owned("10.0.0.3", "other/7", since=at(-3600)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", phase="Bound", since=at(3600)), ReservedElsewhere),
]


@pytest.mark.parametrize(
    ("existing", "expected"),
    OWNERSHIP,
    ids=[
        "new",
        "own-write-landed-already",
        "another-cycle-in-flight",
        "unowned-young",
        "another-cycle-exactly-ttl",
        "abandoned-taken-over",
        "since-in-the-future-counts-as-now",
        "bound-never-taken",
    ],
)
def test_reserve_on_behalf_of_a_cycle(existing: dict[str, Any] | None, expected: Any) -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": existing} if existing else {})
    if expected is ReservedElsewhere:
        with pytest.raises(ReservedElsewhere, match="allocation of the pod made by"):
            reserve(p, CTX, "a", "ns/a", now=NOW, owner="me/1", takeover_after=60)
        return
    new, ip = reserve(p, CTX, "a", "ns/a", now=NOW, owner="me/1", takeover_after=60)
    kind, want_ip = expected
    assert ip == want_ip
    if kind == "none":
        assert new is None
    else:
        assert new is not None
        got = new.allocations["a"]
        assert (got.ip, got.reserved_by, got.since, got.phase) == (want_ip, "me/1", NOW, "Reserved")


LEASE_TAKEN = NOW - datetime.timedelta(seconds=10)
"""This replica took the scheduler's Lease 10 s before NOW."""

TAKEOVER_AT_LEASE = [
    # (existing allocation of pod "a", takeover_before, taken over?)
    (owned("10.0.0.3", "old-leader/7", since=at(30)), LEASE_TAKEN, True),
    (owned("10.0.0.3", "old-leader/7", since=at(5)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "me/2", since=at(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "old-leader/7", phase="Bound", since=at(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", None, since=at(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "old-leader/7", since=at(30)), None, False),
]


@pytest.mark.parametrize(
    ("existing", "takeover_before", "taken"),
    TAKEOVER_AT_LEASE,
    ids=[
        "previous-leaders-reservation-taken-at-once",
        "other-replica-after-our-lease-waits-for-ttl",
        "own-replicas-other-cycle-waits-for-ttl",
        "bound-never-taken",
        "unowned-waits-for-ttl",
        "no-leader-election-waits-for-ttl",
    ],
)
def test_reserve_takes_over_the_previous_leaders_reservations(
    existing: dict[str, Any], takeover_before: datetime.datetime | None, taken: bool
) -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": existing})
    kwargs: dict[str, Any] = {"now": NOW, "owner": "me/1", "takeover_after": 60}
    if not taken:
        with pytest.raises(ReservedElsewhere):
            reserve(p, CTX, "a", "ns/a", takeover_before=takeover_before, **kwargs)
        return
    new, ip = reserve(p, CTX, "a", "ns/a", takeover_before=takeover_before, **kwargs)
    assert new is not None and ip == "10.0.0.3"
    got = new.allocations["a"]
    assert (got.ip, got.reserved_by, got.since, got.phase) == ("10.0.0.3", "me/1", NOW, "Reserved")


RELEASES = [
    ({}, True),
    ({"owner": "me/1"}, True),
    ({"owner": "other/2"}, False),
    ({"expect": "same"}, True),
    ({"expect": "changed"}, False),
]


@pytest.mark.parametrize(
    ("kw", "released"),
    RELEASES,
    ids=["unconditional", "own-cycle", "another-cycle-kept", "as-planned", "changed-since-planned-kept"],
)
def test_conditional_release(kw: dict[str, Any], released: bool) -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": owned("10.0.0.1", "me/1")})
    if "expect" in kw:
        a = p.allocations["a"]
        kw["expect"] = a if kw["expect"] == "same" else a.model_copy(update={"reserved_by": "other/2"})
    new = release(p, CTX, "a", **kw)
    assert (new is not None) is released
    if new is not None:
        assert new.allocations == {}


@pytest.mark.parametrize(
    ("since", "expected"),
    [(at(30), 30.0), (at(-30), 0.0), (datetime.datetime(2024, 6, 1, 11, 59, 0), 60.0)],
    ids=["past", "future-counts-as-now", "naive-is-utc"],
)
def test_age(since: str | datetime.datetime, expected: float) -> None:
    t = since if isinstance(since, datetime.datetime) else datetime.datetime.fromisoformat(since)
    assert age(t, NOW) == expected


def test_addresses_running_pods_carry_are_never_picked() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"x": alloc("10.0.0.2")})
    ctx = PoolContext(pod_held={"10.0.0.1": {"pre-bound-uid"}})
    _, ip = reserve(p, ctx, "a", "ns/a", now=NOW)
    assert ip == "10.0.0.3"
    full = PoolContext(pod_held={"10.0.0.1": {"u1"}, "10.0.0.3": {"u3"}})
    with pytest.raises(PoolFull):
        reserve(p, full, "a", "ns/a", now=NOW)


CAPPED = {"addresses": ["10.0.0.1-10.0.0.5"], "capacity": 2}


@pytest.mark.parametrize(
    ("spec", "allocations", "holders", "expected"),
    [
        pytest.param(
            CAPPED, {"x": alloc("10.0.0.1")}, {"x": ("10.0.0.1", "node-a")}, 1, id="recorded-counts-once"
        ),
        pytest.param(
            CAPPED,
            {"x": alloc("10.0.0.1")},
            {"x": ("10.0.0.1", "node-a"), "edited-out": ("10.0.0.2", "node-a")},
            0,
            id="unrecorded-holder-takes-a-place",
        ),
        pytest.param(CAPPED, {}, {"y": ("10.0.0.2", "node-b")}, 2, id="pod-on-another-node-takes-none"),
        pytest.param(CAPPED, {}, {"y": ("10.0.9.9", "node-a")}, 2, id="address-outside-the-pool-takes-none"),
        pytest.param(CAPPED, {}, {"y": (None, "node-a")}, 2, id="no-address-takes-none"),
        pytest.param({"capacity": 3}, {}, {"y": (None, "node-a")}, 3, id="count-only-pool-no-annotations"),
        pytest.param(
            {"addresses": ["10.0.0.1-10.0.0.5"], "capacity": 1},
            {"x": alloc("10.0.0.1")},
            {"y": ("10.0.0.2", "node-a")},
            0,
            id="over-full-is-zero-not-negative",
        ),
    ],
)
def test_running_pods_no_allocation_records_take_their_place(
    spec: dict[str, Any],
    allocations: dict[str, Any],
    holders: dict[str, tuple[str | None, str]],
    expected: int,
) -> None:
    """A running pod whose allocation a status edit removed still takes a place in the pool
    its annotation names (spec.capacity is never exceeded); one whose annotation could not
    be adopted there takes none."""
    p = view(allocations=allocations, **spec)
    ctx = PoolContext(pod_holders=holders)
    assert available(p, ctx) == expected
    if expected == 0:
        with pytest.raises(PoolFull):
            reserve(p, ctx, "new", "ns/new", now=NOW)
    else:
        reserve(p, ctx, "new", "ns/new", now=NOW)


def test_adopt_conflict_names_the_holder() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"h": alloc("10.0.0.2", pod="ns/holder")})
    with pytest.raises(AdoptConflict) as info:
        adopt(p, CTX, "new", "ns/new", "10.0.0.2")
    assert (info.value.holder_uid, info.value.holder_pod) == ("h", "ns/holder")


# --------------------------------------------------------------------------- spec.subnets


def with_subnets(subnets: list[dict[str, Any]], addresses: list[str]) -> PoolView:
    b = body(addresses=addresses)
    b["spec"]["subnets"] = subnets
    return PoolView.from_obj(b)


def test_a_gateway_is_never_handed_out() -> None:
    b = body(addresses=["10.0.1.0/29"])
    b["spec"]["subnets"] = [{"cidr": "10.0.1.0/29", "gateway": "10.0.1.1"}]
    p = PoolView.from_obj(b)
    assert p.spec_error is None and p.subnets[0].gateway == "10.0.1.1"
    got = []
    for i in range(5):
        new, ip = reserve(p, CTX, f"u{i}", f"ns/u{i}", now=NOW)
        assert new is not None
        p = with_status(b, new)
        got.append(ip)
    assert got == ["10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6"]
    with pytest.raises(PoolFull):
        reserve(p, CTX, "one-more", "ns/x", now=NOW)


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
        reserve(p, CTX, "u", "ns/u", now=NOW)
    status, reason, _ = ready_condition(p, CTX)
    assert (status, reason) == ("False", "InvalidSpec")
