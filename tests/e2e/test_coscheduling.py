"""Gang scheduling with PodGroups (scheduling.x-k8s.io/v1alpha1), as a user sees it: pods
all bind or none does, and a group that cannot complete holds no address."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import yaml

from tests.e2e.helpers import (
    PODGROUP_CRD,
    PODGROUP_LABEL,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    events_for,
    member,
    podgroup,
    pods_of,
)
from tests.kube import Kubectl, wait_for

LABEL = PODGROUP_LABEL


def bound(kubectl: Kubectl, ns: str, group: str) -> list[dict[str, Any]]:
    return [p for p in pods_of(kubectl, ns, f"{LABEL}={group}") if p["spec"].get("nodeName")]


def held(pools: Pools, names: list[str]) -> dict[str, str]:
    """Pod (``namespace/name``) → phase of its allocation, over ``names``' pools."""
    out: dict[str, str] = {}
    for name in names:
        for a in (pools.get(name).get("status") or {}).get("allocations", {}).values():
            out[a["pod"]] = a["phase"]
    return out


def podgroup_table(kubectl: Kubectl, ns: str) -> dict[str, dict[str, str]]:
    """``kubectl get podgroups`` (short name ``pg``) parsed: NAME → {column: value}."""
    lines = kubectl("get", "pg", "-n", ns).splitlines()
    header = lines[0].split()
    return {row.split()[0]: dict(zip(header, row.split(), strict=False)) for row in lines[1:]}


def test_a_gang_of_4_on_3_free_addresses_stays_pending_then_binds_when_a_fourth_is_added(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("gang-node-1", "node-1", ["10.7.1.1-10.7.1.2"])
    pools.create("gang-node-2", "node-2", ["10.7.2.1"])
    kubectl.apply(podgroup("job", 4), ns)
    for i in range(4):
        kubectl.apply(member("job", f"job-{i}"), ns)
    # Every pod tried and refused, with the reason, before anything is reserved.
    want = f"PodGroup {ns}/job needs 4 more pod(s) placed to reach minMember 4"

    def refused(name: str) -> list[str]:
        return [
            e["message"] for e in events_for(kubectl, ns, name, "FailedScheduling") if want in e["message"]
        ]

    wait_for(
        "FailedScheduling for want of addresses on all 4 pods",
        lambda: all(refused(f"job-{i}") for i in range(4)),
    )
    assert "free underlay IPs for 3" in refused("job-0")[-1], refused("job-0")
    time.sleep(2)  # retries come and go: still nothing bound, nothing reserved
    assert bound(kubectl, ns, "job") == []
    assert held(pools, ["gang-node-1", "gang-node-2"]) == {}
    wait_for("phase PreScheduling", lambda: podgroup_table(kubectl, ns)["job"]["PHASE"] == "PreScheduling")
    explained = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipscheduler",
            "explain",
            f"{ns}/job-0",
            "--kubeconfig",
            str(kubectl.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert explained.returncode == 1, explained.stdout + explained.stderr
    assert f"PodGroup: {ns}/job, minMember 4: 4 pods, 0 bound" in explained.stdout, explained.stdout
    assert want in explained.stdout, explained.stdout

    started = time.monotonic()
    pools.create("gang-node-2", "node-2", ["10.7.2.1-10.7.2.2"])  # the fourth address
    wait_for("all 4 bound", lambda: len(bound(kubectl, ns, "job")) == 4, timeout=30)
    took = time.monotonic() - started
    pods = bound(kubectl, ns, "job")
    ips = {p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods}
    assert ips == {"10.7.1.1", "10.7.1.2", "10.7.2.1", "10.7.2.2"}
    print(f"4 pods bound {took:.2f}s after the fourth address was added")

    def scheduled_row() -> dict[str, str] | None:
        row = podgroup_table(kubectl, ns)["job"]
        return row if row["PHASE"] in ("Scheduled", "Running") and row["SCHEDULED"] == "4" else None

    row = wait_for("kubectl get pg: Scheduled 4", scheduled_row, timeout=30)
    assert row["MINMEMBER"] == "4"
    assert events_for(kubectl, ns, "job", "Scheduled") or events_for(kubectl, ns, "job", "Running")
    assert_check_clean(kubectl)


def test_a_group_timing_out_releases_every_address_it_reserved(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("gang-t-node-1", "node-1", ["10.7.3.1-10.7.3.3"])
    pools.create("gang-t-node-2", "node-2", ["10.7.4.1-10.7.4.3"])
    names = ["gang-t-node-1", "gang-t-node-2"]
    kubectl.apply(podgroup("slow", 4, timeout=4), ns)
    for i in range(3):
        kubectl.apply(member("slow", f"slow-{i}"), ns)
    # The fourth exists (it counts toward minMember) but is gated: it never gets a node.
    kubectl.apply(member("slow", "slow-3", schedulingGates=[{"name": "example.com/hold"}]), ns)
    keys = {f"{ns}/slow-{i}" for i in range(3)}
    wait_for("3 addresses reserved while they wait at Permit", lambda: set(held(pools, names)) == keys)
    assert bound(kubectl, ns, "slow") == []
    wait_for("every address released after the timeout", lambda: not held(pools, names), timeout=30)
    assert bound(kubectl, ns, "slow") == []
    messages = [
        e["message"] for i in range(3) for e in events_for(kubectl, ns, f"slow-{i}", "FailedScheduling")
    ]
    assert any("rejected due to timeout after waiting 4s at plugin Coscheduling" in m for m in messages), (
        messages
    )
    group_events = wait_for(
        "a Timeout event on the PodGroup", lambda: events_for(kubectl, ns, "slow", "Timeout")
    )
    assert "released" in group_events[-1]["message"]

    # The fourth pod let go: the group gathers again and binds whole.
    kubectl(
        "patch",
        "pod",
        "slow-3",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/schedulingGates"}]',
    )
    wait_for("all 4 bound", lambda: len(bound(kubectl, ns, "slow")) == 4, timeout=30)
    assert len(held(pools, names)) == 4
    assert_check_clean(kubectl)


def test_two_groups_competing_for_the_same_pools_complete_one_after_the_other(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    for i in (1, 2, 3):
        pools.create(f"gang-c-node-{i}", f"node-{i}", [f"10.7.{4 + i}.1-10.7.{4 + i}.2"])  # 6 in all
    names = [f"gang-c-node-{i}" for i in (1, 2, 3)]
    for group in ("alpha", "beta"):
        kubectl.apply(podgroup(group, 4), ns)
    for i in range(4):
        for group in ("alpha", "beta"):  # interleaved as they arrive
            kubectl.apply(member(group, f"{group}-{i}"), ns)

    def one_group_whole() -> str | None:
        counts = {g: len(bound(kubectl, ns, g)) for g in ("alpha", "beta")}
        done = [g for g, n in counts.items() if n == 4]
        return done[0] if done else None

    first = wait_for("one group bound whole", one_group_whole, timeout=60)
    second = "beta" if first == "alpha" else "alpha"
    time.sleep(2)
    # The other holds nothing: no partial reservation blocks either group.
    assert bound(kubectl, ns, second) == []
    assert set(held(pools, names)) == {f"{ns}/{first}-{i}" for i in range(4)}

    kubectl("delete", "pod", "-n", ns, "-l", f"{LABEL}={first}", "--wait=true", "--timeout=60s")
    wait_for(f"{second} bound whole", lambda: len(bound(kubectl, ns, second)) == 4, timeout=60)
    assert set(held(pools, names)) == {f"{ns}/{second}-{i}" for i in range(4)}
    assert_check_clean(kubectl)


def test_a_gang_binds_where_scheduler_plugins_crd_is_installed(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """scheduler-plugins' own CRD has no ``status.scheduled`` (the API server prunes it) and
    no Scheduled column: the gang still binds whole and the status is still kept."""
    theirs = yaml.safe_load(PODGROUP_CRD.read_text())
    version = theirs["spec"]["versions"][0]
    del version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["scheduled"]
    version["additionalPrinterColumns"] = [
        c for c in version["additionalPrinterColumns"] if c["name"] != "Scheduled"
    ]
    kubectl.apply(theirs)
    try:
        pools.create("gang-u-node-1", "node-1", ["10.7.9.1-10.7.9.2"])
        kubectl.apply(podgroup("up", 2), ns)
        for i in range(2):
            kubectl.apply(member("up", f"up-{i}"), ns)
        wait_for("both bound", lambda: len(bound(kubectl, ns, "up")) == 2, timeout=30)

        def kept() -> dict[str, Any] | None:
            status = kubectl.json("get", "podgroup", "up", "-n", ns).get("status") or {}
            return status if status.get("phase") in ("Scheduled", "Running") else None

        status = wait_for("status phase Scheduled or Running", kept, timeout=30)
        assert "scheduled" not in status  # pruned by their schema
        assert_check_clean(kubectl)
    finally:
        kubectl("apply", "-f", str(PODGROUP_CRD))


def test_a_group_whose_min_resources_the_cluster_lacks_waits_until_they_fit(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """``minResources`` checked as upstream's Coscheduling: the nodes' allocatable minus
    their pods' requests, summed, must cover it; until then no pod is reserved or bound,
    and each says what is missing. Lowering it (a PodGroup update) lets the group bind."""
    pools.create("gang-res", "node-1", ["10.7.5.1-10.7.5.4"])
    group = podgroup("big", 2)
    group["spec"]["minResources"] = {"cpu": "100000", "memory": "1Gi"}
    kubectl.apply(group, ns)
    for i in range(2):
        kubectl.apply(member("big", f"big-{i}", nodeSelector={"kubernetes.io/hostname": "node-1"}), ns)

    def gap(name: str) -> list[str]:
        return [
            e["message"]
            for e in events_for(kubectl, ns, name, "FailedScheduling")
            if "resource gap: cpu " in e["message"]
        ]

    wait_for("FailedScheduling with the resource gap on both pods", lambda: gap("big-0") and gap("big-1"))
    assert "memory" not in gap("big-0")[-1], gap("big-0")  # the cluster has 1Gi free
    time.sleep(2)
    assert bound(kubectl, ns, "big") == []
    assert held(pools, ["gang-res"]) == {}
    group["spec"]["minResources"] = {"cpu": "1", "memory": "1Gi"}
    kubectl.apply(group, ns)
    wait_for("both bound", lambda: len(bound(kubectl, ns, "big")) == 2, timeout=30)
    assert_check_clean(kubectl)
