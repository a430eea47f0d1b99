"""Pods with volumes, scheduler mode: VolumeBinding against kube-controller-manager's real PV
controller. A claim of a ``WaitForFirstConsumer`` class waits for the scheduler; the only
PersistentVolume that fits is a local one on node-2; the pod lands there, and the claim is
bound to that volume (PreBind set its claimRef, the PV controller finished the binding). A
pod whose claim does not exist stays Pending with kube-scheduler's reason."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess, events_for
from tests.kube import Kubectl, pod_manifest, wait_for

Factory = Callable[..., SchedulerProcess]

CLASS = "ipscheduler-e2e-local"
VOLUME = "ipscheduler-e2e-local-node-2"


@pytest.fixture
def local_volume(kubectl: Kubectl) -> Iterator[None]:
    """A no-provisioner WaitForFirstConsumer class and a 1Gi local volume on node-2 (both
    cluster-scoped: deleted afterwards)."""
    kubectl.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
    )
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": VOLUME},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "local": {"path": "/mnt/disks/e2e"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}
                                ]
                            }
                        ]
                    }
                },
            },
        }
    )
    yield
    kubectl.run("delete", "pv", VOLUME, "--ignore-not-found", "--wait=false", check=False)
    kubectl.run("delete", "storageclass", CLASS, "--ignore-not-found", "--wait=false", check=False)


def _claim(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": CLASS,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def _pod_with_claim(name: str, claim: str) -> dict[str, Any]:
    pod = pod_manifest(
        name,
        scheduler=SCHEDULER,
        terminationGracePeriodSeconds=0,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    )
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return pod


def test_a_pod_whose_claim_fits_a_local_volume_lands_on_its_node(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str, local_volume: None
) -> None:
    for i in (1, 2, 3):
        pools.create(f"volumes-node-{i}", f"node-{i}", [f"10.86.{i}.1-10.86.{i}.4"])
    scheduler_factory()
    kubectl.create(_claim("data"), ns)
    kubectl.create(_pod_with_claim("app", "data"), ns)
    node = wait_for(
        "the pod bound",
        lambda: kubectl.json("get", "pod", "app", "-n", ns)["spec"].get("nodeName"),
        timeout=90,
    )
    assert node == "node-2"
    claim = kubectl.json("get", "pvc", "data", "-n", ns)
    assert claim["spec"]["volumeName"] == VOLUME
    assert claim["status"]["phase"] == "Bound"
    assert claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] == "yes"
    ref = kubectl.json("get", "pv", VOLUME)["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"]) == (ns, "data")

    # A pod whose claim does not exist waits, with kube-scheduler's reason.
    kubectl.create(_pod_with_claim("orphan", "missing"), ns)
    ev = wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "orphan", "FailedScheduling"))
    assert 'persistentvolumeclaim "missing" not found' in ev[0]["message"], ev[0]["message"]
    assert not kubectl.json("get", "pod", "orphan", "-n", ns)["spec"].get("nodeName")


def _local_volume(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": CLASS,
            "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/disks/{name}"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def test_a_statefulset_with_a_wait_for_first_consumer_template_follows_its_volumes_and_keeps_its_addresses(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str, local_volume: None
) -> None:
    """The issue's case: a StatefulSet whose volumeClaimTemplate has a WaitForFirstConsumer
    class over local volumes (node-2 and node-3; none on node-1): each pod lands on the node
    of the volume its claim got, with an address of that node's pool; deleted, it comes back
    to the same node (its volume is there) with the same address (sticky)."""
    extra = f"{ns}-node-3"
    kubectl.apply(_local_volume(extra, "node-3"))
    try:
        for i in (1, 2, 3):
            pools.create(f"{ns}-{i}", f"node-{i}", [f"10.87.{i}.1-10.87.{i}.4"])
        scheduler_factory()
        template = {
            "metadata": {"labels": {"app": "db"}},
            "spec": {
                "schedulerName": SCHEDULER,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
            },
        }
        claim = _claim("data")
        claim.pop("apiVersion")
        claim.pop("kind")
        kubectl.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "db"},
                "spec": {
                    "replicas": 2,
                    "serviceName": "db",
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": {"app": "db"}},
                    "template": template,
                    "volumeClaimTemplates": [claim],
                },
            },
            ns,
        )

        uids: dict[str, str] = {}

        def placed() -> dict[str, tuple[str, str, str]] | None:
            out = {}
            for name in ("db-0", "db-1"):
                got = kubectl.run("get", "pod", name, "-n", ns, "-o", "json", check=False)
                if got.returncode != 0:
                    return None
                pod = json.loads(got.stdout)
                node = pod["spec"].get("nodeName")
                if not node or pod["metadata"].get("deletionTimestamp"):
                    return None
                uids[name] = pod["metadata"]["uid"]
                volume = kubectl.json("get", "pvc", f"data-{name}", "-n", ns)["spec"].get("volumeName")
                out[name] = (node, pod["metadata"]["annotations"]["ipscheduler.io/ip"], volume)
            return out

        first = wait_for("db-0 and db-1 bound with their volumes", placed, timeout=120)
        old_uid = uids["db-0"]
        assert {node for node, _, _ in first.values()} == {"node-2", "node-3"}, first
        for node, ip, volume in first.values():
            assert volume == (VOLUME if node == "node-2" else extra), first
            assert ip.startswith(f"10.87.{node[-1]}."), first

        kubectl("delete", "pod", "db-0", "-n", ns, "--wait=true")
        again = wait_for(
            "db-0 re-created and bound",
            lambda: p if (p := placed()) and uids["db-0"] != old_uid else None,
            timeout=120,
        )
        assert again["db-0"] == first["db-0"], "same node, same address, same volume"
    finally:
        kubectl.run("delete", "statefulset", "db", "-n", ns, "--wait=true", check=False)
        kubectl.run("delete", "pvc", "--all", "-n", ns, "--wait=true", "--timeout=60s", check=False)
        kubectl.run("delete", "pv", extra, "--ignore-not-found", "--wait=false", check=False)
