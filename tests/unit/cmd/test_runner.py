"""cmd/runner: ``ipscheduler run`` — the wing's series served from the start, the role and the
leader gauge the operator runs under, and the exit status (1 once the lease is lost). The
operator, the election and the API client are stand-ins here; they have their own tests."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from ipscheduler.backend.health import HealthState
from ipscheduler.backend.metrics import Metrics
from ipscheduler.cmd import runner
from ipscheduler.cmd.election import LostLeadership
from ipscheduler.cmd.options import RunConfig, SecureServing

LOCAL = RunConfig(secure=SecureServing(port=0))
"""Nothing served: no HTTPS port, no plain health address."""


def leader_gauge(health: HealthState) -> float | None:
    assert health.metrics is not None
    return health.metrics.registry.get_sample_value("leader_election_master_status", {"name": "ip-scheduler"})


class Operator:
    """run_operator's stand-in: what it saw when it ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, float | None, float | None]] = []

    async def __call__(self, cfg: RunConfig, health: HealthState) -> None:
        assert health.metrics is not None
        wing = health.metrics.registry.get_sample_value("ipscheduler_cas_conflicts_total")
        self.ran.append((health.role, leader_gauge(health), wing))


async def test_without_election_the_operator_runs_as_leader_with_the_wings_series(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator = Operator()
    monkeypatch.setattr(runner, "run_operator", operator)
    assert await runner.main(LOCAL) == 0
    assert operator.ran == [("leader", 1.0, 0.0)]


@pytest.mark.parametrize(
    ("lost", "status"),
    [(False, 0), (True, 1)],
    ids=["stopped-as-leader", "the-lease-lost"],
)
async def test_an_elected_replica_follows_its_role_and_exits_1_once_the_lease_is_lost(
    monkeypatch: pytest.MonkeyPatch, lost: bool, status: int
) -> None:
    operator = Operator()
    roles: list[tuple[str, str, float | None]] = []
    health = HealthState(metrics=Metrics("ip-scheduler"))

    async def load_client_config(kubeconfig: str | None) -> Configuration:
        return Configuration(host="https://127.0.0.1:1")

    async def run_elected(api_client: Any, settings: Any, lead: Any, on_role: Any, me: str = "") -> None:
        for role in ("standby", "leader"):
            on_role(role)
            roles.append((role, health.role, leader_gauge(health)))
        await lead()
        if lost:
            on_role("standby")
            raise LostLeadership("lease ip-scheduler lost")

    monkeypatch.setattr(runner, "run_operator", operator)
    monkeypatch.setattr(runner, "load_client_config", load_client_config)
    monkeypatch.setattr(runner, "run_elected", run_elected)
    cfg = dataclasses.replace(LOCAL, leader_elect=True)
    assert health.metrics is not None
    assert await runner._run(cfg, health, health.metrics) == status
    assert roles == [("standby", "standby", 0.0), ("leader", "leader", 1.0)]
    assert [ran[:2] for ran in operator.ran] == [("leader", 1.0)]
