"""deploy/'s node installer (cni/install.sh) against a real API server.

The DaemonSet's own RBAC manifests are applied, a token of its ServiceAccount
is laid out the way the kubelet projects it, and the script runs with host
directories in a temporary folder: the plugin lands in the CNI bin directory
and the kubeconfig it writes may ``get`` pods, namespaces and NodeIPPools and nothing else.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helpers import build_cni_plugin
from tests.kube import Kubectl, wait_for

ROOT = Path(__file__).resolve().parents[2]
INSTALLER = ROOT / "cni" / "install.sh"
RBAC = [ROOT / "deploy" / f for f in ("07-namespace-node.yaml", "08-cni-serviceaccount.yaml")] + [
    ROOT / "deploy" / f for f in ("09-cni-clusterrole.yaml", "10-cni-clusterrolebinding.yaml")
]


@pytest.fixture(scope="module")
def rbac(kubectl: Kubectl, crd: None) -> Iterator[None]:
    """deploy/'s namespace, ServiceAccount, ClusterRole and binding for the plugin."""
    for f in RBAC:
        kubectl("apply", "-f", str(f))
    yield
    # Waiting: the namespace is deploy/'s, which a later module of this worker creates again.
    for f in reversed(RBAC):
        kubectl.run("delete", "-f", str(f), "--ignore-not-found", "--wait=true", "--timeout=90s", check=False)


def _token(kubectl: Kubectl) -> str:
    return kubectl("create", "token", "ipscheduler-ipam", "-n", "ipscheduler-node", "--duration=1h").strip()


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin as the image carries it, built once for the module (the tests only read it)."""
    return build_cni_plugin(tmp_path_factory.mktemp("image") / "ipscheduler-ipam")


@pytest.fixture
def node(cluster: Any, kubectl: Kubectl, rbac: None, plugin: Path, tmp_path: Path) -> dict[str, str]:
    """A fake node: the projected ServiceAccount volume, the host's CNI directories, and the
    environment the kubelet gives the installer."""
    devcluster_root = Path(cluster.root)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    admin = yaml.safe_load(kubectl.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    # The API server's self-signed serving certificate with its CA, which
    # kube-controller-manager also publishes to pods as ca.crt (--root-ca-file).
    (sa / "ca.crt").write_bytes((devcluster_root / "pki" / "apiserver.crt").read_bytes())
    (sa / "namespace").write_text("ipscheduler-node")
    (sa / "token").write_text(_token(kubectl))
    for d in ("opt/cni/bin", "etc/cni/net.d"):
        (tmp_path / "host" / d).mkdir(parents=True)
    server = urllib.parse.urlsplit(cluster["server"])
    return {
        **os.environ,
        "SA_DIR": str(sa),
        "SOURCE_BINARY": str(plugin),
        "CNI_BIN_DIR": str(tmp_path / "host/opt/cni/bin"),
        "CNI_NET_DIR": str(tmp_path / "host/etc/cni/net.d"),
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
    }


def _install(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(INSTALLER), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _kubeconfig(env: dict[str, str]) -> Path:
    return Path(env["CNI_NET_DIR"]) / "ipscheduler-ipam.kubeconfig"


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("get", "pods", True),
        ("get", "nodeippools.ipscheduler.io", True),
        ("get", "namespaces", True),
        ("list", "namespaces", False),
        ("list", "pods", False),
        ("watch", "pods", False),
        ("create", "pods", False),
        ("list", "nodeippools.ipscheduler.io", False),
        ("update", "nodeippools.ipscheduler.io/status", False),
        ("get", "nodes", False),
        ("get", "secrets", False),
    ],
    ids=str,
)
def test_the_written_kubeconfig_may_only_get_pods_namespaces_and_pools(
    node: dict[str, str], verb: str, resource: str, allowed: bool
) -> None:
    run = _install(node, "--once")
    assert run.returncode == 0, run.stderr
    kc = _kubeconfig(node)
    assert stat.S_IMODE(kc.stat().st_mode) == 0o600
    installed = Path(node["CNI_BIN_DIR"]) / "ipscheduler-ipam"
    assert installed.read_bytes() == Path(node["SOURCE_BINARY"]).read_bytes()
    assert stat.S_IMODE(installed.stat().st_mode) == 0o755
    version = subprocess.run(
        [str(installed)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, text=True, check=False
    )
    assert '"1.1.0"' in version.stdout, version
    can = subprocess.run(
        ["kubectl", "--kubeconfig", str(kc), "auth", "can-i", verb, resource, "--all-namespaces"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert can.stdout.strip() == ("yes" if allowed else "no"), can


def test_a_rotated_token_is_written_and_sigterm_ends_the_installer(
    kubectl: Kubectl, node: dict[str, str]
) -> None:
    proc = subprocess.Popen(
        ["sh", str(INSTALLER)],
        env={**node, "REFRESH_SECONDS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kc = _kubeconfig(node)
        first = wait_for("kubeconfig written", lambda: kc.exists() and kc.read_text(), timeout=30)
        rotated = _token(kubectl)
        (Path(node["SA_DIR"]) / "token").write_text(rotated)
        wait_for("the rotated token written", lambda: rotated in kc.read_text(), timeout=30)
        assert first != kc.read_text()
        assert stat.S_IMODE(kc.stat().st_mode) == 0o600
        whoami = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                str(kc),
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert whoami.stdout == "system:serviceaccount:ipscheduler-node:ipscheduler-ipam", whoami
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    leftovers = [p.name for p in Path(node["CNI_NET_DIR"]).iterdir() if p.name.startswith(".")]
    assert leftovers == []  # temporary files renamed into place, none left behind


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("no-token", "no ServiceAccount token at"),
        ("no-host-bin", "CNI bin directory"),
        ("no-service-host", "KUBERNETES_SERVICE_HOST"),
        ("bad-refresh", "REFRESH_SECONDS must be a whole number"),
    ],
    ids=["no-token", "no-host-bin", "no-service-host", "bad-refresh"],
)
def test_a_broken_node_is_an_error_that_says_what_is_missing(
    node: dict[str, str], change: str, message: str
) -> None:
    env = dict(node)
    if change == "no-token":
        (Path(env["SA_DIR"]) / "token").unlink()
    elif change == "no-host-bin":
        env["CNI_BIN_DIR"] = "/nonexistent/opt/cni/bin"
    elif change == "no-service-host":
        del env["KUBERNETES_SERVICE_HOST"]
    else:
        env["REFRESH_SECONDS"] = "1m"
    run = _install(env, "--once")
    assert run.returncode != 0 and message in run.stderr, run
    assert not _kubeconfig(node).exists() or change == "no-host-bin"
