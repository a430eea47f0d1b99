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
POOL = "ipscheduler.io/pool"
IPS = "ipscheduler.io/ips"
INTERFACES = "ipscheduler.io/interfaces"
IPV6_FORWARDING = Path("/proc/sys/net/ipv6/conf/all/forwarding")
"""The reference bridge plugin turns it on for the first IPv6 pod of the real node (isGateway):
the demo notes it before (D/ipv6-forwarding) and `make down` puts it back."""


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
"""Network namespaces NETNS_PREFIX1, 2, 3; the bridges are NETNS_PREFIX + "br" (eth0) and
NETNS_PREFIX + "rd" (net1 of examples/multihomed.yaml's pod), at most 15 characters."""

MULTIHOMED = ("rdma", "multi")
"""examples/multihomed.yaml's pod (namespace, name): eth0 and net1, each from its own pool."""


def bridge_name(prefix: str, suffix: str = "br") -> str:
    return (prefix + suffix)[-15:]


BRIDGE_SUFFIXES = ("br", "rd")
"""The demo's bridges: bridge_name(prefix, suffix) for eth0's network and net1's."""


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


def wire_pods(
    root: Path,
    kc: Path,
    pods: list[dict[str, Any]],
    prefix: str = NETNS_PREFIX,
    multihomed: dict[str, Any] | None = None,
) -> None:
    """Give each pod a network namespace whose eth0 the reference bridge plugin creates and
    ipscheduler-ipam addresses (examples/cni/10-underlay-bridge.conflist, driven by cnitool
    the way a container runtime drives it); then ``multihomed`` (examples/multihomed.yaml's
    pod) one with eth0 and net1, a second network on a second bridge whose ipscheduler-ipam
    serves the pod's ipscheduler.io/interfaces entry for net1, as Multus calls it."""
    plugin = build_plugin()
    tools = binaries.ensure_cni_tools()
    realnode.ensure_netns_dir()  # before `ip netns add` would make it, racing another process
    conf_dir = root / "cni-net.d"
    conf_dir.mkdir(exist_ok=True)

    def network(name: str, bridge: str, node: str) -> dict[str, Any]:
        conf = json.loads((ROOT / "examples" / "cni" / "10-underlay-bridge.conflist").read_text())
        conf["name"] = name
        conf["plugins"][0]["bridge"] = bridge
        # The plugin's node ledger in the demo's folder (a node keeps it in /var/lib/cni).
        ipam = {"kubeconfig": str(kc), "nodeName": node, "dataDir": str(root / "cni-ledger")}
        conf["plugins"][0]["ipam"].update(ipam)
        return conf

    def add(i: int, pod: dict[str, Any], networks: list[tuple[dict[str, Any], str]]) -> tuple[str, Any]:
        """CNI ADD of each (network, interface) into netns ``prefix<i>``; the netns and a CHECK."""
        meta = pod["metadata"]
        # cnitool reads NETCONFPATH/<file> and picks the network by name; this pod's only.
        for old in conf_dir.glob("*.conflist"):
            old.unlink()
        for n, (conf, _) in enumerate(networks):
            (conf_dir / f"{10 * (n + 1)}-{conf['name']}.conflist").write_text(json.dumps(conf, indent=2))
        netns = f"{prefix}{i}"
        _run("ip", "netns", "add", netns, check=False)

        def cni(verb: str, conf: dict[str, Any], ifname: str) -> None:
            env = {
                **os.environ,
                "NETCONFPATH": str(conf_dir),
                "CNI_PATH": f"{plugin.parent}:{tools}",
                "CNI_IFNAME": ifname,
                "CNI_ARGS": (
                    f"IgnoreUnknown=1;K8S_POD_NAMESPACE={meta['namespace']};K8S_POD_NAME={meta['name']};"
                    f"K8S_POD_INFRA_CONTAINER_ID=demo{i};K8S_POD_UID={meta['uid']}"
                ),
                "CAP_ARGS": json.dumps({"io.kubernetes.cri.pod-annotations": meta.get("annotations") or {}}),
            }
            _run(str(tools / "cnitool"), verb, conf["name"], f"/var/run/netns/{netns}", env=env)

        for conf, ifname in networks:
            cni("add", conf, ifname)
        return netns, cni

    node_network = bridge_name(prefix, BRIDGE_SUFFIXES[0])
    for i, pod in enumerate(pods, start=1):
        meta, spec = pod["metadata"], pod["spec"]
        conf = network("underlay", node_network, spec["nodeName"])
        netns, cni = add(i, pod, [(conf, "eth0")])
        print(f"\n$ ip -n {netns} -br addr show eth0    # pod {meta['name']} on {spec['nodeName']}")
        print(_run("ip", "-n", netns, "-br", "addr", "show", "eth0").stdout, end="")
        print(f"$ ip -n {netns} route")
        routes = _run("ip", "-n", netns, "route").stdout
        print(routes or "(none: a /32 host route, the pool has no subnets)\n", end="")
        if routes:
            # The bridge plugin's CHECK looks for the address's subnet route, which a /32 lacks.
            cni("check", conf, "eth0")
            print(f"$ cnitool check {conf['name']} /var/run/netns/{netns}   # the UID still holds it: ok")
    if multihomed is None:
        return
    meta, spec = multihomed["metadata"], multihomed["spec"]
    node = spec["nodeName"]
    first = network("underlay", node_network, node)
    second = network("rdma", bridge_name(prefix, BRIDGE_SUFFIXES[1]), node)
    netns, cni = add(len(pods) + 1, multihomed, [(first, "eth0"), (second, "net1")])
    pools = {name: entry["pool"] for name, entry in json.loads(meta["annotations"][INTERFACES]).items()}
    print(
        f"\n$ ip -n {netns} -br addr show type veth    # pod {meta['namespace']}/{meta['name']} on {node}: "
        f"eth0 from {meta['annotations'][POOL]}, net1 from {pools['net1']}"
    )
    print(_run("ip", "-n", netns, "-br", "addr", "show", "type", "veth").stdout, end="")
    print(f"$ ip -n {netns} route    # one default route: eth0's")
    print(_run("ip", "-n", netns, "route").stdout, end="")
    cni("check", first, "eth0")
    cni("check", second, "net1")
    print(
        f"$ cnitool check {second['name']} /var/run/netns/{netns}   # CNI_IFNAME=net1: its entry holds it: ok"
    )


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
    """Remove the demo's network namespaces (their veths go with them) and its bridges."""
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            _run("ip", "netns", "del", name, check=False)
            print(f"demo: network namespace {name} removed")
    for suffix in BRIDGE_SUFFIXES:
        bridge = bridge_name(prefix, suffix)
        if _run("ip", "link", "show", bridge, check=False).returncode == 0:
            _run("ip", "link", "del", bridge, check=False)
            print(f"demo: bridge {bridge} removed")


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


def show_real_node(root: Path, cluster: devcluster.Cluster, kc: Path) -> None:
    """examples/realnode.yaml on the real node (its subnets if not 10.88.1.0/24 and
    fd00:88:1::/64): the pods run in containerd, ``kubectl get pods -o wide`` shows the
    reserved address as pod IP, and the dual-stack pod has both of its addresses on eth0."""
    layout = cluster.real_layout(REAL_NODE)
    manifest = (
        (ROOT / "examples" / "realnode.yaml")
        .read_text()
        .replace("10.88.1.", f"10.88.{layout.index}.")
        .replace("fd00:88:1:", f"fd00:88:{layout.index}:")
    )
    noted = root / "ipv6-forwarding"
    if not noted.exists():
        noted.write_text(IPV6_FORWARDING.read_text())
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kc), "apply", "-f", "-"], input=manifest, text=True, check=True
    )

    def running(p: dict[str, Any]) -> bool:
        return bool(p["status"].get("podIP")) and p["status"].get("phase") == "Running"

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(kc, "get", "pods", "-l", "app=real", "-o", "json"))["items"]
        dual = json.loads(kubectl(kc, "get", "pod", "real-dual", "-o", "json", check=False) or "{}")
        if pods and all(map(running, pods)) and dual and running(dual):
            break
        time.sleep(1)
    print(f"\n$ kubectl --kubeconfig {kc} get pods -l app=real -o wide")
    print(kubectl(kc, "get", "pods", "-l", "app=real", "-o", "wide"), end="")
    cols = r"NAME:.metadata.name,RESERVED:.metadata.annotations.ipscheduler\.io/ip,POD-IP:.status.podIP"
    print(f"$ kubectl --kubeconfig {kc} get pods -l app=real -o custom-columns={cols}")
    print(kubectl(kc, "get", "pods", "-l", "app=real", "-o", f"custom-columns={cols}"), end="")
    cols = (
        r"NAME:.metadata.name,RESERVED:.metadata.annotations.ipscheduler\.io/ips,POD-IPS:.status.podIPs[*].ip"
    )
    print(f"$ kubectl --kubeconfig {kc} get pod real-dual -o custom-columns={cols}    # RequireDualStack")
    print(kubectl(kc, "get", "pod", "real-dual", "-o", f"custom-columns={cols}"), end="")
    shown = ("ip", "-o", "addr", "show", "eth0", "scope", "global")  # busybox's ip: no -br
    print(f"$ kubectl --kubeconfig {kc} exec real-dual -- {' '.join(shown)}")
    print(kubectl(kc, "exec", "real-dual", "--", *shown, check=False), end="")


def restore_ipv6_forwarding(root: Path) -> None:
    """Put the host's IPv6 forwarding back as it was before the demo's dual-stack pod."""
    noted = root / "ipv6-forwarding"
    try:
        before = noted.read_text()
    except FileNotFoundError:
        return
    if IPV6_FORWARDING.read_text() != before:
        IPV6_FORWARDING.write_text(before)
        print(f"demo: IPv6 forwarding put back to {before.strip()}")
    noted.unlink()


def apply_multihomed(kc: Path) -> dict[str, Any] | None:
    """examples/multihomed.yaml: its pod, once bound with an address for eth0 and net1."""
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "multihomed.yaml"))
    namespace, name = MULTIHOMED
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pod = json.loads(kubectl(kc, "get", "pod", "-n", namespace, name, "-o", "json", check=False) or "{}")
        if pod and pod["spec"].get("nodeName") and INTERFACES in (pod["metadata"].get("annotations") or {}):
            return pod
        time.sleep(0.5)
    print(f"\ndemo: pod {namespace}/{name} was not bound with its interfaces; not wiring it")
    return None


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
            restore_ipv6_forwarding(root)
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
        show_real_node(root, cluster, kc)
    multihomed = apply_multihomed(kc)
    why_not = can_wire()
    if why_not is None:
        running = json.loads(kubectl(kc, "get", "pods", "-l", "app=demo", "-o", "json"))["items"]
        wire_pods(root, kc, pick_two(running), args.netns_prefix, multihomed)
    else:
        print(f"\ndemo: not wiring pods into network namespaces: {why_not}")
    print(
        f"\nThe scheduler (pid {pid}) keeps running; its log is {root / 'scheduler.log'}.\n"
        f"Try: kubectl --kubeconfig {kc} scale deployment demo --replicas=40   (14 stay Pending)\n"
        f"     kubectl --kubeconfig {kc} describe pod <a Pending pod>          (FailedScheduling)\n"
        f"     {args.python} -m ipscheduler explain default/<a Pending pod> --kubeconfig {kc}\n"
        "Stop everything with: make down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
