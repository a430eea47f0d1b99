"""The scheduler: scheduling cycle, binding cycle, and (until the pool controller of
ARCHITECTURE.md moves them to ``underlayip/``) pool status, release, the GC sweep,
start-up reconcile and adoption.

One pod at a time goes through the scheduling cycle (PreFilter → Filter →
Score → Reserve → Permit, as ``pkg/scheduler/schedule_one.go``); its binding
cycle (PreBind → Bind → PostBind) then runs as a task, bounded by a
semaphore, while the next pod is scheduled. Reports follow kube-scheduler:
a Warning ``FailedScheduling`` event plus ``PodScheduled=False/Unschedulable``
on failure, a Normal ``Scheduled`` event on success.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import functools
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import ClusterCache
from ipscheduler.backend.nodepods import NodePods
from ipscheduler.backend.queue import QueueClosed, SchedulingQueue
from ipscheduler.backend.supervisor import Supervisor
from ipscheduler.framework.interface import CycleState, QueuedPodInfo
from ipscheduler.framework.runtime import Diagnosis, Framework
from ipscheduler.framework.types import ANNOTATION_IP, ANNOTATION_NETWORK, ANNOTATION_POOL, NodeInfo, PodInfo
from ipscheduler.health import HealthState
from ipscheduler.kube.client import Conflict, EventRecorder, KubeApi, PoolWriter, pod_ref, pool_ref
from ipscheduler.metrics import Metrics
from ipscheduler.underlayip import allocator, repair
from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.allocator import PoolView
from ipscheduler.underlayip.models import FINALIZER
from ipscheduler.underlayip.plugin import allocated_ip

log = logging.getLogger(__name__)

_SnapshotEntry = tuple[NodeInfo, tuple[PodInfo, ...], tuple[PodInfo, ...], NodeInfo]
"""(node from the cache, its bound pods, its assumed pods, the NodeInfo built from them)."""

POOL_FINALIZER = FINALIZER


@dataclass
class ScheduleResult:
    """Outcome of one scheduling cycle (for logs and tests)."""

    pod: str
    node: str | None = None
    ip: str | None = None
    message: str = ""
    error: bool = False


class Scheduler:
    """Ties queue, profile, cache and API together. One instance per process."""

    def __init__(
        self,
        *,
        name: str,
        api: KubeApi,
        cache: ClusterCache,
        writer: PoolWriter,
        profile: Framework,
        queue: SchedulingQueue,
        recorder: EventRecorder,
        bind_concurrency: int = 16,
        gc_interval: float = 30.0,
        reserved_ttl: float = 60.0,
        health: HealthState | None = None,
        node_pods: NodePods | None = None,
        metrics: Metrics | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.name = name
        self.api = api
        self.cache = cache
        self.writer = writer
        self.profile = profile
        self.queue = queue
        self.recorder = recorder
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unschedulable_msg: dict[str, str] = {}
        self._pools_dirty = asyncio.Event()
        self._dirty_pools: set[str] | None = None  # None: every pool
        self._layout_seen = -1
        self._nodes_seen: dict[str, NodeInfo] = {}
        self._pool_reasons: dict[str, str] = {}
        self.started = asyncio.Event()
        self.gc_interval = gc_interval
        self.reserved_ttl = reserved_ttl
        self.health = health or HealthState()
        self.node_pods = node_pods or NodePods()
        self._assumed: dict[str, PodInfo] = {}
        self._binding: set[str] = set()  # UIDs whose Binding we POSTed (until kopf sees them leave)
        self._snapshot_memo: dict[str, _SnapshotEntry] = {}
        self.metrics = metrics or Metrics(name)
        self.supervisor = supervisor or Supervisor(self.health, self.metrics)
        self._stale_since: dict[str, tuple[float, int]] = {}
        self.watch_timeout = 90.0
        self._skew = repair.SkewClock()

    # -- task helpers --------------------------------------------------
    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=what)
        self._tasks.add(task)

        def _done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed: %r", what, t.exception(), exc_info=t.exception())

        task.add_done_callback(_done)

    async def stop(self) -> None:
        """Stop scheduling; write what the PoolWriter still holds (deferred Bound marks)."""
        await self.supervisor.stop()
        self.queue.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await asyncio.wait_for(self.writer.flush(), timeout=5)
        except TimeoutError as e:
            log.warning("pending NodeIPPool writes not flushed at stop: %r", e)

    # -- events from the watches -----------------------------------------
    def on_pod_event(
        self, event_type: str | None, body: Mapping[str, Any], parsed: PodInfo | None = None
    ) -> None:
        """Route a watch event of one of our pods into queue / release.

        Deleted or terminal pods release their allocation; unbound live pods
        are (re)queued; bound pods leave the queue. Malformed pods are
        logged and ignored. ``parsed``: ``body`` already parsed, if at hand.
        """
        try:
            pod = parsed if parsed is not None else PodInfo.from_obj(body)
        except ValueError as e:
            log.warning("ignoring malformed pod: %s", e)
            return
        if pod.scheduler_name != self.name:
            return
        log.debug("pod event %s %s node=%s phase=%s", event_type, pod.key, pod.node_name, pod.phase)
        if event_type == "DELETED":
            # It left the watch of pending pods: deleted, or bound. (For a pod that was
            # bound the API server sends its previous, unbound state.)
            self.queue.delete(pod.uid)
            self._unschedulable_msg.pop(pod.uid, None)
            self.recorder.forget(pod.uid)
            if pod.uid in self._binding:  # we bound it: the pods-by-node watch follows it now
                self._binding.discard(pod.uid)
                return
            self._assumed.pop(pod.uid, None)
            if self.cache.pools_holding(pod.uid):
                self._spawn(self.release_if_gone(pod), f"release {pod.key}")
            return
        if pod.terminal:
            self.queue.delete(pod.uid)
            self._assumed.pop(pod.uid, None)
            self._unschedulable_msg.pop(pod.uid, None)
            if self.cache.pools_holding(pod.uid):
                self._spawn(self.release(pod.uid), f"release {pod.key}")
            return
        if pod.bound or pod.deleting:
            self.queue.delete(pod.uid)
            return
        if pod.scheduling_gates:
            self.queue.delete(pod.uid)
            return
        self.queue.add(pod)

    def on_bound_pod_gone(self, pod: PodInfo) -> None:
        """A bound pod (any scheduler's) was deleted or turned terminal: its node has room
        again, and if it is ours its address goes back to the pool."""
        self._binding.discard(pod.uid)
        self._assumed.pop(pod.uid, None)  # gone before a snapshot saw the watch have it
        self.cache.unclaim(pod.uid)
        if pod.scheduler_name == self.name and self.cache.pools_holding(pod.uid):
            self._spawn(self.release(pod.uid), f"release {pod.key}")
        else:
            self.on_cluster_event("PodDeleted")

    def on_bound_pod(self, pod: PodInfo) -> None:
        """A bound pod appeared or changed in the pods-by-node watch.

        A pod of ours that carries our annotations although no pool records it
        (created already bound: a restore from backup, a migration tool) is
        adopted at once; until the adoption is written its address counts as
        taken in every pool (:meth:`ClusterCache.claim`). A pod we bound
        ourselves already has its allocation recorded, so nothing happens.
        """
        pool_name = pod.annotations.get(ANNOTATION_POOL)
        if (
            not self.started.is_set()  # the start-up reconcile adopts from live LISTs
            or pod.scheduler_name != self.name
            or not pool_name
            or pod.terminal
            or pod.deleting
            or pod.uid in self.cache.claimed()
            or self.cache.pools_holding(pod.uid)
        ):
            return
        raw_ip = pod.annotations.get(ANNOTATION_IP) or None
        try:
            ip = canonical(raw_ip) if raw_ip else None
        except AddressError:
            ip = None  # adopt() reports it
        self.cache.claim(pod.uid, pool_name, ip)
        r = repair.Repair(
            "adopt",
            pool_name,
            pod.uid,
            pod.key,
            "pod arrived bound",
            raw_ip,
            node=pod.node_name,
            network=pod.annotations.get(ANNOTATION_NETWORK),
        )
        self._spawn(self._adopt_claimed(r), f"adopt {pod.key}")

    async def _adopt_claimed(self, r: repair.Repair) -> None:
        try:
            counts = await self._adopt(r, {"adopted": 0, "adopt_conflicts": 0})
            if counts["adopted"]:
                log.info("adopted %s, created bound with %s of pool %s", r.pod, r.ip or "a slot", r.pool)
        except Exception as e:
            log.warning("adopting %s failed (%s); the GC sweep retries", r.pod, e)
        finally:
            self.cache.unclaim(r.uid)

    def on_cluster_event(self, what: str) -> None:
        """A node or pool changed: capacity may have freed up."""
        self.queue.move_all_to_active_or_backoff(what)

    def on_pool_event(self, name: str | None = None) -> None:
        """Pool ``name`` (None: any pool or the node set) changed.

        Recomputes that pool's status (debounced; every pool's when ``name``
        is None) and retries pending pods.
        """
        self._mark_pools_dirty(name)
        self.on_cluster_event("NodeIPPoolChange")

    def _mark_pools_dirty(self, name: str | None = None) -> None:
        if name is None:
            self._dirty_pools = None
        elif self._dirty_pools is not None:
            self._dirty_pools.add(name)
        self._pools_dirty.set()

    def on_node_event(
        self, event_type: str | None, body: Mapping[str, Any], info: NodeInfo | None = None
    ) -> None:
        """Route a node watch event: the node set changes pools' status; a node change
        that alters what the filters read (labels, taints, readiness, allocatable...)
        retries pending pods. kwok/kubelet heartbeats that change none of it are ignored,
        as kube-scheduler's queueing hints do for NodeUpdate. ``info`` is ``body`` already
        parsed (parsed here when None); ``event_type`` None is an object of the first LIST.
        """
        name = (body.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        if event_type == "DELETED":
            self._nodes_seen.pop(name, None)
            self.cache.invalidate()
            self.on_pool_event()
            return
        if info is None:
            try:
                info = NodeInfo.from_obj(body)
            except ValueError:
                return
        previous = self._nodes_seen.get(name)
        self._nodes_seen[name] = info
        if previous is None:
            self.cache.invalidate()
            if event_type is not None:
                self.on_pool_event()
        elif previous != info:
            self.cache.node_changed(name)
            self.on_cluster_event("NodeUpdate")

    # -- release -----------------------------------------------------------
    async def release_if_gone(self, pod: PodInfo) -> None:
        """Release ``pod``'s allocations if a live read (by UID) finds it gone or terminal.

        A pending pod that leaves the watch may have been deleted, or bound by
        another replica with the very allocation we see: never release on the
        event alone. A failed read leaves it to the GC sweep.
        """
        try:
            body = await self.api.get_pod(pod.namespace, pod.name)
        except Exception as e:
            log.warning("could not confirm that %s is gone (%r); the GC will decide", pod.key, e)
            return
        live = PodInfo.from_obj(body) if body else None
        if live is not None and live.uid == pod.uid and not live.terminal:
            return  # bound meanwhile: the pods-by-node watch follows it
        await self.release(pod.uid)

    async def release(self, uid: str) -> None:
        """Remove ``uid``'s allocations from every pool holding one (CAS)."""
        for pool in self.cache.pools_holding(uid):
            await self.writer.update(pool.name, functools.partial(allocator.release, uid=uid))
        self.on_cluster_event("AddressReleased")

    # -- the loop ------------------------------------------------------------
    async def run(self) -> None:
        """Reconcile, then schedule pods until stopped. Waits for the caches first."""
        await self.cache.ready.wait()
        await self.node_pods.synced.wait()
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
        self.health.ready = True
        if "pool-status" not in self.supervisor.tasks:  # run() itself may be restarted
            self.supervisor.start("pool-status", self._pool_reconciler)
            self.supervisor.start("garbage-collector", self._gc_loop)
        while True:
            try:
                qp = await self.queue.pop()
            except QueueClosed:
                return
            try:
                await self.schedule_one(qp)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling %s failed unexpectedly", qp.pod.key)
                self.queue.add_unschedulable(qp, error=True)

    def _snapshot(self) -> dict[str, NodeInfo]:
        """Nodes with the pods on them: bound ones from the watch plus our assumed ones.

        A node whose object, pods and assumed pods are unchanged since the last
        cycle is the very same NodeInfo object again, so what it memoizes
        (requested resources, used ports) and plugins' per-node memos survive.
        """
        extra: dict[str, list[PodInfo]] = {}
        for uid, pod in list(self._assumed.items()):
            if self.node_pods.get(uid) is not None:
                del self._assumed[uid]  # the watch has it now
            else:
                extra.setdefault(pod.node_name, []).append(pod)
        out: dict[str, NodeInfo] = {}
        memo = self._snapshot_memo
        for name, node in self.cache.nodes().items():
            pods = self.node_pods.pods_on(name)
            assumed = tuple(extra.get(name, ()))
            seen = memo.get(name)
            if seen is not None and seen[0] is node and seen[1] is pods and seen[2] == assumed:
                out[name] = seen[3]  # unchanged: reuse it, with whatever it has memoized
                continue
            info = dataclasses.replace(node, pods=pods + assumed)
            memo[name] = (node, pods, assumed, info)
            out[name] = info
        for name in memo.keys() - out.keys():
            del memo[name]
        return out

    def pool_counts(self, pool: PoolView) -> tuple[int, int, int]:
        """``(capacity, allocated, free)`` of a pool as the scheduler sees it."""
        blocked = self.cache.context(pool).blocked
        return pool.capacity(blocked), len(pool.allocations), pool.free(blocked)

    async def schedule_one(self, qp: QueuedPodInfo) -> ScheduleResult:
        """One scheduling cycle for ``qp``; the binding cycle runs as a task."""
        started = time.monotonic()
        result = await self._schedule_one(qp)
        outcome = "scheduled" if result.node else ("error" if result.error else "unschedulable")
        self.metrics.observe_attempt(outcome, time.monotonic() - started)
        return result

    async def _schedule_one(self, qp: QueuedPodInfo) -> ScheduleResult:
        pod = qp.pod
        state = CycleState()
        nodes = self._snapshot()
        feasible, diagnosis = self.profile.find_feasible(state, pod, nodes)
        if not feasible:
            post = await self.profile.run_post_filter(state, pod, diagnosis)
            if not post.is_rejected():
                log.info("PostFilter for %s: %s %s", pod.key, post.code.value, post.message)
            msg = diagnosis.message()
            await self._fail(qp, msg, diagnosis)
            return ScheduleResult(pod.key, message=msg)
        per_plugin = self.profile.run_scores(state, pod, feasible)
        totals = self.profile.total_scores(per_plugin, feasible)
        best = max(totals.values())
        host = random.choice([n for n in feasible if totals[n.name] == best])
        st = await self.profile.run_reserve(state, pod, host)
        if not st.is_success():
            # Someone else took the last address in between: retry soon.
            log.info("reserve for %s on %s failed: %s", pod.key, host.name, st.message)
            self.queue.add_unschedulable(qp, error=True)
            return ScheduleResult(pod.key, message=st.message, error=True)
        self._assumed[pod.uid] = dataclasses.replace(pod, node_name=host.name)
        st = self.profile.run_permit(state, pod, host)
        if not st.is_success():
            self._assumed.pop(pod.uid, None)
            await self.profile.run_unreserve(state, pod, host)
            await self._fail(qp, st.message, None)
            return ScheduleResult(pod.key, message=st.message)
        await self._bind_slots.acquire()
        self._spawn(self._binding_cycle(qp, state, host), f"bind {pod.key}")
        return ScheduleResult(pod.key, node=host.name, ip=allocated_ip(state))

    async def _binding_cycle(self, qp: QueuedPodInfo, state: CycleState, host: Any) -> None:
        pod = qp.pod
        try:
            st = await self.profile.run_pre_bind(state, pod, host)
            if st.is_success():
                self._binding.add(pod.uid)
                st = await self.profile.run_bind(state, pod, host)
            if not st.is_success():
                self._binding.discard(pod.uid)
                log.warning("binding %s to %s failed: %s", pod.key, host.name, st.message)
                self.metrics.bind_failures.inc()
                self._assumed.pop(pod.uid, None)
                await self.profile.run_unreserve(state, pod, host)
                self.queue.add_unschedulable(qp, error=True)
                return
            self.queue.done(pod.uid)
            self._unschedulable_msg.pop(pod.uid, None)
            if qp.initial_attempt_timestamp is not None:
                self.metrics.observe_bound(time.monotonic() - qp.initial_attempt_timestamp, qp.attempts)
            await self.profile.run_post_bind(state, pod, host)
            ip = allocated_ip(state)
            suffix = f" (IP {ip})" if ip else ""
            log.info("bound %s to %s%s", pod.key, host.name, suffix)
            await self.recorder.record(
                pod_ref(pod), "Normal", "Scheduled", f"Successfully assigned {pod.key} to {host.name}{suffix}"
            )
        except Exception:
            log.exception("binding cycle of %s failed", pod.key)
            self._binding.discard(pod.uid)
            self.metrics.bind_failures.inc()
            self._assumed.pop(pod.uid, None)
            await self.profile.run_unreserve(state, pod, host)
            self.queue.add_unschedulable(qp, error=True)
        finally:
            self._bind_slots.release()

    async def _fail(self, qp: QueuedPodInfo, message: str, diagnosis: Diagnosis | None) -> None:
        pod = qp.pod
        self.queue.add_unschedulable(qp)
        log.info("unable to schedule %s: %s", pod.key, message)
        await self.recorder.record(pod_ref(pod), "Warning", "FailedScheduling", message)
        if self._unschedulable_msg.get(pod.uid) != message:
            try:
                await self.api.set_unschedulable(pod, message)
                self._unschedulable_msg[pod.uid] = message
            except Exception as e:
                reason = e.reason if isinstance(e, ApiException) else repr(e)
                log.warning("could not set PodScheduled=False on %s: %s", pod.key, reason)

    # -- pool status -----------------------------------------------------------
    async def _pool_reconciler(self) -> None:
        """Keep every pool's capacity/allocated/free/conditions right (debounced)."""
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
        has = POOL_FINALIZER in pool.finalizers
        if not pool.deleting and not has:
            await self.api.set_pool_finalizers(
                pool.name, pool.resource_version, [*pool.finalizers, POOL_FINALIZER]
            )
        elif pool.deleting and has and not pool.allocations:
            rest = [f for f in pool.finalizers if f != POOL_FINALIZER]
            await self.api.set_pool_finalizers(pool.name, pool.resource_version, rest)
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
        written = await self.writer.update(pool.name, allocator.refresh)
        if written is None:
            return
        cond = next((c for c in written.status.conditions if c.type == allocator.READY), None)
        if cond is None:
            return
        previous = self._pool_reasons.get(pool.name)
        self._pool_reasons[pool.name] = cond.reason
        if cond.status == "False" and cond.reason != previous:
            log.warning("NodeIPPool %s not ready: %s: %s", pool.name, cond.reason, cond.message)
            await self.recorder.record(pool_ref(written), "Warning", cond.reason, cond.message)

    # -- repairs: start-up reconcile and garbage collection ---------------------------
    async def reconcile(self) -> dict[str, int]:
        """Repair state left by a crash, from live LISTs (not the cache).

        Releases allocations of pods that are gone or terminal, marks Reserved
        allocations Bound when their pod is bound with them, adopts bound
        pods of ours that carry the annotations but have no allocation
        (Warning event on the pod when its address is taken). Returns the
        number of repairs done per action.
        """
        # Pools strictly before pods: an allocation in this pool LIST belongs to a pod that
        # existed before the pod LIST, so a pod missing from it is really gone.
        pools = [PoolView.from_obj(body) for body in await self.api.list_pools()]
        for pool in pools:
            self.cache.store_fresh(pool)
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
        cached = {name: _rv(p.resource_version) for name, p in self.cache.pools().items()}
        clocks: dict[str, tuple[float, int]] = {}
        for body in live_pools:
            name = body["metadata"]["name"]
            live_rv = _rv(str(body["metadata"].get("resourceVersion", "")))
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
        live_pools = await self.api.list_pools()
        self.check_watch(live_pools)
        pools: list[PoolView] = []
        for body in live_pools:
            try:
                pool = PoolView.from_obj(body)
            except ValueError:
                continue
            self.cache.store_fresh(pool)
            pools.append(pool)
        pods = await self._list_our_pods()
        counts = await self.apply_repairs(self._plan(pools, pods), confirm=True)
        if any(counts.values()):
            log.info("garbage collection: %s", counts)
        return counts

    def _plan(self, pools: list[PoolView], pods: dict[str, PodInfo]) -> list[repair.Repair]:
        now = _utcnow()
        self._skew.observe(pools, now)
        return repair.plan(pools, pods, now, self.reserved_ttl, self._skew.first_seen)

    async def _list_our_pods(self) -> dict[str, PodInfo]:
        """Our pods (any phase) by UID, from a live LIST."""
        pods: dict[str, PodInfo] = {}
        for body in await self.api.list_pods(f"spec.schedulerName={self.name}"):
            try:
                info = PodInfo.from_obj(body)
            except ValueError:
                continue
            pods[info.uid] = info
        return pods

    async def _gc_loop(self) -> None:
        while True:
            await asyncio.sleep(self.gc_interval)
            try:
                await self.gc_sweep()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("garbage collection failed (%r); next sweep in %.0fs", e, self.gc_interval)

    async def _confirmed(self, r: repair.Repair) -> bool:
        """Re-check a planned release against a live read of the pod (by UID, never by name)."""
        namespace, _, name = r.pod.partition("/")
        body = await self.api.get_pod(namespace, name) if namespace and name else None
        live = PodInfo.from_obj(body) if body else None
        pods = {live.uid: live} if live is not None and live.uid == r.uid else {}
        pool = self.cache.pool(r.pool)
        if pool is None or r.uid not in pool.allocations:
            return False
        return any(
            x.action == "release" and x.uid == r.uid
            for x in repair.plan([pool], pods, _utcnow(), self.reserved_ttl, self._skew.first_seen)
        )

    async def apply_repairs(self, repairs: list[repair.Repair], confirm: bool) -> dict[str, int]:
        """Carry out ``repairs`` by CAS; releases are confirmed live first when ``confirm``."""
        counts = {"released": 0, "marked_bound": 0, "adopted": 0, "adopt_conflicts": 0}
        released = False
        for r in repairs:
            if r.action == "release":
                if confirm and not await self._confirmed(r):
                    continue
                log.info("releasing %s of %s in pool %s: %s", r.ip or "slot", r.pod, r.pool, r.reason)
                written = await self.writer.update(
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
                await self.writer.update(r.pool, functools.partial(allocator.mark_bound, uid=r.uid))
                counts["marked_bound"] += 1
            else:
                counts.update(await self._adopt(r, counts))
        if released:
            self.on_cluster_event("AddressReleased")
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
            await self.writer.update(
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
        want = allocator.network_of(pool, r.ip)
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


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
