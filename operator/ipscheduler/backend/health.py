"""``/healthz``, ``/livez``, ``/readyz`` and ``/metrics`` on a small aiohttp server.

:func:`serve` runs them over HTTPS behind the authentication and authorization
middleware of ``cmd/serving`` (kube-scheduler's secure port, ``--secure-port``), or
over plain HTTP without one (``--health-addr``, local development only).

- ``/healthz`` (and ``/livez``, the same check) is 200 unless the event loop is lagging (a ticker that should
  run every second has not run for ``max_loop_lag`` seconds), a required
  long-running task has ended (:mod:`ipscheduler.backend.supervisor`), a registered
  check fails (an informer without a working LIST+WATCH for longer than the
  watch timeout), or a watch is stalled (the GC sweep saw a pool in the API
  server newer than our cache for longer than the watch timeout). A fully
  blocked loop cannot answer at all, which the probe's own timeout turns into
  a failure.
- ``/metrics``: prometheus_client's handler (text or OpenMetrics, gzip; see
  ``ipscheduler.backend.metrics``), on every replica: a standby's scheduling metrics stay flat.
- ``/readyz`` is 200 once the indexes are loaded and the start-up reconcile
  is done (body ``ok: leader``), and 200 with ``ok: standby`` while waiting
  for the lease; 503 otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ipscheduler.backend.metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class HealthState:
    """Shared, mutable health facts; written by the scheduler, read by the probes."""

    role: str = "starting"  # starting | standby | leader
    standby_ready: bool = True
    """Whether a standby is ready: not in extender mode, where kube-scheduler's Service
    must reach the leader only (a standby does not serve the verbs)."""
    ready: bool = False
    max_loop_lag: float = 10.0
    last_tick: float = field(default_factory=time.monotonic)
    stalled: dict[str, str] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)
    """Required tasks that ended: name → why (written by the supervisor)."""
    checks: dict[str, Callable[[], str | None]] = field(default_factory=dict)
    """Named checks run on every probe: None when fine, else the reason to fail."""
    ticker: asyncio.Task[None] | None = None
    metrics: Metrics | None = None

    def healthy(self) -> tuple[bool, str]:
        """``(ok, reason)``; the reason lists every failing check, sorted by name."""
        lag = time.monotonic() - self.last_tick
        if lag > self.max_loop_lag:
            return False, f"event loop blocked for {lag:.1f}s"
        problems = dict(self.stalled)
        problems.update((name, f"task ended: {why}") for name, why in self.ended.items())
        for name, check in self.checks.items():
            why = check()
            if why is not None:
                problems[name] = why
        if problems:
            return False, "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        if self.role == "standby":
            if not self.standby_ready:
                return False, "standby: the leader serves the extender verbs"
            return True, "ok: standby"
        if self.role == "leader" and self.ready:
            return True, "ok: leader"
        return False, f"not ready ({self.role})"


async def _ticker(state: HealthState) -> None:
    while True:
        state.last_tick = time.monotonic()
        await asyncio.sleep(1.0)


def make_app(state: HealthState, middlewares: Iterable[Any] = ()) -> web.Application:
    """The probe endpoints as an aiohttp application, behind ``middlewares`` (on the
    secure port: ``cmd/serving.auth_middleware``)."""

    async def healthz(_: web.Request) -> web.Response:
        ok, why = state.healthy()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, why = state.readiness()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def metrics(request: web.Request) -> web.StreamResponse:
        if state.metrics is None:
            return web.Response(status=503, text="metrics not ready\n")
        response: web.StreamResponse = await state.metrics.handler(request)
        return response

    app = web.Application(middlewares=list(middlewares))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


async def serve(
    state: HealthState,
    address: str,
    ssl_context: ssl.SSLContext | None = None,
    middlewares: Iterable[Any] = (),
) -> web.AppRunner:
    """Start serving on ``host:port`` (HTTPS with ``ssl_context``, else plain HTTP) behind
    ``middlewares``; returns the runner (call ``cleanup()`` to stop). The first call also
    starts the loop-lag ticker.

    Raises ValueError for a malformed address, OSError if the port is taken.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: expected host:port")
    runner = web.AppRunner(make_app(state, middlewares), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=ssl_context)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    if state.ticker is None:
        state.ticker = asyncio.get_running_loop().create_task(_ticker(state), name="health-ticker")
    scheme = "https" if ssl_context is not None else "http (no authentication)"
    log.info("serving /healthz, /livez, /readyz and /metrics on %s, %s", address, scheme)
    return runner
