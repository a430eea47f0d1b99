"""deploy/monitoring: the PodMonitor, the alert rules and the Grafana dashboard.

promtool (``hack/binaries.ensure_promtool``: built once with Go, then cached) checks the
rules, runs their unit tests (``deploy/monitoring/tests/alerts_test.yaml``) and parses every
query of the dashboard (as recording rules). Every series they read is one the scheduler
exports (``EXPORTED``, kept by hand here; the e2e test finds the same names in a live
scrape, through ``deploy/monitoring/tests/metrics.txt``). ``kubectl kustomize`` renders
the directory."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import binaries
from tests.builders import built_tool

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboard.json"
ALERT_TESTS = MONITORING / "tests" / "alerts_test.yaml"
METRICS_TXT = MONITORING / "tests" / "metrics.txt"
DEPLOYMENT = ROOT / "deploy" / "06-deployment.yaml"
JOB = 'job="ip-scheduler"'

# What the scheduler exports, by type (operator/ipscheduler/metrics.py; kube-scheduler's and
# client-go's names where one exists; prometheus_client's process_* and python_*). A counter
# is exposed as <name>_total, a histogram as <name>_bucket, _sum and _count.
COUNTERS = {
    "scheduler_schedule_attempts",
    "scheduler_queue_incoming_pods",
    "ipscheduler_cas_conflicts",
    "ipscheduler_pool_status_writes",
    "ipscheduler_pool_status_mutations",
    "ipscheduler_bind_failures",
    "ipscheduler_gc_releases",
    "ipscheduler_pending_pods_gone",
    "ipscheduler_allocations_restored",
    "ipscheduler_pods_rehomed",
    "ipscheduler_task_restarts",
    "process_cpu_seconds",
    "python_gc_objects_collected",
    "python_gc_objects_uncollectable",
    "python_gc_collections",
}
GAUGES = {
    "scheduler_pending_pods",
    "scheduler_unschedulable_pods",
    "leader_election_master_status",
    "ipscheduler_pool_capacity",
    "ipscheduler_pool_allocated",
    "ipscheduler_pool_free",
    "ipscheduler_pool_retained",
    "ipscheduler_pool_exhausted",
    "ipscheduler_pods_waiting_for_address",
    "ipscheduler_task_up",
    "process_virtual_memory_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_open_fds",
    "process_max_fds",
    "python_info",
}
HISTOGRAMS = {
    "scheduler_scheduling_attempt_duration_seconds",
    "scheduler_pod_scheduling_sli_duration_seconds",
    "scheduler_plugin_execution_duration_seconds",
    "scheduler_framework_extension_point_duration_seconds",
}
EXPORTED = (
    {f"{c}_total" for c in COUNTERS}
    | GAUGES
    | {f"{h}_{suffix}" for h in HISTOGRAMS for suffix in ("bucket", "sum", "count")}
)

ALERTS = {
    "IPSchedulerNoLeader",
    "IPSchedulerPoolExhausted",
    "IPSchedulerPoolNearlyFull",
    "IPSchedulerPendingPodsRising",
    "IPSchedulerCASConflictsHigh",
    "IPSchedulerBindFailures",
    "IPSchedulerGCReleasing",
    "IPSchedulerTaskDown",
    "IPSchedulerTaskRestarting",
}
ROWS = [
    "Pools",
    "Scheduling",
    "Queue",
    "Failures and repairs",
    "Leader election and tasks",
    "Process",
]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's variables as a query sees them when it runs (the dashboard's and the built-ins).
GRAFANA_VARS = {"job": "ip-scheduler", "pool": ".*", "__rate_interval": "2m", "__interval": "30s"}

# ------------------------------------------------------------------ PromQL names

_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
_WORDS |= {"offset", "inf", "nan"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads (a Grafana query's ``$vars`` allowed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, regexes
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges and subqueries
    expr = _GROUPING.sub(" ", expr)  # label lists of by (...), on (...)...
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)  # Grafana variables
    return {m for m in _IDENT.findall(expr) if m not in _WORDS}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('max by (pool, node) (a_b{job="x"}) / on (pool) c > 0.9', {"a_b", "c"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m])))", {"h_bucket"}),
        ('x or on () absent(y{job="j", q=~"a|b"})', {"x", "y"}),
        ("deriv(q[15m:1m]) * 60 > 1e3", {"q"}),
        ('sum(rate(c_total{job="$job"}[$__rate_interval])) without (pod)', {"c_total"}),
        ("a unless ignoring (le) b and bool c", {"a", "b", "c"}),
        ("vector(0)", set()),
    ],
    ids=["binary", "quantile", "absent", "subquery", "grafana", "keywords", "no-series"],
)
def test_metric_names_are_read_from_promql(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


# -------------------------------------------------------------------- the files


def prometheus_rule() -> dict[str, Any]:
    doc = yaml.safe_load(RULES.read_text())
    assert isinstance(doc, dict)
    return doc


def rules() -> list[dict[str, Any]]:
    return [rule for group in prometheus_rule()["spec"]["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(board: dict[str, Any]) -> dict[str, str]:
    """Every PromQL query of the dashboard, by where it is: panel targets and variables
    (``label_values(SELECTOR, label)`` gives its selector)."""
    out = {}
    for panel in panels(board):
        for target in panel.get("targets", []):
            out[f"panel {panel['id']} ({panel['title']}) {target['refId']}"] = target["expr"]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert m, f"variable {var['name']}: not label_values(SELECTOR, label): {query}"
            out[f"variable {var['name']}"] = m.group(1)
    return out


def grafana_expanded(expr: str) -> str:
    """A dashboard query as Grafana sends it (the variables replaced)."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in GRAFANA_VARS, f"unknown variable ${name} in {expr}"
        return GRAFANA_VARS[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def referenced_names() -> set[str]:
    names: set[str] = set()
    for rule in rules():
        names |= metric_names(rule["expr"])
    for expr in dashboard_queries(dashboard()).values():
        names |= metric_names(expr)
    return names


# --------------------------------------------------------------------- promtool


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool, built with Go on first use (skipped locally without Go; CI fails)."""
    return built_tool(binaries.ensure_promtool, "promtool")


def run_promtool(promtool: Path, *args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed ({proc.returncode}):\n{out}"
    return out


def write_rules(path: Path, spec: dict[str, Any], annotations: bool = True) -> Path:
    """``spec`` of the PrometheusRule as a Prometheus rules file (the ``groups:`` document)."""
    groups = []
    for group in spec["groups"]:
        kept = [{k: v for k, v in r.items() if annotations or k != "annotations"} for r in group["rules"]]
        groups.append({**group, "rules": kept})
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def test_promtool_accepts_the_rules(promtool: Path, tmp_path: Path) -> None:
    """Expressions, durations, label names and the annotations' templates."""
    path = write_rules(tmp_path / "ipscheduler.rules.yaml", prometheus_rule()["spec"])
    out = run_promtool(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert f"SUCCESS: {len(rules())} rules found" in out


def test_each_alert_fires_when_it_should_and_stays_quiet_when_not(promtool: Path, tmp_path: Path) -> None:
    """``promtool test rules``: the cases state labels only, so the rules go without annotations."""
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    (rule_file,) = tests["rule_files"]
    write_rules(tmp_path / rule_file, prometheus_rule()["spec"], annotations=False)
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    out = run_promtool(promtool, "test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert "SUCCESS" in out


def test_the_tests_cover_every_alert_both_ways() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for group in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    assert {r["alert"] for r in rules()} == ALERTS
    assert (sorted(ALERTS - firing), sorted(ALERTS - quiet)) == ([], [])


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_each_alert_has_a_severity_and_says_what_to_do(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert set(annotations) >= {"summary", "description"}
    assert len(annotations["description"]) > 200, "the description is the runbook: what it means, what to do"


RUNBOOKS = "https://github.com/ipscheduler/ipscheduler/blob/main/deploy/monitoring/README.md"
"""Where the runbooks are published: deploy/monitoring/README.md on the main branch."""


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other than ``-``
    and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def runbooks() -> dict[str, str]:
    """The ``### `` sections under ``## Runbooks`` of deploy/monitoring/README.md, by anchor."""
    text = (MONITORING / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Runbooks\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### (.+)$", section, flags=re.MULTILINE)[1:]
    return {github_anchor(title): body for title, body in zip(parts[::2], parts[1::2], strict=True)}


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [("IPSchedulerNoLeader", "ipschedulernoleader"), ("How this is tested", "how-this-is-tested")],
    ids=["alert", "words"],
)
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_each_alert_has_a_runbook_url_to_its_own_runbook(rule: dict[str, Any]) -> None:
    """runbook_url is the README's section named as the alert, which says what it means,
    what to check and what to do."""
    url = rule["annotations"]["runbook_url"]
    base, _, anchor = url.partition("#")
    assert (base, anchor) == (RUNBOOKS, github_anchor(rule["alert"])), url
    body = runbooks().get(anchor)
    assert body is not None, (
        f"no section ### {rule['alert']} under ## Runbooks in deploy/monitoring/README.md"
    )
    for part in ("**What it means.**", "**What to check.**", "**What to do.**"):
        assert part in body, f"{rule['alert']}'s runbook lacks {part}"


def test_every_runbook_is_an_alerts() -> None:
    assert sorted(runbooks()) == sorted(github_anchor(r["alert"]) for r in rules())


def test_every_query_reads_only_the_schedulers_series() -> None:
    """kube-scheduler exports scheduler_* under the same names: every selector names the job
    (the rules job="ip-scheduler", which the PodMonitor sets; the dashboard its $job)."""
    wrong = []
    queries = {r["alert"]: r["expr"] for r in rules()}
    queries.update(dashboard_queries(dashboard()))
    del queries["variable job"]  # the one that finds the job: label_values(ipscheduler_task_up, job)
    for where, expr in queries.items():
        job = JOB if where.startswith("IPScheduler") else 'job="$job"'
        for name in metric_names(expr):
            for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expr):
                if job not in (m.group(1) or ""):
                    wrong.append(f"{where}: {m.group(0)}")
    assert wrong == []


# -------------------------------------------------------------------- dashboard


def test_the_dashboard_is_importable_anywhere() -> None:
    """Valid JSON, a prometheus data source chosen by the ${datasource} variable, no UID of
    any Grafana's data source, one panel per id, rows as the README lists them."""
    board = dashboard()
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    assert [p["title"] for p in board["panels"] if p["type"] == "row"] == ROWS
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    sources: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "datasource" in node:
                sources.append(node["datasource"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in board.items() if k != "annotations"})
    assert sources and all(s == DATASOURCE for s in sources), sources


def test_every_panel_queries_something_and_fits_the_grid() -> None:
    board = dashboard()
    cells: dict[tuple[int, int], str] = {}
    for panel in panels(board):
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"{panel['title']}: no targets"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"].strip() for t in panel["targets"]), panel["title"]


def test_every_dashboard_query_parses(promtool: Path, tmp_path: Path) -> None:
    """promtool has no parser of its own to call: each query becomes a recording rule."""
    queries = dashboard_queries(dashboard())
    records = [
        {"record": f"dashboard:query_{i}", "expr": grafana_expanded(expr)}
        for i, expr in enumerate(queries.values())
    ]
    path = tmp_path / "dashboard.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    out = run_promtool(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert f"SUCCESS: {len(records)} rules found" in out


# ---------------------------------------------------------------- metric names


def test_rules_and_dashboard_read_only_exported_series() -> None:
    names = referenced_names()
    assert sorted(names - EXPORTED) == []


def test_metrics_txt_lists_what_rules_and_dashboard_read() -> None:
    """The e2e test looks each of these up in a live scrape."""
    listed = [line for line in METRICS_TXT.read_text().splitlines() if line and not line.startswith("#")]
    assert listed == sorted(referenced_names()), f"update {METRICS_TXT.relative_to(ROOT)}:\n" + "\n".join(
        sorted(referenced_names())
    )


# ---------------------------------------------------------------- the manifests


def kustomize() -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl not on PATH (README: Prerequisites)")
    proc = subprocess.run(
        ["kubectl", "kustomize", str(MONITORING)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_kustomize_renders_the_monitor_the_rules_and_the_dashboard() -> None:
    docs = {d["kind"]: d for d in kustomize()}
    assert sorted(docs) == [
        "ClusterRoleBinding",
        "ConfigMap",
        "PodMonitor",
        "PrometheusRule",
        "Secret",
        "ServiceAccount",
    ]
    namespaced = [d for kind, d in docs.items() if kind != "ClusterRoleBinding"]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"ipscheduler-system"}
    assert docs["ClusterRoleBinding"]["subjects"][0]["namespace"] == "ipscheduler-system"
    config_map = docs["ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["name"] == "ip-scheduler-dashboard", "no hash suffix: one copy"
    (content,) = config_map["data"].values()
    assert json.loads(content) == dashboard()
    assert docs["PrometheusRule"]["spec"] == prometheus_rule()["spec"]


def test_the_pod_monitor_scrapes_with_a_token_allowed_to_get_metrics() -> None:
    """The bearer token is the scraper ServiceAccount's, from a Secret of the PodMonitor's
    namespace, and that account is bound to deploy/'s metrics reader ClusterRole."""
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    scraper = {d["kind"]: d for d in yaml.safe_load_all((MONITORING / "scraper.yaml").read_text())}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    credentials = endpoint["authorization"]["credentials"]
    assert endpoint["authorization"]["type"] == "Bearer"
    secret = scraper["Secret"]
    assert (secret["metadata"]["name"], secret["type"]) == (
        credentials["name"],
        "kubernetes.io/service-account-token",
    )
    assert credentials["key"] == "token", "the key the API server fills in"
    namespace = monitor["metadata"]["namespace"]
    account = scraper["ServiceAccount"]["metadata"]
    assert secret["metadata"]["namespace"] == account["namespace"] == namespace
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": account["name"]}
    binding = scraper["ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": namespace}
    ]
    reader = yaml.safe_load((ROOT / "deploy" / "15-clusterrole-metrics-reader.yaml").read_text())
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": reader["metadata"]["name"],
    }


def test_the_pod_monitor_scrapes_every_replica_of_the_deployment() -> None:
    monitor = yaml.safe_load((MONITORING / "podmonitor.yaml").read_text())
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "PodMonitor"
    spec = monitor["spec"]
    namespace = deployment["metadata"]["namespace"]
    assert spec["namespaceSelector"]["matchNames"] == [namespace]
    template = deployment["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert labels[spec["jobLabel"]] == "ip-scheduler", "the rules select job=ip-scheduler"
    ports = {p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c["ports"]}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "30s")
    args = template["spec"]["containers"][0]["args"]
    assert ports[endpoint["port"]] == 10259 and "--secure-port" not in args, "kube-scheduler's secure port"
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {"insecureSkipVerify": True}, "the scheduler's certificate is self-signed"
    assert "--leader-elect" in args, "IPSchedulerNoLeader reads leader_election_master_status"
