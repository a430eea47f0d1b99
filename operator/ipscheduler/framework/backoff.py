"""A jittered, capped exponential backoff, as client-go's ``wait.Backoff`` drives its
reflectors' re-lists (``k8s.io/client-go/tools/cache/reflector.go``: 800 ms doubling to
30 s): each wait is drawn in ``[delay/2, delay]`` (so replicas and informers do not retry in
lockstep), then the delay doubles up to ``cap``; :meth:`Backoff.reset` starts over once
things work again. Used by the informers' re-lists and the supervisor's restarts."""

from __future__ import annotations

import random


class Backoff:
    """Seconds to wait before each retry: ``initial`` doubling to ``cap``, jittered."""

    def __init__(self, initial: float = 1.0, cap: float = 30.0) -> None:
        self.initial = initial
        self.cap = cap
        self._delay = initial

    def next(self) -> float:
        """The wait before the next retry, in ``[delay/2, delay]``; the delay then doubles
        (at most ``cap``)."""
        wait = random.uniform(self._delay / 2, self._delay)
        self._delay = min(self._delay * 2, self.cap)
        return wait

    def reset(self) -> None:
        """Start again from ``initial`` (the last attempt worked)."""
        self._delay = self.initial
