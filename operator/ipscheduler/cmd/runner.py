"""``ipscheduler run``: probes, optional leader election, then the kopf operator.

The probes and ``/metrics`` are served on ``--secure-port`` (HTTPS, delegated
authentication and authorization: :mod:`ipscheduler.cmd.serving`) and, for local
development only, on ``--health-addr`` (plain HTTP, no authentication).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack

from kubernetes_asyncio import client

from ipscheduler.backend.health import HealthState, serve
from ipscheduler.backend.metrics import Metrics
from ipscheduler.cmd.election import LostLeadership, run_elected
from ipscheduler.cmd.kopf_handlers import run_operator
from ipscheduler.cmd.options import RunConfig
from ipscheduler.cmd.serving import auth_middleware, server_context
from ipscheduler.kube.client import load_client_config
from ipscheduler.kube.reviews import DelegatingAuth
from ipscheduler.underlayip.metrics import UnderlayIPMetrics

log = logging.getLogger(__name__)


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory of ``--event-loop`` ``name`` for :class:`asyncio.Runner`:
    ``uvloop.new_event_loop`` for ``uvloop`` (kopf and aiohttp run on it), None (the standard
    library's loop) for ``asyncio``. Raises ValueError for another name."""
    if name == "uvloop":
        import uvloop  # only the run and extender commands need it

        return uvloop.new_event_loop
    if name == "asyncio":
        return None
    raise ValueError(f"unknown event loop {name!r}")


async def main(cfg: RunConfig) -> int:
    """Run until stopped; returns the process exit status (1 after losing the lease)."""
    metrics = Metrics(cfg.scheduler_name)
    UnderlayIPMetrics.on(metrics.registry)  # the wing's series, on a standby too
    health = HealthState(
        metrics=metrics, standby_ready=not cfg.extender_listen
    )  # /metrics from the start: a standby is scraped too
    async with AsyncExitStack() as stack:
        if cfg.secure.port:
            await serve_secure(cfg, health, stack)
        if cfg.health_addr:
            stack.push_async_callback((await serve(health, cfg.health_addr)).cleanup)
        return await _run(cfg, health, metrics)


async def serve_secure(cfg: RunConfig, health: HealthState, stack: AsyncExitStack) -> None:
    """The probes and ``/metrics`` on ``--bind-address:--secure-port`` over HTTPS, each
    request reviewed through the API server; the server and its API client are closed
    with ``stack``. Raises OSError if the port is taken, ssl.SSLError for unusable TLS
    files, and ``ConfigException`` when no kubeconfig can be found."""
    secure = cfg.secure
    ctx = server_context(secure.tls_cert_file, secure.tls_private_key_file, secure.client_ca_file)
    reviews = DelegatingAuth(
        client.ApiClient(await load_client_config(cfg.kubeconfig)),
        token_ttl=secure.token_ttl,
        allow_ttl=secure.allow_ttl,
        deny_ttl=secure.deny_ttl,
    )
    stack.push_async_callback(reviews.close)
    middleware = auth_middleware(reviews, secure.always_allow_paths)
    stack.push_async_callback((await serve(health, secure.address, ctx, [middleware])).cleanup)


async def _run(cfg: RunConfig, health: HealthState, metrics: Metrics) -> int:
    """The operator, elected or not; the exit status (1 after losing the lease)."""
    lease = cfg.election.lease_name
    if not cfg.leader_elect:
        health.role = "leader"
        metrics.set_leader(lease, True)
        await run_operator(cfg, health)
        return 0
    conf = await load_client_config(cfg.kubeconfig)
    async with client.ApiClient(conf) as api_client:

        def on_role(role: str) -> None:
            health.role = role
            metrics.set_leader(lease, role == "leader")

        try:
            await run_elected(
                api_client, cfg.election, lambda: run_operator(cfg, health), on_role, me=cfg.identity
            )
        except LostLeadership as e:
            log.error("%s: exiting", e)
            return 1
    return 0
