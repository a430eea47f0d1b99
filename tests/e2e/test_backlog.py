"""Starting under a backlog: pods pending before the scheduler starts (a failover, a rollout of
the scheduler, a scale-up faster than binding) are all bound, each with its own address, and
scheduling begins as soon as the start-up steps are done, not after the whole backlog went
through some gate (a kopf index on pods once held every handler for minutes). After a
failover, the pods the dead leader was binding keep the addresses it reserved for them and are
bound at once, not after ``--reserved-ttl``.

Speed is the benchmark's business (``python -m hack.bench --phases backlog-ours``); this test asserts
the outcome and the order of what the scheduler reports.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.helpers import (
    Pools,
    SchedulerProcess,
    assert_check_clean,
    deployment,
    nodeippools_table,
    pods_of,
)
from tests.kube import Kubectl, pod_manifest, wait_for

NODES = 20
PER_NODE = 100
PODS = NODES * PER_NODE  # every address taken: no slack hides a double allocation


@pytest.fixture
def backlog_nodes(cluster: Any, kubectl: Kubectl) -> Iterator[list[str]]:
    """NODES fresh kwok nodes (the session's 3 take 110 pods each), deleted afterwards."""
    names: list[str] = cluster.add_nodes(NODES)
    yield names
    kubectl.run("delete", "node", *names, "--wait=true", "--timeout=60s", check=False)


def _count(kubectl: Kubectl, ns: str, field_selector: str) -> int:
    out = kubectl("get", "pods", "-n", ns, "--field-selector", field_selector, "-o", "name")
    return len(out.split())


def test_a_backlog_pending_before_start_is_bound_with_distinct_addresses(
    scheduler_factory: Callable[..., SchedulerProcess],
    kubectl: Kubectl,
    backlog_nodes: list[str],
    pools: Pools,
    ns: str,
) -> None:
    for i, node in enumerate(backlog_nodes):
        pools.create(f"backlog-{node}", node, [f"10.70.{i}.1-10.70.{i}.{PER_NODE}"])
    kubectl.apply(deployment("backlog", PODS), ns)
    wait_for(
        f"{PODS} pods pending (no scheduler of ours runs yet)",
        lambda: _count(kubectl, ns, "spec.nodeName=") == PODS,
        timeout=180,
        interval=2,
    )

    sched = scheduler_factory(wait="")
    wait_for(
        f"all {PODS} pods bound",
        lambda: _count(kubectl, ns, "spec.nodeName!=") == PODS,
        timeout=600,
        interval=2,
    )

    pods = pods_of(kubectl, ns)
    pool_of = {node: i for i, node in enumerate(backlog_nodes)}
    ips = []
    for p in pods:
        node = p["spec"]["nodeName"]
        annotations = p["metadata"].get("annotations") or {}
        ip = ipaddress.IPv4Address(annotations["ipscheduler.io/ip"])
        assert annotations["ipscheduler.io/pool"] == f"backlog-{node}", p["metadata"]["name"]
        i = pool_of[node]
        assert ipaddress.IPv4Address(f"10.70.{i}.1") <= ip <= ipaddress.IPv4Address(f"10.70.{i}.{PER_NODE}")
        ips.append(ip)
    assert len(set(ips)) == PODS, "an address was handed out twice"

    def full() -> bool:
        table = nodeippools_table(kubectl)
        rows = [table[f"backlog-{node}"] for node in backlog_nodes]
        return all(r["ALLOCATED"] == str(PER_NODE) and r["FREE"] == "0" for r in rows)

    wait_for("kubectl get nodeippools: every backlog pool full", full, timeout=30)
    assert_check_clean(kubectl)

    # Each pod went through exactly one successful scheduling cycle and one Binding; none
    # was found unschedulable or failed to bind while the backlog was taken in.
    assert sched.metric("scheduler_schedule_attempts_total", 'result="scheduled"') == PODS
    assert sched.metric("scheduler_schedule_attempts_total", 'result="unschedulable"') == 0
    assert sched.metric("ipscheduler_bind_failures_total") == 0
    # The log, in order: the informers synced, scheduling started (it does not wait for the
    # start-up reconcile, which runs beside it and finished too), pods bound.
    log = sched.log_path.read_text()
    synced = log.index("informers synced")
    started = log.index("scheduling started with")
    first_bound = log.index(f"bound {ns}/")
    assert synced < started < first_bound
    assert "start-up reconcile: {" in log
    assert log.count(f"bound {ns}/") == PODS


def _failover_world(kubectl: Kubectl, pools: Pools, ns: str, pool: str, node: str) -> tuple[str, str]:
    """A pending pod pinned to ``node`` whose pool records a Reserved allocation for it, made
    a moment ago by a replica that is gone (as a leader SIGKILLed between Reserve and Bind
    leaves it). Returns (the pod's UID, the reserved address)."""
    pools.create(pool, node, [f"10.71.{node.rpartition('-')[2]}.1-10.71.{node.rpartition('-')[2]}.8"])
    pod = pod_manifest("was-binding", scheduler="ip-scheduler", nodeSelector={"kubernetes.io/hostname": node})
    kubectl.create(pod, ns)
    uid = kubectl.json("get", "pod", "was-binding", "-n", ns)["metadata"]["uid"]
    ip = f"10.71.{node.rpartition('-')[2]}.5"  # not the lowest free: only a takeover gives it
    since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    allocation = {"ip": ip, "pod": f"{ns}/was-binding", "phase": "Reserved", "since": since}
    allocation["reservedBy"] = "dead-leader_0000/cafe0001"
    patch = json.dumps({"status": {"allocations": {uid: allocation}}})
    kubectl("patch", "nodeippool", pool, "--subresource=status", "--type=merge", "-p", patch)
    return uid, ip


def test_a_new_leader_binds_the_pods_the_old_leader_was_binding_with_their_addresses(
    scheduler_factory: Callable[..., SchedulerProcess], kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    uid, ip = _failover_world(kubectl, pools, ns, "takeover", "node-2")
    lease = f"takeover-{secrets.token_hex(3)}"
    sched = scheduler_factory(
        "--leader-elect", "--leader-elect-namespace", "default", "--leader-elect-lease-name", lease
    )
    pod = wait_for(
        "was-binding bound by the new leader",
        lambda: (p := kubectl.json("get", "pod", "was-binding", "-n", ns))["spec"].get("nodeName") and p,
        timeout=30,
    )
    assert pod["metadata"]["uid"] == uid
    assert pod["metadata"]["annotations"]["ipscheduler.io/ip"] == ip, "the reservation was not taken over"
    # At once: the old leader's reservation was never treated as another cycle's in flight.
    assert "holds a Reserved allocation" not in sched.log_path.read_text()
    allocations = pools.get("takeover")["status"]["allocations"]
    assert list(allocations) == [uid] and allocations[uid]["ip"] == ip
    assert_check_clean(kubectl)


def test_without_leader_election_another_replicas_fresh_reservation_is_left_to_it(
    scheduler_factory: Callable[..., SchedulerProcess], kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Without a Lease nothing says the replica that reserved is gone: its reservation is
    another cycle's in flight until ``--reserved-ttl`` (here 60 s) passes."""
    _failover_world(kubectl, pools, ns, "no-takeover", "node-3")
    sched = scheduler_factory("--no-leader-elect")
    wait_for("the reservation refused", lambda: sched.logged("holds a Reserved allocation"), timeout=30)
    assert not kubectl.json("get", "pod", "was-binding", "-n", ns)["spec"].get("nodeName")
