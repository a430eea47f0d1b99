"""IP-aware preemption on a real control plane, as a kube-scheduler user sees it: every
address is held by pods of low priority, and a Deployment of high priority arrives."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    deployment,
    events_for,
    nodeippools_table,
    pods_of,
)
from tests.kube import Kubectl, pod_manifest, wait_for

NODES = ("node-1", "node-2", "node-3")


@pytest.fixture
def priorities(kubectl: Kubectl, ns: str) -> Iterator[tuple[str, str]]:
    """Two PriorityClasses of this test, low (100) and high (1000), deleted afterwards."""
    names = (f"{ns}-low", f"{ns}-high")
    for name, value in zip(names, (100, 1000), strict=True):
        kubectl.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    yield names
    kubectl.run("delete", "priorityclass", *names, "--ignore-not-found", check=False)


def _live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in _live(pods) if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]


def test_a_high_priority_deployment_preempts_holders_of_the_last_addresses(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str, priorities: tuple[str, str]
) -> None:
    low, high = priorities
    for i, node in enumerate(NODES, start=1):
        pools.create(f"pool-{ns}-{node}", node, [f"10.9{i}.0.1-10.9{i}.0.2"])
    kubectl.apply(deployment("low", 6, priorityClassName=low), ns)
    lows = wait_for(
        "6 low pods Running", lambda: len(_bound(pods_of(kubectl, ns, "app=low"))) == 6 or None, 120
    )
    assert lows

    kubectl.apply(deployment("high", 2, priorityClassName=high), ns)

    def highs_bound() -> list[dict[str, Any]] | None:
        pods = _bound(pods_of(kubectl, ns, "app=high"))
        return pods if len(pods) == 2 else None

    bound = wait_for("2 high pods bound after preemption", highs_bound, timeout=120)
    addresses = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in bound]
    assert len(set(addresses)) == 2

    preempted = [
        e for e in kubectl.json("get", "events", "-n", ns)["items"] if e.get("reason") == "Preempted"
    ]
    high_uids = {p["metadata"]["uid"] for p in bound}
    assert len(preempted) == 2, f"one victim per high pod: {[e['message'] for e in preempted]}"
    for e in preempted:
        assert e["type"] == "Normal"
        assert e["involvedObject"]["name"].startswith("low-")
        uid, node = e["message"].removeprefix("Preempted by pod ").split(" on node ")
        assert uid in high_uids and node in NODES, e["message"]

    for p in bound:
        name = p["metadata"]["name"]
        failed = events_for(kubectl, ns, name, "FailedScheduling")
        assert (
            failed and failed[0]["message"] == "0/3 nodes are available: 3 node(s) had no free underlay IPs."
        ), "the high pod reports the filters' verdict once, as kube-scheduler does when preemption succeeds"
        assert events_for(kubectl, ns, name, "Scheduled")

    def low_replacements_report() -> list[dict[str, Any]] | None:
        pending = [p for p in _live(pods_of(kubectl, ns, "app=low")) if not p["spec"].get("nodeName")]
        msgs = [events_for(kubectl, ns, p["metadata"]["name"], "FailedScheduling") for p in pending]
        return pending if len(pending) == 2 and all(msgs) else None

    pending = wait_for("the 2 low replacements Pending with a reason", low_replacements_report, timeout=60)
    for p in pending:
        (event,) = events_for(kubectl, ns, p["metadata"]["name"], "FailedScheduling")
        assert event["message"] == (
            "0/3 nodes are available: 3 node(s) had no free underlay IPs. preemption: 0/3 nodes are "
            "available: 3 No preemption victims found for incoming pod.."
        ), "equal priority is no victim (kube-scheduler's wording, double stop included)"
    explained = _explain(kubectl, f"{ns}/{pending[0]['metadata']['name']}")
    assert explained.returncode == 1, explained.stderr
    assert (
        "Preemption: would not help: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
        in explained.stdout.splitlines()
    ), explained.stdout
    assert_check_clean(kubectl)


def _explain(kubectl: Kubectl, target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ipscheduler", "explain", target, "--kubeconfig", str(kubectl.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_address_a_victim_frees_is_held_for_the_preemptor(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str, priorities: tuple[str, str]
) -> None:
    """Better than upstream: while the victim terminates (kwok ends it 1 s or more after the
    delete), the pool holds a Nominated place for the preemptor, which `kubectl get nip`
    shows; a pod of lower priority waiting meanwhile does not get the address, the preemptor
    does."""
    low, high = priorities
    pool = f"pool-{ns}"
    pools.create(pool, "node-1", ["10.98.0.1"])
    kubectl.create(pod_manifest("victim", scheduler=SCHEDULER, priorityClassName=low), ns)
    wait_for(
        "the victim bound", lambda: kubectl.json("get", "pod", "victim", "-n", ns)["spec"].get("nodeName")
    )
    kubectl.create(pod_manifest("late", scheduler=SCHEDULER, priorityClassName=low), ns)
    wait_for("late FailedScheduling", lambda: events_for(kubectl, ns, "late", "FailedScheduling"))
    kubectl.create(pod_manifest("preemptor", scheduler=SCHEDULER, priorityClassName=high), ns)

    def held() -> dict[str, str] | None:
        row = nodeippools_table(kubectl)[pool]
        return row if row["NOMINATED"] == "1" else None

    row = wait_for("a Nominated place in kubectl get nip", held, timeout=30, interval=0.1)
    assert row["FREE"] == "0"
    bound = wait_for(
        "the preemptor bound",
        lambda: (p := kubectl.json("get", "pod", "preemptor", "-n", ns))["spec"].get("nodeName") and p,
        timeout=60,
    )
    assert bound["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.98.0.1"
    assert bound["status"].get("nominatedNodeName") in (None, "node-1")
    assert not kubectl.json("get", "pod", "late", "-n", ns)["spec"].get("nodeName")
    allocs = (pools.get(pool).get("status") or {}).get("allocations") or {}
    assert [a["pod"] for a in allocs.values()] == [f"{ns}/preemptor"], allocs
    assert_check_clean(kubectl)


def test_a_pod_short_of_an_address_for_net1_preempts_the_holder_of_that_pools_address(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str, priorities: tuple[str, str]
) -> None:
    """Preemption counts a further interface: node-1's RDMA pool (net1's) has one address,
    held by a pod of low priority; its general pool has room. The high-priority pod evicts
    that holder, its net1 place is held for it (Nominated, recording net1), and it binds with
    that address on net1."""
    low, high = priorities
    general, rdma = f"gen-{ns}", f"rdma-{ns}"
    pools.create(general, "node-1", ["10.97.0.1-10.97.0.3"])
    pools.create(rdma, "node-1", ["10.97.1.1"])
    annotations = {"ipscheduler.io/pools": general, "ipscheduler.io/interface-pools": f'{{"net1": "{rdma}"}}'}

    def multihomed(name: str, priority: str) -> dict[str, Any]:
        body = pod_manifest(name, scheduler=SCHEDULER, priorityClassName=priority)
        body["metadata"]["annotations"] = annotations
        return body

    kubectl.create(multihomed("victim", low), ns)
    wait_for(
        "the victim bound", lambda: kubectl.json("get", "pod", "victim", "-n", ns)["spec"].get("nodeName")
    )
    kubectl.create(multihomed("preemptor", high), ns)
    failed = wait_for(
        "the preemptor's FailedScheduling", lambda: events_for(kubectl, ns, "preemptor", "FailedScheduling")
    )
    assert "1 node(s) had no free underlay IP for interface net1" in failed[0]["message"], failed[0][
        "message"
    ]
    bound = wait_for(
        "the preemptor bound",
        lambda: (p := kubectl.json("get", "pod", "preemptor", "-n", ns))["spec"].get("nodeName") and p,
        timeout=60,
    )
    interfaces = json.loads(bound["metadata"]["annotations"]["ipscheduler.io/interfaces"])
    assert (interfaces["net1"]["pool"], interfaces["net1"]["ips"]) == (rdma, ["10.97.1.1"])
    preempted = events_for(kubectl, ns, "victim", "Preempted")
    assert preempted and preempted[0]["message"].startswith(f"Preempted by pod {bound['metadata']['uid']}")
    allocs = (pools.get(rdma).get("status") or {}).get("allocations") or {}
    assert [(a["pod"], a.get("interface")) for a in allocs.values()] == [(f"{ns}/preemptor", "net1")], allocs
    assert_check_clean(kubectl)
