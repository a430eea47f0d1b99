"""``ipscheduler extender``: kube-scheduler's extender protocol over HTTP or HTTPS (aiohttp).

kube-scheduler POSTs JSON to ``<urlPrefix>/<verb>`` (``pkg/scheduler/extender.go``,
``send``): ``/filter``, ``/prioritize``, ``/bind``, ``/preempt``, as configured in its
``KubeSchedulerConfiguration.extenders[]`` (``deploy/extender/``). Each route decodes the
body into the wire types of :mod:`ipscheduler.framework.extender`, runs the verb of
:class:`~ipscheduler.scheduler.extender.ExtenderVerbs` and answers 200 with the result;
a body that cannot be decoded is answered 400 with the reason in ``Error`` (filter,
bind) or as text. The server runs while this replica leads (it is part of the operator),
so kube-scheduler's Service reaches the leader only (a standby is not ready in this mode).
"""

from __future__ import annotations

import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from ipscheduler.backend.metrics import Metrics
from ipscheduler.framework.extender import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
)
from ipscheduler.scheduler.extender import ExtenderVerbs

log = logging.getLogger(__name__)

VERBS = ("filter", "prioritize", "bind", "preempt")


def make_app(verbs: ExtenderVerbs, metrics: Metrics | None = None) -> web.Application:
    """The four verbs as POST routes (``/filter``...) of an aiohttp application; each request
    is counted and timed in ``metrics`` when given."""

    async def decode(request: web.Request) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"the body is not JSON: {e}") from None

    def route(
        verb: str, handle: Callable[[Any], Awaitable[Any]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            started = time.perf_counter()
            try:
                body = await decode(request)
                answer = await handle(body)
                result = "error" if isinstance(answer, dict) and answer.get("Error") else "ok"
                response = web.json_response(answer)
            except (ValueError, ValidationError) as e:
                result = "bad_request"
                response = web.json_response({"Error": f"invalid {verb} request: {e}"}, status=400)
            if metrics is not None:
                metrics.observe_extender(verb, result, time.perf_counter() - started)
            return response

        return handler

    async def filter_(body: Any) -> Any:
        result: ExtenderFilterResult = verbs.filter(ExtenderArgs.model_validate(body))
        return result.to_wire()

    async def prioritize(body: Any) -> Any:
        return [h.to_wire() for h in verbs.prioritize(ExtenderArgs.model_validate(body))]

    async def bind(body: Any) -> Any:
        return (await verbs.bind(ExtenderBindingArgs.model_validate(body))).to_wire()

    async def preempt(body: Any) -> Any:
        return verbs.preempt(ExtenderPreemptionArgs.model_validate(body)).to_wire()

    app = web.Application(client_max_size=64 * 1024**2)  # a full NodeList of 5000 nodes
    for verb, handle in zip(VERBS, (filter_, prioritize, bind, preempt), strict=True):
        app.router.add_post(f"/{verb}", route(verb, handle))
    return app


async def serve(
    verbs: ExtenderVerbs,
    address: str,
    metrics: Metrics | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> web.AppRunner:
    """Serve the verbs on ``host:port``, over HTTPS with ``ssl_context`` (kube-scheduler's
    ``enableHTTPS``; see :func:`ipscheduler.cmd.serving.server_context`, which can demand a
    client certificate); returns the runner (``cleanup()`` stops it).
    Raises ValueError for a malformed address, OSError if the port is taken."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: expected host:port")
    runner = web.AppRunner(make_app(verbs, metrics), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=ssl_context).start()
    scheme = "https" if ssl_context is not None else "http"
    log.info("serving the extender verbs (%s) on %s, %s", ", ".join(f"/{v}" for v in VERBS), address, scheme)
    return runner
