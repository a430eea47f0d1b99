"""underlayip/allocator: the moves over one NodeIPPool view (pick, reserve, mark_bound, release,
adopt), pure functions, no server; and what they do to a pool that is deleted, shrunk or grown."""

from __future__ import annotations

import datetime
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.addresses import AddressSet
from ipscheduler.underlayip.allocator import (
    AdoptConflict,
    IdentityHeld,
    PoolFull,
    ReservedElsewhere,
    adopt,
    available,
    available_to,
    drop_nomination,
    family_free,
    identity_held,
    mark_bound,
    nominate,
    pick,
    pick_families,
    pods_like,
    release,
    reserve,
    retain,
    retained_for,
    settle,
    to_take_back,
    unreserve,
)
from ipscheduler.underlayip.families import family_of
from ipscheduler.underlayip.models import NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView, ready_condition, refresh
from ipscheduler.underlayip.retention import Retention
from tests.builders import ALONE, NOW, SINCE, SINCE_TIME, address_set, ago, alloc, bound_allocs, with_status
from tests.builders import pool as view
from tests.builders import pool_body as body
from tests.unit.fakes import pool_cache


def ips(status: NodeIPPoolStatus) -> dict[str, str | None]:
    return {uid: a.ip for uid, a in status.allocations.items()}


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
    ctx = PoolContext(blocked=address_set(*blocked_entries) if blocked_entries else None)
    assert pick(view(**kw), ctx, uid) == expected


# --------------------------------------------------------------------------- reserve


def test_reserve_writes_a_reserved_allocation_and_is_pure() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1", phase="Bound")})
    new, ip, _, _ = reserve(p, ALONE, "b", "ns/b", now=NOW)
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
    assert reserve(p, ALONE, "a", "ns/a")[:3] == (None, "10.0.0.3", False)


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
    ctx = PoolContext(blocked=address_set(*blocked_entries) if blocked_entries else None)
    p = view(name="the-pool", **kw)
    with pytest.raises(PoolFull, match="the-pool"):
        reserve(p, ctx, "new", "ns/new")


def test_reserve_count_only_gives_no_ip_and_respects_capacity() -> None:
    b = body(capacity=2)
    p = PoolView.from_obj(b)
    for uid in ("a", "b"):
        new, ip, _, _ = reserve(p, ALONE, uid, f"ns/{uid}", now=NOW)
        assert ip is None
        assert new is not None
        assert new.allocations[uid].ip is None
        p = with_status(b, new)
    assert (p.status.capacity, p.status.allocated, p.status.free) == (2, 2, 0)
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "c", "ns/c")
    assert reserve(p, ALONE, "a", "ns/a")[:3] == (None, None, False)


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
        new, ip, _, _ = reserve(p, ALONE, uid, f"ns/pod-{i}", now=NOW)
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
    assert reserve(p, ALONE, "uid-7", "ns/pod-7")[:3] == (None, got[7], False)
    for i in range(50, usable):
        new, ip, _, _ = reserve(p, ALONE, f"uid-{i}", f"ns/pod-{i}")
        assert new is not None
        assert ip is not None
        got.append(ip)
        p = with_status(b, new)
    assert len(set(got)) == usable
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "one-too-many", "ns/x")
    # Releasing one frees exactly that address, which is handed out next.
    freed = got[20]
    rel = release(p, ALONE, "uid-20")
    assert rel is not None
    p = with_status(b, rel)
    assert reserve(p, ALONE, "late", "ns/late")[1] == freed


# --------------------------------------------------------------------------- mark_bound / release


def test_mark_bound() -> None:
    p = view(
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"a": alloc("10.0.0.1", pod="ns/a"), "b": alloc("10.0.0.2", phase="Bound")},
    )
    new = mark_bound(p, ALONE, "a")
    assert new is not None
    assert new.allocations["a"].phase == "Bound"
    assert new.allocations["a"].ip == "10.0.0.1"
    assert new.allocations["a"].pod == "ns/a"
    assert new.allocations["a"].since == SINCE_TIME
    assert new.allocations["b"].phase == "Bound"
    assert new.allocated == 2
    assert p.allocations["a"].phase == "Reserved"  # pure
    assert mark_bound(p, ALONE, "b") is None  # already Bound
    assert mark_bound(p, ALONE, "nobody") is None


def test_release() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1"), "b": alloc("10.0.0.2")})
    new = release(p, ALONE, "a")
    assert new is not None
    assert ips(new) == {"b": "10.0.0.2"}
    assert (new.capacity, new.allocated, new.free) == (4, 1, 3)
    assert release(p, ALONE, "nobody") is None
    assert set(p.allocations) == {"a", "b"}


def test_release_from_invalid_pool_still_works() -> None:
    p = view(addresses=["10.0.0.300"], allocations={"a": alloc("10.0.0.1")})
    new = release(p, ALONE, "a")
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
    new = adopt(p, ALONE, uid, "ns/x", ip, now=NOW)
    assert new is not None
    got = new.allocations[uid]
    assert (got.ip, got.pod, got.phase, got.since) == (ip, "ns/x", "Bound", NOW)
    assert new.allocated == len(p.allocations) + 1
    for other, a in p.allocations.items():
        assert new.allocations[other] == a


def test_adopt_already_recorded_returns_none() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"a": alloc("10.0.0.1")})
    assert adopt(p, ALONE, "a", "ns/a", "10.0.0.1") is None
    assert adopt(p, ALONE, "a", "ns/a", "10.0.0.4") is None


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
        adopt(view(**kw), ALONE, "x", "ns/x", ip)


@pytest.mark.parametrize("ip", ["FD00::1", "fd00:0::1", " fd00::1"], ids=["uppercase", "zeros", "whitespace"])
def test_adopt_non_canonical_spelling_of_held_ip_conflicts(ip: str) -> None:
    p = view(addresses=["fd00::1-fd00::4"], allocations={"a": alloc("fd00::1", phase="Bound")})
    with pytest.raises(AdoptConflict):
        adopt(p, ALONE, "x", "ns/x", ip)


# --------------------------------------------------------------------------- ownership of reservations


def owned(ip: str, by: str | None, phase: str = "Reserved", since: str = SINCE) -> dict[str, Any]:
    out = alloc(ip, pod="ns/a", phase=phase, since=since)
    if by is not None:
        out["reservedBy"] = by
    return out


OWNERSHIP = [
    # (existing allocation of pod "a", expected: "write"/"none" + ip, or the exception)
    (None, ("write", "10.0.0.1")),
    (owned("10.0.0.3", "me/1"), ("none", "10.0.0.3")),
    (owned("10.0.0.3", "other/7", since=ago(5)), ReservedElsewhere),
    (owned("10.0.0.3", None, since=ago(5)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", since=ago(60)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", since=ago(61)), ("write", "10.0.0.3")),
    (owned("10.0.0.3", "other/7", since=ago(-3600)), ReservedElsewhere),
    (owned("10.0.0.3", "other/7", phase="Bound", since=ago(3600)), ReservedElsewhere),
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
            reserve(p, ALONE, "a", "ns/a", now=NOW, owner="me/1", takeover_after=60)
        return
    new, ip, _, _ = reserve(p, ALONE, "a", "ns/a", now=NOW, owner="me/1", takeover_after=60)
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
    (owned("10.0.0.3", "old-leader/7", since=ago(30)), LEASE_TAKEN, True),
    (owned("10.0.0.3", "old-leader/7", since=ago(5)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "me/2", since=ago(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "old-leader/7", phase="Bound", since=ago(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", None, since=ago(30)), LEASE_TAKEN, False),
    (owned("10.0.0.3", "old-leader/7", since=ago(30)), None, False),
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
            reserve(p, ALONE, "a", "ns/a", takeover_before=takeover_before, **kwargs)
        return
    new, ip, _, _ = reserve(p, ALONE, "a", "ns/a", takeover_before=takeover_before, **kwargs)
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
    new = release(p, ALONE, "a", **kw)
    assert (new is not None) is released
    if new is not None:
        assert new.allocations == {}


def test_addresses_running_pods_carry_are_never_picked() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"x": alloc("10.0.0.2")})
    ctx = PoolContext(pod_held={"10.0.0.1": {"pre-bound-uid"}})
    _, ip, _, _ = reserve(p, ctx, "a", "ns/a", now=NOW)
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
        adopt(p, ALONE, "new", "ns/new", "10.0.0.2")
    assert (info.value.holder_uid, info.value.holder_pod) == ("h", "ns/holder")


def test_a_gateway_is_never_handed_out() -> None:
    b = body(addresses=["10.0.1.0/29"])
    b["spec"]["subnets"] = [{"cidr": "10.0.1.0/29", "gateway": "10.0.1.1"}]
    p = PoolView.from_obj(b)
    assert p.spec_error is None and p.subnets[0].gateway == "10.0.1.1"
    got = []
    for i in range(5):
        new, ip, _, _ = reserve(p, ALONE, f"u{i}", f"ns/u{i}", now=NOW)
        assert new is not None
        p = with_status(b, new)
        got.append(ip)
    assert got == ["10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6"]
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "one-more", "ns/x", now=NOW)


# --------------------------------------------------------------------------- deleting pools

DELETING_POOLS = [
    {"addresses": ["10.0.0.0/28"], "allocations": {"u1": alloc("10.0.0.1", phase="Bound")}},
    {"capacity": 5, "allocations": {"u1": alloc(None, phase="Bound")}},
    {"addresses": ["10.0.0.0/28"], "allocations": {"u1": alloc("10.0.0.1", phase="Reserved")}},
]
DELETING_IDS = ["addresses", "count-only", "reserved-holder"]


@pytest.mark.parametrize("kw", DELETING_POOLS, ids=DELETING_IDS)
def test_pick_and_reserve_refuse_deleting_pool(kw: dict[str, Any]) -> None:
    p = view(deleting=True, **kw)
    assert pick(p, ALONE, "new") == (False, None)
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "new", "ns/new", NOW)
    # the same pool, not deleting, has room: the refusal is due to the deletion only
    live = view(**kw)
    assert pick(live, ALONE, "new")[0] is True


@pytest.mark.parametrize("kw", DELETING_POOLS, ids=DELETING_IDS)
def test_existing_holder_keeps_its_allocation_in_deleting_pool(kw: dict[str, Any]) -> None:
    p = view(deleting=True, **kw)
    ip = p.allocations["u1"].ip
    assert pick(p, ALONE, "u1") == (True, ip)
    assert reserve(p, ALONE, "u1", "ns/p", NOW)[:3] == (None, ip, False)


# --------------------------------------------------------------------------- shrinking the spec

SHRINK = [
    ({"addresses": ["10.0.0.1-10.0.0.2"]}, 2),
    ({"addresses": ["10.0.0.1"]}, 1),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "capacity": 2}, 2),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.3-10.0.0.4"]}, 2),
    ({"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.1-10.0.0.4"]}, 0),
    ({"addresses": ["10.0.9.0/30"]}, 2),  # /30: two usable hosts, none of them allocated
]


@pytest.mark.parametrize(
    ("spec", "capacity"),
    SHRINK,
    ids=[
        "range-to-two",
        "range-to-one",
        "capacity-cap",
        "exclude-two",
        "exclude-all",
        "moved-to-other-block",
    ],
)
def test_shrink_below_allocated_keeps_allocations(spec: dict[str, Any], capacity: int) -> None:
    b = body(addresses=["10.0.0.1-10.0.0.4"], allocations=bound_allocs(4))
    before = PoolView.from_obj(b)
    assert before.free() == 0
    b["spec"].pop("addresses")
    b["spec"].update(spec)
    b["metadata"]["generation"] = 2
    p = PoolView.from_obj(b)
    assert p.spec_error is None
    new = refresh(p, ALONE, NOW)
    assert new is not None
    assert new.allocations == before.allocations
    assert (new.capacity, new.allocated, new.free) == (capacity, 4, 0)
    cond = next(c for c in new.conditions if c.type == "Ready")
    assert (cond.status, cond.reason) == ("False", "OverCommitted")
    assert cond.message == f"4 allocated but capacity is {capacity}"
    after = with_status(b, new)
    assert pick(after, ALONE, "new") == (False, None)
    with pytest.raises(PoolFull):
        reserve(after, ALONE, "new", "ns/new", NOW)
    # the holders keep their addresses
    for uid, a in before.allocations.items():
        assert pick(after, ALONE, uid) == (True, a.ip)


def test_shrink_count_only_keeps_allocations() -> None:
    b = body(capacity=4, allocations={f"u{i}": alloc(None, pod=f"ns/p{i}", phase="Bound") for i in range(3)})
    b["spec"]["capacity"] = 1
    p = PoolView.from_obj(b)
    new = refresh(p, ALONE, NOW)
    assert new is not None
    assert set(new.allocations) == {"u0", "u1", "u2"}
    assert (new.capacity, new.allocated, new.free) == (1, 3, 0)
    assert ready_condition(p, ALONE)[1] == "OverCommitted"
    assert pick(p, ALONE, "new") == (False, None)


def _fill(b: dict[str, Any], ctx: PoolContext = ALONE) -> list[str]:
    """Reserve for new pods until the pool is full; returns the handed-out addresses."""
    got: list[str] = []
    p = PoolView.from_obj(b)
    for i in range(100):
        try:
            status, ip, _, _ = reserve(p, ctx, f"new{i}", f"ns/new{i}", NOW)
        except PoolFull:
            return got
        assert status is not None
        assert ip is not None
        got.append(ip)
        p = with_status(b, status)
    raise AssertionError("pool never filled up")


# (initial allocations, shrunk spec, grown spec, expected addresses handed out after growing)
REGROW = [
    (
        {"u1": alloc("10.0.0.1", phase="Bound"), "u3": alloc("10.0.0.3", pod="ns/q", phase="Bound")},
        {"addresses": ["10.0.0.1-10.0.0.2"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u3": alloc("10.0.0.3", phase="Bound")},
        {"addresses": ["10.0.0.1-10.0.0.2"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u3": alloc("10.0.0.3", phase="Bound")},
        {"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.3"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u1": alloc("fd00:0::1", phase="Bound"), "u2": alloc("FD00::2", pod="ns/q", phase="Bound")},
        {"addresses": ["fd00::3"]},
        {"addresses": ["fd00::1-fd00::4"]},
        ["fd00::3", "fd00::4"],
    ),
    (
        {"u1": alloc("10.0.0.9", phase="Bound")},
        {"addresses": ["10.0.0.1-10.0.0.2"]},
        {"addresses": ["10.0.0.1-10.0.0.2", "10.0.0.9"]},
        ["10.0.0.1", "10.0.0.2"],
    ),
]


@pytest.mark.parametrize(
    ("initial", "shrunk", "grown", "expected"),
    REGROW,
    ids=[
        "middle-address-removed",
        "only-holder-removed",
        "excluded-then-included",
        "ipv6-other-spellings",
        "outside-address-added-back",
    ],
)
def test_removed_address_stays_held_and_is_never_handed_out(
    initial: dict[str, Any], shrunk: dict[str, Any], grown: dict[str, Any], expected: list[str]
) -> None:
    b = body(addresses=["10.0.0.1-10.0.0.4"], allocations=initial)
    held = {uid: a.ip for uid, a in PoolView.from_obj(b).allocations.items()}
    b["spec"].pop("addresses")
    b["spec"].update(shrunk)
    p = PoolView.from_obj(b)
    new = refresh(p, ALONE, NOW)
    assert new is not None
    assert {uid: a.ip for uid, a in new.allocations.items()} == held
    p = with_status(b, new)
    possible, ip = pick(p, ALONE, "new")
    assert possible is (ip is not None)
    assert ip is None or p.holder_of(ip) is None
    b["spec"] = {"nodeName": "node-a", **grown}
    grown_view = PoolView.from_obj(b)
    assert {uid: a.ip for uid, a in grown_view.allocations.items()} == held
    got = _fill(b)
    assert got == expected
    final = PoolView.from_obj(b)
    for uid, ip in held.items():
        assert final.allocations[uid].ip == ip
    assert len({final.holder_of(ip) for ip in got}) == len(got)


def test_pick_never_returns_a_held_address_in_other_spelling() -> None:
    p = view(
        addresses=["fd00::1-fd00::3"],
        allocations={"u1": alloc("FD00:0:0::1", phase="Bound"), "u2": alloc("fd00::0:2", phase="Bound")},
    )
    assert pick(p, ALONE, "new") == (True, "fd00::3")


def test_address_held_in_another_pool_is_never_handed_out() -> None:
    a = body(
        "pool-a",
        node="node-a",
        addresses=["10.0.0.1-10.0.0.4"],
        allocations={"u5": alloc("10.0.0.5", phase="Bound")},
    )
    b = body("pool-b", node="node-b", addresses=["10.0.0.5-10.0.0.6"])
    cache = pool_cache(
        {"node-a": [NodeInfo("node-a", ready=True)], "node-b": [NodeInfo("node-b", ready=True)]},
        {"pool-a": [PoolView.from_obj(a)], "pool-b": [PoolView.from_obj(b)]},
    )
    pool_b = cache.pool("pool-b")
    assert pool_b is not None
    possible, ip = pick(pool_b, cache.context(pool_b), "new")
    assert ip != "10.0.0.5"
    assert (possible, ip) == (True, "10.0.0.6")


# --------------------------------------------------------------------------- retained addresses

STS_KEEP = Retention("StatefulSet", "ns/web-0", "uid-sts", 0)


def _retained_pool(**allocations: Any) -> PoolView:
    return view(addresses=["10.0.0.1-10.0.0.3"], allocations=allocations)


def test_reserve_records_the_pods_release_policy() -> None:
    status, ip, _, _ = reserve(
        _retained_pool(), ALONE, "u1", "ns/web-0", now=SINCE_TIME, owner="r/1", retention=STS_KEEP
    )
    assert status is not None and ip == "10.0.0.1"
    a = status.allocations["u1"]
    assert (a.release_policy, a.identity, a.owner_uid) == ("StatefulSet", "ns/web-0", "uid-sts")
    assert status.to_wire()["allocations"]["u1"]["releasePolicy"] == "StatefulSet"
    plain, _, _, _ = reserve(
        _retained_pool(), ALONE, "u2", "ns/p", now=SINCE_TIME, owner="r/1", retention=Retention("Pod")
    )
    assert plain is not None and "releasePolicy" not in plain.to_wire()["allocations"]["u2"]


def _reserved_sticky(retention: Retention = STS_KEEP, uid: str = "u1") -> PoolView:
    body_ = body(addresses=["10.0.0.1-10.0.0.3"], allocations={})
    status, _, _, _ = reserve(
        PoolView.from_obj(body_),
        ALONE,
        uid,
        retention.identity,
        now=SINCE_TIME,
        owner="r/1",
        retention=retention,
    )
    assert status is not None
    return with_status(body_, status)


def test_a_sticky_pods_end_retains_its_address_which_stays_taken() -> None:
    pool = _reserved_sticky()
    later = SINCE_TIME + datetime.timedelta(minutes=1)
    status = retain(pool, ALONE, "u1", now=later)
    assert status is not None
    a = status.allocations["u1"]
    assert (a.phase, a.ip, a.retained_since) == ("Retained", "10.0.0.1", later)
    assert (status.allocated, status.retained, status.free) == (1, 1, 2)
    kept = with_status(body(addresses=["10.0.0.1-10.0.0.3"], allocations={}), status)
    assert retain(kept, ALONE, "u1") is None, "Retained already"
    other, ip, _, _ = reserve(kept, ALONE, "u9", "ns/other", now=later, owner="r/2")
    assert other is not None and ip == "10.0.0.2", "a retained address is taken for everyone else"


def test_a_plain_pods_end_releases_its_address() -> None:
    pool = _reserved_sticky(Retention("Pod"))
    status = retain(pool, ALONE, "u1")
    assert status is not None and status.allocations == {} and status.retained == 0


@pytest.mark.parametrize(
    ("retention", "ip", "reclaimed"),
    [
        (Retention("StatefulSet", "ns/web-0", "uid-sts", 0), "10.0.0.1", True),
        (Retention("StatefulSet", "ns/web-0", "uid-sts-recreated", 0), "10.0.0.2", False),
        (Retention("StatefulSet", "ns/web-1", "uid-sts", 1), "10.0.0.2", False),
        (Retention("Pod"), "10.0.0.2", False),
    ],
    ids=["same-identity-same-statefulset", "statefulset-recreated", "another-ordinal", "plain-pod"],
)
def test_the_next_pod_of_the_identity_gets_the_retained_address_back(
    retention: Retention, ip: str, reclaimed: bool
) -> None:
    body_ = body(addresses=["10.0.0.1-10.0.0.3"], allocations={})
    status = retain(_reserved_sticky(), ALONE, "u1", now=SINCE_TIME)
    assert status is not None
    kept = with_status(body_, status)
    new, got, _, _ = reserve(kept, ALONE, "u2", "ns/web-0", now=SINCE_TIME, owner="r/2", retention=retention)
    assert new is not None and got == ip
    assert ("u1" in new.allocations) is not reclaimed
    a = new.allocations["u2"]
    assert (a.phase, a.reserved_by, a.retained_since) == ("Reserved", "r/2", None)
    assert new.retained == (0 if reclaimed else 1)


def test_an_address_kept_with_policy_never_goes_to_any_pod_of_that_name() -> None:
    never = Retention("Never", "ns/db")
    status = retain(_reserved_sticky(never), ALONE, "u1", now=SINCE_TIME)
    assert status is not None
    kept = with_status(body(addresses=["10.0.0.1-10.0.0.3"], allocations={}), status)
    assert retained_for(kept, "ns/db") == ("u1", status.allocations["u1"])
    assert retained_for(kept, "ns/db", "uid-whatever") is not None
    assert retained_for(kept, "ns/other") is None
    new, got, taken_back, _ = reserve(
        kept, ALONE, "u2", "ns/db", now=SINCE_TIME, owner="r/2", retention=Retention("Never", "ns/db")
    )
    assert taken_back, "the address kept with Never for the name is taken back"
    assert new is not None and got == "10.0.0.1" and list(new.allocations) == ["u2"]


def test_a_pod_of_policy_pod_takes_back_what_was_kept_with_never_for_its_name() -> None:
    """PreFilter restricts such a pod to the kept address's node; Reserve gives it that very
    address (to_take_back: the identity is the pod's name whatever its policy), and the plugin
    asks the same function whether it was taken back."""
    status = retain(_reserved_sticky(Retention("Never", "ns/db")), ALONE, "u1", now=SINCE_TIME)
    assert status is not None
    kept = with_status(body(addresses=["10.0.0.1-10.0.0.3"], allocations={}), status)
    assert to_take_back(kept, "u2", "ns/db", Retention("Pod")) == ("u1", status.allocations["u1"])
    assert to_take_back(kept, "u2", "ns/other", Retention("Pod")) is None
    new, got, _, _ = reserve(
        kept, ALONE, "u2", "ns/db", now=SINCE_TIME, owner="r/2", retention=Retention("Pod")
    )
    assert new is not None and got == "10.0.0.1" and list(new.allocations) == ["u2"]
    assert new.allocations["u2"].release_policy is None, "from now on it goes with its pod (policy Pod)"


@pytest.mark.parametrize(
    ("keep", "phase"),
    [(True, "Retained"), (False, None)],
    ids=["a-taken-back-address-is-retained-again", "a-fresh-one-goes-back-to-the-pool"],
)
def test_unreserve_of_a_sticky_reservation(keep: bool, phase: str | None) -> None:
    pool = _reserved_sticky()
    assert unreserve(pool, ALONE, "u1", owner="r/other", keep=keep) is None, "never another cycle's"
    status = unreserve(pool, ALONE, "u1", owner="r/1", keep=keep, now=SINCE_TIME)
    assert status is not None
    got = status.allocations.get("u1")
    assert (got.phase if got else None) == phase
    plain = _reserved_sticky(Retention("Pod"))
    released = unreserve(plain, ALONE, "u1", owner="r/1", keep=True)
    assert released is not None and released.allocations == {}, "a Pod-policy reservation always goes"


# --------------------------------------------------------------------------- preemption's hold
FULL = {"v1": "10.0.0.1", "v2": "10.0.0.2"}


def full_pool(**extra: Any) -> PoolView:
    allocs = {uid: alloc(ip, pod=f"ns/{uid}", phase="Bound") for uid, ip in FULL.items()}
    return view(addresses=["10.0.0.1-10.0.0.2"], allocations={**allocs, **extra})


def test_nominate_holds_a_place_without_an_address_over_a_full_pool() -> None:
    new = nominate(full_pool(), ALONE, "hi", "ns/hi", now=NOW)
    assert new is not None
    held = new.allocations["hi"]
    assert (held.phase, held.ip, held.pod) == ("Nominated", None, "ns/hi")
    assert (new.allocated, new.free, new.nominated) == (3, 0, 1)
    ready = next(c for c in new.conditions if c.type == "Ready")
    assert ready.status == "True", "a place held over a victim's is no over-commit"


@pytest.mark.parametrize(
    ("extra", "deleting"),
    [
        pytest.param({"hi": alloc("10.0.0.1")}, False, id="the pod holds an allocation here"),
        pytest.param({}, True, id="the pool is being deleted"),
    ],
)
def test_nominate_writes_nothing(extra: dict[str, Any], deleting: bool) -> None:
    allocs = {uid: alloc(ip, pod=f"ns/{uid}", phase="Bound") for uid, ip in FULL.items()}
    p = view(addresses=["10.0.0.1-10.0.0.2"], allocations={**allocs, **extra}, deleting=deleting)
    assert nominate(p, ALONE, "hi", "ns/hi") is None


def test_reserve_turns_the_held_place_into_the_address_a_victim_freed() -> None:
    held = {"hi": alloc(None, pod="ns/hi", phase="Nominated")}
    with pytest.raises(PoolFull):
        reserve(full_pool(**held), ALONE, "hi", "ns/hi", owner="me/1")  # the victims hold both
    after = view(
        addresses=["10.0.0.1-10.0.0.2"],
        allocations={"v2": alloc("10.0.0.2", pod="ns/v2", phase="Bound"), **held},
    )
    new, ip, taken_back, _ = reserve(after, ALONE, "hi", "ns/hi", now=NOW, owner="me/1")
    assert (ip, taken_back) == ("10.0.0.1", False)
    assert new is not None and new.allocations["hi"].phase == "Reserved"
    assert new.allocations["hi"].reserved_by == "me/1"
    assert (new.allocated, new.nominated) == (2, 0)


def test_another_pod_finds_no_room_in_a_held_place() -> None:
    held = {"hi": alloc(None, pod="ns/hi", phase="Nominated")}
    after = view(
        addresses=["10.0.0.1-10.0.0.2"],
        allocations={"v2": alloc("10.0.0.2", pod="ns/v2", phase="Bound"), **held},
    )
    with pytest.raises(PoolFull):
        reserve(after, ALONE, "low", "ns/low", owner="me/2")


def test_drop_nomination_removes_only_a_held_place() -> None:
    p = full_pool(hi=alloc(None, pod="ns/hi", phase="Nominated"))
    new = drop_nomination(p, ALONE, "hi")
    assert new is not None and "hi" not in new.allocations and new.nominated == 0
    assert drop_nomination(p, ALONE, "v1") is None, "a Bound allocation is not a hold"


@pytest.mark.parametrize(
    ("retention", "held"),
    [
        (STS_KEEP, True),
        (Retention("StatefulSet", "ns/web-0", "uid-sts-recreated", 0), False),
        (Retention("StatefulSet", "ns/web-1", "uid-sts", 1), False),
        (Retention("Pod"), False),
    ],
    ids=["same-identity", "statefulset-recreated", "another-ordinal", "plain-pod"],
)
def test_a_pod_never_gets_a_second_address_while_its_identitys_is_another_pods(
    retention: Retention, held: bool
) -> None:
    """Two replicas racing over one identity: pod u2 of identity ns/web-0 took the Retained address
    back (Reserved under u2) and was deleted before its bind; pod u3 of the same identity,
    whose cycle saw the address still Retained, must wait (IdentityHeld) instead of taking a
    new one; once u2's Unreserve retains it again, u3 takes it back."""
    status = retain(_reserved_sticky(), ALONE, "u1", now=SINCE_TIME)
    assert status is not None
    body_ = body(addresses=["10.0.0.1-10.0.0.3"], allocations={})
    taken, _, _, _ = reserve(
        with_status(body_, status), ALONE, "u2", "ns/web-0", now=SINCE_TIME, owner="r/1", retention=STS_KEEP
    )
    assert taken is not None and taken.allocations["u2"].phase == "Reserved"
    pool = with_status(body_, taken)
    if not held:
        new, ip, _, _ = reserve(
            pool, ALONE, "u3", "ns/web-0", now=SINCE_TIME, owner="r/2", retention=retention
        )
        assert new is not None and ip == "10.0.0.2"
        return
    with pytest.raises(IdentityHeld, match=r"still records the address 10\.0\.0\.1 of the pod.s identity"):
        reserve(pool, ALONE, "u3", "ns/web-0", now=SINCE_TIME, owner="r/2", retention=retention)
    again = retain(pool, ALONE, "u2", now=SINCE_TIME)  # u2's Unreserve keeps it for the identity
    assert again is not None
    new, ip, taken_back, _ = reserve(
        with_status(body_, again), ALONE, "u3", "ns/web-0", now=SINCE_TIME, owner="r/2", retention=retention
    )
    assert new is not None and (ip, taken_back) == ("10.0.0.1", True) and list(new.allocations) == ["u3"]


# --------------------------------------------------------------------------- Releasing


@pytest.mark.parametrize(
    ("start", "want_phase"),
    [
        (alloc("10.0.0.1", phase="Bound"), "Releasing"),
        (alloc("10.0.0.1", phase="Reserved"), "Releasing"),
        (alloc(None, phase="Bound"), None),  # a count-only slot: no interface holds it
        (alloc(None, phase="Nominated"), None),  # a place, no address
        (alloc("10.0.0.1", phase="Retained"), "Retained"),  # nothing to do (returns None)
        (alloc("10.0.0.1", phase="Releasing"), "Releasing"),  # nothing to do (returns None)
    ],
    ids=["bound", "reserved", "count-only-slot", "nominated", "retained-already", "releasing-already"],
)
def test_an_unconfirmed_end_leaves_an_address_releasing(
    start: dict[str, Any], want_phase: str | None
) -> None:
    kept = start["phase"] in ("Retained", "Releasing")
    pool = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"u1": {**start, "reservedBy": "r/1"}})
    later = SINCE_TIME + datetime.timedelta(minutes=1)
    status = retain(pool, ALONE, "u1", now=later, confirmed=False)
    if kept:
        assert status is None
        return
    assert status is not None
    if want_phase is None:
        assert status.allocations == {}, "released at once"
        return
    a = status.allocations["u1"]
    assert (a.phase, a.ip, a.releasing_since, a.reserved_by) == ("Releasing", "10.0.0.1", later, None)
    assert (status.allocated, status.releasing, status.free) == (1, 1, 2)
    wire = status.to_wire()
    assert wire["releasing"] == 1 and wire["allocations"]["u1"]["releasingSince"] == "2024-01-01T00:01:00Z"
    releasing = with_status(body(addresses=["10.0.0.1-10.0.0.3"], allocations={}), status)
    other, ip, _, _ = reserve(releasing, ALONE, "u9", "ns/other", now=later, owner="r/2")
    assert other is not None and ip == "10.0.0.2", "a Releasing address is taken for everyone else"
    full = view(addresses=["10.0.0.1"], allocations={"u1": alloc("10.0.0.1", phase="Releasing")})
    with pytest.raises(PoolFull):
        reserve(full, ALONE, "u9", "ns/other", owner="r/2")


@pytest.mark.parametrize(
    ("retention", "want_phase"),
    [(Retention("Pod"), None), (STS_KEEP, "Retained"), (Retention("Never", "ns/db"), "Retained")],
    ids=["policy-pod-goes-back-to-the-pool", "statefulset-is-retained", "never-is-retained"],
)
def test_settle_lets_a_releasing_address_go_by_its_policy(
    retention: Retention, want_phase: str | None
) -> None:
    later = SINCE_TIME + datetime.timedelta(minutes=1)
    body_ = body(addresses=["10.0.0.1-10.0.0.3"], allocations={})
    status = retain(_reserved_sticky(retention), ALONE, "u1", now=SINCE_TIME, confirmed=False)
    assert status is not None and status.allocations["u1"].phase == "Releasing"
    releasing = with_status(body_, status)
    settled = settle(releasing, ALONE, "u1", now=later)
    assert settled is not None and settled.releasing == 0
    if want_phase is None:
        assert settled.allocations == {}
        return
    a = settled.allocations["u1"]
    assert (a.phase, a.ip, a.retained_since, a.releasing_since) == ("Retained", "10.0.0.1", later, None)
    assert a.identity == retention.identity and a.release_policy == retention.policy
    again = with_status(body_, settled)
    assert settle(again, ALONE, "u1") is None, "only a Releasing allocation settles"
    assert settle(again, ALONE, "nobody") is None


def test_the_identity_waits_while_its_address_is_releasing() -> None:
    """The next pod of a StatefulSet identity whose previous pod was force-deleted neither takes
    the Releasing address back nor gets a second one: it waits (IdentityHeld)."""
    status = retain(_reserved_sticky(), ALONE, "u1", now=SINCE_TIME, confirmed=False)
    assert status is not None
    releasing = with_status(body(addresses=["10.0.0.1-10.0.0.3"], allocations={}), status)
    assert to_take_back(releasing, "u2", "ns/web-0", STS_KEEP) is None
    with pytest.raises(IdentityHeld):
        reserve(releasing, ALONE, "u2", "ns/web-0", now=SINCE_TIME, owner="r/2", retention=STS_KEEP)


NOMINATED_PLACE = alloc(None, phase="Nominated")


@pytest.mark.parametrize(
    ("allocations", "uid", "want"),
    [
        pytest.param({"x": alloc("10.0.0.1")}, "me", 3, id="no-allocation-of-its-own"),
        pytest.param({"x": alloc("10.0.0.1"), "me": alloc("10.0.0.2")}, "me", 3, id="its-own-counts-free"),
        pytest.param(bound_allocs(3) | {"me": alloc("10.0.0.4")}, "me", 1, id="its-own-in-a-full-pool"),
        pytest.param(
            bound_allocs(4) | {"me": alloc(None, phase="Nominated")}, "me", 0, id="nominated-over-capacity"
        ),
        pytest.param(
            bound_allocs(3) | {"me": alloc(None, phase="Nominated")}, "me", 1, id="nominated-a-victim-gone"
        ),
    ],
)
def test_available_to_a_pod_counts_its_own_allocation_as_free(
    allocations: dict[str, Any], uid: str, want: int
) -> None:
    p = view("p", addresses=["10.0.0.1-10.0.0.4"], allocations=allocations)
    assert available_to(p, ALONE, uid) == want


# --------------------------------------------------------------------------- dual-stack pods

MIXED = ["10.0.0.1-10.0.0.3", "fd00::1-fd00::4"]


def dual(v4: str, v6: str, primary_v6: bool = False, **kw: Any) -> dict[str, Any]:
    """A wire-form dual-stack allocation (``alloc``'s keywords): ``ip`` the primary, ``ips`` both."""
    first, second = (v6, v4) if primary_v6 else (v4, v6)
    return alloc(first, **kw) | {"ips": [first, second]}


def addresses_of(status: NodeIPPoolStatus) -> dict[str, tuple[str, ...]]:
    return {uid: a.addresses for uid, a in status.allocations.items()}


PICK_FAMILIES = [
    # (body kwargs, context, versions, expected)
    pytest.param({"addresses": MIXED}, ALONE, (4, 6), ("10.0.0.1", "fd00::1"), id="ipv4-primary"),
    pytest.param({"addresses": MIXED}, ALONE, (6, 4), ("fd00::1", "10.0.0.1"), id="ipv6-primary"),
    pytest.param({"addresses": MIXED}, ALONE, (6,), ("fd00::1",), id="ipv6-alone"),
    pytest.param(
        {"addresses": ["fd00::1-fd00::3", "10.0.0.9", "10.0.0.2"]},
        ALONE,
        (4, 6),
        ("10.0.0.2", "fd00::1"),
        id="lowest-of-each-regardless-of-entry-order",
    ),
    pytest.param(
        {"addresses": MIXED, "allocations": {"a": dual("10.0.0.1", "fd00::1"), "b": alloc("fd00::2")}},
        ALONE,
        (4, 6),
        ("10.0.0.2", "fd00::3"),
        id="skips-every-address-taken",
    ),
    pytest.param(
        {"addresses": MIXED, "allocations": {"a": dual("10.0.0.1", "FD00:0::1", primary_v6=True)}},
        ALONE,
        (6, 4),
        ("fd00::2", "10.0.0.2"),
        id="skips-a-taken-address-in-other-spelling",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(blocked=address_set("10.0.0.1", "fd00::1-fd00::2")),
        (4, 6),
        ("10.0.0.2", "fd00::3"),
        id="skips-blocked-per-family",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(held_by={"fd00::1": "pool-b", "10.0.0.1": "pool-a"}),
        (4, 6),
        ("10.0.0.1", "fd00::2"),
        id="skips-held-by-another-pool-only",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(pod_held={"10.0.0.1": {"running"}, "10.0.0.2": set(), "fd00::1": {"running"}}),
        (4, 6),
        ("10.0.0.2", "fd00::2"),
        id="skips-what-running-pods-carry",
    ),
    pytest.param(
        {"addresses": MIXED, "allocations": {f"u{i}": alloc(f"10.0.0.{i}") for i in (1, 2, 3)}},
        ALONE,
        (4, 6),
        None,
        id="no-ipv4-left",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(held_by={"10.0.0.1": "b", "10.0.0.2": "b"}, pod_held={"10.0.0.3": {"r"}}),
        (6, 4),
        None,
        id="no-ipv4-left-once-held-ones-skipped",
    ),
    pytest.param({"addresses": ["10.0.0.1-10.0.0.4"]}, ALONE, (4, 6), None, id="ipv4-only-pool"),
    pytest.param({"addresses": ["10.0.0.1-10.0.0.4"]}, ALONE, (4,), ("10.0.0.1",), id="ipv4-only-pool-ipv4"),
    pytest.param({"addresses": MIXED, "capacity": 1}, ALONE, (4, 6), None, id="capacity-one"),
    pytest.param(
        {"addresses": MIXED, "capacity": 3, "allocations": {"a": alloc("fd00::4")}},
        ALONE,
        (4, 6),
        ("10.0.0.1", "fd00::1"),
        id="two-places-left",
    ),
    pytest.param(
        {
            "addresses": MIXED,
            "capacity": 3,
            "allocations": {"a": alloc("fd00::4"), "b": alloc(None, phase="Nominated")},
        },
        ALONE,
        (4, 6),
        None,
        id="one-place-left",
    ),
    pytest.param(
        {"addresses": MIXED, "capacity": 3, "allocations": {"a": alloc("fd00::4")}},
        PoolContext(pod_holders={"r": ("10.0.0.3", "node-a")}),
        (4, 6),
        None,
        id="a-running-pod-took-the-second-place",
    ),
    pytest.param({"capacity": 4}, ALONE, (4, 6), None, id="count-only"),
    pytest.param({"addresses": MIXED, "deleting": True}, ALONE, (4, 6), None, id="deleting"),
    pytest.param({"addresses": ["10.0.0.1", "fd00::300000"]}, ALONE, (4, 6), None, id="invalid-spec"),
]


@pytest.mark.parametrize(("kw", "ctx", "versions", "expected"), PICK_FAMILIES)
def test_pick_families(
    kw: dict[str, Any], ctx: PoolContext, versions: tuple[int, ...], expected: tuple[str, ...] | None
) -> None:
    assert pick_families(view(**kw), ctx, versions) == expected


FAMILY_FREE = [
    # (body kwargs, context, expected)
    pytest.param({"addresses": MIXED}, ALONE, {4: 3, 6: 4}, id="empty"),
    pytest.param({"addresses": ["fd00::1-fd00::4"]}, ALONE, {6: 4}, id="ipv6-only"),
    pytest.param(
        {"addresses": MIXED, "allocations": {"a": dual("10.0.0.1", "fd00::1"), "b": alloc("fd00::2")}},
        ALONE,
        {4: 2, 6: 2},
        id="allocations-per-family",
    ),
    pytest.param(
        {"addresses": MIXED, "allocations": {"a": alloc("10.0.0.1")}},
        PoolContext(
            blocked=address_set("10.0.0.1-10.0.0.2"),
            held_by={"fd00::1": "pool-b", "fd00::2": "pool-a"},
            pod_held={"10.0.0.2": {"r"}, "fd00::3": {"r"}, "fd00::4": set()},
        ),
        {4: 1, 6: 2},
        id="blocked-held-and-carried-each-once",
    ),
    pytest.param({"addresses": MIXED, "capacity": 2}, ALONE, {4: 3, 6: 4}, id="before-the-capacity-cap"),
    pytest.param({"capacity": 4}, ALONE, {}, id="count-only"),
    pytest.param({"addresses": MIXED, "deleting": True}, ALONE, {}, id="deleting"),
    pytest.param({"addresses": ["10.0.0.300"]}, ALONE, {}, id="invalid-spec"),
]


@pytest.mark.parametrize(("kw", "ctx", "expected"), FAMILY_FREE)
def test_family_free(kw: dict[str, Any], ctx: PoolContext, expected: dict[int, int]) -> None:
    assert family_free(view(**kw), ctx) == expected


@pytest.mark.parametrize(
    ("avail", "free", "versions", "expected"),
    [
        pytest.param(5, {4: 2, 6: 3}, (), 5, id="any-family-places"),
        pytest.param(5, {4: 2, 6: 3}, (4,), 2, id="ipv4-alone"),
        pytest.param(5, {4: 2, 6: 3}, (6,), 3, id="ipv6-alone"),
        pytest.param(8, {4: 2, 6: 3}, (4, 6), 2, id="the-scarcer-family"),
        pytest.param(8, {4: 2, 6: 3}, (6, 4), 2, id="order-does-not-matter"),
        pytest.param(3, {4: 5, 6: 5}, (4, 6), 1, id="two-places-each"),
        pytest.param(1, {4: 5, 6: 5}, (4, 6), 0, id="one-place-is-no-dual-pod"),
        pytest.param(5, {6: 3}, (4, 6), 0, id="a-family-missing"),
        pytest.param(0, {4: 5, 6: 5}, (4,), 0, id="no-place"),
        pytest.param(-1, {4: 5, 6: 5}, (4, 6), 0, id="never-negative"),
    ],
)
def test_pods_like(avail: int, free: dict[int, int], versions: tuple[int, ...], expected: int) -> None:
    assert pods_like(avail, free, versions) == expected


RESERVE_DUAL = [
    # (body kwargs, context, versions, fallback, expected addresses or PoolFull)
    pytest.param(
        {"addresses": MIXED}, ALONE, (4, 6), False, ("10.0.0.1", "fd00::1"), id="require-ipv4-first"
    ),
    pytest.param(
        {"addresses": MIXED}, ALONE, (6, 4), False, ("fd00::1", "10.0.0.1"), id="require-ipv6-first"
    ),
    pytest.param({"addresses": MIXED}, ALONE, (6,), False, ("fd00::1",), id="single-stack-ipv6"),
    pytest.param({"addresses": MIXED}, ALONE, (4, 6), True, ("10.0.0.1", "fd00::1"), id="prefer-gets-both"),
    pytest.param(
        {"addresses": MIXED, "allocations": {f"u{i}": alloc(f"10.0.0.{i}") for i in (1, 2, 3)}},
        ALONE,
        (4, 6),
        False,
        PoolFull,
        id="require-no-ipv4-left",
    ),
    pytest.param(
        {"addresses": MIXED, "allocations": {f"u{i}": alloc(f"10.0.0.{i}") for i in (1, 2, 3)}},
        ALONE,
        (4, 6),
        True,
        ("fd00::1",),
        id="prefer-falls-back-to-ipv6",
    ),
    pytest.param(
        {"addresses": ["10.0.0.1-10.0.0.3"]},
        ALONE,
        (6, 4),
        True,
        ("10.0.0.1",),
        id="prefer-ipv6-in-an-ipv4-pool",
    ),
    pytest.param(
        {"addresses": MIXED, "capacity": 1}, ALONE, (4, 6), False, PoolFull, id="require-capacity-one"
    ),
    pytest.param(
        {"addresses": MIXED, "capacity": 1}, ALONE, (6, 4), True, ("fd00::1",), id="prefer-capacity-one"
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(held_by={"10.0.0.1": "pool-b"}, pod_held={"fd00::1": {"running"}}),
        (4, 6),
        False,
        ("10.0.0.2", "fd00::2"),
        id="skips-held-per-family",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(held_by={f"fd00::{i}": "pool-b" for i in range(1, 5)}),
        (6, 4),
        True,
        ("10.0.0.1",),
        id="prefer-every-ipv6-held-elsewhere",
    ),
    pytest.param(
        {"addresses": MIXED},
        PoolContext(pod_held={f"fd00::{i}": {"r"} for i in range(1, 5)}),
        (6, 4),
        False,
        PoolFull,
        id="require-every-ipv6-carried",
    ),
    pytest.param({"capacity": 4}, ALONE, (4, 6), True, PoolFull, id="count-only-gives-no-family"),
    pytest.param({"capacity": 4}, ALONE, (), False, (), id="count-only-slot"),
    pytest.param({"addresses": MIXED, "deleting": True}, ALONE, (4, 6), True, PoolFull, id="deleting"),
]


@pytest.mark.parametrize(("kw", "ctx", "versions", "fallback", "expected"), RESERVE_DUAL)
def test_reserve_gives_one_address_per_family(
    kw: dict[str, Any], ctx: PoolContext, versions: tuple[int, ...], fallback: bool, expected: Any
) -> None:
    p = view(name="the-pool", **kw)
    if expected is PoolFull:
        with pytest.raises(PoolFull, match="the-pool"):
            reserve(p, ctx, "new", "ns/new", now=NOW, owner="me/1", versions=versions, fallback=fallback)
        return
    r = reserve(p, ctx, "new", "ns/new", now=NOW, owner="me/1", versions=versions, fallback=fallback)
    assert r.status is not None
    assert (r.ip, r.ips, r.taken_back) == (expected[0] if expected else None, expected, False)
    got = r.status.allocations["new"]
    assert (got.ip, got.ips, got.addresses) == (
        expected[0] if expected else None,
        list(expected) if len(expected) > 1 else None,
        expected,
    )
    assert (got.phase, got.reserved_by, got.since) == ("Reserved", "me/1", NOW)
    assert r.status.allocated == p.allocated + max(1, len(expected))
    assert r.status.free == max(0, p.capacity(ctx.blocked) - r.status.allocated)
    assert "new" not in p.allocations, "pure"


def test_a_reservation_of_the_cycle_or_taken_over_keeps_its_addresses() -> None:
    mine = dual("10.0.0.2", "fd00::3", primary_v6=True) | {"reservedBy": "me/1"}
    p = view(addresses=MIXED, allocations={"a": mine})
    r = reserve(p, ALONE, "a", "ns/a", now=NOW, owner="me/1", versions=(4, 6))
    assert r == (None, "fd00::3", False, ("fd00::3", "10.0.0.2"))
    abandoned_one = dual("10.0.0.2", "fd00::3", since=ago(61)) | {"reservedBy": "other/7"}
    p = view(addresses=MIXED, allocations={"a": abandoned_one})
    r = reserve(p, ALONE, "a", "ns/a", now=NOW, owner="me/1", takeover_after=60, versions=(6,))
    assert r.status is not None and (r.ip, r.ips) == ("10.0.0.2", ("10.0.0.2", "fd00::3"))
    assert r.status.allocations["a"].addresses == ("10.0.0.2", "fd00::3")
    assert r.status.allocations["a"].reserved_by == "me/1"


@pytest.mark.parametrize(
    "versions",
    [(4, 6), (6, 4), (6,), ()],
    ids=["same-order", "other-order", "fewer-families", "any-family"],
)
def test_taking_back_a_retained_dual_stack_allocation_keeps_both_addresses(versions: tuple[int, ...]) -> None:
    b = body(addresses=MIXED, allocations={})
    first = reserve(
        PoolView.from_obj(b),
        ALONE,
        "u1",
        "ns/web-0",
        now=NOW,
        owner="r/1",
        retention=STS_KEEP,
        versions=(4, 6),
    )
    assert first.status is not None
    kept = retain(with_status(b, first.status), ALONE, "u1", now=NOW)
    assert kept is not None
    assert (kept.allocations["u1"].phase, kept.allocated, kept.retained) == ("Retained", 2, 1)
    r = reserve(
        with_status(b, kept),
        ALONE,
        "u2",
        "ns/web-0",
        now=NOW,
        owner="r/2",
        retention=STS_KEEP,
        versions=versions,
    )
    assert r.taken_back and r.status is not None
    assert (r.ip, r.ips) == ("10.0.0.1", ("10.0.0.1", "fd00::1"))
    assert addresses_of(r.status) == {"u2": ("10.0.0.1", "fd00::1")}
    assert (r.status.allocated, r.status.retained) == (2, 0)


@pytest.mark.parametrize(
    ("capacity", "fallback", "expected"),
    [
        pytest.param(None, False, ("10.0.0.3", "fd00::3"), id="a-victim-freed-two-places"),
        pytest.param(5, False, PoolFull, id="one-place-freed-require"),
        pytest.param(5, True, ("10.0.0.3",), id="one-place-freed-prefer"),
    ],
)
def test_a_held_place_becomes_a_dual_stack_reservation(
    capacity: int | None, fallback: bool, expected: Any
) -> None:
    allocs = {
        "v1": dual("10.0.0.1", "fd00::1", phase="Bound"),
        "v2": dual("10.0.0.2", "fd00::2", phase="Bound"),
        "hi": alloc(None, pod="ns/hi", phase="Nominated"),
    }
    p = view(addresses=["10.0.0.1-10.0.0.3", "fd00::1-fd00::3"], capacity=capacity, allocations=allocs)
    if expected is PoolFull:
        with pytest.raises(PoolFull):
            reserve(p, ALONE, "hi", "ns/hi", now=NOW, owner="me/1", versions=(4, 6), fallback=fallback)
        return
    r = reserve(p, ALONE, "hi", "ns/hi", now=NOW, owner="me/1", versions=(4, 6), fallback=fallback)
    assert r.status is not None and (r.ip, r.ips) == (expected[0], expected)
    held = r.status.allocations["hi"]
    assert (held.phase, held.addresses) == ("Reserved", expected)
    assert (r.status.allocated, r.status.nominated) == (4 + len(expected), 0)


@settings(max_examples=150, deadline=None)
@given(
    n4=st.integers(0, 6),
    n6=st.integers(0, 6),
    cap=st.one_of(st.none(), st.integers(0, 12)),
    ipv6_first=st.booleans(),
    taken=st.lists(st.integers(0, 5), max_size=3),
)
def test_reserving_dual_stack_pods_one_after_another(
    n4: int, n6: int, cap: int | None, ipv6_first: bool, taken: list[int]
) -> None:
    """Dual-stack pods reserved one by one in a mixed pool (some IPv6 addresses held by
    single-stack pods): never an address twice, one of each family in the asked order, as many
    pods as pods_like foretold, and the pool is full when a family or its places run out."""
    versions = (6, 4) if ipv6_first else (4, 6)
    addresses = [f"10.0.0.{i}" for i in range(1, n4 + 1)] + [f"fd00::{i:x}" for i in range(1, n6 + 1)]
    singles = {f"s{i}": alloc(f"fd00::{i + 1:x}", phase="Bound") for i in sorted(set(taken)) if i < n6}
    b = body(addresses=addresses or ["10.9.9.9"], exclude=None if addresses else ["10.9.9.9"], capacity=cap)
    b["status"] = {"allocations": singles}
    p = PoolView.from_obj(b)
    foretold = pods_like(available(p, ALONE), family_free(p, ALONE), versions)
    held = {ip for a in p.allocations.values() for ip in a.addresses}
    got: list[tuple[str, ...]] = []
    while True:
        try:
            r = reserve(p, ALONE, f"u{len(got)}", f"ns/p{len(got)}", now=NOW, versions=versions)
        except PoolFull:
            break
        assert r.status is not None
        assert [family_of(ip) for ip in r.ips] == (["IPv6", "IPv4"] if ipv6_first else ["IPv4", "IPv6"])
        assert not held & set(r.ips), "an address given twice"
        held |= set(r.ips)
        got.append(r.ips)
        p = with_status(b, r.status)
        assert p.allocated == len(singles) + 2 * len(got)
        assert len(got) <= 12
    assert len(got) == foretold
    capacity = min(cap, n4 + n6) if cap is not None else n4 + n6
    assert len(got) == max(0, min(n4, n6 - len(singles), (capacity - len(singles)) // 2))
    free = family_free(p, ALONE)
    assert free.get(4, 0) == 0 or free.get(6, 0) == 0 or p.free() < 2, (
        "full only when a family or places run out"
    )


ADOPT_DUAL = [
    # (allocations of the pool, ip, more, expected addresses or the message of AdoptConflict)
    pytest.param({}, "10.0.0.2", ("fd00::2",), ("10.0.0.2", "fd00::2"), id="both"),
    pytest.param({}, "FD00:0::2", (" 10.0.0.2",), ("fd00::2", "10.0.0.2"), id="ipv6-primary-canonical"),
    pytest.param({"a": alloc("10.0.0.1")}, "10.0.0.2", (), ("10.0.0.2",), id="single-stack"),
    pytest.param(
        {"a": dual("10.0.0.1", "fd00::1")},
        "10.0.0.2",
        ("fd00::1",),
        r"address fd00::1 of pool pool-a is already held by pod ns/p \(UID a\)",
        id="second-address-held",
    ),
    pytest.param(
        {"a": dual("10.0.0.1", "fd00::1")},
        "10.0.0.1",
        ("fd00::2",),
        r"address 10\.0\.0\.1 of pool pool-a is already held",
        id="primary-held",
    ),
    pytest.param({}, "10.0.0.2", ("fd00::9",), "address fd00::9 is not in pool pool-a", id="second-outside"),
    pytest.param({}, "10.0.0.2", ("junk",), "annotation address 'junk' is not an IP", id="second-garbage"),
]


@pytest.mark.parametrize(("allocations", "ip", "more", "expected"), ADOPT_DUAL)
def test_adopt_records_every_address_or_none(
    allocations: dict[str, Any], ip: str, more: tuple[str, ...], expected: tuple[str, ...] | str
) -> None:
    p = view(addresses=MIXED, allocations=allocations)
    before = dict(p.allocations)
    if isinstance(expected, str):
        with pytest.raises(AdoptConflict, match=expected):
            adopt(p, ALONE, "x", "ns/x", ip, now=NOW, more=more)
        assert p.allocations == before, "nothing recorded"
        return
    new = adopt(p, ALONE, "x", "ns/x", ip, now=NOW, more=more)
    assert new is not None
    got = new.allocations["x"]
    assert (got.ip, got.addresses, got.phase) == (expected[0], expected, "Bound")
    assert got.ips == (list(expected) if len(expected) > 1 else None)
    assert new.allocated == p.allocated + len(expected)


@pytest.mark.parametrize(
    ("allocations", "want"),
    [
        pytest.param({"me": dual("10.0.0.1", "fd00::1")}, 7, id="its-two-places-count-free"),
        pytest.param(
            {"me": dual("10.0.0.1", "fd00::1"), "x": dual("10.0.0.2", "fd00::2")}, 5, id="beside-another"
        ),
        pytest.param(
            {"me": alloc("10.0.0.1"), "x": dual("10.0.0.2", "fd00::2")}, 5, id="single-beside-a-dual"
        ),
        pytest.param(
            {"me": alloc(None, phase="Nominated"), "x": dual("10.0.0.2", "fd00::2")},
            5,
            id="nominated-beside-a-dual",
        ),
    ],
)
def test_available_to_counts_the_pods_own_places(allocations: dict[str, Any], want: int) -> None:
    p = view(addresses=MIXED, allocations=allocations)
    assert available_to(p, ALONE, "me") == want


@pytest.mark.parametrize(
    ("ip", "again"), [("10.0.0.2", "10.0.0.2"), ("fd00::2", "FD00:0::2")], ids=["same", "other-spelling"]
)
def test_adopt_never_records_an_address_twice(ip: str, again: str) -> None:
    p = view(addresses=MIXED)
    new = adopt(p, ALONE, "x", "ns/x", ip, now=NOW, more=(again,))
    assert new is not None
    assert new.allocations["x"].addresses == (ip,)
    assert new.allocated == 1


# --------------------------------------------------------------------------- further interfaces


def sticky(
    ip: str, phase: str = "Retained", interface: str | None = "net1", pod: str = "ns/web-0"
) -> dict[str, Any]:
    """A wire-form allocation kept for identity ns/web-0 of StatefulSet uid-sts, of
    ``interface`` (None: the pod's first)."""
    out = {
        **alloc(ip, pod=pod, phase=phase),
        "releasePolicy": "StatefulSet",
        "identity": "ns/web-0",
        "ownerUID": "uid-sts",
    }
    if phase == "Retained":
        out["retainedSince"] = SINCE
    return {**out, **({"interface": interface} if interface else {})}


def test_reserve_records_the_interface_the_allocation_is_for() -> None:
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={})
    new, ip, taken_back, _ = reserve(p, ALONE, "u1", "ns/p", now=NOW, owner="r/1", interface="net1")
    assert new is not None and (ip, taken_back) == ("10.0.0.1", False)
    assert new.allocations["u1"].interface == "net1"
    assert new.to_wire()["allocations"]["u1"]["interface"] == "net1"
    first, _, _, _ = reserve(p, ALONE, "u1", "ns/p", now=NOW, owner="r/1")
    assert first is not None and "interface" not in first.to_wire()["allocations"]["u1"]


@pytest.mark.parametrize(
    ("existing", "interface"),
    [
        pytest.param(alloc("10.0.0.3", pod="ns/p", phase="Bound"), "net1", id="its-first-interfaces"),
        pytest.param(
            {**alloc("10.0.0.3", pod="ns/p"), "interface": "net2"}, "net1", id="another-further-one"
        ),
        pytest.param({**alloc("10.0.0.3", pod="ns/p"), "interface": "net1"}, None, id="the-first-asks"),
        pytest.param(sticky("10.0.0.3", pod="ns/p"), None, id="its-retained-one-of-another-interface"),
    ],
)
def test_a_pool_holding_the_pods_allocation_of_another_interface_has_no_room_for_this_one(
    existing: dict[str, Any], interface: str | None
) -> None:
    """A pod holds one allocation per pool: each interface takes its own."""
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"u1": existing})
    with pytest.raises(PoolFull):
        reserve(p, ALONE, "u1", "ns/p", now=NOW, owner="r/1", interface=interface)


def test_the_interfaces_own_allocation_of_this_cycle_is_returned_as_is() -> None:
    held = {**alloc("10.0.0.3", pod="ns/p"), "interface": "net1", "reservedBy": "r/1"}
    p = view(addresses=["10.0.0.1-10.0.0.4"], allocations={"u1": held})
    assert reserve(p, ALONE, "u1", "ns/p", now=NOW, owner="r/1", interface="net1")[:3] == (
        None,
        "10.0.0.3",
        False,
    )


def test_a_nominated_place_becomes_a_further_interfaces_reservation() -> None:
    p = view(
        addresses=["10.0.0.1-10.0.0.2"],
        allocations={"v": alloc("10.0.0.1", pod="ns/v"), "u1": alloc(None, pod="ns/p", phase="Nominated")},
    )
    new, ip, _, _ = reserve(p, ALONE, "u1", "ns/p", now=NOW, owner="r/1", interface="net1")
    assert new is not None and ip == "10.0.0.2"
    a = new.allocations["u1"]
    assert (a.phase, a.interface) == ("Reserved", "net1")


@pytest.mark.parametrize(
    ("kept_for", "interface", "ip", "taken_back"),
    [
        pytest.param("net1", "net1", "10.0.0.1", True, id="same-interface-taken-back"),
        pytest.param("net1", None, "10.0.0.2", False, id="the-first-interface-does-not-take-net1s"),
        pytest.param("net1", "net2", "10.0.0.2", False, id="another-interface-does-not"),
        pytest.param(None, "net1", "10.0.0.2", False, id="net1-does-not-take-the-first-interfaces"),
        pytest.param(None, None, "10.0.0.1", True, id="the-first-takes-back-its-own-as-before"),
    ],
)
def test_only_a_retained_allocation_of_the_same_interface_is_taken_back(
    kept_for: str | None, interface: str | None, ip: str, taken_back: bool
) -> None:
    p = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"uid-old": sticky("10.0.0.1", interface=kept_for)})
    found = retained_for(p, "ns/web-0", "uid-sts", interface)
    assert (found is not None) is taken_back
    assert (to_take_back(p, "u2", "ns/web-0", STS_KEEP, interface) is not None) is taken_back
    new, got, back, _ = reserve(
        p, ALONE, "u2", "ns/web-0", now=NOW, owner="r/2", retention=STS_KEEP, interface=interface
    )
    assert new is not None and (got, back) == (ip, taken_back)
    assert ("uid-old" in new.allocations) is not taken_back
    assert new.allocations["u2"].interface == interface


@pytest.mark.parametrize(
    ("kept_for", "interface", "own"),
    [
        pytest.param("net1", "net1", True, id="same-interface"),
        pytest.param("net1", None, False, id="the-first-asks"),
        pytest.param(None, "net1", False, id="net1-asks"),
    ],
)
def test_its_own_retained_allocation_is_taken_back_only_by_the_same_interface(
    kept_for: str | None, interface: str | None, own: bool
) -> None:
    p = view(addresses=["10.0.0.1-10.0.0.3"], allocations={"u2": sticky("10.0.0.1", interface=kept_for)})
    assert (to_take_back(p, "u2", "ns/web-0", STS_KEEP, interface) is not None) is own


@pytest.mark.parametrize(
    ("held_for", "interface", "held"),
    [
        pytest.param("net1", "net1", True, id="same-interface-waits"),
        pytest.param("net1", None, False, id="the-first-interface-does-not-wait-for-net1s"),
        pytest.param(None, "net1", False, id="net1-does-not-wait-for-the-first-interfaces"),
    ],
)
def test_an_identity_waits_only_for_its_address_of_the_same_interface(
    held_for: str | None, interface: str | None, held: bool
) -> None:
    """The previous pod's allocation is still Bound (its release on its way)."""
    p = view(
        addresses=["10.0.0.1-10.0.0.3"],
        allocations={"uid-old": sticky("10.0.0.1", phase="Bound", interface=held_for)},
    )
    assert (identity_held(p, "u2", "ns/web-0", STS_KEEP, interface) is not None) is held
    if held:
        with pytest.raises(IdentityHeld):
            reserve(p, ALONE, "u2", "ns/web-0", now=NOW, owner="r/2", retention=STS_KEEP, interface=interface)
        return
    new, ip, _, _ = reserve(
        p, ALONE, "u2", "ns/web-0", now=NOW, owner="r/2", retention=STS_KEEP, interface=interface
    )
    assert new is not None and ip == "10.0.0.2"


# --------------------------------------------------------------------------- adopting further interfaces

NET1 = {**alloc("10.0.0.3", pod="ns/p", phase="Bound"), "interface": "net1"}
"""Pod u1's allocation of its interface net1."""


@pytest.mark.parametrize(
    ("allocations", "ip", "more", "interface", "expected"),
    [
        pytest.param({}, "10.0.0.2", (), "net1", ("10.0.0.2",), id="further-interface"),
        pytest.param({}, "10.0.0.2", ("fd00::2",), "net1", ("10.0.0.2", "fd00::2"), id="dual-stack"),
        pytest.param({}, "10.0.0.2", (), None, ("10.0.0.2",), id="first-interface"),
        pytest.param({"a": alloc("10.0.0.1")}, "10.0.0.2", (), "net1", ("10.0.0.2",), id="beside-another"),
        pytest.param(
            {"a": alloc("10.0.0.2")},
            "10.0.0.2",
            (),
            "net1",
            r"address 10\.0\.0\.2 of pool pool-a is already held by pod ns/p \(UID a\)",
            id="held-by-another-pod",
        ),
        pytest.param(
            {"a": alloc("fd00::2")},
            "10.0.0.2",
            ("fd00::2",),
            "net1",
            "address fd00::2 of pool pool-a is already held",
            id="second-held-none-recorded",
        ),
        pytest.param({}, "10.0.9.9", (), "net1", "address 10.0.9.9 is not in pool pool-a", id="outside"),
        pytest.param({}, "junk", (), "net1", "annotation address 'junk' is not an IP", id="garbage"),
        pytest.param(
            {"u1": alloc("10.0.0.3", pod="ns/p", phase="Bound")},
            "10.0.0.2",
            (),
            "net1",
            "pool pool-a already records the pod's allocation of its first interface, not of interface "
            r"net1 \(a pod holds one allocation per pool\)",
            id="pool-holds-its-first-interface",
        ),
        pytest.param(
            {"u1": NET1},
            "10.0.0.2",
            (),
            "net2",
            "pool pool-a already records the pod's allocation of interface net1, not of interface net2",
            id="pool-holds-another-further-interface",
        ),
        pytest.param(
            {"u1": NET1},
            "10.0.0.2",
            (),
            None,
            "pool pool-a already records the pod's allocation of interface net1, not of its first interface",
            id="first-interface-into-a-pool-holding-a-further-one",
        ),
        pytest.param(
            {},
            "10.0.0.1",
            ("10.0.0.2", "fd00::1"),
            "net1",
            "3 addresses: an allocation holds at most 2",
            id="too-many-addresses",
        ),
    ],
)
def test_adopt_records_the_interface_with_every_address_or_none(
    allocations: dict[str, Any],
    ip: str,
    more: tuple[str, ...],
    interface: str | None,
    expected: tuple[str, ...] | str,
) -> None:
    p = view(addresses=MIXED, allocations=allocations)
    before = dict(p.allocations)
    if isinstance(expected, str):
        with pytest.raises(AdoptConflict, match=expected):
            adopt(p, ALONE, "u1", "ns/p", ip, now=NOW, more=more, interface=interface)
        assert p.allocations == before, "nothing recorded"
        return
    new = adopt(p, ALONE, "u1", "ns/p", ip, now=NOW, more=more, interface=interface)
    assert new is not None
    got = new.allocations["u1"]
    assert (got.addresses, got.phase, got.interface) == (expected, "Bound", interface)
    assert new.to_wire()["allocations"]["u1"].get("interface") == interface
    assert new.allocated == p.allocated + len(expected)


@pytest.mark.parametrize(
    ("interface", "ip"),
    [
        pytest.param("net1", "10.0.0.3", id="same-addresses"),
        pytest.param("net1", "10.0.0.2", id="other-addresses"),
    ],
)
def test_adopting_an_interface_already_recorded_does_nothing(interface: str, ip: str) -> None:
    p = view(addresses=MIXED, allocations={"u1": NET1})
    assert adopt(p, ALONE, "u1", "ns/p", ip, interface=interface) is None


def test_adopt_keeps_a_further_interfaces_retention() -> None:
    p = view(addresses=MIXED, allocations={})
    keep = Retention("StatefulSet", "ns/web-0", "uid-sts")
    new = adopt(p, ALONE, "u1", "ns/web-0", "10.0.0.2", now=NOW, retention=keep, interface="net1")
    assert new is not None
    got = new.allocations["u1"]
    assert (got.interface, got.release_policy, got.identity, got.owner_uid) == (
        "net1",
        "StatefulSet",
        "ns/web-0",
        "uid-sts",
    )
