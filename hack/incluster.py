"""What a dev cluster needs so that clients run *in* it, as pods on its real nodes.

``python hack/devcluster.py up --in-cluster --real-nodes 2`` (root) makes a cluster whose
pods reach the API server through the ``kubernetes`` Service, as in any cluster:

- **An API server address pods reach.** kube-apiserver listens on all addresses and
  advertises ``10.88.0.<n>``, an address of its own on a port-less bridge ``ipsapi<n>`` (``n``:
  free on the host). Pods on the real nodes' bridges reach it through their gateway; it
  never leaves the machine. The ``kubernetes`` Service's endpoint is that address, and the
  API server's own serving certificate names it and the Service's ClusterIP.
- **kube-proxy** of the same release, in nftables mode: the real nodes share this
  machine's network namespace, so one kube-proxy (named after the first real node) serves
  them all. Its rules are one nftables table, ``kube-proxy``, which only one cluster on a
  machine can own: a second in-cluster cluster is refused while the first runs.
- **Node CNI folders an installer can write**: every real node's containerd looks for CNI
  plugins first in the cluster's ``node-cni/bin`` (empty until the chart's node installer
  copies ``ipscheduler-ipam`` there; the reference plugins come after it) and its conflist
  reads the plugin's kubeconfig from ``node-cni/net.d``, where that installer writes it. So
  workload pods get their addresses through what the chart installed, not the harness's copy.
  Pods of other schedulers (the scheduler's own, the installer is on the host network) get
  an address from ``host-local`` through the plugin's ``ipam.delegate``:
  ``10.88.<i>.200-250`` on node ``i``.

``python hack/devcluster.py values`` prints the Helm values a user of such a cluster passes
(:func:`helm_values`) and ``load-images FILE...`` imports OCI archives into every real
node's containerd (:func:`import_archive`).

Standard library only; it never imports the operator.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Any

import realnode
from binaries import DevclusterError

API_LINK_PREFIX = "ipsapi"
API_SUBNET_PREFIX = "10.88.0."
"""The API server's addresses: ``10.88.0.<n>`` on link ``ipsapi<n>`` (the real nodes' bridges
are ``10.88.<i>.0/24`` with ``i`` >= 1)."""
CLUSTER_CIDR = "10.88.0.0/16"
"""Every pod address on the real nodes (kube-proxy's ``clusterCIDR``)."""
DELEGATE_RANGE = (200, 250)
"""The host-local range of pods of other schedulers on node ``i``: ``10.88.<i>.200-250``."""
KUBE_PROXY_OWNER = Path("/run/ipscheduler-kube-proxy")
"""Which dev cluster's kube-proxy owns the machine's ``kube-proxy`` nftables table."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DevclusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def api_link(index: int) -> str:
    """The name of the API server's dummy link ``index``."""
    return f"{API_LINK_PREFIX}{index}"


def api_address(index: int) -> str:
    """The API server's advertised address for ``index``: ``10.88.0.<index>``."""
    return f"{API_SUBNET_PREFIX}{index}"


def add_api_address(skip: set[int] | frozenset[int] = frozenset()) -> int:
    """Create the dummy link ``ipsapi<n>`` with ``10.88.0.<n>/32`` for the first ``n`` (1-254)
    no link on the host has (nor ``skip``); returns ``n``. Raises DevclusterError without
    root or when all are taken. Call under :func:`realnode.host_lock`."""
    if os.geteuid() != 0:
        raise DevclusterError(
            "an in-cluster dev cluster needs root (the API server's address is on a link of its own)"
        )
    links = _ip("-o", "link", "show").stdout
    taken = {int(w[len(API_LINK_PREFIX) :]) for w in links.replace(":", " ").replace("@", " ").split()
             if w.startswith(API_LINK_PREFIX) and w[len(API_LINK_PREFIX):].isdigit()}  # fmt: skip
    for n in range(1, 255):
        if n not in taken and n not in skip:
            _ip("link", "add", api_link(n), "type", "bridge")  # no dummy driver in every kernel
            _ip("addr", "add", f"{api_address(n)}/32", "dev", api_link(n))
            _ip("link", "set", api_link(n), "up")
            return n
    raise DevclusterError("no free API server address 10.88.0.1-254 on this machine")


def remove_api_address(index: int) -> None:
    """Delete the dummy link ``ipsapi<index>`` (and its address); nothing if it is gone."""
    _ip("link", "del", api_link(index), check=False)


def kube_proxy_config(kubeconfig: Path, node: str, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    """The KubeProxyConfiguration: nftables mode, named after real node ``node``, pods in
    :data:`CLUSTER_CIDR`, its endpoints on 127.0.0.1, and conntrack sysctls left alone (a
    shared machine's)."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "nftables",
        "hostnameOverride": node,
        "clusterCIDR": CLUSTER_CIDR,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def claim_kube_proxy(root: Path, alive: Any) -> None:
    """Record that the cluster at ``root`` runs this machine's kube-proxy. ``alive(root)``:
    whether the cluster recorded there still runs it. Raises DevclusterError when another
    live cluster does."""
    with contextlib.suppress(OSError):
        owner = Path(KUBE_PROXY_OWNER.read_text().strip())
        if owner != root and alive(owner):
            raise DevclusterError(
                f"the dev cluster in {owner} runs kube-proxy on this machine: one at a time"
            )
    KUBE_PROXY_OWNER.write_text(f"{root}\n")


def release_kube_proxy(root: Path, kube_proxy: Path | None) -> None:
    """Forget ``root``'s claim and remove kube-proxy's rules (``kube-proxy --cleanup``)."""
    with contextlib.suppress(OSError):
        if Path(KUBE_PROXY_OWNER.read_text().strip()) != root:
            return
        KUBE_PROXY_OWNER.unlink()
    if kube_proxy is not None and kube_proxy.exists():
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False, timeout=60)


def node_cni(root: Path) -> tuple[Path, Path]:
    """The cluster's node CNI folders ``(bin, net.d)`` under ``root``: the chart's installer
    writes the plugin and its kubeconfig there (:func:`helm_values`)."""
    return root / "node-cni" / "bin", root / "node-cni" / "net.d"


def delegate(layout: realnode.Layout) -> dict[str, Any]:
    """The plugin's ``ipam.delegate`` on node ``layout``: host-local on
    :data:`DELEGATE_RANGE` of the node's subnet with a default route through the node, its
    state under the node's root."""
    base = layout.subnet.rsplit(".", 1)[0]
    return {
        "type": "host-local",
        "ranges": [[{"subnet": layout.subnet, "rangeStart": f"{base}.{DELEGATE_RANGE[0]}",
                     "rangeEnd": f"{base}.{DELEGATE_RANGE[1]}", "gateway": layout.node_ip}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": layout.node_ip}],
        "dataDir": str(layout.root / "host-local"),
    }  # fmt: skip


def helm_values(root: Path) -> dict[str, Any]:
    """The Helm values a user of the in-cluster dev cluster at ``root`` passes: the scheduler
    pods on the real nodes (their label and a toleration of their taint), and the node
    installer on, writing into the real nodes' CNI folders."""
    cni_bin, cni_net = node_cni(root)
    return {
        "nodeSelector": {realnode.LABEL: "true"},
        "tolerations": [realnode.TOLERATION],
        "cni": {"enabled": True, "cniBinDir": str(cni_bin), "cniNetDir": str(cni_net)},
    }


def import_archive(layout: realnode.Layout, archive: Path) -> list[str]:
    """Import the OCI archive ``archive`` into node ``layout``'s containerd (namespace
    ``k8s.io``, what the kubelet's CRI uses); returns the image names it now holds from it.
    Raises DevclusterError if ``ctr`` fails."""
    ctr = [str(layout.bindir / "ctr"), "--address", str(layout.socket), "-n", "k8s.io"]
    proc = subprocess.run(
        [*ctr, "images", "import", "--local", str(archive)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if proc.returncode != 0:
        raise DevclusterError(
            f"ctr images import {archive} into {layout.name} failed: {proc.stderr.strip()[-400:]}"
        )
    return [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("unpacking ")]
