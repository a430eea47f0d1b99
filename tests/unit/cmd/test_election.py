"""cmd/election: an API server outage is a failed lease attempt, not the end of the election."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from ipscheduler.cmd.election import PromptLeaderElection, ResilientLeaseLock

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


class _Leases:
    """An in-memory Lease API: read, replace (resourceVersion CAS) and their calls."""

    def __init__(self, holder: str | None) -> None:
        self.lease = client.V1Lease(
            metadata=client.V1ObjectMeta(name="l", namespace="ns", resource_version="1"),
            spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15),
        )
        self.replaced: list[client.V1Lease] = []

    async def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        return self.lease

    async def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        self.replaced.append(body)
        self.lease = body
        return body


async def test_release_clears_the_holder_of_our_own_lease_only() -> None:
    lock = ResilientLeaseLock("l", "ns", "me", None, timeout=1)
    ours = _Leases("me")
    lock.api_instance = ours
    assert await lock.release() is True
    spec = ours.replaced[0].spec
    assert (spec.holder_identity, spec.lease_duration_seconds) == (None, 1)
    theirs = _Leases("someone-else")
    lock.api_instance = theirs
    assert await lock.release() is False and theirs.replaced == []


async def test_a_nudged_standby_tries_again_at_once_not_after_the_retry_period() -> None:
    tries: list[float] = []
    loop = asyncio.get_running_loop()

    async def try_acquire_or_renew() -> bool:
        tries.append(loop.time())
        return len(tries) > 1

    async def noop() -> None:
        pass

    config = electionconfig.Config(
        ResilientLeaseLock("l", "ns", "me", None, timeout=1), 60, 30, 20, noop, noop
    )
    nudge = asyncio.Event()
    election = PromptLeaderElection(config, nudge)
    election.try_acquire_or_renew = try_acquire_or_renew  # type: ignore[method-assign]
    task = asyncio.create_task(election.acquire())
    await asyncio.sleep(0.05)
    nudge.set()  # the Lease was released: no waiting out the 20 s retry period
    assert await asyncio.wait_for(task, timeout=5) is True
    assert len(tries) == 2
