"""Event handlers: informer events into cache and queue calls.

As kube-scheduler's ``pkg/scheduler/eventhandlers.go`` (methods of the
Scheduler in a file of their own; here an object the
:class:`ipscheduler.scheduler.scheduler.Scheduler` holds, ``handlers``):

- pending pods of our schedulerName (kopf, through
  :class:`~ipscheduler.kube.informer.PendingPodEvents`) → the queue; a queued pod that vanished
  without a DELETED event (kopf re-LISTs after a 410 Gone and reports only what
  it finds) is found by reconciling the queue with a LIST (kopf's re-LIST, a
  re-LIST of our bound-pods informer, each GC sweep's) and a live read by UID,
  and dropped (:meth:`EventHandlers.queue_check`, ``ipscheduler_pending_pods_gone_total``);
- nodes → ``Cache.add_node`` / ``update_node`` / ``remove_node``; an add, a delete, or an update of
  what the plugins read → a cluster event for the queue (a heartbeat that
  changes nothing sends none);
- bound pods of any scheduler → ``Cache.add_pod`` / ``update_pod`` /
  ``remove_pod``, and a cluster event;
- PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes (the volume
  plugins read them through their listers) → a cluster event each (add, update, delete).

The handlers subscribe themselves (:meth:`EventHandlers.subscribe`) and call nothing
outside the scheduler: the pool controller subscribes to the same informers on its own
(releases, adoption), so the flow goes one way.

Cluster events (:mod:`ipscheduler.framework.events`) go to the queue with the
object before and after; the queue asks the queueing hints of the plugins that
rejected each parked pod whether the event may help it.

Handlers get the informer's previous and new value (``old``, ``new``), so no
second copy of every object is kept here to diff against.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.metrics import Metrics
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.backend.supervisor import TaskSet
from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEvent, EventResource
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import KubeApi, lean_pods, live_pod
from ipscheduler.kube.events import EventRecorder
from ipscheduler.kube.informer import EventHandler, ObjectStore, PendingPodEvents

log = logging.getLogger(__name__)

LIST_QUIET = 2.0
"""Seconds without an event of a LIST that end it (kopf hands the pods of a LIST to its
per-pod workers with event type None, and says nowhere that the LIST is over)."""

MAX_LIVE_READS = 20
"""Suspects of one queue check above which a live LIST narrows them first (a re-LIST burst
ended early by a slow page must not cost a GET per queued pod)."""


@dataclass
class _ListBurst:
    """The events of one LIST of kopf's pending-pod watch: the pods queued when it began,
    and the UIDs that had an event since."""

    before: dict[str, PodInfo]
    seen: set[str] = field(default_factory=set)
    last: float = 0.0


def _pending(pod: PodInfo | None) -> bool:
    """``pod`` (from a LIST) is there and still waits for a node."""
    return pod is not None and not pod.bound and not pod.terminal


class EventHandlers:
    """The Scheduler's informer handlers (see the module doc), over the scheduler's
    ``cache``, ``queue`` and ``profile``; ``name`` is our schedulerName; ``api`` reads pods
    live; ``recorder`` forgets the events of a pod gone; ``metrics`` counts pods found gone;
    ``forget(uid)``: a pod left the pending pods (deleted, bound, terminal): the scheduler
    forgets what it remembers of it (the last ``PodScheduled=False`` message written). The
    live checks run as the handlers' own tasks (:meth:`stop` cancels them)."""

    def __init__(
        self,
        *,
        name: str,
        api: KubeApi,
        cache: Cache,
        queue: SchedulingQueue,
        profile: Framework,
        recorder: EventRecorder,
        metrics: Metrics,
        forget: Callable[[str], object] = lambda uid: None,
    ) -> None:
        self.name = name
        self.api = api
        self.cache = cache
        self.queue = queue
        self.profile = profile
        self.recorder = recorder
        self.metrics = metrics
        self.forget = forget
        self._tasks = TaskSet()
        self._list_burst: _ListBurst | None = None

    # -- subscriptions ------------------------------------------------------

    async def stop(self) -> None:
        """Cancel the live checks in flight."""
        await self._tasks.cancel()

    def subscribe(
        self,
        *,
        pending_pods: PendingPodEvents,
        bound_pods: ObjectStore[PodInfo],
        nodes: ObjectStore[NodeInfo],
        volumes: Mapping[EventResource, ObjectStore[Any]] | None = None,
    ) -> None:
        """Subscribe to the events the scheduler needs: our pending pods
        (:meth:`on_pod_event`), bound pods (:meth:`on_bound_pod_event`) and their
        informer's re-LISTs (:meth:`on_informer_relisted`), nodes (:meth:`on_node_event`),
        and the storage informers of ``volumes`` (resource → its store:
        :meth:`on_volume_event`)."""
        pending_pods.subscribe(self.on_pod_event)
        bound_pods.subscribe(lambda kind, uid, body, old, new: self.on_bound_pod_event(kind, old, new))
        bound_pods.on_relisted(self.on_informer_relisted)
        nodes.subscribe(lambda kind, name, body, old, new: self.on_node_event(kind, old, new))
        for resource, store in (volumes or {}).items():
            store.subscribe(self._volume_handler(resource))

    # -- pending pods (kopf) ------------------------------------------------
    def on_pod_event(self, event_type: str | None, pod: PodInfo) -> None:
        """Route a watch event of one of our pending pods into the queue.

        Deleted or terminal pods leave the queue; unbound live pods are (re)queued; bound
        pods leave the queue. ``event_type`` None is an object of a LIST (kopf's first one,
        or a re-LIST after its watch expired): see :meth:`_listed`.
        """
        self._listed(event_type, pod.uid)
        self._on_pending_pod(event_type, pod)

    def _on_pending_pod(self, event_type: str | None, pod: PodInfo) -> None:
        if event_type == "DELETED":
            # It left the watch of pending pods: deleted, or bound. (For a pod that was
            # bound the API server sends its previous, unbound state.)
            self.queue.delete(pod.uid)
            self.forget(pod.uid)
            self.recorder.forget(pod.uid)
            # Held at Permit: its binding cycle gives its reservation back (upstream
            # RejectWaitingPod on a pod delete).
            self.profile.waiting_pods.reject(pod.uid, "", "pod deleted while waiting at Permit")
            if self.cache.binding_finished(pod.uid):  # we bound it: the bound-pods informer follows it
                return
            self.cache.forget_pod(pod.uid)
            return
        if pod.terminal:
            self.queue.delete(pod.uid)
            self.cache.forget_pod(pod.uid)
            self.forget(pod.uid)
            return
        if pod.bound or pod.deleting:
            self.queue.delete(pod.uid)
            return
        if pod.scheduling_gates:
            self.queue.gate(pod.uid)
            return
        self.queue.add(pod)

    # -- pending pods: reconciling the queue with a LIST ---------------------------------
    def _listed(self, event_type: str | None, uid: str) -> None:
        """Follow the LISTs of kopf's pending-pod watch.

        kopf re-LISTs when its watch cannot resume (410 Gone: the resourceVersion it had was
        compacted away, e.g. after the process was stopped past the API server's watch
        timeout) and reports each listed pod with event type None, but never a DELETED for a
        pod that vanished in between: such a pod would stay queued for ever. So the events of
        a LIST are gathered in a burst (ended by :data:`LIST_QUIET` seconds without one);
        the pods that were queued when it began and had no event since are then checked
        (:meth:`check_queue`). kopf's first LIST finds the queue empty and checks nothing. A
        re-LIST of nothing sends no event at all: the garbage-collection sweep and our own
        informers' re-LISTs catch that case (:meth:`queue_check`, :meth:`reconcile_queue`).
        """
        burst = self._list_burst
        if event_type is None:
            now = time.monotonic()
            if burst is None:
                burst = self._list_burst = _ListBurst({qp.pod.uid: qp.pod for qp in self.queue.queued()})
                with contextlib.suppress(RuntimeError):  # no loop (synchronous tests): ended by hand
                    asyncio.get_running_loop().call_later(LIST_QUIET, self._list_burst_over)
            burst.last = now
        if burst is not None:
            burst.seen.add(uid)

    def _list_burst_over(self) -> None:
        """Called :data:`LIST_QUIET` seconds after a LIST burst began, and again until it is
        quiet: checks the pods it did not report (:meth:`check_queue`)."""
        burst = self._list_burst
        if burst is None:
            return
        quiet_for = time.monotonic() - burst.last
        if quiet_for < LIST_QUIET:
            asyncio.get_running_loop().call_later(LIST_QUIET - quiet_for, self._list_burst_over)
            return
        self._list_burst = None
        suspects = [pod for uid, pod in burst.before.items() if uid not in burst.seen and uid in self.queue]
        if suspects:
            log.info("the pending-pod watch re-listed without %d queued pod(s); checking them", len(suspects))
            self._tasks.spawn(self.check_queue(suspects, "relist", fresh_list=True), "queue check (relist)")

    def queue_check(self, found_by: str) -> Callable[[Mapping[str, PodInfo]], None]:
        """Begin reconciling the queue with a LIST of our pods that is about to be made;
        returns the function to hand that LIST to (pods by UID, any phase).

        A pod queued now that the LIST lacks, or shows bound or terminal, missed its watch
        event: :meth:`check_queue` confirms it by a live read and drops it (``found_by``
        labels the log line and ``ipscheduler_pending_pods_gone_total``). Pods queued after
        this call are not suspects: the LIST may predate them.

        The other way round, a pending pod of ours the LIST shows and the queue does not know
        (nor a cycle) missed its ADDED event (kopf's watch has been seen to deliver nothing
        after a restart): :meth:`requeue_missed` reads it live and queues it.
        """
        before = {qp.pod.uid: qp.pod for qp in self.queue.queued()}

        def check(listed: Mapping[str, PodInfo]) -> None:
            suspects = [pod for uid, pod in before.items() if not _pending(listed.get(uid))]
            if suspects:
                self._tasks.spawn(self.check_queue(suspects, found_by), f"queue check ({found_by})")
            missed = [
                pod
                for uid, pod in listed.items()
                if _pending(pod)
                and not pod.deleting
                and pod.scheduler_name == self.name
                and uid not in before
                and not self.queue.knows(uid)
                and not self.cache.binding_finished(uid)
            ]
            if missed:
                self._tasks.spawn(self.requeue_missed(missed, found_by), f"queue missed ({found_by})")

        return check

    async def requeue_missed(self, missed: list[PodInfo], found_by: str) -> int:
        """Queue the pending pods of ``missed`` (a LIST showed them, the queue did not know
        them) that a live read by UID still shows pending and unknown, as their ADDED event
        would have (the LIST's lean form lacks the spec; the live read has it). A failed read
        leaves the pod to the next check. Returns the number queued."""
        queued = 0
        for pod in missed:
            try:
                live = await live_pod(self.api, pod.uid, pod.key)
            except Exception as e:
                log.warning("could not read %s to queue it (%r)", pod.key, e)
                continue
            if live is None or not _pending(live) or live.deleting or self.queue.knows(pod.uid):
                continue
            if self.cache.binding_finished(pod.uid) or self.cache.pod(pod.uid) is not None:
                continue
            log.warning(
                "pending pod %s (UID %s) was missing from the scheduling queue "
                "(no watch event; found by %s): queued",
                pod.key,
                pod.uid,
                found_by,
            )
            self._on_pending_pod("ADDED", live)
            queued += 1
        return queued

    def on_informer_relisted(self) -> None:
        """One of our informers had to re-LIST (its watch failed: an API server restart, a 410
        Gone after the process stood still): kopf's pending-pod watch was likely away as
        long, and a re-LIST of no pod at all tells nothing. Reconcile the queue with a fresh
        LIST (:meth:`reconcile_queue`)."""
        if len(self.queue):
            self._tasks.spawn(self.reconcile_queue("relist"), "queue check (informer re-list)")

    async def reconcile_queue(self, found_by: str) -> None:
        """Reconcile the queue with a fresh LIST of our pending pods (after one of our
        informers had to re-LIST: kopf's watch was likely away as long)."""
        check = self.queue_check(found_by)
        try:
            listed = await self._list_pending()
        except Exception as e:
            log.warning("could not list the pending pods to check the queue (%r)", e)
            return
        check(listed)

    async def _list_pending(self) -> dict[str, PodInfo]:
        """Our pending pods by UID, from a live LIST."""
        return await lean_pods(self.api, f"spec.schedulerName={self.name},spec.nodeName=")

    async def check_queue(self, suspects: list[PodInfo], found_by: str, fresh_list: bool = False) -> int:
        """Drop the ``suspects`` (queued pods a LIST did not show pending) that a live read by
        UID shows gone; one that is still there is handled as its watch event would have
        been (bound or terminal: out of the queue; pending: updated). With ``fresh_list``,
        a live LIST first narrows many suspects down to those it lacks. A failed read keeps
        the pod (the next check retries). Returns the number of pods dropped as gone."""
        if fresh_list and len(suspects) > MAX_LIVE_READS:
            try:
                listed = await self._list_pending()
            except Exception as e:
                log.warning("could not list the pending pods to check the queue (%r)", e)
                return 0
            suspects = [pod for pod in suspects if not _pending(listed.get(pod.uid))]
        dropped = 0
        for pod in suspects:
            if pod.uid not in self.queue:  # its event came meanwhile, or it is in a cycle
                continue
            try:
                live = await live_pod(self.api, pod.uid, pod.key)
            except Exception as e:
                log.warning("could not read %s to check it is still pending (%r)", pod.key, e)
                continue
            if pod.uid not in self.queue:
                continue
            if live is None:
                self.pod_gone(pod, found_by)
                dropped += 1
            else:
                self._on_pending_pod("MODIFIED", live)
        return dropped

    def pod_gone(self, pod: PodInfo, found_by: str, why: str = "") -> None:
        """Pending pod ``pod`` no longer exists (a live read found no pod of its UID), although
        no DELETED event said so: forget it as that event would have, with one log line
        (``why``: what found it) and ``ipscheduler_pending_pods_gone_total{found_by}``."""
        log.info(
            "pod %s (UID %s) no longer exists%s: dropped from the scheduling queue (found by %s)",
            pod.key,
            pod.uid,
            f" ({why})" if why else "",
            found_by,
        )
        self.metrics.pods_gone.labels(found_by).inc()
        self.cache.forget_pod(pod.uid)
        self._on_pending_pod("DELETED", pod)

    # -- bound pods --------------------------------------------------------
    def on_bound_pod_event(self, event_type: str | None, old: PodInfo | None, new: PodInfo | None) -> None:
        """A bound-pods informer event: ``old``/``new`` its previous and new state (None:
        not bound and non-terminal). Sends AssignedPodAdd / AssignedPodUpdate /
        AssignedPodDelete. (The pool controller, subscribed to the same informer, releases
        the address of a pod gone and sends AddressReleased once it is written.)"""
        if new == old:  # a re-LIST's unchanged pod (or nothing at all)
            return
        if new is not None:
            if old is None:
                self.cache.add_pod(new)
                event: ClusterEvent | None = events.ASSIGNED_POD_ADD
            else:
                self.cache.update_pod(old, new)
                event = events.assigned_pod_update_event(old, new)
            if event is not None:
                self.on_cluster_event(event, old, new)
            return
        assert old is not None
        self.cache.remove_pod(old)
        self.on_cluster_event(events.ASSIGNED_POD_DELETE, old, None)

    # -- nodes -------------------------------------------------------------
    def on_node_event(self, event_type: str | None, old: NodeInfo | None, new: NodeInfo | None) -> None:
        """A node informer event (``event_type`` None: an object of the first LIST; ``old``:
        the informer's previous value, ``new`` None once deleted). A node added or deleted
        sends NodeAdd/NodeDelete; a change of what the filters read (labels, taints, readiness,
        allocatable...) retries pending pods; a heartbeat that changes none of it does
        nothing."""
        if new is None:
            if old is not None:
                self.cache.remove_node(old.name)
                self.on_cluster_event(events.NODE_DELETE, old, None)
            return
        if old is None or self.cache.node(new.name) is None:
            self.cache.add_node(new)
            if event_type is not None:
                self.on_cluster_event(events.NODE_ADD, None, new)
        elif self.cache.update_node(old, new):
            event = events.node_update_event(old, new)
            if event is not None:
                self.on_cluster_event(event, old, new)

    # -- storage -----------------------------------------------------------
    def _volume_handler(self, resource: EventResource) -> EventHandler[Any]:
        def handler(kind: str | None, key: str, body: dict[str, Any], old: Any, new: Any) -> None:
            self.on_volume_event(resource, kind, old, new)

        return handler

    def on_volume_event(self, resource: EventResource, event_type: str | None, old: Any, new: Any) -> None:
        """A storage informer's change (``old``/``new``: its views, None when absent): the
        add, update or delete event of ``resource`` for the queue
        (:func:`~ipscheduler.framework.events.volume_event`); nothing for the first LIST (no
        pod was rejected before it) or an unchanged object."""
        if event_type is None:
            return
        event = events.volume_event(resource, old, new)
        if event is not None:
            self.on_cluster_event(event, old, new)

    def on_cluster_event(self, event: ClusterEvent, old: Any = None, new: Any = None) -> None:
        """``event`` happened (``old``/``new``: the object before and after): the queue
        moves the unschedulable pods whose rejecting plugins' queueing hints say it may
        help them."""
        self.queue.move_all_to_active_or_backoff(event, old, new)
