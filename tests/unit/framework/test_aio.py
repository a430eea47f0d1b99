"""framework/aio: keyed timers, the keyed work queue, TTL maps and sets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from ipscheduler.framework.aio import Batch, KeyedTimers, TTLMap, TTLSet, WorkQueue
from ipscheduler.framework.backoff import Backoff

GUARD = 5.0
"""Seconds a test waits at most for what it expects (a hang guard, never an assertion)."""


class FakeClock:
    """Seconds that move only when a test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- TTL containers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl", "after", "member"),
    [
        pytest.param(10.0, 0.0, True, id="fresh"),
        pytest.param(10.0, 9.9, True, id="just-before-expiry"),
        pytest.param(10.0, 10.0, False, id="at-expiry"),
        pytest.param(10.0, 60.0, False, id="long-gone"),
        pytest.param(0.0, 0.0, False, id="zero-ttl-keeps-nothing"),
        pytest.param(-1.0, 0.0, False, id="negative-ttl-keeps-nothing"),
    ],
)
def test_a_ttl_set_member_expires_after_its_ttl(ttl: float, after: float, member: bool) -> None:
    clock = FakeClock()
    s: TTLSet[str] = TTLSet(clock)
    s.add("a", ttl)
    clock.now += after
    assert ("a" in s) is member
    assert len(s) == (1 if member else 0)
    assert list(s) == (["a"] if member else [])


def test_adding_again_extends_and_a_non_positive_ttl_removes() -> None:
    clock = FakeClock()
    s: TTLSet[str] = TTLSet(clock)
    s.add("a", 10)
    clock.now += 8
    s.add("a", 10)
    clock.now += 8
    assert "a" in s and s.expires_in("a") == pytest.approx(2.0)
    s.add("a", 0)
    assert "a" not in s and s.expires_in("a") is None


def test_discard_removes_a_member() -> None:
    s: TTLSet[str] = TTLSet(FakeClock())
    s.add("a", 10)
    s.add("b", 10)
    s.discard("a")
    s.discard("never-added")
    assert "a" not in s and list(s) == ["b"]


def test_a_ttl_map_returns_only_fresh_values() -> None:
    clock = FakeClock()
    m: TTLMap[str, int] = TTLMap(clock)
    m.put("short", 1, 5)
    m.put("long", 2, 50)
    assert (m.get("short"), m.get("long"), m.get("absent")) == (1, 2, None)
    clock.now += 5
    assert (m.get("short"), m.get("long")) == (None, 2)
    assert "short" not in m and "long" in m and len(m) == 1
    assert m.pop("long") == 2 and m.pop("long") is None and len(m) == 0


def test_a_bounded_ttl_map_drops_the_least_recently_stored() -> None:
    m: TTLMap[int, int] = TTLMap(FakeClock(), max_entries=3)
    for i in range(5):
        m.put(i, i, 10)
    m.put(2, 20, 10)  # stored again: the most recent now
    m.put(5, 5, 10)
    assert [m.get(i) for i in range(6)] == [None, None, 20, None, 4, 5]


def test_expired_entries_are_pruned_as_the_map_grows() -> None:
    """Keys never looked up again do not pile up: stores sweep the expired ones."""
    clock = FakeClock()
    m: TTLMap[int, int] = TTLMap(clock)
    for i in range(1000):
        m.put(i, i, 1)
        clock.now += 0.5
    assert m.prune() < 100, "most expired entries were swept while storing"
    assert len(m) == 1, "only the last one is fresh"


# -- keyed timers ---------------------------------------------------------------------


async def test_keyed_timers_keep_the_earliest_per_key() -> None:
    fired: list[str] = []
    done = asyncio.Event()
    timers: KeyedTimers[str] = KeyedTimers()

    def fire(key: str) -> None:
        fired.append(key)
        if key == "last":
            done.set()

    assert timers.call_later("a", 60, fire)
    assert timers.call_later("a", 0.01, fire), "an earlier deadline replaces a later one"
    assert not timers.call_later("a", 60, fire), "a later one is dropped"
    assert timers.call_later("b", 0.02, fire)
    assert timers.cancel("b") and not timers.cancel("b")
    assert timers.call_later("last", 0.05, fire)
    await asyncio.wait_for(done.wait(), GUARD)
    assert fired == ["a", "last"]
    assert len(timers) == 0 and "a" not in timers


async def test_a_keyed_timer_may_set_its_key_again_from_its_callback() -> None:
    fired: list[int] = []
    done = asyncio.Event()
    timers: KeyedTimers[str] = KeyedTimers()

    def fire(key: str) -> None:
        fired.append(len(fired))
        if len(fired) < 3:
            assert timers.call_later(key, 0, fire)
        else:
            done.set()

    timers.call_later("a", 0, fire)
    await asyncio.wait_for(done.wait(), GUARD)
    assert fired == [0, 1, 2] and "a" not in timers


async def test_cancel_all_stops_every_timer() -> None:
    fired: list[str] = []
    timers: KeyedTimers[str] = KeyedTimers()
    for key in ("a", "b"):
        timers.call_later(key, 0, fired.append)
    timers.cancel_all()
    await asyncio.sleep(0.01)
    assert fired == [] and len(timers) == 0


# -- work queue -----------------------------------------------------------------------


class Worker:
    """Runs a queue's worker in a task; each batch is recorded and signalled."""

    def __init__(self, queue: WorkQueue[str], handle: Callable[[Batch[str]], object] | None = None) -> None:
        self.queue = queue
        self.batches: list[Batch[str]] = []
        self.handle = handle
        self._got: asyncio.Queue[Batch[str]] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(queue.run(self.handler))

    async def handler(self, batch: Batch[str]) -> None:
        self.batches.append(batch)
        self._got.put_nowait(batch)
        if self.handle is not None:
            result = self.handle(batch)
            if asyncio.iscoroutine(result):
                await result

    async def next(self) -> Batch[str]:
        return await asyncio.wait_for(self._got.get(), GUARD)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await self.task
        self.queue.shut_down()


@contextlib.asynccontextmanager
async def worker(
    queue: WorkQueue[str], handle: Callable[[Batch[str]], object] | None = None
) -> AsyncIterator[Worker]:
    w = Worker(queue, handle)
    try:
        yield w
    finally:
        await w.stop()


@pytest.mark.parametrize(
    ("adds", "batch"),
    [
        pytest.param(["a"], frozenset({"a"}), id="one-key"),
        pytest.param(["b", "a", "b", "a"], frozenset({"a", "b"}), id="deduplicated"),
        pytest.param(["a", None], None, id="all-absorbs-earlier-keys"),
        pytest.param([None, "a"], None, id="all-absorbs-later-keys"),
    ],
)
async def test_adds_before_the_worker_takes_them_make_one_batch(
    adds: list[str | None], batch: Batch[str]
) -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in adds:
        queue.add(key)
    assert queue.dirty and queue.pending() == batch
    async with worker(queue) as w:
        assert await w.next() == batch
        await asyncio.sleep(0.01)
        assert w.batches == [batch] and not queue.dirty


async def test_keys_added_during_the_delay_join_the_batch() -> None:
    queue: WorkQueue[str] = WorkQueue(delay=0.2)
    async with worker(queue) as w:
        queue.add("a")
        await asyncio.sleep(0)  # the worker wakes and waits out the delay
        queue.add("b")
        assert await w.next() == frozenset({"a", "b"})


async def test_a_key_added_while_it_is_handled_is_handled_again() -> None:
    queue: WorkQueue[str] = WorkQueue()
    handling = asyncio.Event()
    proceed = asyncio.Event()

    async def handle(batch: Batch[str]) -> None:
        if len(w.batches) == 1:
            handling.set()
            await proceed.wait()

    async with worker(queue, handle) as w:
        queue.add("a")
        await asyncio.wait_for(handling.wait(), GUARD)
        assert not queue.dirty, "the batch was taken"
        queue.add("a")
        proceed.set()
        assert await w.next() == frozenset({"a"})
        assert await w.next() == frozenset({"a"})


@pytest.mark.parametrize(
    ("batch", "error"),
    [
        pytest.param("a", RuntimeError("boom"), id="keys-raised"),
        pytest.param(None, RuntimeError("boom"), id="all-raised"),
        pytest.param("a", asyncio.CancelledError(), id="keys-cancelled"),
    ],
)
async def test_a_failed_handler_gives_its_batch_back(batch: str | None, error: BaseException) -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add(batch)
    taken = queue.pending()

    async def handle(got: Batch[str]) -> None:
        raise error

    with pytest.raises(type(error)):
        await queue.run(handle)
    assert queue.dirty and queue.pending() == taken


async def test_cancelling_the_worker_mid_batch_keeps_the_batch() -> None:
    queue: WorkQueue[str] = WorkQueue()
    started = asyncio.Event()

    async def handle(batch: Batch[str]) -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.get_running_loop().create_task(queue.run(handle))
    queue.add("a")
    await asyncio.wait_for(started.wait(), GUARD)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.pending() == frozenset({"a"})


async def test_add_after_adds_later_and_the_earlier_deadline_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    async with worker(queue) as w:
        queue.add_after("slow", 60)
        queue.add_after("a", 60)
        queue.add_after("a", 0.01)
        queue.add_after("a", 30)
        assert not queue.dirty
        assert await w.next() == frozenset({"a"})
        queue.add_after("now", 0)
        assert await w.next() == frozenset({"now"})
        assert "slow" not in (w.batches[0] or ()) and not queue.dirty


async def test_rate_limited_adds_back_off_per_key_until_forgotten() -> None:
    made: list[Backoff] = []

    def tiny() -> Backoff:
        made.append(Backoff(0.001, 0.004, jitter=0.0))
        return made[-1]

    queue: WorkQueue[str] = WorkQueue(retry=tiny)
    waits = [queue.add_rate_limited("a") for _ in range(4)]
    assert waits == [0.001, 0.002, 0.004, 0.004]
    assert queue.add_rate_limited("b") == 0.001, "each key has its own backoff"
    assert (queue.num_requeues("a"), queue.num_requeues("b"), queue.num_requeues("c")) == (4, 1, 0)
    queue.forget("a")
    assert queue.num_requeues("a") == 0 and queue.add_rate_limited("a") == 0.001
    assert len(made) == 3
    async with worker(queue) as w:
        got: set[str] = set()
        while got != {"a", "b"}:
            got |= await w.next() or set()


async def test_a_worker_sleeps_while_nothing_is_dirty() -> None:
    queue: WorkQueue[str] = WorkQueue()
    async with worker(queue) as w:
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.batches == []
        queue.add("a")
        assert await w.next() == frozenset({"a"})
        for _ in range(10):
            await asyncio.sleep(0)
        assert w.batches == [frozenset({"a"})]
