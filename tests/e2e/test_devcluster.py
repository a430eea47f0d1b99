"""The harness is real: controller-manager, kwok kubelets, nodes, deletions."""

from __future__ import annotations

import subprocess

from tests.kube import Kubectl, pod_manifest, wait_for


def test_nodes_are_listed_ready_by_kubectl(cluster, kubectl: Kubectl) -> None:
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), "get", "nodes", "--no-headers"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert {n: rows.get(n) for n in ("node-1", "node-2", "node-3")} == dict.fromkeys(
        ("node-1", "node-2", "node-3"), "Ready"
    )


def test_nodes_have_realistic_allocatable_labels_and_no_taints(kubectl: Kubectl) -> None:
    nodes = {n["metadata"]["name"]: n for n in kubectl.json("get", "nodes")["items"]}
    zones = [nodes[f"node-{i}"]["metadata"]["labels"]["topology.kubernetes.io/zone"] for i in (1, 2, 3)]
    assert zones[0] != zones[1] and zones[0] == zones[2]
    for name in ("node-1", "node-2", "node-3"):
        node = nodes[name]
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        alloc = node["status"]["allocatable"]
        assert (alloc["cpu"], alloc["memory"], alloc["pods"]) == ("8", "32Gi", "110")
        assert not node["spec"].get("taints")


def test_deployment_creates_replicaset_and_pods(kubectl: Kubectl, namespace: str) -> None:
    kubectl(
        "create", "deployment", "web", "--image=registry.k8s.io/pause:3.10", "--replicas=2", "-n", namespace
    )
    rs = wait_for("a ReplicaSet", lambda: kubectl.json("get", "rs", "-n", namespace)["items"])
    assert rs[0]["metadata"]["ownerReferences"][0]["name"] == "web"
    pods = wait_for(
        "2 pods", lambda: (p := kubectl.json("get", "pods", "-n", namespace)["items"]) and len(p) == 2 and p
    )
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)


def test_pod_on_a_kwok_node_runs_and_deletion_completes(kubectl: Kubectl, namespace: str) -> None:
    kubectl.create(pod_manifest("direct", nodeName="node-1"), namespace)
    wait_for(
        "pod Running",
        lambda: kubectl.json("get", "pod", "direct", "-n", namespace)["status"].get("phase") == "Running",
    )
    kubectl("delete", "pod", "direct", "-n", namespace, "--wait=true", "--timeout=60s")
    gone = kubectl.run("get", "pod", "direct", "-n", namespace, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_cli_lifecycle_up_add_nodes_idempotent_down(cluster, tmp_path) -> None:
    """A second, separate cluster through the CLI: up --nodes 0, add-nodes, up again, down."""
    import json
    import sys
    from pathlib import Path

    import devcluster

    script = Path(__file__).resolve().parents[2] / "hack" / "devcluster.py"
    root = tmp_path / "lifecycle"

    def cli(*args: str) -> str:
        return subprocess.run(
            [sys.executable, str(script), *args, "--dir", str(root)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    kubeconfig = cli("up", "--nodes", "0").strip()
    kubectl = Kubectl(Path(kubeconfig))
    assert kubectl.json("get", "nodes")["items"] == []
    assert cli("add-nodes", "--count", "2").split() == ["node-1", "node-2"]
    ready = {
        n["metadata"]["name"]
        for n in kubectl.json("get", "nodes")["items"]
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    }
    assert ready == {"node-1", "node-2"}
    state = json.loads((root / "state.json").read_text())["pids"]
    pids = {k: v["pid"] for k, v in state.items()}
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kwok"}
    cli("up", "--nodes", "2")  # idempotent: same processes
    again = {k: v["pid"] for k, v in json.loads((root / "state.json").read_text())["pids"].items()}
    assert again == pids
    cli("down")
    assert not root.exists()
    for name, info in state.items():
        assert not devcluster.pid_alive(info["pid"], info["exe"]), f"{name} still running"
