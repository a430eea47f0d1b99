"""Pods that really run: a real kubelet + containerd + runc node, the reserved address as pod IP.

``hack/devcluster.py`` starts real node ``real-node-1`` for this module (the ``real_node``
fixture) (containerd v2 with
runc, the kubelet of the pinned release, the reference ``bridge`` CNI plugin with
``ipscheduler-ipam`` as IPAM and the pod-annotations capability on, images imported from
OCI archives). Its pool serves ``10.88.<i>.0/24`` with the gateway ``10.88.<i>.1`` on the
node's bridge (a dual-stack pool also ``fd00:88:<i>::/64``, gateway ``fd00:88:<i>::1``, which
the bridge plugin puts on the bridge). The tests act as a user: workloads with
``schedulerName: ip-scheduler``, ``kubectl exec`` into the pods, ``kubectl get`` of pods,
events and pools. At the end the node is stopped, torn down and its Node deleted, so the
other modules see the kwok nodes only.

Outside CI a missing prerequisite (root, Go, gcc, apt) skips the module; in CI it fails.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import binaries
import devcluster
import realnode
from tests.e2e.helpers import (
    KUBE,
    RESOURCE,
    SchedulerProcess,
    assert_check_clean,
    events_for,
    published,
    statefulset,
    wants_address,
)
from tests.e2e.realpods import (
    GRACEFUL,
    REAL_NODE,
    busybox_deployment,
    busybox_template,
    exec_in,
    global_addresses,
    host_ifindexes,
    ipv6_subnet,
    running,
    wait_running,
)
from tests.kube import Kubectl, wait_for

NODE = REAL_NODE
IP = "ipscheduler.io/ip"
IPS = "ipscheduler.io/ips"


def test_deployment_pods_run_with_the_reserved_address_on_eth0_and_reach_each_other(
    kubectl: Kubectl, scheduler: SchedulerProcess, real_node: realnode.Layout, node_pool: Any, ns: str
) -> None:
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-web", [f"{base[10]}-{base[13]}"])
    kubectl.apply(busybox_deployment("web", 2), ns)
    pods = wait_running(kubectl, ns, "web", 2)
    ips = []
    for pod in pods:
        annotated = pod["metadata"]["annotations"][IP]
        assert pod["spec"]["nodeName"] == NODE
        assert pod["status"]["podIP"] == annotated, pod["status"]
        assert ipaddress.ip_address(annotated) in base
        addr = exec_in(kubectl, ns, pod["metadata"]["name"], "ip", "-o", "-4", "addr", "show", "dev", "eth0")
        assert f"inet {annotated}/24 " in addr, addr
        routes = exec_in(kubectl, ns, pod["metadata"]["name"], "ip", "route")
        assert f"default via {real_node.node_ip} dev eth0" in routes, routes
        ips.append(annotated)
    assert len(set(ips)) == 2
    # pod to pod over the node's bridge
    a, b = (p["metadata"]["name"] for p in pods)
    out = exec_in(kubectl, ns, a, "ping", "-c", "1", "-W", "5", ips[1])
    assert "1 packets received" in out, out
    out = exec_in(kubectl, ns, b, "ping", "-c", "1", "-W", "5", ips[0])
    assert "1 packets received" in out, out
    assert_check_clean(kubectl)


IPV6_FORWARDING = Path("/proc/sys/net/ipv6/conf/all/forwarding")


@pytest.fixture
def ipv6_forwarding_restored() -> Iterator[None]:
    """The reference bridge plugin turns the host's IPv6 forwarding on for the first IPv6 pod
    (as it does IPv4's): put it back as it was (tests change only what they made)."""
    before = IPV6_FORWARDING.read_text()
    yield
    if IPV6_FORWARDING.read_text() != before:
        IPV6_FORWARDING.write_text(before)


def test_dual_stack_pods_run_with_both_addresses_on_eth0_and_reach_each_other_over_both_families(
    kubectl: Kubectl,
    scheduler: SchedulerProcess,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
    ipv6_forwarding_restored: None,
) -> None:
    """One pool declares an IPv4 and an IPv6 range (a subnet of each family); two
    RequireDualStack pods, one IPv4-primary (the default families) and one ``IPv6,IPv4``, run
    with one address of each family: the kubelet reports both in ``status.podIPs``, eth0 holds
    exactly those two (besides its link-local one) with both default routes, the pods ping each
    other over both families, and deleting them gives all four addresses back."""
    v4, v6 = ipaddress.ip_network(real_node.subnet), ipv6_subnet(real_node)
    node_pool("real-dual", [f"{v4[80]}-{v4[81]}", f"{v6[0x80]}-{v6[0x81]}"])
    pool = wait_for("the pool's status", lambda: kubectl.json("get", "nodeippool", "real-dual").get("status"))
    allocated = pool["allocated"]
    for name, families in (("dual-v4", None), ("dual-v6", "IPv6,IPv4")):
        annotations = {"ipscheduler.io/ip-family-policy": "RequireDualStack"}
        if families:
            annotations["ipscheduler.io/ip-families"] = families
        template = busybox_template("dual", **annotations)
        kubectl.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, **template["metadata"]},
                "spec": template["spec"],
            },
            ns,
        )
    pods = {p["metadata"]["name"]: p for p in wait_running(kubectl, ns, "dual", 2)}
    ips = {name: pod["metadata"]["annotations"][IPS].split(",") for name, pod in pods.items()}
    assert [ipaddress.ip_address(ip).version for ip in ips["dual-v4"]] == [4, 6]
    assert [ipaddress.ip_address(ip).version for ip in ips["dual-v6"]] == [6, 4]
    prefix = {4: v4.prefixlen, 6: v6.prefixlen}
    for name, pod in pods.items():
        assert pod["spec"]["nodeName"] == NODE
        assert pod["metadata"]["annotations"][IP] == ips[name][0]
        v4_ip, v6_ip = sorted(ips[name], key=lambda a: ipaddress.ip_address(a).version)
        assert ipaddress.ip_address(v4_ip) in v4 and ipaddress.ip_address(v6_ip) in v6
        # Both addresses, but the kubelet puts the one of its node IP's family (10.88.<i>.1:
        # IPv4) first whatever the pod's primary: dual-v6's podIP is its IPv4 address, not
        # ipscheduler.io/ip, and podIPs are not in the order of ipscheduler.io/ips.
        assert [p["ip"] for p in pod["status"]["podIPs"]] == [v4_ip, v6_ip], (name, pod["status"])
        assert pod["status"]["podIP"] == v4_ip, (name, pod["status"])
        addr = exec_in(kubectl, ns, name, "ip", "-o", "addr", "show", "dev", "eth0")
        want = sorted(f"{ip}/{prefix[ipaddress.ip_address(ip).version]}" for ip in ips[name])
        assert global_addresses(addr) == want, addr
        assert "tentative" not in addr, addr  # the bridge plugin turns DAD off on eth0 (accept_dad=0)
        assert f"default via {real_node.node_ip} dev eth0" in exec_in(kubectl, ns, name, "ip", "-4", "route")
        assert f"default via {v6[1]} dev eth0" in exec_in(kubectl, ns, name, "ip", "-6", "route")
    # pod to pod over the node's bridge, each family
    for src, dst in (("dual-v4", "dual-v6"), ("dual-v6", "dual-v4")):
        for ip in ips[dst]:
            out = exec_in(kubectl, ns, src, "ping", "-c", "1", "-W", "5", ip)
            assert "1 packets received" in out, out
    status = kubectl.json("get", "nodeippool", "real-dual")["status"]
    assert status["allocated"] == allocated + 4
    assert {name: status["allocations"][pod["metadata"]["uid"]]["ips"] for name, pod in pods.items()} == ips
    assert_check_clean(kubectl)
    kubectl("delete", "pod", "-n", ns, *pods, "--wait=true", "--timeout=60s")

    def released() -> dict[str, Any] | None:
        status = kubectl.json("get", "nodeippool", "real-dual")["status"]
        return status if status["allocated"] == allocated else None

    status = wait_for("both pods' addresses released", released, timeout=60)
    assert not set(status.get("allocations") or {}) & {p["metadata"]["uid"] for p in pods.values()}


def test_a_dual_stack_pod_with_each_family_from_its_own_pool_runs_with_both_on_eth0(
    kubectl: Kubectl,
    scheduler: SchedulerProcess,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
    ipv6_forwarding_restored: None,
) -> None:
    """The node's IPv4 and IPv6 addresses are two NodeIPPools (no pool declares both): a
    RequireDualStack pod gets its IPv4 address from one and its IPv6 address from the other in
    one cycle; ipscheduler-ipam checks both pools and puts both on eth0 with both default
    routes; deleting the pod gives both back."""
    v4, v6 = ipaddress.ip_network(real_node.subnet), ipv6_subnet(real_node)
    node_pool("real-split-v4", [f"{v4[84]}"])
    node_pool("real-split-v6", [f"{v6[0x84]}"])
    template = busybox_template("split", **{"ipscheduler.io/ip-family-policy": "RequireDualStack"})
    kubectl.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "split", **template["metadata"]},
            "spec": template["spec"],
        },
        ns,
    )
    (pod,) = wait_running(kubectl, ns, "split", 1)
    ann = pod["metadata"]["annotations"]
    assert (ann["ipscheduler.io/pool"], ann[IPS]) == ("real-split-v4", f"{v4[84]},{v6[0x84]}")
    assert json.loads(ann["ipscheduler.io/interfaces"])["eth0"]["pool"] == "real-split-v6"
    assert [p["ip"] for p in pod["status"]["podIPs"]] == [str(v4[84]), str(v6[0x84])]
    addr = exec_in(kubectl, ns, "split", "ip", "-o", "addr", "show", "dev", "eth0")
    assert global_addresses(addr) == sorted([f"{v4[84]}/{v4.prefixlen}", f"{v6[0x84]}/{v6.prefixlen}"]), addr
    assert f"default via {real_node.node_ip} dev eth0" in exec_in(kubectl, ns, "split", "ip", "-4", "route")
    assert f"default via {v6[1]} dev eth0" in exec_in(kubectl, ns, "split", "ip", "-6", "route")
    assert_check_clean(kubectl)
    kubectl("delete", "pod", "-n", ns, "split", "--wait=true", "--timeout=60s")

    def released() -> bool:
        return not any(
            (kubectl.json("get", "nodeippool", name).get("status") or {}).get("allocations")
            for name in ("real-split-v4", "real-split-v6")
        )

    wait_for("both addresses released", released, timeout=60)


def test_a_deleted_pods_address_is_released_after_cni_del_and_given_to_the_next_pod(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler: SchedulerProcess,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """A pod deleted as users delete pods (a grace period; its process exits on SIGTERM): the
    kubelet stops it, CNI DEL takes its veth off the bridge, then reports it terminal, and
    only then does the scheduler release the address (the pool is read every 50 ms; once it
    shows the release, the veth is already gone: a check that holds however slowly a loaded
    machine runs the loop). The Deployment's next pod gets that address."""
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-churn", [f"{base[20]}-{base[21]}"])  # exactly two addresses
    body = busybox_deployment("churn", 2)
    body["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=10, containers=[GRACEFUL])
    kubectl.apply(body, ns)
    pods = wait_running(kubectl, ns, "churn", 2)
    before = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    victim, freed = sorted(before.items())[0]
    uid = next(p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == victim)
    peer = int(exec_in(kubectl, ns, victim, "cat", "/sys/class/net/eth0/iflink"))  # its veth's ifindex
    assert peer in host_ifindexes()
    kubectl("delete", "pod", "-n", ns, victim, "--wait=false")
    released = veth_left = None
    start = time.monotonic()
    while released is None and time.monotonic() - start < 90:
        pool = cluster.api.request("GET", "/apis/ipscheduler.io/v1alpha1/nodeippools/real-churn")
        if uid not in ((pool.get("status") or {}).get("allocations") or {}):
            released = time.monotonic() - start
            veth_left = peer in host_ifindexes()  # read after the release was seen
        time.sleep(0.05)
    assert released is not None, "the address was not released"
    assert veth_left is False, f"released after {released:.1f}s with the pod's veth still on the bridge"
    after = wait_running(kubectl, ns, "churn", 2)
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in after}
    assert victim not in ips
    (newcomer,) = set(ips) - set(before)
    assert ips[newcomer] == freed, (before, ips)
    assert sorted(ips.values()) == sorted(before.values())
    assert_check_clean(kubectl)


def test_a_kubelet_and_a_containerd_restart_keep_every_address(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler: SchedulerProcess,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-restart", [f"{base[30]}-{base[33]}"])
    kubectl.apply(busybox_deployment("steady", 3), ns)

    def snapshot(pods: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
        return {
            p["metadata"]["name"]: (p["status"]["podIP"], p["status"]["containerStatuses"][0]["containerID"])
            for p in pods
        }

    before = snapshot(wait_running(kubectl, ns, "steady", 3))
    for component in (f"kubelet@{NODE}", f"containerd@{NODE}"):
        cluster.stop_component(component)
        cluster.start_component(component)
        wait_for(
            f"{NODE} Ready after restarting {component}", lambda: NODE in cluster.ready_nodes(), timeout=120
        )
        after = snapshot(wait_running(kubectl, ns, "steady", 3))
        assert after == before, component
        for name, (ip, _) in after.items():
            pod = kubectl.json("get", "pod", "-n", ns, name)
            assert pod["metadata"]["annotations"][IP] == ip
            assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert_check_clean(kubectl)


def test_a_recreated_statefulset_pod_gets_its_retained_address_back_as_pod_ip(
    kubectl: Kubectl, scheduler: SchedulerProcess, real_node: realnode.Layout, node_pool: Any, ns: str
) -> None:
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-sticky", [f"{base[40]}-{base[43]}"])
    body = statefulset("db", 2)
    body["spec"]["template"] = busybox_template("db")
    kubectl.apply(body, ns)
    before = {p["metadata"]["name"]: p["status"]["podIP"] for p in wait_running(kubectl, ns, "db", 2)}
    old_uid = kubectl.json("get", "pod", "-n", ns, "db-0")["metadata"]["uid"]
    kubectl("delete", "pod", "-n", ns, "db-0", "--wait=true", "--timeout=60s")

    def recreated() -> list[dict[str, Any]] | None:
        pods = running(kubectl, ns, "db", 2)
        return pods if pods and all(p["metadata"]["uid"] != old_uid for p in pods) else None

    after = {
        p["metadata"]["name"]: p["status"]["podIP"] for p in wait_for("db-0 recreated", recreated, 120, 1)
    }
    assert after == before
    assert_check_clean(kubectl)


def test_a_pod_whose_allocation_was_removed_is_refused_by_the_plugin(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler: SchedulerProcess,
    scheduler_factory: Any,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """The kubelet is stopped while a scheduler of its own name binds the pod; with every
    scheduler stopped (any would re-adopt the bound pod's address at once), the allocation is
    removed from the pool status; the restarted kubelet's sandbox fails with the plugin's
    message (FailedCreatePodSandBox). The scheduler, started again, gives a second pod the
    pool's other address, never the one the first pod carries."""
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-forged", [f"{base[50]}-{base[51]}"])
    name = "ip-scheduler-refuse"
    kubelet = f"kubelet@{NODE}"

    def pod(pod_name: str) -> dict[str, Any]:
        template = busybox_template(pod_name)
        template["spec"]["schedulerName"] = name
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, **template["metadata"]},
            "spec": template["spec"],
        }

    scheduler.stop()
    own = scheduler_factory("--scheduler-name", name)
    cluster.stop_component(kubelet)
    try:
        kubectl.create(pod("refused"), ns)
        bound = wait_for(
            "the pod bound",
            lambda: (p := kubectl.json("get", "pod", "-n", ns, "refused"))["spec"].get("nodeName") and p,
            timeout=30,
        )
        address, uid = bound["metadata"]["annotations"][IP], bound["metadata"]["uid"]
        own.stop()
        patch = [{"op": "remove", "path": f"/status/allocations/{uid}"}]
        kubectl(
            "patch",
            "nodeippool",
            "real-forged",
            "--subresource=status",
            "--type=json",
            "-p",
            json.dumps(patch),
        )
    finally:
        cluster.start_component(kubelet)

    def refused() -> list[dict[str, Any]]:
        return events_for(kubectl, ns, "refused", "FailedCreatePodSandBox")

    try:
        (event, *_) = wait_for("FailedCreatePodSandBox from the plugin", refused, timeout=90, interval=1)
    finally:
        scheduler.start()
    assert "no allocation for this pod (released?)" in event["message"], event["message"]
    assert kubectl.json("get", "pod", "-n", ns, "refused")["status"].get("podIP") in (None, "")
    scheduler_factory("--scheduler-name", name)
    kubectl.create(pod("other"), ns)
    other = wait_for(
        "the second pod Running",
        lambda: (p := kubectl.json("get", "pod", "-n", ns, "other"))["status"].get("podIP") and p,
        timeout=120,
        interval=1,
    )
    assert other["metadata"]["annotations"][IP] != address
    assert other["status"]["podIP"] == other["metadata"]["annotations"][IP]
    assert_check_clean(kubectl)


@pytest.mark.usefixtures("kube_scheduler")
def test_extender_mode_the_real_kubelet_admits_the_published_count_and_rejects_one_more(
    kubectl: Kubectl, real_node: realnode.Layout, node_pool: Any, ns: str
) -> None:
    """Extender mode on a real node: the extender publishes ``ipscheduler.io/underlay-ip: 2``
    in the node's status, which the kubelet keeps (extended resources it does not manage
    survive its status updates); kube-scheduler places two pods requesting one each, the
    kubelet runs them with the reserved addresses, and a third pod sent straight to the node
    (``spec.nodeName``, no scheduler) is rejected by the kubelet's admission."""
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-ext", [f"{base[60]}-{base[61]}"])
    wait_for("the node publishes 2", lambda: published(kubectl).get(NODE) == "2", timeout=30)
    pin = {
        "nodeSelector": {realnode.LABEL: "true"},
        "tolerations": [realnode.TOLERATION],
        "terminationGracePeriodSeconds": 0,
    }
    for name in ("ext-a", "ext-b"):
        body = wants_address(name, **pin)
        body["spec"]["containers"][0].update(image=binaries.BUSYBOX_IMAGE, command=["sleep", "3600"])
        body["metadata"]["labels"] = {"app": "ext"}
        kubectl.create(body, ns)
    pods = wait_running(kubectl, ns, "ext", 2)
    for pod in pods:
        assert pod["spec"]["schedulerName"] == KUBE
        assert pod["status"]["podIP"] == pod["metadata"]["annotations"][IP]
        assert ipaddress.ip_address(pod["status"]["podIP"]) in base
    over = wants_address("over", nodeName=NODE, terminationGracePeriodSeconds=0)
    kubectl.create(over, ns)

    def rejected() -> dict[str, Any] | None:
        status = kubectl.json("get", "pod", "over", "-n", ns)["status"]
        return status if status.get("phase") == "Failed" else None

    status = wait_for("the kubelet rejects the pod over the count", rejected, timeout=60)
    assert status["reason"] == f"OutOf{RESOURCE}", status
    assert f"Node didn't have enough resource: {RESOURCE}" in status["message"], status
    assert_check_clean(kubectl)


def test_a_sandbox_re_created_after_its_pause_process_died_keeps_the_address(
    kubectl: Kubectl, scheduler: SchedulerProcess, real_node: realnode.Layout, node_pool: Any, ns: str
) -> None:
    """The pod's sandbox dies (its pause process SIGKILLed, as an OOM kill or a runtime crash
    would): the kubelet creates a new sandbox, CNI ADD runs again for the same pod UID, and
    the new sandbox gets the same reserved address."""
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("real-sandbox", [f"{base[70]}-{base[72]}"])
    kubectl.apply(busybox_deployment("phoenix", 1), ns)
    (pod,) = wait_running(kubectl, ns, "phoenix", 1)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    crictl = realnode.crictl(real_node)
    (sandbox,) = subprocess.run(
        [*crictl, "pods", "-q", "--name", name, "--state", "ready"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    info = json.loads(
        subprocess.run(
            [*crictl, "inspectp", "-o", "json", sandbox], capture_output=True, text=True, check=True
        ).stdout
    )
    os.kill(int(info["info"]["pid"]), signal.SIGKILL)

    def new_sandbox() -> str | None:
        ready = subprocess.run(
            [*crictl, "pods", "-q", "--name", name, "--state", "ready"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return ready[0] if ready and ready[0] != sandbox else None

    wait_for("a new sandbox", new_sandbox, timeout=90, interval=1)

    def restarted() -> dict[str, Any] | None:
        """The pod once the kubelet reported its container started again in the new sandbox."""
        pods = running(kubectl, ns, "phoenix", 1)
        if pods and pods[0]["status"]["containerStatuses"][0]["restartCount"] >= 1:
            return pods[0]
        return None

    after = wait_for("the container running again in the new sandbox", restarted, timeout=90, interval=1)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]
    assert after["status"]["podIP"] == ip == after["metadata"]["annotations"][IP]
    assert_check_clean(kubectl)
