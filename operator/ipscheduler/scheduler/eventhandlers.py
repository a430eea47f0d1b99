"""Event handlers: informer events into cache and queue calls.

As kube-scheduler's ``pkg/scheduler/eventhandlers.go`` (methods of the
Scheduler in a file of their own; here a base class of
:class:`ipscheduler.scheduler.scheduler.Scheduler`):

- pending pods of our schedulerName (kopf) → the queue; a pod that ended
  unbound → ``on_pod_gone`` (the pool controller);
- nodes → ``Cache.add_node`` / ``update_node`` / ``remove_node``; a node
  added or deleted → ``on_node_set_change``; an add, a delete, or an update of
  what the plugins read → a cluster event for the queue (a heartbeat that
  changes nothing sends none);
- bound pods of any scheduler → ``Cache.add_pod`` / ``update_pod`` /
  ``remove_pod``, and a cluster event; a bound pod seen → ``on_bound_pod``
  (adoption); one gone → ``on_bound_pod_gone`` (release).

Cluster events (:mod:`ipscheduler.framework.events`) go to the queue with the
object before and after; the queue asks the queueing hints of the plugins that
rejected each parked pod whether the event may help it.

Handlers get the informer's previous and new value (``old``, ``new``), so no
second copy of every object is kept here to diff against.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ipscheduler.backend.cache import Cache
from ipscheduler.backend.queue import SchedulingQueue
from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEvent
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.events import EventRecorder

log = logging.getLogger(__name__)


class EventHandlers:
    """The Scheduler's informer handlers (see the module doc). The attributes below are
    set by :class:`~ipscheduler.scheduler.scheduler.Scheduler`; the ``on_*`` hooks by
    :func:`ipscheduler.cmd.wiring.connect`."""

    name: str
    cache: Cache
    queue: SchedulingQueue
    recorder: EventRecorder
    _unschedulable_msg: dict[str, str]
    _binding: set[str]
    on_pod_gone: Callable[[PodInfo, bool], None]
    """A pending pod of ours ended unbound: ``(pod, confirm)``: see Scheduler."""
    on_node_set_change: Callable[[], None]
    """A node was added or deleted."""
    on_bound_pod_gone: Callable[[PodInfo], None]
    """A bound pod left its node (its address is released, which sends its own event)."""
    on_bound_pod: Callable[[PodInfo], None]
    """A bound pod appeared or changed."""

    # -- pending pods (kopf) ------------------------------------------------
    def on_pod_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Route a watch event of one of our pending pods into the queue.

        Deleted or terminal pods leave the queue and go to ``on_pod_gone``; unbound live pods
        are (re)queued; bound pods leave the queue. Malformed pods are
        logged and ignored.
        """
        try:
            pod = PodInfo.from_obj(body)
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
            if pod.uid in self._binding:  # we bound it: the bound-pods informer follows it now
                self._binding.discard(pod.uid)
                return
            self.cache.forget_pod(pod.uid)
            self.on_pod_gone(pod, True)
            return
        if pod.terminal:
            self.queue.delete(pod.uid)
            self.cache.forget_pod(pod.uid)
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

    # -- bound pods --------------------------------------------------------
    def on_bound_pod_event(self, event_type: str | None, old: PodInfo | None, new: PodInfo | None) -> None:
        """A bound-pods informer event: ``old``/``new`` its previous and new state (None:
        not bound and non-terminal). Sends AssignedPodAdd / AssignedPodUpdate /
        AssignedPodDelete; a pod gone also goes to ``on_bound_pod_gone`` (its address is
        released, which sends AddressReleased once written)."""
        if new == old:  # a re-LIST's unchanged pod (or nothing at all)
            return
        if new is not None:
            if old is None:
                self.cache.add_pod(new)
                event: ClusterEvent | None = events.ASSIGNED_POD_ADD
            else:
                self.cache.update_pod(old, new)
                event = events.assigned_pod_update_event(old, new)
            self.on_bound_pod(new)
            if event is not None:
                self.on_cluster_event(event, old, new)
            return
        assert old is not None
        self.cache.remove_pod(old)
        self._binding.discard(old.uid)
        self.on_bound_pod_gone(old)
        self.on_cluster_event(events.ASSIGNED_POD_DELETE, old, None)

    # -- nodes -------------------------------------------------------------
    def on_node_event(self, event_type: str | None, old: NodeInfo | None, new: NodeInfo | None) -> None:
        """A node informer event (``event_type`` None: an object of the first LIST; ``old``:
        the informer's previous value, ``new`` None once deleted). The node set changes
        pools' status; a change of what the filters read (labels, taints, readiness,
        allocatable...) retries pending pods; a heartbeat that changes none of it does
        nothing."""
        if new is None:
            if old is not None:
                self.cache.remove_node(old.name)
                self.on_node_set_change()
                self.on_cluster_event(events.NODE_DELETE, old, None)
            return
        if old is None or self.cache.node(new.name) is None:
            self.cache.add_node(new)
            if event_type is not None:
                self.on_node_set_change()
                self.on_cluster_event(events.NODE_ADD, None, new)
        elif self.cache.update_node(old, new):
            event = events.node_update_event(old, new)
            if event is not None:
                self.on_cluster_event(event, old, new)

    def on_cluster_event(self, event: ClusterEvent, old: Any = None, new: Any = None) -> None:
        """``event`` happened (``old``/``new``: the object before and after): the queue
        moves the unschedulable pods whose rejecting plugins' queueing hints say it may
        help them."""
        self.queue.move_all_to_active_or_backoff(event, old, new)
