"""Active/passive replicas: leader election on a coordination.k8s.io Lease.

Uses kubernetes-asyncio's ``LeaderElection`` with a ``LeaseLock`` and
kube-scheduler's defaults (lease 15 s, renew deadline 10 s, retry 2 s): a
standby takes over at most one lease duration (plus a retry period) after the
leader stops renewing. Like kube-scheduler, a replica that loses the lease
exits (status 1) so that it restarts clean as a standby.

A leader that stops (SIGTERM, SIGINT) releases the Lease as client-go's
``ReleaseOnCancel`` does (``leaderelection.go`` ``release()``): holder cleared,
``leaseDurationSeconds: 1``; a standby then takes it on its next retry instead of
waiting out the lease duration. A standby also watches its Lease (``list``/``watch``
on leases in its namespace) and tries at once when the holder is cleared, instead of at
its next retry-period tick (:class:`PromptLeaderElection`); without those grants it
just retries every retry period, as kube-scheduler does.

Correctness never depends on the lease: every allocation is a
compare-and-swap, so two schedulers running at once still never hand out one
address twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from ipscheduler.framework import klog

log = logging.getLogger(__name__)

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass
class ElectionSettings:
    """Lease name/namespace and timings (whole seconds, as the Lease API stores them)."""

    lease_name: str = "ip-scheduler"
    lease_namespace: str | None = None
    lease_duration: int = 15
    """Whole seconds (the Lease's ``leaseDurationSeconds``)."""
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What kube-scheduler's validation would refuse in these timings
        (``pkg/scheduler/apis/config/validation``, client-go ``NewLeaderElector``): empty
        when valid."""
        out = []
        if self.lease_duration <= self.renew_deadline:
            out.append("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            out.append(
                f"--leader-elect-renew-deadline must be greater than {JITTER_FACTOR} x "
                "--leader-elect-retry-period"
            )
        if self.retry_period < 1:
            out.append("--leader-elect-retry-period must be at least 1s")
        return out

    def namespace(self) -> str:
        """The configured namespace, else the pod's own (in-cluster), else kube-system."""
        if self.lease_namespace:
            return self.lease_namespace
        try:
            return SA_NAMESPACE_FILE.read_text().strip() or "kube-system"
        except OSError:
            return "kube-system"


def identity() -> str:
    """``<hostname>_<random>``, unique per process, as client-go builds it."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor`` (and kubernetes-asyncio's ``Config.jitter_factor``)."""


class ResilientLeaseLock(LeaseLock):
    """kubernetes-asyncio's LeaseLock, made to fail like client-go's on a transport error.

    Upstream catches only ApiException: a refused or reset connection (an API server
    restart) escapes ``LeaderElection.run`` and ended the election for the standby too,
    which then exited. Here such an error, or a call slower than ``timeout`` seconds (a
    stalled connection would otherwise keep a leader that cannot renew "leading"), is an
    ordinary failed attempt: a standby retries every retry period; a leader that cannot
    renew within the renew deadline loses the lease and exits, as kube-scheduler does.
    """

    def __init__(self, name: str, namespace: str, identity: str, api_client: Any, timeout: float) -> None:
        super().__init__(name, namespace, identity, api_client)
        self.timeout = timeout

    async def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        try:
            return await asyncio.wait_for(super().get(name, namespace), self.timeout)
        except TRANSPORT_ERRORS as e:
            err = ApiException(status=503, reason=f"{type(e).__name__}: {e}")
            err.body = json.dumps({"code": 503, "message": str(e)}).encode()
            return False, err

    async def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        try:
            return bool(
                await asyncio.wait_for(super().create(name, namespace, election_record), self.timeout)
            )
        except TRANSPORT_ERRORS as e:
            log.warning("creating lease %s/%s failed: %r", namespace, name, e)
            return False

    async def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        """Upstream's update, without its traceback when another replica wrote first: a 409
        is the ordinary loss of a race (two standbys taking a released or expired lease),
        one line at ``V(2)``."""
        assert self.lease_reference is not None, "update before get"
        self.lease_reference.spec = self.update_lease(updated_record, self.lease_reference.spec)
        try:
            await asyncio.wait_for(
                self.api_instance.replace_namespaced_lease(
                    name=name, namespace=namespace, body=self.lease_reference
                ),
                self.timeout,
            )
            return True
        except ApiException as e:
            if e.status == 409:
                log.log(
                    klog.V2, "lease %s/%s: another replica wrote it first (409 Conflict)", namespace, name
                )
            else:
                log.warning("updating lease %s/%s failed: %s %s", namespace, name, e.status, e.reason)
            return False
        except TRANSPORT_ERRORS as e:
            log.warning("renewing lease %s/%s failed: %r", namespace, name, e)
            return False

    async def release(self) -> bool:
        """Give the Lease up if this replica holds it (client-go ``release()``): holder
        cleared, ``leaseDurationSeconds: 1``, renew and acquire time now, transitions kept;
        a compare-and-swap on the Lease's resourceVersion. True when released; False when
        another replica holds it or the write failed (logged; the lease then expires)."""
        try:
            lease = await asyncio.wait_for(
                self.api_instance.read_namespaced_lease(self.name, self.namespace), self.timeout
            )
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return False
            now = datetime.datetime.now(datetime.UTC)
            lease.spec.holder_identity = None  # type: ignore[assignment]  # the API's null
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = now
            lease.spec.acquire_time = now
            await asyncio.wait_for(
                self.api_instance.replace_namespaced_lease(
                    name=self.name, namespace=self.namespace, body=lease
                ),
                self.timeout,
            )
        except (ApiException, *TRANSPORT_ERRORS) as e:
            log.warning("releasing lease %s/%s failed (it expires instead): %r", self.namespace, self.name, e)
            return False
        log.info("released lease %s/%s", self.namespace, self.name)
        return True


class PromptLeaderElection(leaderelection.LeaderElection):
    """kubernetes-asyncio's ``LeaderElection`` whose standby loop tries again as soon as
    ``nudge`` is set (the Lease was released) instead of sleeping a whole retry period."""

    def __init__(self, config: electionconfig.Config, nudge: asyncio.Event) -> None:
        super().__init__(config)
        self.nudge = nudge

    async def acquire(self) -> bool:
        """Try; then wait for the retry period or a nudge, whichever comes first."""
        retry_period = self.election_config.retry_period
        while True:
            self.nudge.clear()
            if await self.try_acquire_or_renew():
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.nudge.wait(), retry_period)


async def watch_for_release(
    api_client: client.ApiClient, settings: ElectionSettings, nudge: asyncio.Event
) -> None:
    """Set ``nudge`` whenever the Lease shows no holder (released). Runs until cancelled; a
    failed or refused watch (no ``watch`` grant) is retried after the retry period, the
    refusal said once at ``V(2)``: the election then simply retries on its own schedule."""
    coordination = client.CoordinationV1Api(api_client)
    selector = f"metadata.name={settings.lease_name}"
    said = False
    while True:
        try:
            async with watch.Watch() as w:
                async for event in w.stream(
                    coordination.list_namespaced_lease,
                    settings.namespace(),
                    field_selector=selector,
                    timeout_seconds=300,
                ):
                    lease = event.get("object")
                    spec = getattr(lease, "spec", None)
                    if spec is not None and not spec.holder_identity:
                        nudge.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if not said:
                log.log(
                    klog.V2,
                    "not watching lease %s/%s (%r): retrying every retry period",
                    settings.namespace(),
                    settings.lease_name,
                    e,
                )
                said = True
        await asyncio.sleep(settings.retry_period)


class LostLeadership(Exception):
    """The lease could not be renewed; the process should exit."""


async def run_elected(
    api_client: client.ApiClient,
    settings: ElectionSettings,
    lead: Callable[[], Awaitable[None]],
    on_role: Callable[[str], None] = lambda role: None,
    me: str = "",
) -> None:
    """Wait for the lease, then run ``lead()`` while holding it.

    ``on_role`` is told "standby" at once and "leader" on acquisition.
    ``me``: the holder identity (default: a new :func:`identity`).
    Raises LostLeadership when the lease is lost (or the election itself
    fails: the process then exits and restarts clean, as kube-scheduler
    does); re-raises if ``lead()`` fails; returns when ``lead()`` returns,
    after releasing the Lease (``ReleaseOnCancel``).
    """
    me = me or identity()
    lost = asyncio.Event()
    leading: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def started() -> None:
        watcher.cancel()  # only a standby needs it
        log.info("acquired lease %s/%s as %s", settings.namespace(), settings.lease_name, me)
        on_role("leader")
        try:
            await lead()
            if not leading.done():
                leading.set_result(None)
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            if not leading.done():
                leading.set_exception(e)

    async def stopped() -> None:
        lost.set()

    lock = ResilientLeaseLock(
        settings.lease_name, settings.namespace(), me, api_client, timeout=settings.renew_deadline
    )
    config = electionconfig.Config(
        lock,
        lease_duration=settings.lease_duration,
        renew_deadline=settings.renew_deadline,
        retry_period=settings.retry_period,
        onstarted_leading=started,
        onstopped_leading=stopped,
    )
    on_role("standby")
    log.info("waiting for lease %s/%s (identity %s)", settings.namespace(), settings.lease_name, me)
    nudge = asyncio.Event()
    election = asyncio.create_task(PromptLeaderElection(config, nudge).run(), name="leader-election")
    watcher = asyncio.create_task(watch_for_release(api_client, settings, nudge), name="lease-watch")
    lost_wait = asyncio.create_task(lost.wait())
    try:
        waiters: set[asyncio.Future[Any]] = {election, lost_wait, leading}
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if leading in done:
            leading.result()  # re-raise a failure of lead()
            election.cancel()  # no renewal may follow the release
            await asyncio.gather(election, return_exceptions=True)
            await lock.release()
            return
        if election in done and not election.cancelled() and election.exception() is not None:
            raise LostLeadership(f"leader election failed: {election.exception()!r}")
        if lost.is_set() or election in done:
            raise LostLeadership(f"lost lease {settings.namespace()}/{settings.lease_name}")
    finally:
        for t in (election, lost_wait, watcher):
            t.cancel()
        await asyncio.gather(election, lost_wait, watcher, return_exceptions=True)
