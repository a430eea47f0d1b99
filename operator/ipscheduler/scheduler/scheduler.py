"""The scheduler: the scheduling cycle, the binding cycle and one failure handler for each.

One pod at a time goes through the scheduling cycle (PreFilter → Filter →
Score → Reserve → Permit, as ``pkg/scheduler/schedule_one.go``); its binding
cycle (PreBind → Bind → PostBind) then runs as a task, bounded by a
semaphore, while the next pod is scheduled. Reports follow kube-scheduler:
a Warning ``FailedScheduling`` event plus ``PodScheduled=False/Unschedulable``
on failure, a Normal ``Scheduled`` event on success.

Each cycle reads the nodes with their pods from :meth:`Cache.snapshot
<ipscheduler.backend.cache.Cache.snapshot>`; the pod placed is assumed in the
cache until the bound-pods informer sees it bound, and forgotten if its
binding fails. The informer handlers are in
:mod:`ipscheduler.scheduler.eventhandlers` (a base class).

It knows nothing of NodeIPPools: the UnderlayIP plugin reserves through the
framework, and what happens to a pool when a pod ends belongs to the pool
controller (:mod:`ipscheduler.underlayip.controller`), which subscribes to the
same informers on its own: the scheduler calls nothing outside itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import time
from dataclasses import dataclass

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.backend.queue import QueueClosed, SchedulingQueue
from ipscheduler.backend.supervisor import TaskSet
from ipscheduler.framework.interface import (
    LOG_FIELDS,
    PODS_TO_ACTIVATE,
    SCHEDULED_NOTE,
    Code,
    CycleState,
    QueuedPodInfo,
    Status,
)
from ipscheduler.framework.klog import V2, kv
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import TRANSIENT_ERRORS, KubeApi, live_pod
from ipscheduler.kube.events import EventRecorder
from ipscheduler.scheduler.eventhandlers import EventHandlers

log = logging.getLogger(__name__)

PLUGIN_METRICS_SAMPLE = 0.1
"""Share of the cycles whose plugins are timed (upstream ``pluginMetricsSamplePercent``: 10)."""


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
        bind_concurrency: int = 256,
        health: HealthState | None = None,
        metrics: Metrics | None = None,
        start_after: asyncio.Event | None = None,
    ) -> None:
        """``name``: our schedulerName. Events reach it once its ``handlers`` subscribed to the
        informers (:meth:`~ipscheduler.scheduler.eventhandlers.EventHandlers.subscribe`).
        Scheduling starts once the cache is ready (nodes and bound pods listed) and
        ``start_after`` is set (the pool controller's ``ready_to_schedule``)."""
        self.name = name
        self.api = api
        self.cache = cache
        self.profile = profile
        self.queue = queue
        self.recorder = recorder
        self._bind_slots = asyncio.Semaphore(bind_concurrency)
        self._tasks = TaskSet()
        self._unschedulable_msg: dict[str, str] = {}
        self.health = health if health is not None else HealthState()
        self.metrics = metrics if metrics is not None else Metrics(name)
        self.start_after = start_after
        self.handlers = EventHandlers(
            name=name,
            api=api,
            cache=cache,
            queue=queue,
            profile=profile,
            recorder=recorder,
            metrics=self.metrics,
            forget=self._forget,
        )
        """The informer handlers: events into this scheduler's cache and queue."""

    # -- task helpers --------------------------------------------------
    async def stop(self) -> None:
        """Stop scheduling: close the queue and cancel the binding cycles in flight."""
        self.queue.close()
        await self._tasks.cancel()
        await self.handlers.stop()

    def _forget(self, uid: str) -> None:
        """Pod ``uid`` left the pending pods: forget its last ``PodScheduled=False`` message."""
        self._unschedulable_msg.pop(uid, None)

    # -- the loop ------------------------------------------------------------
    async def run(self) -> None:
        """Schedule pods until stopped. Waits for the caches and ``start_after`` first."""
        await self.cache.ready.wait()
        if self.start_after is not None:
            await self.start_after.wait()
        self.health.ready = True
        log.info("scheduling started with %d pending pods queued", len(self.queue))
        while True:
            try:
                qp = await self.queue.pop()
            except QueueClosed:
                return
            try:
                await self.schedule_one(qp)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("scheduling %s failed unexpectedly", qp.pod.key)
                await self._scheduling_failed(qp, repr(e), error=True)

    async def schedule_one(self, qp: QueuedPodInfo) -> ScheduleResult:
        """One scheduling cycle for ``qp``; the binding cycle runs as a task."""
        started = time.monotonic()
        result = await self._schedule_one(qp)
        outcome = "scheduled" if result.node else ("error" if result.error else "unschedulable")
        self.metrics.observe_attempt(outcome, time.monotonic() - started)
        return result

    async def _schedule_one(self, qp: QueuedPodInfo) -> ScheduleResult:
        pod = qp.pod
        state = CycleState(record_plugin_metrics=random.random() < PLUGIN_METRICS_SAMPLE)
        nodes = self.cache.snapshot()
        feasible, diagnosis = self.profile.find_feasible(state, pod, nodes)
        if not feasible:
            result, post = await self.profile.run_post_filter(state, pod, diagnosis)
            if not post.is_rejected():
                log.log(
                    V2,
                    "PostFilter for %s: %s %s",
                    pod.key,
                    post.code.value,
                    post.message,
                    extra=kv(pod=pod.key),
                )
            qp.unschedulable_plugins = diagnosis.unschedulable_plugins
            message = diagnosis.message()
            if post.message:  # upstream FitError: the PostFilter message after the filters'
                message = f"{message} {post.message}."
            nominated = result.nominated_node_name if result is not None else None
            if result is not None and (result.nominated_node_name or pod.nominated_node_name):
                await self.profile.run_nominated(pod, result)
            return await self._scheduling_failed(qp, message, nominated=nominated)
        totals = self.profile.score_totals(state, pod, feasible)
        best = max(totals.values())
        host = random.choice([n for n in feasible if totals[n.name] == best])
        st = await self.profile.run_reserve(state, pod, host)
        if not st.is_success():  # the framework ran Unreserve already
            # Someone else took the last address in between: retry soon.
            log.info(
                "reserve for %s on %s failed: %s",
                pod.key,
                host.name,
                st.message,
                extra=kv(pod=pod.key, node=host.name),
            )
            return await self._scheduling_failed(qp, st.message, error=True)
        self.cache.assume_pod(dataclasses.replace(pod, node_name=host.name))
        self.queue.nominator.delete(pod.uid)  # upstream: assume drops the nomination
        st = self.profile.run_permit(state, pod, host)
        self._activate(state)
        if st.code is Code.WAIT:
            # Held by a Permit plugin: the binding cycle waits for it without a bind slot
            # (a gang larger than --bind-concurrency must not block itself).
            log.log(
                V2,
                "%s waits at Permit (%s) on %s",
                pod.key,
                st.plugin,
                host.name,
                extra=kv(pod=pod.key, node=host.name, uid=pod.uid),
            )
            self._tasks.spawn(self._binding_cycle(qp, state, host, waiting=True), f"bind {pod.key}")
            return ScheduleResult(pod.key, node=host.name)
        if not st.is_success():
            # Rejected: parked with the plugin; an Error (a plugin that raised): backoffQ. Both
            # unreserve and forget the assumed pod (upstream schedulingCycle after RunPermitPlugins).
            error = st.code is Code.ERROR
            qp.unschedulable_plugins = {st.plugin} if st.plugin and not error else set()
            return await self._scheduling_failed(qp, st.message, error=error, assumed=(state, host))
        await self._bind_slots.acquire()
        self._tasks.spawn(self._binding_cycle(qp, state, host), f"bind {pod.key}")
        return ScheduleResult(pod.key, node=host.name)

    def _activate(self, state: CycleState) -> None:
        """Move the pods a plugin asked for (:data:`PODS_TO_ACTIVATE`) to activeQ."""
        uids = state.get(PODS_TO_ACTIVATE)
        if uids:
            self.queue.activate(uids)

    async def _binding_cycle(
        self, qp: QueuedPodInfo, state: CycleState, host: NodeInfo, waiting: bool = False
    ) -> None:
        """PreBind → Bind → PostBind (after the Permit plugins let a ``waiting`` pod go,
        upstream ``WaitOnPermit``; a rejection there is a scheduling failure of the plugin
        that rejected it, with Unreserve)."""
        pod = qp.pod
        if waiting:
            began = time.monotonic()
            st = await self.profile.wait_on_permit(pod, state)
            # Labelled by the outcome's code as upstream (Success, Unschedulable).
            self.metrics.permit_wait_duration.labels(st.code.value).observe(time.monotonic() - began)
            if not st.is_success():
                await self._permit_rejected(qp, state, host, st)
                return
            await self._bind_slots.acquire()
        try:
            st = await self.profile.run_binding_cycle(
                state, pod, host, binding=functools.partial(self.cache.finish_binding, pod.uid)
            )
            if not st.is_success():
                await self._binding_failed(qp, state, host, st.message)
                return
            self.queue.done(pod.uid)
            self._unschedulable_msg.pop(pod.uid, None)
            if qp.initial_attempt_timestamp is not None:
                self.metrics.observe_bound(time.monotonic() - qp.initial_attempt_timestamp, qp.attempts)
            note = state.get(SCHEDULED_NOTE)
            suffix = f" ({note})" if note else ""
            log.log(
                V2,
                "bound %s to %s%s",
                pod.key,
                host.name,
                suffix,
                extra={**kv(pod=pod.key, node=host.name, uid=pod.uid), **(state.get(LOG_FIELDS) or {})},
            )
            self.recorder.emit(
                pod.ref, "Normal", "Scheduled", f"Successfully assigned {pod.key} to {host.name}{suffix}"
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not isinstance(e, TRANSIENT_ERRORS):  # a bug: keep its traceback
                log.exception("binding cycle of %s failed", pod.key)
            await self._binding_failed(qp, state, host, repr(e))
        finally:
            self._bind_slots.release()

    async def _permit_rejected(
        self, qp: QueuedPodInfo, state: CycleState, host: NodeInfo, st: Status
    ) -> None:
        """A pod held at Permit was rejected (by a plugin, its timeout, or its deletion):
        forget it and Unreserve; a pod still queued is then unschedulable by the rejecting
        plugin, with a ``FailedScheduling`` event as upstream (``handleBindingCycleError``)."""
        pod = qp.pod
        if not self.queue.in_flight(pod.uid):  # deleted while it waited
            self.cache.forget_pod(pod.uid)
            await self.profile.run_unreserve(state, pod, host)
            return
        qp.unschedulable_plugins = {st.plugin} if st.plugin else set()
        await self._scheduling_failed(qp, st.message, assumed=(state, host))

    async def _binding_failed(
        self, qp: QueuedPodInfo, state: CycleState, host: NodeInfo, message: str
    ) -> None:
        """The failure handler of the binding cycle (kube-scheduler's
        ``handleBindingCycleError`` then ``handleSchedulingFailure``,
        ``pkg/scheduler/schedule_one.go``): forget the assumed pod and Unreserve; then, as
        upstream looks the pod up before putting it back, a live read by UID: a pod that no
        longer exists (a Binding answered 404, or a pod of the same name but another UID)
        is dropped, one bound meanwhile leaves the queue, any other goes to backoffQ. A
        failed read counts as "still there"."""
        pod = qp.pod
        self.metrics.bind_failures.inc()
        self.cache.forget_pod(pod.uid)
        await self.profile.run_unreserve(state, pod, host)
        try:
            live: PodInfo | None = await live_pod(self.api, pod.uid, pod.key)
        except Exception as e:
            log.debug("could not read %s after its binding failed (%r)", pod.key, e)
            live = pod
        if live is None:
            self.queue.done(pod.uid)
            self.handlers.pod_gone(pod, "binding", f"binding to {host.name} failed: {message}")
            return
        if live.bound:
            log.info(
                "binding %s to %s failed (%s), but it is bound to %s: not retried",
                pod.key,
                host.name,
                message,
                live.node_name,
            )
            self.queue.done(pod.uid)
            self.queue.delete(pod.uid)
            return
        log.warning(
            "binding %s to %s failed: %s",
            pod.key,
            host.name,
            message,
            extra=kv(pod=pod.key, node=host.name, uid=pod.uid),
        )
        self.queue.add_unschedulable(qp, error=True)

    async def _scheduling_failed(
        self,
        qp: QueuedPodInfo,
        message: str,
        *,
        error: bool = False,
        assumed: tuple[CycleState, NodeInfo] | None = None,
        nominated: str | None = None,
    ) -> ScheduleResult:
        """The failure handler of the scheduling cycle (kube-scheduler's
        ``handleSchedulingFailure``, ``pkg/scheduler/schedule_one.go``); every failure of
        the cycle comes here. ``assumed``: the pod was assumed on that node (a Permit
        rejection): forget it and Unreserve. An ``error`` (a Reserve that lost a race, an
        exception) sends the pod to backoffQ. A fit failure parks it with the plugins that
        rejected it (``qp.unschedulable_plugins``) and reports it as kube-scheduler does: a
        Warning ``FailedScheduling`` event and ``PodScheduled=False`` (written only when
        the message or the nomination changed). ``nominated``: the node PostFilter nominated
        the pod to ("": its nomination cleared; None: left as it is), kept by the queue's
        nominator and written to ``status.nominatedNodeName`` (upstream
        ``handleSchedulingFailure`` with its ``NominatingInfo``)."""
        pod = qp.pod
        if assumed is not None:
            state, host = assumed
            self.cache.forget_pod(pod.uid)
            await self.profile.run_unreserve(state, pod, host)
        if error:
            self.queue.add_unschedulable(qp, error=True)
            return ScheduleResult(pod.key, message=message, error=True)
        if nominated is not None and nominated == pod.nominated_node_name:
            nominated = None  # unchanged: nothing to write
        if nominated is not None:
            qp.pod = pod = dataclasses.replace(pod, nominated_node_name=nominated)
            self.queue.nominator.add(pod, nominated)
        self.queue.add_unschedulable(qp)
        log.log(V2, "unable to schedule %s: %s", pod.key, message, extra=kv(pod=pod.key, uid=pod.uid))
        self.recorder.emit(pod.ref, "Warning", "FailedScheduling", message)
        if self._unschedulable_msg.get(pod.uid) != message or nominated is not None:
            try:
                await self.api.set_unschedulable(pod, message, nominated)
                self._unschedulable_msg[pod.uid] = message
            except Exception as e:
                reason = e.reason if isinstance(e, ApiException) else repr(e)
                log.warning("could not set PodScheduled=False on %s: %s", pod.key, reason)
        return ScheduleResult(pod.key, message=message)
