"""The storage the volumebinding tests are made of (upstream's ``test_utils.go``): claims,
volumes and classes parsed from raw bodies, two nodes, and the PV controller a binding waits
for (:class:`Controller`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ipscheduler.framework.types import PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, PVCInfo, PVInfo, StorageClassInfo
from tests.builders import (
    claim_volume,
    node,
    node_selector_expr,
    node_selector_term,
    pv_body,
    pvc_body,
    storage_class_body,
    volume_pod,
)

BOUND = {"pv.kubernetes.io/bind-completed": "yes"}
N1 = node("n1", {"kubernetes.io/hostname": "n1", "zone": "a"})
N2 = node("n2", {"kubernetes.io/hostname": "n2", "zone": "b"})


def on(host: str) -> dict[str, Any]:
    """A local volume's node affinity: ``kubernetes.io/hostname In (host)``."""
    return {
        "nodeSelectorTerms": [node_selector_term(node_selector_expr("kubernetes.io/hostname", "In", host))]
    }


def pv(name: str, *, phase: str = "Available", rv: str = "1", **kw: Any) -> PVInfo:
    body = pv_body(name, **kw)
    body["status"] = {"phase": phase}
    body["metadata"]["resourceVersion"] = rv
    return PVInfo.from_obj(body)


def pvc(name: str, *, rv: str = "1", phase: str = "", deleting: bool = False, **kw: Any) -> PVCInfo:
    body = pvc_body(name, **kw)
    body["metadata"]["resourceVersion"] = rv
    if phase:
        body["status"] = {"phase": phase}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return PVCInfo.from_obj(body)


CLASSES = [
    StorageClassInfo.from_obj(
        storage_class_body("local", "WaitForFirstConsumer", "kubernetes.io/no-provisioner")
    ),
    StorageClassInfo.from_obj(storage_class_body("dynamic", "WaitForFirstConsumer", "csi.example.com")),
    StorageClassInfo.from_obj(storage_class_body("immediate", "Immediate")),
    StorageClassInfo.from_obj(storage_class_body("no-mode", None)),
    StorageClassInfo.from_obj(
        {
            "metadata": {"name": "zone-a-only"},
            "provisioner": "csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}],
        }
    ),
]


def listers(*objs: Any) -> MapVolumeListers:
    """The :data:`CLASSES` and ``objs`` as the informers hold them."""
    return MapVolumeListers.of(*CLASSES, *objs)


def claims_pod(*claims: str, **kw: Any) -> PodInfo:
    """A pod with a volume from each of these claims."""
    return volume_pod(*(claim_volume(c) for c in claims), **kw)


@dataclasses.dataclass
class Controller:
    """The API server and kube-controller-manager's PV controller, as far as a binding sees
    them: each patch is recorded and (unless ``idle``) the claim is bound at once, the
    informers' views (``listers``) updated with a new resourceVersion."""

    listers: MapVolumeListers
    idle: bool = False
    drop_selected_node: bool = False
    patches: list[tuple[str, str, dict[str, Any]]] = dataclasses.field(default_factory=list)

    async def patch_persistent_volume(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(("pv", name, patch))
        written = {"metadata": {"resourceVersion": "2"}}
        if self.idle:
            return written
        ref = patch["spec"]["claimRef"]
        key = f"{ref['namespace']}/{ref['name']}"
        self.listers.pvs[name] = dataclasses.replace(
            self.listers.pvs[name], claim_ref=key, claim_uid=ref["uid"], phase="Bound", resource_version="2"
        )
        claim = self.listers.pvcs[key]
        self.listers.pvcs[key] = dataclasses.replace(
            claim, volume_name=name, annotations={**claim.annotations, **BOUND}, resource_version="2"
        )
        return written

    async def patch_persistent_volume_claim(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.patches.append(("pvc", f"{namespace}/{name}", patch))
        key = f"{namespace}/{name}"
        claim = self.listers.pvcs[key]
        written = {"metadata": {"resourceVersion": "2"}}
        if self.drop_selected_node:  # written, then the provisioner took the annotation off
            self.listers.pvcs[key] = dataclasses.replace(claim, resource_version="3")
            return written
        self.listers.pvs["pvc-new"] = pv("pvc-new", claim=key, phase="Bound", node_affinity=on("n1"))
        self.listers.pvcs[key] = dataclasses.replace(
            claim,
            volume_name="pvc-new",
            annotations={**claim.annotations, **patch["metadata"]["annotations"], **BOUND},
            resource_version="2",
        )
        return written
