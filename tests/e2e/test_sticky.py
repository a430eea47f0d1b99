"""Sticky addresses (release policy StatefulSet), end to end as a user sees them: a
StatefulSet pod deleted comes back with its address and node; scaling down and deleting the
StatefulSet release what it no longer wants."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    assert_check_clean,
    deployment,
    events_for,
    pods_of,
    statefulset,
)
from tests.kube import Kubectl, pod_manifest, wait_for

pytestmark = pytest.mark.e2e


def placed(kubectl: Kubectl, ns: str, app: str) -> dict[str, tuple[str, str, str]]:
    """Pod name → (UID, node, address) of the bound, live pods of ``app``."""
    out = {}
    for p in pods_of(kubectl, ns, f"app={app}"):
        ip = (p["metadata"].get("annotations") or {}).get("ipscheduler.io/ip")
        if p["spec"].get("nodeName") and ip and not p["metadata"].get("deletionTimestamp"):
            out[p["metadata"]["name"]] = (p["metadata"]["uid"], p["spec"]["nodeName"], ip)
    return out


def all_placed(kubectl: Kubectl, ns: str, app: str, n: int) -> dict[str, tuple[str, str, str]]:
    """:func:`placed` once ``n`` pods of ``app`` are placed."""

    def enough() -> dict[str, tuple[str, str, str]] | None:
        now = placed(kubectl, ns, app)
        return now if len(now) == n else None

    return wait_for(f"{n} pods of {app} placed", enough, timeout=60)


def allocations(pools: Pools, names: list[str]) -> dict[str, dict[str, Any]]:
    """Pod UID → allocation, over ``names``."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        out.update((pools.get(name).get("status") or {}).get("allocations") or {})
    return out


POOLS = ["sticky-1", "sticky-2", "sticky-3"]


def _pools(pools: Pools) -> None:
    for i, name in enumerate(POOLS, 1):
        pools.create(name, f"node-{i}", [f"10.55.{i}.10-10.55.{i}.19"])


def test_a_deleted_statefulset_pod_comes_back_with_its_address_and_node(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    scheduler_factory()
    _pools(pools)
    kubectl.apply(statefulset("web", 3), ns)

    before = all_placed(kubectl, ns, "web", 3)
    kept = {a["identity"]: a for a in allocations(pools, POOLS).values()}
    assert sorted(kept) == [f"{ns}/web-0", f"{ns}/web-1", f"{ns}/web-2"]
    assert {a["releasePolicy"] for a in kept.values()} == {"StatefulSet"}
    for name in ("web-1", "web-2"):
        kubectl("delete", "pod", name, "-n", ns, "--wait=true")

        def back(name: str = name) -> tuple[str, str, str] | None:
            now = placed(kubectl, ns, "web").get(name)
            return now if now is not None and now[0] != before[name][0] else None

        again = wait_for(f"{name} back", back, timeout=60)
        assert again[1:] == before[name][1:], f"{name}: same node and address as before"
    assert_check_clean(kubectl)


def test_scaling_down_and_deleting_the_statefulset_release_its_addresses(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    scheduler_factory("--gc-interval", "2")
    _pools(pools)
    kubectl.apply(statefulset("db", 3), ns)
    wait_for("3 placed", lambda: len(placed(kubectl, ns, "db")) == 3, timeout=60)

    def identities() -> dict[str, str]:
        return {a["identity"]: a["phase"] for a in allocations(pools, POOLS).values() if a.get("identity")}

    kubectl("scale", "statefulset", "db", "-n", ns, "--replicas=2")
    wait_for("db-2 released", lambda: f"{ns}/db-2" not in identities(), timeout=60)
    assert sorted(identities()) == [f"{ns}/db-0", f"{ns}/db-1"]
    kubectl("scale", "statefulset", "db", "-n", ns, "--replicas=3")
    wait_for("db-2 placed again", lambda: "db-2" in placed(kubectl, ns, "db"), timeout=60)
    kubectl("delete", "statefulset", "db", "-n", ns, "--wait=true")
    wait_for("every address released", lambda: identities() == {}, timeout=90)
    assert_check_clean(kubectl)


def test_a_pod_whose_retained_node_is_gone_is_placed_anew_after_its_retain_timeout(
    scheduler_factory: Any, cluster: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    scheduler_factory()
    (node,) = cluster.add_nodes(1)
    try:
        pools.create("away", node, ["10.56.9.10-10.56.9.19"])
        pools.create("home", "node-1", ["10.56.1.10-10.56.1.19"])
        wait_for(
            f"{node} untainted",
            lambda: not kubectl.json("get", "node", node)["spec"].get("taints"),
            timeout=120,
        )
        annotations = {"ipscheduler.io/pools": "away, home", "ipscheduler.io/retain-timeout": "5s"}
        kubectl.apply(statefulset("mover", 1, **annotations), ns)
        first = wait_for("mover-0 placed", lambda: placed(kubectl, ns, "mover").get("mover-0"), timeout=60)
        assert first[1:] == (node, "10.56.9.10")
        kubectl("delete", "node", node, "--wait=true")
        kubectl("delete", "pod", "mover-0", "-n", ns, "--force", "--grace-period=0")

        def moved() -> tuple[str, str, str] | None:
            now = placed(kubectl, ns, "mover").get("mover-0")
            return now if now is not None and now[0] != first[0] else None

        again = wait_for("mover-0 placed anew", moved, timeout=90)
        assert again[1:] == ("node-1", "10.56.1.10")
        ev = wait_for("AddressRehomed", lambda: events_for(kubectl, ns, "mover-0", "AddressRehomed"))
        assert ev[0]["type"] == "Warning"
        assert ev[0]["message"] == (
            "retained address 10.56.9.10 of NodeIPPool away released: its node could not take the pod "
            "for 5s; the pod now has 10.56.1.10 of home on node-1"
        )
        assert not (pools.get("away").get("status") or {}).get("allocations")
    finally:
        kubectl.run("delete", "node", node, check=False)
    assert_check_clean(kubectl)


def test_a_pod_deleted_while_the_scheduler_is_down_still_gets_its_address_back(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """The start-up reconcile keeps (Retained) the address of a StatefulSet pod deleted while
    no scheduler ran, and the recreated pod gets it back."""
    first = scheduler_factory()
    _pools(pools)
    kubectl.apply(statefulset("kv", 2), ns)

    before = all_placed(kubectl, ns, "kv", 2)
    first.kill()  # SIGKILL
    kubectl("delete", "pod", "kv-1", "-n", ns, "--wait=true")
    scheduler_factory()

    def back() -> tuple[str, str, str] | None:
        now = placed(kubectl, ns, "kv").get("kv-1")
        return now if now is not None and now[0] != before["kv-1"][0] else None

    again = wait_for("kv-1 back", back, timeout=90)
    assert again[1:] == before["kv-1"][1:]
    assert_check_clean(kubectl)


def test_never_keeps_an_address_after_its_workload_is_gone_for_a_pod_of_the_same_name(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Policy Never: the address outlives the pod and its StatefulSet (the GC keeps it);
    a pod of the same name gets it back; only ``ipscheduler ip release`` frees it."""
    scheduler_factory("--gc-interval", "2")
    _pools(pools)
    kubectl.apply(statefulset("cache", 1, **{"ipscheduler.io/release-policy": "Never"}), ns)
    first = wait_for("cache-0 placed", lambda: placed(kubectl, ns, "cache").get("cache-0"), timeout=60)
    kubectl("delete", "statefulset", "cache", "-n", ns, "--wait=true")
    wait_for("cache-0 gone", lambda: "cache-0" not in placed(kubectl, ns, "cache"), timeout=60)

    def retained() -> list[dict[str, Any]]:
        return [a for a in allocations(pools, POOLS).values() if a.get("identity") == f"{ns}/cache-0"]

    wait_for("Retained", lambda: [a for a in retained() if a["phase"] == "Retained"], timeout=30)
    time.sleep(5)  # two GC sweeps: still kept
    assert [a["phase"] for a in retained()] == ["Retained"]
    manifest = pod_manifest("cache-0", scheduler=SCHEDULER)  # same name, no workload
    manifest["metadata"]["annotations"] = {"ipscheduler.io/release-policy": "Never"}
    kubectl.create(manifest, ns)
    again = wait_for("cache-0 placed again", lambda: placed_pod(kubectl, ns, "cache-0"), timeout=60)
    assert again[1:] == first[1:], "same node and address"
    kubectl("delete", "pod", "cache-0", "-n", ns, "--wait=true")
    wait_for("Retained again", lambda: [a for a in retained() if a["phase"] == "Retained"], timeout=30)
    assert_check_clean(kubectl)


def placed_pod(kubectl: Kubectl, ns: str, name: str) -> tuple[str, str, str] | None:
    """(UID, node, address) of pod ``name`` once bound with an address."""
    p = kubectl.json("get", "pod", name, "-n", ns)
    ip = (p["metadata"].get("annotations") or {}).get("ipscheduler.io/ip")
    return (p["metadata"]["uid"], p["spec"]["nodeName"], ip) if p["spec"].get("nodeName") and ip else None


def test_two_active_schedulers_never_hand_a_retained_address_to_another_pod(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """A Retained address is taken for every replica; ``ipscheduler ip release`` frees it."""
    import subprocess
    import sys

    for _ in range(2):
        scheduler_factory("--gc-interval", "3600")  # two active replicas; the GC out of the way
    pools.create("solo", "node-2", ["10.57.2.10"])
    kubectl.apply(statefulset("one", 1, **{"ipscheduler.io/pools": "solo"}), ns)
    wait_for("one-0 placed", lambda: placed(kubectl, ns, "one").get("one-0"), timeout=60)
    kubectl("delete", "statefulset", "one", "-n", ns, "--wait=true")
    wait_for(
        "Retained",
        lambda: [a for a in allocations(pools, ["solo"]).values() if a["phase"] == "Retained"],
        timeout=30,
    )
    intruder = pod_manifest("intruder", scheduler=SCHEDULER)
    intruder["metadata"]["annotations"] = {"ipscheduler.io/pools": "solo"}
    kubectl.create(intruder, ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "intruder", "FailedScheduling"))
    assert ev[0]["message"] == (
        "0/3 nodes are available: 1 node(s) had no free underlay IPs, 2 node(s) had no NodeIPPool. "
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling.."
    )
    time.sleep(3)
    assert placed_pod(kubectl, ns, "intruder") is None
    released = subprocess.run(
        [
            sys.executable,
            "-m",
            "ipscheduler",
            "ip",
            "release",
            "10.57.2.10",
            "--kubeconfig",
            str(kubectl.kubeconfig),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert released.returncode == 0, released.stderr
    got = wait_for("intruder placed", lambda: placed_pod(kubectl, ns, "intruder"), timeout=60)
    assert got[1:] == ("node-2", "10.57.2.10")
    assert_check_clean(kubectl)


def test_a_recreated_statefulset_does_not_inherit_the_old_ones_addresses(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    scheduler_factory("--gc-interval", "3600")  # the old set's Retained address stays meanwhile
    pools.create("recreate", "node-3", ["10.58.3.10-10.58.3.19"])
    kubectl.apply(statefulset("re", 1, **{"ipscheduler.io/pools": "recreate"}), ns)
    first = wait_for("re-0 placed", lambda: placed(kubectl, ns, "re").get("re-0"), timeout=60)
    kubectl("delete", "statefulset", "re", "-n", ns, "--wait=true")
    wait_for(
        "Retained",
        lambda: [a for a in allocations(pools, ["recreate"]).values() if a["phase"] == "Retained"],
        timeout=30,
    )
    kubectl.apply(statefulset("re", 1, **{"ipscheduler.io/pools": "recreate"}), ns)  # another UID
    second = wait_for("new re-0 placed", lambda: placed(kubectl, ns, "re").get("re-0"), timeout=60)
    assert second[0] != first[0] and second[2] != first[2], "a new address, the old one is not its"
    assert [a["phase"] for a in allocations(pools, ["recreate"]).values()].count("Retained") == 1
    assert_check_clean(kubectl)


def test_a_deployments_pods_do_not_keep_their_addresses(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    scheduler_factory()
    pools.create("plain", "node-1", ["10.59.1.10-10.59.1.19"])
    kubectl.apply(deployment("plain", 2, nodeSelector={"kubernetes.io/hostname": "node-1"}), ns)
    wait_for("2 placed", lambda: len(placed(kubectl, ns, "plain")) == 2, timeout=60)
    assert not [
        a for a in allocations(pools, ["plain"]).values() if a.get("releasePolicy") or a.get("identity")
    ]
    name, (uid, _, _) = sorted(placed(kubectl, ns, "plain").items())[0]
    kubectl("delete", "pod", name, "-n", ns, "--wait=true")
    wait_for("its address released", lambda: uid not in allocations(pools, ["plain"]), timeout=30)
    wait_for("2 placed again", lambda: len(placed(kubectl, ns, "plain")) == 2, timeout=60)
    assert [a["phase"] for a in allocations(pools, ["plain"]).values()].count("Retained") == 0
    assert_check_clean(kubectl)


def identities_held_twice(pools: Pools, names: list[str]) -> dict[str, list[str]]:
    """Identity → its addresses, for the identities two or more allocations are kept for."""
    by_identity: dict[str, list[str]] = {}
    for a in allocations(pools, names).values():
        if a.get("identity"):
            by_identity.setdefault(a["identity"], []).append(a.get("ip") or "(slot)")
    return {k: v for k, v in by_identity.items() if len(v) > 1}


def test_pods_recreated_again_and_again_under_two_active_schedulers_keep_one_address_each(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """A StatefulSet's 6 pods deleted 12 times over (all at once, so a new pod's
    cycle may run before a replica has seen its predecessor go, and a pod may be deleted
    after taking its identity's address back but before its bind), under two active
    replicas, each SIGKILLed once and restarted: every pod comes back with its identity's
    address, and no identity ever holds two."""
    replicas = [scheduler_factory(), scheduler_factory()]
    _pools(pools)
    kubectl.apply(statefulset("db", 6), ns)
    first = all_placed(kubectl, ns, "db", 6)
    kills = {4: replicas[0], 8: replicas[1]}  # each SIGKILLed once and started again
    for rnd in range(12):  # 72 re-creations, as the reproduction
        if rnd in kills:
            kills[rnd].kill()
            kills[rnd].start(wait="")
        before = placed(kubectl, ns, "db")
        kubectl("delete", "pod", *sorted(first), "-n", ns, "--wait=false")

        def again(before: dict[str, tuple[str, str, str]] = before) -> dict[str, tuple[str, str, str]] | None:
            now = placed(kubectl, ns, "db")
            fresh = {n: v for n, v in now.items() if before.get(n, ("",))[0] != v[0]}
            return fresh if len(fresh) == len(first) else None

        back = wait_for(f"round {rnd}: all 6 re-created and placed", again, timeout=90)
        assert {n: v[1:] for n, v in back.items()} == {n: v[1:] for n, v in first.items()}, (
            f"round {rnd}: each pod on its node with its address"
        )
        assert identities_held_twice(pools, POOLS) == {}, f"round {rnd}"
    assert_check_clean(kubectl)
