"""The scheduler: the scheduling cycle, the binding cycle and one failure handler.

One pod at a time goes through the scheduling cycle (PreFilter → Filter →
Score → Reserve → Permit, as ``pkg/scheduler/schedule_one.go``); its binding
cycle (PreBind → Bind → PostBind) then runs as a task, bounded by a
semaphore, while the next pod is scheduled. Reports follow kube-scheduler:
a Warning ``FailedScheduling`` event plus ``PodScheduled=False/Unschedulable``
on failure, a Normal ``Scheduled`` event on success.

It knows nothing of NodeIPPools: the UnderlayIP plugin reserves through the
framework, and what happens to a pool when a pod ends belongs to the pool
controller (:mod:`ipscheduler.underlayip.controller`), reached through the
``on_pod_gone`` and ``on_node_set_change`` hooks that :mod:`ipscheduler.cmd.wiring`
connects.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.nodepods import NodePods
from ipscheduler.backend.queue import QueueClosed, SchedulingQueue
from ipscheduler.backend.supervisor import TaskSet
from ipscheduler.framework.interface import BIND_ANNOTATIONS, CycleState, QueuedPodInfo
from ipscheduler.framework.runtime import Diagnosis, Framework
from ipscheduler.framework.types import ANNOTATION_IP, NodeInfo, PodInfo
from ipscheduler.health import HealthState
from ipscheduler.kube.client import KubeApi
from ipscheduler.kube.events import EventRecorder, pod_ref
from ipscheduler.metrics import Metrics

log = logging.getLogger(__name__)

_SnapshotEntry = tuple[NodeInfo, tuple[PodInfo, ...], tuple[PodInfo, ...], NodeInfo]
"""(node from the cache, its bound pods, its assumed pods, the NodeInfo built from them)."""


@dataclass
class ScheduleResult:
    """Outcome of one scheduling cycle (for logs and tests)."""

    pod: str
    node: str | None = None
    message: str = ""
    error: bool = False


class Scheduler:
    """Ties queue, framework, cache and API together. One instance per process."""

    def __init__(
        self,
        *,
        name: str,
        api: KubeApi,
        cache: Cache,
        profile: Framework,
        queue: SchedulingQueue,
        recorder: EventRecorder,
        bind_concurrency: int = 16,
        health: HealthState | None = None,
        node_pods: NodePods | None = None,
        metrics: Metrics | None = None,
        on_pod_gone: Callable[[PodInfo, bool], None] = lambda pod, confirm: None,
        on_node_set_change: Callable[[], None] = lambda: None,
        start_after: asyncio.Event | None = None,
    ) -> None:
        """``name``: our schedulerName. ``on_pod_gone(pod, confirm)`` is told when a pending
        pod of ours ended: terminal (``confirm`` False), or it left the pending-pod watch
        without our Binding (``confirm`` True: deleted, or bound by someone else; only a
        live read can tell). ``on_node_set_change()`` is told when a node was added or
        deleted. Scheduling starts once ``start_after`` is set (the pool controller's
        start-up reconcile), after the caches are ready."""
        self.name = name
        self.api = api
        self.cache = cache
        self.profile = profile
        self.queue = queue
        self.recorder = recorder
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._tasks = TaskSet()
        self._unschedulable_msg: dict[str, str] = {}
        self._nodes_seen: dict[str, NodeInfo] = {}
        self.health = health if health is not None else HealthState()
        self.node_pods = node_pods if node_pods is not None else NodePods()
        self._assumed: dict[str, PodInfo] = {}
        self._binding: set[str] = set()  # UIDs whose Binding we POSTed (until kopf sees them leave)
        self._snapshot_memo: dict[str, _SnapshotEntry] = {}
        self.metrics = metrics if metrics is not None else Metrics(name)
        self.on_pod_gone = on_pod_gone
        self.on_node_set_change = on_node_set_change
        self.start_after = start_after

    # -- task helpers --------------------------------------------------
    async def stop(self) -> None:
        """Stop scheduling: close the queue and cancel the binding cycles in flight."""
        self.queue.close()
        await self._tasks.cancel()

    # -- events from the watches -----------------------------------------
    def on_pod_event(
        self, event_type: str | None, body: Mapping[str, Any], parsed: PodInfo | None = None
    ) -> None:
        """Route a watch event of one of our pending pods into the queue.

        Deleted or terminal pods leave the queue and go to ``on_pod_gone``; unbound live pods
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
            self.on_pod_gone(pod, True)
            return
        if pod.terminal:
            self.queue.delete(pod.uid)
            self._assumed.pop(pod.uid, None)
            self._unschedulable_msg.pop(pod.uid, None)
            self.on_pod_gone(pod, False)
            return
        if pod.bound or pod.deleting:
            self.queue.delete(pod.uid)
            return
        if pod.scheduling_gates:
            self.queue.delete(pod.uid)
            return
        self.queue.add(pod)

    def on_bound_pod_gone(self, pod: PodInfo, releasing: bool = False) -> None:
        """A bound pod (any scheduler's) was deleted or turned terminal: its node has room
        again, so pending pods are retried, unless ``releasing`` (the pool controller
        frees its address and retries them once it did)."""
        self._binding.discard(pod.uid)
        self._assumed.pop(pod.uid, None)  # gone before a snapshot saw the watch have it
        if not releasing:
            self.on_cluster_event("PodDeleted")

    def on_cluster_event(self, what: str) -> None:
        """A node or pool changed: capacity may have freed up."""
        self.queue.move_all_to_active_or_backoff(what)

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
            self.on_node_set_change()
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
                self.on_node_set_change()
        elif previous != info:
            self.cache.node_changed(name)
            self.on_cluster_event("NodeUpdate")

    # -- the loop ------------------------------------------------------------
    async def run(self) -> None:
        """Schedule pods until stopped. Waits for the caches and ``start_after`` first."""
        await self.cache.ready.wait()
        await self.node_pods.synced.wait()
        if self.start_after is not None:
            await self.start_after.wait()
        self.health.ready = True
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
        self._tasks.spawn(self._binding_cycle(qp, state, host), f"bind {pod.key}")
        return ScheduleResult(pod.key, node=host.name)

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
            ip = (state.get(BIND_ANNOTATIONS) or {}).get(ANNOTATION_IP)
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
