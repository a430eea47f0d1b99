"""plugins/networktraffic: NetworkTraffic Score + NormalizeScore over a stub rate source, its
args, and the staleness bound (no server; the Prometheus reader: tests/unit/kube/test_prometheus.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from ipscheduler.framework.interface import CycleState, PreScorePlugin, ScorePlugin
from ipscheduler.framework.registry import with_plugin
from ipscheduler.framework.types import NodeInfo
from ipscheduler.plugins import networktraffic
from ipscheduler.plugins.networktraffic import NetworkTraffic, NetworkTrafficArgs, Reading
from tests.builders import node as make_node
from tests.builders import pod_info
from tests.unit.plugins.cycle import assert_plugin, run_score

NOW = 1000.0
ADDRESS = "http://127.0.0.1:9090"


class Stub:
    """A rate source whose reading the test sets."""

    def __init__(self, rates: Mapping[str, float] | None, age: float = 0.0) -> None:
        self.reading: Reading | None = None if rates is None else (rates, NOW - age)

    def latest(self) -> Reading | None:
        return self.reading


def plugin(rates: Mapping[str, float] | None, age: float = 0.0, max_age: float = 45.0) -> NetworkTraffic:
    return NetworkTraffic(Stub(rates, age), max_age, clock=lambda: NOW)


def nodes(*names: str) -> list[NodeInfo]:
    return [make_node(n) for n in names]


def test_plugin_name_and_protocols() -> None:
    assert_plugin(plugin({}), "NetworkTraffic", PreScorePlugin, ScorePlugin)


# --------------------------------------------------------------------------- scores

SCORE_CASES: list[tuple[str, Mapping[str, float] | None, dict[str, int]]] = [
    ("least-busy-100-busiest-0", {"a": 100.0, "b": 600.0, "c": 1100.0}, {"a": 100, "b": 50, "c": 0}),
    ("idle-node-100", {"a": 0.0, "b": 250.0, "c": 1000.0}, {"a": 100, "b": 75, "c": 0}),
    ("equal-traffic-all-100", {"a": 5e6, "b": 5e6, "c": 5e6}, {"a": 100, "b": 100, "c": 100}),
    ("all-idle-all-100", {"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 100, "b": 100, "c": 100}),
    ("missing-node-scores-0", {"a": 10.0, "b": 20.0}, {"a": 100, "b": 0, "c": 0}),
    ("only-one-known-node", {"b": 7e8}, {"a": 0, "b": 100, "c": 0}),
    ("empty-reading-all-0", {}, {"a": 0, "b": 0, "c": 0}),
    ("no-reading-all-0", None, {"a": 0, "b": 0, "c": 0}),
    ("other-nodes-ignored", {"a": 1.0, "b": 3.0, "c": 5.0, "x": 1e9}, {"a": 100, "b": 50, "c": 0}),
    ("gigabytes-per-second", {"a": 1.25e9, "b": 2.5e9, "c": 1.25e10}, {"a": 100, "b": 88, "c": 0}),
]


@pytest.mark.parametrize(("rates", "want"), [c[1:] for c in SCORE_CASES], ids=[c[0] for c in SCORE_CASES])
def test_normalized_scores(rates: Mapping[str, float] | None, want: dict[str, int]) -> None:
    assert run_score(plugin(rates), pod_info(), nodes("a", "b", "c")) == want


def test_raw_score_is_the_rate_in_bytes_per_second() -> None:
    p, state = plugin({"a": 1234.6, "b": float("nan")}), CycleState()
    got = [p.score(state, pod_info(), n) for n in nodes("a", "b", "c")]
    assert got == [1235, 0, 0]


def test_one_reading_per_cycle() -> None:
    """PreScore takes the reading; a refresh during the cycle does not mix two readings."""
    stub = Stub({"a": 1.0, "b": 2.0})
    p, state = NetworkTraffic(stub, 45.0, clock=lambda: NOW), CycleState()
    pod = pod_info()
    assert p.pre_score(state, pod, nodes("a", "b")).is_success()
    stub.reading = ({"a": 2.0, "b": 1.0}, NOW)
    scores = {n.name: p.score(state, pod, n) for n in nodes("a", "b")}
    p.normalize_score(state, pod, scores)
    assert scores == {"a": 100, "b": 0}


# --------------------------------------------------------------------------- staleness

STALE_CASES: list[tuple[str, float, float, dict[str, int]]] = [
    ("fresh", 0.0, 45.0, {"a": 100, "b": 0}),
    ("at-the-bound", 45.0, 45.0, {"a": 100, "b": 0}),
    ("older-than-the-bound-dropped", 45.1, 45.0, {"a": 0, "b": 0}),
    ("one-hour-old", 3600.0, 45.0, {"a": 0, "b": 0}),
]


@pytest.mark.parametrize(
    ("age", "max_age", "want"), [c[1:] for c in STALE_CASES], ids=[c[0] for c in STALE_CASES]
)
def test_stale_reading_scores_all_0(age: float, max_age: float, want: dict[str, int]) -> None:
    p = plugin({"a": 1.0, "b": 9.0}, age=age, max_age=max_age)
    assert run_score(p, pod_info(), nodes("a", "b")) == want


def test_max_age_is_three_intervals() -> None:
    args = NetworkTrafficArgs(prometheusAddress=ADDRESS, interval="10s")
    assert networktraffic.STALE_INTERVALS == 3
    assert args.max_age == 30.0
    assert networktraffic.new(args, None, Stub({})).max_age == 30.0  # type: ignore[arg-type]


# --------------------------------------------------------------------------- args

REGISTRY = with_plugin(networktraffic.NAME, lambda args, handle: plugin({}), NetworkTrafficArgs)

ARGS_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "defaults",
        {"prometheusAddress": ADDRESS},
        {
            "prometheus_address": ADDRESS,
            "network_interface": "eth0",
            "node_label": "instance",
            "interval": 15.0,
            "query_timeout": 5.0,
        },
    ),
    ("trailing-slash-dropped", {"prometheusAddress": ADDRESS + "/"}, {"prometheus_address": ADDRESS}),
    (
        "go-durations",
        {"prometheusAddress": ADDRESS, "interval": "1m30s", "queryTimeout": "500ms"},
        {"interval": 90.0, "query_timeout": 0.5},
    ),
    (
        "bare-seconds",
        {"prometheusAddress": ADDRESS, "interval": 2, "queryTimeout": "1.5"},
        {"interval": 2.0, "query_timeout": 1.5},
    ),
    (
        "https-with-path",
        {"prometheusAddress": "https://mon.example/prometheus", "networkInterface": "bond0"},
        {"prometheus_address": "https://mon.example/prometheus", "network_interface": "bond0"},
    ),
]


@pytest.mark.parametrize(("raw", "want"), [c[1:] for c in ARGS_CASES], ids=[c[0] for c in ARGS_CASES])
def test_args(raw: dict[str, Any], want: dict[str, Any]) -> None:
    args = REGISTRY.validate_args(networktraffic.NAME, raw)
    assert isinstance(args, NetworkTrafficArgs)
    for field, value in want.items():
        assert getattr(args, field) == value


ARGS_ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("address-required", {}, "NetworkTraffic args.prometheusAddress: Field required"),
    ("not-a-url", {"prometheusAddress": "prometheus:9090"}, "prometheusAddress: 'prometheus:9090' is"),
    ("ftp-url", {"prometheusAddress": "ftp://host/"}, "is not an http(s) URL"),
    ("no-host", {"prometheusAddress": "http://"}, "is not an http(s) URL"),
    ("unknown-field", {"prometheusAddress": ADDRESS, "address": ADDRESS}, "args.address: Extra inputs"),
    ("bad-duration", {"prometheusAddress": ADDRESS, "interval": "10 minutes"}, "invalid duration"),
    ("zero-interval", {"prometheusAddress": ADDRESS, "interval": "0"}, "args.interval: Input should be"),
    ("negative-timeout", {"prometheusAddress": ADDRESS, "queryTimeout": -1}, "args.queryTimeout: Input"),
    ("empty-interface", {"prometheusAddress": ADDRESS, "networkInterface": ""}, "args.networkInterface"),
    ("bad-label", {"prometheusAddress": ADDRESS, "nodeLabel": "node-name"}, "args.nodeLabel: String should"),
    ("bad-rate-window", {"prometheusAddress": ADDRESS, "rateWindow": "1 minute"}, "args.rateWindow"),
]


@pytest.mark.parametrize(("raw", "error"), [c[1:] for c in ARGS_ERRORS], ids=[c[0] for c in ARGS_ERRORS])
def test_args_errors(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        REGISTRY.validate_args(networktraffic.NAME, raw)


QUERY_CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "default",
        {},
        'sum by (instance) (rate(node_network_receive_bytes_total{device="eth0"}[1m])'
        ' + rate(node_network_transmit_bytes_total{device="eth0"}[1m]))',
    ),
    (
        "interface-label-window",
        {"networkInterface": "ens5", "nodeLabel": "node", "rateWindow": "30s"},
        'sum by (node) (rate(node_network_receive_bytes_total{device="ens5"}[30s])'
        ' + rate(node_network_transmit_bytes_total{device="ens5"}[30s]))',
    ),
    (
        "own-query-with-placeholders",
        {"query": 'sum by (${nodeLabel}) (irate(x{device="${interface}"}[2m]))', "nodeLabel": "node"},
        'sum by (node) (irate(x{device="eth0"}[2m]))',
    ),
    (
        "own-query-keeps-regex-groups",
        {"query": 'label_replace(x, "node", "$1", "instance", "(.*):.*")'},
        'label_replace(x, "node", "$1", "instance", "(.*):.*")',
    ),
]


@pytest.mark.parametrize(("raw", "want"), [c[1:] for c in QUERY_CASES], ids=[c[0] for c in QUERY_CASES])
def test_promql(raw: dict[str, Any], want: str) -> None:
    assert NetworkTrafficArgs.model_validate({"prometheusAddress": ADDRESS, **raw}).promql() == want
