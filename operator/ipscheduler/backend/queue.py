"""The scheduling queue: activeQ, backoffQ and unschedulable pods.

Modelled on ``pkg/scheduler/backend/queue/scheduling_queue.go``
(PriorityQueue):

- **activeQ** is a heap ordered by the QueueSort plugin's ``less``.
- **backoffQ** holds pods that failed with an error or were moved while
  still backing off; backoff is ``initial * 2**(attempts-1)`` capped at
  ``maximum`` (kube-scheduler defaults 1 s and 10 s).
- **unschedulable** holds pods no node fits; a cluster event that may free
  capacity (pool change, release, node change) moves them back at once
  (to backoffQ if their backoff has not expired, else activeQ), and pods
  that stayed there longer than ``max_unschedulable`` (5 min) are flushed.

A pod that failed while a move request happened during its cycle goes to
backoffQ instead of unschedulable, so no event is missed. Pods being bound
("in flight") are not re-added until :meth:`done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ipscheduler.framework.interface import QueuedPodInfo, QueueSortPlugin
from ipscheduler.framework.types import PodInfo

Clock = Callable[[], float]


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
    """

    def __init__(
        self,
        sort: QueueSortPlugin,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        clock: Clock = time.monotonic,
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
        self._in_flight: dict[str, QueuedPodInfo] = {}
        self._scheduling_cycle = 0
        self._move_request_cycle = -1
        self._cond = asyncio.Condition()
        self._closed = False
        self._waker: asyncio.Task[None] | None = None

    # -- introspection -------------------------------------------------
    def __len__(self) -> int:
        return len(self._active_uids) + len(self._backoff) + len(self._unschedulable)

    def __contains__(self, uid: object) -> bool:
        return uid in self._active_uids or uid in self._backoff or uid in self._unschedulable

    def depths(self) -> dict[str, int]:
        """Pods per state: active, backoff, unschedulable, in_flight."""
        return {
            "active": len(self._active_uids),
            "backoff": len(self._backoff),
            "unschedulable": len(self._unschedulable),
            "in_flight": len(self._in_flight),
        }

    @property
    def scheduling_cycle(self) -> int:
        return self._scheduling_cycle

    def backoff_duration(self, qp: QueuedPodInfo) -> float:
        """Seconds a pod with ``qp.attempts`` failures backs off."""
        if qp.attempts <= 0:
            return 0.0
        return float(min(self.max_backoff, self.initial_backoff * 2 ** (qp.attempts - 1)))

    def _backoff_expiry(self, qp: QueuedPodInfo) -> float:
        return qp.timestamp + self.backoff_duration(qp)

    # -- mutation ------------------------------------------------------
    def _push_active(self, qp: QueuedPodInfo) -> None:
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
            if dataclasses.replace(qp.pod, resource_version=pod.resource_version) == pod:
                qp.pod = pod  # status-only update (e.g. our own condition patch): stay parked
                return
            del self._unschedulable[uid]
            qp.pod = pod
            self._requeue(qp)
            return
        now = self._clock()
        self._push_active(QueuedPodInfo(pod=pod, timestamp=now, initial_attempt_timestamp=now))

    def delete(self, uid: str) -> None:
        """Forget a pod (deleted, bound, terminal, or gated)."""
        self._active_uids.pop(uid, None)  # its heap entry is skipped lazily by pop
        self._in_flight.pop(uid, None)  # a failed attempt of a deleted pod is not re-queued
        self._backoff.pop(uid, None)
        self._unschedulable.pop(uid, None)

    def _requeue(self, qp: QueuedPodInfo) -> None:
        if self._clock() < self._backoff_expiry(qp):
            self._backoff[qp.pod.uid] = qp
            self._notify()
        else:
            self._push_active(qp)

    def add_unschedulable(self, qp: QueuedPodInfo, error: bool = False) -> None:
        """Return a pod after a failed attempt (call after :meth:`pop`).

        ``error``: the failure was an error (API, conflict), not a fit
        problem: the pod goes to backoffQ. A fit failure parks it as
        unschedulable unless a move request arrived during its cycle.
        """
        if self._in_flight.pop(qp.pod.uid, None) is None:
            return  # deleted (or bound) while it was being scheduled
        qp.timestamp = self._clock()
        if error or self._move_request_cycle >= qp.cycle:
            self._backoff[qp.pod.uid] = qp
            self._notify()
        else:
            self._unschedulable[qp.pod.uid] = (qp, self._clock())

    def done(self, uid: str) -> None:
        """The pod left the scheduler (bound or given up); stop tracking it."""
        self._in_flight.pop(uid, None)

    def move_all_to_active_or_backoff(self, event: str = "") -> int:
        """A cluster event may have freed capacity: retry unschedulable pods now.

        Returns how many pods were moved. Pods still inside their backoff go
        to backoffQ, others to activeQ.
        """
        self._move_request_cycle = self._scheduling_cycle
        moved = 0
        for qp, _ in list(self._unschedulable.values()):
            self._unschedulable.pop(qp.pod.uid, None)
            self._requeue(qp)
            moved += 1
        return moved

    def flush(self) -> None:
        """Move expired backoff pods to activeQ and stale unschedulable pods back."""
        now = self._clock()
        for uid, qp in list(self._backoff.items()):
            if now >= self._backoff_expiry(qp):
                del self._backoff[uid]
                self._push_active(qp)
        for uid, (qp, since) in list(self._unschedulable.items()):
            if now - since >= self.max_unschedulable:
                del self._unschedulable[uid]
                self._requeue(qp)

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


class QueueClosed(Exception):
    """Raised by :meth:`SchedulingQueue.pop` after :meth:`SchedulingQueue.close`."""
