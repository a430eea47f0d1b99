"""kube/prometheus: PrometheusReader against a real aiohttp server on 127.0.0.1 that answers as
Prometheus' ``/api/v1/query`` does (vectors, error answers, silence), and parse_vector."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import test_utils, web

from ipscheduler.kube.prometheus import PrometheusError, PrometheusReader, parse_vector
from tests.builders import free_port

QUERY = 'sum by (instance) (rate(node_network_receive_bytes_total{device="eth0"}[1m]))'


def vector(*samples: tuple[dict[str, str], str]) -> dict[str, Any]:
    """A successful instant-query answer with these ``(labels, value)`` samples."""
    result = [{"metric": labels, "value": [1700000000.5, value]} for labels, value in samples]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def node(name: str, value: str) -> tuple[dict[str, str], str]:
    return {"instance": name}, value


# --------------------------------------------------------------------------- parse_vector

PARSE_CASES: list[tuple[str, Any, dict[str, float]]] = [
    ("two-nodes", vector(node("node-1", "10.5"), node("node-2", "0")), {"node-1": 10.5, "node-2": 0.0}),
    ("empty-vector", vector(), {}),
    ("without-the-label-left-out", vector(({"job": "x"}, "3"), node("n", "1")), {"n": 1.0}),
    ("nan-and-inf-left-out", vector(node("a", "NaN"), node("b", "+Inf"), node("c", "2")), {"c": 2.0}),
    ("negative-is-0", vector(node("a", "-4")), {"a": 0.0}),
    ("same-node-added-up", vector(node("a", "1.5"), ({"instance": "a", "device": "x"}, "2")), {"a": 3.5}),
    ("malformed-sample-left-out", {**vector(node("a", "1")), "data": {"resultType": "vector", "result": [
        {"metric": {"instance": "a"}}, {"metric": {"instance": "b"}, "value": [1, "x"]},
        {"metric": {"instance": "c"}, "value": [1, "7"]}]}}, {"c": 7.0}),
]  # fmt: skip


@pytest.mark.parametrize(("body", "want"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES])
def test_parse_vector(body: Any, want: dict[str, float]) -> None:
    assert parse_vector(body, "instance") == want


PARSE_ERRORS: list[tuple[str, Any, str]] = [
    ("error-answer", {"status": "error", "errorType": "bad_data", "error": "parse error"}, "bad_data: parse"),
    ("matrix", {"status": "success", "data": {"resultType": "matrix", "result": []}}, "a matrix result"),
    ("no-data", {"status": "success"}, "a malformed result"),
    ("not-an-object", [1, 2], "not a JSON object"),
]


@pytest.mark.parametrize(("body", "error"), [c[1:] for c in PARSE_ERRORS], ids=[c[0] for c in PARSE_ERRORS])
def test_parse_vector_errors(body: Any, error: str) -> None:
    with pytest.raises(PrometheusError, match=error):
        parse_vector(body, "instance")


# --------------------------------------------------------------------------- over HTTP

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Prom:
    """A fake Prometheus on 127.0.0.1: ``handler`` answers ``/api/v1/query``; the queries
    it got are in ``queries``."""

    def __init__(self) -> None:
        self.handler: Handler = self.ok
        self.answer: Any = vector(node("node-1", "100"), node("node-2", "5"))
        self.queries: list[str] = []
        app = web.Application()
        app.router.add_get("/api/v1/query", self._dispatch)
        self.server = test_utils.TestServer(app, host="127.0.0.1")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.queries.append(request.query.get("query", ""))
        return await self.handler(request)

    async def ok(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.answer)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


@pytest.fixture
async def prom() -> AsyncIterator[Prom]:
    p = Prom()
    await p.server.start_server()
    yield p
    await p.server.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


class Failures:
    def __init__(self) -> None:
        self.n = 0

    def inc(self) -> None:
        self.n += 1


def reader(address: str, timeout: float = 2.0) -> tuple[PrometheusReader, Failures]:
    r = PrometheusReader(address + "/", QUERY, "instance", interval=0.05, timeout=timeout, clock=lambda: 42.0)
    failures = Failures()
    r.on_failure = failures.inc
    return r, failures


async def test_a_vector_becomes_the_reading(prom: Prom, session: aiohttp.ClientSession) -> None:
    r, failures = reader(prom.address)
    assert r.latest() is None
    assert await r.refresh(session)
    assert r.latest() == ({"node-1": 100.0, "node-2": 5.0}, 42.0)
    assert prom.queries == [QUERY]
    assert failures.n == 0


async def error_answer(request: web.Request) -> web.StreamResponse:
    body = {"status": "error", "errorType": "bad_data", "error": 'parse error at char 5: unexpected "}"'}
    return web.json_response(body, status=400)


async def unavailable(request: web.Request) -> web.StreamResponse:
    return web.Response(status=503, text="Service Unavailable")


async def not_found(request: web.Request) -> web.StreamResponse:
    return web.Response(status=404, text="404 page not found")


async def scalar(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}})


async def slow(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(5)
    return web.json_response(vector())


FAILURE_CASES: list[tuple[str, Handler, float, str]] = [
    ("error-status-400", error_answer, 2.0, "bad_data: parse error"),
    ("http-503-text", unavailable, 2.0, "HTTP 503: 'Service Unavailable'"),
    ("http-404-wrong-path", not_found, 2.0, "HTTP 404"),
    ("not-a-vector", scalar, 2.0, "a scalar result, not a vector"),
    ("timeout", slow, 0.2, "no answer within 0.2s"),
]


@pytest.mark.parametrize(
    ("handler", "seconds", "error"), [c[1:] for c in FAILURE_CASES], ids=[c[0] for c in FAILURE_CASES]
)
async def test_a_failed_query_drops_the_reading_and_counts(
    prom: Prom,
    session: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    handler: Handler,
    seconds: float,
    error: str,
) -> None:
    r, failures = reader(prom.address, seconds)
    assert await r.refresh(session)
    prom.handler = handler
    with pytest.raises(PrometheusError, match=error):
        await r.query_once(session)
    with caplog.at_level(logging.WARNING, logger="ipscheduler.kube.prometheus"):
        assert not await r.refresh(session)
    assert r.latest() is None
    assert failures.n == 1
    assert error in caplog.text


async def test_unreachable_counts_a_failure(session: aiohttp.ClientSession) -> None:
    r, failures = reader(f"http://127.0.0.1:{free_port()}")
    assert not await r.refresh(session)
    assert r.latest() is None
    assert failures.n == 1
    with pytest.raises(PrometheusError, match="ClientConnectorError"):
        await r.query_once(session)


async def test_one_warning_per_failure_streak(
    prom: Prom, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    r, failures = reader(prom.address)
    caplog.set_level(logging.INFO, logger="ipscheduler.kube.prometheus")
    prom.handler = unavailable
    for _ in range(3):
        assert not await r.refresh(session)
    prom.handler = prom.ok
    assert await r.refresh(session)
    prom.handler = unavailable
    assert not await r.refresh(session)
    assert failures.n == 4
    levels = [(rec.levelname, rec.getMessage().split(":")[0]) for rec in caplog.records]
    assert levels == [(level, "NetworkTraffic") for level in ("WARNING", "INFO", "WARNING")]
    assert "answers again (2 nodes)" in caplog.records[1].getMessage()


async def test_run_refreshes_every_interval_until_cancelled(prom: Prom) -> None:
    r, _ = reader(prom.address)
    task = asyncio.create_task(r.run())
    try:
        for _ in range(100):
            if len(prom.queries) >= 3:
                break
            await asyncio.sleep(0.02)
        assert len(prom.queries) >= 3
        assert r.latest() is not None
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
