"""`make demo` as a newcomer runs it: its own control plane, the examples, the scheduler,
and (as root) two of its pods wired into network namespaces by the reference bridge plugin
with ipscheduler-ipam as IPAM, driven by cnitool as a container runtime would."""

from __future__ import annotations

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
    demo's ``kubectl get pods -o wide`` shows."""
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
