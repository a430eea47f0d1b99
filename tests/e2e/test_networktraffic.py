"""NetworkTraffic against a real Prometheus (``binaries.ensure_prometheus``) scraping a small
exporter of node-exporter's interface counters for the dev cluster's nodes: pods go to the
quiet node; with Prometheus stopped, pods still bind and the scheduler counts the failed
queries. Everything listens on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

import binaries
from tests.builders import built_tool, free_port
from tests.e2e.helpers import Pools, SchedulerProcess
from tests.kube import Kubectl, pod_manifest, wait_for

NODES = ("node-1", "node-2", "node-3")
QUIET = "node-1"
BYTES_PER_SECOND = {"node-1": 2_000.0, "node-2": 50_000_000.0, "node-3": 50_000_000.0}
"""Each direction, on eth0; node-1 also has a very busy ``lo`` the query must leave out."""
SCHEDULER_NAME = "networktraffic-scheduler"
FAILURES = "ipscheduler_network_traffic_query_failures_total"
QUERY = (
    'sum by (instance) (rate(node_network_receive_bytes_total{device="eth0"}[1m])'
    ' + rate(node_network_transmit_bytes_total{device="eth0"}[1m]))'
)


class Exporter:
    """node-exporter's two interface counters for :data:`NODES` (``instance`` = the node
    name), growing at :data:`BYTES_PER_SECOND`, served by a thread on 127.0.0.1."""

    def __init__(self) -> None:
        started = time.monotonic()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition(time.monotonic() - started).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def exposition(elapsed: float) -> str:
    lines = []
    for direction in ("receive", "transmit"):
        name = f"node_network_{direction}_bytes_total"
        lines += [f"# HELP {name} Network device statistic {direction}_bytes.", f"# TYPE {name} counter"]
        for node in NODES:
            lines.append(f'{name}{{device="eth0",instance="{node}"}} {BYTES_PER_SECOND[node] * elapsed:.0f}')
        lines.append(f'{name}{{device="lo",instance="{QUIET}"}} {1e9 * elapsed:.0f}')
    return "\n".join(lines) + "\n"


class Prometheus:
    """The real server, scraping ``target`` every second, data in ``folder``."""

    def __init__(self, exe: Path, folder: Path, target: str) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": "node", "honor_labels": True, "static_configs": [{"targets": [target]}]}
            ],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = folder / "prometheus.log"
        cmd = [
            str(exe),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=folder)

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> dict[str, float] | None:
        """``instance`` → value of an instant query; None while Prometheus does not answer."""
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({self.proc.returncode}):\n{self.log_tail()}")
        url = f"{self.address}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                body = json.load(r)
        except OSError:
            return None
        return {s["metric"].get("instance", ""): float(s["value"][1]) for s in body["data"]["result"]}

    def log_tail(self, n: int = 30) -> str:
        return "".join(self.log_path.read_text(errors="replace").splitlines(True)[-n:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    exe = built_tool(binaries.ensure_prometheus, "prometheus")  # CI=true: a missing one fails
    folder = tmp_path / "prometheus"
    folder.mkdir()
    with Exporter() as exporter:
        prom = Prometheus(exe, folder, f"127.0.0.1:{exporter.port}")
        try:
            yield prom
        finally:
            prom.stop()


def config(tmp_path: Path, prometheus: str) -> Path:
    """A profile of its own whose NetworkTraffic weighs 50 (the most a weight may be but 100)."""
    body = {
        "apiVersion": "ipscheduler.io/v1alpha1",
        "kind": "IPSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAME,
                "plugins": {"score": {"enabled": [{"name": "NetworkTraffic", "weight": 50}]}},
                "pluginConfig": [
                    {
                        "name": "NetworkTraffic",
                        "args": {"prometheusAddress": prometheus, "interval": "1s", "queryTimeout": "1s"},
                    }
                ],
            }
        ],
    }
    path = tmp_path / "networktraffic-config.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def node_of(kubectl: Kubectl, ns: str, name: str) -> str:
    def bound() -> str | None:
        node: str | None = kubectl.json("get", "pod", name, "-n", ns)["spec"].get("nodeName")
        return node

    return wait_for(f"{name} bound", bound, timeout=60)


def test_pods_go_to_the_quiet_node_and_bind_without_prometheus(
    scheduler_factory: Callable[..., SchedulerProcess],
    prometheus: Prometheus,
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
    tmp_path: Path,
) -> None:
    # Equal pools everywhere: UnderlayIP scores every node alike.
    for i, node in enumerate(NODES, start=1):
        pools.create(f"nt-pool-{node}", node, [f"10.27.{i}.10-10.27.{i}.19"])

    def rates() -> dict[str, float] | None:
        got = prometheus.query(QUERY)
        return got if got and set(got) == set(NODES) and min(got, key=got.__getitem__) == QUIET else None

    seen = wait_for("Prometheus has a rate for every node, node-1 the least", rates, timeout=60)
    assert seen[QUIET] < 10_000 < seen["node-2"]
    sched = scheduler_factory("--config", str(config(tmp_path, prometheus.address)))
    time.sleep(2.5)  # a refresh (every 1 s) after Prometheus had the rates

    # (a) the quiet node wins every time (a tie would pick at random among three)
    for i in range(3):
        kubectl.apply(pod_manifest(f"quiet-{i}", scheduler=SCHEDULER_NAME), ns)
        assert node_of(kubectl, ns, f"quiet-{i}") == QUIET
    assert sched.metric(FAILURES) == 0

    # (b) Prometheus gone: the plugin has no say, scheduling goes on, the failures are counted
    prometheus.stop()
    wait_for("a failed query counted", lambda: sched.metric(FAILURES) >= 1 or None, timeout=30)
    kubectl.apply(pod_manifest("without-prometheus", scheduler=SCHEDULER_NAME), ns)
    assert node_of(kubectl, ns, "without-prometheus") in NODES
    failures = sched.metric(FAILURES)
    wait_for("failures keep being counted", lambda: sched.metric(FAILURES) > failures or None, timeout=30)
    assert sched.logged("NetworkTraffic: cannot read node traffic from")
    log_text = sched.log_path.read_text()
    assert log_text.count("NetworkTraffic: cannot read node traffic from") == 1, "one warning per streak"
