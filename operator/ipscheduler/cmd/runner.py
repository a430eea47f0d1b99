"""``ipscheduler run``: probes, optional leader election, then the kopf operator."""

from __future__ import annotations

import logging

from kubernetes_asyncio import client

from ipscheduler.cmd.election import LostLeadership, run_elected
from ipscheduler.cmd.kopf_handlers import run_operator
from ipscheduler.cmd.options import RunConfig
from ipscheduler.health import HealthState, serve
from ipscheduler.kube.client import load_client_config
from ipscheduler.metrics import Metrics

log = logging.getLogger(__name__)


async def main(cfg: RunConfig) -> int:
    """Run until stopped; returns the process exit status (1 after losing the lease)."""
    metrics = Metrics(cfg.scheduler_name)
    health = HealthState(
        metrics=metrics, standby_ready=not cfg.extender_listen
    )  # /metrics from the start: a standby is scraped too
    runner = await serve(health, cfg.health_addr) if cfg.health_addr else None
    lease = cfg.election.lease_name
    try:
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
    finally:
        if runner is not None:
            await runner.cleanup()
