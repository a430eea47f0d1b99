"""A real Kubernetes node on this machine: containerd, runc and a kubelet as plain processes.

``hack/devcluster.py up --real-nodes N`` starts, per node, one containerd (its own root,
state, socket, runc root and CNI config dir) and one kubelet (its own root dir, ports,
cgroup root, pod-log dir and node certificate) beside the kwok nodes. This module holds
what one node is made of, as pure functions of its :class:`Layout` (the configuration
files, the commands), and the host-side setup and teardown (the bridge, cgroups, mounts,
network namespaces) that ``down`` must undo. The processes themselves are started and
recorded by ``devcluster.Cluster`` like the control plane's.

The node's network: a Linux bridge ``ipsbr<index>`` holding ``10.88.<index>.1/24``, the
node's InternalIP (the kubelet refuses a loopback node IP, and the API server reaches the
kubelet there); pods attach to it through the reference ``bridge`` plugin with
``ipscheduler-ipam`` as IPAM, so a pool for the node uses ``10.88.<index>.0/24`` with that
gateway. ``<index>`` is unique on the host (the lowest with no such bridge), so a demo's
cluster and a test's cluster can each have real nodes. A Multus node runs Multus' thin
plugin as its CNI, with that network as its cluster network (:func:`multus_conflist`).

Standard library only; Linux and root only (:func:`prerequisites` says what is missing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from binaries import BUSYBOX_IMAGE, PAUSE_IMAGE, DevclusterError, file_lock, log

PREFIX = "real-node-"
"""Real nodes are named ``real-node-<n>`` (kwok's are ``node-<n>``)."""
LABEL = "ipscheduler.io/real-node"
"""Label ``true`` on every real node (also ``type=real``; kwok nodes have ``type=kwok``)."""
TOLERATION = {"key": LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
"""Real nodes register with the taint ``ipscheduler.io/real-node=true:NoSchedule``: only pods
meant for them (this toleration, and the two images the node has) go there, not the kwok
examples' nginx or postgres, which no registry here could pull."""
NETWORK_NAME = "underlay"
CONFLIST = "10-underlay.conflist"
"""The node's CNI configuration file in ``netd`` (:func:`write_files`; the bench swaps it)."""
MULTUS_CONFLIST = "00-multus.conflist"
"""A Multus node's CNI configuration in ``netd`` (:func:`multus_conflist`): it sorts before
:data:`CONFLIST`, so containerd (``max_conf_num = 1``) runs Multus, as Multus' own installer
lays a node out; :data:`CONFLIST`'s network is Multus' cluster network."""
CGROUP_FS = Path("/sys/fs/cgroup")
NODES_DIR = Path("/var/lib/ipscheduler")
"""Real nodes' roots: ``/var/lib/ipscheduler/ipsbr<index>`` (unix sockets live there: the kubelet's
and containerd's paths must stay under 104 bytes, which a test's /tmp/pytest-of-root/... is not)."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one real node lives. ``index``: unique on the host (bridge, subnet, cgroup).

    ``root``: :func:`node_root` of ``index``; ``bindir``: kubelet, containerd, runc, crictl;
    ``cni_bin``: folders holding bridge, loopback and ipscheduler-ipam."""

    name: str
    index: int
    root: Path
    bindir: Path
    cni_bin: tuple[Path, ...]
    pki: Path
    ports: dict[str, int]

    @property
    def bridge(self) -> str:
        return f"ipsbr{self.index}"

    @property
    def subnet(self) -> str:
        return f"10.88.{self.index}.0/24"

    @property
    def node_ip(self) -> str:
        return f"10.88.{self.index}.1"

    @property
    def cgroup(self) -> str:
        """The kubelet's ``cgroupRoot`` (kubepods and every pod below it)."""
        return f"/ipscheduler-{self.bridge}"

    @property
    def run_dir(self) -> Path:
        """containerd's sockets."""
        return self.root / "run"

    @property
    def socket(self) -> Path:
        return self.run_dir / "containerd.sock"

    @property
    def netd(self) -> Path:
        return self.root / "net.d"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def multus_dir(self) -> Path:
        """Multus' ``cniDir`` on a Multus node (its delegates' configurations and results, for
        DEL) and its log file, ``multus.log``."""
        return self.root / "multus"

    @property
    def ledger(self) -> Path:
        """``ipscheduler-ipam``'s node-local ledger (its ``ipam.dataDir``; on a node users run,
        ``/var/lib/cni/ipscheduler-ipam``): on the node's disk, kept across restarts."""
        return self.root / "ipam-ledger"


def node_root(index: int) -> Path:
    """Where real node ``index`` keeps its state: ``/var/lib/ipscheduler/ipsbr<index>``."""
    return NODES_DIR / f"ipsbr{index}"


def prerequisites() -> list[str]:
    """What this machine lacks to run a real node: root, cgroups, ``ip``, ``mount``, ``openssl``."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (containerd, runc and the kubelet run as root)")
    if not (CGROUP_FS / "memory").is_dir() and not (CGROUP_FS / "cgroup.controllers").is_file():
        missing.append(f"a cgroup hierarchy under {CGROUP_FS}")
    for tool in ("ip", "mount", "umount", "openssl"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} on PATH")
    return missing


HOST_LOCK = Path("/run/lock/ipscheduler-realnode.lock")
"""The lock of what real nodes share on the host (see :func:`host_lock`)."""


@contextlib.contextmanager
def host_lock() -> Iterator[None]:
    """Hold the host-wide lock (``flock`` on :data:`HOST_LOCK`) of real-node set-up: choosing
    an index and creating its bridge (:func:`free_index`, :func:`setup_bridge`), making
    ``/run/netns`` a mount point (:func:`ensure_netns_dir`), building the CNI plugin into the
    repository. Several processes (parallel test workers, a demo) start real nodes at once.
    Not reentrant: a holder must not take it again."""
    with file_lock(HOST_LOCK):
        yield


def free_index(skip: set[int] | frozenset[int] = frozenset()) -> int:
    """The lowest index ``i >= 1`` not in ``skip`` that no node holds on the host: no
    ``ipsbr<i>`` bridge and no :func:`node_root` folder (a node being torn down deletes its
    bridge before its folder and cgroups are gone). Call it under :func:`host_lock` and claim
    the index (create its bridge) before releasing the lock."""
    i = 1
    while i in skip or Path(f"/sys/class/net/ipsbr{i}").exists() or node_root(i).exists():
        i += 1
    return i


# -- configuration --------------------------------------------------------------


def can_lower_oom_score() -> bool:
    """Has this process CAP_SYS_RESOURCE (bit 24 of CapEff), which a negative
    ``oom_score_adj`` needs? Sandboxed machines (this project's among them) drop it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> 24 & 1)
    return False


def containerd_config(layout: Layout, restrict_oom_score_adj: bool | None = None) -> str:
    """containerd 2.x's config (version 3): everything under the node's root, CRI with runc
    (cgroupfs driver, the kubelet's), the sandbox image :data:`PAUSE_IMAGE`, CNI from
    ``net.d`` and the CNI bin folders; NRI off (its socket is host-wide).

    ``restrict_oom_score_adj`` (default: when :func:`can_lower_oom_score` is false): containerd
    clamps the kubelet's negative OOM scores (-998 for sandboxes, -997 for Guaranteed pods) to
    its own, as it does for rootless runs; without it runc fails every sandbox with
    "failed to update /proc/self/oom_score_adj: Permission denied"."""
    if restrict_oom_score_adj is None:
        restrict_oom_score_adj = not can_lower_oom_score()
    r = layout.root / "containerd"
    bins = ", ".join(json.dumps(str(p)) for p in layout.cni_bin)
    cri = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = {json.dumps(str(r / "root"))}
state = {json.dumps(str(r / "state"))}
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = {json.dumps(str(layout.socket))}

[ttrpc]
  address = {json.dumps(str(layout.run_dir / "containerd.sock.ttrpc"))}

[debug]
  address = {json.dumps(str(layout.run_dir / "debug.sock"))}
  level = "warn"

[metrics]
  address = ""

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {json.dumps(PAUSE_IMAGE)}

[{cri}]
  restrict_oom_score_adj = {"true" if restrict_oom_score_adj else "false"}
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = {json.dumps(str(layout.bindir / "runc"))}
        Root = {json.dumps(str(r / "runc"))}
        SystemdCgroup = false
  [{cri}.cni]
    bin_dirs = [{bins}]
    conf_dir = {json.dumps(str(layout.netd))}
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def conflist(layout: Layout, ipam_kubeconfig: Path, delegate: dict[str, Any] | None = None) -> dict[str, Any]:
    """The node's CNI network: the reference ``bridge`` on ``ipsbr<index>`` (the gateway on the
    bridge, no masquerade) with ``ipscheduler-ipam`` as IPAM (its ledger under the node's root)
    and the pod-annotations capability on, as ``examples/cni/10-underlay-bridge.conflist``;
    ``delegate``: the IPAM of pods of other schedulers (``ipam.delegate``)."""
    ipam: dict[str, Any] = {
        "type": "ipscheduler-ipam",
        "kubeconfig": str(ipam_kubeconfig),
        "nodeName": layout.name,
        "dataDir": str(layout.ledger),
    }
    if delegate is not None:
        ipam["delegate"] = delegate
    return {
        "cniVersion": "1.1.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge,
                "isGateway": True,
                "ipMasq": False,
                "capabilities": {"io.kubernetes.cri.pod-annotations": True},
                "ipam": ipam,
            }
        ],
    }


def multus_conflist(layout: Layout, kubeconfig: Path, cluster_network: dict[str, Any]) -> dict[str, Any]:
    """A Multus node's CNI network: Multus' thin plugin (``multus``, on one of ``cni_bin``)
    with ``kubeconfig`` (``get`` on pods and NetworkAttachmentDefinitions, ``update`` on
    ``pods/status`` for its network-status annotation) and ``cluster_network`` (the node's own
    :func:`conflist`: the bridge with ``ipscheduler-ipam``, eth0) as its one delegate, and
    everything it keeps under the node's root: its ``cniDir`` and log
    (:attr:`Layout.multus_dir`); its ``binDir`` is the node's first CNI folder (the reference
    plugins), not ``/opt/cni/bin``. The networks a pod selects (``k8s.v1.cni.cncf.io/networks``)
    are NetworkAttachmentDefinitions.

    ``delegates``, not ``clusterNetwork`` naming :data:`CONFLIST`'s path: Multus v4.2.3 loads a
    ``.conflist`` file through libcni's typed plugin configuration and re-marshals it
    (``LoadDelegateNetConfFromConfList``), which keeps only the standard keys (``type``,
    ``ipam.type``...), and STATUS, CHECK and DEL run on those bytes: the bridge plugin without
    its bridge, ``ipscheduler-ipam`` without its kubeconfig (STATUS fails, the node stays
    NotReady). A delegate object is passed on as it is."""
    return {
        "cniVersion": "1.1.0",
        "name": "multus-cni-network",
        "plugins": [
            {
                "type": "multus",
                "kubeconfig": str(kubeconfig),
                "delegates": [cluster_network],
                "confDir": str(layout.netd),
                "cniDir": str(layout.multus_dir),
                "binDir": str(layout.cni_bin[0]),
                "logFile": str(layout.multus_dir / "multus.log"),
                "logLevel": "verbose",
            }
        ],
    }


def kubelet_config(layout: Layout) -> dict[str, Any]:
    """The KubeletConfiguration: listens on the node IP (``port``) and 127.0.0.1 (healthz),
    x509 (the dev CA) and webhook authentication, webhook authorization, cgroupfs under the
    node's own cgroup root, pod logs under the node's root, image GC and disk eviction out of
    the way (the imported images cannot be pulled again; a dev machine's disk may be full)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": layout.node_ip,
        "port": layout.ports["kubelet"],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": layout.ports["kubelet_healthz"],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "podLogsDirectory": str(layout.pod_logs),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "10s",
        "syncFrequency": "10s",
        "registerNode": True,
        "resolvConf": "/etc/resolv.conf" if Path("/etc/resolv.conf").exists() else "",
    }


def commands(layout: Layout, kubeconfig: Path) -> dict[str, list[str]]:
    """``{"containerd": [...], "kubelet": [...]}`` for the node (files written by :func:`write_files`)."""
    return {
        "containerd": [str(layout.bindir / "containerd"), f"--config={layout.root / 'containerd.toml'}"],
        "kubelet": [
            str(layout.bindir / "kubelet"),
            f"--config={layout.root / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={layout.root / 'kubelet'}",
            f"--cert-dir={layout.root / 'kubelet-pki'}",
            f"--hostname-override={layout.name}",
            f"--node-ip={layout.node_ip}",
            f"--node-labels={LABEL}=true,type=real",
            f"--register-with-taints={LABEL}=true:NoSchedule",
            "--v=1",
        ],
    }


def process_env(layout: Layout) -> dict[str, str]:
    """The environment of containerd and the kubelet: the node's binaries first on PATH
    (containerd finds ``containerd-shim-runc-v2`` there)."""
    return {
        **os.environ,
        "PATH": f"{layout.bindir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}",
    }


def write_files(
    layout: Layout,
    ipam_kubeconfig: Path,
    delegate: dict[str, Any] | None = None,
    multus_kubeconfig: Path | None = None,
) -> None:
    """Write the node's containerd, kubelet and CNI configuration under its root (``delegate``:
    see :func:`conflist`; ``multus_kubeconfig``: a Multus node, :func:`multus_conflist` beside
    the node's own conflist)."""
    for sub in ("containerd", "kubelet", "kubelet-pki", "net.d", "pod-logs"):
        (layout.root / sub).mkdir(parents=True, exist_ok=True)
    layout.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    (layout.root / "containerd.toml").write_text(containerd_config(layout))
    (layout.root / "kubelet.yaml").write_text(json.dumps(kubelet_config(layout), indent=2) + "\n")
    network = conflist(layout, ipam_kubeconfig, delegate)
    (layout.netd / CONFLIST).write_text(json.dumps(network, indent=2) + "\n")
    if multus_kubeconfig is not None:
        layout.multus_dir.mkdir(parents=True, exist_ok=True)
        (layout.netd / MULTUS_CONFLIST).write_text(
            json.dumps(multus_conflist(layout, multus_kubeconfig, network), indent=2) + "\n"
        )


# -- host setup -------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DevclusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def setup_bridge(layout: Layout) -> None:
    """Create ``ipsbr<index>`` with the node IP (/24) and bring it up (idempotent)."""
    if not Path(f"/sys/class/net/{layout.bridge}").exists():
        _ip("link", "add", layout.bridge, "type", "bridge")
    addr = f"{layout.node_ip}/24"
    if addr not in _ip("-o", "addr", "show", "dev", layout.bridge).stdout:
        _ip("addr", "add", addr, "dev", layout.bridge)
    _ip("link", "set", layout.bridge, "up")


NETNS_DIR = Path("/run/netns")


def ensure_netns_dir() -> None:
    """Make ``/run/netns`` a shared mount point before containerd puts a pod's netns there, as
    ``ip netns add`` does the first time it runs (a bind mount of the folder on itself). Were
    containerd first, a later ``ip netns add`` would bind the folder over containerd's netns
    mounts, and containerd could no longer remove them ("unlinkat ...: device or resource busy").
    Under :func:`host_lock`: two processes checking at once would stack two bind mounts, and a
    namespace mounted under the lower one is hidden."""
    with host_lock():
        NETNS_DIR.mkdir(parents=True, exist_ok=True)
        points = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
        if str(NETNS_DIR) not in points:
            subprocess.run(
                ["mount", "--bind", str(NETNS_DIR), str(NETNS_DIR)], capture_output=True, check=True
            )
        subprocess.run(["mount", "--make-shared", str(NETNS_DIR)], capture_output=True, check=True)


def cgroup_mounts() -> list[Path]:
    """Every cgroup (v1) and cgroup2 mount point of this host, from /proc/self/mountinfo."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            mounts.append(Path(fields[4]))
    return mounts


def setup_cgroups(layout: Layout) -> None:
    """Create the kubelet's cgroup root in every hierarchy (the kubelet requires it to exist);
    cpuset gets its parent's cpus and mems, as a v1 cpuset cgroup needs before it takes tasks."""
    for mount in cgroup_mounts():
        path = mount / layout.cgroup.lstrip("/")
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            own, parent = path / knob, mount / knob
            if own.exists() and parent.exists() and not own.read_text().strip():
                own.write_text(parent.read_text())


def _cgroup_dirs(layout: Layout) -> list[Path]:
    """The node's cgroup folders in every hierarchy, deepest first."""
    found: list[Path] = []
    for mount in cgroup_mounts():
        top = mount / layout.cgroup.lstrip("/")
        if top.is_dir():
            found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def kill_cgroup_processes(layout: Layout) -> int:
    """SIGKILL every process in the node's cgroups (containers a dead shim left); returns how many."""
    pids: set[int] = set()
    for d in _cgroup_dirs(layout):
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def kill_shims(layout: Layout) -> None:
    """SIGKILL the runc shims of this node's containerd (their command line names its socket)."""
    needle = str(layout.socket).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and needle in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _our_netns(layout: Layout) -> list[str]:
    """Network namespaces (``/var/run/netns``) whose interface's peer is on the node's bridge."""
    ours: list[str] = []
    netns_dir = Path("/var/run/netns")
    if not netns_dir.is_dir():
        return ours
    bridge_ports: set[int] = set()
    brif = Path(f"/sys/class/net/{layout.bridge}/brif")
    if brif.is_dir():
        for port in brif.iterdir():
            with contextlib.suppress(OSError, ValueError):
                bridge_ports.add(int(Path(f"/sys/class/net/{port.name}/ifindex").read_text()))
    if not bridge_ports:
        return ours
    for ns in netns_dir.iterdir():
        out = _ip("-n", ns.name, "-o", "link", check=False).stdout
        for line in out.splitlines():
            # "2: eth0@if17: ..." -> the peer's ifindex on the host is 17
            name = line.split(":", 2)[1].strip()
            if "@if" in name and int(name.rsplit("@if", 1)[1]) in bridge_ports:
                ours.append(ns.name)
                break
    return ours


def teardown_host(layout: Layout) -> None:
    """Undo everything a stopped node left on the host: processes in its cgroups and its shims,
    mounts under its root, its pods' network namespaces (by their veth on its bridge), the
    bridge, its cgroups and the kubelet's ``/var/log/containers`` links into its pod logs.
    Safe to run twice; the node's processes must be stopped first."""
    kill_shims(layout)
    for _ in range(50):
        if not kill_cgroup_processes(layout):
            break
        time.sleep(0.1)
    for ns in _our_netns(layout):
        _ip("netns", "del", ns, check=False)
    for point in _mounts_under(layout.root):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    _ip("link", "del", layout.bridge, check=False)
    for d in _cgroup_dirs(layout):
        for _ in range(20):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)
        else:
            log(f"cgroup {d} could not be removed")
    # Host-wide folders (containerd's shim sockets, the nodes' roots): removed once empty.
    for folder in (Path("/run/containerd/s"), Path("/run/containerd")):
        with contextlib.suppress(OSError):
            folder.rmdir()
    links = Path("/var/log/containers")
    if links.is_dir():
        prefix = str(layout.pod_logs) + "/"
        for link in links.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(prefix):
                    link.unlink()


def power_off(layout: Layout, netns: list[Path]) -> None:
    """What a reboot leaves of the node, with its kubelet and containerd already stopped: every
    container process and shim killed, the runtime's mounts and its state on tmpfs (containerd's
    ``state``, runc's root) gone, and the pods' network namespaces ``netns`` (from
    :func:`sandbox_netns`, read before containerd stopped) gone without any CNI DEL; what lives
    on disk stays (containerd's root, the kubelet's, ``ipscheduler-ipam``'s ledger)."""
    kill_shims(layout)
    for _ in range(50):
        if not kill_cgroup_processes(layout):
            break
        time.sleep(0.1)
    runtime = (layout.root / "containerd" / "state", layout.root / "containerd" / "runc")
    for point in _mounts_under(layout.root):
        if any(point.startswith(f"{d}/") for d in runtime) or "/kubelet/pods/" in point:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    remove_netns(netns)
    for folder in runtime:
        shutil.rmtree(folder, ignore_errors=True)


# -- certificates -----------------------------------------------------------------


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DevclusterError(f"openssl {args[0]} failed: {proc.stderr.strip()[-300:]}")


def make_ca(pki: Path) -> None:
    """The dev cluster's client CA (``pki/ca.crt``, ``ca.key``): kube-apiserver's
    ``--client-ca-file``, the kubelets' ``clientCAFile``."""
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
        "-subj", "/CN=ipscheduler-devcluster-ca",
        "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"),
    )  # fmt: skip


def client_cert(pki: Path, name: str, user: str, groups: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``groups``, signed by the dev CA; (cert, key)."""
    key, csr, crt = pki / f"{name}.key", pki / f"{name}.csr", pki / f"{name}.crt"
    subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
    _openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        subject,
        "-keyout",
        str(key),
        "-out",
        str(csr),
    )
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey", str(pki / "ca.key"),
        "-CAcreateserial", "-sha256", "-days", "3650", "-out", str(crt),
    )  # fmt: skip
    csr.unlink()
    return crt, key


def cert_kubeconfig(path: Path, server: str, cert: Path, key: Path, user: str) -> Path:
    """A kubeconfig (JSON) for ``server`` authenticating with a client certificate."""
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": user}}],
        "current-context": "devcluster",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    path.chmod(0o600)
    return path


def import_images(layout: Layout, images: Path) -> None:
    """Import ``pause.tar`` and ``busybox.tar`` (OCI archives) into the node's containerd, in
    the CRI's namespace ``k8s.io``, as :data:`PAUSE_IMAGE` and :data:`BUSYBOX_IMAGE`."""
    for tar in ("pause.tar", "busybox.tar"):
        proc = subprocess.run(
            [str(layout.bindir / "ctr"), "--address", str(layout.socket), "-n", "k8s.io", "images", "import",
             "--local", str(images / tar)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise DevclusterError(
                f"ctr images import {tar} into {layout.name} failed: {proc.stderr.strip()[-400:]}"
            )
    names = subprocess.run(
        [str(layout.bindir / "ctr"), "--address", str(layout.socket), "-n", "k8s.io", "images", "ls", "-q"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    for want in (PAUSE_IMAGE, BUSYBOX_IMAGE):
        if want not in names:
            raise DevclusterError(f"{want} not in {layout.name}'s containerd after import (has {names})")


def sandbox_netns(layout: Layout) -> list[Path]:
    """The network namespace files of every pod sandbox the node's containerd knows (from
    ``crictl inspectp``); empty if containerd does not answer."""
    try:
        ids = subprocess.run(
            [*crictl(layout), "--timeout", "10s", "pods", "-q"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        ).stdout.split()
        paths: list[Path] = []
        for sandbox in ids:
            out = subprocess.run(
                [*crictl(layout), "--timeout", "10s", "inspectp", "-o", "json", sandbox],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            ).stdout
            with contextlib.suppress(ValueError, KeyError, TypeError):
                spec = json.loads(out)["info"]["runtimeSpec"]
                paths += [
                    Path(n["path"])
                    for n in spec["linux"]["namespaces"]
                    if n["type"] == "network" and n.get("path")
                ]
        return paths
    except (OSError, subprocess.TimeoutExpired):
        return []


def remove_netns(paths: list[Path]) -> None:
    """Unmount and remove network namespace files that are still there."""
    for path in paths:
        if path.exists():
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
            with contextlib.suppress(OSError):
                path.unlink()


def crictl(layout: Layout) -> list[str]:
    """``crictl`` pointed at the node's containerd (append a subcommand)."""
    return [str(layout.bindir / "crictl"), "--runtime-endpoint", f"unix://{layout.socket}"]


def remove_pods(layout: Layout) -> None:
    """Stop and remove every pod sandbox through the CRI (``crictl rmp -af``): containerd runs
    CNI DEL and deletes each pod's network namespace. Errors are logged, not raised."""
    try:
        proc = subprocess.run(
            [*crictl(layout), "--timeout", "30s", "rmp", "--all", "--force"],
            capture_output=True,
            text=True,
            check=False,
            timeout=180,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"crictl rmp on {layout.name}: {e}")
        return
    if proc.returncode != 0:
        log(f"crictl rmp on {layout.name}: {proc.stderr.strip()[-300:]}")
