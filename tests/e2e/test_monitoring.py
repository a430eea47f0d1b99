"""deploy/monitoring against a live scheduler: every series the alert rules and the dashboard
read is on its /metrics (``deploy/monitoring/tests/metrics.txt``, which the unit test keeps
current), and the alert rules, fed the scrape of a scheduler whose pool is full while a pod
waits for an address, fire what they should and nothing else."""

from __future__ import annotations

import json
import math
import re
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import binaries
from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess, events_for, leader_and_standby
from tests.kube import Kubectl, pod_manifest, wait_for

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
NODE = "node-1"
SELECTOR = {"kubernetes.io/hostname": NODE}
# What a PodMonitor scrape adds to every series (podmonitor.yaml: job from the pod's label).
TARGET = 'job="ip-scheduler",namespace="ipscheduler-system",pod="ip-scheduler-a"'
SAMPLE = re.compile(r"([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)$")


def elected(scheduler_factory: Callable[..., SchedulerProcess]) -> SchedulerProcess:
    """A scheduler holding a Lease of its own (leader_election_master_status is exported)."""
    lease = f"monitoring-{secrets.token_hex(3)}"
    return scheduler_factory(
        "--leader-elect", "--leader-elect-namespace", "default", "--leader-elect-lease-name", lease
    )


def bound_with_address(kubectl: Kubectl, ns: str, name: str) -> str:
    def address() -> str | None:
        pod = kubectl.json("get", "pod", name, "-n", ns)
        return pod["spec"].get("nodeName") and (pod["metadata"].get("annotations") or {}).get(
            "ipscheduler.io/ip"
        )

    return wait_for(f"{name} bound with an address", address, timeout=60)


def scrape(scheduler: SchedulerProcess, until: str) -> str:
    """/metrics once it contains ``until``."""

    def text() -> str | None:
        status, body = scheduler.probe("/metrics")
        return body if status == 200 and until in body else None

    return wait_for(f"/metrics with {until}", text, timeout=30)


def exposed_names(text: str) -> set[str]:
    """The series names of a scrape: those with samples, and every family it declares (a
    labelled counter has no sample before its first increment; a histogram is _bucket,
    _sum and _count)."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind in ("histogram", "summary"):
                names |= {f"{name}_sum", f"{name}_count"}
            names.add(f"{name}_bucket" if kind == "histogram" else name)
        elif line and not line.startswith("#") and (m := SAMPLE.match(line)):
            names.add(m.group(1))
    return names


def referenced_names() -> list[str]:
    lines = (MONITORING / "tests" / "metrics.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def test_the_rules_and_the_dashboard_read_series_the_scheduler_exports(
    scheduler_factory: Callable[..., SchedulerProcess], kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    sched = elected(scheduler_factory)
    pools.create("mon-names", NODE, ["10.0.91.1-10.0.91.4"])
    kubectl.create(pod_manifest("one", scheduler=SCHEDULER, nodeSelector=SELECTOR), ns)
    bound_with_address(kubectl, ns, "one")
    text = scrape(sched, 'ipscheduler_pool_allocated{node="node-1",pool="mon-names"} 1.0')
    missing = sorted(set(referenced_names()) - exposed_names(text))
    assert missing == [], f"read by deploy/monitoring but not on /metrics: {missing}"


def promtool_series(text: str, pool: str) -> list[dict[str, str]]:
    """The scrape as promtool input series, as a PodMonitor would store them, constant for 40
    minutes; of the pool gauges only ``pool``'s (other tests' pools may linger)."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if line.startswith("#") or not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if math.isnan(value) or ('pool="' in labels and f'pool="{pool}"' not in labels):
            continue  # NaN; another pool
        series = f"{name}{{{labels + ',' if labels else ''}{TARGET}}}"
        out.append({"series": series, "values": f"{value:f}x40"})
    return out


def rules_without_annotations() -> dict[str, Any]:
    """The PrometheusRule's ``spec`` as a rules file; promtool compares annotations
    verbatim, so the cases state labels only."""
    spec = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return dict(spec)


def test_the_alerts_on_a_live_scrape_with_a_full_pool_and_a_pod_waiting(
    scheduler_factory: Callable[..., SchedulerProcess],
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
    tmp_path: Path,
) -> None:
    """A healthy leader whose only pool is full while a pod waits for an address: the scrape,
    held for 20 minutes, fires IPSchedulerPoolExhausted and IPSchedulerPoolNearlyFull for
    that pool and nothing else (the leader, the tasks, the counters all read as fine)."""
    sched = elected(scheduler_factory)
    pools.create("mon-full", NODE, ["10.0.92.1-10.0.92.2"])
    for name in ("a", "b", "c"):
        kubectl.create(pod_manifest(name, scheduler=SCHEDULER, nodeSelector=SELECTOR), ns)
    bound = {bound_with_address(kubectl, ns, name) for name in ("a", "b")}
    assert bound == {"10.0.92.1", "10.0.92.2"}
    wait_for("c FailedScheduling", lambda: events_for(kubectl, ns, "c", "FailedScheduling"))
    text = scrape(sched, 'ipscheduler_pool_free{node="node-1",pool="mon-full"} 0.0')

    pool = {"pool": "mon-full", "node": NODE}
    firing = {
        "IPSchedulerPoolExhausted": [{"exp_labels": {"severity": "critical", **pool}}],
        "IPSchedulerPoolNearlyFull": [{"exp_labels": {"severity": "warning", **pool}}],
    }
    rules = rules_without_annotations()
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    (tmp_path / "ipscheduler.rules.yaml").write_text(yaml.safe_dump(rules))
    case = {
        "name": "live scrape",
        "interval": "1m",
        "input_series": promtool_series(text, "mon-full"),
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": alert, "exp_alerts": firing.get(alert, [])} for alert in alerts
        ],
    }
    tests = {"rule_files": ["ipscheduler.rules.yaml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "live_test.yaml").write_text(yaml.safe_dump(tests))
    # promtool is built with Go, as the dev cluster's binaries were
    cmd = [str(binaries.ensure_promtool()), "test", "rules", "live_test.yaml"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_api_server_takes_the_dashboard_config_map(kubectl: Kubectl, ns: str) -> None:
    """Rendered by ``kubectl kustomize`` and applied with a server dry run (size, name and
    labels); the PodMonitor and PrometheusRule need prometheus-operator's CRDs, which the
    dev cluster has not: the unit test checks their shape."""
    rendered = kubectl("kustomize", str(MONITORING))
    (config_map,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ConfigMap"]
    config_map["metadata"]["namespace"] = ns
    out = kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(config_map))
    applied: dict[str, Any] = json.loads(out)
    assert applied["metadata"]["labels"]["grafana_dashboard"] == "1"
    (content,) = applied["data"].values()
    assert json.loads(content)["uid"] == "ipscheduler-overview"


def test_a_standby_answers_metrics_with_its_leader_gauge_at_zero(
    scheduler_factory: Callable[..., SchedulerProcess],
) -> None:
    """Prometheus scrapes every replica: a standby is a target up, not down (a 503), and the
    no-leader alert reads its 0 beside the leader's 1."""
    leader, standby, lease = leader_and_standby(scheduler_factory, "standby")
    on_leader = scrape(leader, f'leader_election_master_status{{name="{lease}"}} 1.0')
    on_standby = scrape(standby, f'leader_election_master_status{{name="{lease}"}} 0.0')
    assert "process_resident_memory_bytes" in on_standby and "_created" not in on_standby
    # The standby schedules nothing: its scheduling metrics are absent or flat.
    assert "scheduler_schedule_attempts_total{" not in on_standby
    assert "scheduler_schedule_attempts_total" in on_leader
