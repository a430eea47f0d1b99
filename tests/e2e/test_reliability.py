"""Reliability: leaks, pool lifecycle, node loss, replicas, API outages."""

from __future__ import annotations

import json
import secrets
import signal
import time
from collections.abc import Callable
from typing import Any

from tests.builders import bound_pods
from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    deployment,
    events_for,
    ipscheduler_check,
    leader_and_standby,
    pod_template,
    pods_of,
    workload,
)
from tests.kube import Kubectl, pod_manifest, wait_for

Factory = Callable[..., SchedulerProcess]
FAST_GC = ("--gc-interval", "2", "--reserved-ttl", "5")


def _ready(pools: Pools, name: str) -> dict[str, Any] | None:
    conds = pools.get(name).get("status", {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), None)


def _pinned(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return pod_manifest(name, scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": node}, **spec)


def test_gc_releases_leaks_by_uid_never_by_name(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("gc", "node-1", ["10.3.0.1-10.3.0.4"])
    scheduler_factory(*FAST_GC)
    kubectl.create(_pinned("x", "node-1"), ns)
    pod = wait_for(
        "x bound", lambda: (p := kubectl.json("get", "pod", "x", "-n", ns))["spec"].get("nodeName") and p
    )
    uid, ip = pod["metadata"]["uid"], pod["metadata"]["annotations"]["ipscheduler.io/ip"]
    # A leaked allocation under the SAME name but another (dead) UID, as a crashed controller leaves it.
    ghost = "00000000-0000-0000-0000-00000000dead"
    leak = {
        "status": {
            "allocations": {
                ghost: {"ip": "10.3.0.4", "pod": f"{ns}/x", "phase": "Bound", "since": "2026-01-01T00:00:00Z"}
            }
        }
    }
    kubectl("patch", "nodeippool", "gc", "--subresource=status", "--type=merge", "-p", json.dumps(leak))
    wait_for(
        "leak released", lambda: ghost not in (pools.get("gc")["status"].get("allocations") or {}), timeout=30
    )
    allocs = pools.get("gc")["status"]["allocations"]
    assert allocs[uid]["ip"] == ip, "the live pod of the same name kept its address"
    assert_check_clean(kubectl)


def test_pool_deletion_waits_for_its_allocations(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("fin", "node-2", ["10.4.0.1-10.4.0.2"])
    kubectl.create(_pinned("holder", "node-2"), ns)
    wait_for("bound", lambda: kubectl.json("get", "pod", "holder", "-n", ns)["spec"].get("nodeName"))
    wait_for(
        "finalizer",
        lambda: "ipscheduler.io/allocations" in (pools.get("fin")["metadata"].get("finalizers") or []),
    )
    kubectl("delete", "nodeippool", "fin", "--wait=false")
    cond = wait_for("Terminating", lambda: (c := _ready(pools, "fin")) and c["reason"] == "Terminating" and c)
    assert "1 allocation" in cond["message"]
    ev = wait_for(
        "DeletionBlocked event",
        lambda: [
            e
            for e in kubectl.json("get", "events", "-n", "default")["items"]
            if e["involvedObject"].get("name") == "fin" and e["reason"] == "DeletionBlocked"
        ],
    )
    assert ev[0]["type"] == "Warning" and f"{ns}/holder" in ev[0]["message"]
    assert kubectl.run("get", "nodeippool", "fin", check=False).returncode == 0, "pool vanished under its pod"
    kubectl("delete", "pod", "holder", "-n", ns, "--wait=true")
    kubectl("wait", "--for=delete", "nodeippool/fin", "--timeout=30s")


def test_shrinking_keeps_allocations_and_hands_out_nothing_new(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("shrink", "node-3", ["10.5.0.1-10.5.0.6"])
    for i in range(4):
        kubectl.create(_pinned(f"s{i}", "node-3"), ns)
    wait_for("4 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 4)
    before = {
        p["metadata"]["uid"]: p["metadata"]["annotations"]["ipscheduler.io/ip"]
        for p in bound_pods(pods_of(kubectl, ns))
    }
    pools.create("shrink", "node-3", ["10.5.0.1-10.5.0.2"])  # re-apply with fewer addresses
    cond = wait_for(
        "OverCommitted", lambda: (c := _ready(pools, "shrink")) and c["reason"] == "OverCommitted" and c
    )
    assert cond["status"] == "False" and "4 allocated" in cond["message"]
    status = pools.get("shrink")["status"]
    assert (status["capacity"], status["allocated"], status["free"]) == (2, 4, 0)
    assert {u: a["ip"] for u, a in status["allocations"].items()} == before
    kubectl.create(_pinned("late", "node-3"), ns)
    wait_for("late FailedScheduling", lambda: events_for(kubectl, ns, "late", "FailedScheduling"))
    report = ipscheduler_check(kubectl.kubeconfig)
    assert report.returncode == 1 and "pool shrink: allocated 4 > capacity 2" in report.stdout
    # Free three: the late pod may now only get an address that is still in the spec.
    gone = [p["metadata"]["name"] for p in bound_pods(pods_of(kubectl, ns))][:3]
    kubectl("delete", "pod", "-n", ns, *gone, "--wait=true")
    late = wait_for(
        "late bound",
        lambda: (p := kubectl.json("get", "pod", "late", "-n", ns))["spec"].get("nodeName") and p,
    )
    assert late["metadata"]["annotations"]["ipscheduler.io/ip"] in {"10.5.0.1", "10.5.0.2"}
    assert_check_clean(kubectl)


def test_deleted_node_gives_its_addresses_back(
    scheduler: SchedulerProcess, cluster: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    (node,) = cluster.add_nodes(1)
    try:
        pools.create("doomed", node, ["10.6.0.1-10.6.0.3"])
        for i in range(2):
            kubectl.create(_pinned(f"d{i}", node, terminationGracePeriodSeconds=0), ns)
        wait_for("2 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 2)
        assert pools.get("doomed")["status"]["allocated"] == 2
    finally:
        kubectl("delete", "node", node)
    # kube-controller-manager's pod GC deletes pods of a deleted node (after its 40 s quarantine).
    wait_for(
        "addresses released",
        lambda: pools.get("doomed")["status"].get("allocated") == 0,
        timeout=120,
        interval=2,
    )
    cond = wait_for(
        "NodeNotFound", lambda: (c := _ready(pools, "doomed")) and c["reason"] == "NodeNotFound" and c
    )
    assert node in cond["message"]
    assert_check_clean(kubectl)


def test_two_schedulers_without_leader_election_never_double_allocate(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    for i in (1, 2, 3):
        pools.create(f"dup-{i}", f"node-{i}", [f"10.7.{i}.1-10.7.{i}.5"])
    scheduler_factory("--no-leader-elect")
    scheduler_factory("--no-leader-elect")
    kubectl.apply(deployment("race", 20), ns)
    wait_for("15 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 15, timeout=90)
    time.sleep(3)  # let both schedulers retry the 5 pending pods a few times
    bound = bound_pods(pods_of(kubectl, ns))
    ips = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in bound]
    assert len(bound) == 15 and len(set(ips)) == 15
    assert_check_clean(kubectl)


def test_two_schedulers_never_share_an_address_of_any_family_or_interface(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Two active replicas place RequireDualStack pods with a further interface: every node's
    first pool has 5 IPv4 and 3 IPv6 addresses (IPv6 the limit: 9 pods), its net1 pool 4; no
    IPv4, IPv6 or net1 address is ever given to two pods, and the rest wait."""
    for i in (1, 2, 3):
        pools.create(f"dual-{i}", f"node-{i}", [f"10.9.{i}.1-10.9.{i}.5", f"fd00:9:{i}::1-fd00:9:{i}::3"])
        pools.create(f"net1-{i}", f"node-{i}", [f"10.19.{i}.1-10.19.{i}.4"])
    scheduler_factory("--no-leader-elect")
    scheduler_factory("--no-leader-elect")
    annotations = {
        "ipscheduler.io/pools": "dual-1,dual-2,dual-3",
        "ipscheduler.io/ip-family-policy": "RequireDualStack",
        "ipscheduler.io/interface-pools": json.dumps({"net1": "net1-1,net1-2,net1-3"}),
    }
    kubectl.apply(workload("Deployment", "race2", 12, pod_template("race2", annotations)), ns)
    wait_for("9 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 9, timeout=90)
    time.sleep(3)  # let both schedulers retry the 3 pending pods a few times
    bound = bound_pods(pods_of(kubectl, ns))
    addresses = []
    for p in bound:
        ann = p["metadata"]["annotations"]
        ips = ann["ipscheduler.io/ips"].split(",")
        net1 = json.loads(ann["ipscheduler.io/interfaces"])["net1"]
        assert len(ips) == 2 and len(net1["ips"]) == 1
        assert net1["pool"] == f"net1-{p['spec']['nodeName'][-1]}"
        addresses += [*ips, *net1["ips"]]
    assert len(bound) == 9 and len(addresses) == 27 and len(set(addresses)) == 27
    assert_check_clean(kubectl)


def test_leader_election_standby_takes_over(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("le", "node-1", ["10.8.0.1-10.8.0.9"])
    lease = f"le-{secrets.token_hex(3)}"
    args = ("--leader-elect", "--leader-elect-namespace", "default", "--leader-elect-lease-name", lease)
    first = scheduler_factory(*args)  # waits for its start-up reconcile: it leads
    second = scheduler_factory(*args, wait="waiting for lease")
    wait_for("first leads", lambda: first.probe("/readyz") == (200, "ok: leader\n"), timeout=15)
    wait_for("standby ready", lambda: second.probe("/readyz") == (200, "ok: standby\n"), timeout=15)
    assert second.probe("/healthz")[0] == 200
    holder = kubectl.json("get", "lease", lease, "-n", "default")["spec"]["holderIdentity"]
    first.kill(signal.SIGKILL)
    killed = time.monotonic()
    kubectl.create(_pinned("after-failover", "node-1"), ns)
    wait_for("second leads", lambda: second.probe("/readyz") == (200, "ok: leader\n"), timeout=45)
    print(f"failover took {time.monotonic() - killed:.1f}s (lease duration 15s)")
    wait_for(
        "scheduled by the new leader",
        lambda: kubectl.json("get", "pod", "after-failover", "-n", ns)["spec"].get("nodeName"),
        timeout=30,
    )
    assert kubectl.json("get", "lease", lease, "-n", "default")["spec"]["holderIdentity"] != holder
    assert_check_clean(kubectl)


def test_a_leader_stopped_by_sigterm_releases_the_lease_and_the_standby_schedules_at_once(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """kube-scheduler's ReleaseOnCancel: a rollout (SIGTERM) must not stall scheduling for a
    lease duration (15 s) as a crash (SIGKILL, the test above) does."""
    pools.create("handover", "node-1", ["10.8.1.1-10.8.1.9"])
    # Their own schedulerName: the module's shared scheduler must not be the one that binds.
    first, second, lease = leader_and_standby(scheduler_factory, "ho", "--scheduler-name", "handover")
    wait_for("first leads", lambda: first.probe("/readyz") == (200, "ok: leader\n"), timeout=15)
    wait_for("standby ready", lambda: second.probe("/readyz") == (200, "ok: standby\n"), timeout=15)
    holder = kubectl.json("get", "lease", lease, "-n", "default")["spec"]["holderIdentity"]
    signalled = time.monotonic()
    first.kill(signal.SIGTERM)  # returns once it exited
    exited = time.monotonic()
    assert first.proc is not None and first.proc.returncode == 0, first.log_tail()
    assert f"released lease default/{lease}" in first.log_path.read_text(), first.log_tail()
    pod = pod_manifest(
        "after-handover", scheduler="handover", nodeSelector={"kubernetes.io/hostname": "node-1"}
    )
    kubectl.create(pod, ns)
    node = wait_for(
        "scheduled by the standby",
        lambda: kubectl.json("get", "pod", "after-handover", "-n", ns)["spec"].get("nodeName"),
        timeout=30,
        interval=0.1,
    )
    bound = time.monotonic()
    print(
        f"SIGTERM handover: leader exited {exited - signalled:.2f}s after SIGTERM; the standby bound a pod "
        f"{bound - exited:.2f}s after that ({bound - signalled:.2f}s in all; lease duration 15s)"
    )
    assert node == "node-1"
    assert bound - exited < 10, "the standby waited for the lease to expire: it was not released"
    assert second.probe("/readyz") == (200, "ok: leader\n")  # it bound the pod: it leads
    assert kubectl.json("get", "lease", lease, "-n", "default")["spec"].get("holderIdentity") not in (
        None,
        holder,
    )
    assert_check_clean(kubectl)


def test_api_server_outage_is_survived(
    scheduler: SchedulerProcess, cluster: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("outage", "node-2", ["10.9.0.1-10.9.0.8"])
    kubectl.apply(deployment("ride", 3, nodeSelector={"kubernetes.io/hostname": "node-2"}), ns)
    wait_for("3 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 3)
    cluster.stop_component("kube-apiserver")
    time.sleep(10)
    cluster.start_component("kube-apiserver")
    assert scheduler.proc is not None and scheduler.proc.poll() is None, "scheduler died during the outage"
    kubectl("scale", "deployment", "ride", "-n", ns, "--replicas=6")
    wait_for(
        "6 bound after the outage",
        lambda: len(bound_pods(pods_of(kubectl, ns))) == 6,
        timeout=120,
        interval=1,
    )
    assert_check_clean(kubectl, timeout=60)
