"""Pure parts of a real dev node (hack/realnode.py) and its images (hack/binaries.py oci_archive).

Nothing is started: the configuration files are parsed as containerd, the kubelet and CNI
read them, and the OCI archive is read back as ``ctr images import`` reads it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

import binaries
import realnode


@pytest.fixture
def layout(tmp_path: Path) -> realnode.Layout:
    return realnode.Layout(
        name="real-node-1",
        index=3,
        root=realnode.node_root(3),
        bindir=Path("/cache/node-bin"),
        cni_bin=(Path("/cache/cni"), Path("/repo/bin")),
        pki=tmp_path / "pki",
        ports={"kubelet": 20250, "kubelet_healthz": 20248},
    )


def test_the_node_network_follows_its_index(layout: realnode.Layout) -> None:
    assert (layout.bridge, layout.subnet, layout.node_ip) == ("ipsbr3", "10.88.3.0/24", "10.88.3.1")
    assert len(layout.bridge) <= 15  # IFNAMSIZ
    assert layout.cgroup == "/ipscheduler-ipsbr3"


def test_containerd_config_keeps_everything_under_the_node_root(layout: realnode.Layout) -> None:
    cfg = tomllib.loads(realnode.containerd_config(layout, restrict_oom_score_adj=False))
    assert cfg["version"] == 3
    assert cfg["root"].startswith(str(layout.root)) and cfg["state"].startswith(str(layout.root))
    assert cfg["grpc"]["address"] == str(layout.socket) == "/var/lib/ipscheduler/ipsbr3/run/containerd.sock"
    assert cfg["ttrpc"]["address"] == "/var/lib/ipscheduler/ipsbr3/run/containerd.sock.ttrpc"
    assert len(cfg["ttrpc"]["address"]) < 104  # a unix socket path's limit
    assert "io.containerd.nri.v1.nri" in cfg["disabled_plugins"]  # its socket is host-wide
    images = cfg["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == binaries.PAUSE_IMAGE
    runtime = cfg["plugins"]["io.containerd.cri.v1.runtime"]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {
        "BinaryName": "/cache/node-bin/runc",
        "Root": str(layout.root / "containerd" / "runc"),
        "SystemdCgroup": False,  # the kubelet's cgroupfs driver
    }
    assert runtime["cni"]["bin_dirs"] == ["/cache/cni", "/repo/bin"]
    assert runtime["cni"]["conf_dir"] == str(layout.netd)
    assert runtime["restrict_oom_score_adj"] is False


def test_containerd_clamps_oom_scores_where_they_cannot_be_lowered(layout: realnode.Layout) -> None:
    cfg = tomllib.loads(realnode.containerd_config(layout, restrict_oom_score_adj=True))
    assert cfg["plugins"]["io.containerd.cri.v1.runtime"]["restrict_oom_score_adj"] is True


def test_conflist_is_the_bridge_with_our_ipam_and_the_annotations_capability(layout: realnode.Layout) -> None:
    conf = realnode.conflist(layout, Path("/pki/ipam.kubeconfig"))
    (plugin,) = conf["plugins"]
    assert plugin["type"] == "bridge" and plugin["bridge"] == "ipsbr3"
    assert plugin["isGateway"] is True and plugin["ipMasq"] is False
    assert plugin["capabilities"] == {"io.kubernetes.cri.pod-annotations": True}
    assert plugin["ipam"] == {
        "type": "ipscheduler-ipam",
        "kubeconfig": "/pki/ipam.kubeconfig",
        "nodeName": "real-node-1",
        "dataDir": str(layout.root / "ipam-ledger"),
    }


def test_a_multus_node_runs_multus_with_the_node_network_as_its_one_delegate(
    layout: realnode.Layout, tmp_path: Path
) -> None:
    """containerd (``max_conf_num = 1``) loads the first file of ``net.d``: Multus' conflist,
    whose delegate is the node's own network as written beside it (inline: Multus v4.2.3
    re-marshals a ``clusterNetwork`` conflist file without the plugins' own keys)."""
    layout = dataclasses.replace(layout, root=tmp_path / "node")
    realnode.write_files(
        layout, Path("/pki/ipam.kubeconfig"), multus_kubeconfig=Path("/pki/multus.kubeconfig")
    )
    assert sorted(p.name for p in layout.netd.iterdir()) == [realnode.MULTUS_CONFLIST, realnode.CONFLIST]
    node_network = json.loads((layout.netd / realnode.CONFLIST).read_text())
    assert node_network == realnode.conflist(layout, Path("/pki/ipam.kubeconfig"))
    multus = json.loads((layout.netd / realnode.MULTUS_CONFLIST).read_text())
    (plugin,) = multus["plugins"]
    assert plugin["type"] == "multus" and plugin["kubeconfig"] == "/pki/multus.kubeconfig"
    assert plugin["delegates"] == [node_network] and "clusterNetwork" not in plugin
    assert plugin["cniDir"] == str(layout.multus_dir) and layout.multus_dir.is_dir()
    assert plugin["logFile"].startswith(str(layout.root) + "/")
    assert plugin["confDir"] == str(layout.netd)
    assert plugin["binDir"] == "/cache/cni"  # the reference plugins, not the host's /opt/cni/bin


def test_a_node_without_multus_has_its_own_network_only(layout: realnode.Layout, tmp_path: Path) -> None:
    layout = dataclasses.replace(layout, root=tmp_path / "node")
    realnode.write_files(layout, Path("/pki/ipam.kubeconfig"))
    assert [p.name for p in layout.netd.iterdir()] == [realnode.CONFLIST]
    assert not layout.multus_dir.exists()


def test_kubelet_config_and_command_name_the_node_and_its_own_places(layout: realnode.Layout) -> None:
    cfg = realnode.kubelet_config(layout)
    assert (cfg["address"], cfg["port"], cfg["healthzPort"]) == ("10.88.3.1", 20250, 20248)
    assert cfg["readOnlyPort"] == 0 and cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authorization"]["mode"] == "Webhook"
    assert (cfg["cgroupDriver"], cfg["cgroupRoot"]) == ("cgroupfs", "/ipscheduler-ipsbr3")
    assert cfg["containerRuntimeEndpoint"] == f"unix://{layout.socket}"
    assert cfg["podLogsDirectory"] == str(layout.pod_logs)
    cmd = realnode.commands(layout, Path("/k"))["kubelet"]
    assert "--hostname-override=real-node-1" in cmd and "--node-ip=10.88.3.1" in cmd
    assert f"--root-dir={layout.root / 'kubelet'}" in cmd
    assert f"--node-labels={realnode.LABEL}=true,type=real" in cmd
    assert f"--register-with-taints={realnode.LABEL}=true:NoSchedule" in cmd


def _read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_oci_archive_is_a_content_addressed_layout_named_for_containerd(tmp_path: Path) -> None:
    out = tmp_path / "img.tar"
    binaries.oci_archive(
        out, "example.test/tool:1.0", {"bin/tool": b"\x7fELF"}, {"bin/sh": "tool"}, {"Cmd": ["sh"]}
    )
    files = _read_archive(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"] == {
        "io.containerd.image.name": "example.test/tool:1.0",
        "org.opencontainers.image.ref.name": "1.0",
    }
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"] == {"Cmd": ["sh"]} and config["os"] == "linux"
    (layer_desc,) = manifest["layers"]
    layer = files["blobs/sha256/" + layer_desc["digest"].split(":")[1]]
    assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]  # uncompressed: diff ID = digest
    layer_path = tmp_path / "layer.tar"
    layer_path.write_bytes(layer)
    with tarfile.open(layer_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/tool"].mode == 0o755 and members["bin/sh"].linkname == "tool"
    # Deterministic: the same input gives the same bytes, so the same digests.
    again = tmp_path / "again.tar"
    binaries.oci_archive(
        again, "example.test/tool:1.0", {"bin/tool": b"\x7fELF"}, {"bin/sh": "tool"}, {"Cmd": ["sh"]}
    )
    assert again.read_bytes() == out.read_bytes()
