"""PrometheusReader: the per-node rates the NetworkTraffic plugin scores, read from Prometheus'
HTTP API in the background.

One instant query (``GET <address>/api/v1/query?query=...``) every ``interval`` seconds; the
answer, a vector with one sample per node (the node's name in the ``node_label`` label, the
value in bytes per second), becomes the reading :meth:`PrometheusReader.latest` returns
without I/O (the plugin's :class:`~ipscheduler.plugins.networktraffic.RateSource`).

A failed query (Prometheus unreachable, an error answer, a timeout, a body that is not a
vector) drops the reading: until the next query succeeds, :meth:`~PrometheusReader.latest`
is None and the plugin scores every node 0. Each failure calls ``on_failure`` (the
scheduler counts them in ``ipscheduler_network_traffic_query_failures_total``); one warning
is logged when a streak of failures starts and one line when the queries succeed again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

QUERY_PATH = "/api/v1/query"


class PrometheusError(Exception):
    """A query that gave no usable vector; the message says why in one line."""


def parse_vector(body: Any, node_label: str) -> dict[str, float]:
    """Node name → value of a successful instant-query answer (Prometheus' JSON, decoded).

    Samples without ``node_label`` and NaN/Inf values are left out; negative values count
    as 0; two samples of one node are added up. Raises PrometheusError when ``body`` is an
    error answer or its result is not a vector.
    """
    if not isinstance(body, dict):
        raise PrometheusError("the answer is not a JSON object")
    if body.get("status") != "success":
        kind, why = body.get("errorType") or "error", body.get("error") or body.get("status")
        raise PrometheusError(f"{kind}: {why}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise PrometheusError(f"the query gave a {kind or 'malformed'} result, not a vector")
    out: dict[str, float] = {}
    for sample in data.get("result") or ():
        try:
            node = sample["metric"][node_label]
            value = float(sample["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if not isinstance(node, str) or not math.isfinite(value):
            continue
        out[node] = out.get(node, 0.0) + max(value, 0.0)
    return out


@dataclass(eq=False)
class PrometheusReader:
    """Runs ``query`` against the Prometheus at ``address`` (a base URL) every ``interval``
    seconds (:meth:`run`), each query bounded by ``timeout`` seconds, and keeps the last
    answer as node name (label ``node_label``) → value. ``clock`` stamps the readings
    (monotonic seconds)."""

    address: str
    query: str
    node_label: str
    interval: float
    timeout: float
    clock: Callable[[], float] = time.monotonic
    on_failure: Callable[[], object] = lambda: None
    """Called once per failed query (the failure counter)."""
    url: str = field(init=False)
    """``address`` with the query path: where the queries go."""
    _reading: tuple[Mapping[str, float], float] | None = field(default=None, init=False, repr=False)
    _failing: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.url = self.address.rstrip("/") + QUERY_PATH

    def latest(self) -> tuple[Mapping[str, float], float] | None:
        """``(node → value, taken_at)`` of the last query if it succeeded, else None. No I/O."""
        return self._reading

    async def query_once(self, session: aiohttp.ClientSession) -> dict[str, float]:
        """One query: node → value. Raises PrometheusError (unreachable, timed out, an HTTP
        or Prometheus error, not a vector)."""
        try:
            async with asyncio.timeout(self.timeout):
                async with session.get(self.url, params={"query": self.query}) as resp:
                    text = await resp.text()
                    status = resp.status
        except TimeoutError:
            raise PrometheusError(f"no answer within {self.timeout:g}s") from None
        except aiohttp.ClientError as e:
            raise PrometheusError(f"{type(e).__name__}: {e}") from e
        try:
            body = json.loads(text)
        except ValueError:
            raise PrometheusError(f"HTTP {status}: {text[:200].strip()!r}") from None
        vector = parse_vector(body, self.node_label)
        if status != 200:
            raise PrometheusError(f"HTTP {status} with a successful body")
        return vector

    async def refresh(self, session: aiohttp.ClientSession) -> bool:
        """Query once and keep the answer (True), or drop the reading, count the failure and
        log it if it starts a streak (False). Never raises but for cancellation."""
        try:
            rates = await self.query_once(session)
        except PrometheusError as e:
            self._reading = None
            self.on_failure()
            if not self._failing:
                log.warning(
                    "NetworkTraffic: cannot read node traffic from %s: %s; every node scores 0 "
                    "until a query succeeds",
                    self.url,
                    e,
                )
            self._failing = True
            return False
        self._reading = (rates, self.clock())
        if self._failing:
            log.info("NetworkTraffic: %s answers again (%d nodes)", self.url, len(rates))
        self._failing = False
        return True

    async def run(self) -> None:
        """Refresh every ``interval`` seconds until cancelled (one HTTP session throughout)."""
        async with aiohttp.ClientSession() as session:
            while True:
                started = time.monotonic()
                await self.refresh(session)
                await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - started)))
