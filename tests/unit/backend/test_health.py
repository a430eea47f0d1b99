"""ipscheduler.backend.health: HealthState and the probe endpoints (in-process aiohttp, no network)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp import test_utils

from ipscheduler.backend.health import HealthState, make_app

STALL = {"nodeippools": "watch stalled: cache 120s behind the API server"}


def state(**kw: Any) -> HealthState:
    """A HealthState; ``lag`` sets last_tick that many seconds in the past."""
    lag = kw.pop("lag", 0.0)
    s = HealthState(**kw)
    s.last_tick = time.monotonic() - lag
    return s


# --------------------------------------------------------------------------- healthy()

HEALTHY = [
    ({}, True, "ok"),
    ({"lag": 5.0}, True, "ok"),
    ({"lag": 60.0}, False, "event loop blocked for"),
    ({"lag": 60.0, "max_loop_lag": 120.0}, True, "ok"),
    ({"lag": 5.0, "max_loop_lag": 1.0}, False, "event loop blocked for"),
    ({"stalled": dict(STALL)}, False, "nodeippools: watch stalled: cache 120s behind the API server"),
    ({"stalled": {"b": "two", "a": "one"}}, False, "a: one; b: two"),
    ({"lag": 60.0, "stalled": dict(STALL)}, False, "event loop blocked for"),
    ({"role": "leader", "ready": True}, True, "ok"),
    ({"role": "starting"}, True, "ok"),
    ({"ended": {"garbage-collector": "cancelled"}}, False, "garbage-collector: task ended: cancelled"),
    ({"checks": {"nodes-watch": lambda: None}}, True, "ok"),
    (
        {"checks": {"nodes-watch": lambda: "nodes watch down for 95s (last error: X)"}},
        False,
        "nodes-watch: nodes watch down for 95s (last error: X)",
    ),
    (
        {"checks": {"z-watch": lambda: "down"}, "ended": {"a-task": "failed"}, "stalled": {"m": "stalled"}},
        False,
        "a-task: task ended: failed; m: stalled; z-watch: down",
    ),
]


@pytest.mark.parametrize(
    ("kw", "ok", "why"),
    HEALTHY,
    ids=[
        "fresh-tick",
        "lag-below-max",
        "lag-above-default-max",
        "lag-below-custom-max",
        "lag-above-custom-max",
        "watch-stalled",
        "two-stalls-sorted",
        "lag-reported-first",
        "leader-ready",
        "starting-is-alive",
        "required-task-ended",
        "check-passes",
        "check-fails",
        "every-problem-sorted",
    ],
)
def test_healthy(kw: dict[str, Any], ok: bool, why: str) -> None:
    got_ok, got_why = state(**kw).healthy()
    assert got_ok is ok
    if ok:
        assert got_why == why
    else:
        assert got_why.startswith(why)


def test_healthy_recovers_when_stall_is_cleared() -> None:
    s = state(stalled=dict(STALL))
    assert s.healthy()[0] is False
    s.stalled.pop("nodeippools")
    assert s.healthy() == (True, "ok")


def test_stalled_dicts_are_not_shared_between_states() -> None:
    a, b = HealthState(), HealthState()
    a.stalled["x"] = "y"
    assert b.stalled == {}
    assert b.healthy() == (True, "ok")


# --------------------------------------------------------------------------- readiness()

READINESS = [
    ({}, False, "not ready (starting)"),
    ({"role": "starting", "ready": True}, False, "not ready (starting)"),
    ({"role": "standby"}, True, "ok: standby"),
    ({"role": "standby", "ready": True}, True, "ok: standby"),
    ({"role": "leader"}, False, "not ready (leader)"),
    ({"role": "leader", "ready": True}, True, "ok: leader"),
]


@pytest.mark.parametrize(
    ("kw", "ok", "why"),
    READINESS,
    ids=[
        "default-starting",
        "starting-even-if-ready-flag",
        "standby",
        "standby-ready-flag",
        "leader-not-ready",
        "leader-ready",
    ],
)
def test_readiness(kw: dict[str, Any], ok: bool, why: str) -> None:
    assert state(**kw).readiness() == (ok, why)


# --------------------------------------------------------------------------- HTTP endpoints

ENDPOINTS = [
    ({"role": "leader", "ready": True}, "/healthz", 200, "ok\n"),
    ({"role": "leader", "ready": True}, "/livez", 200, "ok\n"),
    ({"role": "leader", "ready": True}, "/readyz", 200, "ok: leader\n"),
    ({"role": "standby"}, "/readyz", 200, "ok: standby\n"),
    ({"role": "standby"}, "/healthz", 200, "ok\n"),
    ({}, "/readyz", 503, "not ready (starting)\n"),
    ({}, "/healthz", 200, "ok\n"),
    ({"role": "leader"}, "/readyz", 503, "not ready (leader)\n"),
    (
        {"stalled": dict(STALL)},
        "/healthz",
        503,
        "nodeippools: watch stalled: cache 120s behind the API server\n",
    ),
    (
        {"stalled": dict(STALL)},
        "/livez",
        503,
        "nodeippools: watch stalled: cache 120s behind the API server\n",
    ),
    ({"role": "leader", "ready": True, "stalled": dict(STALL)}, "/readyz", 200, "ok: leader\n"),
    ({"lag": 60.0}, "/healthz", 503, "event loop blocked for "),
    ({"lag": 60.0}, "/livez", 503, "event loop blocked for "),
]


@pytest.mark.parametrize(
    ("kw", "path", "status", "body"),
    ENDPOINTS,
    ids=[
        "healthz-ok",
        "livez-ok",
        "readyz-leader",
        "readyz-standby",
        "healthz-standby",
        "readyz-starting",
        "healthz-starting",
        "readyz-leader-not-ready",
        "healthz-stalled",
        "livez-stalled",
        "readyz-unaffected-by-stall",
        "healthz-loop-lag",
        "livez-loop-lag",
    ],
)
async def test_endpoints(kw: dict[str, Any], path: str, status: int, body: str) -> None:
    s = state(**kw)
    async with test_utils.TestClient(test_utils.TestServer(make_app(s), host="127.0.0.1")) as client:
        resp = await client.get(path)
        text = await resp.text()
    assert resp.status == status
    if body.endswith("\n"):
        assert text == body
    else:
        assert text.startswith(body)
        assert text.endswith("s\n")


async def test_endpoints_follow_state_changes() -> None:
    s = state()
    async with test_utils.TestClient(test_utils.TestServer(make_app(s), host="127.0.0.1")) as client:
        assert (await client.get("/readyz")).status == 503
        s.role = "standby"
        assert (await client.get("/readyz")).status == 200
        s.role, s.ready = "leader", True
        resp = await client.get("/readyz")
        assert (resp.status, await resp.text()) == (200, "ok: leader\n")
        s.stalled.update(STALL)
        assert (await client.get("/healthz")).status == 503
        s.stalled.clear()
        assert (await client.get("/healthz")).status == 200


async def test_unknown_path_is_404() -> None:
    async with test_utils.TestClient(test_utils.TestServer(make_app(state()), host="127.0.0.1")) as client:
        assert (await client.get("/metricz")).status == 404


def test_a_standby_is_not_ready_in_extender_mode() -> None:
    """kube-scheduler's Service must reach the leader only: a standby serves no verbs."""
    s = HealthState(role="standby", standby_ready=False)
    assert s.readiness() == (False, "standby: the leader serves the extender verbs")
    s.role, s.ready = "leader", True
    assert s.readiness() == (True, "ok: leader")
