"""underlayip/controller: the pending-pod and bound-pod events to their subscribers (the pool
controller and the scheduler): when an address is released, adopted or restored.

kopf watches only pending pods (``spec.nodeName=``). A pod that gets bound
leaves that watch as a DELETED event carrying its previous, unbound state,
exactly like a pod that was deleted; releasing on that event alone would
hand out the address of a running pod again (seen in the e2e suite).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import Conflict
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.scheduler.scheduler import Scheduler
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.controller import PoolController
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.reconciler import Reconciler
from ipscheduler.underlayip.releasing import ReleaseClock
from ipscheduler.underlayip.repair import Repair
from ipscheduler.underlayip.selection import NamespaceDefaults
from ipscheduler.underlayip.writer import PoolWriter
from tests.builders import SINCE, alloc, ours, pool_body
from tests.builders import pending_pod_body as pod_body
from tests.unit.fakes import FakePoolApi, pool_cache, pool_controller


class Api(FakePoolApi):
    """Pools plus the one pod read release_if_gone makes, and the LIST of our pods (``pods``,
    answered once ``listing`` is set)."""

    def __init__(self, pools: list[dict[str, Any]], live: dict[str, Any] | None) -> None:
        super().__init__(pools)
        self.live = live
        self.reads = 0
        self.pods: list[dict[str, Any]] = []
        self.listing = asyncio.Event()
        self.listing.set()

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.live

    async def pod_pages(self, field_selector: str) -> AsyncIterator[list[dict[str, Any]]]:
        await self.listing.wait()
        yield self.pods

    async def list_cluster_objects(self, res: Any) -> list[dict[str, Any]]:
        """The GC sweep's LIST of the pools."""
        return [copy.deepcopy(b) for b in self.bodies.values()]


class Events:
    """Records events instead of posting them."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def forget(self, uid: str) -> None:
        pass

    async def record(self, obj: dict[str, str], event_type: str, reason: str, message: str) -> None:
        self.seen.append((obj["name"], reason, message))


class Recorder:
    def forget(self, uid: str) -> None:
        pass


def controller(api: Api, cache: PoolCache) -> PoolController:
    """The pool controller over ``api`` and ``cache``, with its own writer and a fake recorder."""
    return pool_controller(cache, api, PoolWriter(api, cache), Events())  # type: ignore[arg-type]


def setup(
    live: dict[str, Any] | None, more: tuple[dict[str, Any], ...] = ()
) -> tuple[Scheduler, PoolController, Api]:
    """Pool p (node-1) holding u1's 10.0.0.1, and the pools ``more`` (bodies), in the cache
    and the API server; ``live``: what a read of the pod returns."""
    pool = pool_body(
        "p",
        "node-1",
        addresses=["10.0.0.1-10.0.0.4"],
        rv="10",
        allocations={"u1": alloc("10.0.0.1", pod="ns/pod-u1")},
    )
    index = {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in (pool, *more)}
    cache = pool_cache({"node-1": [NodeInfo(name="node-1", ready=True)]}, index)
    api = Api([pool, *more], live)
    sched = Scheduler(
        name="ip-scheduler",
        api=api,  # type: ignore[arg-type]
        cache=cache.node_cache,
        profile=Framework(scheduler_name="ip-scheduler", queue_sort=PrioritySort()),
        queue=SchedulingQueue(PrioritySort()),
        recorder=Recorder(),  # type: ignore[arg-type]
    )
    return sched, controller(api, cache), api


def bound_event(
    sched: Scheduler, ctrl: PoolController, kind: str, old: PodInfo | None, new: PodInfo | None
) -> None:
    """The bound-pods informer's event, to its two subscribers in cmd/wiring's order."""
    either = new or old
    assert either is not None
    sched.handlers.on_bound_pod_event(kind, old, new)
    ctrl.on_bound_pod_event(kind, either.uid, {}, old, new)


def bound(sched: Scheduler, ctrl: PoolController, pod: PodInfo) -> None:
    """The bound-pods informer reports ``pod`` as new."""
    bound_event(sched, ctrl, "ADDED", None, pod)


def pending(sched: Scheduler, ctrl: PoolController, kind: str, body: dict[str, Any]) -> None:
    """kopf's pending-pod watch reports ``body``, to its two subscribers in cmd/wiring's order
    (:class:`~ipscheduler.kube.informer.PendingPodEvents`)."""
    pod = PodInfo.from_obj(body)
    sched.handlers.on_pod_event(kind, pod)
    ctrl.on_pending_pod(kind, pod)


async def settle(ctrl: PoolController) -> None:
    for _ in range(5):
        await asyncio.gather(*ctrl._tasks, *ctrl.clock.tasks)
        await asyncio.sleep(0)


def held(api: Api) -> bool:
    return "u1" in api.bodies["p"]["status"]["allocations"]


@pytest.mark.parametrize(
    ("live", "released"),
    [
        (None, True),
        (pod_body(node="node-1", phase="Running"), False),
        (pod_body(uid="someone-else"), True),
        (pod_body(node="node-1", phase="Succeeded"), True),
    ],
    ids=["deleted", "bound-by-another-replica", "name-reused-by-new-pod", "finished"],
)
async def test_leaving_the_pending_watch_releases_only_what_a_live_read_confirms_gone(
    live: dict[str, Any] | None, released: bool
) -> None:
    sched, ctrl, api = setup(live)
    pending(sched, ctrl, "DELETED", pod_body())
    await settle(ctrl)
    assert api.reads == 1
    assert held(api) is not released


async def test_a_pod_we_bound_leaves_the_watch_without_any_read_or_release() -> None:
    sched, ctrl, api = setup(None)
    sched.cache.assume_pod(PodInfo.from_obj(pod_body(node="node-1")))
    sched.cache.finish_binding("u1")  # our Binding POST went out, for the pod assumed on its node
    pending(sched, ctrl, "DELETED", pod_body())
    await settle(ctrl)
    assert api.reads == 0 and held(api)
    assert sched.cache.is_assumed("u1"), "counted on its node until the bound-pods informer adds it"


async def test_a_terminal_pending_pod_is_released_at_once() -> None:
    sched, ctrl, api = setup(None)
    pending(sched, ctrl, "MODIFIED", pod_body(phase="Failed"))
    await settle(ctrl)
    assert api.reads == 0 and not held(api)


async def test_bound_pod_gone_from_its_node_is_released() -> None:
    sched, ctrl, api = setup(None)
    bound_event(sched, ctrl, "DELETED", PodInfo.from_obj(pod_body(node="node-1", phase="Running")), None)
    await settle(ctrl)
    assert not held(api)


async def test_bound_pod_gone_is_no_longer_assumed_on_its_node() -> None:
    """Bound and deleted before any snapshot saw the pods-by-node watch have it: a phantom
    pod left in the assumed set would count against the node's resources and affinity."""
    sched, ctrl, _ = setup(None)
    gone = PodInfo.from_obj(pod_body(node="node-1", phase="Running"))
    sched.cache.assume_pod(gone)
    assert sched.cache.snapshot()["node-1"].pods == (gone,)
    bound_event(sched, ctrl, "DELETED", gone, None)
    await settle(ctrl)
    assert sched.cache.snapshot()["node-1"].pods == ()


# --------------------------------------------------------------------------- pods created already bound


def prebound_body(uid: str, ip: str, pool: str = "p") -> dict[str, Any]:
    """A pod created already bound, with our annotations."""
    body = pod_body(uid=uid, node="node-1", phase="Running")
    body["metadata"]["annotations"] = ours(pool, ip)
    return body


def prebound(uid: str, ip: str, pool: str = "p") -> PodInfo:
    return PodInfo.from_obj(prebound_body(uid, ip, pool))


async def test_a_pod_created_bound_is_claimed_at_once_then_adopted() -> None:
    sched, ctrl, api = setup(None)
    ctrl.started.set()
    bound(sched, ctrl, prebound("u9", "10.0.0.2"))
    # Before the adoption is written, its address is taken for every reservation.
    pool = ctrl.cache.pool("p")
    assert pool is not None and ctrl.cache.context(pool).pod_held == {"10.0.0.2": {"u9"}}
    await settle(ctrl)
    got = api.bodies["p"]["status"]["allocations"]["u9"]
    assert (got["ip"], got["phase"], got["pod"]) == ("10.0.0.2", "Bound", "ns/pod-u9")
    assert ctrl.claims == {}
    writes = len(api.puts)
    again = dataclasses.replace(prebound("u9", "10.0.0.2"), resource_version="2")
    bound_event(sched, ctrl, "MODIFIED", prebound("u9", "10.0.0.2"), again)  # recorded now: nothing to do
    await settle(ctrl)
    assert len(api.puts) == writes


async def test_a_pod_created_bound_with_a_held_address_gets_address_conflict_on_both_pods() -> None:
    sched, ctrl, api = setup(None)
    ctrl.started.set()
    events: Events = ctrl.recorder  # type: ignore[assignment]
    bound(sched, ctrl, prebound("u9", "10.0.0.1"))  # held by u1
    await settle(ctrl)
    assert "u9" not in api.bodies["p"]["status"]["allocations"]
    assert [(name, reason) for name, reason, _ in events.seen] == [
        ("pod-u9", "AddressConflict"),
        ("pod-u1", "AddressConflict"),
    ]
    assert "already held by pod ns/pod-u1" in events.seen[0][2]
    assert "pod ns/pod-u9" in events.seen[1][2]
    assert ctrl.claims == {}


@pytest.mark.parametrize(
    ("network", "events"),
    [
        (None, []),
        ('{"ips":[{"address":"10.0.0.2/32"}]}', []),
        ('{ "ips": [ {"address": "10.0.0.2/32"} ] }', []),
        ('{"ips":[{"address":"10.0.0.2/24","gateway":"10.0.0.1"}]}', ["NetworkMismatch"]),
        ("not json", ["NetworkMismatch"]),
    ],
    ids=["absent", "as-the-pool-gives-it", "same-json-other-spelling", "other-prefix", "garbage"],
)
async def test_an_adopted_pods_network_annotation_is_compared_with_the_pool(
    network: str | None, events: list[str]
) -> None:
    sched, ctrl, api = setup(None)
    ctrl.started.set()
    seen: Events = ctrl.recorder  # type: ignore[assignment]
    pod = prebound("u9", "10.0.0.2")
    if network is not None:
        pod = dataclasses.replace(pod, annotations={**pod.annotations, "ipscheduler.io/network": network})
    bound(sched, ctrl, pod)
    await settle(ctrl)
    assert api.bodies["p"]["status"]["allocations"]["u9"]["ip"] == "10.0.0.2"  # adopted either way
    assert [reason for _, reason, _ in seen.seen] == events
    if events:
        assert '10.0.0.2: {"ips":[{"address":"10.0.0.2/32"}]}' in seen.seen[0][2]


async def test_pods_seen_before_the_caches_are_ready_are_left_to_the_claim_pass() -> None:
    sched, ctrl, api = setup(None)
    bound(sched, ctrl, prebound("u9", "10.0.0.2"))
    await settle(ctrl)
    assert ctrl.claims == {} and "u9" not in api.bodies["p"]["status"]["allocations"]


async def test_scheduling_starts_before_the_reconcile_with_unrecorded_addresses_claimed() -> None:
    """Scheduling may start once the caches are synced; the address of a bound pod no pool
    records (to be adopted by the reconcile) is taken from that moment on, and the claim
    ends once the reconcile has adopted it."""
    sched, ctrl, api = setup(None)
    pod = prebound("u9", "10.0.0.2")
    api.pods = [pod_body("u1"), prebound_body("u9", "10.0.0.2")]
    api.listing.clear()
    bound(sched, ctrl, pod)  # in the bound-pods informer's first LIST
    start = asyncio.create_task(ctrl._start())
    await asyncio.wait_for(ctrl.ready_to_schedule.wait(), 5)
    assert not ctrl.started.is_set()  # the reconcile's pod LIST is held back
    pool = ctrl.cache.pool("p")
    assert pool is not None and ctrl.cache.context(pool).pod_held == {"10.0.0.2": {"u9"}}
    bound(sched, ctrl, prebound("u8", "10.0.0.3"))  # arrives bound meanwhile: claimed too, not adopted yet
    assert set(ctrl.claims) == {"u8", "u9"} and not api.puts
    api.listing.set()
    await asyncio.wait_for(start, 5)
    await settle(ctrl)
    allocations = api.bodies["p"]["status"]["allocations"]
    assert (allocations["u9"]["ip"], allocations["u8"]["ip"]) == ("10.0.0.2", "10.0.0.3")
    assert ctrl.claims == {}


@pytest.mark.parametrize(
    ("uid", "adopted", "puts"),
    [
        pytest.param("u1", 0, 0, id="recorded-since-the-pool-list"),
        pytest.param("u2", 1, 1, id="really-missing"),
    ],
)
async def test_adoption_skips_a_pod_the_pool_recorded_since_the_sweeps_list(
    uid: str, adopted: int, puts: int
) -> None:
    """The sweep LISTs pools, then pods: a pod reserved and bound in between is in the pod
    LIST but not the pool LIST. Its allocation is in the pool by now: nothing to adopt."""
    _, ctrl, api = setup(None)
    r = Repair("adopt", "p", uid, f"ns/pod-{uid}", "bound, no allocation", "10.0.0.2", node="node-1")
    counts = await ctrl.repairs.apply_repairs([r], confirm=True)
    assert (counts["adopted"], len(api.puts)) == (adopted, puts)


def stamp(age_s: float) -> str:
    """The RFC 3339 timestamp ``age_s`` seconds ago (the repairs age allocations by the wall clock)."""
    at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=age_s)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


YOUNG, OLD = 10.0, 3600.0
"""Ages of Reserved allocations whose pods are bound with them, against the default
--bound-mark-delay of 300 s."""


def marks_setup(allocations: dict[str, dict[str, float]]) -> tuple[PoolController, Api]:
    """A pool controller over pools on node-1 (pool name → {pod UID: age of its Reserved
    allocation}); every pod is running on node-1, bound with its allocation."""
    bodies = []
    pods = []
    for i, (name, ages) in enumerate(sorted(allocations.items())):
        allocs = {}
        for j, (uid, age_s) in enumerate(sorted(ages.items()), start=1):
            ip = f"10.0.{i}.{j}"
            allocs[uid] = alloc(ip, pod=f"ns/pod-{uid}", since=stamp(age_s))
            pods.append(prebound_body(uid, ip, name))
        bodies.append(
            pool_body(name, "node-1", addresses=[f"10.0.{i}.1-10.0.{i}.9"], rv="10", allocations=allocs)
        )
    cache = pool_cache(
        {"node-1": [NodeInfo(name="node-1", ready=True)]},
        {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in bodies},
    )
    api = Api(bodies, None)
    api.pods = pods
    return controller(api, cache), api


def phases(api: Api) -> dict[str, str]:
    return {
        uid: a["phase"] for body in api.bodies.values() for uid, a in body["status"]["allocations"].items()
    }


@pytest.mark.parametrize(
    ("allocations", "writes", "deferred"),
    [
        pytest.param({"p": {"u1": OLD, "u2": OLD, "u3": OLD}}, 1, set(), id="three-old-marks-one-write"),
        pytest.param(
            {"p": {"u1": OLD, "u2": OLD, "u3": YOUNG}, "q": {"u4": OLD}, "r": {"u5": YOUNG, "u6": YOUNG}},
            2,
            {"r"},
            id="one-write-per-pool-young-marks-ride-along-or-wait",
        ),
        pytest.param({"p": {"u1": YOUNG, "u2": YOUNG}}, 0, {"p"}, id="only-young-marks-no-write"),
    ],
)
async def test_the_sweep_writes_old_bound_marks_one_write_per_pool_and_leaves_young_ones(
    allocations: dict[str, dict[str, float]], writes: int, deferred: set[str]
) -> None:
    """What no write of its pool carried within --bound-mark-delay (300 s) the GC sweep
    writes, all marks of a pool in one write, and waits for; a younger mark is deferred
    (as PostBind's own is, once per pod): it rides along with that write, or waits for the
    pool's next one and costs nothing until then."""
    ctrl, api = marks_setup(allocations)
    ctrl.started.set()
    counts = await ctrl.repairs.gc_sweep()
    assert ctrl.writer.writes == writes and len(api.puts) == len(set(api.puts)) == writes
    written = {uid for name, ages in allocations.items() if name not in deferred for uid in ages}
    assert {uid for uid, phase in phases(api).items() if phase == "Bound"} == written
    assert counts["marked_bound"] == sum(len(ages) for ages in allocations.values())
    assert ctrl.writer.deferred_pools() == deferred
    for name in deferred:  # PostBind's mark of the same pod: not queued twice
        uid = min(allocations[name])
        ctrl.writer.defer(
            name, functools.partial(allocator.mark_bound, uid=uid), key=allocator.mark_bound_key(uid)
        )
        assert ctrl.writer.pending(name) == len(allocations[name])
    await ctrl.repairs.gc_sweep()  # still young: deferred once, no write
    assert ctrl.writer.writes == writes
    await ctrl.writer.flush()  # the pools' next writes carry them
    assert set(phases(api).values()) == {"Bound"}
    assert ctrl.writer.writes == writes + len(deferred)


async def test_the_sweep_writes_marks_a_few_pools_at_a_time_each_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thousands of pools with marks to write after an outage do not take every connection
    at once: MARK_WRITES_IN_FLIGHT pools at a time, still one write per pool."""
    monkeypatch.setattr("ipscheduler.underlayip.reconciler.MARK_WRITES_IN_FLIGHT", 2)
    ctrl, api = marks_setup({name: {f"{name}1": OLD, f"{name}2": OLD} for name in ("p", "q", "r")})
    in_flight, most = [0], [0]
    real = api.replace_cluster_status

    async def put(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.01)
        in_flight[0] -= 1
        return await real(res, name, rv, status)

    api.replace_cluster_status = put  # type: ignore[method-assign]
    ctrl.started.set()
    counts = await ctrl.repairs.gc_sweep()
    assert counts["marked_bound"] == 6 and sorted(api.puts) == ["p", "q", "r"] and most[0] == 2
    assert set(phases(api).values()) == {"Bound"}


async def test_the_start_up_reconcile_defers_young_bound_marks_and_writes_old_ones_one_write_per_pool() -> (
    None
):
    """After a failover the new leader plans a mark for every pod the old one bound in its
    last --bound-mark-delay: deferred, they cost the reconcile no write (u4's waits for q's
    next write; u3's rides along with p's); the old ones of a pool go in one write."""
    ctrl, api = marks_setup({"p": {"u1": OLD, "u2": OLD, "u3": YOUNG}, "q": {"u4": YOUNG}})
    await ctrl.repairs.reconcile()
    assert api.puts == ["p"]
    assert phases(api) == {"u1": "Bound", "u2": "Bound", "u3": "Bound", "u4": "Reserved"}
    assert ctrl.writer.deferred_pools() == {"q"}


async def test_a_deleted_pools_deferred_marks_are_dropped() -> None:
    """The informer's DELETED event and the sweep's pool LIST both drop what the writer
    holds for a pool that no longer exists: no write would ever carry it."""
    ctrl, api = marks_setup({"p": {"u1": YOUNG}, "q": {"u2": YOUNG}, "r": {"u3": YOUNG}})
    await ctrl.repairs.reconcile()
    assert ctrl.writer.deferred_pools() == {"p", "q", "r"}
    ctrl.on_pool_store_event("DELETED", "p", api.bodies.pop("p"), None, None)
    del api.bodies["q"]  # its DELETED event was lost
    await ctrl.repairs.gc_sweep()
    assert ctrl.writer.deferred_pools() == {"r"} and not api.puts


# --------------------------------------------------------------------------- running pods hold their address


def edit_status(ctrl: PoolController, api: Api, allocations: dict[str, Any]) -> tuple[PoolView, PoolView]:
    """A user's status PUT: the API server's pool and the informer's index both change.
    Returns the pool before and after (the informer event's old and new)."""
    old = ctrl.cache.pool("p")
    assert old is not None
    body = api.bodies["p"]
    body["status"]["allocations"] = allocations
    body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
    view = PoolView.from_obj(body)
    ctrl.cache.attach({"p": [view]})
    return old, view


def next_address(ctrl: PoolController) -> str | None:
    """The address a new pod would get in pool ``p`` now."""
    pool = ctrl.cache.pool("p")
    assert pool is not None
    _, ip, _, _ = allocator.reserve(pool, ctrl.cache.context(pool), "new", "ns/new")
    return ip


async def test_a_status_edit_that_drops_a_running_pods_allocation_never_frees_its_address() -> None:
    sched, ctrl, api = setup(prebound_body("u1", "10.0.0.1"))
    ctrl.started.set()
    events: Events = ctrl.recorder  # type: ignore[assignment]
    bound(sched, ctrl, prebound("u1", "10.0.0.1"))  # the running pod of the pool's allocation
    old, new = edit_status(ctrl, api, {})
    assert next_address(ctrl) == "10.0.0.2", "the running pod's address is never handed out"
    ctrl.on_pool_status(old, new)  # the informer's event for the edit
    await settle(ctrl)
    got = api.bodies["p"]["status"]["allocations"]["u1"]
    assert (got["ip"], got["phase"]) == ("10.0.0.1", "Bound")
    assert [(name, reason) for name, reason, _ in events.seen] == [
        ("pod-u1", "AllocationRestored"),
        ("p", "AllocationRestored"),
    ]
    assert "status of NodeIPPool p was edited" in events.seen[0][2]
    assert ctrl.metrics.allocations_restored._value.get() == 1


async def test_an_edit_giving_a_running_pods_address_to_another_uid_never_makes_a_third_holder() -> None:
    sched, ctrl, api = setup(prebound_body("u1", "10.0.0.1"))
    ctrl.started.set()
    events: Events = ctrl.recorder  # type: ignore[assignment]
    bound(sched, ctrl, prebound("u1", "10.0.0.1"))
    intruder = alloc("10.0.0.1", pod="ns/intruder", phase="Bound")
    old, new = edit_status(ctrl, api, {"u7": intruder})
    ctrl.on_pool_status(old, new)
    await settle(ctrl)
    assert set(api.bodies["p"]["status"]["allocations"]) == {"u7"}
    assert sorted((name, reason) for name, reason, _ in events.seen) == [
        ("intruder", "AddressConflict"),
        ("pod-u1", "AddressConflict"),
    ]
    assert next_address(ctrl) == "10.0.0.2"
    ctrl.on_pool_status(new, new)  # the pool's next change: t2's allocation was not dropped again
    await settle(ctrl)
    assert len(events.seen) == 2


@pytest.mark.parametrize(
    "live",
    [None, pod_body("u1", node="node-1", phase="Succeeded"), pod_body("someone-else", node="node-1")],
    ids=["deleted", "finished", "name-reused"],
)
async def test_an_allocation_released_for_a_pod_that_is_gone_is_not_restored(
    live: dict[str, Any] | None,
) -> None:
    """Another replica released it once a live read showed the pod gone; our bound-pods
    watch has not said so yet. The restore reads the pod first."""
    sched, ctrl, api = setup(live)
    ctrl.started.set()
    events: Events = ctrl.recorder  # type: ignore[assignment]
    bound(sched, ctrl, prebound("u1", "10.0.0.1"))
    old, new = edit_status(ctrl, api, {})
    ctrl.on_pool_status(old, new)
    await settle(ctrl)
    assert api.bodies["p"]["status"]["allocations"] == {} and events.seen == [] and api.reads == 1


async def test_a_running_pods_hold_ends_when_it_is_gone() -> None:
    sched, ctrl, api = setup(None)
    ctrl.started.set()
    pod = prebound("u1", "10.0.0.1")
    bound(sched, ctrl, pod)
    edit_status(ctrl, api, {})
    assert next_address(ctrl) == "10.0.0.2"
    bound_event(sched, ctrl, "DELETED", pod, None)
    assert next_address(ctrl) == "10.0.0.1"
    assert ctrl.cache.carried() == {}


@pytest.mark.parametrize(
    ("annotations", "held", "holders"),
    [
        ({"ipscheduler.io/pool": "p", "ipscheduler.io/ip": "2001:DB8:0::1"}, {"2001:db8::1": {"u9"}}, {"u9"}),
        ({"ipscheduler.io/pool": "p", "ipscheduler.io/ip": "not-an-ip"}, {}, {"u9"}),
        ({"ipscheduler.io/ip": "10.0.0.3"}, {}, set()),
        ({"ipscheduler.io/pool": "", "ipscheduler.io/ip": ""}, {}, set()),
    ],
    ids=[
        "address-canonical",
        "garbage-address-holds-a-place-only",
        "no-pool-annotation",
        "count-only-blanks",
    ],
)
async def test_which_running_pods_hold_an_address(
    annotations: dict[str, str], held: dict[str, set[str]], holders: set[str]
) -> None:
    sched, ctrl, _ = setup(None)
    body = pod_body(uid="u9", node="node-1", phase="Running")
    body["metadata"]["annotations"] = annotations
    bound(sched, ctrl, PodInfo.from_obj(body))
    pool = ctrl.cache.pool("p")
    assert pool is not None and ctrl.cache.context(pool).pod_held == held
    assert ctrl.cache.carriers_of("p") == holders
    assert ctrl.cache.context(pool).pod_holders.keys() == holders


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        pytest.param(
            {"namespace": "tenant-b"},
            "NodeIPPool p is reserved for namespaces ns, team (spec.namespaces), not tenant-b",
            id="pool-reserved-for-other-namespaces",
        ),
        pytest.param(
            {"annotations": {"ipscheduler.io/pools": "q"}},
            "annotation ipscheduler.io/pools=q does not name NodeIPPool p",
            id="pod-names-other-pools",
        ),
        pytest.param(
            {"scheduler_name": "default-scheduler"},
            "spec.schedulerName is 'default-scheduler', not 'ip-scheduler'",
            id="another-scheduler",
        ),
        pytest.param(
            {"namespace": "team"},
            "namespace team annotation ipscheduler.io/default-pools=q does not name NodeIPPool p",
            id="namespace-default-names-other-pools",
        ),
    ],
)
async def test_a_pod_created_bound_in_a_pool_it_may_not_use_is_neither_held_nor_adopted(
    change: dict[str, Any], rule: str
) -> None:
    """Tenancy in every path: the pod holds nothing (its address stays free), one Warning
    AdoptionRefused names the rule, however often the pod is seen or swept."""
    sched, ctrl, api = setup(None)
    ctrl.started.set()
    events: Events = ctrl.recorder  # type: ignore[assignment]
    reserved = pool_body("p", "node-1", addresses=["10.0.0.1-10.0.0.4"], rv="20", namespaces=["ns", "team"])
    ctrl.cache.store_fresh(PoolView.from_obj(reserved))
    api.bodies["p"] = reserved
    ctrl.cache.attach_namespaces({"team": (NamespaceDefaults("q"),)})
    base = prebound("u9", "10.0.0.2")
    pod = dataclasses.replace(
        base, **{**change, "annotations": {**base.annotations, **change.get("annotations", {})}}
    )
    bound(sched, ctrl, pod)
    bound_event(sched, ctrl, "MODIFIED", pod, dataclasses.replace(pod, resource_version="2"))
    await settle(ctrl)
    pool = ctrl.cache.pool("p")
    assert pool is not None and ctrl.cache.context(pool).pod_held == {}
    counts = await ctrl.repairs.apply_repairs(
        [Repair("adopt", "p", "u9", pod.key, "swept", "10.0.0.2", subject=pod)], True
    )
    assert counts["adopted"] == 0 and counts["adopt_refused"] == 1
    assert "u9" not in (api.bodies["p"].get("status") or {}).get("allocations", {}) and not api.puts
    assert [(name, reason) for name, reason, _ in events.seen] == [("pod-u9", "AdoptionRefused")]
    assert events.seen[0][2] == (
        f"NodeIPPool p does not record the pod's address 10.0.0.2: the pod may not use the pool: {rule}; "
        "the CNI plugin refuses the pod"
    )
    assert ctrl.metrics.adoptions_refused._value.get() == 1


async def test_a_pod_already_holding_its_allocation_keeps_it_when_the_rules_change() -> None:
    """The rules are for pods that hold an address without a scheduling cycle: a pod whose
    allocation is recorded (placed when the pool still served its namespace) keeps its hold."""
    sched, ctrl, _ = setup(None)
    ctrl.started.set()
    body = pool_body(
        "p",
        "node-1",
        addresses=["10.0.0.1-10.0.0.4"],
        rv="21",
        namespaces=["elsewhere"],
        allocations={"u1": alloc("10.0.0.1", pod="ns/pod-u1")},
    )
    ctrl.cache.store_fresh(PoolView.from_obj(body))
    bound(sched, ctrl, prebound("u1", "10.0.0.1"))
    pool = ctrl.cache.pool("p")
    assert pool is not None and ctrl.cache.context(pool).pod_held == {"10.0.0.1": {"u1"}}


@pytest.mark.parametrize(
    ("failure", "again_at_once", "requeues"),
    [
        pytest.param(None, False, 0, id="refreshed"),
        pytest.param(Conflict("changed"), True, 0, id="conflict-looks-again-at-once"),
        pytest.param(OSError("connection refused"), False, 1, id="error-looks-again-after-a-pause"),
    ],
)
async def test_a_pool_status_refresh_that_fails_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, failure: Exception | None, again_at_once: bool, requeues: int
) -> None:
    _, ctrl, _ = setup(None)
    refreshed: list[str] = []

    async def refresh(pool: PoolView) -> None:
        refreshed.append(pool.name)
        if failure is not None:
            raise failure

    monkeypatch.setattr(ctrl, "refresh_pool", refresh)
    await ctrl._refresh_pools(frozenset({"p", "gone"}))
    ctrl.status_queue.shut_down()
    assert refreshed == ["p"], "the pools that exist"
    assert ctrl.status_queue.pending() == (frozenset({"p"}) if again_at_once else frozenset())
    assert ctrl.status_queue.num_requeues("p") == requeues


RUNNING_STATE = {"metadata": {"name": "pod-u1", "uid": "u1"}, "status": {"phase": "Running"}}
FORCED = {**RUNNING_STATE, "metadata": {**RUNNING_STATE["metadata"], "deletionTimestamp": SINCE}}
FORCED["metadata"]["deletionGracePeriodSeconds"] = 0
GRACEFUL = {**RUNNING_STATE, "metadata": {**FORCED["metadata"], "deletionGracePeriodSeconds": 30}}
TURNED_TERMINAL = RUNNING_STATE
"""DELETED events' objects: the pod's last state the bound-pods watch matched."""


@pytest.mark.parametrize(
    ("last_state", "nodes", "phase"),
    [
        (FORCED, {"node-1": {"ready": "True"}}, "Releasing"),
        ({"metadata": {"name": "u1"}}, {"node-1": {"ready": "True"}}, "Releasing"),
        (FORCED, {"node-1": {"ready": "False"}}, "Releasing"),
        (GRACEFUL, {"node-1": {"ready": "True"}}, None),
        (TURNED_TERMINAL, {"node-1": {"ready": "True"}}, None),
        (FORCED, {"node-1": {"ready": "True", "kwok": True}}, None),
        (FORCED, {}, None),
    ],
    ids=[
        "force-deleted:-waits-for-the-node",
        "gone-in-a-relist:-waits-for-the-node",
        "force-deleted-while-the-node-is-not-ready:-waits",
        "deleted-gracefully-so-ended-by-the-kubelet:-released",
        "turned-terminal:-released",
        "kwok-node:-released",
        "node-deleted:-released",
    ],
)
async def test_a_bound_pod_removed_without_a_confirmed_teardown_leaves_its_address_releasing(
    last_state: dict[str, Any], nodes: dict[str, dict[str, Any]], phase: str | None
) -> None:
    sched, ctrl, api = setup(None)
    told: list[str] = []
    ctrl.clock.requeue = ctrl.requeue = lambda event, old, new: told.append(str(event))
    for name, facts in nodes.items():
        annotations = {"kwok.x-k8s.io/node": "fake"} if facts.get("kwok") else {}
        cond = {"type": "Ready", "status": facts["ready"], "lastTransitionTime": "2024-01-01T00:00:00Z"}
        body = {"metadata": {"name": name, "annotations": annotations}, "status": {"conditions": [cond]}}
        ctrl.on_node_event(None, name, body, None, NodeInfo(name=name, ready=facts["ready"] == "True"))
    gone = PodInfo.from_obj(pod_body(node="node-1", phase="Running"))
    sched.handlers.on_bound_pod_event("DELETED", gone, None)
    ctrl.on_bound_pod_event("DELETED", "u1", last_state, gone, None)
    await settle(ctrl)
    a = api.bodies["p"]["status"]["allocations"].get("u1")
    assert (a or {}).get("phase") == phase
    if phase is None:
        assert told, "pending pods are told the address is free"
    else:
        assert a["ip"] == "10.0.0.1" and "releasingSince" in a and "reservedBy" not in a
        assert api.bodies["p"]["status"]["releasing"] == 1
        assert not told, "nothing was freed yet"


async def test_the_controller_runs_the_reconciler_it_is_handed_and_feeds_its_clock() -> None:
    """The wiring builds the Reconciler (over its ReleaseClock) and hands it in: the
    start-up reconcile the controller runs is that Reconciler's, the GC waits for the same
    ``started``, and the node states the controller keeps are those the sweeps plan with."""
    pool = pool_body("p", "node-1", addresses=["10.0.0.1-10.0.0.4"], rv="10")
    cache = pool_cache({"node-1": [NodeInfo(name="node-1", ready=True)]}, {"p": [PoolView.from_obj(pool)]})
    api = Api([pool], None)
    writer = PoolWriter(api, cache)  # type: ignore[arg-type]
    reconciles: list[str] = []

    class Recording(Reconciler):
        async def reconcile(self) -> dict[str, int]:
            reconciles.append("reconcile")
            return {}

    shared: dict[str, Any] = {"scheduler_name": "ip-scheduler", "api": api, "cache": cache, "writer": writer}
    repairs = Recording(**shared, recorder=Events(), clock=ReleaseClock(cache, writer))
    ctrl = PoolController(**shared, recorder=Events(), repairs=repairs)
    assert ctrl.repairs is repairs and ctrl.clock is repairs.clock
    body = {"metadata": {"name": "node-1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    ctrl.on_node_event("ADDED", "node-1", body, None, NodeInfo(name="node-1", ready=True))
    assert "node-1" in repairs.clock.nodes, "the sweep plans with the node the controller heard of"
    await asyncio.wait_for(ctrl._start(), 5)
    assert reconciles == ["reconcile"] and repairs.started.is_set()


# --------------------------------------------------------------------------- adopting further interfaces

RDMA_SUBNET = {"cidr": "10.1.0.0/24", "gateway": "10.1.0.254"}
RDMA_NET = {"ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.254"}]}
"""What the Binding writes for net1 with 10.1.0.2 of pool rdma: no default route."""


def rdma_body(**spec: Any) -> dict[str, Any]:
    """Pool rdma (node-1, 10.1.0.1-10.1.0.4 in ``RDMA_SUBNET``); ``spec``: :func:`pool_body`'s
    keywords (``node`` too) over those."""
    node = spec.pop("node", "node-1")
    return pool_body(
        "rdma", node, **{"addresses": ["10.1.0.1-10.1.0.4"], "rv": "30", "subnets": [RDMA_SUBNET], **spec}
    )


def multi_homed_body(uid: str = "u9") -> dict[str, Any]:
    """Pod ``uid`` created bound to node-1 with 10.0.0.2 of pool p and net1 with 10.1.0.2 of
    pool rdma."""
    body = prebound_body(uid, "10.0.0.2")
    net1 = {"net1": {"pool": "rdma", "ips": ["10.1.0.2"], "network": RDMA_NET}}
    body["metadata"]["annotations"]["ipscheduler.io/interfaces"] = json.dumps(net1)
    return body


def multi_homed(uid: str = "u9") -> PodInfo:
    return PodInfo.from_obj(multi_homed_body(uid))


def net1_repair(pod: PodInfo, pool: str = "rdma", interface: str = "net1", **fields: Any) -> Repair:
    network = json.dumps(fields.pop("network", RDMA_NET))
    return Repair(
        "adopt",
        pool,
        pod.uid,
        pod.key,
        "bound pod has no allocation for interface net1",
        fields.pop("ip", "10.1.0.2"),
        node="node-1",
        network=network,
        subject=pod,
        interface=interface,
        **fields,
    )


@pytest.mark.parametrize(
    ("rdma", "repair", "allocation", "seen"),
    [
        pytest.param({}, {}, ("10.1.0.2", "net1"), [], id="adopted"),
        pytest.param({}, {"more": ("10.1.0.3", "10.1.0.4")}, None, ["AddressConflict"], id="three-addresses"),
        pytest.param(
            {"subnets": [{**RDMA_SUBNET, "routes": [{"dst": "10.9.0.0/16", "gw": "10.1.0.254"}]}]},
            {},
            ("10.1.0.2", "net1"),
            ["NetworkMismatch"],
            id="network-without-the-pools-route",
        ),
        pytest.param(
            {},
            {"network": {**RDMA_NET, "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.254"}]}},
            ("10.1.0.2", "net1"),
            ["NetworkMismatch"],
            id="network-with-a-default-route",
        ),
        pytest.param({"node": "node-2"}, {}, None, ["AddressConflict"], id="pool-of-another-node"),
        pytest.param({}, {"pool": "gone"}, None, ["AddressConflict"], id="pool-missing"),
        pytest.param(
            {"allocations": {"u8": alloc("10.1.0.2", pod="ns/pod-u8")}},
            {},
            None,
            ["AddressConflict", "AddressConflict"],
            id="address-held-by-another-pod",
        ),
        pytest.param(
            {"allocations": {"u9": {**alloc("10.1.0.3", pod="ns/pod-u9"), "interface": "net2"}}},
            {},
            ("10.1.0.3", "net2"),
            ["AddressConflict"],
            id="pool-holds-another-interface",
        ),
        pytest.param(
            {"allocations": {"u9": {**alloc("10.1.0.2", pod="ns/pod-u9"), "interface": "net1"}}},
            {},
            ("10.1.0.2", "net1"),
            [],
            id="recorded-since-the-list",
        ),
        pytest.param(
            {},
            {"problem": "annotation ipscheduler.io/interfaces entry 'net1' names no pool", "pool": ""},
            None,
            ["AddressConflict"],
            id="entry-that-cannot-be-read",
        ),
        pytest.param({"namespaces": ["team"]}, {}, None, ["AdoptionRefused"], id="pool-of-other-namespaces"),
    ],
)
async def test_a_further_interfaces_adoption(
    rdma: dict[str, Any],
    repair: dict[str, Any],
    allocation: tuple[str, str] | None,
    seen: list[str],
) -> None:
    """Pod u9's net1 (10.1.0.2 of rdma) adopted by a sweep's repair: recorded with its
    interface when the pool serves the pod's node and namespace and the address is free;
    its entry's network compared with the pool's without the default route."""
    _, ctrl, api = setup(None, (rdma_body(**rdma),))
    events: Events = ctrl.recorder  # type: ignore[assignment]
    pod = multi_homed()
    counts = await ctrl.repairs.apply_repairs([net1_repair(pod, **repair)], confirm=True)
    got = api.bodies["rdma"].get("status", {}).get("allocations", {}).get("u9")
    assert (None if got is None else (got["ip"], got.get("interface"))) == allocation
    assert [reason for _, reason, _ in events.seen] == seen
    assert counts["adopted"] == (1 if allocation is not None and not rdma.get("allocations") else 0)


@pytest.mark.parametrize(
    ("repair", "message"),
    [
        pytest.param(
            {"pool": "gone"},
            "cannot record the address of its interface net1: pool gone named in the pod's annotation "
            "does not exist",
            id="pool-missing",
        ),
        pytest.param(
            {"problem": "annotation ipscheduler.io/interfaces entry 'net1' names no pool", "pool": ""},
            "cannot record the address of its interface net1: annotation ipscheduler.io/interfaces entry "
            "'net1' names no pool",
            id="entry-that-cannot-be-read",
        ),
        pytest.param(
            {
                "interface": "",
                "problem": "annotation ipscheduler.io/interfaces is not a JSON object",
                "pool": "",
            },
            "cannot record the addresses of its further interfaces: annotation ipscheduler.io/interfaces is "
            "not a JSON object",
            id="annotation-that-cannot-be-read",
        ),
    ],
)
async def test_a_further_interface_that_cannot_be_adopted_says_why(
    repair: dict[str, Any], message: str
) -> None:
    _, ctrl, api = setup(None, (rdma_body(),))
    events: Events = ctrl.recorder  # type: ignore[assignment]
    await ctrl.repairs.apply_repairs([net1_repair(multi_homed(), **repair)], confirm=True)
    assert events.seen == [("pod-u9", "AddressConflict", message)]
    assert not api.puts


def recorded(api: Api) -> tuple[tuple[str, str | None] | None, ...]:
    """``(ip, interface)`` of u9's allocation in pools p and rdma (None: none)."""
    out = []
    for name in ("p", "rdma"):
        got = (api.bodies[name].get("status") or {}).get("allocations", {}).get("u9")
        out.append(None if got is None else (got["ip"], got.get("interface")))
    return tuple(out)


BOTH = (("10.0.0.2", None), ("10.1.0.2", "net1"))


async def test_a_pod_created_bound_with_further_interfaces_gets_them_all_and_frees_them_at_its_end() -> None:
    """Restored bound with net1 of pool rdma: the bound-pods watch adopts both interfaces at
    once (their addresses carried before: never handed out); its end releases both."""
    sched, ctrl, api = setup(None, (rdma_body(),))
    ctrl.started.set()
    pod = multi_homed()
    bound(sched, ctrl, pod)
    rdma = ctrl.cache.pool("rdma")
    assert rdma is not None and ctrl.cache.context(rdma).pod_held["10.1.0.2"] == {"u9"}
    await settle(ctrl)
    assert recorded(api) == BOTH and ctrl.claims == {}
    api.pods = [pod_body("u1"), multi_homed_body()]
    assert (await ctrl.repairs.gc_sweep())["adopted"] == 0
    bound_event(sched, ctrl, "DELETED", pod, None)
    await settle(ctrl)
    assert recorded(api) == (None, None)


async def test_a_sweep_adopts_a_further_interface_whose_allocation_was_lost() -> None:
    """net1's allocation is gone from pool rdma (a status lost or edited): the next sweep
    records it again, with its interface."""
    sched, ctrl, api = setup(None, (rdma_body(),))
    ctrl.started.set()
    bound(sched, ctrl, multi_homed())
    await settle(ctrl)
    del api.bodies["rdma"]["status"]["allocations"]["u9"]
    api.pods = [pod_body("u1"), multi_homed_body()]
    assert recorded(api) == (BOTH[0], None)
    assert (await ctrl.repairs.gc_sweep())["adopted"] == 1
    assert recorded(api) == BOTH
