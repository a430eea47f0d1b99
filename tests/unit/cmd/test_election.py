"""cmd/election: an API server outage is a failed lease attempt, not the end of the election."""

from __future__ import annotations

from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord

from ipscheduler.cmd.election import ResilientLeaseLock

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
