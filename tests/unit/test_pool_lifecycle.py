"""NodeIPPool lifecycle in ipscheduler.underlayip.allocator: deletion, finalizers, spec shrink/grow."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.allocator import PoolFull, pick, reserve
from ipscheduler.underlayip.models import NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView, ready_condition, refresh
from tests.unit.fakes import pool_cache

SINCE = "2024-01-01T00:00:00Z"
NOW = datetime.datetime(2024, 6, 1, 12, 0, 0, tzinfo=datetime.UTC)
CTX = PoolContext()


def alloc(ip: str | None, pod: str = "ns/p", phase: str = "Bound") -> dict[str, Any]:
    out: dict[str, Any] = {"pod": pod, "phase": phase, "since": SINCE}
    if ip is not None:
        out["ip"] = ip
    return out


def body(
    name: str = "pool-a",
    node: str = "node-a",
    addresses: list[str] | None = None,
    exclude: list[str] | None = None,
    capacity: int | None = None,
    allocations: dict[str, Any] | None = None,
    deleting: bool = False,
    finalizers: Any = None,
    rv: str = "1",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node}
    if addresses is not None:
        spec["addresses"] = addresses
    if exclude is not None:
        spec["exclude"] = exclude
    if capacity is not None:
        spec["capacity"] = capacity
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "generation": 1, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = SINCE
    if finalizers is not None:
        meta["finalizers"] = finalizers
    out: dict[str, Any] = {"metadata": meta, "spec": spec}
    if allocations is not None:
        out["status"] = {"allocations": allocations}
    return out


def view(**kw: Any) -> PoolView:
    return PoolView.from_obj(body(**kw))


def with_status(b: dict[str, Any], status: NodeIPPoolStatus) -> PoolView:
    """Write ``status`` into ``b`` as the API server would, bump the RV, re-parse."""
    b["status"] = status.to_wire()
    b["metadata"]["resourceVersion"] = str(int(b["metadata"]["resourceVersion"]) + 1)
    return PoolView.from_obj(b)


def allocs(n: int, prefix: str = "10.0.0.") -> dict[str, Any]:
    return {f"u{i}": alloc(f"{prefix}{i}", pod=f"ns/p{i}") for i in range(1, n + 1)}


# --------------------------------------------------------------------------- deletion

TERMINATING = [
    ({"addresses": ["10.0.0.0/28"]}, CTX, 0),
    ({"addresses": ["10.0.0.0/28"], "allocations": allocs(1)}, CTX, 1),
    ({"addresses": ["10.0.0.0/28"], "allocations": allocs(3)}, CTX, 3),
    ({"capacity": 5, "allocations": {"u1": alloc(None), "u2": alloc(None, pod="ns/q")}}, CTX, 2),
    ({"addresses": ["not-an-ip"], "allocations": allocs(2)}, CTX, 2),
    ({"addresses": ["10.0.0.1-10.0.0.2"], "allocations": allocs(4)}, CTX, 4),
    ({"addresses": ["10.0.0.0/28"], "allocations": allocs(2)}, PoolContext(node_exists=False), 2),
    ({}, CTX, 0),
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
    assert ready_condition(view(addresses=["10.0.0.0/28"], allocations=allocs(3)), CTX) == (
        "True",
        "Ready",
        "11 of 14 free",  # a /28 without network and broadcast address
    )


def test_refresh_of_deleting_pool_reports_terminating_and_keeps_allocations() -> None:
    p = view(addresses=["10.0.0.0/28"], allocations=allocs(2), deleting=True)
    new = refresh(p, CTX, NOW)
    assert new is not None
    assert set(new.allocations) == {"u1", "u2"}
    assert new.allocated == 2
    cond = next(c for c in new.conditions if c.type == "Ready")
    assert (cond.status, cond.reason) == ("False", "Terminating")
    assert "2 allocation" in cond.message


DELETING_POOLS = [
    {"addresses": ["10.0.0.0/28"], "allocations": {"u1": alloc("10.0.0.1")}},
    {"capacity": 5, "allocations": {"u1": alloc(None)}},
    {"addresses": ["10.0.0.0/28"], "allocations": {"u1": alloc("10.0.0.1", phase="Reserved")}},
]
DELETING_IDS = ["addresses", "count-only", "reserved-holder"]


@pytest.mark.parametrize("kw", DELETING_POOLS, ids=DELETING_IDS)
def test_pick_and_reserve_refuse_deleting_pool(kw: dict[str, Any]) -> None:
    p = view(deleting=True, **kw)
    assert pick(p, CTX, "new") == (False, None)
    with pytest.raises(PoolFull):
        reserve(p, CTX, "new", "ns/new", NOW)
    # the same pool, not deleting, has room: the refusal is due to the deletion only
    live = view(**kw)
    assert pick(live, CTX, "new")[0] is True


@pytest.mark.parametrize("kw", DELETING_POOLS, ids=DELETING_IDS)
def test_existing_holder_keeps_its_allocation_in_deleting_pool(kw: dict[str, Any]) -> None:
    p = view(deleting=True, **kw)
    ip = p.allocations["u1"].ip
    assert pick(p, CTX, "u1") == (True, ip)
    assert reserve(p, CTX, "u1", "ns/p", NOW) == (None, ip)


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
    b = body(addresses=["10.0.0.1-10.0.0.4"], allocations=allocs(4))
    before = PoolView.from_obj(b)
    assert before.free() == 0
    b["spec"].pop("addresses")
    b["spec"].update(spec)
    b["metadata"]["generation"] = 2
    p = PoolView.from_obj(b)
    assert p.spec_error is None
    new = refresh(p, CTX, NOW)
    assert new is not None
    assert new.allocations == before.allocations
    assert (new.capacity, new.allocated, new.free) == (capacity, 4, 0)
    cond = next(c for c in new.conditions if c.type == "Ready")
    assert (cond.status, cond.reason) == ("False", "OverCommitted")
    assert cond.message == f"4 allocated but capacity is {capacity}"
    after = with_status(b, new)
    assert pick(after, CTX, "new") == (False, None)
    with pytest.raises(PoolFull):
        reserve(after, CTX, "new", "ns/new", NOW)
    # the holders keep their addresses
    for uid, a in before.allocations.items():
        assert pick(after, CTX, uid) == (True, a.ip)


def test_shrink_count_only_keeps_allocations() -> None:
    b = body(capacity=4, allocations={f"u{i}": alloc(None, pod=f"ns/p{i}") for i in range(3)})
    b["spec"]["capacity"] = 1
    p = PoolView.from_obj(b)
    new = refresh(p, CTX, NOW)
    assert new is not None
    assert set(new.allocations) == {"u0", "u1", "u2"}
    assert (new.capacity, new.allocated, new.free) == (1, 3, 0)
    assert ready_condition(p, CTX)[1] == "OverCommitted"
    assert pick(p, CTX, "new") == (False, None)


def _fill(b: dict[str, Any], ctx: PoolContext = CTX) -> list[str]:
    """Reserve for new pods until the pool is full; returns the handed-out addresses."""
    got: list[str] = []
    p = PoolView.from_obj(b)
    for i in range(100):
        try:
            status, ip = reserve(p, ctx, f"new{i}", f"ns/new{i}", NOW)
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
        {"u1": alloc("10.0.0.1"), "u3": alloc("10.0.0.3", pod="ns/q")},
        {"addresses": ["10.0.0.1-10.0.0.2"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u3": alloc("10.0.0.3")},
        {"addresses": ["10.0.0.1-10.0.0.2"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u3": alloc("10.0.0.3")},
        {"addresses": ["10.0.0.1-10.0.0.4"], "exclude": ["10.0.0.3"]},
        {"addresses": ["10.0.0.1-10.0.0.4"]},
        ["10.0.0.1", "10.0.0.2", "10.0.0.4"],
    ),
    (
        {"u1": alloc("fd00:0::1"), "u2": alloc("FD00::2", pod="ns/q")},
        {"addresses": ["fd00::3"]},
        {"addresses": ["fd00::1-fd00::4"]},
        ["fd00::3", "fd00::4"],
    ),
    (
        {"u1": alloc("10.0.0.9")},
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
    new = refresh(p, CTX, NOW)
    assert new is not None
    assert {uid: a.ip for uid, a in new.allocations.items()} == held
    p = with_status(b, new)
    possible, ip = pick(p, CTX, "new")
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
        addresses=["fd00::1-fd00::3"], allocations={"u1": alloc("FD00:0:0::1"), "u2": alloc("fd00::0:2")}
    )
    assert pick(p, CTX, "new") == (True, "fd00::3")


def test_address_held_in_another_pool_is_never_handed_out() -> None:
    a = body("pool-a", node="node-a", addresses=["10.0.0.1-10.0.0.4"], allocations={"u5": alloc("10.0.0.5")})
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
