"""Pure parts of hack/devcluster.py, running a cluster (no cluster started).

Building and locating its binaries (hack/binaries.py): test_binaries.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import devcluster


@pytest.mark.parametrize(
    ("index", "zone"),
    [(1, "zone-a"), (2, "zone-b"), (3, "zone-a"), (4, "zone-b")],
    ids=["n1", "n2", "n3", "n4"],
)
def test_node_manifest_is_realistic(index: int, zone: str) -> None:
    node = devcluster.Cluster.node_manifest(index)
    assert node["metadata"]["name"] == f"node-{index}"
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == f"node-{index}"
    assert labels["topology.kubernetes.io/zone"] == zone
    assert node["status"]["allocatable"] | {} == {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "110",
        "ephemeral-storage": "100Gi",
    }
    assert "taints" not in node["spec"]
    assert node["metadata"]["annotations"][devcluster.KWOK_ANNOTATION] == "fake"


def test_pid_alive_checks_the_command_line() -> None:
    import os
    import sys

    assert devcluster.pid_alive(os.getpid(), sys.executable) or devcluster.pid_alive(
        os.getpid(), Path(sys.executable).resolve().as_posix()
    )
    assert not devcluster.pid_alive(os.getpid(), "/bin/not-this-program")
    assert not devcluster.pid_alive(2**22 + 12345, "/bin/sh")


def test_exit_status_names_the_signal(tmp_path: Path) -> None:
    import subprocess

    c = devcluster.Cluster(tmp_path / "c")
    proc = subprocess.Popen(["/bin/sh", "-c", "kill -9 $$"])
    proc.wait()
    c._procs["etcd"] = proc
    assert c.exit_status("etcd") == "killed by SIGKILL"
    proc = subprocess.Popen(["/bin/sh", "-c", "exit 7"])
    proc.wait()
    c._procs["etcd"] = proc
    assert c.exit_status("etcd") == "exit code 7"


def test_own_child_is_alive_by_its_exit_status_not_its_proc_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after Popen returns, /proc/PID/cmdline can still read empty (the child is inside
    execve): a component this object started counts as alive until it exits, and is then
    reaped, not left a zombie."""
    import subprocess

    monkeypatch.setattr(devcluster, "pid_alive", lambda pid, exe: False)
    c = devcluster.Cluster(tmp_path / "c")
    proc = subprocess.Popen(["/bin/sleep", "30"])
    c.state = {"pids": {"etcd": {"pid": proc.pid, "exe": "/bin/sleep"}}}
    c._procs["etcd"] = proc
    try:
        assert c.alive("etcd")
        c.stop_component("etcd")
        assert not c.alive("etcd")
        assert proc.returncode is not None  # reaped by poll()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("lease", "grace"), [(None, "50s"), (240, "300s")], ids=["kubelet-default", "xlarge-bench"]
)
def test_node_lease_duration_reaches_kwok_and_the_node_monitor_grace_period(
    tmp_path: Path, lease: int | None, grace: str
) -> None:
    c = devcluster.Cluster(tmp_path / "c") if lease is None else devcluster.Cluster(tmp_path / "c", lease)
    c.state = {"bindir": "/b", "ports": {"etcd": 1, "etcd_peer": 2, "apiserver": 3, "controller_manager": 4}}
    c.state["node_lease_seconds"] = c.node_lease_seconds
    cmds = c._commands()
    assert f"--node-lease-duration-seconds={lease or 40}" in cmds["kwok"]
    assert f"--node-monitor-grace-period={grace}" in cmds["kube-controller-manager"]
