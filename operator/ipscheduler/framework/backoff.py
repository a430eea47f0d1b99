"""The one backoff of the scheduler: capped exponential delays, jittered or not.

:func:`exponential` is the delay of a retry by its number, as kube-scheduler's
``calculateBackoffDuration`` (``pkg/scheduler/backend/queue/scheduling_queue.go``: the
pod's initial backoff doubled per attempt, capped at the maximum) and client-go's
``ItemExponentialFailureRateLimiter`` (``staging/src/k8s.io/client-go/util/workqueue/
default_rate_limiters.go``) compute it.

:class:`Backoff` keeps the count itself, as client-go's ``wait.Backoff`` drives its
reflectors' re-lists (``k8s.io/client-go/tools/cache/reflector.go``: 800 ms doubling to
30 s): each wait is drawn in ``[delay * (1 - jitter), delay]`` (with the default jitter of
0.5, in ``[delay/2, delay]``, so replicas and informers do not retry in lockstep; 1.0 is
"full jitter", 0 none), then the delay grows by ``factor`` up to ``cap``;
:meth:`Backoff.reset` starts over once things work again. Used by the informers'
re-lists, the supervisor's restarts, the start-up reconcile, the pool writer's
compare-and-swap retries, the scheduling queue's pod backoff and the retries of
:class:`ipscheduler.framework.aio.WorkQueue`.
"""

from __future__ import annotations

import random

MAX_EXPONENT = 64
"""Growth steps after which the delay no longer grows (keeps the power finite)."""


def exponential(initial: float, cap: float, attempt: int, factor: float = 2.0) -> float:
    """Seconds before retry number ``attempt`` (0 for the first): ``initial * factor **
    attempt``, at most ``cap``; 0 for ``initial <= 0``, ``initial`` for a negative
    ``attempt``."""
    if initial <= 0:
        return 0.0
    return float(min(cap, initial * factor ** min(max(attempt, 0), MAX_EXPONENT)))


class Backoff:
    """Seconds to wait before each retry: ``initial`` growing by ``factor`` to ``cap``,
    each drawn in ``[delay * (1 - jitter), delay]`` (``jitter`` in ``[0, 1]``)."""

    def __init__(
        self, initial: float = 1.0, cap: float = 30.0, jitter: float = 0.5, factor: float = 2.0
    ) -> None:
        self.initial = initial
        self.cap = cap
        self.jitter = jitter
        self.factor = factor
        self.attempts = 0
        """Waits handed out since the last :meth:`reset`."""

    def next(self) -> float:
        """The wait before the next retry, in ``[delay * (1 - jitter), delay]``; the delay
        then grows (at most ``cap``)."""
        delay = exponential(self.initial, self.cap, self.attempts, self.factor)
        self.attempts += 1
        if not self.jitter:
            return delay
        return random.uniform(delay * (1 - self.jitter), delay)

    def reset(self) -> None:
        """Start again from ``initial`` (the last attempt worked)."""
        self.attempts = 0
