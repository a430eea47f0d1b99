"""The scheduling queue: activeQ, backoffQ and unschedulable pods.

Modelled on ``pkg/scheduler/backend/queue/scheduling_queue.go``
(PriorityQueue):

- **activeQ** is a heap ordered by the QueueSort plugin's ``less``.
- **backoffQ** holds pods that failed with an error or were moved while
  still backing off; backoff is ``initial * 2**(attempts-1)`` capped at
  ``maximum`` (kube-scheduler defaults 1 s and 10 s).
- **unschedulable** holds pods no node fits; a cluster event moves back
  (to backoffQ if their backoff has not expired, else activeQ) only the
  pods whose rejecting plugins registered that event and whose queueing
  hint says it may help (upstream QueueingHints, ``isPodWorthRequeuing``);
  pods that stayed there longer than ``max_unschedulable`` (5 min) are
  flushed.

Events that arrive while pods are in flight (popped, not yet done) are kept
until those pods leave (upstream ``inFlightEvents``): a pod that fails after
an event that may help it goes to backoffQ instead of unschedulable, so no
event is missed. Pods being bound are not re-added until :meth:`done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipscheduler.backend.nominator import Nominator
from ipscheduler.framework.backoff import exponential
from ipscheduler.framework.interface import (
    WILDCARD_EVENT,
    ClusterEvent,
    ClusterEventWithHint,
    EventResource,
    QueuedPodInfo,
    QueueingHint,
    QueueSortPlugin,
)
from ipscheduler.framework.types import PodInfo

log = logging.getLogger(__name__)

Clock = Callable[[], float]

PluginHints = Sequence[tuple[str, ClusterEventWithHint]]
"""``(plugin name, registration)`` pairs: every plugin's :meth:`events_to_register
<ipscheduler.framework.interface.EnqueueExtensions.events_to_register>` (see
:meth:`ipscheduler.framework.runtime.Framework.queueing_hints`)."""

_ANY_PLUGIN = ""
"""Index key of parked pods no plugin rejected (every event may help them)."""


@dataclass(order=False)
class _HeapItem:
    qp: QueuedPodInfo
    seq: int
    less: Callable[[QueuedPodInfo, QueuedPodInfo], bool] = field(repr=False)

    def __lt__(self, other: _HeapItem) -> bool:
        if self.less(self.qp, other.qp):
            return True
        if self.less(other.qp, self.qp):
            return False
        return self.seq < other.seq


class SchedulingQueue:
    """Priority queue of pending pods (thread-unsafe; one asyncio loop).

    ``pop`` waits until a pod is active. All other methods are synchronous.
    Pods are keyed by UID; adding a known UID updates its PodInfo in place.
    ``hints``: the profile's queueing hints; None moves every unschedulable pod on
    every event (as if each plugin registered the wildcard event).
    """

    def __init__(
        self,
        sort: QueueSortPlugin,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        clock: Clock = time.monotonic,
        hints: PluginHints | None = None,
        on_incoming: Callable[[str, str], object] | None = None,
    ) -> None:
        self._less = sort.less
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._clock = clock
        self._seq = itertools.count()
        self._active: list[_HeapItem] = []
        self._active_uids: dict[str, _HeapItem] = {}
        self._backoff: dict[str, QueuedPodInfo] = {}
        self._unschedulable: dict[str, tuple[QueuedPodInfo, float]] = {}
        self._parked_by_plugin: dict[str, set[str]] = {}
        self._in_flight: dict[str, QueuedPodInfo] = {}
        self._in_flight_events: deque[tuple[int, ClusterEvent, Any, Any]] = deque()
        self._scheduling_cycle = 0
        self._hints: list[tuple[str, ClusterEventWithHint]] = list(
            hints if hints is not None else [(_ANY_PLUGIN, ClusterEventWithHint(WILDCARD_EVENT))]
        )
        self._interested: dict[ClusterEvent, frozenset[str]] = {}
        self._cond = asyncio.Condition()
        self._closed = False
        self._waker: asyncio.Task[None] | None = None
        self._gated: set[str] = set()
        self.nominator = Nominator()
        """The pods nominated to nodes by preemption (upstream: the queue is the profile's
        ``PodNominator``): kept from the pods' ``status.nominatedNodeName`` as they are
        added, and by the scheduler when its PostFilter nominates one."""
        self.on_incoming = on_incoming
        """Told ``(queue, event)`` for every pod entering activeQ, backoffQ or the
        unschedulable pods (``scheduler_queue_incoming_pods_total``): event ``PodAdd``,
        ``PodUpdate``, ``ScheduleAttemptFailure``, ``BackoffComplete``,
        ``UnschedulableTimeout`` or the label of the cluster event that moved it."""

    # -- introspection -------------------------------------------------
    def __len__(self) -> int:
        return len(self._active_uids) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, uid: object) -> bool:
        return uid in self._active_uids or uid in self._backoff or uid in self._unschedulable

    def depths(self) -> dict[str, int]:
        """Pods per state: active, backoff, unschedulable and gated (upstream's
        ``scheduler_pending_pods`` queues), and in_flight (in a scheduling or binding cycle)."""
        return {
            "active": len(self._active_uids),
            "backoff": len(self._backoff),
            "unschedulable": len(self._unschedulable),
            "gated": len(self._gated),
            "in_flight": len(self._in_flight),
        }

    def unschedulable_by_plugin(self) -> dict[str, int]:
        """Unschedulable pods per plugin that rejected them (a pod counts for each of its
        plugins; upstream ``scheduler_unschedulable_pods``)."""
        return {plugin: len(uids) for plugin, uids in self._parked_by_plugin.items() if plugin != _ANY_PLUGIN}

    def _incoming(self, queue: str, event: str) -> None:
        if self.on_incoming is not None:
            self.on_incoming(queue, event)

    def queued(self) -> list[QueuedPodInfo]:
        """The pods waiting in activeQ, backoffQ or unschedulable (not those in flight: their
        cycle decides what becomes of them)."""
        return [
            *(item.qp for item in self._active_uids.values()),
            *self._backoff.values(),
            *(qp for qp, _ in self._unschedulable.values()),
        ]

    @property
    def scheduling_cycle(self) -> int:
        return self._scheduling_cycle

    def backoff_duration(self, qp: QueuedPodInfo) -> float:
        """Seconds a pod with ``qp.attempts`` failures backs off."""
        if qp.attempts <= 0:
            return 0.0
        return exponential(self.initial_backoff, self.max_backoff, qp.attempts - 1)

    def _backoff_expiry(self, qp: QueuedPodInfo) -> float:
        return qp.timestamp + self.backoff_duration(qp)

    # -- mutation ------------------------------------------------------
    def _push_active(self, qp: QueuedPodInfo, event: str = "") -> None:
        if event:
            self._incoming("active", event)
        item = _HeapItem(qp, next(self._seq), self._less)
        self._active_uids[qp.pod.uid] = item
        heapq.heappush(self._active, item)
        self._notify()

    def _notify(self) -> None:
        """Wake a waiting :meth:`pop` (no-op outside an event loop, e.g. in sync tests)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._waker is None or self._waker.done():
            self._waker = loop.create_task(self._wake())

    async def _wake(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    def add(self, pod: PodInfo) -> None:
        """Add a new pending pod, or update the PodInfo of a queued one.

        An update to a pod parked as unschedulable moves it to activeQ (or
        backoffQ), as a spec change may make it schedulable.
        """
        uid = pod.uid
        self._gated.discard(uid)
        if pod.nominated_node_name or self.nominator:
            self.nominator.update(self._queued_pod(uid), pod)
        if uid in self._in_flight:
            self._in_flight[uid].pod = pod
            return
        if uid in self._active_uids:
            self._active_uids[uid].qp.pod = pod
            return
        if uid in self._backoff:
            self._backoff[uid].pod = pod
            return
        if uid in self._unschedulable:
            qp, _ = self._unschedulable[uid]
            if _status_only(qp.pod, pod):
                qp.pod = pod  # status-only update (e.g. our own condition patch): stay parked
                return
            self._unpark(uid)
            qp.pod = pod
            self._requeue(qp, "PodUpdate")
            return
        now = self._clock()
        self._push_active(QueuedPodInfo(pod=pod, timestamp=now, initial_attempt_timestamp=now), "PodAdd")

    def _queued_pod(self, uid: str) -> PodInfo | None:
        """The PodInfo the queue holds for ``uid`` (in flight, active, backoff or unschedulable)."""
        if uid in self._in_flight:
            return self._in_flight[uid].pod
        if uid in self._active_uids:
            return self._active_uids[uid].qp.pod
        if uid in self._backoff:
            return self._backoff[uid].pod
        entry = self._unschedulable.get(uid)
        return entry[0].pod if entry is not None else None

    def gate(self, uid: str) -> None:
        """The pod has scheduling gates (``spec.schedulingGates``): out of every queue,
        counted as gated until it is added again without them or deleted."""
        self.delete(uid)
        self._gated.add(uid)

    def delete(self, uid: str) -> None:
        """Forget a pod (deleted, bound, terminal, or gated)."""
        self._gated.discard(uid)
        self.nominator.delete(uid)
        self._active_uids.pop(uid, None)  # its heap entry is skipped lazily by pop
        self._in_flight.pop(uid, None)  # a failed attempt of a deleted pod is not re-queued
        self._backoff.pop(uid, None)
        self._unpark(uid)
        self._prune_in_flight_events()

    def _park(self, qp: QueuedPodInfo) -> None:
        uid = qp.pod.uid
        self._unschedulable[uid] = (qp, self._clock())
        for plugin in qp.unschedulable_plugins or (_ANY_PLUGIN,):
            self._parked_by_plugin.setdefault(plugin, set()).add(uid)

    def _unpark(self, uid: str) -> QueuedPodInfo | None:
        entry = self._unschedulable.pop(uid, None)
        if entry is None:
            return None
        qp = entry[0]
        for plugin in qp.unschedulable_plugins or (_ANY_PLUGIN,):
            uids = self._parked_by_plugin.get(plugin)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._parked_by_plugin[plugin]
        return qp

    def _requeue(self, qp: QueuedPodInfo, event: str) -> None:
        if self._clock() < self._backoff_expiry(qp):
            self._incoming("backoff", event)
            self._backoff[qp.pod.uid] = qp
            self._notify()
        else:
            self._push_active(qp, event)

    def add_unschedulable(self, qp: QueuedPodInfo, error: bool = False) -> None:
        """Return a pod after a failed attempt (call after :meth:`pop`).

        ``error``: the failure was an error (API, conflict), not a fit
        problem: the pod goes to backoffQ. A fit failure parks it as
        unschedulable unless a move request arrived during its cycle.
        """
        if self._in_flight.pop(qp.pod.uid, None) is None:
            return  # deleted (or bound) while it was being scheduled
        qp.timestamp = self._clock()
        if error or any(
            cycle >= qp.cycle and self._worth_requeuing(qp, event, old, new)
            for cycle, event, old, new in self._in_flight_events
        ):
            self._incoming("backoff", "ScheduleAttemptFailure")
            self._backoff[qp.pod.uid] = qp
            self._notify()
        else:
            self._incoming("unschedulable", "ScheduleAttemptFailure")
            self._park(qp)
        self._prune_in_flight_events()

    def any_nominated(self) -> bool:
        """Whether any pod is nominated to any node (the profile's PodNominator)."""
        return self.nominator.any_nominated()

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` (the profile's
        :class:`~ipscheduler.framework.interface.PodNominator`)."""
        return self.nominator.nominated_pods_for_node(node)

    def activate(self, uids: set[str]) -> int:
        """Move these pods to activeQ now, out of backoffQ or the unschedulable pods, their
        backoff cut short (upstream ``Activate``, event ``ForceActivate``); pods elsewhere
        (active, in flight, unknown) are left alone. Returns how many moved."""
        moved = 0
        for uid in uids:
            qp = self._backoff.pop(uid, None) or self._unpark(uid)
            if qp is not None:
                self._push_active(qp, "ForceActivate")
                moved += 1
        return moved

    def knows(self, uid: str) -> bool:
        """Whether pod ``uid`` is queued (active, backoff, unschedulable), gated, or in a
        scheduling or binding cycle."""
        return uid in self or uid in self._gated or uid in self._in_flight

    def in_flight(self, uid: str) -> bool:
        """Whether the pod is in a scheduling or binding cycle (popped, not yet done, failed
        or deleted)."""
        return uid in self._in_flight

    def done(self, uid: str) -> None:
        """The pod left the scheduler (bound or given up); stop tracking it."""
        self._in_flight.pop(uid, None)
        self._prune_in_flight_events()

    def _prune_in_flight_events(self) -> None:
        """Drop the events no in-flight pod can still be failed after."""
        if not self._in_flight:
            self._in_flight_events.clear()
            return
        if self._in_flight_events:
            # Pods enter _in_flight as they are popped, each with the next cycle number, and
            # leave it when done: the first one is the oldest (a scan of every pod in a
            # binding cycle, 256 of them, cost 1.4 % of the CPU draining a backlog).
            oldest = next(iter(self._in_flight.values())).cycle
            while self._in_flight_events and self._in_flight_events[0][0] < oldest:
                self._in_flight_events.popleft()

    def _interested_plugins(self, event: ClusterEvent) -> frozenset[str]:
        """Plugins that registered an event ``event`` matches (memoized per event)."""
        got = self._interested.get(event)
        if got is None:
            got = self._interested[event] = frozenset(
                plugin for plugin, reg in self._hints if event.matches(reg.event)
            )
        return got

    def _worth_requeuing(self, qp: QueuedPodInfo, event: ClusterEvent, old: Any, new: Any) -> bool:
        """Upstream ``isPodWorthRequeuing`` (``pkg/scheduler/backend/queue/scheduling_queue.go``):
        a pod no plugin rejected, or a wildcard event, always; otherwise when one of the
        plugins that rejected it registered ``event`` and its hint says QUEUE (no hint
        function, or one that raises, counts as QUEUE)."""
        rejectors = qp.unschedulable_plugins
        if not rejectors or event.resource == EventResource.WILDCARD:
            return True
        for plugin, reg in self._hints:
            if (plugin not in rejectors and plugin != _ANY_PLUGIN) or not event.matches(reg.event):
                continue
            fn = reg.queueing_hint_fn
            if fn is None:
                return True
            try:
                if fn(qp.pod, old, new) is QueueingHint.QUEUE:
                    return True
            except Exception:
                log.exception("queueing hint of %s for %s failed; queueing the pod", plugin, event.label)
                return True
        return False

    def move_all_to_active_or_backoff(
        self, event: ClusterEvent = WILDCARD_EVENT, old: Any = None, new: Any = None
    ) -> int:
        """``event`` happened (``old``/``new``: the object before and after): move the
        unschedulable pods it may help (see :meth:`_worth_requeuing`) back, to backoffQ if
        their backoff has not expired, else activeQ. Returns how many were moved.

        Only pods rejected by a plugin that registered the event are looked at (an index
        by plugin), so an event no parked pod cares about costs next to nothing.
        """
        if self._in_flight:
            self._in_flight_events.append((self._scheduling_cycle, event, old, new))
        if not self._unschedulable:
            return 0
        if event.resource == EventResource.WILDCARD:
            candidates: set[str] = set(self._unschedulable)
        else:
            candidates = set(self._parked_by_plugin.get(_ANY_PLUGIN, ()))
            interested = self._interested_plugins(event)
            if _ANY_PLUGIN in interested:  # a plugin without EnqueueExtensions: every pod
                candidates = set(self._unschedulable)
            else:
                for plugin in interested:
                    candidates.update(self._parked_by_plugin.get(plugin, ()))
        moved = 0
        for uid in candidates:
            qp = self._unschedulable[uid][0]
            if self._worth_requeuing(qp, event, old, new):
                self._unpark(uid)
                self._requeue(qp, event.label)
                moved += 1
        return moved

    def flush(self) -> None:
        """Move expired backoff pods to activeQ and stale unschedulable pods back."""
        now = self._clock()
        for uid, qp in list(self._backoff.items()):
            if now >= self._backoff_expiry(qp):
                del self._backoff[uid]
                self._push_active(qp, "BackoffComplete")
        for uid, (qp, since) in list(self._unschedulable.items()):
            if now - since >= self.max_unschedulable:
                self._unpark(uid)
                self._requeue(qp, "UnschedulableTimeout")

    def pop_nowait(self) -> QueuedPodInfo | None:
        """The next active pod, or None. Increments the scheduling cycle."""
        self.flush()
        while self._active:
            item = heapq.heappop(self._active)
            if self._active_uids.get(item.qp.pod.uid) is not item:
                continue
            del self._active_uids[item.qp.pod.uid]
            self._scheduling_cycle += 1
            qp = item.qp
            qp.attempts += 1
            qp.cycle = self._scheduling_cycle
            qp.unschedulable_plugins = set()
            self._in_flight[qp.pod.uid] = qp
            return qp
        return None

    def next_wakeup(self) -> float | None:
        """Seconds until the earliest backoff expires (None if backoffQ is empty)."""
        if not self._backoff:
            return None
        now = self._clock()
        return max(0.0, min(self._backoff_expiry(qp) for qp in self._backoff.values()) - now)

    async def pop(self) -> QueuedPodInfo:
        """Wait for and return the next pod to schedule. Raises QueueClosed after close()."""
        while True:
            if self._closed:
                raise QueueClosed
            qp = self.pop_nowait()
            if qp is not None:
                return qp
            timeout = self.next_wakeup()
            wait = 1.0 if timeout is None else timeout + 0.01
            async with self._cond:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._cond.wait(), timeout=wait)

    def close(self) -> None:
        self._closed = True
        self._notify()


def _status_only(old: PodInfo, new: PodInfo) -> bool:
    """Whether ``new`` differs from ``old`` only in what a status write changes (its
    resourceVersion, nomination, start time, preemption mark): such an update does not move
    an unschedulable pod (upstream ``isPodUpdated`` strips the status)."""
    return (
        dataclasses.replace(
            old,
            resource_version=new.resource_version,
            nominated_node_name=new.nominated_node_name,
            start_time=new.start_time,
            preempted=new.preempted,
        )
        == new
    )


class QueueClosed(Exception):
    """Raised by :meth:`SchedulingQueue.pop` after :meth:`SchedulingQueue.close`."""
