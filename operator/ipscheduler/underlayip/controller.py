"""PoolController: everything the scheduler does to NodeIPPools besides reserving.

Apart from the scheduling loop, as scheduler-plugins keep a CRD's status in
its own controller (``pkg/controllers/podgroup_controller.go``):

- **status**: capacity, allocated, free and the Ready condition of every pool,
  recomputed (debounced) when a pool or the node set changes; a Warning event
  when a pool turns not Ready;
- **finalizer** ``ipscheduler.io/allocations``: kept on live pools, removed once
  a deleting pool holds nothing (``DeletionBlocked`` event meanwhile);
- **release**: when a pod of ours ends, after :meth:`PoolController.confirm_gone`
  (the only live-read rule) where the event alone does not prove it;
- **garbage collection**: a sweep planned from fresh LISTs, never from the caches;
- **start-up reconcile** and **adoption** of pods created already bound with
  our annotations;
- **holds**: every running pod of ours with our annotations holds its address
  whatever the pool status says, from the moment the bound-pods watch shows it
  (:meth:`ipscheduler.underlayip.cache.PoolCache.hold`); an allocation a status
  edit removes from under a running pod is **restored** at once
  (:meth:`PoolController.on_pool_status`).

It subscribes itself to the informers it needs (:meth:`PoolController.subscribe`:
pending pods, bound pods, nodes, NodeIPPools) and tells the scheduling queue when
capacity was freed (``on_capacity_freed``); nothing flows back from the scheduler.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ipscheduler.backend.supervisor import Supervisor, TaskSet
from ipscheduler.framework.interface import ClusterEvent
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.health import HealthState
from ipscheduler.kube.client import Conflict, KubeApi, lean_pods, live_pod
from ipscheduler.kube.events import EventRecorder
from ipscheduler.kube.informer import ObjectStore, PendingPodEvents
from ipscheduler.metrics import Metrics
from ipscheduler.underlayip import allocator, events, repair
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.cache import PoolCache, rv_number
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    ANNOTATION_PREFIX,
    FINALIZER,
    POOLS,
)
from ipscheduler.underlayip.pool import READY, PoolView, age, network_of, pool_ref, refresh, utc_now
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

GC_MAX_DUTY = 0.02
"""Share of wall time the GC sweeps may take: a sweep of D seconds is followed by a pause
of at least D / GC_MAX_DUTY. At 10 000 pods a sweep's LIST takes about a second, which at
the 30 s default would cost the scheduler a tenth of its CPU in a busy cluster."""


def gc_pause(interval: float, last_sweep: float) -> float:
    """Seconds to wait before the next sweep: ``interval`` (``--gc-interval``), or
    ``last_sweep / GC_MAX_DUTY`` when the last sweep took longer than that allows, capped
    at ten intervals so a leak still ends within minutes."""
    return min(10 * interval, max(interval, last_sweep / GC_MAX_DUTY))


class PoolController:
    """Pool status, finalizer, release, GC, start-up reconcile and adoption (module doc)."""

    def __init__(
        self,
        *,
        scheduler_name: str,
        api: KubeApi,
        cache: PoolCache,
        writer: PoolWriter,
        recorder: EventRecorder,
        gc_interval: float = 30.0,
        reserved_ttl: float = 60.0,
        health: HealthState | None = None,
        metrics: Metrics | None = None,
        on_capacity_freed: Callable[[ClusterEvent], object] = lambda event: None,
        queue_check: Callable[[str], Callable[[Mapping[str, PodInfo]], None]] | None = None,
        wait_for: Sequence[asyncio.Event] = (),
        ready_to_schedule: asyncio.Event | None = None,
    ) -> None:
        """``scheduler_name``: only pods with this schedulerName are ours. ``gc_interval`` and
        ``reserved_ttl`` in seconds (``--gc-interval``, ``--reserved-ttl``).
        ``on_capacity_freed(event)`` is told when addresses were released
        (``events.ADDRESS_RELEASED``) or pools changed (``events.NODE_IP_POOL_CHANGE``): the
        scheduling queue's move of the unschedulable pods those events may help. Each GC sweep
        calls ``queue_check("gc")`` before its LIST of our pods and hands the LIST to what it
        returns: the scheduling queue drops the pods it shows gone
        (:meth:`ipscheduler.scheduler.eventhandlers.EventHandlers.queue_check`). The
        start-up reconcile waits for ``cache.ready`` and each event of ``wait_for`` (e.g.
        the bound-pods informer synced); ``ready_to_schedule`` (made here when None) is set
        once scheduling may start."""
        self.scheduler_name = scheduler_name
        self.api = api
        self.cache = cache
        self.writer = writer
        self.recorder = recorder
        self.gc_interval = gc_interval
        self.reserved_ttl = reserved_ttl
        self.health = health if health is not None else HealthState()
        self.metrics = metrics if metrics is not None else Metrics(scheduler_name)
        self.on_capacity_freed = on_capacity_freed
        self.wait_for = tuple(wait_for)
        self.queue_check = queue_check if queue_check is not None else _no_queue_check
        self.watch_timeout = 90.0
        """Seconds the pool cache may stay behind the API server before /healthz fails."""
        self.ready_to_schedule = ready_to_schedule if ready_to_schedule is not None else asyncio.Event()
        """Set once the caches are synced and every bound pod of ours holds its address
        (:meth:`on_bound_pod`), those no pool records included: scheduling may start. The
        start-up reconcile runs beside it."""
        self.started = asyncio.Event()
        """Set once the start-up reconcile is done (adoption and the GC wait for it)."""
        self._early: set[str] | None = None  # UIDs claimed before `started`; None: not yet
        self._tasks = TaskSet()
        self._pools_dirty = asyncio.Event()
        self._dirty_pools: set[str] | None = None  # None: every pool
        self._layout_seen = -1
        self._pool_reasons: dict[str, str] = {}
        self._stale_since: dict[str, tuple[float, int]] = {}
        self._skew = repair.SkewClock()

    # -- tasks -------------------------------------------------------------
    def start(self, supervisor: Supervisor) -> None:
        """Run the pool-status task (which does the start-up reconcile first) and the
        garbage collector under ``supervisor``."""
        supervisor.start("pool-status", self.run_status)
        supervisor.start("garbage-collector", self.run_gc)

    async def stop(self) -> None:
        """Cancel releases in flight; write what the PoolWriter still holds (deferred Bound marks)."""
        await self._tasks.cancel()
        try:
            await asyncio.wait_for(self.writer.flush(), timeout=5)
        except TimeoutError as e:
            log.warning("pending NodeIPPool writes not flushed at stop: %r", e)

    async def _start(self) -> None:
        """Wait for the caches; hold the addresses of the bound pods (those no pool records are
        claimed for adoption) and let scheduling start; then the start-up reconcile, retried
        until it succeeds.

        Scheduling does not wait for the reconcile (issue 21: under 20 000 pending pods it
        took 9.5 s, and every pod waited for it). What the reconcile does is safe beside
        scheduling: its releases apply only to the very allocation they planned on (CAS),
        its Bound marks are what PostBind writes too, and the only state that scheduling
        could get wrong before it, the addresses of pods bound with our annotations but
        recorded nowhere (to be adopted), is held first from the bound-pods cache, a pass
        linear in the pods bound.
        """
        await self.cache.ready.wait()
        for event in self.wait_for:
            await event.wait()
        if self._early is None:
            self._early = set()
        for pod in list(self.cache.node_cache.bound_pods().values()):
            self.on_bound_pod(pod)
        self.ready_to_schedule.set()
        delay = 1.0
        while True:
            try:
                await self.reconcile()
                break
            except Exception as e:
                log.warning("start-up reconcile failed (%r); retrying in %.0fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        self.started.set()
        # The reconcile adopted what its LIST showed; a claim it did not settle (a pod bound
        # after that LIST, a conflict) goes the way of any pod that arrives bound.
        early, self._early = self._early or set(), None
        for uid in early:
            self.cache.unclaim(uid)
            still = self.cache.node_cache.pod(uid)
            if still is not None:
                self.on_bound_pod(still)

    # -- events ----------------------------------------------------------------------
    def subscribe(
        self,
        *,
        pending_pods: PendingPodEvents,
        bound_pods: ObjectStore[PodInfo],
        nodes: ObjectStore[NodeInfo],
        pools: ObjectStore[PoolView],
    ) -> None:
        """Subscribe to the events the controller needs: pending pods of ours that end
        unbound (:meth:`on_pending_pod`), bound pods seen and gone (holds, adoption,
        release), nodes added or deleted (every pool's status), and pool changes
        (:meth:`on_pool_store_event`)."""
        pending_pods.subscribe(self.on_pending_pod)
        bound_pods.subscribe(self.on_bound_pod_event)
        nodes.subscribe(self.on_node_event)
        pools.subscribe(self.on_pool_store_event)

    def on_pending_pod(self, event_type: str | None, pod: PodInfo) -> None:
        """An event of kopf's pending-pod watch. A pod that left it (DELETED) without being
        bound by this scheduler (neither assumed nor bound in the node cache: the binding
        cycle settles those, by PostBind or by Unreserve) was deleted, or bound by another
        replica: released once :meth:`confirm_gone` says so. A terminal one is released at
        once. A pending pod that vanished without any event (the watch re-listed) is the GC
        sweep's."""
        if event_type == "DELETED":
            node_cache = self.cache.node_cache
            if node_cache.is_assumed(pod.uid) or node_cache.pod(pod.uid) is not None:
                return
            self.on_pod_gone(pod, True)
        elif pod.terminal:
            self.on_pod_gone(pod, False)

    def on_bound_pod_event(
        self, kind: str | None, uid: str, body: dict[str, Any], old: PodInfo | None, new: PodInfo | None
    ) -> None:
        """A bound-pods informer event: a pod seen (:meth:`on_bound_pod`) or gone
        (:meth:`on_bound_pod_gone`)."""
        if new == old:
            return
        if new is not None:
            self.on_bound_pod(new)
        elif old is not None:
            self.on_bound_pod_gone(old)

    def on_node_event(
        self, kind: str | None, name: str, body: dict[str, Any], old: NodeInfo | None, new: NodeInfo | None
    ) -> None:
        """A node informer event: a node added or deleted changes its pools' status (every
        pool is recomputed). The queue hears of it from the scheduler's own node handler
        (``NodeAdd``/``NodeDelete``), not from here: one fact moves the queue once."""
        if kind is not None and (old is None) != (new is None):
            self._mark_pools_dirty()

    def on_pool_store_event(
        self, kind: str | None, name: str, body: dict[str, Any], old: PoolView | None, new: PoolView | None
    ) -> None:
        """A NodeIPPool informer event. The echo of our own write does not recompute the
        pool's status or retry pending pods (that write already set a complete status, and
        frees capacity only on release, which retries pending pods itself); a deleting
        pool is always looked at (it may be ready to finalize). Someone else's status
        change goes to :meth:`on_pool_status`."""
        self.cache.invalidate(name)
        meta = body.get("metadata") or {}
        echo = kind != "DELETED" and self.writer.is_own_write(name, str(meta.get("resourceVersion", "")))
        if not echo or meta.get("deletionTimestamp"):
            self.on_pool_event(name)
        if not echo and old is not None and new is not None:
            self.on_pool_status(old, new)

    def on_pod_gone(self, pod: PodInfo, confirm: bool) -> None:
        """A pending pod of ours ended: terminal (``confirm`` False: release at once), or it
        left the pending-pod watch without our Binding (``confirm`` True: deleted, or bound
        by another replica; released only after :meth:`confirm_gone`)."""
        if not self.cache.pools_holding(pod.uid):
            return
        if confirm:
            self._tasks.spawn(self.release_if_gone(pod), f"release {pod.key}")
        else:
            self._tasks.spawn(self.release(pod.uid), f"release {pod.key}")

    def on_bound_pod_gone(self, pod: PodInfo) -> None:
        """A bound pod (any scheduler's) was deleted or turned terminal. Its hold and claim
        end; if it is ours and holds an allocation, the address goes back to the pool (and
        the queue is told once it did)."""
        self.cache.unhold(pod.uid)
        self.cache.unclaim(pod.uid)
        if pod.scheduler_name == self.scheduler_name and self.cache.pools_holding(pod.uid):
            self._tasks.spawn(self.release(pod.uid), f"release {pod.key}")

    def on_bound_pod(self, pod: PodInfo) -> None:
        """A bound pod appeared or changed in the pods-by-node watch.

        A running pod of ours that carries our annotations holds its address and
        its place in the pool they name, whatever the pool status says
        (:meth:`PoolCache.hold`), from this moment until it is gone.

        One that no pool records (created already bound: a restore from backup, a
        migration tool) is adopted at once. A pod we bound ourselves already has its
        allocation recorded, so nothing more happens. Before the start-up reconcile is
        done the adoption is left to the reconcile (see :meth:`_start`).
        """
        if pod.scheduler_name != self.scheduler_name:
            return
        pool_name = pod.annotations.get(ANNOTATION_POOL)
        raw_ip = pod.annotations.get(ANNOTATION_IP) or None
        try:
            ip = canonical(raw_ip) if raw_ip else None
        except AddressError:
            ip = None  # adopt() reports it
        if not pool_name or pod.terminal:
            self.cache.unhold(pod.uid)
            return
        self.cache.hold(pod.uid, pool_name, ip, pod.node_name)
        if (
            (self._early is None and not self.started.is_set())  # pool cache not attached yet
            or pod.deleting
            or pod.uid in self.cache.claimed()
            or self.cache.pools_holding(pod.uid)
        ):
            return
        self.cache.claim(pod.uid, pool_name, ip)
        if self._early is not None:
            self._early.add(pod.uid)
            return
        self._tasks.spawn(
            self._adopt_claimed(_adoption(pod, pool_name, "pod arrived bound")), f"adopt {pod.key}"
        )

    def on_pool_status(self, old: PoolView, new: PoolView) -> None:
        """A pool changed from ``old`` to ``new`` by someone else's write (not the echo of
        ours): a running pod of ours whose allocation the change removed (a status edit)
        gets it back at once, with a Warning ``AllocationRestored`` event on the pod and the
        pool; its address never became free meanwhile (:meth:`PoolCache.hold`). If the
        same edit gave the address to another UID, both pods get ``AddressConflict`` and
        the GC sweep settles it (the other UID's pod is gone, or one of the two is)."""
        if not self.started.is_set() or new.deleting:
            return  # the start-up reconcile adopts what no pool records
        holders = self.cache.holders_of(new.name)
        for uid in old.allocations.keys() - new.allocations.keys():
            if uid not in holders or uid in self.cache.claimed():
                continue
            pod = self.cache.node_cache.pod(uid)
            if pod is None or pod.deleting:
                continue
            _, ip = self.cache.holds().get(uid, (new.name, None))
            self.cache.claim(uid, new.name, ip)
            r = _adoption(pod, new.name, "status edited")
            self._tasks.spawn(self._restore(r, new), f"restore {pod.key}")

    async def _restore(self, r: repair.Repair, pool: PoolView) -> None:
        """Record running pod ``r.uid``'s allocation again, once a live read confirms the pod
        runs (another replica may have released it as gone just before our bound-pods
        watch said so)."""
        try:
            live = await self.live_pod(r.uid, r.pod)
            if live is None or live.terminal or not live.bound or live.deleting:
                return
            log.warning(
                "NodeIPPool %s lost the allocation of running pod %s (%s): its status was edited; "
                "restoring it",
                r.pool,
                r.pod,
                r.ip or "a slot",
            )
            counts = await self._adopt(r, {"adopted": 0, "adopt_conflicts": 0})
        except Exception as e:
            log.warning("restoring the allocation of %s failed (%s); the GC sweep retries", r.pod, e)
            return
        finally:
            self.cache.unclaim(r.uid)
        if not counts["adopted"]:
            return
        self.metrics.allocations_restored.inc()
        what = f"address {r.ip}" if r.ip else "slot"
        message = (
            f"the status of NodeIPPool {r.pool} was edited and lost the allocation of running pod "
            f"{r.pod} ({what}); restored"
        )
        namespace, _, name = r.pod.partition("/")
        ref = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": r.uid}
        await self.recorder.record(ref, "Warning", "AllocationRestored", message)
        await self.recorder.record(pool_ref(pool), "Warning", "AllocationRestored", message)

    async def _adopt_claimed(self, r: repair.Repair) -> None:
        try:
            counts = await self._adopt(r, {"adopted": 0, "adopt_conflicts": 0})
            if counts["adopted"]:
                log.info("adopted %s, created bound with %s of pool %s", r.pod, r.ip or "a slot", r.pool)
        except Exception as e:
            log.warning("adopting %s failed (%s); the GC sweep retries", r.pod, e)
        finally:
            self.cache.unclaim(r.uid)

    def on_pool_event(self, name: str) -> None:
        """Pool ``name`` changed (added, edited, deleted, or its status by someone else).

        Recomputes that pool's status (debounced) and retries pending pods
        (``NodeIPPoolChange``).
        """
        self._mark_pools_dirty(name)
        self.on_capacity_freed(events.NODE_IP_POOL_CHANGE)

    def _mark_pools_dirty(self, name: str | None = None) -> None:
        if name is None:
            self._dirty_pools = None
        elif self._dirty_pools is not None:
            self._dirty_pools.add(name)
        self._pools_dirty.set()

    # -- release -----------------------------------------------------------
    async def release_if_gone(self, pod: PodInfo) -> None:
        """Release ``pod``'s allocations if :meth:`confirm_gone` says it is gone.

        A pending pod that leaves the watch may have been deleted, or bound by
        another replica with the very allocation we see: never release on the
        event alone. A failed read leaves it to the GC sweep.
        """
        try:
            gone = await self.confirm_gone(pod.uid, pod.key)
        except Exception as e:
            log.warning("could not confirm that %s is gone (%r); the GC will decide", pod.key, e)
            return
        if gone:
            await self.release(pod.uid)

    async def live_pod(self, uid: str, key: str) -> PodInfo | None:
        """Pod ``uid`` as the API server has it now (:func:`ipscheduler.kube.client.live_pod`:
        read by name, matched by UID). None when it is gone. Raises what the read raises."""
        return await live_pod(self.api, uid, key)

    async def confirm_gone(self, uid: str, key: str) -> bool:
        """True when :meth:`live_pod` finds pod ``uid`` gone or terminal (Succeeded/Failed)."""
        live = await self.live_pod(uid, key)
        return live is None or live.terminal

    async def release(self, uid: str) -> None:
        """Remove ``uid``'s allocations from every pool holding one (CAS)."""
        for pool in self.cache.pools_holding(uid):
            await self.writer.submit(pool.name, functools.partial(allocator.release, uid=uid))
        self.on_capacity_freed(events.ADDRESS_RELEASED)

    def pool_counts(self, pool: PoolView) -> tuple[int, int, int]:
        """``(capacity, allocated, free)`` of a pool as the scheduler sees it."""
        blocked = self.cache.context(pool).blocked
        return pool.capacity(blocked), len(pool.allocations), pool.free(blocked)

    # -- pool status -----------------------------------------------------------
    async def run_status(self) -> None:
        """The pool-status task: the start-up reconcile (once), then keep every pool's
        capacity/allocated/free/conditions and finalizer right (debounced)."""
        if not self.started.is_set():
            await self._start()
        while True:
            await self._pools_dirty.wait()
            await asyncio.sleep(0.05)
            self._pools_dirty.clear()
            names, self._dirty_pools = self._dirty_pools, set()
            pools = self.cache.pools()
            self.cache.ensure_contexts()
            if self.cache.layout_version != self._layout_seen:  # conflicts may have changed anywhere
                self._layout_seen, names = self.cache.layout_version, None
            for pool in [pools[n] for n in sorted(pools) if names is None or n in names]:
                try:
                    await self.refresh_pool(pool)
                    await self._finalize(self.cache.pool(pool.name) or pool)
                except Conflict:
                    self._mark_pools_dirty(pool.name)  # changed meanwhile: look again
                except Exception as e:
                    # Any failure (API down, connection reset...): look again after a pause, so an
                    # outage neither kills this task nor turns it into a busy loop.
                    log.warning("refreshing NodeIPPool %s status failed: %r", pool.name, e)
                    self._mark_pools_dirty(pool.name)
                    await asyncio.sleep(1.0)

    async def _finalize(self, pool: PoolView) -> None:
        """Keep our finalizer on live pools; drop it once a deleted pool holds nothing."""
        has = FINALIZER in pool.finalizers
        if not pool.deleting and not has:
            await self.api.set_cluster_finalizers(
                POOLS, pool.name, pool.resource_version, [*pool.finalizers, FINALIZER]
            )
        elif pool.deleting and has and not pool.allocations:
            rest = [f for f in pool.finalizers if f != FINALIZER]
            await self.api.set_cluster_finalizers(POOLS, pool.name, pool.resource_version, rest)
            log.info("NodeIPPool %s holds no allocations any more: deletion proceeds", pool.name)
        elif pool.deleting and pool.allocations:
            pods = ", ".join(sorted(a.pod for a in pool.allocations.values())[:5])
            more = "" if len(pool.allocations) <= 5 else f" and {len(pool.allocations) - 5} more"
            await self.recorder.record(
                pool_ref(pool),
                "Warning",
                "DeletionBlocked",
                f"deletion waits until {len(pool.allocations)} allocation(s) are released "
                f"(pods {pods}{more})",
            )

    async def refresh_pool(self, pool: PoolView) -> None:
        """Write the pool's computed status if it differs; Warning event when it turns not Ready."""
        written = await self.writer.submit(pool.name, refresh)
        if written is None:
            return
        cond = next((c for c in written.status.conditions if c.type == READY), None)
        if cond is None:
            return
        previous = self._pool_reasons.get(pool.name)
        self._pool_reasons[pool.name] = cond.reason
        if cond.status == "False" and cond.reason != previous:
            log.warning("NodeIPPool %s not ready: %s: %s", pool.name, cond.reason, cond.message)
            await self.recorder.record(pool_ref(written), "Warning", cond.reason, cond.message)

    # -- repairs: start-up reconcile and garbage collection ---------------------------
    async def reconcile(self) -> dict[str, int]:
        """Repair state left by a crash: the pools as the NodeIPPool informer's first LIST
        (and any watch event since) left them in the pool cache, and a live LIST of our pods.

        Releases allocations of pods that are gone or terminal, marks Reserved
        allocations Bound when their pod is bound with them, adopts bound
        pods of ours that carry the annotations but have no allocation
        (Warning event on the pod when its address is taken). Returns the
        number of repairs done per action.

        The pools are not LISTed a second time (issue 21: at 5000 pools that LIST was about
        0.5 s of a 4 s restart). What the cache holds was read from the API server before
        the pod LIST starts, which is all the plan needs (see below); a pool that failed to
        parse is not in it, so one malformed pool cannot stop the start-up.
        """
        # Pools strictly before pods: an allocation in this pool snapshot belongs to a pod
        # that existed before the pod LIST, so a pod missing from it is really gone.
        pools = list(self.cache.pools().values())
        pods = await self._list_our_pods()
        counts = await self.apply_repairs(self._plan(pools, pods), confirm=False)
        log.info("start-up reconcile: %s", counts)
        self._mark_pools_dirty()
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
        if worst > self.watch_timeout:
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
        the cache's view of each pool.
        """
        live_pools = await self.api.list_cluster_objects(POOLS)
        self.check_watch(live_pools)
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
        now = utc_now()
        repairs = [r for r in self._plan(pools, pods) if not self._mark_on_its_way(r, now)]
        counts = await self.apply_repairs(repairs, confirm=True)
        if any(counts.values()):
            log.info("garbage collection: %s", counts)
        return counts

    def _mark_on_its_way(self, r: repair.Repair, now: datetime.datetime) -> bool:
        """A planned ``mark_bound`` that PostBind's deferred mark is still due to write:
        the allocation is younger than twice the writer's ``defer_delay``
        (``--bound-mark-delay``). Writing it from the sweep would cost one more pool write
        per pod bound in the last ``defer_delay`` seconds; a mark that was lost (a failed
        write) is written by the next sweep."""
        if r.action != "mark_bound" or r.allocation is None:
            return False
        return age(r.allocation.since, now) < 2 * self.writer.defer_delay

    def _plan(self, pools: list[PoolView], pods: dict[str, PodInfo]) -> list[repair.Repair]:
        now = utc_now()
        self._skew.observe(pools, now)
        return repair.plan(pools, pods, now, self.reserved_ttl, self._skew.first_seen)

    async def _list_our_pods(self) -> dict[str, PodInfo]:
        """Our pods (any phase) by UID, from a live LIST (:func:`lean_pods`: the sweep reads
        only our annotations)."""
        return await lean_pods(self.api, f"spec.schedulerName={self.scheduler_name}", ANNOTATION_PREFIX)

    async def run_gc(self) -> None:
        """The garbage-collector task: a :meth:`gc_sweep` every ``gc_interval`` seconds once
        the start-up reconcile is done, or less often when sweeps are slow
        (:func:`gc_pause`: a sweep takes at most ``GC_MAX_DUTY`` of the time); a failed
        sweep is logged and retried next time."""
        await self.started.wait()
        loop = asyncio.get_running_loop()
        pause = self.gc_interval
        while True:
            await asyncio.sleep(pause)
            started = loop.time()
            try:
                await self.gc_sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("garbage collection failed (%r); retried in the next sweep", e)
            pause = gc_pause(self.gc_interval, loop.time() - started)

    async def _confirmed(self, r: repair.Repair) -> bool:
        """Re-check a planned release against :meth:`live_pod` (by UID, never by name)."""
        live = await self.live_pod(r.uid, r.pod)
        pods = {live.uid: live} if live is not None else {}
        pool = self.cache.pool(r.pool)
        if pool is None or r.uid not in pool.allocations:
            return False
        return any(
            x.action == "release" and x.uid == r.uid
            for x in repair.plan([pool], pods, utc_now(), self.reserved_ttl, self._skew.first_seen)
        )

    async def apply_repairs(self, repairs: list[repair.Repair], confirm: bool) -> dict[str, int]:
        """Carry out ``repairs`` by CAS; releases are confirmed live first when ``confirm``;
        Bound marks are deferred (:meth:`PoolWriter.defer`)."""
        counts = {"released": 0, "marked_bound": 0, "adopted": 0, "adopt_conflicts": 0}
        released = False
        for r in repairs:
            if r.action == "release":
                if confirm and not await self._confirmed(r):
                    continue
                log.info("releasing %s of %s in pool %s: %s", r.ip or "slot", r.pod, r.pool, r.reason)
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
            elif r.action == "mark_bound":
                # Deferred as PostBind's own mark: it rides along with the pool's next write
                # (or goes after --bound-mark-delay). After a failover the new leader plans a
                # mark for every pod the old one bound in its last --bound-mark-delay; written
                # one after another they held the end of the reconcile for many seconds.
                self.writer.defer(r.pool, functools.partial(allocator.mark_bound, uid=r.uid))
                counts["marked_bound"] += 1
            else:
                counts.update(await self._adopt(r, counts))
        if released:
            self.on_capacity_freed(events.ADDRESS_RELEASED)
        return counts

    async def _adopt(self, r: repair.Repair, counts: dict[str, int]) -> dict[str, int]:
        namespace, _, name = r.pod.partition("/")
        ref = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": r.uid}
        pool = self.cache.pool(r.pool)
        try:
            if pool is None:
                raise allocator.AdoptConflict(f"pool {r.pool} named in the pod's annotation does not exist")
            if r.node and pool.node_name != r.node:
                raise allocator.AdoptConflict(
                    f"pool {r.pool} named in the pod's annotation serves {pool.node_name}, not {r.node}"
                )
            if r.uid in pool.allocations:
                # Recorded since the pool LIST this plan read: the pod was reserved and
                # bound between that LIST and the pod LIST. Nothing to adopt.
                return counts
            await self.writer.submit(
                r.pool, functools.partial(allocator.adopt, uid=r.uid, pod_key=r.pod, ip=r.ip)
            )
            counts["adopted"] += 1
            if mismatch := _network_mismatch(pool, r):
                log.warning("adopted %s, but %s", r.pod, mismatch)
                await self.recorder.record(ref, "Warning", "NetworkMismatch", mismatch)
        except allocator.AdoptConflict as e:
            counts["adopt_conflicts"] += 1
            log.warning("cannot adopt %s: %s", r.pod, e)
            await self.recorder.record(
                ref, "Warning", "AddressConflict", f"cannot record the pod's address: {e}"
            )
            holder_ns, _, holder_name = e.holder_pod.partition("/")
            if holder_ns and holder_name:
                holder = {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "namespace": holder_ns,
                    "name": holder_name,
                    "uid": e.holder_uid,
                }
                await self.recorder.record(
                    holder,
                    "Warning",
                    "AddressConflict",
                    f"pod {r.pod} (UID {r.uid}) carries this pod's address {r.ip} of pool {r.pool} "
                    "in its annotation",
                )
        return counts


def _network_mismatch(pool: PoolView, r: repair.Repair) -> str | None:
    """Why the adopted pod's ``ipscheduler.io/network`` differs from what ``pool`` gives its
    address (None when absent, or equal as JSON): the CNI plugin refuses such a pod."""
    if r.network is None or not r.ip:
        return None
    try:
        want = network_of(pool, r.ip)
    except AddressError:
        return None  # adopt() refused it already
    try:
        have = json.loads(r.network)
    except ValueError:
        have = None
    if have == want:
        return None
    return (
        f"annotation {ANNOTATION_NETWORK}={r.network} differs from pool {pool.name}'s network for "
        f"{r.ip}: {json.dumps(want, separators=(',', ':'))}; the CNI plugin will refuse the pod"
    )


def _adoption(pod: PodInfo, pool_name: str, reason: str) -> repair.Repair:
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
    )


def _no_queue_check(found_by: str) -> Callable[[Mapping[str, PodInfo]], None]:
    return lambda pods: None
