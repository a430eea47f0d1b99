"""No background task dies silently: Supervisor, ListWatch.run and its health (no API server)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from ipscheduler.backend.supervisor import Supervisor, TaskSet
from ipscheduler.cmd.election import ResilientLeaseLock
from ipscheduler.health import HealthState
from ipscheduler.kube import informer
from ipscheduler.kube.informer import ObjectStore
from ipscheduler.metrics import Metrics


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoffs of 0 s: the loops run their retries at once."""
    monkeypatch.setattr("ipscheduler.backend.supervisor.random.uniform", lambda a, b: 0.0)
    monkeypatch.setattr("ipscheduler.kube.informer.random.uniform", lambda a, b: 0.0)


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


# --------------------------------------------------------------------------- ListWatch.run


def store() -> ObjectStore[int]:
    return ObjectStore("thing", lambda api: (print, (), {}), lambda body: 1)


WATCH_FAILURES = [
    aiohttp.ClientPayloadError("Response payload is not completed"),
    aiohttp.ServerDisconnectedError(),
    aiohttp.ClientOSError(111, "Connect call failed"),
    ApiException(status=410, reason="Gone"),
    TimeoutError(),
    ValueError("malformed watch event"),
    RuntimeError("a bug in a handler"),
]
WATCH_IDS = ["payload-cut", "disconnected", "refused", "gone", "timeout", "decode", "handler-bug"]


@pytest.mark.parametrize("failure", WATCH_FAILURES, ids=WATCH_IDS)
async def test_a_watch_failure_relists_and_never_ends_the_informer(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store()
    lists: list[int] = []
    watches: list[int] = []
    relisted: list[str] = []
    s.on_relisted(lambda: relisted.append("first"))
    s.on_relisted(lambda: relisted.append("second"))
    forever = asyncio.Event()

    async def list_raw(endpoint: Any, token: str = "") -> dict[str, Any]:
        lists.append(1)
        return {"metadata": {"resourceVersion": str(len(lists))}, "items": [{"metadata": {"name": "a"}}]}

    async def watch(*args: Any) -> None:
        watches.append(1)
        if len(watches) == 1:
            assert s.down_for() == 0.0
            raise failure
        await forever.wait()

    monkeypatch.setattr(informer, "_list_raw", list_raw)
    monkeypatch.setattr(s, "_watch", watch)
    task = asyncio.get_running_loop().create_task(s.run(None))  # type: ignore[arg-type]
    for _ in range(100):
        if len(watches) >= 2:
            break
        await asyncio.sleep(0)
    assert (len(lists), len(watches)) == (2, 2), "re-listed, then watched again"
    assert relisted == ["first", "second"], "each relist handler, once, after the second LIST only"
    assert not task.done()
    assert s.failures == 1 and s.down_since is None and s.health(0.0) is None
    assert type(failure).__name__ in s.last_error
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_an_informer_without_a_working_list_reports_how_long_it_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = store()
    attempts: list[int] = []

    async def refused(endpoint: Any, token: str = "") -> dict[str, Any]:
        attempts.append(1)
        raise aiohttp.ClientOSError(111, "Connect call failed")

    monkeypatch.setattr(informer, "_list_raw", refused)
    task = asyncio.get_running_loop().create_task(s.run(None))  # type: ignore[arg-type]
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(attempts) > 3 and not task.done()
    assert s.health(90.0) is None  # not for long yet
    assert s.down_since is not None
    s.down_since = time.monotonic() - 120
    why = s.health(90.0)
    assert why is not None and why.startswith("thing watch down for 120s (last error: ClientOSError")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# --------------------------------------------------------------------------- leader election


class _RefusingLeases:
    """CoordinationV1Api whose every call meets a refused connection (API server down)."""

    async def read_namespaced_lease(self, *args: Any, **kwargs: Any) -> Any:
        raise aiohttp.ClientOSError(111, "Connect call failed")

    create_namespaced_lease = replace_namespaced_lease = read_namespaced_lease


async def test_an_api_server_outage_is_a_failed_lease_attempt_not_the_end_of_the_election() -> None:
    """kubernetes-asyncio's LeaseLock let the connection error escape LeaderElection.run, and
    both replicas (the standby too) exited during an API server restart."""
    now = "2026-01-01 00:00:00"
    async with client.ApiClient() as api:
        lock = ResilientLeaseLock("ip-scheduler", "default", "me", api, timeout=1.0)
    lock.api_instance = _RefusingLeases()
    ok, err = await lock.get("ip-scheduler", "default")
    assert ok is False and isinstance(err, ApiException) and err.status == 503
    record = LeaderElectionRecord("me", "15", now, now)
    assert await lock.create("ip-scheduler", "default", record) is False
    lock.lease_reference = client.V1Lease(spec=client.V1LeaseSpec())
    assert await lock.update("ip-scheduler", "default", record) is False

    async def nothing() -> None:
        return None

    cfg = electionconfig.Config(lock, 15, 10, 2, nothing, nothing)
    assert await leaderelection.LeaderElection(cfg).try_acquire_or_renew() is False


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
