"""Pods with volumes, scheduler mode: VolumeBinding against kube-controller-manager's real PV
controller. A claim of a ``WaitForFirstConsumer`` class waits for the scheduler; the only
PersistentVolume that fits is a local one on node-2; the pod lands there, and the claim is
bound to that volume (PreBind set its claimRef, the PV controller finished the binding). A
pod whose claim does not exist stays Pending with kube-scheduler's reason."""

from __future__ import annotations

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
