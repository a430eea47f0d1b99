"""The pool controller's repairs: the start-up reconcile, the garbage-collection sweep,
the watch-stall check and the adoption of pods that no pool records.

Every repair is planned by the pure planner (:func:`ipscheduler.underlayip.repair.plan`)
from fresh LISTs, never from the caches alone (a watch that died or stalled would hide
that a pod is gone), and carried out by compare-and-swap through the pool writer; a
release planned by the sweep is confirmed by a live read of the pod by UID first.
:func:`ipscheduler.cmd.wiring.build` builds one :class:`Reconciler` (its timings a
:class:`RepairTimings`) and hands it to the
:class:`~ipscheduler.underlayip.controller.PoolController`, which holds it (``repairs``)
and runs its tasks.

Size: one class, as the repairs share one plan and its LISTs: the start-up reconcile and
the sweep differ only in what they LIST and confirm, and adoption and the watch-stall check
ride on the sweep's LISTs; what is pure (the plan itself) lives in
:mod:`~ipscheduler.underlayip.repair`, the release clock in
:mod:`~ipscheduler.underlayip.releasing`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from prometheus_client import CollectorRegistry

from ipscheduler.backend.health import HealthState
from ipscheduler.framework.interface import Requeue
from ipscheduler.framework.klog import kv
from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import KubeApi, lean_pods, live_pod
from ipscheduler.kube.events import EventRecorder, pod_key_ref
from ipscheduler.underlayip import allocator, events, repair
from ipscheduler.underlayip.addresses import AddressError
from ipscheduler.underlayip.cache import PoolCache, rv_number
from ipscheduler.underlayip.interfaces import first_pool_ips, second_family
from ipscheduler.underlayip.metrics import UnderlayIPMetrics
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_NETWORK,
    ANNOTATION_PREFIX,
    BOUND,
    POOLS,
    RESERVED,
)
from ipscheduler.underlayip.pool import PoolView, age, network_of_all, utc_now, without_default_route
from ipscheduler.underlayip.releasing import MOVES, ReleaseClock
from ipscheduler.underlayip.retention import StatefulSetFacts, retention_of
from ipscheduler.underlayip.selection import is_ours, tenancy_problem
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

GC_MAX_DUTY = 0.02
"""Share of wall time the GC sweeps may take: a sweep of D seconds is followed by a pause
of at least D / GC_MAX_DUTY. At 10 000 pods a sweep's LIST takes about a second, which at
the 30 s default would cost the scheduler a tenth of its CPU in a busy cluster."""

MARK_WRITES_IN_FLIGHT = 16
"""Pools whose Bound marks a sweep writes at once (one write per pool, however many marks):
a sweep after a long outage may have thousands to write, and the binds share the client's
connections with it."""


def _fields(r: repair.Repair) -> dict[str, Any]:
    return kv(pod=r.pod, pool=r.pool, uid=r.uid, ip=r.ip)


def gc_pause(interval: float, last_sweep: float) -> float:
    """Seconds to wait before the next sweep: ``interval`` (``--gc-interval``), or
    ``last_sweep / GC_MAX_DUTY`` when the last sweep took longer than that allows, capped
    at ten intervals so a leak still ends within minutes."""
    return min(10 * interval, max(interval, last_sweep / GC_MAX_DUTY))


@dataclass(frozen=True)
class RepairTimings:
    """The repairs' timings, in seconds, as the flags of ``run`` give them: ``gc_interval``
    (``--gc-interval``: between two sweeps), ``reserved_ttl`` (``--reserved-ttl``: a
    Reserved allocation older than this whose pod is not bound is released),
    ``bound_mark_delay`` (``--bound-mark-delay``: how long a Bound mark waits to ride along
    with its pool's next write before a sweep writes it) and ``watch_timeout``
    (``--watch-timeout``: how long the pool cache may stay behind the API server before
    /healthz fails)."""

    gc_interval: float = 30.0
    reserved_ttl: float = 60.0
    bound_mark_delay: float = 300.0
    watch_timeout: float = 90.0


def no_queue_check(found_by: str) -> Callable[[Mapping[str, PodInfo]], None]:
    """A ``queue_check`` for a Reconciler without a scheduling queue: each LIST is dropped."""
    return lambda pods: None


class Reconciler:
    """Start-up reconcile, GC sweep, watch-stall check and adoption (module doc).

    Built by the wiring and handed to the
    :class:`~ipscheduler.underlayip.controller.PoolController`, which runs its tasks.
    ``scheduler_name``: only pods with this schedulerName are ours, unless
    ``list_all_pods`` (extender mode: pods of any schedulerName hold our addresses, bound
    through the extender, so the sweeps LIST every pod and keep those :func:`is_ours` says
    are ours). ``identity``: this replica's, as its reservations record it (the GC spares
    only its own in-flight ones). ``clock``: the
    :class:`~ipscheduler.underlayip.releasing.ReleaseClock` whose node states the plan reads
    (the controller feeds it the node events). ``timings``: :class:`RepairTimings`.
    ``requeue``: the scheduling queue's move (``AddressReleased`` after a sweep
    released addresses). Each sweep calls ``queue_check("gc")`` before its LIST of our pods
    and hands the LIST to what it returns. ``health``: where a stalled pool watch is
    flagged (None: one of its own); ``metrics``: the wing's (None: on a registry of their
    own).

    :attr:`started` is set by the controller once the start-up reconcile is done (the GC
    waits for it)."""

    def __init__(
        self,
        *,
        scheduler_name: str,
        api: KubeApi,
        cache: PoolCache,
        writer: PoolWriter,
        recorder: EventRecorder,
        clock: ReleaseClock,
        timings: RepairTimings = RepairTimings(),
        requeue: Requeue = lambda event, old, new: None,
        queue_check: Callable[[str], Callable[[Mapping[str, PodInfo]], None]] = no_queue_check,
        health: HealthState | None = None,
        metrics: UnderlayIPMetrics | None = None,
        list_all_pods: bool = False,
        identity: str = "",
    ) -> None:
        self.scheduler_name = scheduler_name
        self.clock = clock
        """Its node states say whether a gone pod's address waits for its node, and how long
        (:mod:`~ipscheduler.underlayip.teardown`)."""
        self.identity = identity
        """This replica's identity, as its reservations record it (``reservedBy``'s first part)."""
        self.api = api
        self.cache = cache
        self.writer = writer
        self.recorder = recorder
        self.health = health if health is not None else HealthState()
        self.metrics = metrics if metrics is not None else UnderlayIPMetrics(CollectorRegistry())
        self.started = asyncio.Event()
        """Set once the start-up reconcile is done (by the controller, which runs it)."""
        self.requeue = requeue
        self.queue_check = queue_check
        self.timings = timings
        self.list_all_pods = list_all_pods
        self._skew = repair.SkewClock()
        self._stale_since: dict[str, tuple[float, int]] = {}
        self._statefulsets: Mapping[tuple[str, str], StatefulSetFacts | None] = MappingProxyType({})
        """The StatefulSets of Retained allocations, as the last sweep read them."""
        self.refused: set[str] = set()
        """UIDs of the pods whose adoption the tenancy rules refused, told once
        (:meth:`refuse_adoption`); the controller forgets one when its pod is gone."""

    def tenancy(self, pod: PodInfo, pool: PoolView, further: bool = False) -> str | None:
        """Why ``pod`` may not hold an address of ``pool`` without a scheduling cycle
        (:func:`~ipscheduler.underlayip.selection.tenancy_problem` with the namespace's default
        pools as the cache has them; the ``schedulerName`` rule only in scheduler mode;
        ``further``: the pool is for one of its further interfaces), or None."""
        return tenancy_problem(
            pod,
            pool,
            self.cache.default_pools(pod.namespace),
            None if self.list_all_pods else self.scheduler_name,
            further,
        )

    async def refuse_adoption(
        self, pod: PodInfo, pool: PoolView, problem: str, address: str | None = None
    ) -> None:
        """Say once per pod (log, Warning ``AdoptionRefused`` event on the pod) that its
        annotated address of ``pool`` (``address``; None: its ``ipscheduler.io/ip``) is not
        recorded: the pod may not use the pool (``problem``, the rule). The address stays
        free, or with its holder."""
        if pod.uid in self.refused:
            return
        if len(self.refused) > 10_000:
            self.refused.clear()  # a bound on memory; at worst an event is said twice
        self.refused.add(pod.uid)
        ip = address or pod.annotations.get(ANNOTATION_IP) or "a slot"
        message = (
            f"NodeIPPool {pool.name} does not record the pod's address {ip}: the pod may not use "
            f"the pool: {problem}; the CNI plugin refuses the pod"
        )
        log.warning("%s: %s", pod.key, message, extra=kv(pod=pod.key, pool=pool.name, uid=pod.uid, ip=ip))
        self.metrics.adoptions_refused.inc()
        await self.recorder.record(pod.ref, "Warning", "AdoptionRefused", message)

    async def live_pod(self, uid: str, key: str) -> PodInfo | None:
        """Pod ``uid`` as the API server has it now (:func:`ipscheduler.kube.client.live_pod`:
        read by name, matched by UID). None when it is gone. Raises what the read raises."""
        return await live_pod(self.api, uid, key)

    async def reconcile(self) -> dict[str, int]:
        """Repair state left by a crash: the pools as the NodeIPPool informer's first LIST
        (and any watch event since) left them in the pool cache, and a live LIST of our pods.

        Releases allocations of pods that are gone or terminal, marks Reserved
        allocations Bound when their pod is bound with them, adopts bound
        pods of ours that carry the annotations but have no allocation
        (Warning event on the pod when its address is taken). Returns the
        number of repairs done per action.

        The pools are not LISTed a second time (at 5000 pools that LIST was about 0.5 s of a
        4 s restart). What the cache holds was read from the API server before
        the pod LIST starts, which is all the plan needs (see below); a pool that failed to
        parse is not in it, so one malformed pool cannot stop the start-up.
        """
        # Pools strictly before pods: an allocation in this pool snapshot belongs to a pod
        # that existed before the pod LIST, so a pod missing from it is really gone.
        pools = list(self.cache.pools().values())
        pods = await self._list_our_pods()
        await self._read_statefulsets(pools)
        counts = await self.apply_repairs(self._plan(pools, pods), confirm=False)
        log.info("start-up reconcile: %s", counts)
        return counts

    def check_watch(self, live_pools: list[dict[str, Any]]) -> None:
        """Flag the NodeIPPool watch as stalled when the cache stays behind the API server.

        ``live_pools`` is a fresh LIST. A pool whose cached resourceVersion is
        lower than the live one (compared as numbers) starts a clock holding
        that live version; the clock stops as soon as the cache reaches it,
        even if the pool has moved on meanwhile (the watch is making
        progress). Being ahead of the LIST (our own write landing during it)
        is not lagging; a pool still cached but gone from the LIST is. A clock
        older than ``watch_timeout`` marks the watch
        stalled in the health state (``/healthz`` fails).
        """
        now = asyncio.get_running_loop().time()
        cached = {name: rv_number(p.resource_version) for name, p in self.cache.pools().items()}
        clocks: dict[str, tuple[float, int]] = {}
        for body in live_pools:
            name = body["metadata"]["name"]
            live_rv = rv_number(str(body["metadata"].get("resourceVersion", "")))
            have = cached.get(name, -1)
            started = self._stale_since.get(name)
            if started is not None and have < started[1]:
                clocks[name] = started  # still behind the version that started the clock
            elif have < live_rv:
                clocks[name] = (now, live_rv)
        live_names = {b["metadata"]["name"] for b in live_pools}
        for name in set(cached) - live_names:  # deleted in the API server, still in our cache
            clocks[name] = self._stale_since.get(name) or (now, -1)
        self._stale_since = clocks
        worst = max((now - t for t, _ in clocks.values()), default=0.0)
        if worst > self.timings.watch_timeout:
            self.health.stalled["nodeippools"] = f"watch stalled: cache {worst:.0f}s behind the API server"
        else:
            self.health.stalled.pop("nodeippools", None)

    async def gc_sweep(self) -> dict[str, int]:
        """One garbage-collection pass, planned from fresh LISTs, never from the caches.

        The caches may be stale (a watch that died or stalled would hide that a
        pod is gone), so the pass LISTs the pools, then our pods (in that order:
        an allocation in the pool LIST belongs to a pod created before the pod
        LIST, so a pod missing from it is really gone), plans with
        :func:`repair.plan`, and confirms each release with a live read of the
        pod by UID. The pool LIST also feeds the watch-stall check and refreshes
        the cache's view of each pool, and the writer forgets what is deferred for pools
        no longer in it. Bound marks older than ``bound_mark_delay`` are written, one write
        per pool (:meth:`apply_repairs`).
        """
        live_pools = await self.api.list_cluster_objects(POOLS)
        self.check_watch(live_pools)
        dropped = self.writer.drop_deferred_except({b["metadata"]["name"] for b in live_pools})
        if dropped:
            log.info("dropped %d deferred write(s) of NodeIPPools that no longer exist", dropped)
        pools: list[PoolView] = []
        for body in live_pools:
            try:
                pool = PoolView.from_obj(body)
            except ValueError:
                continue
            self.cache.store_fresh(pool)
            pools.append(pool)
        check_queue = self.queue_check("gc")
        pods = await self._list_our_pods()
        check_queue(pods)
        await self._read_statefulsets(pools)
        repairs = [r for r in self._plan(pools, pods) if not self._in_cycle(r, pods)]
        counts = await self.apply_repairs(repairs, confirm=True)
        if any(counts.values()):
            log.info("garbage collection: %s", counts)
        return counts

    def _in_cycle(self, r: repair.Repair, pods: dict[str, PodInfo]) -> bool:
        """A planned release of a Reserved allocation that this replica made
        (``reservedBy``'s identity is :attr:`identity`) for a pod still pending and assumed
        in this process's cache: the cycle that reserved it is alive (held at Permit while
        its PodGroup gathers, possibly beyond ``--reserved-ttl``); its Unreserve gives it
        back. Another process's reservation for the same pod (one SIGKILLed while the pod
        waited at Permit) is not exempt: ``--reserved-ttl`` and one sweep release it."""
        if r.action != "release" or r.allocation is None or r.allocation.phase != RESERVED:
            return False
        if not self.identity or allocator.replica_of(r.allocation.reserved_by) != self.identity:
            return False
        pod = pods.get(r.uid)
        return pod is not None and not pod.terminal and self.cache.node_cache.is_assumed(r.uid)

    def mark_due(self, r: repair.Repair, now: datetime.datetime) -> bool:
        """Is planned ``mark_bound`` ``r`` to be written now: its allocation is older than
        ``bound_mark_delay`` (``--bound-mark-delay``), so no write of its pool carried
        PostBind's deferred mark that long? A younger one waits for its pool's next write."""
        if r.action != "mark_bound":
            return False
        return r.allocation is None or age(r.allocation.since, now) >= self.timings.bound_mark_delay

    def _plan(self, pools: list[PoolView], pods: dict[str, PodInfo]) -> list[repair.Repair]:
        now = utc_now()
        self._skew.observe(pools, now)
        return self._plan_at(pools, pods, now)

    def _plan_at(
        self, pools: list[PoolView], pods: Mapping[str, PodInfo], now: datetime.datetime
    ) -> list[repair.Repair]:
        skew, sets, clock = self._skew.first_seen, self._statefulsets, self.clock
        return repair.plan(
            pools,
            pods,
            now,
            self.timings.reserved_ttl,
            skew,
            sets,
            nodes=clock.nodes,
            release_delay=clock.delay,
        )

    async def _read_statefulsets(self, pools: list[PoolView]) -> None:
        """Read the StatefulSets that Retained allocations of ``pools`` belong to (one GET
        each), for the release rules of :func:`repair.plan`; one that cannot be read is left
        out, which keeps its allocations until a sweep can."""
        facts: dict[tuple[str, str], StatefulSetFacts | None] = {}
        for namespace, name in sorted(repair.retained_statefulsets(pools)):
            try:
                body = await self.api.get_statefulset(namespace, name)
            except Exception as e:
                log.warning(
                    "could not read StatefulSet %s/%s (%r); its retained addresses wait", namespace, name, e
                )
                continue
            facts[(namespace, name)] = statefulset_facts(body) if body is not None else None
        self._statefulsets = facts

    async def _list_our_pods(self) -> dict[str, PodInfo]:
        """Our pods (any phase) by UID, from a live LIST (:func:`lean_pods`: the sweep reads
        only our annotations)."""
        if not self.list_all_pods:
            return await lean_pods(self.api, f"spec.schedulerName={self.scheduler_name}", ANNOTATION_PREFIX)
        pods = await lean_pods(self.api, "", ANNOTATION_PREFIX)
        return {uid: pod for uid, pod in pods.items() if is_ours(pod, self.scheduler_name)}

    async def run_gc(self) -> None:
        """The garbage-collector task: a :meth:`gc_sweep` every ``gc_interval`` seconds once
        the start-up reconcile is done, or less often when sweeps are slow
        (:func:`gc_pause`: a sweep takes at most ``GC_MAX_DUTY`` of the time); a failed
        sweep is logged and retried next time."""
        await self.started.wait()
        loop = asyncio.get_running_loop()
        pause = self.timings.gc_interval
        while True:
            await asyncio.sleep(pause)
            started = loop.time()
            try:
                await self.gc_sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("garbage collection failed (%r); retried in the next sweep", e)
            pause = gc_pause(self.timings.gc_interval, loop.time() - started)

    async def _confirmed(self, r: repair.Repair) -> bool:
        """Re-check a planned release against :meth:`live_pod` (by UID, never by name)."""
        live = await self.live_pod(r.uid, r.pod)
        pods = {live.uid: live} if live is not None else {}
        pool = self.cache.pool(r.pool)
        if pool is None or r.uid not in pool.allocations:
            return False
        return any(x.action == r.action and x.uid == r.uid for x in self._plan_at([pool], pods, utc_now()))

    async def apply_repairs(self, repairs: list[repair.Repair], confirm: bool) -> dict[str, int]:
        """Carry out ``repairs`` by CAS; releases are confirmed live first when ``confirm``.

        Bound marks never cost a write each. One whose allocation is younger than
        ``bound_mark_delay`` (:meth:`mark_due`) is deferred (:meth:`PoolWriter.defer`, once
        per pod: PostBind's own mark is the same) and rides along with its pool's next
        write; the older ones are written last, all marks of a pool in one write
        (:meth:`write_marks`), and waited for. After a failover the new leader plans a mark
        for every pod the old one bound in its last ``bound_mark_delay``: deferred, they
        cost the start-up reconcile nothing. Returns the repairs done per action
        (``marked_bound``: marks written, deferred ones included)."""
        counts = {"released": 0, "marked_bound": 0, "adopted": 0, "adopt_conflicts": 0}
        released = False
        due: list[repair.Repair] = []
        now = utc_now()
        for r in repairs:
            if r.action == "release":
                if confirm and not await self._confirmed(r):
                    continue
                log.info(
                    "releasing %s of %s in pool %s: %s",
                    r.ip or "slot",
                    r.pod,
                    r.pool,
                    r.reason,
                    extra=_fields(r),
                )
                written = await self.writer.submit(
                    r.pool, functools.partial(allocator.release, uid=r.uid, expect=r.allocation)
                )
                if written is not None and r.uid in written.allocations:
                    log.info(
                        "kept %s of %s in pool %s: the allocation changed meanwhile", r.ip, r.pod, r.pool
                    )
                    continue
                counts["released"] += 1
                self.metrics.gc_releases.inc()
                released = True
            elif r.action in MOVES:
                if confirm and not await self._confirmed(r):
                    continue
                what, count, move = MOVES[r.action]
                log.info(f"%s of %s in pool %s {what}: %s", r.ip, r.pod, r.pool, r.reason, extra=_fields(r))
                await self.writer.submit(r.pool, functools.partial(move, uid=r.uid, now=utc_now()))
                counts[count] = counts.get(count, 0) + 1
                released |= r.action != "await_teardown"  # a pod may take its place (or identity's)
            elif r.action == "mark_bound":
                if self.mark_due(r, now):
                    due.append(r)
                else:
                    mark = functools.partial(allocator.mark_bound, uid=r.uid)
                    self.writer.defer(r.pool, mark, key=allocator.mark_bound_key(r.uid))
                    counts["marked_bound"] += 1
            else:
                counts.update(await self.adopt(r, counts))
        counts["marked_bound"] += await self.write_marks(due)
        if released:
            self.requeue(events.ADDRESS_RELEASED, None, None)
        return counts

    async def write_marks(self, marks: list[repair.Repair]) -> int:
        """Write the Bound marks ``marks`` (``mark_bound`` repairs) and wait for them: the
        marks of one pool are submitted together, so the writer's group commit puts them in
        one write (with whatever else is queued for the pool, deferred marks included);
        :data:`MARK_WRITES_IN_FLIGHT` pools at a time. Returns how many allocations the
        writes left Bound; a failed write is logged (the next sweep plans its marks again)."""
        by_pool: dict[str, list[str]] = {}
        for r in marks:
            by_pool.setdefault(r.pool, []).append(r.uid)
        names = sorted(by_pool)
        marked = 0
        for start in range(0, len(names), MARK_WRITES_IN_FLIGHT):
            queued = [
                (name, uid, self.writer.submit(name, functools.partial(allocator.mark_bound, uid=uid)))
                for name in names[start : start + MARK_WRITES_IN_FLIGHT]
                for uid in by_pool[name]
            ]
            results = await asyncio.gather(*(f for _, _, f in queued), return_exceptions=True)
            failed: dict[str, BaseException] = {}
            for (name, uid, _), result in zip(queued, results, strict=True):
                if isinstance(result, BaseException):
                    failed.setdefault(name, result)
                elif (
                    result is not None and (a := result.allocations.get(uid)) is not None and a.phase == BOUND
                ):
                    marked += 1
            for name, e in failed.items():
                log.warning(
                    "writing the Bound marks of NodeIPPool %s failed (%r); the next sweep retries", name, e
                )
        return marked

    async def adopt(self, r: repair.Repair, counts: dict[str, int]) -> dict[str, int]:
        """Carry out adopt repair ``r`` (the pod's first interface, or the further one
        ``r.interface``): record its allocation in ``r.pool`` by CAS
        (:func:`~ipscheduler.underlayip.allocator.adopt`) when the pool serves the pod's node
        and the tenancy rules let the pod use it (else Warning ``AdoptionRefused``, once per
        pod). An entry that cannot be read (``r.problem``), a pool that is missing or
        serves another node, or an address held or not in the pool records nothing: logged,
        Warning ``AddressConflict`` on the pod (and on the holder). Returns ``counts`` with
        ``adopted``, ``adopt_conflicts`` or ``adopt_refused`` counted up; raises what the
        pool write raises otherwise."""
        ref = pod_key_ref(r.pod, r.uid)
        pool = self.cache.pool(r.pool)
        further = r.interface is not None
        try:
            if r.problem:
                raise allocator.AdoptConflict(r.problem)
            if pool is None:
                raise allocator.AdoptConflict(f"pool {r.pool} named in the pod's annotation does not exist")
            if r.node and pool.node_name != r.node:
                raise allocator.AdoptConflict(
                    f"pool {r.pool} named in the pod's annotation serves {pool.node_name}, not {r.node}"
                )
            existing = pool.allocations.get(r.uid)
            if existing is not None and existing.interface == r.interface:
                # Recorded since the pool LIST this plan read: the pod was reserved and
                # bound between that LIST and the pod LIST. Nothing to adopt. (One of
                # another interface is allocator.adopt's AdoptConflict.)
                return counts
            if r.subject is not None and (problem := self.tenancy(r.subject, pool, further)) is not None:
                counts["adopt_refused"] = counts.get("adopt_refused", 0) + 1
                await self.refuse_adoption(r.subject, pool, problem, r.ip if further else None)
                return counts
            retention = retention_of(r.subject) if r.subject is not None else None
            if further:
                more = r.more
            else:
                more = first_pool_ips(r.subject.annotations) if r.subject is not None and r.ip else ()
            await self.writer.submit(
                r.pool,
                functools.partial(
                    allocator.adopt,
                    uid=r.uid,
                    pod_key=r.pod,
                    ip=r.ip,
                    retention=retention,
                    more=more,
                    interface=r.interface,
                ),
            )
            counts["adopted"] += 1
            if mismatch := _network_mismatch(pool, r):
                log.warning("adopted %s, but %s", r.pod, mismatch)
                await self.recorder.record(ref, "Warning", "NetworkMismatch", mismatch)
        except allocator.AdoptConflict as e:
            counts["adopt_conflicts"] += 1
            what = (
                "the pod's address"
                if not further
                else f"the address of its interface {r.interface}"
                if r.interface
                else "the addresses of its further interfaces"
            )
            log.warning("cannot adopt %s: %s", r.pod, e)
            await self.recorder.record(ref, "Warning", "AddressConflict", f"cannot record {what}: {e}")
            holder_ns, _, holder_name = e.holder_pod.partition("/")
            if holder_ns and holder_name:
                await self.recorder.record(
                    pod_key_ref(e.holder_pod, e.holder_uid),
                    "Warning",
                    "AddressConflict",
                    f"pod {r.pod} (UID {r.uid}) carries this pod's address {r.ip} of pool {r.pool} "
                    "in its annotation",
                )
        return counts


def _network_mismatch(pool: PoolView, r: repair.Repair) -> str | None:
    """Why the adopted pod's ``ipscheduler.io/network`` differs from what ``pool`` gives its
    address (None when absent, or equal as JSON): the CNI plugin refuses such a pod. For a
    further interface (``r.interface``), its entry's ``network`` against the pool's network
    for its addresses without the default route, as the Binding writes it
    (:func:`~ipscheduler.underlayip.pool.without_default_route`)."""
    if r.network is None or not r.ip:
        return None
    try:
        if r.interface is not None:
            want = without_default_route(network_of_all(pool, (r.ip, *r.more)))
        else:
            ips = first_pool_ips(r.subject.annotations) if r.subject is not None else ()
            want = network_of_all(pool, ips if len(ips) > 1 else (r.ip,))
    except AddressError:
        return None  # adopt() refused it already
    try:
        have = json.loads(r.network)
    except ValueError:
        have = None
    if r.interface is None and r.subject is not None and second_family(r.subject.annotations) is not None:
        # Dual-stack from two pools: the network carries the second pool's address too.
        have = (
            {"ips": have["ips"][: len(want["ips"])]}
            if isinstance(have, dict) and isinstance(have.get("ips"), list)
            else have
        )
        want = {"ips": want["ips"]}
    if have == want:
        return None
    where = (
        f"annotation {ANNOTATION_NETWORK}"
        if r.interface is None
        else f"the network of interface {r.interface} in annotation {ANNOTATION_INTERFACES}"
    )
    return (
        f"{where}={r.network} differs from pool {pool.name}'s network for "
        f"{r.ip}: {json.dumps(want, separators=(',', ':'))}; the CNI plugin will refuse the pod"
    )


def adoption(pod: PodInfo, pool_name: str, reason: str) -> repair.Repair:
    """The repair that records running pod ``pod``'s allocation in ``pool_name`` with the
    address of its annotation."""
    return repair.Repair(
        "adopt",
        pool_name,
        pod.uid,
        pod.key,
        reason,
        pod.annotations.get(ANNOTATION_IP) or None,
        node=pod.node_name,
        network=pod.annotations.get(ANNOTATION_NETWORK),
        subject=pod,
    )


def interface_adoptions(pod: PodInfo, reason: str) -> list[repair.Repair]:
    """The repairs that record running pod ``pod``'s further interfaces' allocations (one per
    entry of its ``ipscheduler.io/interfaces``, as :func:`repair.plan` makes them for a pod
    that no pool records at all), ``reason`` theirs."""
    return [dataclasses.replace(r, reason=reason) for r in repair.interface_adoptions(pod, set(), False)]


def statefulset_facts(body: Mapping[str, Any]) -> StatefulSetFacts:
    """A StatefulSet body's UID, ``spec.replicas`` (default 1, as the API server defaults
    it) and ``spec.ordinals.start`` (default 0)."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    replicas = spec.get("replicas")
    ordinals = spec.get("ordinals") or {}
    start = ordinals.get("start") if isinstance(ordinals, dict) else None
    return StatefulSetFacts(
        uid=str(meta.get("uid") or ""),
        replicas=replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else 1,
        start=start if isinstance(start, int) and not isinstance(start, bool) else 0,
    )
