"""hack/bench/running.py, the parts that need no real node: its CNI configuration swap, its
pod bookkeeping and its skip without root."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

import realnode
from bench import running
from ipscheduler.underlayip.models import ANNOTATION_IP


def layout(tmp_path: Path, index: int = 7) -> realnode.Layout:
    return realnode.Layout(
        name="real-node-1",
        index=index,
        root=tmp_path,
        bindir=tmp_path / "bin",
        cni_bin=(),
        pki=tmp_path / "pki",
        ports={},
    )


def test_the_host_local_network_is_the_same_bridge_with_host_local_over_the_layouts_subnet(
    tmp_path: Path,
) -> None:
    node = layout(tmp_path)
    ours = json.dumps(realnode.conflist(node, tmp_path / "ipam.kubeconfig"))
    conf = json.loads(running.host_local_conflist(ours, node, "10.88.7.10", "10.88.7.59"))
    (plugin,) = conf["plugins"]
    assert conf["name"] == realnode.NETWORK_NAME
    assert (plugin["type"], plugin["bridge"], plugin["isGateway"], plugin["ipMasq"]) == (
        "bridge",
        "ipsbr7",
        True,
        False,
    )
    assert "capabilities" not in plugin
    assert plugin["ipam"] == {
        "type": "host-local",
        "ranges": [
            [
                {
                    "subnet": "10.88.7.0/24",
                    "rangeStart": "10.88.7.10",
                    "rangeEnd": "10.88.7.59",
                    "gateway": "10.88.7.1",
                }
            ]
        ],
        "dataDir": str(tmp_path / "host-local"),
    }


def test_write_conflist_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    node = layout(tmp_path)
    node.netd.mkdir()
    (node.netd / realnode.CONFLIST).write_text('{"old": "and longer than the new one"}\n')
    running.write_conflist(node, '{"new": 1}\n')
    assert [p.name for p in node.netd.iterdir()] == [realnode.CONFLIST]
    assert (node.netd / realnode.CONFLIST).read_text() == '{"new": 1}\n'
    assert not list(tmp_path.glob(".*.tmp"))


def pod(name: str, phase: str, ip: str = "", annotated: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {ANNOTATION_IP: annotated} if annotated else {},
        },
        "status": {
            "phase": phase,
            **({"podIP": ip} if ip else {}),
            "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]
            if phase == "Pending"
            else [],
        },
    }


def test_a_pod_counts_as_running_once_it_has_a_pod_ip_and_as_gone_on_deleted() -> None:
    phase = running.RunningPhase("ours", "ip-scheduler", "allocation gone")
    phase.on_pod("ADDED", pod("p0", "Pending"))
    phase.on_pod("MODIFIED", pod("p0", "Running"))  # Running without a podIP yet
    assert phase.running == {}
    assert phase.state["p0"] == "Running"
    phase.on_pod("MODIFIED", pod("p0", "Running", "10.88.7.10", "10.88.7.10"))
    first = phase.running["p0"]
    phase.on_pod("MODIFIED", pod("p0", "Running", "10.88.7.10", "10.88.7.10"))
    assert phase.running == {"p0": first}
    assert (phase.pod_ip["p0"], phase.annotated_ip["p0"], phase.uids["p0"]) == (
        "10.88.7.10",
        "10.88.7.10",
        "uid-p0",
    )
    phase.on_pod("ADDED", pod("p1", "Pending"))
    assert phase.state["p1"] == "Pending ContainerCreating"
    phase.on_pod("DELETED", pod("p0", "Running", "10.88.7.10"))
    assert list(phase.gone) == ["p0"]


def test_without_root_the_running_phase_is_skipped_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        realnode, "prerequisites", lambda: ["root (containerd, runc and the kubelet run as root)"]
    )
    rows, reason = asyncio.run(running.running_phases(cast(Any, None), cast(Any, None), 5, cast(Any, None)))
    assert rows == []
    assert reason == "running: skipped, a real node needs root (containerd, runc and the kubelet run as root)"
    assert reason in capsys.readouterr().err
