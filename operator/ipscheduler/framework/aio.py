"""The small asyncio kit every floor shares: keyed timers, a keyed work queue, TTL sets and maps.

It lives in ``framework``, the bottom floor of the import-linter layers (``pyproject.toml``),
so that ``kube``, ``backend``, ``scheduler`` and both wings may use it; it imports nothing
of the scheduler but :mod:`ipscheduler.framework.backoff`.

- :class:`KeyedTimers`: at most one ``loop.call_later`` per key (the earliest wins).
- :class:`WorkQueue`: a keyed, deduplicating, delayed work queue with one worker, after
  client-go's ``workqueue`` (``staging/src/k8s.io/client-go/util/workqueue/queue.go``,
  ``delaying_queue.go``, ``rate_limiting_queue.go``): a key added while it is dirty is
  one item; a key added while the worker handles it is handled again after; ``add_after``
  adds it later (the earlier of two deadlines wins); ``add_rate_limited`` adds it after
  its own exponential backoff, which ``forget`` resets. Unlike client-go's, the worker
  takes every dirty key at once (one batch), after a coalescing ``delay``, and the key
  ``None`` stands for every key (a full resync).
- :class:`TTLMap` and :class:`TTLSet`: entries that expire ``ttl`` seconds of an injected
  clock after they were stored, pruned lazily.

Times are seconds: of the event loop's clock for timers and the queue, of the injected
``clock`` (``time.monotonic`` by default) for the TTL containers.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Generic, TypeVar, cast

from ipscheduler.framework.backoff import Backoff

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Clock = Callable[[], float]
"""Seconds, monotonic (``time.monotonic``, or a fake in tests)."""

Batch = frozenset[K] | None
"""What :meth:`WorkQueue.run` hands its handler: the dirty keys, or None for every key."""


class KeyedTimers(Generic[K]):
    """At most one pending ``loop.call_later`` per key.

    :meth:`call_later` keeps the timer that fires first: an existing earlier one stays and
    the new call is dropped; a later one is replaced. A timer forgets its key before it
    calls back, so the callback may schedule the key again. Needs a running event loop
    to schedule.
    """

    def __init__(self) -> None:
        self._timers: dict[K, asyncio.TimerHandle] = {}

    def call_later(self, key: K, seconds: float, callback: Callable[[K], object]) -> bool:
        """Call ``callback(key)`` in ``seconds`` (at least 0) unless ``key`` has a timer that
        fires no later; True when this call set the timer. Raises RuntimeError outside a
        running event loop."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, seconds)
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= when:
                return False
            timer.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            callback(key)

        self._timers[key] = loop.call_at(when, fire)
        return True

    def cancel(self, key: K) -> bool:
        """Cancel ``key``'s timer; True when there was one."""
        timer = self._timers.pop(key, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def cancel_all(self) -> None:
        """Cancel every timer."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._timers

    def __len__(self) -> int:
        return len(self._timers)

    def __iter__(self) -> Iterator[K]:
        """The keys with a pending timer."""
        return iter(list(self._timers))


class WorkQueue(Generic[K]):
    """Keys to handle, each once however often it was added, by one worker (see the module
    doc).

    ``delay``: seconds the worker waits after the first add of a round before it takes the
    batch (adds meanwhile join it). ``retry``: makes the backoff of a key handed to
    :meth:`add_rate_limited` (one per key until :meth:`forget`). The key ``None`` stands
    for every key: once added, the batch is None until taken, and single keys added
    meanwhile are in it already.
    """

    def __init__(self, delay: float = 0.0, retry: Callable[[], Backoff] = Backoff) -> None:
        self.delay = delay
        self._retry = retry
        self._dirty: set[K] = set()
        self._all = False
        self._wake = asyncio.Event()
        self._timers: KeyedTimers[K | None] = KeyedTimers()
        self._failures: dict[K | None, Backoff] = {}

    # -- adding ------------------------------------------------------------------------
    def add(self, key: K | None = None) -> None:
        """Mark ``key`` dirty (None or no argument: every key) and wake the worker."""
        if key is None:
            self._all = True
            self._dirty.clear()
        elif not self._all:
            self._dirty.add(key)
        self._wake.set()

    def add_after(self, key: K | None, seconds: float) -> None:
        """:meth:`add` ``key`` in ``seconds`` (at once for ``seconds <= 0``); a pending later
        add of the key is brought forward, an earlier one stays (client-go's
        ``AddAfter``). Needs a running event loop for ``seconds > 0``."""
        if seconds <= 0:
            self.add(key)
        else:
            self._timers.call_later(key, seconds, self.add)

    def add_rate_limited(self, key: K | None) -> float:
        """:meth:`add_after` ``key`` once its own backoff's next wait has passed (client-go's
        ``AddRateLimited``); returns that wait in seconds."""
        backoff = self._failures.get(key)
        if backoff is None:
            backoff = self._failures[key] = self._retry()
        wait = backoff.next()
        self.add_after(key, wait)
        return wait

    def forget(self, key: K | None) -> None:
        """``key`` was handled well: its next :meth:`add_rate_limited` waits the initial
        delay again (client-go's ``Forget``)."""
        self._failures.pop(key, None)

    def num_requeues(self, key: K | None) -> int:
        """Rate-limited adds of ``key`` since it was last forgotten (client-go's
        ``NumRequeues``)."""
        backoff = self._failures.get(key)
        return 0 if backoff is None else backoff.attempts

    # -- taking --------------------------------------------------------------------
    @property
    def dirty(self) -> bool:
        """Something was added since the last batch was taken."""
        return self._wake.is_set()

    def pending(self) -> Batch[K]:
        """The batch :meth:`take` would return now (None: every key), left in place."""
        return None if self._all else frozenset(self._dirty)

    def take(self) -> Batch[K]:
        """Take the dirty keys (None: every key) and leave the queue clean."""
        batch = self.pending()
        self._dirty.clear()
        self._all = False
        self._wake.clear()
        return batch

    def shut_down(self) -> None:
        """Cancel the pending :meth:`add_after` timers."""
        self._timers.cancel_all()

    async def run(self, handler: Callable[[Batch[K]], Awaitable[None]]) -> None:
        """The worker: whenever something is dirty, wait ``delay`` seconds, take the batch
        and await ``handler(batch)``. Never returns. A handler that raises (or is cancelled)
        gives its batch back, dirty, before the error propagates, so a restarted worker
        handles it again; keys re-added while the handler runs make the next batch."""
        while True:
            await self._wake.wait()
            if self.delay > 0:
                await asyncio.sleep(self.delay)
            batch = self.take()
            try:
                await handler(batch)
            except BaseException:
                self._give_back(batch)
                raise

    def _give_back(self, batch: Batch[K]) -> None:
        if batch is None:
            self.add()
        else:
            for key in batch:
                self.add(key)


class TTLMap(Generic[K, V]):
    """``key → value``, each entry kept ``ttl`` seconds of ``clock`` after it was stored; at
    most ``max_entries`` (None: no bound; the least recently stored goes first).

    Expired entries are never returned; they are dropped when looked up and, all at once,
    whenever the map has grown to twice its size after the last such sweep (lazy pruning,
    amortised constant time per store).
    """

    def __init__(self, clock: Clock = time.monotonic, max_entries: int | None = None) -> None:
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._swept = 0

    def put(self, key: K, value: V, ttl: float) -> None:
        """Keep ``value`` for ``ttl`` seconds (``ttl <= 0``: not at all, and an older entry of
        ``key`` goes)."""
        if ttl <= 0:
            self._entries.pop(key, None)
            return
        self._entries[key] = (self._clock() + ttl, value)
        self._entries.move_to_end(key)
        if len(self._entries) > max(2 * self._swept, 16):
            self.prune()
        while self._max is not None and len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def get(self, key: K) -> V | None:
        """The value of ``key`` while it is fresh, else None."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        if self._clock() >= hit[0]:
            del self._entries[key]
            return None
        return hit[1]

    def expires_in(self, key: K) -> float | None:
        """Seconds until ``key`` expires (> 0), or None when it is absent or expired."""
        hit = self._entries.get(key)
        if hit is None:
            return None
        left = hit[0] - self._clock()
        if left <= 0:
            del self._entries[key]
            return None
        return left

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value if it was fresh, else None."""
        value = self.get(key)
        self._entries.pop(key, None)
        return value

    def prune(self) -> int:
        """Drop every expired entry; how many were dropped."""
        now = self._clock()
        expired = [key for key, (expires, _) in self._entries.items() if now >= expires]
        for key in expired:
            del self._entries[key]
        self._swept = len(self._entries)
        return len(expired)

    def __contains__(self, key: object) -> bool:
        return self.expires_in(cast(K, key)) is not None

    def __len__(self) -> int:
        """Fresh entries (expired ones are pruned first)."""
        self.prune()
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        """The fresh keys, least recently stored first."""
        self.prune()
        return iter(list(self._entries))


class TTLSet(Generic[K]):
    """Keys, each a member for ``ttl`` seconds of ``clock`` after it was added (a
    :class:`TTLMap` of no values): ``key in s`` is False once it expired."""

    def __init__(self, clock: Clock = time.monotonic, max_entries: int | None = None) -> None:
        self._map: TTLMap[K, bool] = TTLMap(clock, max_entries)

    def add(self, key: K, ttl: float) -> None:
        """Make ``key`` a member for ``ttl`` seconds from now (again, if it was one;
        ``ttl <= 0``: no longer)."""
        self._map.put(key, True, ttl)

    def discard(self, key: K) -> None:
        """``key`` is no member any more."""
        self._map.pop(key)

    def expires_in(self, key: K) -> float | None:
        """Seconds ``key`` stays a member (> 0), or None when it is none."""
        return self._map.expires_in(key)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[K]:
        return iter(self._map)
