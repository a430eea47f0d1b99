"""underlayip/reconciler: the NodeIPPool watch-stall detector (Reconciler.check_watch; fake
clock, no server) and the garbage-collection sweep's pacing and which Bound marks it writes."""

from __future__ import annotations

import asyncio
import datetime
import types
from typing import Any

import pytest

from ipscheduler.backend.health import HealthState
from ipscheduler.underlayip.models import Allocation
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.reconciler import Reconciler, RepairTimings, gc_pause
from ipscheduler.underlayip.repair import Repair
from tests.builders import pool
from tests.unit.fakes import pool_cache, pool_controller

TIMEOUT = 90.0
KEY = "nodeippools"


def view(name: str, rv: str) -> PoolView:
    return pool(name, rv=rv, capacity=1)


def live(**rvs: str) -> list[dict[str, Any]]:
    """A live LIST of pools, ``name=resourceVersion``."""
    return [{"metadata": {"name": n.replace("_", "-"), "resourceVersion": rv}} for n, rv in rvs.items()]


class Harness:
    """A PoolController over a dict-backed cache, with the running loop's clock under test control."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.t = [1000.0]
        loop = asyncio.get_running_loop()
        monkeypatch.setattr(loop, "time", lambda: self.t[0])
        self.pools: dict[str, list[PoolView]] = {}
        self.cache = pool_cache({}, self.pools)
        self.health = HealthState()
        self.sched = pool_controller(
            self.cache,
            scheduler_name="ipscheduler",
            timings=RepairTimings(watch_timeout=TIMEOUT),
            health=self.health,
        )

    def cached(self, **rvs: str) -> None:
        """Replace the cache's pools (what the watch has delivered)."""
        self.pools.clear()
        for n, rv in rvs.items():
            name = n.replace("_", "-")
            self.pools[name] = [view(name, rv)]
        self.cache.invalidate()  # as the pool event handler does after kopf updated its index

    def check(self, at: float, live_pools: list[dict[str, Any]]) -> bool:
        """Run check_watch at ``at`` seconds after start; True when the pool watch is flagged stalled."""
        self.t[0] = 1000.0 + at
        self.sched.repairs.check_watch(live_pools)
        return KEY in self.health.stalled


@pytest.fixture
async def h(monkeypatch: pytest.MonkeyPatch) -> Harness:
    return Harness(monkeypatch)


async def test_controller_defaults() -> None:
    """Without a health object the Reconciler makes its own; the watch timeout defaults to 90 s."""
    sched = pool_controller(pool_cache(), scheduler_name="x")
    assert sched.repairs.timings.watch_timeout == pytest.approx(90.0)
    assert isinstance(sched.repairs.health, HealthState)
    assert sched.repairs.health.stalled == {}


# Each case: cache contents, live LIST, and a list of (time, stalled?) checks with that state held.
SCENARIOS = [
    ({"pool_a": "5"}, {"pool_a": "5"}, [(0, False), (200, False), (10_000, False)]),
    ({"pool_a": "5", "pool_b": "7"}, {"pool_a": "5", "pool_b": "7"}, [(0, False), (500, False)]),
    ({}, {}, [(0, False), (500, False)]),
    ({"pool_a": "5"}, {"pool_a": "6"}, [(0, False), (30, False), (89, False), (90, False)]),
    ({"pool_a": "5"}, {"pool_a": "6"}, [(0, False), (60, False), (91, True), (300, True)]),
    ({"pool_a": "5", "pool_b": "7"}, {"pool_a": "5", "pool_b": "8"}, [(0, False), (95, True)]),
    ({"pool_a": "5", "pool_b": "7"}, {"pool_a": "5"}, [(0, False), (50, False), (95, True)]),
    ({"pool_a": "5"}, {}, [(0, False), (95, True)]),
    ({}, {"pool_a": "5"}, [(0, False), (95, True)]),
    ({"pool_a": "5"}, {"pool_a": "6"}, [(200, False), (250, False), (291, True)]),
]


@pytest.mark.parametrize(
    ("cache", "listed", "checks"),
    SCENARIOS,
    ids=[
        "in-sync-one-pool",
        "in-sync-two-pools",
        "no-pools",
        "lagging-up-to-timeout",
        "lagging-longer-than-timeout",
        "one-of-two-lagging",
        "cached-pool-gone-from-live-list",
        "only-pool-gone-from-live-list",
        "live-pool-missing-from-cache",
        "clock-starts-at-first-sighting",
    ],
)
async def test_check_watch_scenarios(
    h: Harness, cache: dict[str, str], listed: dict[str, str], checks: list[tuple[float, bool]]
) -> None:
    h.cached(**cache)
    for at, stalled in checks:
        assert h.check(at, live(**listed)) is stalled, f"at t={at}"
        assert h.health.healthy()[0] is (not stalled), f"at t={at}"


async def test_stall_sets_message_and_unhealthy(h: Harness) -> None:
    h.cached(pool_a="5")
    h.check(0, live(pool_a="6"))
    h.check(120, live(pool_a="6"))
    assert h.health.stalled[KEY] == "watch stalled: cache 120s behind the API server"
    ok, why = h.health.healthy()
    assert not ok
    assert why == "nodeippools: watch stalled: cache 120s behind the API server"


async def test_catching_up_clears_the_stall(h: Harness) -> None:
    h.cached(pool_a="5")
    assert not h.check(0, live(pool_a="6"))
    assert h.check(100, live(pool_a="6"))
    h.cached(pool_a="6")
    assert not h.check(130, live(pool_a="6"))
    assert KEY not in h.health.stalled
    assert h.health.healthy() == (True, "ok")


async def test_clock_restarts_after_catching_up(h: Harness) -> None:
    h.cached(pool_a="5")
    h.check(0, live(pool_a="6"))
    h.cached(pool_a="6")
    assert not h.check(50, live(pool_a="6"))
    # lags again: a new clock from t=60, not from t=0
    assert not h.check(60, live(pool_a="7"))
    assert not h.check(140, live(pool_a="7"))
    assert h.check(151, live(pool_a="7"))


async def test_gone_pool_catching_up_clears(h: Harness) -> None:
    h.cached(pool_a="5", pool_b="7")
    h.check(0, live(pool_a="5"))
    assert h.check(100, live(pool_a="5"))
    h.cached(pool_a="5")  # the watch delivered the DELETED event
    assert not h.check(110, live(pool_a="5"))


async def test_worst_pool_decides(h: Harness) -> None:
    """A pool lagging since t=0 stays the worst even when another starts lagging later."""
    h.cached(pool_a="5", pool_b="7")
    assert not h.check(0, live(pool_a="6", pool_b="7"))
    assert not h.check(80, live(pool_a="6", pool_b="8"))
    assert h.check(91, live(pool_a="6", pool_b="8"))
    h.cached(pool_a="6", pool_b="7")  # pool-a caught up; pool-b lags since t=80
    assert not h.check(100, live(pool_a="6", pool_b="8"))
    assert h.check(171, live(pool_a="6", pool_b="8"))


async def test_other_stall_entries_are_left_alone(h: Harness) -> None:
    h.health.stalled["pods"] = "something else"
    h.cached(pool_a="5")
    h.check(0, live(pool_a="5"))
    assert h.health.stalled == {"pods": "something else"}


async def test_fresh_overlay_counts_as_cache(h: Harness) -> None:
    """The cache answers with our own newer write; matching that live RV is in sync."""
    h.cached(pool_a="5")
    h.cache.store_fresh(view("pool-a", "6"))
    assert not h.check(0, live(pool_a="6"))
    assert not h.check(200, live(pool_a="6"))


@pytest.mark.parametrize(
    "offset",
    [-1, 1],
    ids=["cache-one-behind-but-progressing", "cache-one-ahead-of-list"],
)
async def test_progressing_cache_is_not_stalled(h: Harness, offset: int) -> None:
    for i, at in enumerate([0, 30, 60, 95, 125]):
        live_rv = 10 * (i + 1)
        h.cached(pool_a=str(live_rv + offset))
        h.check(at, live(pool_a=str(live_rv)))
    assert KEY not in h.health.stalled


# --------------------------------------------------------------------------- the GC sweep


@pytest.mark.parametrize(
    ("last_sweep", "pause"),
    [
        pytest.param(0.05, 30.0, id="fast-sweep-keeps-the-interval"),
        pytest.param(0.6, 30.0, id="at-the-duty-limit"),
        pytest.param(1.5, 75.0, id="slow-sweep-stretches-the-pause"),
        pytest.param(60.0, 300.0, id="capped-at-ten-intervals"),
    ],
)
def test_gc_pause_bounds_the_sweeps_share_of_time(last_sweep: float, pause: float) -> None:
    assert gc_pause(30.0, last_sweep) == pytest.approx(pause)


@pytest.mark.parametrize(
    ("action", "age_s", "due"),
    [
        pytest.param("mark_bound", 5.0, False, id="young-mark-waits-for-the-pools-next-write"),
        pytest.param("mark_bound", 299.0, False, id="just-under-the-delay"),
        pytest.param("mark_bound", 300.0, True, id="at-the-delay-written-by-the-sweep"),
        pytest.param("mark_bound", 86_400.0, True, id="a-lost-mark-a-day-old"),
        pytest.param("mark_bound", -60.0, False, id="since-in-the-future-counts-as-now"),
        pytest.param("release", 3600.0, False, id="not-a-mark"),
    ],
)
def test_the_sweep_writes_a_bound_mark_only_after_the_bound_mark_delay(
    action: str, age_s: float, due: bool
) -> None:
    """PostBind's deferred mark rides along with the pool's next write; a sweep writes it
    only when the allocation is older than --bound-mark-delay (300 s here)."""
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    since = now - datetime.timedelta(seconds=age_s)
    alloc = Allocation(ip="10.0.0.1", pod="ns/p", phase="Reserved", since=since)
    r = Repair(action, "pool", "uid", "ns/p", "why", "10.0.0.1", allocation=alloc)  # type: ignore[arg-type]
    ctrl = types.SimpleNamespace(timings=RepairTimings(bound_mark_delay=300.0))
    assert Reconciler.mark_due(ctrl, r, now) is due  # type: ignore[arg-type]


async def test_the_bound_mark_delay_defaults_to_five_minutes() -> None:
    sched = pool_controller(pool_cache(), scheduler_name="x")
    assert sched.repairs.timings.bound_mark_delay == pytest.approx(300.0)


@pytest.mark.parametrize(
    ("reserved_by", "assumed", "exempt"),
    [
        pytest.param("me/1234", True, True, id="this-replicas-cycle-held-at-permit"),
        pytest.param("dead/1234", True, False, id="another-process-same-pod-assumed-here"),
        pytest.param(None, True, False, id="no-reservedBy"),
        pytest.param("me/1234", False, False, id="not-assumed-here"),
    ],
)
def test_the_gc_spares_only_this_replicas_reservations_of_a_pod_in_a_live_cycle(
    reserved_by: str | None, assumed: bool, exempt: bool
) -> None:
    """A pod held at Permit here keeps the reservation this replica made past --reserved-ttl;
    the reservation a SIGKILLed process made for the same pod is released: the pod keeps one
    address, not two."""
    from ipscheduler.framework.types import PodInfo

    since = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    alloc = Allocation(ip="10.0.0.1", pod="ns/p", phase="Reserved", since=since, reservedBy=reserved_by)
    r = Repair("release", "pool", "uid", "ns/p", "why", "10.0.0.1", allocation=alloc)
    node_cache = types.SimpleNamespace(is_assumed=lambda uid: assumed and uid == "uid")
    ctrl = types.SimpleNamespace(identity="me", cache=types.SimpleNamespace(node_cache=node_cache))
    pods = {"uid": PodInfo(uid="uid", namespace="ns", name="p")}
    assert Reconciler._in_cycle(ctrl, r, pods) is exempt  # type: ignore[arg-type]
