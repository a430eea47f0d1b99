"""Long-running tasks that never die silently.

Every background loop of the scheduler (the informers, the pool-status task,
the garbage collector, the scheduling loop) runs under :class:`Supervisor`:

- an exception other than cancellation is logged with its traceback, counted
  in ``ipscheduler_task_restarts_total{task}``, and the loop is started again
  after a jittered, capped exponential backoff (1 s doubling to 30 s, back to
  1 s after a minute of good running);
- a loop that returns although it should run forever is restarted the same way;
- a task that still ends (cancelled by anyone but :meth:`Supervisor.stop`)
  is recorded in the health state, so ``/healthz`` fails at once, and
  ``ipscheduler_task_up{task}`` drops to 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.framework.backoff import Backoff

log = logging.getLogger(__name__)

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 30.0
GOOD_RUN = 60.0
"""Seconds of running without a failure after which the backoff starts again at 1 s."""


class Supervisor:
    """Starts named loops and keeps them running (see the module doc)."""

    def __init__(self, health: HealthState, metrics: Metrics | None = None) -> None:
        self.health = health
        self.metrics = metrics
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping = False

    def start(self, name: str, loop: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``loop()`` as task ``name``, restarting it whenever it fails or returns."""
        task = asyncio.get_running_loop().create_task(self._forever(name, loop), name=name)
        self.tasks[name] = task
        if self.metrics is not None:
            self.metrics.task_up.labels(name).set(1)
        task.add_done_callback(lambda t: self._ended(name, t))
        return task

    async def _forever(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        backoff = Backoff(BACKOFF_INITIAL, BACKOFF_MAX)
        while True:
            started = time.monotonic()
            try:
                await loop()
                outcome = "returned"
                log.error("%s returned although it should run until stopped", name)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                outcome = "failed"
                log.error("%s failed: %s: %s", name, type(e).__name__, e, exc_info=True)
            if time.monotonic() - started > GOOD_RUN:
                backoff.reset()
            wait = backoff.next()
            log.warning("%s %s; restarting it in %.1fs", name, outcome, wait)
            if self.metrics is not None:
                self.metrics.task_restarts.labels(name).inc()
            await asyncio.sleep(wait)

    def _ended(self, name: str, task: asyncio.Task[None]) -> None:
        if self.metrics is not None:
            self.metrics.task_up.labels(name).set(0)
        if self._stopping:
            return
        why = "cancelled" if task.cancelled() else repr(task.exception())
        # Cancelled: most often the process is shutting down (asyncio.run cancels what is left).
        log.log(
            logging.WARNING if task.cancelled() else logging.ERROR,
            "required task %s ended (%s): /healthz fails from now on",
            name,
            why,
        )
        self.health.ended[name] = why

    async def stop(self) -> None:
        """Cancel every task and wait for them (their end is not a health failure)."""
        self._stopping = True
        for t in self.tasks.values():
            t.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


class TaskSet:
    """Short-lived tasks (a binding cycle, a release, an adoption) kept until they end.

    Unlike a supervised loop, such a task is not restarted: one that fails is
    logged with its traceback and forgotten (what it should have done is
    repaired by the GC sweep or the pod's next scheduling cycle).
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], what: str) -> None:
        """Run ``coro`` as task ``what`` (its name, and the subject of the failure log)."""
        task = asyncio.get_running_loop().create_task(coro, name=what)
        self._tasks.add(task)

        def _done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("%s failed: %r", what, t.exception(), exc_info=t.exception())

        task.add_done_callback(_done)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    async def cancel(self) -> None:
        """Cancel every task still running and wait for them to end."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
