"""Validated views of the storage objects the volume plugins read, and the read-only
"listers" a plugin factory gets them through.

Upstream's volume plugins read PersistentVolumeClaims, PersistentVolumes, StorageClasses and
CSINodes through the informer factory's listers (``handle.SharedInformerFactory()``); here
:class:`VolumeListers` is that read-only view, handed to plugin factories by the profile's
handle (:attr:`ipscheduler.framework.interface.Handle.volumes`). The process fills it from
four informers (``cmd/wiring.py``); tests and ``explain`` use :class:`MapVolumeListers`.

Each ``from_obj`` takes a raw API body (``dict``) and raises ``ValueError`` when the object
has no name (or, for a claim, no namespace); other fields of the wrong type read as absent.
A lister's miss is None, and :func:`not_found` spells it as the API server's NotFound
error does (``persistentvolumeclaim "data" not found``), which upstream puts in its statuses.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ipscheduler.framework.fields import as_dict, as_list, as_str

READ_WRITE_ONCE_POD = "ReadWriteOncePod"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
"""The claim's class before ``spec.storageClassName`` (``storagehelpers.GetPersistentVolumeClaimClass``)."""

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""On a claim: the node the scheduler chose, for its provisioner (``volume.AnnSelectedNode``)."""
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
"""On a claim: the PV controller finished binding it (``volume.AnnBindCompleted``)."""
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
"""On a volume: its claimRef was set by a controller, not by a user (``volume.AnnBoundByController``)."""
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
VOLUME_AVAILABLE = "Available"
CLAIM_LOST = "Lost"

RESOURCE_PVC = "persistentvolumeclaim"
RESOURCE_PV = "persistentvolume"
RESOURCE_STORAGE_CLASS = "storageclass.storage.k8s.io"
RESOURCE_CSI_NODE = "csinode.storage.k8s.io"


def not_found(resource: str, name: str) -> str:
    """The API server's NotFound message (``apierrors.NewNotFound(...).Error()``), e.g.
    ``persistentvolumeclaim "data" not found``; ``resource`` one of the ``RESOURCE_*``."""
    return f'{resource} "{name}" not found'


def _name(meta: Mapping[str, Any], what: str) -> str:
    name = as_str(meta.get("name"))
    if not name:
        raise ValueError(f"{what} without metadata.name")
    return name


def _quantity_text(value: Any) -> str:
    """A quantity as written (a string, or an integer JSON number), else ""."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else ""


def _str_map(value: Any) -> dict[str, str]:
    return {k: v for k, v in as_dict(value).items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True)
class PVCInfo:
    """A PersistentVolumeClaim: ``access_modes`` (``spec.accessModes``), ``volume_name``
    (``spec.volumeName``: "" while unbound), ``storage_class`` (the beta annotation, else
    ``spec.storageClassName``, else ""), ``phase`` (``status.phase``), ``owner_uid`` (its
    controller's UID: a generic ephemeral volume's claim is owned by its pod), ``annotations``
    and the requested ``storage`` (``spec.resources.requests.storage`` as written, "" if none)."""

    namespace: str
    name: str
    uid: str = ""
    access_modes: tuple[str, ...] = ()
    volume_name: str = ""
    storage_class: str = ""
    phase: str = ""
    owner_uid: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    storage: str = ""
    selector: Mapping[str, Any] | None = None
    volume_mode: str = "Filesystem"
    deleting: bool = False
    resource_version: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> PVCInfo:
        """Parse a claim. Raises ValueError without a namespace or name."""
        meta = as_dict(body.get("metadata"))
        spec = as_dict(body.get("spec"))
        name = _name(meta, "PersistentVolumeClaim")
        namespace = as_str(meta.get("namespace"))
        if not namespace:
            raise ValueError(f"PersistentVolumeClaim {name} without metadata.namespace")
        annotations = _str_map(meta.get("annotations"))
        sc = annotations.get(BETA_STORAGE_CLASS_ANNOTATION) or as_str(spec.get("storageClassName"))
        owner = ""
        for ref in as_list(meta.get("ownerReferences")):
            if as_dict(ref).get("controller") is True:
                owner = as_str(as_dict(ref).get("uid"))
        storage = as_dict(as_dict(spec.get("resources")).get("requests")).get("storage")
        selector = spec.get("selector")
        return cls(
            namespace=sys.intern(namespace),
            name=name,
            uid=as_str(meta.get("uid")),
            access_modes=tuple(m for m in as_list(spec.get("accessModes")) if isinstance(m, str)),
            volume_name=as_str(spec.get("volumeName")),
            storage_class=sc,
            phase=as_str(as_dict(body.get("status")).get("phase")),
            owner_uid=owner,
            annotations=annotations,
            storage=_quantity_text(storage),
            selector=selector if isinstance(selector, dict) else None,
            volume_mode=as_str(spec.get("volumeMode"), "Filesystem") or "Filesystem",
            deleting=meta.get("deletionTimestamp") is not None,
            resource_version=as_str(meta.get("resourceVersion")),
        )


@dataclass(frozen=True)
class PVInfo:
    """A PersistentVolume: ``labels`` (the zone labels VolumeZone reads), ``csi_driver`` and
    ``csi_handle`` (``spec.csi``; "" for other sources), ``node_affinity`` (the raw
    ``spec.nodeAffinity.required`` node selector, None without one), ``claim_ref``
    (``namespace/name`` of ``spec.claimRef``, "" when unclaimed), ``claim_uid``, the class,
    access modes, capacity (``spec.capacity.storage`` as written), ``phase``."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    csi_driver: str = ""
    csi_handle: str = ""
    node_affinity: Mapping[str, Any] | None = None
    claim_ref: str = ""
    claim_uid: str = ""
    storage_class: str = ""
    access_modes: tuple[str, ...] = ()
    capacity: str = ""
    phase: str = ""
    volume_mode: str = "Filesystem"
    deleting: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)
    resource_version: str = ""

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> PVInfo:
        """Parse a volume. Raises ValueError without a name."""
        meta = as_dict(body.get("metadata"))
        spec = as_dict(body.get("spec"))
        name = _name(meta, "PersistentVolume")
        csi = as_dict(spec.get("csi"))
        required = as_dict(spec.get("nodeAffinity")).get("required")
        ref = as_dict(spec.get("claimRef"))
        claim = f"{as_str(ref.get('namespace'))}/{as_str(ref.get('name'))}" if ref.get("name") else ""
        capacity = as_dict(spec.get("capacity")).get("storage")
        annotations = _str_map(meta.get("annotations"))
        return cls(
            name=name,
            labels=_str_map(meta.get("labels")),
            csi_driver=as_str(csi.get("driver")),
            csi_handle=as_str(csi.get("volumeHandle")),
            node_affinity=required if isinstance(required, dict) else None,
            claim_ref=claim,
            claim_uid=as_str(ref.get("uid")),
            storage_class=annotations.get(BETA_STORAGE_CLASS_ANNOTATION)
            or as_str(spec.get("storageClassName")),
            access_modes=tuple(m for m in as_list(spec.get("accessModes")) if isinstance(m, str)),
            capacity=_quantity_text(capacity),
            phase=as_str(as_dict(body.get("status")).get("phase")),
            volume_mode=as_str(spec.get("volumeMode"), "Filesystem") or "Filesystem",
            deleting=meta.get("deletionTimestamp") is not None,
            annotations=annotations,
            resource_version=as_str(meta.get("resourceVersion")),
        )


@dataclass(frozen=True)
class StorageClassInfo:
    """A StorageClass: ``provisioner``, ``volume_binding_mode`` (None when unset: the API
    server defaults it to ``Immediate``, so only a hand-made object lacks it) and
    ``allowed_topologies`` (the raw ``allowedTopologies`` terms)."""

    name: str
    provisioner: str = ""
    volume_binding_mode: str | None = None
    allowed_topologies: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> StorageClassInfo:
        """Parse a class. Raises ValueError without a name."""
        meta = as_dict(body.get("metadata"))
        mode = body.get("volumeBindingMode")
        return cls(
            name=_name(meta, "StorageClass"),
            provisioner=as_str(body.get("provisioner")),
            volume_binding_mode=mode if isinstance(mode, str) else None,
            allowed_topologies=tuple(as_dict(t) for t in as_list(body.get("allowedTopologies"))),
        )


@dataclass(frozen=True)
class CSINodeInfo:
    """A CSINode (named as its node): ``limits`` maps each driver (``spec.drivers[].name``)
    with an ``allocatable.count`` to that count (volumes attachable to the node); ``drivers``
    names every driver installed there."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)
    drivers: tuple[str, ...] = ()

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> CSINodeInfo:
        """Parse a CSINode. Raises ValueError without a name; a driver without a name is left
        out, a count that is not a non-negative integer is no limit."""
        meta = as_dict(body.get("metadata"))
        limits: dict[str, int] = {}
        drivers = []
        for raw in as_list(as_dict(body.get("spec")).get("drivers")):
            d = as_dict(raw)
            driver = as_str(d.get("name"))
            if not driver:
                continue
            drivers.append(driver)
            count = as_dict(d.get("allocatable")).get("count")
            if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
                limits[driver] = count
        return cls(name=_name(meta, "CSINode"), limits=limits, drivers=tuple(drivers))


class VolumeListers(Protocol):
    """Read-only access to the storage objects (upstream's listers): each getter returns the
    current view or None when there is none."""

    def pvc(self, namespace: str, name: str) -> PVCInfo | None: ...

    def pv(self, name: str) -> PVInfo | None: ...

    def list_pvs(self) -> Iterable[PVInfo]:
        """Every PersistentVolume."""
        ...

    def storage_class(self, name: str) -> StorageClassInfo | None: ...

    def csi_node(self, name: str) -> CSINodeInfo | None: ...


@dataclass
class MapVolumeListers:
    """:class:`VolumeListers` over plain mappings: ``pvcs`` by ``namespace/name``, the others
    by name (tests, ``explain``; an empty one answers None to everything)."""

    pvcs: dict[str, PVCInfo] = field(default_factory=dict)
    pvs: dict[str, PVInfo] = field(default_factory=dict)
    classes: dict[str, StorageClassInfo] = field(default_factory=dict)
    csi_nodes: dict[str, CSINodeInfo] = field(default_factory=dict)

    @classmethod
    def of(cls, *objects: PVCInfo | PVInfo | StorageClassInfo | CSINodeInfo) -> MapVolumeListers:
        """Listers holding ``objects``, each by its key."""
        out = cls()
        for o in objects:
            if isinstance(o, PVCInfo):
                out.pvcs[o.key] = o
            elif isinstance(o, PVInfo):
                out.pvs[o.name] = o
            elif isinstance(o, StorageClassInfo):
                out.classes[o.name] = o
            else:
                out.csi_nodes[o.name] = o
        return out

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self.pvcs.get(f"{namespace}/{name}")

    def pv(self, name: str) -> PVInfo | None:
        return self.pvs.get(name)

    def list_pvs(self) -> Iterable[PVInfo]:
        return self.pvs.values()

    def storage_class(self, name: str) -> StorageClassInfo | None:
        return self.classes.get(name)

    def csi_node(self, name: str) -> CSINodeInfo | None:
        return self.csi_nodes.get(name)


class VolumeWriter(Protocol):
    """The writes VolumeBinding makes (``kube/client.KubeApi`` has them): merge patches with
    the object's ``metadata.resourceVersion`` in them as a precondition, returning the object
    as written. Each raises what the API call raises (a conflict when the object changed
    meanwhile)."""

    async def patch_persistent_volume(self, name: str, patch: dict[str, Any]) -> Any: ...

    async def patch_persistent_volume_claim(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> Any: ...
