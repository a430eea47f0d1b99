"""A further underlay interface through the real Multus, on a real node.

The module's real node (``real-node-multus``, :meth:`devcluster.Cluster.start_real_node` with
``multus=True``) runs Multus' thin plugin (``multus`` v4.2.3, built from its Go module by
``hack/binaries.py``) as its CNI: containerd calls Multus, whose cluster network is the
node's own conflist (the reference ``bridge`` on ``ipsbr<i>`` with ``ipscheduler-ipam``, for
eth0), and Multus calls the NetworkAttachmentDefinition a pod selects for its further
interface. The module installs the NetworkAttachmentDefinition CRD as Multus ships it
(``testdata/multus/``) and removes it afterwards if it installed it.

Each test makes, in its namespace, the NAD ``underlay-b``: a second bridge on the node with
``ipscheduler-ipam`` as IPAM (the node's first network's settings), and two pools for the
node: one on the node's subnet for eth0, and ``pool-b`` on ``10.89.<i>.0/24`` (gateway
``10.89.<i>.1`` on that bridge, a default route and a route to ``10.99.<i>.0/24``) for net1.
A pod names its first pool in ``ipscheduler.io/pools`` and net1's in its Multus element (or
the NAD names it, in its ``ipscheduler.io/pools`` annotation); the scheduler writes
``ipscheduler.io/interfaces`` and the element's ``ips`` at Binding, and Multus calls the
plugin for net1 with ``CNI_IFNAME=net1``.

Outside CI a node that cannot start (no root, Go, gcc, apt) skips the module; in CI it fails,
as the ``real_node`` fixture does.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import binaries
import devcluster
import realnode
from tests.e2e.helpers import SchedulerProcess, events_for
from tests.e2e.realpods import GRACEFUL, busybox_template, exec_in, global_addresses, wait_running
from tests.kube import Kubectl, wait_for

ROOT = Path(__file__).resolve().parents[2]
NAD_CRD = ROOT / "testdata" / "multus" / "network-attachment-definitions.k8s.cni.cncf.io.yaml"
NAD_CRD_NAME = "network-attachment-definitions.k8s.cni.cncf.io"
NODE = "real-node-multus"
NAD = "underlay-b"
POOL_B = "pool-b"
FIRST_POOL = "multus-eth0"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
INTERFACES = "ipscheduler.io/interfaces"
IP = "ipscheduler.io/ip"


@pytest.fixture(scope="module")
def nad_crd(kubectl: Kubectl) -> Iterator[None]:
    """The NetworkAttachmentDefinition CRD (Multus v4.2.3's), Established; deleted afterwards
    if this module installed it."""
    installed = kubectl.run("get", "crd", NAD_CRD_NAME, check=False).returncode != 0
    if installed:
        kubectl("apply", "-f", str(NAD_CRD))
    try:

        def established() -> bool:
            conditions = (kubectl.json("get", "crd", NAD_CRD_NAME).get("status") or {}).get(
                "conditions"
            ) or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

        wait_for(f"the CRD {NAD_CRD_NAME} Established", established, timeout=60, interval=0.2)
        yield
    finally:
        if installed:
            kubectl.run("delete", "crd", NAD_CRD_NAME, "--ignore-not-found", "--wait=true", check=False)


def second_bridge(layout: realnode.Layout) -> str:
    """The bridge of ``underlay-b`` (net1) on the node: the node's bridge name and ``n1``."""
    return f"{layout.bridge}n1"


@pytest.fixture(scope="module")
def multus_node(cluster: devcluster.Cluster, nad_crd: None) -> Iterator[realnode.Layout]:
    """Real node :data:`NODE` with Multus as its CNI; stopped, torn down and deleted afterwards,
    with the second bridge the NAD's bridge plugin made."""
    layout: realnode.Layout | None = None
    try:
        try:
            layout = cluster.start_real_node(NODE, multus=True)
        except binaries.DevclusterError as e:
            if os.environ.get("CI") == "true":
                pytest.fail(f"a Multus real node could not start in CI: {e}")
            pytest.skip(f"a Multus real node could not start: {e}")
        yield layout
    finally:
        cluster.stop_real_node(NODE, delete_node=True)
        if layout is not None:
            subprocess.run(["ip", "link", "del", second_bridge(layout)], capture_output=True, check=False)


def net1_subnet(layout: realnode.Layout) -> ipaddress.IPv4Network:
    """net1's subnet on the node: ``10.89.<index>.0/24`` (the index is unique on the host)."""
    return ipaddress.IPv4Network(f"10.89.{layout.index}.0/24")


def other_route(layout: realnode.Layout) -> str:
    """``pool-b``'s route besides the default one: only net1 leads there."""
    return f"10.99.{layout.index}.0/24"


def make_networks(
    kubectl: Kubectl, pools: Any, layout: realnode.Layout, ns: str, net1_addresses: int
) -> None:
    """The first pool (eth0, two addresses of the node's subnet), ``pool-b`` (net1, the first
    ``net1_addresses`` from ``.10`` of :func:`net1_subnet`) and the NAD ``underlay-b`` in
    ``ns``: the second bridge, ``ipscheduler-ipam`` with the node's first network's settings."""
    base, b = ipaddress.ip_network(layout.subnet), net1_subnet(layout)
    pools.create(
        FIRST_POOL,
        layout.name,
        [f"{base[20]}-{base[21]}"],
        subnets=[{"cidr": layout.subnet, "gateway": layout.node_ip, "routes": [{"dst": "0.0.0.0/0"}]}],
    )
    pools.create(
        POOL_B,
        layout.name,
        [f"{b[10]}-{b[10 + net1_addresses - 1]}"],
        subnets=[
            {
                "cidr": str(b),
                "gateway": str(b[1]),
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": other_route(layout)}],
            }
        ],
    )
    first = json.loads((layout.netd / realnode.CONFLIST).read_text())
    config = {
        "cniVersion": "1.1.0",
        "name": NAD,
        "plugins": [
            {
                "type": "bridge",
                "bridge": second_bridge(layout),
                "isGateway": True,
                "ipMasq": False,
                "ipam": first["plugins"][0]["ipam"],
            }
        ],
    }
    assert config["plugins"][0]["ipam"]["type"] == "ipscheduler-ipam"
    kubectl.apply(
        {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": NAD},
            "spec": {"config": json.dumps(config)},
        },
        ns,
    )


def multus_pod(kubectl: Kubectl, ns: str, name: str, element: dict[str, Any] | None = None) -> None:
    """A busybox pod on :data:`NODE`: eth0 from the first pool, net1 from ``pool-b`` through
    its Multus element (``element``; default: naming ``underlay-b``, net1 and ``pool-b``); a
    container that ends on SIGTERM, so the kubelet confirms the deletion (CNI DEL first)
    within its grace period."""
    if element is None:
        element = {"name": NAD, "interface": "net1", "ipscheduler.io/pools": POOL_B}
    template = busybox_template(name, **{"ipscheduler.io/pools": FIRST_POOL, NETWORKS: json.dumps([element])})
    spec = template["spec"]
    spec["nodeSelector"]["kubernetes.io/hostname"] = NODE
    spec["terminationGracePeriodSeconds"] = 30
    spec["containers"] = [GRACEFUL]
    kubectl.create(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]}, "spec": spec},
        ns,
    )


def pod(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", name, "-n", ns))


def wait_pod_running(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    """Pod ``name`` (label ``app=<name>``) once Running and Ready with its pod IP."""
    (running,) = wait_running(kubectl, ns, name, 1)
    return running


def allocations(kubectl: Kubectl, pool: str) -> dict[str, Any]:
    return dict((kubectl.json("get", "nodeippool", pool).get("status") or {}).get("allocations") or {})


def bridge_ports(bridge: str) -> list[str]:
    brif = Path(f"/sys/class/net/{bridge}/brif")
    return sorted(p.name for p in brif.iterdir()) if brif.is_dir() else []


def test_multus_puts_the_net1_address_of_its_own_pool_on_net1_and_both_are_given_back(
    kubectl: Kubectl, scheduler: SchedulerProcess, multus_node: realnode.Layout, pools: Any, ns: str
) -> None:
    """The pod runs through Multus: eth0 holds exactly ``ipscheduler.io/ip`` with the node
    subnet's prefix and the only default route; net1 holds exactly ``ipscheduler.io/interfaces``'
    net1 address with its prefix and the pool's other route, and reaches its gateway over the
    second bridge; the network-status Multus wrote lists both interfaces with their addresses
    (eth0 the default), and Multus said it added each; the plugin's node ledger holds each
    address for its interface of the one sandbox. Deleting the pod (kubelet confirmed) releases
    both allocations, after CNI DEL (through Multus) took both veths off their bridges and
    both addresses out of the ledger."""
    layout, b = multus_node, net1_subnet(multus_node)
    make_networks(kubectl, pools, layout, ns, net1_addresses=3)
    multus_pod(kubectl, ns, "multi")
    running = wait_pod_running(kubectl, ns, "multi")
    annotations = running["metadata"]["annotations"]
    assert running["spec"]["nodeName"] == NODE
    ip = annotations[IP]
    assert annotations["ipscheduler.io/pool"] == FIRST_POOL
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(layout.subnet)
    assert running["status"]["podIP"] == ip, running["status"]
    entry = json.loads(annotations[INTERFACES])["net1"]
    assert entry["pool"] == POOL_B and len(entry["ips"]) == 1, entry
    net1 = entry["ips"][0]
    assert ipaddress.ip_address(net1) in b
    (element,) = json.loads(annotations[NETWORKS])
    assert element["ips"] == [f"{net1}/24"], element  # the Binding's ips for Multus

    eth0_addr = exec_in(kubectl, ns, "multi", "ip", "-o", "addr", "show", "dev", "eth0")
    assert global_addresses(eth0_addr) == [f"{ip}/24"], eth0_addr
    net1_addr = exec_in(kubectl, ns, "multi", "ip", "-o", "addr", "show", "dev", "net1")
    assert global_addresses(net1_addr) == [f"{net1}/24"], net1_addr
    routes = exec_in(kubectl, ns, "multi", "ip", "-4", "route")
    defaults = [line.strip() for line in routes.splitlines() if line.startswith("default")]
    assert defaults == [f"default via {layout.node_ip} dev eth0"], routes
    assert f"{other_route(layout)} via {b[1]} dev net1" in routes, routes
    out = exec_in(kubectl, ns, "multi", "ping", "-c", "1", "-W", "5", "-I", "net1", str(b[1]))
    assert "1 packets received" in out, out

    status = {s["interface"]: s for s in json.loads(annotations[NETWORK_STATUS])}
    assert sorted(status) == ["eth0", "net1"], status
    assert status["eth0"]["name"] == realnode.NETWORK_NAME and status["eth0"].get("default") is True
    assert status["eth0"]["ips"] == [ip], status
    assert status["net1"]["name"] == f"{ns}/{NAD}" and not status["net1"].get("default"), status
    assert status["net1"]["ips"] == [net1], status
    added = sorted(e["message"] for e in events_for(kubectl, ns, "multi", "AddedInterface"))
    assert added == [
        f"Add eth0 [{ip}/24] from {realnode.NETWORK_NAME}",
        f"Add net1 [{net1}/24] from {ns}/{NAD}",
    ]

    uid = running["metadata"]["uid"]
    assert uid in allocations(kubectl, FIRST_POOL) and uid in allocations(kubectl, POOL_B)
    # ipscheduler-ipam gave each address to its own interface of the one sandbox (its ledger)
    held = {a: json.loads((layout.ledger / a).read_text()) for a in (ip, net1)}
    assert [(e["ifName"], e["network"], e["podUID"]) for e in held.values()] == [
        ("eth0", realnode.NETWORK_NAME, uid),
        ("net1", NAD, uid),
    ], held
    assert held[ip]["containerID"] == held[net1]["containerID"]
    assert len(bridge_ports(second_bridge(layout))) == 1
    kubectl("delete", "pod", "multi", "-n", ns, "--wait=false")
    wait_for(
        "both allocations released",
        lambda: uid not in allocations(kubectl, FIRST_POOL) and uid not in allocations(kubectl, POOL_B),
        timeout=90,
    )
    assert bridge_ports(second_bridge(layout)) == [] and bridge_ports(layout.bridge) == []
    assert not (layout.ledger / ip).exists() and not (layout.ledger / net1).exists()  # both DELs ran


def test_a_pod_whose_net1_pool_is_full_stays_pending_until_an_address_is_free(
    kubectl: Kubectl, scheduler: SchedulerProcess, multus_node: realnode.Layout, pools: Any, ns: str
) -> None:
    """``pool-b`` has one address, which the first pod holds on its net1: the second pod is
    not bound (no sandbox, so no Multus or plugin failure) and stays Pending with
    FailedScheduling "node(s) had no free underlay IP for interface net1"; once the first pod
    is deleted the second runs, with that address on its net1."""
    layout = multus_node
    make_networks(kubectl, pools, layout, ns, net1_addresses=1)
    only = str(net1_subnet(layout)[10])
    multus_pod(kubectl, ns, "holder")
    holder = wait_pod_running(kubectl, ns, "holder")
    assert json.loads(holder["metadata"]["annotations"][INTERFACES])["net1"]["ips"] == [only]

    multus_pod(kubectl, ns, "waiter")
    want = "node(s) had no free underlay IP for interface net1"

    def refused() -> list[str] | None:
        said = [e["message"] for e in events_for(kubectl, ns, "waiter", "FailedScheduling")]
        return said if any(want in m for m in said) else None

    said = wait_for(f"FailedScheduling '{want}'", refused, timeout=60)
    waiter = pod(kubectl, ns, "waiter")
    assert waiter["status"]["phase"] == "Pending" and not waiter["spec"].get("nodeName"), waiter["status"]
    assert INTERFACES not in (waiter["metadata"].get("annotations") or {}), said
    assert events_for(kubectl, ns, "waiter", "FailedCreatePodSandBox") == []

    kubectl("delete", "pod", "holder", "-n", ns, "--wait=false")
    waiter = wait_pod_running(kubectl, ns, "waiter")
    assert json.loads(waiter["metadata"]["annotations"][INTERFACES])["net1"]["ips"] == [only]
    net1_addr = exec_in(kubectl, ns, "waiter", "ip", "-o", "addr", "show", "dev", "net1")
    assert global_addresses(net1_addr) == [f"{only}/24"], net1_addr


def test_an_element_naming_only_a_nad_annotated_with_pools_gets_net1_from_the_nads_pool(
    kubectl: Kubectl, scheduler: SchedulerProcess, multus_node: realnode.Layout, pools: Any, ns: str
) -> None:
    """``underlay-b`` annotated with ``ipscheduler.io/pools: pool-b``; the pod's element names
    only the network and the interface. The module's scheduler started before the module
    installed the NAD CRD, so it found the API not served and picks it up at its next check
    (every 30 s), then the NAD's annotation. The pod runs with net1's address from ``pool-b``
    on net1 (Multus gave it the element's ``ips`` the Binding wrote), and its deletion
    releases it."""
    layout, b = multus_node, net1_subnet(multus_node)
    make_networks(kubectl, pools, layout, ns, net1_addresses=2)
    wait_for(
        "the scheduler watching NetworkAttachmentDefinitions",
        lambda: scheduler.logged("NetworkAttachmentDefinition API k8s.cni.cncf.io/v1 is served: watching it"),
        timeout=60,
    )
    kubectl("annotate", "network-attachment-definitions", NAD, "-n", ns, f"ipscheduler.io/pools={POOL_B}")
    wait_for(
        "the scheduler seeing the NAD's pools",
        lambda: scheduler.logged(f"NetworkAttachmentDefinition {ns}/{NAD} names pools '{POOL_B}'"),
        timeout=30,
    )
    multus_pod(kubectl, ns, "by-nad", {"name": NAD, "interface": "net1"})
    running = wait_pod_running(kubectl, ns, "by-nad")
    annotations = running["metadata"]["annotations"]
    entry = json.loads(annotations[INTERFACES])["net1"]
    assert entry["pool"] == POOL_B and len(entry["ips"]) == 1, entry
    net1 = entry["ips"][0]
    assert ipaddress.ip_address(net1) in b
    (element,) = json.loads(annotations[NETWORKS])
    assert element == {"name": NAD, "interface": "net1", "ips": [f"{net1}/24"]}, element
    net1_addr = exec_in(kubectl, ns, "by-nad", "ip", "-o", "addr", "show", "dev", "net1")
    assert global_addresses(net1_addr) == [f"{net1}/24"], net1_addr
    uid = running["metadata"]["uid"]
    assert allocations(kubectl, POOL_B)[uid]["interface"] == "net1"
    kubectl("delete", "pod", "by-nad", "-n", ns, "--wait=false")
    wait_for("net1's allocation released", lambda: uid not in allocations(kubectl, POOL_B), timeout=90)


def test_a_nads_malformed_pools_keep_its_pods_pending_until_the_nad_is_fixed(
    kubectl: Kubectl, scheduler: SchedulerProcess, multus_node: realnode.Layout, pools: Any, ns: str
) -> None:
    """``underlay-b`` annotated with a pool list that cannot be read: the pod whose element
    names it stays Pending, FailedScheduling naming the NAD (no sandbox); the NAD's
    annotation fixed, the NAD event moves the pod at once (well within the queue's 5 min
    flush of unschedulable pods) and it runs with net1 from ``pool-b``."""
    layout = multus_node
    make_networks(kubectl, pools, layout, ns, net1_addresses=1)
    kubectl("annotate", "network-attachment-definitions", NAD, "-n", ns, "ipscheduler.io/pools=pool-b,,x")
    wait_for(
        "the scheduler seeing the NAD's pools",
        lambda: scheduler.logged(f"NetworkAttachmentDefinition {ns}/{NAD} names pools 'pool-b,,x'"),
        timeout=60,
    )
    multus_pod(kubectl, ns, "broken", {"name": NAD, "interface": "net1"})
    want = f"NetworkAttachmentDefinition {ns}/{NAD} annotation ipscheduler.io/pools='pool-b,,x': ''"

    def refused() -> list[str] | None:
        said = [e["message"] for e in events_for(kubectl, ns, "broken", "FailedScheduling")]
        return said if any(want in m for m in said) else None

    wait_for(f"FailedScheduling '{want}'", refused, timeout=60)
    assert not pod(kubectl, ns, "broken")["spec"].get("nodeName")
    kubectl(
        "annotate",
        "--overwrite",
        "network-attachment-definitions",
        NAD,
        "-n",
        ns,
        f"ipscheduler.io/pools={POOL_B}",
    )
    running = wait_pod_running(kubectl, ns, "broken")
    entry = json.loads(running["metadata"]["annotations"][INTERFACES])["net1"]
    assert entry["pool"] == POOL_B and entry["ips"] == [str(net1_subnet(layout)[10])], entry
