"""NodeVolumeLimits: a node's CSI attach limits (``CSINode`` ``spec.drivers[].allocatable.count``).

Mirrors kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/nodevolumelimits/csi.go``
(the in-tree EBS, GCE PD, Azure Disk and Cinder limits are gone upstream: CSI only):

* PreFilter: Skip unless the pod has a ``persistentVolumeClaim`` or generic ``ephemeral``
  volume.
* Filter counts unique CSI volumes, ``<driver>/<volumeHandle>``, by limit key
  (:func:`attach_limit_key`, ``attachable-volumes-csi-<driver>``):

  - each claim of the pod (a generic ephemeral volume's is ``<pod>-<volume>``, and must be
    controlled by the pod) → its bound PersistentVolume's ``spec.csi`` driver and handle; a
    claim not bound, or whose volume is not in the lister, counts under its StorageClass's
    provisioner with a handle made up per claim (``<random>-<namespace>/<claim>``); no class,
    or an unknown one: not counted; a volume that is not CSI: not counted.
  - the pod's own claims must exist: a missing one → UnschedulableAndUnresolvable
    ``looking up PVC <ns>/<claim>: persistentvolumeclaim "<claim>" not found``; a claim
    without a name or an ephemeral claim the pod does not own → Error. The claims of pods
    already on the node that are missing are not counted.
  - the limits: the node's ``status.allocatable`` ``attachable-volumes-*`` entries,
    overridden by the CSINode's driver counts (a node without a CSINode has only the first).
  - a volume the node's pods already use is not counted twice; for each key, used + new >
    limit → Unschedulable ``node(s) exceed max volume count``.

Not covered: CSI migration of in-tree volumes (upstream's ``csi-translation-lib``: an
in-tree PV or inline volume counted under its CSI driver when migration is on for it on the
node): here an in-tree PersistentVolume is not counted, nor an unbound claim whose class has
an in-tree (``kubernetes.io/...``) provisioner, as upstream does when migration is off.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import RESOURCE_PVC, CSINodeInfo, PVCInfo, VolumeListers, not_found

NAME = "NodeVolumeLimits"

ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED = "node(s) exceed max volume count"

ATTACHABLE_VOLUMES_PREFIX = "attachable-volumes-"
CSI_ATTACH_LIMIT_PREFIX = "attachable-volumes-csi-"
RESOURCE_NAME_LENGTH_LIMIT = 63
IN_TREE_PROVISIONER_PREFIX = "kubernetes.io/"


class VolumeLookupError(Exception):
    """A claim of the pod being scheduled that stops Filter: ``unresolvable`` for a missing
    claim (UnschedulableAndUnresolvable), else an Error."""

    def __init__(self, message: str, unresolvable: bool = False) -> None:
        super().__init__(message)
        self.unresolvable = unresolvable


def attach_limit_key(driver: str) -> str:
    """``volumeutil.GetCSIAttachLimitKey``: ``attachable-volumes-csi-<driver>``; past 62
    characters, the first 23 of the driver and 16 hex digits of its SHA-1."""
    if len(CSI_ATTACH_LIMIT_PREFIX) + len(driver) >= RESOURCE_NAME_LENGTH_LIMIT:
        digest = hashlib.sha1(driver.encode(), usedforsecurity=False).hexdigest()[:16]
        return CSI_ATTACH_LIMIT_PREFIX + driver[:23] + digest
    return CSI_ATTACH_LIMIT_PREFIX + driver


def volume_limits(node: NodeInfo, csi_node: CSINodeInfo | None) -> dict[str, int]:
    """``getVolumeLimits``: limit key → count, from the node's allocatable and its CSINode."""
    limits = {k: int(v) for k, v in node.allocatable.items() if k.startswith(ATTACHABLE_VOLUMES_PREFIX)}
    if csi_node is not None:
        for driver, count in csi_node.limits.items():
            limits[attach_limit_key(driver)] = count
    return limits


def _claims(pod: PodInfo) -> list[tuple[str, bool]]:
    return [(c, False) for c in pod.pvc_names] + [(c, True) for c in pod.ephemeral_pvc_names]


class NodeVolumeLimits:
    """PreFilter and Filter over the claim, volume, class and CSINode listers (see the module
    doc)."""

    name: str = NAME

    def __init__(self, volumes: VolumeListers, volume_id_prefix: str | None = None) -> None:
        self.volumes = volumes
        self.volume_id_prefix = volume_id_prefix if volume_id_prefix is not None else secrets.token_hex(16)
        """The made-up handle's prefix (upstream ``rand.String(32)``), so it matches no real one."""

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Skip a pod without claims."""
        return Status.success() if pod.pvc_names or pod.ephemeral_pvc_names else Status.skip()

    def attachable(self, pod: PodInfo, new_pod: bool, out: dict[str, str]) -> None:
        """Add the pod's CSI volumes to ``out`` (``<driver>/<handle>`` → limit key)
        (``filterAttachableVolumes``). Raises :class:`VolumeLookupError` for the pod being
        scheduled (``new_pod``) as the module doc says."""
        for claim, ephemeral in _claims(pod):
            if not claim:
                raise VolumeLookupError("PersistentVolumeClaim had no name")
            pvc = self.volumes.pvc(pod.namespace, claim)
            if pvc is None:
                if new_pod:
                    raise VolumeLookupError(
                        f"looking up PVC {pod.namespace}/{claim}: {not_found(RESOURCE_PVC, claim)}",
                        unresolvable=True,
                    )
                continue
            if ephemeral and pvc.owner_uid != pod.uid:
                raise VolumeLookupError(
                    f"PVC {pvc.namespace}/{pvc.name} was not created for pod {pod.key} (pod is not owner)"
                )
            driver, handle = self.csi_driver_info(pvc)
            if driver and handle:
                out[f"{driver}/{handle}"] = attach_limit_key(driver)

    def csi_driver_info(self, pvc: PVCInfo) -> tuple[str, str]:
        """``(driver, handle)`` of a claim (``getCSIDriverInfo``); ``("", "")``: not counted."""
        pv = self.volumes.pv(pvc.volume_name) if pvc.volume_name else None
        if pv is not None:
            return pv.csi_driver, pv.csi_handle
        if not pvc.storage_class:
            return "", ""
        sc = self.volumes.storage_class(pvc.storage_class)
        if sc is None or sc.provisioner.startswith(IN_TREE_PROVISIONER_PREFIX):
            return "", ""
        return sc.provisioner, f"{self.volume_id_prefix}-{pvc.namespace}/{pvc.name}"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The pod's new CSI volumes within the node's limits (see the module doc)."""
        if not pod.pvc_names and not pod.ephemeral_pvc_names:
            return Status.success()
        csi_node = self.volumes.csi_node(node.name)
        new_volumes: dict[str, str] = {}
        try:
            self.attachable(pod, True, new_volumes)
        except VolumeLookupError as e:
            if e.unresolvable:
                return Status.unresolvable(str(e), plugin=self.name)
            return Status.error(str(e), plugin=self.name)
        if not new_volumes:
            return Status.success()
        limits = volume_limits(node, csi_node)
        if not limits:
            return Status.success()
        attached: dict[str, str] = {}
        for other in node.pods:
            try:
                self.attachable(other, False, attached)
            except VolumeLookupError as e:
                return Status.error(str(e), plugin=self.name)
        attached_count: dict[str, int] = {}
        for unique, key in attached.items():
            new_volumes.pop(unique, None)
            attached_count[key] = attached_count.get(key, 0) + 1
        new_count: dict[str, int] = {}
        for key in new_volumes.values():
            new_count[key] = new_count.get(key, 0) + 1
        for key, count in new_count.items():
            limit = limits.get(key)
            if limit is not None and attached_count.get(key, 0) + count > limit:
                return Status.unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED, plugin=self.name)
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A CSINode added (no hint, as upstream) or updated (its limits may have grown), a
        bound pod deleted (hint: it had claims), a claim added (hint: one the pod names)."""
        return [
            ClusterEventWithHint(events.CSI_NODE_ADD_OR_UPDATE),
            ClusterEventWithHint(events.ASSIGNED_POD_DELETE, _after_pod_deleted),
            ClusterEventWithHint(events.PVC_ADD, _after_pvc_added),
        ]


def _after_pod_deleted(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: the deleted pod was bound and had a claim."""
    if old is None or not old.node_name or not (old.pvc_names or old.ephemeral_pvc_names):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def _after_pvc_added(pod: PodInfo, old: object, new: object) -> QueueingHint:
    """``isSchedulableAfterPVCAdded``: a claim of the pod's namespace the pod names."""
    if not isinstance(new, PVCInfo) or new.namespace != pod.namespace:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE if new.name in (*pod.pvc_names, *pod.ephemeral_pvc_names) else QueueingHint.SKIP


def new(args: None, handle: Handle) -> NodeVolumeLimits:
    """The plugin's factory (registered as :data:`NAME`; no args): reads the handle's listers."""
    return NodeVolumeLimits(handle.volumes)
