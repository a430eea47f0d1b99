"""NetworkTraffic (Score): prefer the nodes whose underlay interface carries the least traffic.

A Score plugin that reads each node's network traffic from Prometheus and gives the
busiest node the lowest score, done as scheduler-plugins' network-aware plugins are
(``kubernetes-sigs/scheduler-plugins``, ``pkg/networkaware`` and trimaran's load-watcher):
the scheduling cycle never waits for Prometheus. A reader in the I/O floor
(:class:`~ipscheduler.kube.prometheus.PrometheusReader`) queries it every ``interval`` in
the background; Score only looks at the last reading, through the
:class:`RateSource` protocol.

Scores, per scheduling cycle (one reading for all the nodes of the cycle):

* the raw score of a node is its transmit + receive rate in bytes per second, from the
  reading (0 for a node missing from it);
* NormalizeScore is linear between the scored nodes that have a rate: the least busy
  scores 100, the busiest 0, ``100 * (busiest - rate) // (busiest - least)``; when all
  carry the same traffic, all score 100;
* **a node missing from the reading** (no series for it, e.g. its node-exporter is down
  or its interface is named differently) scores **0**, as the busiest would: an unknown
  node is not preferred, so a node that stopped reporting does not draw every pod;
* **no reading** (none yet, the last query failed, or the reading is older than
  ``STALE_INTERVALS`` intervals: the refresh stopped) gives **every node 0**: the plugin
  then adds the same to every node and has no say.

The plugin is off by default; a profile enables it with a weight under ``score`` and
gives its :class:`NetworkTrafficArgs` in ``pluginConfig`` (the ``prometheusAddress`` is
required). It imports only the framework.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from string import Template
from typing import Protocol
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from ipscheduler.framework.duration import parse_duration
from ipscheduler.framework.interface import MAX_NODE_SCORE, CycleState, Handle, Status
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NetworkTraffic"

STALE_INTERVALS = 3
"""A reading older than this many refresh intervals is dropped (every node scores 0)."""

DEFAULT_QUERY = (
    "sum by (${nodeLabel}) ("
    'rate(node_network_receive_bytes_total{device="${interface}"}[${rateWindow}])'
    ' + rate(node_network_transmit_bytes_total{device="${interface}"}[${rateWindow}]))'
)
"""The default PromQL: per node, receive + transmit bytes per second of the interface
(node-exporter's counters), summed by the node label. ``${interface}``, ``${nodeLabel}``
and ``${rateWindow}`` are replaced from the args (a configured ``query`` may use them too)."""

_STATE_KEY = "NetworkTraffic/rates"

Reading = tuple[Mapping[str, float], float]
"""``(rates, taken_at)``: node name → transmit + receive bytes per second, and when the
reading was taken (``time.monotonic()`` seconds)."""


class RateSource(Protocol):
    """Where the rates come from: :class:`~ipscheduler.kube.prometheus.PrometheusReader` in
    the scheduler, a stub in tests."""

    def latest(self) -> Reading | None:
        """The last successful reading, or None when there is none (none yet, or the last
        query failed). Must not block: Score calls it."""
        ...


class NetworkTrafficArgs(PluginArgs):
    """``pluginConfig`` args of NetworkTraffic (camelCase in the file).

    Durations are Go durations (``15s``, ``1m``) or plain seconds. Raises (through the
    registry) a ValueError naming the field for a bad URL, a non-positive duration or an
    unknown key.
    """

    prometheus_address: str = Field(alias="prometheusAddress")
    """Base URL of Prometheus' HTTP API (``http://prometheus.monitoring:9090``); the reader
    GETs ``<address>/api/v1/query``."""
    network_interface: str = Field(default="eth0", alias="networkInterface", min_length=1)
    """The underlay interface, node-exporter's ``device`` label."""
    node_label: str = Field(default="instance", alias="nodeLabel", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    """The series label holding the node name (kube-prometheus relabels node-exporter's
    ``instance`` to it)."""
    rate_window: str = Field(default="1m", alias="rateWindow", pattern=r"^[0-9]+(ms|s|m|h|d|w|y)$")
    """The range of ``rate()`` in the default query (a PromQL duration)."""
    query: str | None = None
    """A PromQL instant query returning one sample per node (labelled ``nodeLabel``) in bytes
    per second; None: :data:`DEFAULT_QUERY`. ``${interface}``, ``${nodeLabel}`` and
    ``${rateWindow}`` in it are replaced."""
    interval: float = Field(default=15.0, gt=0)
    """Seconds between two queries (the cache's refresh interval)."""
    query_timeout: float = Field(default=5.0, gt=0, alias="queryTimeout")
    """Seconds one query may take before it counts as failed."""

    @field_validator("prometheus_address")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{value!r} is not an http(s) URL (e.g. http://prometheus:9090)")
        return value.rstrip("/")

    @field_validator("interval", "query_timeout", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        return parse_duration(value, bare_seconds=True) if isinstance(value, str) else value

    def promql(self) -> str:
        """The query to send, with its ``${...}`` placeholders replaced."""
        return Template(self.query or DEFAULT_QUERY).safe_substitute(
            interface=self.network_interface, nodeLabel=self.node_label, rateWindow=self.rate_window
        )

    @property
    def max_age(self) -> float:
        """Seconds after which a reading is stale: :data:`STALE_INTERVALS` intervals."""
        return STALE_INTERVALS * self.interval


def normalize(rates: Mapping[str, float | None]) -> dict[str, int]:
    """Scores ``0..MAX_NODE_SCORE`` of the nodes of ``rates`` (node → bytes/s, None when
    the node has no rate): least busy 100, busiest 0, linear between; equal rates all 100;
    a node without a rate 0."""
    known = [r for r in rates.values() if r is not None]
    if not known:
        return dict.fromkeys(rates, 0)
    low, high = min(known), max(known)
    span = high - low
    out: dict[str, int] = {}
    for node, rate in rates.items():
        if rate is None:
            out[node] = 0
        elif span <= 0:
            out[node] = MAX_NODE_SCORE
        else:
            out[node] = int(MAX_NODE_SCORE * (high - rate) // span)
    return out


class NetworkTraffic:
    """Score: the node's underlay traffic from ``source`` (see the module doc for the
    scores); ``max_age`` seconds bound a reading's age; ``clock`` is the reading's clock."""

    name: str = NAME

    def __init__(
        self, source: RateSource, max_age: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.source = source
        self.max_age = max_age
        self.clock = clock

    def rates(self) -> Mapping[str, float] | None:
        """The source's reading if it is fresh (at most ``max_age`` old), else None."""
        reading = self.source.latest()
        if reading is None:
            return None
        rates, taken_at = reading
        if self.clock() - taken_at > self.max_age:
            return None
        return rates

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Take the reading once for the whole cycle."""
        state.write(_STATE_KEY, self.rates())
        return Status.success()

    def _cycle_rates(self, state: CycleState) -> Mapping[str, float] | None:
        rates: Mapping[str, float] | None = state.memo(_STATE_KEY, self.rates)
        return rates

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """The node's transmit + receive bytes per second (rounded), 0 without a rate."""
        rates = self._cycle_rates(state)
        rate = rates.get(node.name) if rates is not None else None
        return round(rate) if rate is not None and math.isfinite(rate) and rate > 0 else 0

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Rescale in place (see :func:`normalize`): the cycle's reading decides which nodes
        have a rate; no reading gives every node 0."""
        rates = self._cycle_rates(state)
        if rates is None:
            scores.update(dict.fromkeys(scores, 0))
            return
        scores.update(normalize({n: (v if n in rates else None) for n, v in scores.items()}))


def new(args: NetworkTrafficArgs, handle: Handle, source: RateSource) -> NetworkTraffic:
    """NetworkTraffic over ``source`` with ``args``' staleness bound (the factory the
    command's registration wraps: it makes the source from ``args``)."""
    return NetworkTraffic(source, args.max_age)
