#!/usr/bin/env python3
"""`make demo`: dev cluster up, CRD and examples applied, the scheduler running.

Leaves everything running; `make down` stops the scheduler and the cluster.
Standard library only (it runs the operator as a separate process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

import binaries  # noqa: E402
import devcluster  # noqa: E402
import realnode  # noqa: E402

REAL_NODE = f"{realnode.PREFIX}1"


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def scheduler_pid(root: Path) -> int | None:
    """The pid in D/scheduler.pid if that process is still our scheduler."""
    try:
        pid = int((root / "scheduler.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"ipscheduler" in cmdline and b"run" in cmdline else None


def start_scheduler(root: Path, python: str, kubeconfig: Path) -> int:
    pid = scheduler_pid(root)
    if pid:
        print(f"demo: scheduler already running (pid {pid})")
        return pid
    with open(root / "scheduler.log", "ab") as log:
        proc = subprocess.Popen(
            [
                python,
                "-m",
                "ipscheduler",
                "run",
                "--kubeconfig",
                str(kubeconfig),
                "--leader-elect=false",
                "--secure-port",
                "0",  # no port to collide with a scheduler or kube-scheduler on this host
                "-v=2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    (root / "scheduler.pid").write_text(str(proc.pid))
    return proc.pid


def stop_scheduler(root: Path) -> None:
    pid = scheduler_pid(root)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if scheduler_pid(root) is None or not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        print(f"demo: scheduler (pid {pid}) stopped")


NETNS_PREFIX = "ipsched-demo-"
"""Network namespaces NETNS_PREFIX1, 2; the bridge is NETNS_PREFIX + "br" (at most 15 chars)."""


def bridge_name(prefix: str) -> str:
    return (prefix + "br")[-15:]


def _run(
    *cmd: str, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, env=env)
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: {' '.join(cmd)} failed: {(proc.stdout + proc.stderr).strip()}")
    return proc


def can_wire() -> str | None:
    """Why pods cannot be wired into network namespaces here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, bridge)"
    if _run("ip", "netns", "list", check=False).returncode != 0:
        return "`ip netns` is not available"
    return None


def build_plugin() -> Path:
    """bin/ipscheduler-ipam, built as `make cni` builds it (replaced whole, under the host's
    real-node lock: a real node of another cluster on this machine may be running it)."""
    try:
        with realnode.host_lock():
            return devcluster.ensure_cni_plugin(rebuild=True)
    except binaries.DevclusterError as e:
        raise SystemExit(f"demo: building the CNI plugin failed: {e}") from None


def wire_pods(root: Path, kc: Path, pods: list[dict[str, Any]], prefix: str = NETNS_PREFIX) -> None:
    """Give each pod a network namespace whose eth0 the reference bridge plugin creates and
    ipscheduler-ipam addresses (examples/cni/10-underlay-bridge.conflist, driven by cnitool
    the way a container runtime drives it)."""
    plugin = build_plugin()
    tools = binaries.ensure_cni_tools()
    realnode.ensure_netns_dir()  # before `ip netns add` would make it, racing another process
    conf_dir = root / "cni-net.d"
    conf_dir.mkdir(exist_ok=True)
    for i, pod in enumerate(pods):
        meta, spec = pod["metadata"], pod["spec"]
        conf = json.loads((ROOT / "examples" / "cni" / "10-underlay-bridge.conflist").read_text())
        conf["plugins"][0]["bridge"] = bridge_name(prefix)
        # The plugin's node ledger in the demo's folder (a node keeps it in /var/lib/cni).
        ipam = {"kubeconfig": str(kc), "nodeName": spec["nodeName"], "dataDir": str(root / "cni-ledger")}
        conf["plugins"][0]["ipam"].update(ipam)
        # cnitool reads NETCONFPATH/<file> and picks the network by name; one file per node.
        for old in conf_dir.glob("*.conflist"):
            old.unlink()
        (conf_dir / "10-underlay.conflist").write_text(json.dumps(conf, indent=2))
        netns = f"{prefix}{i + 1}"
        _run("ip", "netns", "add", netns, check=False)
        env = {
            **os.environ,
            "NETCONFPATH": str(conf_dir),
            "CNI_PATH": f"{plugin.parent}:{tools}",
            "CNI_IFNAME": "eth0",
            "CNI_ARGS": (
                f"IgnoreUnknown=1;K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
                f"K8S_POD_INFRA_CONTAINER_ID=demo{i + 1};K8S_POD_UID={meta['uid']}"
            ),
            "CAP_ARGS": json.dumps({"io.kubernetes.cri.pod-annotations": meta.get("annotations") or {}}),
        }
        _run(str(tools / "cnitool"), "add", conf["name"], f"/var/run/netns/{netns}", env=env)
        print(f"\n$ ip -n {netns} -br addr show eth0    # pod {meta['name']} on {spec['nodeName']}")
        print(_run("ip", "-n", netns, "-br", "addr", "show", "eth0").stdout, end="")
        print(f"$ ip -n {netns} route")
        routes = _run("ip", "-n", netns, "route").stdout
        print(routes or "(none: a /32 host route, the pool has no subnets)\n", end="")
        if routes:
            # The bridge plugin's CHECK looks for the address's subnet route, which a /32 lacks.
            _run(str(tools / "cnitool"), "check", conf["name"], f"/var/run/netns/{netns}", env=env)
            print(f"$ cnitool check {conf['name']} /var/run/netns/{netns}   # the UID still holds it: ok")


def pick_two(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two bound pods with an address, from different nodes when there are (a host-route
    pool and a pool with a subnet, gateway and default route in the examples)."""
    bound = sorted(
        (
            p
            for p in pods
            if p["spec"].get("nodeName") and (p["metadata"].get("annotations") or {}).get("ipscheduler.io/ip")
        ),
        key=lambda p: (p["spec"]["nodeName"], p["metadata"]["name"]),
    )
    chosen: list[dict[str, Any]] = []
    for p in bound:
        if all(c["spec"]["nodeName"] != p["spec"]["nodeName"] for c in chosen):
            chosen.append(p)
    return (chosen + [p for p in bound if p not in chosen])[:2]


def unwire_pods(prefix: str = NETNS_PREFIX) -> None:
    """Remove the demo's network namespaces (their veths go with them) and its bridge."""
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            _run("ip", "netns", "del", name, check=False)
            print(f"demo: network namespace {name} removed")
    if _run("ip", "link", "show", bridge_name(prefix), check=False).returncode == 0:
        _run("ip", "link", "del", bridge_name(prefix), check=False)


STICKY_COLUMNS = (
    "NAME:.metadata.name,UID:.metadata.uid,NODE:.spec.nodeName,"
    r"IP:.metadata.annotations.ipscheduler\.io/ip"
)


def _db_pods(kc: Path) -> dict[str, tuple[str, str, str]]:
    """db's bound pods: name → (UID, node, address)."""
    out = {}
    for p in json.loads(kubectl(kc, "get", "pods", "-l", "app=db", "-o", "json"))["items"]:
        ip = (p["metadata"].get("annotations") or {}).get("ipscheduler.io/ip")
        if p["spec"].get("nodeName") and ip and not p["metadata"].get("deletionTimestamp"):
            out[p["metadata"]["name"]] = (p["metadata"]["uid"], p["spec"]["nodeName"], ip)
    return out


def show_sticky(kc: Path) -> None:
    """Delete db-1 of the example StatefulSet and show it come back with its address."""
    deadline = time.monotonic() + 60
    while len(before := _db_pods(kc)) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    if "db-1" not in before:
        print("\ndemo: the StatefulSet db did not come up; skipping the sticky-address demo")
        return
    shown = ["get", "pods", "-l", "app=db", "-o", f"custom-columns={STICKY_COLUMNS}"]
    print(f"\n$ kubectl --kubeconfig {kc} get pods -l app=db -o custom-columns={STICKY_COLUMNS}")
    print(kubectl(kc, *shown), end="")
    print(f"$ kubectl --kubeconfig {kc} delete pod db-1")
    print(kubectl(kc, "delete", "pod", "db-1", "--wait=true"), end="")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = _db_pods(kc).get("db-1")
        if now is not None and now[0] != before["db-1"][0]:
            break
        time.sleep(0.5)
    print(f"$ kubectl --kubeconfig {kc} get pods -l app=db -o custom-columns={STICKY_COLUMNS}")
    print(kubectl(kc, *shown), end="")


def show_real_node(cluster: devcluster.Cluster, kc: Path) -> None:
    """examples/realnode.yaml on the real node (its subnet if not 10.88.1.0/24): the pods run
    in containerd, and ``kubectl get pods -o wide`` shows the reserved address as pod IP."""
    layout = cluster.real_layout(REAL_NODE)
    manifest = (ROOT / "examples" / "realnode.yaml").read_text().replace("10.88.1.", f"10.88.{layout.index}.")
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kc), "apply", "-f", "-"], input=manifest, text=True, check=True
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(kc, "get", "pods", "-l", "app=real", "-o", "json"))["items"]
        if pods and all(p["status"].get("podIP") and p["status"].get("phase") == "Running" for p in pods):
            break
        time.sleep(1)
    print(f"\n$ kubectl --kubeconfig {kc} get pods -l app=real -o wide")
    print(kubectl(kc, "get", "pods", "-l", "app=real", "-o", "wide"), end="")
    cols = r"NAME:.metadata.name,RESERVED:.metadata.annotations.ipscheduler\.io/ip,POD-IP:.status.podIP"
    print(f"$ kubectl --kubeconfig {kc} get pods -l app=real -o custom-columns={cols}")
    print(kubectl(kc, "get", "pods", "-l", "app=real", "-o", f"custom-columns={cols}"), end="")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=devcluster.DEFAULT_DIR)
    parser.add_argument("--python", default=sys.executable, help="interpreter with ipscheduler installed")
    parser.add_argument("--down", action="store_true", help="stop the demo scheduler only")
    parser.add_argument("--netns-prefix", default=NETNS_PREFIX, help="names of the pods' network namespaces")
    parser.add_argument(
        "--no-real-node",
        action="store_true",
        help="kwok nodes only, even as root (no containerd, no kubelet)",
    )
    args = parser.parse_args()
    root = Path(args.dir).resolve()
    if args.down:
        stop_scheduler(root)
        if can_wire() is None:
            unwire_pods(args.netns_prefix)
        return 0
    cluster = devcluster.Cluster(root)
    missing = ["--no-real-node"] if args.no_real_node else realnode.prerequisites()
    if missing:
        print(f"demo: kwok nodes only; a real node (containerd + kubelet) needs {', '.join(missing)}")
    try:
        cluster.up(nodes=3, real_nodes=0 if missing else 1)
    except binaries.DevclusterError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2
    kc = cluster.kubeconfig
    kubectl(kc, "apply", "-f", str(ROOT / "crds"))
    for crd in ("nodeippools.ipscheduler.io", "podgroups.scheduling.x-k8s.io"):
        kubectl(kc, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "nodeippools.yaml"))
    pid = start_scheduler(root, args.python, kc)
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "deployment.yaml"))
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "statefulset.yaml"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(kc, "get", "pods", "-l", "app=demo", "-o", "json"))["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if pods and len(running) == len(pods):
            break
        time.sleep(1)
    print(f"\n$ kubectl --kubeconfig {kc} get nodeippools")
    print(kubectl(kc, "get", "nodeippools"), end="")
    cols = (
        "NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName,"
        r"IP:.metadata.annotations.ipscheduler\.io/ip"
    )
    print(f"\n$ kubectl --kubeconfig {kc} get pods -l app=demo -o custom-columns={cols}")
    print(
        kubectl(
            kc, "get", "pods", "-l", "app=demo", "-o", f"custom-columns={cols}", "--sort-by=.spec.nodeName"
        ),
        end="",
    )
    show_sticky(kc)
    if not missing:
        show_real_node(cluster, kc)
    why_not = can_wire()
    if why_not is None:
        running = json.loads(kubectl(kc, "get", "pods", "-l", "app=demo", "-o", "json"))["items"]
        wire_pods(root, kc, pick_two(running), args.netns_prefix)
    else:
        print(f"\ndemo: not wiring pods into network namespaces: {why_not}")
    print(
        f"\nThe scheduler (pid {pid}) keeps running; its log is {root / 'scheduler.log'}.\n"
        f"Try: kubectl --kubeconfig {kc} scale deployment demo --replicas=40   (13 stay Pending)\n"
        f"     kubectl --kubeconfig {kc} describe pod <a Pending pod>          (FailedScheduling)\n"
        f"     {args.python} -m ipscheduler explain default/<a Pending pod> --kubeconfig {kc}\n"
        "Stop everything with: make down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
