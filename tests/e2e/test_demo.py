"""`make demo` as a newcomer runs it: its own control plane, the examples, the scheduler,
and (as root) two of its pods wired into network namespaces by the reference bridge plugin
with ipscheduler-ipam as IPAM, driven by cnitool as a container runtime would, then a pod
with two underlay interfaces (eth0 and net1, each from its own pool, on two bridges); and
on the real node a Deployment and a dual-stack pod."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="wiring pods into network namespaces needs root")


def _netns(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [
        line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix)
    ]


def _links(names: list[str]) -> list[str]:
    """Which of ``names`` are network interfaces of the host."""
    return [
        n
        for n in names
        if subprocess.run(["ip", "link", "show", n], capture_output=True, check=False).returncode == 0
    ]


def _addresses(netns: str, ifname: str) -> list[str]:
    """The global addresses of ``ifname`` in ``netns``, ``address/prefix``."""
    out = subprocess.run(
        ["ip", "-n", netns, "-j", "addr", "show", ifname], capture_output=True, text=True, check=True
    ).stdout
    return [
        f"{a['local']}/{a['prefixlen']}" for a in json.loads(out)[0]["addr_info"] if a["scope"] == "global"
    ]


def test_make_demo_schedules_the_examples_and_wires_two_pods(tmp_path: Path) -> None:
    prefix = f"ipst{os.getpid() % 100000}-"
    root = tmp_path / "demo"
    demo = [sys.executable, str(ROOT / "hack" / "demo.py"), "--dir", str(root), "--netns-prefix", prefix]
    try:
        run = subprocess.run(
            [*demo, "--python", sys.executable],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        kc = root / "kubeconfig"
        pods = _pods(kc, "demo")
        ips = {p["metadata"]["name"]: p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods}
        assert len(ips) == 12 and len(set(ips.values())) == 12, ips

        # Two namespaces, each eth0 carrying the address its pod was bound with.
        wired = re.findall(r"\$ ip -n (\S+) -br addr show eth0 +# pod (\S+) on (\S+)\n(.*)\n", run.stdout)
        assert len(wired) == 2, run.stdout
        assert {node for _, _, node, _ in wired} == {"node-1", "node-2"}, run.stdout
        for netns, pod, _, _ in wired:
            addr = json.loads(
                subprocess.run(
                    ["ip", "-n", netns, "-j", "addr", "show", "eth0"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )[0]["addr_info"]
            v4 = [f"{a['local']}/{a['prefixlen']}" for a in addr if a["family"] == "inet"]
            want = {"node-1": "/32", "node-2": "/28"}[pods_node(pods, pod)]
            assert v4 == [ips[pod] + want], (netns, pod, v4)
        routes = subprocess.run(
            ["ip", "-n", wired[1][0], "route"], capture_output=True, text=True, check=True
        ).stdout
        assert "default via 10.0.2.1 dev eth0" in routes  # the pool's subnet gateway and route
        assert run.stdout.count("the UID still holds it: ok") == 1  # CHECK of the subnet pod
        _multihomed_pod_has_both_interfaces(kc, run.stdout, prefix)
        _real_node_runs_the_example(kc, run.stdout)
        _gang_example_runs(kc)
    finally:
        subprocess.run([*demo, "--down"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
        subprocess.run(
            [sys.executable, str(ROOT / "hack" / "devcluster.py"), "down", "--dir", str(root)],
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert _netns(prefix) == []  # `make down` removes what the demo made
    assert _links([f"{prefix}br", f"{prefix}rd"]) == []  # both bridges


def _multihomed_pod_has_both_interfaces(kc: Path, output: str, prefix: str) -> None:
    """examples/multihomed.yaml's pod rdma/multi, bound on node-2 with eth0 from pool-node-2 and
    net1 from rdma-node-2 (ipscheduler.io/interfaces), wired in the third netns: eth0 holds the
    first interface's address, net1 exactly net1's (its pool's /24), one default route (eth0's)
    and net1's pool's other route; CHECK passes for net1."""
    pod = json.loads(
        subprocess.run(
            ["kubectl", "--kubeconfig", str(kc), "get", "pod", "-n", "rdma", "multi", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    annotations = pod["metadata"]["annotations"]
    net1 = json.loads(annotations["ipscheduler.io/interfaces"])["net1"]
    assert pod["spec"]["nodeName"] == "node-2" and annotations["ipscheduler.io/pool"] == "pool-node-2"
    assert net1["pool"] == "rdma-node-2" and len(net1["ips"]) == 1, net1
    netns = f"{prefix}3"
    header = re.search(
        rf"^\$ ip -n {netns} -br addr show type veth +# pod rdma/multi on node-2: (.*)\n", output, re.M
    )
    assert header and header.group(1) == "eth0 from pool-node-2, net1 from rdma-node-2", output
    assert _addresses(netns, "eth0") == [annotations["ipscheduler.io/ip"] + "/28"]
    assert _addresses(netns, "net1") == [net1["ips"][0] + "/24"]
    assert re.search(rf"^net1@\S+ +UP +{re.escape(net1['ips'][0])}/24 ", output, re.M), output
    routes = subprocess.run(["ip", "-n", netns, "route"], capture_output=True, text=True, check=True).stdout
    assert [line for line in routes.splitlines() if line.startswith("default")] == [
        "default via 10.0.2.1 dev eth0 "
    ], routes
    assert "10.10.0.0/16 via 10.10.2.1 dev net1" in routes, routes
    assert output.count("CNI_IFNAME=net1: its entry holds it: ok") == 1, output


def _pods(kc: Path, app: str) -> list[dict[str, Any]]:
    """The pods labelled ``app=<app>``, as ``kubectl get pods -o json`` lists them."""
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(kc), "get", "pods", "-l", f"app={app}", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return list(json.loads(out)["items"])


def _real_node_runs_the_example(kc: Path, output: str) -> None:
    """As root the demo adds real node ``real-node-1`` (containerd + kubelet) and runs
    examples/realnode.yaml there: each pod Running, its pod IP the reserved address, as the
    demo's ``kubectl get pods -o wide`` shows; the RequireDualStack pod ``real-dual`` with an
    IPv4 and an IPv6 address (ipscheduler.io/ips, the same in status.podIPs), both on its
    eth0 as the demo's ``kubectl exec real-dual -- ip -o addr`` shows."""
    pods = _pods(kc, "real")
    assert len(pods) == 3, output
    for pod in pods:
        assert pod["spec"]["nodeName"] == "real-node-1"
        assert pod["status"]["phase"] == "Running", pod["status"]
        ip = pod["metadata"]["annotations"]["ipscheduler.io/ip"]
        assert pod["status"]["podIP"] == ip
        assert re.search(
            rf"^{pod['metadata']['name']}\s+1/1\s+Running\s+0\s+\S+\s+{re.escape(ip)}\s+real-node-1\s",
            output,
            re.M,
        ), output
    dual = json.loads(
        subprocess.run(
            ["kubectl", "--kubeconfig", str(kc), "get", "pod", "real-dual", "-o", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert dual["spec"]["nodeName"] == "real-node-1" and dual["status"]["phase"] == "Running", dual["status"]
    ips = dual["metadata"]["annotations"]["ipscheduler.io/ips"].split(",")
    assert [ipaddress.ip_address(ip).version for ip in ips] == [4, 6], ips
    assert [p["ip"] for p in dual["status"]["podIPs"]] == ips, dual["status"]
    listed = re.escape(",".join(ips))
    assert re.search(rf"^real-dual +{listed} +{listed}\s*$", output, re.M), output
    assert re.search(rf"^\d+: eth0 +inet {re.escape(ips[0])}/24 .*scope global", output, re.M), output
    assert re.search(rf"^\d+: eth0 +inet6 {re.escape(ips[1])}/64 scope global", output, re.M), output


def _gang_example_runs(kc: Path) -> None:
    """examples/podgroup.yaml as examples/README.md runs it on the demo's cluster: the Job's 4
    workers bind together, each with its own address, and ``kubectl get pg`` shows them."""

    def kubectl(*args: str) -> str:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kc), *args], capture_output=True, text=True, check=True
        ).stdout

    kubectl("apply", "-f", str(ROOT / "examples" / "podgroup.yaml"))
    deadline = time.monotonic() + 60
    pods: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        pods = json.loads(kubectl("get", "pods", "-l", "app=training", "-o", "json"))["items"]
        if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods):
            break
        time.sleep(0.5)
    ips = {p["metadata"]["annotations"].get("ipscheduler.io/ip") for p in pods}
    assert len(pods) == 4 and len(ips) == 4 and None not in ips, json.dumps(pods)[:2000]
    deadline = time.monotonic() + 30
    table = ""
    while time.monotonic() < deadline:
        table = kubectl("get", "pg", "training")
        if re.search(r"^training\s+(Scheduled|Running|Finished)\s+4\s+4\s", table, re.MULTILINE):
            break
        time.sleep(0.5)
    assert re.search(r"^training\s+(Scheduled|Running|Finished)\s+4\s+4\s", table, re.MULTILINE), table


def pods_node(pods: list[dict[str, object]], name: str) -> str:
    for p in pods:
        meta, spec = p["metadata"], p["spec"]
        assert isinstance(meta, dict) and isinstance(spec, dict)
        if meta["name"] == name:
            return str(spec["nodeName"])
    raise AssertionError(f"pod {name} not found")
