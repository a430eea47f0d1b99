"""backend/supervisor: no background task dies silently (Supervisor, TaskSet; no API server).

ListWatch.run, the informers' own loop: kube/test_informer.py."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.backend.supervisor import Supervisor, TaskSet


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoffs of 0 s: the loops run their retries at once."""
    monkeypatch.setattr("ipscheduler.framework.backoff.random.uniform", lambda a, b: 0.0)


def sample(metrics: Metrics, name: str, task: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"task": task})


# --------------------------------------------------------------------------- Supervisor

FAILURES = [
    aiohttp.ClientOSError(111, "Connect call failed"),
    aiohttp.ServerDisconnectedError(),
    ApiException(status=500),
    KeyError("a bug"),
    None,  # the loop returned
]


@pytest.mark.parametrize(
    "failure", FAILURES, ids=["connect-refused", "server-disconnected", "api-500", "bug", "returned"]
)
async def test_a_failing_loop_is_restarted_and_counted(failure: Exception | None) -> None:
    health, metrics = HealthState(), Metrics()
    sup = Supervisor(health, metrics)
    runs: list[int] = []
    forever = asyncio.Event()

    async def loop() -> None:
        runs.append(1)
        if len(runs) < 3:
            if failure is not None:
                raise failure
            return
        await forever.wait()

    sup.start("pool-status", loop)
    for _ in range(100):
        if len(runs) >= 3:
            break
        await asyncio.sleep(0)
    assert len(runs) == 3
    assert sample(metrics, "ipscheduler_task_restarts_total", "pool-status") == 2
    assert sample(metrics, "ipscheduler_task_up", "pool-status") == 1
    assert health.healthy() == (True, "ok")
    await sup.stop()
    assert health.healthy() == (True, "ok"), "a stop is not a failure"
    assert sample(metrics, "ipscheduler_task_up", "pool-status") == 0


async def test_a_task_that_still_ends_fails_healthz_at_once() -> None:
    health, metrics = HealthState(), Metrics()
    sup = Supervisor(health, metrics)
    task = sup.start("garbage-collector", asyncio.Event().wait)
    await asyncio.sleep(0)
    task.cancel()  # not by Supervisor.stop(): someone killed it
    await asyncio.gather(task, return_exceptions=True)
    ok, why = health.healthy()
    assert not ok and why == "garbage-collector: task ended: cancelled"
    assert sample(metrics, "ipscheduler_task_up", "garbage-collector") == 0


async def test_a_task_set_logs_a_failed_task_forgets_ended_ones_and_cancels_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = TaskSet()

    async def fail() -> None:
        raise KeyError("a bug")

    forever = asyncio.Event()
    tasks.spawn(fail(), "release ns/p")
    tasks.spawn(forever.wait(), "bind ns/q")
    await asyncio.sleep(0.01)
    assert len(tasks) == 1  # the failed one is gone
    assert "release ns/p failed: KeyError('a bug')" in caplog.text
    await asyncio.wait_for(tasks.cancel(), timeout=1)
    assert len(tasks) == 0
