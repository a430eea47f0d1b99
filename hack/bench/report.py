"""What a run reports: the Markdown tables (:func:`table`, :func:`running_table`,
:func:`interfaces_table`), the summary
lines (:func:`contention_summary`, :func:`summary`), the JSON document (:func:`document`) and
the PNG of bound pods over time (:func:`plot`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import binaries


def contention_summary(results: list[dict[str, Any]]) -> list[str]:
    """For each scheduler with a ``backlog: X`` and a ``contended: X`` row, its drain under
    contention as a share of its drain without, e.g. ``contended: ip-scheduler drains at
    91 % of its uncontended rate (52.0 against 57.1 pods/s, 120 LISTs)``."""
    drains = {r["phase"]: r for r in results if "drain_pods_per_s" in r}
    out = []
    for name, row in drains.items():
        if not name.startswith("contended: "):
            continue
        label = name.removeprefix("contended: ")
        base = drains.get(f"backlog: {label}")
        if base is None or not base["drain_pods_per_s"]:
            continue
        share = 100 * row["drain_pods_per_s"] / base["drain_pods_per_s"]
        out.append(
            f"contended: {label} drains at {share:.0f} % of its uncontended rate "
            f"({row['drain_pods_per_s']} against {base['drain_pods_per_s']} pods/s, "
            f"{row.get('contending_lists', 0)} LISTs)"
        )
    return out


def error_line(r: dict[str, Any], columns: int) -> str:
    """The table row of a phase that failed (``r`` has ``phase`` and ``error``): the error in
    the first of ``columns`` columns, "NO" in the last."""
    return f"| {r['phase']}: {r['error']} |" + " |" * (columns - 2) + " NO |"


def running_table(rows: list[dict[str, Any]]) -> str:
    """The running phase's Markdown table: seconds, "p50 / p99" per pod; → Running from the
    pod's create, the rest from its deletion request (→ CNI DEL: from the first one)."""
    head = (
        "| on a real node | running | s → Running | all Running s | pods/s | node CPU ms/pod "
        "| released | s → released | s → released, forced | all released s | s → pod gone "
        "| s → CNI DEL | pool writes/pod | correct |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        if "error" in r:
            lines.append(error_line(r, 14))
            continue

        def p(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[key]['p50']} / {r[key]['p99']}"

        lines.append(
            f"| {r['phase']} | {r['running']}/{r['pods']} | {p('create_to_running_s')} "
            f"| {r['all_running_s']} | {r['running_pods_per_s']} | {r['node_cpu_ms_per_pod']} "
            f"| {r['released']}/{r['pods']} | {p('delete_to_released_s')} "
            f"| {p('forced_delete_to_released_s') if r.get('forced') else '-'} | {r['all_released_s']} "
            f"| {p('delete_to_gone_s')} | {p('delete_to_cni_del_s')} "
            f"| {r.get('pool_writes_per_deleted_pod', '-')} "
            f"| {'yes' if r['correct'] else 'NO'} |"
        )
    lines.append("")
    for r in rows:
        if "released_means" in r:
            lines.append(f"- {r['phase']}: released = {r['released_means']}")
        if r.get("pod_ip_not_reserved"):
            lines.append(
                f"- {r['phase']}: {r['pod_ip_not_reserved']} pod(s) whose podIP is not the reserved address"
            )
        for name, state in (r.get("not_running") or {}).items():
            lines.append(f"- {r['phase']}: pod {name} never Running (last seen: {state})")
        if "veths" in r and r["veths_gone"] < r["veths"]:
            lines.append(
                f"- {r['phase']}: {r['veths'] - r['veths_gone']} pod interface(s) never left the bridge"
            )
    return "\n".join(lines)


def interfaces_table(rows: list[dict[str, Any]]) -> str:
    """The ``running-interfaces-*`` phases' Markdown table (:mod:`.multus`): per phase the
    interfaces per pod, Running pods, create → Running "p50 / p99" (s), all Running (s),
    pods/s and interfaces/s to Running, node CPU ms per pod, pool status writes and API
    requests per pod, deletion → all gone (s), correct; then a line per pod that did not run
    or failed its check."""
    head = (
        "| on a real node, through Multus | interfaces/pod | running | s → Running | all Running s "
        "| pods/s | interfaces/s | node CPU ms/pod | pool writes/pod | API req/pod | all gone s | correct |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        if "error" in r:
            lines.append(error_line(r, 12))
            continue
        up = r["create_to_running_s"]
        lines.append(
            f"| {r['phase']} | {r['interfaces']} | {r['running']}/{r['pods']} | {up['p50']} / {up['p99']} "
            f"| {r['all_running_s']} | {r['running_pods_per_s']} | {r['running_interfaces_per_s']} "
            f"| {r['node_cpu_ms_per_pod']} | {r['pool_writes_per_pod']} | {r['api_requests_per_pod']} "
            f"| {r['all_gone_s']} | {'yes' if r['correct'] else 'NO'} |"
        )
    lines.append("")
    for r in rows:
        for name, state in (r.get("not_running") or {}).items():
            lines.append(f"- {r['phase']}: pod {name} never Running (last seen: {state})")
        for name, problems in (r.get("problems") or {}).items():
            lines.append(f"- {r['phase']}: pod {name}: {'; '.join(problems)}")
        if "released" in r and not r["released"]:
            lines.append(f"- {r['phase']}: allocations left in its pools after the pods went")
    return "\n".join(lines)


def correct(r: dict[str, Any]) -> bool:
    """Is the row ``r`` of a phase on kwok nodes correct: every pod bound, no node over its
    capacity, no gang bound in part and, for ip-scheduler, one distinct address of the node's
    pool per pod."""
    ok = r["over_capacity_nodes"] == 0 and r["bound"] == r["pods"] and not r.get("groups_partial")
    if "ip-scheduler" in r["phase"]:
        ok = ok and r["addresses_unique"] and r["addresses_in_node_pool"] and r["addresses"] == r["bound"]
    return bool(ok)


def table(results: list[dict[str, Any]]) -> str:
    """The Markdown table of the phases on kwok nodes, a row per result, then each row's API
    requests per bound pod by kind and what the failover phase saw."""
    head = (
        "| scheduler | bound | pods/s | first bind s | drain pods/s | p50 ms | p90 ms | p99 ms | API req/pod "
        "| peak RSS MB | CPU s | CPU ms/pod | control plane CPU s | max pods/node | correct |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat = r["latency_ms"]
        lines.append(
            f"| {r['phase']} | {r['bound']}/{r['pods']} | {r['throughput_pods_per_s']} "
            f"| {r.get('first_bind_s', '')} | {r.get('drain_pods_per_s', '')} "
            f"| {lat['p50']} | {lat['p90']} | {lat['p99']} | {r['api_requests_per_bound_pod']} "
            f"| {r['scheduler_peak_rss_mb']} | {r['scheduler_cpu_s']} "
            f"| {round(1000 * r['scheduler_cpu_s'] / max(r['bound'], 1), 2)} "
            f"| {r.get('control_plane_cpu_s', '')} "
            f"| {r['max_pods_per_node']} "
            f"| {'yes' if correct(r) else 'NO'} |"
        )
    lines.append("\nAPI requests per bound pod, by verb and resource:\n")
    for r in results:
        kinds = ", ".join(f"{k} {v}" for k, v in r.get("api_requests_per_bound_pod_by_kind", {}).items())
        lines.append(f"- {r['phase']}: {kinds}")
    for r in results:
        if "lease_takeover_s" in r:
            lines.append(
                f"\n{r['phase']}: leader SIGKILLed with {r['bound_at_kill']}/{r['pods']} bound; the standby "
                f"held the lease {r['lease_takeover_s']} s later, bound its first pod {r['first_bind_s']} s "
                f"after the kill and the remaining {r['standby_bound']} at {r['drain_pods_per_s']} pods/s"
            )
    return "\n".join(lines)


def multi_table(results: list[dict[str, Any]]) -> str:
    """The Markdown table of the rows of pods with several addresses (:mod:`.multi`: those with
    ``addresses_per_pod``), "" when there are none: addresses per pod, pods/s, p50 and p99
    create → bound, the scheduler's CPU per pod, NodeIPPool status writes and API requests per
    bound pod, the addresses checked and whether the row is correct; then any problem seen."""
    rows = [r for r in results if "addresses_per_pod" in r]
    if not rows:
        return ""
    head = (
        "| phase | bound | pools | addresses/pod | pods/s | p50 ms | p99 ms | CPU ms/pod "
        "| pool status writes/pod | API req/pod | addresses checked | correct |"
    )
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(
            f"| {r['phase']} | {r['bound']}/{r['pods']} | {r.get('pools', '')} | {r['addresses_per_pod']} "
            f"| {r['throughput_pods_per_s']} | {r['latency_ms']['p50']} | {r['latency_ms']['p99']} "
            f"| {round(1000 * r['scheduler_cpu_s'] / max(r['bound'], 1), 2)} "
            f"| {r.get('pool_status_writes_per_bound_pod', '')} | {r['api_requests_per_bound_pod']} "
            f"| {r['address_total']} ({'distinct' if r['addresses_unique'] else 'NOT distinct'}) "
            f"| {'yes' if correct(r) else 'NO'} |"
        )
    for r in rows:
        lines.extend(f"- {r['phase']}: {problem}" for problem in r.get("address_problems", []))
        if not r.get("pools_settled", True):
            lines.append(f"- {r['phase']}: its pools had not settled when its pods were created")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> bool:
    """PNG of bound pods over time per scheduler; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        times = r["bound_over_time"]
        ax.plot(times, range(1, len(times) + 1), label=r["phase"])
    ax.set_xlabel("seconds since first create")
    ax.set_ylabel("pods bound")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def summary(results: list[dict[str, Any]], extra: dict[str, Any], nodes: int, running_pods: int) -> str:
    """What a run prints on stdout: the table of ``results``, the running phase's (``extra``),
    why it was skipped, the restart figure with ``nodes`` pools and the contention lines."""
    parts = [table(results)] if results else []
    if several := multi_table(results):
        parts.append(f"\nPods with several addresses (dual-stack, further interfaces):\n\n{several}")
    if extra.get("running"):
        parts.append(
            f"\nPods that run, on one real node ({running_pods} pods created, then deleted, at once):\n"
        )
        parts.append(running_table(extra["running"]))
    if "running_skipped" in extra:
        parts.append(f"\n{extra['running_skipped']}")
    if extra.get("running_interfaces"):
        parts.append("\nPods with further interfaces that run, on one real node with Multus:\n")
        parts.append(interfaces_table(extra["running_interfaces"]))
    if "running_interfaces_skipped" in extra:
        parts.append(f"\n{extra['running_interfaces_skipped']}")
    if "restart_to_first_bind_s" in extra:
        parts.append(
            f"\nip-scheduler restart → first bind with {nodes} pools: {extra['restart_to_first_bind_s']} s"
        )
    parts.extend(contention_summary(results))
    return "\n".join(parts)


def document(run: dict[str, Any], results: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of a run: ``run`` (what was asked: preset, nodes, capacity, pods,
    rate, backlog_pods, running_pods), the Kubernetes release, ``results`` and ``extra`` (the
    restart figure, the running phase's rows)."""
    return {**run, "kubernetes": binaries.K8S_VERSION, "results": results, **extra}


def write(doc: dict[str, Any], out: Path) -> None:
    """Write ``doc`` as JSON to ``out`` and, with matplotlib, the PNG beside it (``.png``),
    saying where on stderr."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2))
    print(f"JSON: {out}", file=sys.stderr)
    if doc["results"] and plot(doc["results"], out.with_suffix(".png")):
        print(f"PNG: {out.with_suffix('.png')}", file=sys.stderr)


def all_correct(doc: dict[str, Any]) -> bool:
    """Is every row of the run ``doc`` correct (:func:`correct`, and the running phase's own)?"""
    return (
        all(correct(r) for r in doc["results"])
        and all(r["correct"] for r in doc.get("running", []))
        and all(r["correct"] for r in doc.get("running_interfaces", []))
    )
