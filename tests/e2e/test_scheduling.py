"""The scheduler end to end on a real control plane, as a user sees it."""

from __future__ import annotations

import ipaddress
import json
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


@pytest.fixture(autouse=True)
def check_after(kubectl: Kubectl) -> Iterator[None]:
    """Every test here ends with a quiet cluster: ``ipscheduler check`` must be clean."""
    yield
    assert_check_clean(kubectl)


NO_FREE_NO_VICTIMS = (
    "0/3 nodes are available: 3 node(s) had no free underlay IPs. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
)
"""kube-scheduler's message when every node is out of addresses and no pod there has a lower
priority (the preemption part, double stop included, is upstream's)."""
NOT_HELPFUL = "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
"""The preemption part when every node was rejected for a reason preemption cannot change."""

POOL_RANGES = {f"node-{i}": f"10.0.{i}.10-10.0.{i}.19" for i in (1, 2, 3)}


def _in_range(ip: str, rng: str) -> bool:
    first, last = (ipaddress.ip_address(x) for x in rng.split("-"))
    return first <= ipaddress.ip_address(ip) <= last


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _pending(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]


def _ip(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get("ipscheduler.io/ip")


def _three_pools(pools: Pools) -> None:
    for node, rng in POOL_RANGES.items():
        pools.create(f"pool-{node}", node, [rng])


def test_35_replicas_on_3_nodes_x_10_addresses(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    _three_pools(pools)
    kubectl.apply(deployment("web", 35), ns)

    def settled() -> list[dict[str, Any]] | None:
        pods = pods_of(kubectl, ns)
        return pods if len(_running(pods)) == 30 and len(_pending(pods)) == 5 else None

    pods = wait_for("30 Running and 5 Pending", settled, timeout=120)
    running = _running(pods)
    ips = [_ip(p) for p in running]
    assert len(set(ips)) == 30, f"addresses not distinct: {sorted(map(str, ips))}"
    for p in running:
        node = p["spec"]["nodeName"]
        assert _in_range(str(_ip(p)), POOL_RANGES[node]), f"{_ip(p)} not in {node}'s pool"
        assert p["metadata"]["annotations"]["ipscheduler.io/pool"] == f"pool-{node}"
    per_node = {n: sum(1 for p in running if p["spec"]["nodeName"] == n) for n in POOL_RANGES}
    assert per_node == dict.fromkeys(POOL_RANGES, 10)

    pending = _pending(pods)
    for p in pending:
        name = p["metadata"]["name"]

        def condition(n: str = name) -> dict[str, Any] | None:
            conds = kubectl.json("get", "pod", n, "-n", ns)["status"].get("conditions", [])
            return next((c for c in conds if c["type"] == "PodScheduled"), None)

        cond = wait_for(f"PodScheduled condition on {name}", condition, timeout=30)
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert cond["message"] == NO_FREE_NO_VICTIMS
        evs = wait_for(
            "FailedScheduling event", lambda n=name: events_for(kubectl, ns, n, "FailedScheduling")
        )
        assert evs[0]["type"] == "Warning"
        assert evs[0]["message"] == NO_FREE_NO_VICTIMS
        assert len(evs) == 1, "events must be deduplicated (count bumped), not one per retry"

    name = running[0]["metadata"]["name"]
    scheduled = wait_for("Scheduled event", lambda: events_for(kubectl, ns, name, "Scheduled"))
    assert scheduled[0]["message"] == (
        f"Successfully assigned {ns}/{name} to {running[0]['spec']['nodeName']} (IP {_ip(running[0])})"
    )

    table = nodeippools_table(kubectl)
    for node in POOL_RANGES:
        row = table[f"pool-{node}"]
        assert (row["NODE"], row["CAPACITY"], row["ALLOCATED"], row["FREE"]) == (node, "10", "10", "0")
    assert_check_clean(kubectl)

    # Delete 3 running pods: the freed addresses go to the replacements/pending pods at once.
    victims = [p["metadata"]["name"] for p in running[:3]]
    freed = {_ip(p) for p in running[:3]}
    kubectl("delete", "pod", "-n", ns, *victims, "--wait=false")

    def replaced() -> list[dict[str, Any]] | None:
        ps = _running(pods_of(kubectl, ns))
        return ps if len(ps) == 30 and not any(p["metadata"]["name"] in victims for p in ps) else None

    pods = wait_for("30 Running again", replaced, timeout=60)
    new_ips = {_ip(p) for p in _running(pods)}
    assert freed <= new_ips, "freed addresses were reused"
    assert len(new_ips) == 30
    assert_check_clean(kubectl)


def test_pods_of_other_schedulers_are_untouched(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    _three_pools(pools)
    kubectl.create(pod_manifest("foreign", scheduler="someone-else"), ns)
    kubectl.create(pod_manifest("ours", scheduler=SCHEDULER), ns)
    wait_for("our pod bound", lambda: kubectl.json("get", "pod", "ours", "-n", ns)["spec"].get("nodeName"))
    foreign = kubectl.json("get", "pod", "foreign", "-n", ns)
    assert not foreign["spec"].get("nodeName")
    assert not (foreign["metadata"].get("annotations") or {})
    assert not foreign["metadata"].get("finalizers")
    assert not [c for c in foreign["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    assert events_for(kubectl, ns, "foreign") == []
    ours = kubectl.json("get", "pod", "ours", "-n", ns)
    assert not ours["metadata"].get("finalizers")
    assert not [k for k in ours["metadata"].get("annotations", {}) if k.startswith("kopf.")]


def test_host_network_pod_takes_no_address(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("pool-hn", "node-1", ["10.0.9.1-10.0.9.2"])
    kubectl.create(pod_manifest("hostnet", scheduler=SCHEDULER, hostNetwork=True), ns)
    pod = wait_for(
        "bound", lambda: (p := kubectl.json("get", "pod", "hostnet", "-n", ns))["spec"].get("nodeName") and p
    )
    assert "ipscheduler.io/ip" not in (pod["metadata"].get("annotations") or {})
    assert pools.get("pool-hn")["status"].get("allocated", 0) == 0


def test_taints_and_node_selector_are_respected(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    _three_pools(pools)
    kubectl("taint", "node", "node-3", "dedicated=infra:NoSchedule")
    try:
        kubectl.apply(deployment("spread", 6), ns)
        pods = wait_for(
            "6 bound",
            lambda: (
                (ps := pods_of(kubectl, ns, "app=spread"))
                and all(p["spec"].get("nodeName") for p in ps)
                and len(ps) == 6
                and ps
            ),
            timeout=60,
        )
        assert {p["spec"]["nodeName"] for p in pods} <= {"node-1", "node-2"}
        kubectl.create(
            pod_manifest("pinned", scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": "node-2"}), ns
        )
        pinned = wait_for(
            "pinned bound", lambda: kubectl.json("get", "pod", "pinned", "-n", ns)["spec"].get("nodeName")
        )
        assert pinned == "node-2"
        kubectl.create(
            pod_manifest("nowhere", scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": "node-3"}),
            ns,
        )
        ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "nowhere", "FailedScheduling"))
        assert ev[0]["message"] == (
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
            "2 node(s) didn't match Pod's node affinity/selector. " + NOT_HELPFUL
        )
    finally:
        kubectl("taint", "node", "node-3", "dedicated=infra:NoSchedule-")


def test_count_only_pool(scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str) -> None:
    pools.create("slots", "node-1", capacity=2)
    sel = {"kubernetes.io/hostname": "node-1"}
    for i in range(3):
        kubectl.create(pod_manifest(f"slot-{i}", scheduler=SCHEDULER, nodeSelector=sel), ns)
    wait_for("2 bound", lambda: len([p for p in pods_of(kubectl, ns) if p["spec"].get("nodeName")]) == 2)
    pods = pods_of(kubectl, ns)
    bound = [p for p in pods if p["spec"].get("nodeName")]
    # A count-only slot is not an address: the Binding writes none of the three annotations.
    for p in bound:
        ann = p["metadata"].get("annotations") or {}
        assert not {"ipscheduler.io/pool", "ipscheduler.io/ip", "ipscheduler.io/network"} & ann.keys(), ann
    status = pools.get("slots")["status"]
    assert (status["capacity"], status["allocated"], status["free"]) == (2, 2, 0)
    assert all("ip" not in a for a in status["allocations"].values())
    waiting = next(p for p in pods if not p["spec"].get("nodeName"))["metadata"]["name"]
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, waiting, "FailedScheduling"))
    assert "1 node(s) had no free underlay IPs" in ev[0]["message"]


def _with_pools(name: str, pools_annotation: str | None = None, **spec: Any) -> dict[str, Any]:
    body = pod_manifest(name, scheduler=SCHEDULER, **spec)
    if pools_annotation is not None:
        body["metadata"]["annotations"] = {"ipscheduler.io/pools": pools_annotation}
    return body


def test_pods_use_only_the_pools_they_name_and_their_namespace_may_use(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """``ipscheduler.io/pools`` restricts a pod to those pools in that order of preference;
    ``spec.namespaces`` reserves a pool; a pool name that does not exist is a clear reason;
    a namespace's ``ipscheduler.io/default-pools`` applies to its pods that name none."""
    pools.create("general", "node-1", ["10.33.1.10-10.33.1.19"])
    pools.create("preferred", "node-2", ["10.33.2.10-10.33.2.11"])
    pools.create("elsewhere", "node-3", ["10.33.3.10-10.33.3.19"], namespaces=["someone-else"])
    for i in range(3):  # preferred first; once full, general
        kubectl.create(_with_pools(f"picky-{i}", "preferred, general"), ns)
        wait_for(f"picky-{i} bound", lambda i=i: _pod(kubectl, ns, f"picky-{i}")["spec"].get("nodeName"))
    placed = [
        (_pod(kubectl, ns, f"picky-{i}")["spec"]["nodeName"], _ip(_pod(kubectl, ns, f"picky-{i}")))
        for i in range(3)
    ]
    assert placed == [("node-2", "10.33.2.10"), ("node-2", "10.33.2.11"), ("node-1", "10.33.1.10")]
    kubectl.create(_with_pools("reserved-node", nodeSelector={"kubernetes.io/hostname": "node-3"}), ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "reserved-node", "FailedScheduling"))
    assert ev[0]["message"] == (
        "0/3 nodes are available: 1 node(s) had no NodeIPPool the pod may use, "
        "2 node(s) didn't match Pod's node affinity/selector. " + NOT_HELPFUL
    )
    kubectl("delete", "pod", "-n", ns, "reserved-node", "--wait=true")
    kubectl.create(_with_pools("typo", "genral"), ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "typo", "FailedScheduling"))
    assert ev[0]["message"] == (
        "0/3 nodes are available: NodeIPPool(s) genral named by ipscheduler.io/pools do not exist. "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
    )
    pools.create("genral", "node-3", ["10.33.4.10-10.33.4.11"])  # the pool appears: the pod is retried
    wait_for("typo bound", lambda: _pod(kubectl, ns, "typo")["spec"].get("nodeName") == "node-3")
    assert _ip(_pod(kubectl, ns, "typo")) == "10.33.4.10"
    # The namespace's default pools apply to its pods that name none.
    kubectl("annotate", "namespace", ns, "ipscheduler.io/default-pools=general")
    for i in range(2):
        kubectl.create(_with_pools(f"defaulted-{i}"), ns)
        wait_for(
            f"defaulted-{i} bound", lambda i=i: _pod(kubectl, ns, f"defaulted-{i}")["spec"].get("nodeName")
        )
    placed = [(_pod(kubectl, ns, f"defaulted-{i}")["spec"]["nodeName"]) for i in range(2)]
    assert placed == ["node-1", "node-1"], "general only, although genral on node-3 has room"


def _pod(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", name, "-n", ns))


def _dual(name: str, policy: str, families: str | None = None, **spec: Any) -> dict[str, Any]:
    body = pod_manifest(name, scheduler=SCHEDULER, terminationGracePeriodSeconds=0, **spec)
    body["metadata"]["annotations"] = {
        "ipscheduler.io/ip-family-policy": policy,
        **({"ipscheduler.io/ip-families": families} if families else {}),
    }
    return body


def _multihomed(name: str, interface_pools: dict[str, str], **spec: Any) -> dict[str, Any]:
    body = pod_manifest(name, scheduler=SCHEDULER, terminationGracePeriodSeconds=0, **spec)
    body["metadata"]["annotations"] = {
        "ipscheduler.io/pools": "first-1,first-2,first-3",
        "ipscheduler.io/interface-pools": json.dumps(interface_pools),
    }
    return body


def test_a_pod_with_further_interfaces_gets_each_from_its_own_pools_on_one_node(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Every node has a pool for the first interface; node-1 and node-3 one for net1 (node-3
    with room for one), node-2 none: a pod with net1 goes where both fit, gets each address
    from its own pool, and a node that cannot serve net1 is refused with the interface named."""
    for i in (1, 2, 3):
        pools.create(f"first-{i}", f"node-{i}", [f"10.35.{i}.10-10.35.{i}.19"])
    subnet = {
        "cidr": "10.36.1.0/24",
        "gateway": "10.36.1.1",
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.37.0.0/16"}],
    }
    pools.create("rdma-1", "node-1", ["10.36.1.10-10.36.1.19"], subnets=[subnet])
    pools.create("rdma-3", "node-3", ["10.36.3.10"], capacity=1)
    kubectl.create(_multihomed("mh-0", {"net1": "rdma-3,rdma-1"}), ns)
    wait_for("mh-0 bound", lambda: _pod(kubectl, ns, "mh-0")["spec"].get("nodeName"))
    pod = _pod(kubectl, ns, "mh-0")
    node = pod["spec"]["nodeName"]
    assert node in ("node-1", "node-3")
    ann = pod["metadata"]["annotations"]
    entry = json.loads(ann["ipscheduler.io/interfaces"])["net1"]
    assert ann["ipscheduler.io/pool"] == f"first-{node[-1]}"
    assert entry["pool"] == f"rdma-{node[-1]}"
    assert entry["ips"] == [f"10.36.{node[-1]}.10"]
    if node == "node-1":  # the subnet's routes, the default route left to the first interface
        assert entry["network"] == {
            "ips": [{"address": "10.36.1.10/24", "gateway": "10.36.1.1"}],
            "routes": [{"dst": "10.37.0.0/16", "gw": "10.36.1.1"}],
        }
    allocation = pools.get(entry["pool"])["status"]["allocations"][pod["metadata"]["uid"]]
    assert (allocation["ip"], allocation["interface"]) == (entry["ips"][0], "net1")

    kubectl.create(
        _multihomed(
            "mh-node-2", {"net1": "rdma-1,rdma-3"}, nodeSelector={"kubernetes.io/hostname": "node-2"}
        ),
        ns,
    )
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "mh-node-2", "FailedScheduling"))
    assert ev[0]["message"] == (
        "0/3 nodes are available: 1 node(s) had no NodeIPPool interface net1 may use, "
        "2 node(s) didn't match Pod's node affinity/selector. " + NOT_HELPFUL
    )
    kubectl.create(_multihomed("mh-1", {"net1": "rdma-3"}), ns)  # rdma-3 holds one: mh-0's, or free
    if node == "node-3":
        ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "mh-1", "FailedScheduling"))
        assert "1 node(s) had no free underlay IP for interface net1" in ev[0]["message"]
        kubectl("delete", "pod", "-n", ns, "mh-0", "--wait=true")  # both of its addresses go back
    wait_for("mh-1 bound", lambda: _pod(kubectl, ns, "mh-1")["spec"].get("nodeName") == "node-3")
    assert json.loads(_pod(kubectl, ns, "mh-1")["metadata"]["annotations"]["ipscheduler.io/interfaces"])[
        "net1"
    ]["ips"] == ["10.36.3.10"]


def test_dual_stack_pods_get_an_address_of_each_family_where_a_pool_has_both(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """node-1 declares both families (room for two dual-stack pods), node-2 IPv4 only, node-3
    none: RequireDualStack pods go to node-1 until its IPv6 runs out, then wait saying which
    family is missing; a PreferDualStack pod then takes an IPv4 address on node-2."""
    pools.create("both", "node-1", ["10.34.1.10-10.34.1.19", "fd00:34:1::10-fd00:34:1::11"])
    pools.create("v4-only", "node-2", ["10.34.2.10-10.34.2.19"])
    for i, families in enumerate(("IPv4,IPv6", "IPv6,IPv4")):
        kubectl.create(_dual(f"dual-{i}", "RequireDualStack", families), ns)
        wait_for(f"dual-{i} bound", lambda i=i: _pod(kubectl, ns, f"dual-{i}")["spec"].get("nodeName"))
    annotations = [_pod(kubectl, ns, f"dual-{i}")["metadata"]["annotations"] for i in range(2)]
    assert [(a["ipscheduler.io/ip"], a["ipscheduler.io/ips"]) for a in annotations] == [
        ("10.34.1.10", "10.34.1.10,fd00:34:1::10"),
        ("fd00:34:1::11", "fd00:34:1::11,10.34.1.11"),
    ]
    assert {_pod(kubectl, ns, f"dual-{i}")["spec"]["nodeName"] for i in range(2)} == {"node-1"}
    status = pools.get("both")["status"]
    assert (status["capacity"], status["allocated"], status["free"]) == (12, 4, 8)
    assert status["allocations"][_pod(kubectl, ns, "dual-1")["metadata"]["uid"]]["ips"] == [
        "fd00:34:1::11",
        "10.34.1.11",
    ]

    kubectl.create(_dual("dual-2", "RequireDualStack"), ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "dual-2", "FailedScheduling"))
    assert ev[0]["message"] == (
        "0/3 nodes are available: 1 node(s) had no NodeIPPool, 2 node(s) had no free IPv6 underlay IP. "
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod.."
    )
    kubectl.create(_dual("prefer", "PreferDualStack"), ns)
    wait_for("prefer bound", lambda: _pod(kubectl, ns, "prefer")["spec"].get("nodeName"))
    prefer = _pod(kubectl, ns, "prefer")
    assert prefer["spec"]["nodeName"] in ("node-1", "node-2")
    ann = prefer["metadata"]["annotations"]
    assert ann["ipscheduler.io/ips"] == ann["ipscheduler.io/ip"]
    assert ipaddress.ip_address(ann["ipscheduler.io/ip"]).version == 4  # one family: the one left

    kubectl("delete", "pod", "-n", ns, "dual-0", "--wait=true")  # its IPv6 goes back: dual-2 fits
    wait_for("dual-2 bound", lambda: _pod(kubectl, ns, "dual-2")["spec"].get("nodeName") == "node-1")
    assert _pod(kubectl, ns, "dual-2")["metadata"]["annotations"]["ipscheduler.io/ips"] == (
        "10.34.1.10,fd00:34:1::10"
    )


def test_dual_stack_pods_take_one_family_from_each_of_two_pools_where_no_pool_has_both(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """node-1 has an IPv4 pool (2 addresses) and an IPv6 pool (3), node-2 IPv4 only: two
    RequireDualStack pods get their primary family from one pool and their second from the
    other (its allocation recording eth0, the pod's ``ipscheduler.io/interfaces`` naming it),
    both counted by ``kubectl get nip``; the third waits naming IPv4; deleting one gives both
    addresses back and the third binds; ``ipscheduler check`` stays clean."""
    pools.create("v4-1", "node-1", ["10.35.1.10-10.35.1.11"])
    pools.create("v6-1", "node-1", ["fd00:35:1::10-fd00:35:1::12"])
    pools.create("v4-2", "node-2", ["10.35.2.10-10.35.2.19"])
    for i, families in enumerate(("IPv4,IPv6", "IPv6,IPv4")):
        kubectl.create(_dual(f"split-{i}", "RequireDualStack", families), ns)
        wait_for(f"split-{i} bound", lambda i=i: _pod(kubectl, ns, f"split-{i}")["spec"].get("nodeName"))
    pods = [_pod(kubectl, ns, f"split-{i}") for i in range(2)]
    assert [p["spec"]["nodeName"] for p in pods] == ["node-1", "node-1"]
    got = [
        (
            a["ipscheduler.io/pool"],
            a["ipscheduler.io/ips"],
            {k: (v["pool"], v["ips"]) for k, v in json.loads(a["ipscheduler.io/interfaces"]).items()},
        )
        for a in (p["metadata"]["annotations"] for p in pods)
    ]
    assert got == [
        ("v4-1", "10.35.1.10,fd00:35:1::10", {"eth0": ("v6-1", ["fd00:35:1::10"])}),
        ("v6-1", "fd00:35:1::11,10.35.1.11", {"eth0": ("v4-1", ["10.35.1.11"])}),
    ]
    network = json.loads(pods[0]["metadata"]["annotations"]["ipscheduler.io/network"])
    assert [e["address"] for e in network["ips"]] == ["10.35.1.10/32", "fd00:35:1::10/128"]
    v6 = pools.get("v6-1")["status"]
    assert v6["allocations"][pods[0]["metadata"]["uid"]].get("interface") == "eth0"
    assert v6["allocations"][pods[1]["metadata"]["uid"]].get("interface") is None
    table = nodeippools_table(kubectl)
    assert (table["v4-1"]["ALLOCATED"], table["v6-1"]["ALLOCATED"]) == ("2", "2")
    assert_check_clean(kubectl)

    kubectl.create(_dual("split-2", "RequireDualStack"), ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "split-2", "FailedScheduling"))
    assert "1 node(s) had no free IPv4 underlay IP" in ev[0]["message"], ev[0]["message"]  # node-1
    assert "1 node(s) had no free IPv6 underlay IP" in ev[0]["message"], ev[0]["message"]  # node-2
    kubectl("delete", "pod", "-n", ns, "split-0", "--wait=true")  # both of its addresses go back
    wait_for("split-2 bound", lambda: _pod(kubectl, ns, "split-2")["spec"].get("nodeName") == "node-1")
    assert _pod(kubectl, ns, "split-2")["metadata"]["annotations"]["ipscheduler.io/ips"] == (
        "10.35.1.10,fd00:35:1::10"
    )
    assert_check_clean(kubectl)


def test_invalid_pools_are_flagged_and_overlaps_handed_to_nobody(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("ghost", "node-404", ["10.0.50.1"])
    pools.create("a", "node-1", ["10.0.60.1-10.0.60.2"])
    pools.create("b", "node-1", ["10.0.60.2-10.0.60.3"])

    def ready(name: str) -> dict[str, Any] | None:
        conds = pools.get(name).get("status", {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready"), None)

    ghost = wait_for("ghost flagged", lambda: (c := ready("ghost")) and c["status"] == "False" and c)
    assert ghost["reason"] == "NodeNotFound" and "node-404" in ghost["message"]
    a = wait_for("conflict flagged", lambda: (c := ready("a")) and c["reason"] == "AddressConflict" and c)
    assert "10.0.60.2" in a["message"] and "b" in a["message"]
    ev = wait_for(
        "Warning event",
        lambda: [
            e
            for e in kubectl.json("get", "events", "-n", "default")["items"]
            if e["involvedObject"].get("name") == "ghost" and e["reason"] == "NodeNotFound"
        ],
    )
    assert ev[0]["type"] == "Warning"
    # A schema-invalid entry is rejected by the API server with a clear message.
    bad = kubectl.run(
        "apply",
        "-f",
        "-",
        check=False,
        stdin='{"apiVersion": "ipscheduler.io/v1alpha1", '
        '"kind": "NodeIPPool", "metadata": {"name": "bad"}, "spec": {"nodeName": "node-1", '
        '"addresses": ["not an ip"]}}',
    )
    assert bad.returncode != 0 and "spec.addresses[0]" in bad.stderr
    # Pods pinned to node-1 get only the non-shared addresses (.1 from a, .3 from b).
    sel = {"kubernetes.io/hostname": "node-1"}
    for i in range(3):
        kubectl.create(pod_manifest(f"p{i}", scheduler=SCHEDULER, nodeSelector=sel), ns)
    wait_for(
        "2 bound",
        lambda: len([p for p in pods_of(kubectl, ns) if p["spec"].get("nodeName")]) == 2,
        timeout=60,
    )
    ips = sorted(_ip(p) or "" for p in pods_of(kubectl, ns) if p["spec"].get("nodeName"))
    assert ips == ["10.0.60.1", "10.0.60.3"]
    assert scheduler.proc is not None and scheduler.proc.poll() is None


def test_explain_shows_per_node_filters_for_a_pending_pod(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    import subprocess
    import sys

    pools.create("ex-1", "node-1", ["10.0.70.1"])
    kubectl.create(
        pod_manifest("first", scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": "node-1"}), ns
    )
    wait_for("first bound", lambda: kubectl.json("get", "pod", "first", "-n", ns)["spec"].get("nodeName"))
    kubectl.create(pod_manifest("second", scheduler=SCHEDULER), ns)
    wait_for("second FailedScheduling", lambda: events_for(kubectl, ns, "second", "FailedScheduling"))

    def explain(pod: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ipscheduler",
                "explain",
                f"{ns}/{pod}",
                "--kubeconfig",
                str(kubectl.kubeconfig),
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    pending = explain("second")
    assert pending.returncode == 1, pending.stderr
    rows = {line.split()[0]: line for line in pending.stdout.splitlines() if line.startswith("node-")}
    assert "rejected" in rows["node-1"] and "node(s) had no free underlay IPs" in rows["node-1"]
    assert "UnderlayIP" in rows["node-2"] and "node(s) had no NodeIPPool" in rows["node-2"]
    assert "Unschedulable: 0/3 nodes are available" in pending.stdout
    assert pending.stdout.splitlines()[1] == "Pools: any pool of the node"
    bound = explain("first")
    assert bound.returncode == 0 and "Would be scheduled to node-1" in bound.stdout
    assert explain("nope").returncode == 2


def test_scheduling_gates_keep_a_pod_out_of_the_queue(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    import json
    import time

    _three_pools(pools)
    kubectl.create(
        pod_manifest("gated", scheduler=SCHEDULER, schedulingGates=[{"name": "example.com/wait"}]), ns
    )
    time.sleep(3)  # give the scheduler every chance to (wrongly) act on it
    assert 'scheduler_pending_pods{queue="gated"} 1.0' in scheduler.probe("/metrics")[1]
    pod = kubectl.json("get", "pod", "gated", "-n", ns)
    assert not pod["spec"].get("nodeName")
    assert events_for(kubectl, ns, "gated") == []
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["reason"] == "SchedulingGated"  # set by the API server, untouched by us
    kubectl(
        "patch",
        "pod",
        "gated",
        "-n",
        ns,
        "--type=json",
        "-p",
        json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]),
    )
    node = wait_for(
        "bound once ungated", lambda: kubectl.json("get", "pod", "gated", "-n", ns)["spec"].get("nodeName")
    )
    assert node in POOL_RANGES
    assert 'scheduler_pending_pods{queue="gated"} 0.0' in scheduler.probe("/metrics")[1]


def test_json_logs_carry_the_pod_node_pool_and_address_of_a_bind(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    import json

    pools.create("json-logs", "node-2", ["10.0.81.1-10.0.81.2"])
    sched = scheduler_factory("--scheduler-name", "json-logs", "--logging-format=json", "-v=2")
    kubectl.create(
        pod_manifest("logged", scheduler="json-logs", nodeSelector={"kubernetes.io/hostname": "node-2"}), ns
    )
    ip = wait_for("bound", lambda: _ip(kubectl.json("get", "pod", "logged", "-n", ns)))

    def bind_record() -> dict[str, Any] | None:
        records = [
            json.loads(line) for line in sched.log_path.read_text().splitlines() if line.startswith("{")
        ]
        return next(
            (r for r in records if r.get("pod") == f"{ns}/logged" and r["msg"].startswith("bound ")), None
        )

    record = wait_for("the bind's log record", bind_record, timeout=10)
    assert (record["v"], record["node"], record["pool"], record["ip"]) == (2, "node-2", "json-logs", ip)
    assert "level" not in record and record["caller"].startswith("scheduler/scheduler.py:")
    assert record["uid"] == kubectl.json("get", "pod", "logged", "-n", ns)["metadata"]["uid"]


def test_metrics_endpoint_reports_attempts_queue_and_pools(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("m-1", "node-1", ["10.0.80.1-10.0.80.2"])
    sel = {"kubernetes.io/hostname": "node-1"}
    for i in range(3):
        kubectl.create(pod_manifest(f"m{i}", scheduler=SCHEDULER, nodeSelector=sel), ns)
    wait_for(
        "FailedScheduling of the third",
        lambda: any(events_for(kubectl, ns, f"m{i}", "FailedScheduling") for i in range(3)),
    )

    def scraped() -> str | None:
        status, text = scheduler.probe("/metrics")
        return (
            text
            if status == 200 and 'ipscheduler_pool_allocated{node="node-1",pool="m-1"} 2.0' in text
            else None
        )

    text = wait_for("pool gauges", scraped, timeout=30)
    assert 'ipscheduler_pool_free{node="node-1",pool="m-1"} 0.0' in text
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="scheduled"}' in text
    assert 'scheduler_schedule_attempts_total{profile="ip-scheduler",result="unschedulable"}' in text
    assert 'scheduler_pending_pods{queue="unschedulable"}' in text
    assert "scheduler_pod_scheduling_sli_duration_seconds_bucket" in text
