#!/usr/bin/env python3
"""A real Kubernetes control plane on 127.0.0.1, without Docker.

Runs etcd, kube-apiserver and kube-controller-manager of one pinned Kubernetes
release as plain processes (the way controller-runtime's envtest does), plus
kwok, which simulates kubelets: pods bound to a kwok node become Running and
their deletions complete.

Commands::

    python hack/devcluster.py binaries            # build/locate binaries and CNI tools, print folders
    python hack/devcluster.py up [--dir D] [--nodes N] [--real-nodes R] [--in-cluster]
    python hack/devcluster.py load-images [--dir D] FILE...    # OCI archives into every real node
    python hack/devcluster.py values [--dir D]                 # the Helm values of this cluster
    python hack/devcluster.py add-nodes --count K [--dir D]
    python hack/devcluster.py status [--dir D]
    python hack/devcluster.py stop|start COMPONENT [--dir D]   # e.g. kubelet@real-node-1
    python hack/devcluster.py down [--dir D]

``--real-nodes R`` (root) also starts ``real-node-1..R``: per node a containerd with runc
and a kubelet of the same release, as plain processes (``hack/realnode.py`` says what one
is made of), registered with a client certificate from the cluster's own CA; pods placed
there really run. ``--in-cluster`` (root) also gives pods there the ``kubernetes`` Service,
as in any cluster: an API server address they reach, kube-proxy, and node CNI folders the
chart's installer writes (``hack/incluster.py``).

``up`` is idempotent: on a running cluster it only restarts dead components
and creates missing nodes. It writes ``D/kubeconfig`` (admin, token auth).
``down`` stops exactly the processes it recorded (by pid, checked against
their command line), tears the real nodes down (pod sandboxes, mounts, network
namespaces, bridge, cgroups) and removes ``D``.

Building and locating the binaries is ``hack/binaries.py`` (imported as
``binaries``: ``hack/`` must be on ``sys.path``, as it is when this file runs
as a script); the ``binaries`` command above only calls its ``ensure_binaries``
and ``ensure_cni_tools`` and prints the two folders.

Standard library only (plus ``openssl`` on PATH for key generation, and ``go``
for the first build); it never imports the operator.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import incluster
import realnode
from binaries import (
    K8S_VERSION,
    DevclusterError,
    apt_install,
    ensure_binaries,
    ensure_cni_tools,
    ensure_kube_proxy,
    ensure_multus,
    ensure_node_binaries,
    ensure_node_images,
    file_lock,
    log,
)

ZONES = ("zone-a", "zone-b")
DEFAULT_DIR = ".devcluster"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
NODE_LEASE_SECONDS = 40
"""kwok's node lease duration by default: the kubelet's."""
SERVICE_CIDR = "10.96.0.0/16"
REPO = Path(__file__).resolve().parents[1]
IPAM_USER = "ipscheduler-ipam"
"""The real nodes' CNI plugin's identity (a client certificate): ``get`` on pods, namespaces, NodeIPPools."""
MULTUS_USER = "ipscheduler-multus"
"""A Multus real node's thin plugin's identity (a client certificate): what Multus' own ClusterRole
grants the thin plugin, narrowed: ``get`` on pods and NetworkAttachmentDefinitions, ``update`` on
``pods/status`` (its ``k8s.v1.cni.cncf.io/network-status``), events."""


# --------------------------------------------------------------------------
# API access (stdlib only)
# --------------------------------------------------------------------------


class Api:
    """Minimal JSON client for the dev cluster's kube-apiserver (admin token)."""

    def __init__(self, port: int, token: str) -> None:
        self.base = f"https://127.0.0.1:{port}"
        self.token = token
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
            raw = resp.read()
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            return self.request("GET", "/readyz", timeout=3) == "ok"
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False


# --------------------------------------------------------------------------
# cluster lifecycle
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pid_alive(pid: int, exe: str) -> bool:
    """True if ``pid`` runs (not a zombie) and is the program ``exe``.

    The command line's first word must be ``exe``. While a process is inside
    execve the kernel already closed its close-on-exec fds (so Popen has
    returned) but has not yet set up the new argument area, and
    ``/proc/PID/cmdline`` reads empty; then ``/proc/PID/exe`` (switched
    earlier in execve) decides instead.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    if cmdline:
        return cmdline.split(b"\0")[0].decode(errors="replace") == exe
    try:
        return os.readlink(f"/proc/{pid}/exe") == os.path.realpath(exe)
    except OSError:
        return False


def ensure_cni_plugin(rebuild: bool = False) -> Path:
    """``bin/ipscheduler-ipam`` of the repository, built by ``make cni`` if absent, older than a
    source file of ``cni/`` (a real node must run the plugin as checked out), or if
    ``rebuild``, into a temporary file renamed over it, so that a real node executing the
    plugin meanwhile runs either the old or the new file, never a partial one. Call it under
    :func:`realnode.host_lock` (two builders would race on the rename). Returns its path;
    raises DevclusterError if the build fails."""
    ipam = REPO / "bin" / "ipscheduler-ipam"
    if os.access(ipam, os.X_OK) and not rebuild:
        built = ipam.stat().st_mtime
        sources = [p for p in (REPO / "cni").rglob("*") if p.suffix in (".go", ".mod", ".sum")]
        if all(p.stat().st_mtime <= built for p in sources):
            return ipam
    log("building bin/ipscheduler-ipam (make cni)")
    tmp = ipam.with_name(f".{ipam.name}.{os.getpid()}")
    try:
        proc = subprocess.run(
            ["make", "-C", str(REPO), "cni", f"CNI_OUT={tmp}"], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise DevclusterError(f"make cni failed: {proc.stderr.strip()[-400:]}")
        tmp.replace(ipam)
    finally:
        tmp.unlink(missing_ok=True)
    return ipam


class Cluster:
    """One dev cluster rooted at a directory; state in ``D/state.json``."""

    def __init__(
        self,
        root: Path,
        node_lease_seconds: int = NODE_LEASE_SECONDS,
        apiserver_args: tuple[str, ...] = (),
        in_cluster: bool = False,
    ) -> None:
        """``node_lease_seconds``: kwok's node lease duration for a new cluster (kept in its
        state; kwok renews a lease every quarter of it, so 5000 nodes at the kubelet's 40 s
        renew 500 leases/s). kube-controller-manager's ``--node-monitor-grace-period``
        follows at 5/4 of it (50 s for 40 s, as the defaults). ``apiserver_args``: more
        kube-apiserver flags for a new cluster (kept in its state), e.g.
        ``--watch-cache=false`` so that watches are served by etcd and a compaction makes
        an old resourceVersion answer 410 Gone. ``in_cluster``: a new cluster whose pods
        reach the API server (:mod:`incluster`; root)."""
        self.root = root.resolve()
        self.in_cluster = in_cluster
        self.node_lease_seconds = node_lease_seconds
        self.apiserver_args = apiserver_args
        self.state_file = self.root / "state.json"
        self.kubeconfig = self.root / "kubeconfig"
        self.state: dict[str, Any] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())

    # -- state ---------------------------------------------------------
    def save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.state_file)

    @property
    def api(self) -> Api:
        return Api(self.state["ports"]["apiserver"], self.state["token"])

    def _init_state(self, bindir: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "pki"):
            (self.root / sub).mkdir(exist_ok=True)
        (self.root / "etcd").mkdir(mode=0o700, exist_ok=True)
        token = secrets.token_hex(16)
        (self.root / "tokens.csv").write_text(f'{token},admin,admin-uid,"system:masters"\n')
        key = self.root / "pki" / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        # Client certificates (the kubelets', the API server's to the kubelets, the CNI plugin's)
        # are signed by the cluster's own CA.
        realnode.make_ca(self.root / "pki")
        realnode.client_cert(
            self.root / "pki", "apiserver-kubelet-client", "kube-apiserver", ("system:masters",)
        )
        self.state = {
            "version": K8S_VERSION,
            "bindir": str(bindir),
            "token": token,
            "ports": {
                "etcd": free_port(),
                "etcd_peer": free_port(),
                "apiserver": free_port(),
                "controller_manager": free_port(),
            },
            "pids": {},
            "node_lease_seconds": self.node_lease_seconds,
            "apiserver_args": list(self.apiserver_args),
        }
        if self.in_cluster:
            with realnode.host_lock():
                self.state["api_index"] = incluster.add_api_address()
            self.state["ports"].update(kube_proxy_healthz=free_port(), kube_proxy_metrics=free_port())
            for folder in incluster.node_cni(self.root):
                folder.mkdir(parents=True, exist_ok=True)
        self.save()
        self._write_kubeconfig()

    def _write_kubeconfig(self) -> None:
        port = self.state["ports"]["apiserver"]
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "devcluster",
                    "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.state["token"]}}],
            "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "admin"}}],
            "current-context": "devcluster",
        }
        # JSON is valid YAML: kubectl, kopf and kubernetes-asyncio all read it.
        self.kubeconfig.write_text(json.dumps(cfg, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    # -- components ----------------------------------------------------
    def _commands(self) -> dict[str, list[str]]:
        b = Path(self.state["bindir"])
        p = self.state["ports"]
        r = self.root
        key = str(r / "pki" / "sa.key")
        kc = str(self.kubeconfig)
        lease = int(self.state.get("node_lease_seconds", NODE_LEASE_SECONDS))
        return {
            "etcd": [
                str(b / "etcd"),
                "--name=default",
                f"--data-dir={r / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--advertise-client-urls=http://127.0.0.1:{p['etcd']}",
                f"--listen-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p['etcd_peer']}",
                f"--initial-cluster=default=http://127.0.0.1:{p['etcd_peer']}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
            "kube-apiserver": [
                str(b / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                f"--cert-dir={r / 'pki'}",
                f"--secure-port={p['apiserver']}",
                *(
                    (
                        "--bind-address=0.0.0.0",
                        f"--advertise-address={incluster.api_address(self.state['api_index'])}",
                    )
                    if "api_index" in self.state
                    else ("--bind-address=127.0.0.1", "--advertise-address=127.0.0.1")
                ),
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--token-auth-file={r / 'tokens.csv'}",
                f"--client-ca-file={r / 'pki' / 'ca.crt'}",
                f"--kubelet-client-certificate={r / 'pki' / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={r / 'pki' / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                "--event-ttl=1h",
                "--v=1",
                *self.state.get("apiserver_args", ()),
            ],
            "kube-controller-manager": [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['controller_manager']}",
                f"--cert-dir={r / 'pki' / 'kcm'}",
                f"--service-account-private-key-file={key}",
                f"--root-ca-file={r / 'pki' / 'apiserver.crt'}",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-replicaset-syncs=10",
                "--concurrent-deployment-syncs=10",
                f"--node-monitor-grace-period={lease * 5 // 4}s",
                "--v=1",
            ],
            "kwok": [
                str(b / "kwok"),
                f"--kubeconfig={kc}",
                f"--config={r / 'kwok.yaml'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                "--manage-nodes-with-label-selector=",
                "--disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom",
                "--disregard-status-with-label-selector=",
                "--cidr=10.244.0.1/16",
                "--node-ip=10.0.0.1",
                f"--node-lease-duration-seconds={lease}",
            ],
        }

    ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok")

    def _start(self, name: str) -> None:
        if "@" in name:  # containerd@real-node-1, kubelet@real-node-1
            component, node = name.split("@", 1)
            layout = self.real_layout(node)
            cmd = realnode.commands(layout, layout.root / "kubeconfig")[component]
            self._spawn(name, cmd, realnode.process_env(layout))
            return
        if name == "kube-scheduler":  # in-cluster clusters: the default scheduler, as any cluster has
            self._spawn(name, self._kube_scheduler_command(name), None)
            return
        if name == "kube-proxy":
            nodes = sorted(self.state.get("real_nodes", {}))
            if not nodes:
                raise DevclusterError("kube-proxy runs beside the real nodes: start one first")
            apt_install("nftables", "nft", "kube-proxy's nftables mode runs nft")
            incluster.claim_kube_proxy(self.root, lambda owner: Cluster(owner).alive("kube-proxy"))
            p = self.state["ports"]
            config = self.root / "kube-proxy.yaml"
            config.write_text(
                json.dumps(
                    incluster.kube_proxy_config(
                        self.kubeconfig, nodes[0], p["kube_proxy_healthz"], p["kube_proxy_metrics"]
                    )
                )
            )
            self._spawn(name, [str(ensure_kube_proxy()), f"--config={config}", "--v=1"], None)
            return
        if name == "kwok":
            # kwok insists on its config file; an empty configuration keeps its default stages
            # (node heartbeat, pods Running on bind, deletions completed).
            (self.root / "kwok.yaml").write_text(
                "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions: {}\n"
            )
        self._spawn(name, self._commands()[name], None)

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None) -> None:
        with open(self.root / "logs" / f"{name}.log", "ab") as logf:
            proc = subprocess.Popen(
                cmd,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=self.root,
                env=env,
            )
        self._procs[name] = proc
        self.state["pids"][name] = {"pid": proc.pid, "exe": cmd[0]}
        self.save()

    def exit_status(self, name: str) -> str:
        """How a component started by this object ended: 'exit code N' or 'killed by SIGX'."""
        proc = self._procs.get(name)
        rc = proc.poll() if proc else None
        if rc is None:
            return "exit status unknown"
        if rc < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-rc).name}"
            return f"killed by signal {-rc}"
        return f"exit code {rc}"

    def _disk_note(self) -> str:
        free = shutil.disk_usage(self.root).free
        return f"{free / 2**30:.1f} GiB free in {self.root}"

    def alive(self, name: str) -> bool:
        """Is component ``name`` running? Our own child: by its exit status; else by its pid."""
        info = self.state.get("pids", {}).get(name)
        if not info:
            return False
        proc = self._procs.get(name)
        if proc is not None and proc.pid == info["pid"]:
            return proc.poll() is None
        return pid_alive(info["pid"], info["exe"])

    def _wait(self, what: str, check: Any, timeout: float, component: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if component and not self.alive(component):
                tail = self._log_tail(component) or "(empty)\n"
                raise DevclusterError(
                    f"{component} exited while waiting for {what} ({self.exit_status(component)}, "
                    f"{self._disk_note()}); log {self.root / 'logs' / (component + '.log')} tail:\n{tail}"
                )
            time.sleep(0.2)
        raise DevclusterError(f"timed out after {timeout:.0f}s waiting for {what}")

    def _log_tail(self, name: str, n: int = 20) -> str:
        path = self.root / "logs" / f"{name}.log"
        try:
            return "".join(path.read_text(errors="replace").splitlines(True)[-n:])
        except OSError:
            return "(no log)"

    def _etcd_ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.state['ports']['etcd']}/health", timeout=2
            ) as r:
                return bool(json.loads(r.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.state['ports']['etcd']}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            return dict(json.loads(r.read() or b"{}"))

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (etcd's JSON gateway), as
        kube-apiserver does every 5 minutes: a watch from an older resourceVersion that
        reaches etcd then answers 410 Gone. Returns the revision compacted to."""
        revision = int(self._etcd_post("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _default_sa(self) -> bool:
        try:
            self.api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return True
        except (OSError, urllib.error.URLError):
            return False

    def start_component(self, name: str) -> None:
        """Start one component (if not running) and wait until it serves."""
        if self.alive(name):
            return
        self._start(name)
        if name == "etcd":
            try:
                self._wait("etcd /health", self._etcd_ready, 60, name)
            except DevclusterError as e:
                if self.state["pids"].get("kube-apiserver"):
                    raise
                # Nothing depends on etcd's ports yet: one more try on fresh ports and an
                # empty data dir, so a port race or an interrupted first start heals itself.
                log(f"{e}\nretrying etcd once on fresh ports")
                self.stop_component(name)
                shutil.rmtree(self.root / "etcd", ignore_errors=True)
                (self.root / "etcd").mkdir(mode=0o700)
                self.state["ports"]["etcd"] = free_port()
                self.state["ports"]["etcd_peer"] = free_port()
                self._start(name)
                self._wait("etcd /health", self._etcd_ready, 60, name)
        elif name == "kube-apiserver":
            self._wait("kube-apiserver /readyz", self.api.ready, 120, name)
        elif name == "kube-controller-manager":
            self._wait("the default ServiceAccount (controller-manager)", self._default_sa, 120, name)
        elif name == "kube-proxy":
            port = self.state["ports"]["kube_proxy_healthz"]
            self._wait("kube-proxy /healthz", lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), 120, name)
        elif name.startswith("containerd@"):
            layout = self.real_layout(name.split("@", 1)[1])
            self._wait(f"{name} serving CRI", lambda: _crictl_ok(layout), 60, name)
        elif name.startswith("kubelet@"):
            port = self.state["real_nodes"][name.split("@", 1)[1]]["ports"]["kubelet_healthz"]
            self._wait(f"{name} /healthz", lambda: _http_ok(f"http://127.0.0.1:{port}/healthz"), 120, name)

    def stop_component(self, name: str, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` (default SIGTERM) to component ``name`` (SIGKILL after ``timeout`` s)
        and wait until it is gone. ``sig=signal.SIGKILL`` is a crash: open streams are cut."""
        info = self.state.get("pids", {}).get(name)
        if not info or not self.alive(name):
            return
        pid = info["pid"]
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive(name):
            time.sleep(0.1)
        if self.alive(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self.alive(name):
                time.sleep(0.05)

    def up(self, nodes: int, real_nodes: int = 0) -> None:
        """Start (or repair) the cluster and make sure ``nodes`` kwok nodes and ``real_nodes``
        real nodes (:meth:`start_real_node`) exist and are Ready."""
        bindir = ensure_binaries()
        with file_lock(self.root.parent / f".{self.root.name}.lock"):
            if not self.state:
                self._init_state(bindir)
            for name in self.ORDER:
                self.start_component(name)
            if "api_index" in self.state:
                self.start_component("kube-scheduler")
            self.ensure_nodes(nodes)
            for i in range(1, real_nodes + 1):
                self.start_real_node(f"{realnode.PREFIX}{i}")
            if "api_index" in self.state and self.state.get("real_nodes"):
                self.start_component("kube-proxy")
        log(f"cluster ready: kubectl --kubeconfig {self.kubeconfig} get nodes")

    def down(self) -> None:
        """Stop every process this cluster recorded, tear its real nodes down to the last mount,
        network namespace, bridge and cgroup, and remove its directory."""
        if self.state:
            if "kube-proxy" in self.state.get("pids", {}):
                self.stop_component("kube-proxy")
                incluster.release_kube_proxy(self.root, ensure_kube_proxy())
            self.stop_component("kube-scheduler")
            for node in list(self.state.get("real_nodes", {})):
                self.stop_real_node(node)
            for name in reversed(self.ORDER):
                self.stop_component(name)
            if "api_index" in self.state:
                incluster.remove_api_address(int(self.state["api_index"]))
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    # -- real nodes (containerd + runc + kubelet) ------------------------------
    def real_layout(self, name: str) -> realnode.Layout:
        """The :class:`realnode.Layout` of real node ``name`` (recorded by :meth:`start_real_node`)."""
        info = self.state["real_nodes"][name]
        return realnode.Layout(
            name=name,
            index=int(info["index"]),
            root=realnode.node_root(int(info["index"])),
            bindir=Path(info["bindir"]),
            cni_bin=tuple(Path(p) for p in info["cni_bin"]),
            pki=self.root / "pki",
            ports=dict(info["ports"]),
        )

    def _client_kubeconfig(self, name: str, user: str, rules: list[dict[str, Any]]) -> Path:
        """``pki/<name>.kubeconfig``: a client certificate for ``user`` (made once), and the
        ClusterRole ``user`` with ``rules`` bound to it."""
        path = self.root / "pki" / f"{name}.kubeconfig"
        if not path.exists():
            crt, key = realnode.client_cert(self.root / "pki", name, user)
            server = f"https://127.0.0.1:{self.state['ports']['apiserver']}"
            realnode.cert_kubeconfig(path, server, crt, key, user)
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": user},
            "rules": rules,
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }
        for kind, body in (("clusterroles", role), ("clusterrolebindings", binding)):
            with contextlib.suppress(urllib.error.HTTPError):
                self.api.request("POST", f"/apis/rbac.authorization.k8s.io/v1/{kind}", body)
        return path

    def _ipam_kubeconfig(self) -> Path:
        """The CNI plugin's kubeconfig (a client certificate for ``ipscheduler-ipam``), and its RBAC."""
        return self._client_kubeconfig(
            "ipam",
            IPAM_USER,
            [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
                {"apiGroups": ["ipscheduler.io"], "resources": ["nodeippools"], "verbs": ["get"]},
            ],
        )

    def _multus_kubeconfig(self) -> Path:
        """Multus' kubeconfig on a Multus node (a client certificate for :data:`MULTUS_USER`),
        and its RBAC."""
        return self._client_kubeconfig(
            "multus",
            MULTUS_USER,
            [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "update"]},
                {
                    "apiGroups": ["k8s.cni.cncf.io"],
                    "resources": ["network-attachment-definitions"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["", "events.k8s.io"],
                    "resources": ["events"],
                    "verbs": ["create", "patch", "update"],
                },
            ],
        )

    def start_real_node(self, name: str, timeout: float = 180, multus: bool = False) -> realnode.Layout:
        """Start (or repair) real node ``name``: its bridge and cgroup root, containerd with the
        pause and busybox images imported, and a kubelet registered as ``name`` with a client
        certificate of ``system:node:<name>``; returns once the Node is Ready (in-cluster: once
        it is registered; it turns Ready when the chart's node installer has run).

        ``multus`` (a new node; a node being repaired keeps what it was started with): the
        node's CNI is Multus' thin plugin (:func:`binaries.ensure_multus`, on the node's CNI
        path) with the node's own conflist as its cluster network (:func:`realnode.multus_conflist`)
        and a kubeconfig of :data:`MULTUS_USER`; the NetworkAttachmentDefinition CRD is the
        caller's to install. Not on an in-cluster cluster (its node CNI is the chart's).

        Builds the node binaries and images the first time (:func:`binaries.ensure_node_binaries`,
        :func:`binaries.ensure_node_images`) and ``bin/ipscheduler-ipam`` if absent (``make cni``).
        Raises DevclusterError naming a missing prerequisite (root, cgroups, ip, ...)."""
        missing = realnode.prerequisites()
        if missing:
            raise DevclusterError(f"a real node needs {', '.join(missing)}")
        nodes = self.state.setdefault("real_nodes", {})
        in_cluster = "api_index" in self.state
        if name not in nodes:
            if multus and in_cluster:
                raise DevclusterError("a Multus real node on an in-cluster cluster is not supported")
            node_bin = ensure_node_binaries()
            cni_bin = [str(ensure_cni_tools()), str(REPO / "bin")]
            if in_cluster:  # the chart's installer puts ipscheduler-ipam there, not the harness
                cni_bin = [str(incluster.node_cni(self.root)[0]), str(ensure_cni_tools())]
            if multus:
                cni_bin.append(str(ensure_multus().parent))
            with realnode.host_lock():  # the index, the bridge and bin/ are shared by the host
                ensure_cni_plugin()
                index = realnode.free_index(skip={int(n["index"]) for n in nodes.values()})
                nodes[name] = {
                    "index": index,
                    "bindir": str(node_bin),
                    "cni_bin": cni_bin,
                    "ports": {"kubelet": free_port(), "kubelet_healthz": free_port()},
                    "multus": multus,
                }
                self.save()
                realnode.setup_bridge(self.real_layout(name))  # claims the index on the host
        multus = bool(nodes[name].get("multus"))
        layout = self.real_layout(name)
        images = ensure_node_images(layout.bindir)
        realnode.setup_bridge(layout)
        realnode.setup_cgroups(layout)
        realnode.ensure_netns_dir()
        if in_cluster:
            kubeconfig = incluster.node_cni(self.root)[1] / "ipscheduler-ipam.kubeconfig"
            realnode.write_files(layout, kubeconfig, incluster.delegate(layout))
        else:
            multus_kubeconfig = self._multus_kubeconfig() if multus else None
            realnode.write_files(layout, self._ipam_kubeconfig(), multus_kubeconfig=multus_kubeconfig)
        if not (layout.root / "kubeconfig").exists():
            crt, key = realnode.client_cert(
                self.root / "pki", f"node-{name}", f"system:node:{name}", ("system:nodes",)
            )
            server = f"https://127.0.0.1:{self.state['ports']['apiserver']}"
            realnode.cert_kubeconfig(layout.root / "kubeconfig", server, crt, key, f"system:node:{name}")
        self.start_component(f"containerd@{name}")
        realnode.import_images(layout, images)
        self.start_component(f"kubelet@{name}")
        if in_cluster:  # NotReady until the chart's node installer puts the CNI plugin in place
            self._wait(
                f"real node {name} registered", lambda: name in self.node_names(), timeout, f"kubelet@{name}"
            )
        else:
            self._wait(
                f"real node {name} Ready", lambda: name in self.ready_nodes(), timeout, f"kubelet@{name}"
            )
        return layout

    def stop_real_node(self, name: str, delete_node: bool = False) -> None:
        """Stop real node ``name`` and leave nothing of it on the host: the kubelet stops, every
        pod sandbox is removed through the CRI (CNI DEL, network namespace gone), containerd
        stops, then :func:`realnode.teardown_host` and its folder; ``delete_node`` also deletes
        the Node object."""
        if name not in self.state.get("real_nodes", {}):
            return
        layout = self.real_layout(name)
        self.stop_component(f"kubelet@{name}")
        netns: list[Path] = []
        if self.alive(f"containerd@{name}"):
            netns = realnode.sandbox_netns(layout)
            realnode.remove_pods(layout)
        self.stop_component(f"containerd@{name}")
        realnode.remove_netns(netns)
        realnode.teardown_host(layout)
        shutil.rmtree(layout.root, ignore_errors=True)
        with contextlib.suppress(OSError):
            realnode.NODES_DIR.rmdir()  # the last real node on this machine
        if delete_node:
            with contextlib.suppress(urllib.error.HTTPError, OSError):
                self.api.request("DELETE", f"/api/v1/nodes/{name}")
        del self.state["real_nodes"][name]
        for component in ("kubelet", "containerd"):
            self.state["pids"].pop(f"{component}@{name}", None)
        self.save()

    def load_images(self, archives: list[Path]) -> dict[str, list[str]]:
        """Import OCI archives into every real node's containerd (namespace ``k8s.io``);
        returns node → image names imported. Raises DevclusterError without real nodes or
        when an import fails."""
        nodes = sorted(self.state.get("real_nodes", {}))
        if not nodes:
            raise DevclusterError(f"no real node in {self.root}: up --real-nodes N first")
        return {
            node: [name for a in archives for name in incluster.import_archive(self.real_layout(node), a)]
            for node in nodes
        }

    def helm_values(self) -> dict[str, Any]:
        """The Helm values a user of this (in-cluster) cluster passes (:func:`incluster.helm_values`).
        Raises DevclusterError for a cluster started without ``--in-cluster``."""
        if "api_index" not in self.state:
            raise DevclusterError(f"the cluster in {self.root} is not in-cluster: up --in-cluster")
        return incluster.helm_values(self.root)

    def _kube_scheduler_command(
        self,
        name: str,
        qps: int = 50,
        burst: int = 100,
        scheduler_name: str = "default-scheduler",
        extenders: list[dict[str, Any]] | None = None,
    ) -> list[str]:
        """kube-scheduler's command line (its configuration written to ``D/<name>.yaml``)."""
        port = free_port()
        config = self.root / f"{name}.yaml"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(self.kubeconfig), "qps": qps, "burst": burst},
                    "leaderElection": {"leaderElect": False},
                    "profiles": [{"schedulerName": scheduler_name}],
                    **({"extenders": extenders} if extenders else {}),
                }
            )
        )
        cmd = [
            str(Path(self.state["bindir"]) / "kube-scheduler"),
            f"--config={config}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.root / 'pki' / name}",
            "--v=1",
        ]
        return cmd

    # -- kube-scheduler (not started by up) ---------------------------------
    def start_kube_scheduler(
        self,
        name: str = "kube-scheduler",
        qps: int = 50,
        burst: int = 100,
        scheduler_name: str = "default-scheduler",
        extenders: list[dict[str, Any]] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start the real kube-scheduler of the pinned release against this cluster.

        One profile, ``scheduler_name``, no leader election, client QPS/burst as
        given (kube-scheduler ships with 50/100), and ``extenders`` (the
        ``KubeSchedulerConfiguration`` ``extenders`` list) if given. Logs go to
        ``D/logs/<name>.log``; the caller stops the returned process.
        """
        cmd = self._kube_scheduler_command(name, qps, burst, scheduler_name, extenders)
        with open(self.root / "logs" / f"{name}.log", "ab") as logf:
            return subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root
            )

    # -- nodes ---------------------------------------------------------
    def node_names(self) -> list[str]:
        items = self.api.request("GET", "/api/v1/nodes")["items"]
        return [n["metadata"]["name"] for n in items]

    @staticmethod
    def node_manifest(index: int) -> dict[str, Any]:
        name = f"node-{index}"
        res = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": ZONES[(index - 1) % len(ZONES)],
                    "type": "kwok",
                },
            },
            "spec": {},
            "status": {
                "allocatable": res,
                "capacity": res,
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": f"{K8S_VERSION}-kwok",
                },
                "phase": "Running",
            },
        }

    def create_nodes(self, indexes: list[int], timeout: float = 120) -> None:
        for i in indexes:
            try:
                self.api.request("POST", "/api/v1/nodes", self.node_manifest(i))
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    raise DevclusterError(f"creating node-{i}: HTTP {e.code} {e.read()[:300]!r}") from e
        names = {f"node-{i}" for i in indexes}
        self._wait(f"{len(names)} node(s) Ready", lambda: names <= self.ready_nodes(), timeout, "kwok")

    def ready_nodes(self) -> set[str]:
        ready = set()
        for n in self.api.request("GET", "/api/v1/nodes")["items"]:
            for c in n.get("status", {}).get("conditions") or []:
                if c.get("type") == "Ready" and c.get("status") == "True":
                    ready.add(n["metadata"]["name"])
        return ready

    def ensure_nodes(self, count: int) -> None:
        self.create_nodes(list(range(1, count + 1)))

    def add_nodes(self, count: int) -> list[str]:
        existing = [int(m.group(1)) for n in self.node_names() if (m := re.fullmatch(r"node-(\d+)", n))]
        start = max(existing, default=0) + 1
        idx = list(range(start, start + count))
        self.create_nodes(idx)
        return [f"node-{i}" for i in idx]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _crictl_ok(layout: realnode.Layout) -> bool:
    """Does the node's containerd answer on its CRI socket (``crictl version``)?"""
    if not layout.socket.exists():
        return False
    proc = subprocess.run(
        [*realnode.crictl(layout), "--timeout", "2s", "version"], capture_output=True, check=False
    )
    return proc.returncode == 0


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devcluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("binaries", help="obtain the binaries (and the CNI tools) and print their folders")
    p_up = sub.add_parser("up", help="start the control plane (idempotent)")
    p_up.add_argument("--dir", default=DEFAULT_DIR)
    p_up.add_argument("--nodes", type=int, default=3)
    p_up.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        help="also start N real nodes (containerd + runc + kubelet, as root): real-node-1..N",
    )
    p_up.add_argument(
        "--node-lease-seconds",
        type=int,
        default=NODE_LEASE_SECONDS,
        help="kwok node lease duration of a new cluster (renewed every quarter of it)",
    )
    p_up.add_argument(
        "--in-cluster",
        action="store_true",
        help="a new cluster's pods reach the API server (kubernetes Service, kube-proxy; root)",
    )
    p_load = sub.add_parser("load-images", help="import OCI archives into every real node's containerd")
    p_load.add_argument("--dir", default=DEFAULT_DIR)
    p_load.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p_values = sub.add_parser("values", help="print the Helm values of this (--in-cluster) cluster")
    p_values.add_argument("--dir", default=DEFAULT_DIR)
    p_down = sub.add_parser("down", help="stop what up started and remove its state")
    p_down.add_argument("--dir", default=DEFAULT_DIR)
    p_add = sub.add_parser("add-nodes", help="add K more kwok nodes")
    p_add.add_argument("--dir", default=DEFAULT_DIR)
    p_add.add_argument("--count", type=int, required=True)
    p_status = sub.add_parser("status", help="print component pids and the kubeconfig path")
    p_status.add_argument("--dir", default=DEFAULT_DIR)
    for name, helptext in (("stop", "stop one component"), ("start", "start one stopped component")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--dir", default=DEFAULT_DIR)
        p.add_argument(
            "component",
            help=f"one of {', '.join(Cluster.ORDER)}, kubelet@<real node>, containerd@<real node>",
        )
    args = parser.parse_args(argv)
    try:
        if args.cmd == "binaries":
            print(ensure_binaries())
            print(ensure_cni_tools())
            return 0
        cluster = Cluster(
            Path(args.dir),
            getattr(args, "node_lease_seconds", NODE_LEASE_SECONDS),
            in_cluster=getattr(args, "in_cluster", False),
        )
        if args.cmd == "up":
            cluster.up(args.nodes, args.real_nodes)
            print(cluster.kubeconfig)
        elif args.cmd == "down":
            cluster.down()
        elif args.cmd == "load-images":
            for node, names in cluster.load_images(args.files).items():
                print(f"{node}: {', '.join(names)}")
        elif args.cmd == "values":
            print(json.dumps(cluster.helm_values(), indent=2))
        elif args.cmd == "add-nodes":
            if not cluster.state:
                raise DevclusterError(f"no cluster in {cluster.root}: run 'up' first")
            print("\n".join(cluster.add_nodes(args.count)))
        elif args.cmd == "status":
            if not cluster.state:
                print(f"no cluster in {cluster.root}")
                return 1
            for name in cluster.state["pids"]:
                info = cluster.state["pids"].get(name, {})
                state = "running" if cluster.alive(name) else "stopped"
                print(f"{name:25} {state:8} pid={info.get('pid')}")
            print(f"kubeconfig: {cluster.kubeconfig}")
        elif args.cmd in ("stop", "start") and args.component not in cluster.state.get("pids", {}):
            raise DevclusterError(f"no component {args.component!r} in {cluster.root}")
        elif args.cmd == "stop":
            cluster.stop_component(args.component)
        elif args.cmd == "start":
            cluster.start_component(args.component)
    except DevclusterError as e:
        print(f"devcluster: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "devcluster"
    sys.exit(main())
