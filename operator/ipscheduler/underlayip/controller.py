"""PoolController: everything the scheduler does to NodeIPPools besides reserving.

Apart from the scheduling loop, as scheduler-plugins keep a CRD's status in
its own controller (``pkg/controllers/podgroup_controller.go``):

- **status**: capacity, allocated, free and the Ready condition of every pool,
  recomputed (debounced) when a pool or the node set changes; a Warning event
  when a pool turns not Ready;
- **finalizer** ``ipscheduler.io/allocations``: kept on live pools, removed once
  a deleting pool holds nothing (``DeletionBlocked`` event meanwhile);
- **release**: when a pod of ours ends, after :meth:`PoolController.confirm_gone`
  (the only live-read rule) where the event alone does not prove it; the address of a pod
  removed without its node confirming the teardown stays ``Releasing`` until the node has
  been Ready for ``--release-delay`` (:mod:`~ipscheduler.underlayip.teardown`), timed by the
  :class:`~ipscheduler.underlayip.releasing.ReleaseClock` it holds (``clock``: the
  repairs' own);
- **garbage collection**, the **start-up reconcile** and **adoption** of pods
  created already bound with our annotations: repairs planned from fresh LISTs, by the
  :class:`~ipscheduler.underlayip.reconciler.Reconciler` it holds (``repairs``), which
  the wiring builds and hands in;
- **carried addresses**: every running pod of ours with our annotations keeps its address
  whatever the pool status says, from the moment the bound-pods watch shows it
  (:meth:`ipscheduler.underlayip.cache.PoolCache.carry`); an allocation a status
  edit removes from under a running pod is **restored** at once
  (:meth:`PoolController.on_pool_status`).

It subscribes itself to the informers it needs (:meth:`PoolController.subscribe`:
pending pods, bound pods, nodes, NodeIPPools; namespaces' and NetworkAttachmentDefinitions'
pools, for retries only) and tells the scheduling queue when capacity was freed, or pools
named anew (``requeue``); nothing flows back from the scheduler.

Size: the wing's one subscriber to those four informers and the writer of every pool status
but the reservations', so one module; what has a state of its own is a room it holds (the
repairs, the release clock), not code inlined here.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from ipscheduler.backend.supervisor import Supervisor, TaskSet
from ipscheduler.framework.aio import Batch, WorkQueue
from ipscheduler.framework.backoff import Backoff
from ipscheduler.framework.interface import Requeue
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import Conflict, KubeApi
from ipscheduler.kube.events import EventRecorder, pod_key_ref
from ipscheduler.kube.informer import ObjectStore, PendingPodEvents
from ipscheduler.underlayip import allocator, events, repair
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.interfaces import NetworkPools, first_pool_ips, interface_ips
from ipscheduler.underlayip.metrics import PoolCounts, UnderlayIPMetrics
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_POOL,
    FINALIZER,
    POOLS,
    RELEASING,
    RETAINED,
)
from ipscheduler.underlayip.pool import EXHAUSTED, READY, PoolView, pool_ref, refresh, utc_now
from ipscheduler.underlayip.reconciler import Reconciler, adoption, interface_adoptions
from ipscheduler.underlayip.releasing import ReleaseClock
from ipscheduler.underlayip.selection import NamespaceDefaults, is_ours
from ipscheduler.underlayip.teardown import kubelet_let_go
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

STATUS_DELAY = 0.05
"""Seconds pool status refreshes are gathered for after the first change."""
STATUS_RETRY = 1.0
"""Seconds after which a pool whose status refresh failed is looked at again."""


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
        repairs: Reconciler,
        metrics: UnderlayIPMetrics | None = None,
        requeue: Requeue = lambda event, old, new: None,
        wait_for: Sequence[asyncio.Event] = (),
        ready_to_schedule: asyncio.Event | None = None,
    ) -> None:
        """``scheduler_name``: only pods with this schedulerName are ours. ``repairs``: the
        :class:`~ipscheduler.underlayip.reconciler.Reconciler` the wiring built over the same
        ``api``, ``cache``, ``writer`` and ``recorder`` (its release clock is the one this
        controller feeds the node events and asks about teardowns). ``metrics``: the wing's
        (None: on a registry of their own). ``requeue(event, old, new)`` is told when
        addresses were released (``events.ADDRESS_RELEASED``) or pools changed
        (``events.NODE_IP_POOL_CHANGE``): the scheduling queue's move of the unschedulable
        pods those events may help. The start-up reconcile waits for ``cache.ready`` and each
        event of ``wait_for`` (e.g. the bound-pods informer synced); ``ready_to_schedule``
        (made here when None) is set once scheduling may start."""
        self.scheduler_name = scheduler_name
        self.api = api
        self.cache = cache
        self.claims: dict[str, tuple[str, str | None]] = {}
        """Pods being adopted: UID → (pool, canonical address), until their adoption ends."""
        self.writer = writer
        self.recorder = recorder
        self.metrics = metrics if metrics is not None else UnderlayIPMetrics(CollectorRegistry())
        self.requeue = requeue
        self.wait_for = tuple(wait_for)
        self.ready_to_schedule = ready_to_schedule if ready_to_schedule is not None else asyncio.Event()
        """Set once the caches are synced and every bound pod of ours carries its address
        (:meth:`on_bound_pod`), those no pool records included: scheduling may start. The
        start-up reconcile runs beside it."""
        self.repairs = repairs
        """The start-up reconcile, the GC sweep, the watch-stall check and adoption."""
        self.started = repairs.started
        """Set once the start-up reconcile is done (adoption and the GC wait for it)."""
        self.clock: ReleaseClock = repairs.clock
        """Node states and the Releasing allocations' timers (``--release-delay``): the
        repairs' own, so that the GC sweep plans with the node states fed here."""
        self._tasks = TaskSet()
        self._early: set[str] | None = None  # UIDs claimed before `started`; None: not yet
        self.status_queue: WorkQueue[str] = WorkQueue(
            STATUS_DELAY, lambda: Backoff(STATUS_RETRY, STATUS_RETRY, 0.0)
        )
        """Pools whose status to recompute (None: every pool), gathered for :data:`STATUS_DELAY`."""
        self._layout_seen = -1
        self._pool_reasons: dict[str, str] = {}

    # -- tasks -------------------------------------------------------------
    def start(self, supervisor: Supervisor) -> None:
        """Run the pool-status task (which does the start-up reconcile first) and the
        garbage collector under ``supervisor``."""
        supervisor.start("pool-status", self.run_status)
        supervisor.start("garbage-collector", self.repairs.run_gc)

    async def stop(self) -> None:
        """Cancel releases in flight; write what the PoolWriter still holds (deferred Bound marks)."""
        await self.clock.stop()
        await self._tasks.cancel()
        try:
            await asyncio.wait_for(self.writer.flush(), timeout=5)
        except TimeoutError as e:
            log.warning("pending NodeIPPool writes not flushed at stop: %r", e)

    async def _start(self) -> None:
        """Wait for the caches; hold the addresses of the bound pods (those no pool records are
        claimed for adoption) and let scheduling start; then the start-up reconcile, retried
        until it succeeds.

        Scheduling does not wait for the reconcile (under 20 000 pending pods it took 9.5 s,
        and every pod waited for it). What the reconcile does is safe beside
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
        for pool in self.cache.pools().values():
            self.clock.arm(pool)  # Releasing allocations written before this process ran
        self.ready_to_schedule.set()
        backoff = Backoff(1.0, 30.0, jitter=0.0)
        while True:
            try:
                await self.repairs.reconcile()
                break
            except Exception as e:
                delay = backoff.next()
                log.warning("start-up reconcile failed (%r); retrying in %.0fs", e, delay)
                await asyncio.sleep(delay)
        self.status_queue.add()
        self.started.set()
        # The reconcile adopted what its LIST showed; a claim it did not settle (a pod bound
        # after that LIST, a conflict) goes the way of any pod that arrives bound.
        early, self._early = self._early or set(), None
        for uid in early:
            self.claims.pop(uid, None)
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
        namespaces: ObjectStore[NamespaceDefaults] | None = None,
        networks: ObjectStore[NetworkPools] | None = None,
    ) -> None:
        """Subscribe to the events the controller needs: pending pods of ours that end
        unbound (:meth:`on_pending_pod`), bound pods seen and gone (holds, adoption,
        release), nodes added or deleted (every pool's status), pool changes
        (:meth:`on_pool_store_event`), namespaces' default pools and
        NetworkAttachmentDefinitions' pools (pending pods retried)."""
        pending_pods.subscribe(self.on_pending_pod)
        bound_pods.subscribe(self.on_bound_pod_event)
        nodes.subscribe(self.on_node_event)
        pools.subscribe(self.on_pool_store_event)
        if namespaces is not None:
            namespaces.subscribe(self.on_namespace_event)
        if networks is not None:
            networks.subscribe(self.on_network_event)

    def on_network_event(
        self,
        kind: str | None,
        key: str,
        body: dict[str, Any],
        old: NetworkPools | None,
        new: NetworkPools | None,
    ) -> None:
        """A NetworkAttachmentDefinition's pools or families changed (the informer keeps only
        the NADs that carry one): logged at info (they change rarely; what a pod naming it gets
        changes), and the pending pods refused for them may fit now. The first LIST counts
        too: the API may be served only after scheduling started (a CRD installed later)."""
        if old == new:
            return
        if new is None:
            log.info("NetworkAttachmentDefinition %s names no pools or families now", key)
        else:
            log.info(
                "NetworkAttachmentDefinition %s names pools %r, families %s",
                key,
                new.pools,
                dict(new.families) or "any",
            )
        self.requeue(events.NETWORK_POOLS_CHANGE, None, None)

    def on_namespace_event(
        self,
        kind: str | None,
        name: str,
        body: dict[str, Any],
        old: NamespaceDefaults | None,
        new: NamespaceDefaults | None,
    ) -> None:
        """A namespace's defaults for its pods changed (``ipscheduler.io/default-pools``, the IP
        family annotations; the informer keeps only namespaces that carry one): its pending
        pods may fit elsewhere now."""
        if kind is not None and old != new:
            self.requeue(events.DEFAULT_POOLS_CHANGE, None, None)

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
            self.on_bound_pod_gone(old, kubelet_let_go(body))

    def on_node_event(
        self, kind: str | None, name: str, body: dict[str, Any], old: NodeInfo | None, new: NodeInfo | None
    ) -> None:
        """A node informer event: a node added or deleted changes its pools' status (every
        pool is recomputed). The queue hears of it from the scheduler's own node handler
        (``NodeAdd``/``NodeDelete``), not from here: one fact moves the queue once. The
        release clock keeps the node's state (:meth:`ReleaseClock.on_node_event`)."""
        self.clock.on_node_event(name, body, old, new)
        if kind is not None and (old is None) != (new is None):
            self.status_queue.add()

    def on_pool_store_event(
        self, kind: str | None, name: str, body: dict[str, Any], old: PoolView | None, new: PoolView | None
    ) -> None:
        """A NodeIPPool informer event. The echo of our own write does not recompute the
        pool's status or retry pending pods (that write already set a complete status, and
        frees capacity only on release, which retries pending pods itself); a deleting
        pool is always looked at (it may be ready to finalize). Someone else's status
        change goes to :meth:`on_pool_status`. A deleted pool's deferred writes (Bound
        marks) are dropped: no write would ever carry them."""
        self.cache.invalidate(name)
        if kind == "DELETED":
            self.writer.drop_deferred(name)
        elif new is not None:
            self.clock.arm(new)
        meta = body.get("metadata") or {}
        echo = kind != "DELETED" and self.cache.is_own_write(name, str(meta.get("resourceVersion", "")))
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

    def on_bound_pod_gone(self, pod: PodInfo, kubelet: bool = True) -> None:
        """A bound pod (any scheduler's) was deleted or turned terminal (``kubelet``: its last
        state shows the kubelet ended it: :func:`~ipscheduler.underlayip.teardown.kubelet_let_go`).
        What it carried and its claim end; if it is ours and holds an allocation, the address goes back to
        the pool (:meth:`release`), Releasing when its node has not confirmed the teardown
        (:meth:`ReleaseClock.confirmed`)."""
        self.cache.uncarry(pod.uid)
        self.claims.pop(pod.uid, None)
        self.repairs.refused.discard(pod.uid)
        if is_ours(pod, self.scheduler_name) and self.cache.pools_holding(pod.uid):
            let_go = self.release(pod.uid, self.clock.confirmed(pod.node_name, kubelet))
            self._tasks.spawn(let_go, f"release {pod.key}")

    def on_bound_pod(self, pod: PodInfo) -> None:
        """A bound pod appeared or changed in the pods-by-node watch.

        A running pod of ours that carries our annotations keeps its address and
        its place in the pool they name, whatever the pool status says
        (:meth:`PoolCache.carry`), from this moment until it is gone.

        One that no pool records (created already bound: a restore from backup, a
        migration tool) is adopted at once, its further interfaces (its
        ``ipscheduler.io/interfaces``) after its first, if it may use the pool (the tenancy rules,
        :meth:`tenancy`; else it holds nothing and a Warning ``AdoptionRefused`` says
        why). A pod we bound ourselves already has its allocation recorded, so nothing
        more happens. Before the start-up reconcile is
        done the adoption is left to the reconcile (see :meth:`_start`).
        """
        if not is_ours(pod, self.scheduler_name):
            return
        pool_name = pod.annotations.get(ANNOTATION_POOL)
        raw_ip = pod.annotations.get(ANNOTATION_IP) or None
        try:
            ip = canonical(raw_ip) if raw_ip else None
        except AddressError:
            ip = None  # adopt() reports it
        if not pool_name or pod.terminal:
            self.cache.uncarry(pod.uid)
            return
        pool = self.cache.pool(pool_name)
        if (
            pool is not None
            and not self.cache.pools_holding(pod.uid)
            and (problem := self.repairs.tenancy(pod, pool)) is not None
        ):
            # Created bound with an address of a pool it may not use: not held, not adopted;
            # the address stays free (or with its holder) and the CNI plugin refuses the pod.
            self.cache.uncarry(pod.uid)
            if pod.uid not in self.repairs.refused and (self.started.is_set() or self._early is not None):
                self._tasks.spawn(self.repairs.refuse_adoption(pod, pool, problem), f"refuse {pod.key}")
            return
        more = tuple(other for other in first_pool_ips(pod.annotations) if other != ip)
        self.cache.carry(pod.uid, pool_name, ip, pod.node_name, more, interface_ips(pod.annotations))
        if (
            (self._early is None and not self.started.is_set())  # pool cache not attached yet
            or pod.deleting
            or pod.uid in self.claims
            or self.cache.pools_holding(pod.uid)
        ):
            return
        self.claims[pod.uid] = (pool_name, ip)
        if self._early is not None:
            self._early.add(pod.uid)
            return
        adopts = (
            adoption(pod, pool_name, "pod arrived bound"),
            *interface_adoptions(pod, "pod arrived bound"),
        )
        self._tasks.spawn(self._adopt_claimed(*adopts), f"adopt {pod.key}")

    def on_pool_status(self, old: PoolView, new: PoolView) -> None:
        """A pool changed from ``old`` to ``new`` by someone else's write (not the echo of
        ours): a running pod of ours whose allocation the change removed (a status edit)
        gets it back at once, with a Warning ``AllocationRestored`` event on the pod and the
        pool; its address never became free meanwhile (:meth:`PoolCache.carry`). If the
        same edit gave the address to another UID, both pods get ``AddressConflict`` and
        the GC sweep settles it (the other UID's pod is gone, or one of the two is)."""
        if not self.started.is_set() or new.deleting:
            return  # the start-up reconcile adopts what no pool records
        holders = self.cache.carriers_of(new.name)
        for uid in old.allocations.keys() - new.allocations.keys():
            if uid not in holders or uid in self.claims:
                continue
            pod = self.cache.node_cache.pod(uid)
            if pod is None or pod.deleting:
                continue
            _, ip = self.cache.carried().get(uid, (new.name, None))
            self.claims[uid] = (new.name, ip)
            r = adoption(pod, new.name, "status edited")
            self._tasks.spawn(self._restore(r, new), f"restore {pod.key}")

    async def _restore(self, r: repair.Repair, pool: PoolView) -> None:
        """Record running pod ``r.uid``'s allocation again, once a live read confirms the pod
        runs (another replica may have released it as gone just before our bound-pods
        watch said so)."""
        try:
            live = await self.repairs.live_pod(r.uid, r.pod)
            if live is None or live.terminal or not live.bound or live.deleting:
                return
            log.warning(
                "NodeIPPool %s lost the allocation of running pod %s (%s): its status was edited; "
                "restoring it",
                r.pool,
                r.pod,
                r.ip or "a slot",
            )
            counts = await self.repairs.adopt(r, {"adopted": 0, "adopt_conflicts": 0})
        except Exception as e:
            log.warning("restoring the allocation of %s failed (%s); the GC sweep retries", r.pod, e)
            return
        finally:
            self.claims.pop(r.uid, None)
        if not counts["adopted"]:
            return
        self.metrics.allocations_restored.inc()
        what = f"address {r.ip}" if r.ip else "slot"
        message = (
            f"the status of NodeIPPool {r.pool} was edited and lost the allocation of running pod "
            f"{r.pod} ({what}); restored"
        )
        await self.recorder.record(pod_key_ref(r.pod, r.uid), "Warning", "AllocationRestored", message)
        await self.recorder.record(pool_ref(pool), "Warning", "AllocationRestored", message)

    async def _adopt_claimed(self, *repairs: repair.Repair) -> None:
        """Carry out the adoptions ``repairs`` of one pod created bound (its first
        interface's, then its further ones'), in order; then its claim ends."""
        try:
            for r in repairs:
                counts = await self.repairs.adopt(r, {"adopted": 0, "adopt_conflicts": 0})
                if counts["adopted"]:
                    what = f"interface {r.interface}: " if r.interface is not None else ""
                    log.info(
                        "adopted %s, created bound with %s%s of pool %s",
                        r.pod,
                        what,
                        r.ip or "a slot",
                        r.pool,
                    )
        except Exception as e:
            log.warning("adopting %s failed (%s); the GC sweep retries", repairs[0].pod, e)
        finally:
            self.claims.pop(repairs[0].uid, None)

    def on_pool_event(self, name: str) -> None:
        """Pool ``name`` changed (added, edited, deleted, or its status by someone else).

        Recomputes that pool's status (debounced) and retries pending pods
        (``NodeIPPoolChange``).
        """
        self.status_queue.add(name)
        self.requeue(events.NODE_IP_POOL_CHANGE, None, None)

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

    async def confirm_gone(self, uid: str, key: str) -> bool:
        """True when :meth:`live_pod` finds pod ``uid`` gone or terminal (Succeeded/Failed)."""
        live = await self.repairs.live_pod(uid, key)
        return live is None or live.terminal

    async def release(self, uid: str, confirmed: bool = True) -> None:
        """Pod ``uid`` ended: remove its allocations from every pool holding one (CAS), or
        keep them for its identity (phase Retained) where its release policy says so
        (:func:`~ipscheduler.underlayip.allocator.retain`); not ``confirmed``: Releasing
        (the pool's informer event arms their timers, :meth:`ReleaseClock.arm`)."""
        now = utc_now()
        move = functools.partial(allocator.retain, uid=uid, now=now, confirmed=confirmed)
        for pool in self.cache.pools_holding(uid):
            await self.writer.submit(pool.name, move)
        if confirmed:
            self.requeue(events.ADDRESS_RELEASED, None, None)

    def pool_counts(self, pool: PoolView) -> PoolCounts:
        """``(capacity, allocated, free, retained, exhausted, releasing)`` of a pool as the
        scheduler sees it; exhausted: 1 while its Exhausted condition (as last written) is True."""
        blocked = self.cache.context(pool).blocked
        phases = Counter(a.phase for a in pool.allocations.values())
        cond = pool.condition(EXHAUSTED)
        exhausted = 1 if cond is not None and cond.status == "True" else 0
        counts = (pool.capacity(blocked), pool.allocated, pool.free(blocked), phases[RETAINED])
        return (*counts, exhausted, phases[RELEASING])

    # -- pool status -----------------------------------------------------------
    async def run_status(self) -> None:
        """The pool-status task: the start-up reconcile (once), then keep every pool's
        capacity/allocated/free/conditions and finalizer right (debounced)."""
        if not self.started.is_set():
            await self._start()
        await self.status_queue.run(self._refresh_pools)

    async def _refresh_pools(self, names: Batch[str]) -> None:
        """Refresh the status and finalizer of the pools ``names`` (None: every pool; every
        pool too when the pools' layout changed, conflicts may have changed anywhere). A
        pool changed meanwhile (Conflict) is looked at again at once; any other failure (API
        down, connection reset...) again after :data:`STATUS_RETRY`, so that an outage neither
        kills this task nor turns it into a busy loop."""
        pools = self.cache.pools()
        self.cache.ensure_contexts()
        if self.cache.layout_version != self._layout_seen:
            self._layout_seen, names = self.cache.layout_version, None
        for pool in [pools[n] for n in sorted(pools) if names is None or n in names]:
            try:
                await self.refresh_pool(pool)
                await self._finalize(self.cache.pool(pool.name) or pool)
            except Conflict:
                self.status_queue.add(pool.name)
            except Exception as e:
                log.warning("refreshing NodeIPPool %s status failed: %r", pool.name, e)
                self.status_queue.add_rate_limited(pool.name)
            else:
                self.status_queue.forget(pool.name)

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
