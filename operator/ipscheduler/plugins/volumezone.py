"""VolumeZone: the zone and region labels of the pod's bound PersistentVolumes must match
the node's.

Mirrors kube-scheduler 1.34's ``pkg/scheduler/framework/plugins/volumezone/volume_zone.go``:

* PreFilter, for each ``persistentVolumeClaim`` of the pod (``spec.volumes[]``), in order;
  every failure is UnschedulableAndUnresolvable:

  - a claim without a name → ``PersistentVolumeClaim had no name``;
  - a claim not in the lister → ``persistentvolumeclaim "<name>" not found``;
  - an unbound claim (no ``spec.volumeName``): without a class → ``PersistentVolumeClaim had
    no pv name and storageClass name``; its class not found → ``storageclass.storage.k8s.io
    "<name>" not found``; a class without ``volumeBindingMode`` → ``VolumeBindingMode not
    set for StorageClass "<name>"``; ``WaitForFirstConsumer`` → skipped (VolumeBinding
    places it); else → ``PersistentVolume had no name``;
  - the bound volume not found → ``persistentvolume "<name>" not found``;
  - else the volume's topology: each of ``failure-domain.beta.kubernetes.io/zone``,
    ``.../region``, ``topology.kubernetes.io/zone``, ``.../region`` it carries, its value
    split on ``__`` (``volumehelpers.LabelZonesToSet``; a value with an empty part is
    ignored).

  Skip when no volume has a topology label.
* Filter: a node without any of the four labels passes (a single-zone cluster); else each
  volume label's key (or, for a beta key the node lacks, its GA twin) must be on the node
  with one of the volume's values → else UnschedulableAndUnresolvable ``node(s) had no
  available volume zone``.

Not covered: nothing of the filter; the ``SignPod`` extension (pod signatures for batched
scheduling) does not exist here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    RESOURCE_PV,
    RESOURCE_PVC,
    RESOURCE_STORAGE_CLASS,
    WAIT_FOR_FIRST_CONSUMER,
    PVCInfo,
    PVInfo,
    StorageClassInfo,
    VolumeListers,
    not_found,
)
from ipscheduler.plugins.helper import missing_pre_filter_state

NAME = "VolumeZone"

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
"""Upstream's order (``topologyLabels``)."""
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
MULTI_ZONE_DELIMITER = "__"

_STATE_KEY = "PreFilter" + NAME


@dataclass(frozen=True)
class PVTopology:
    """One topology label of a volume: its key and the zones (or regions) it allows."""

    pv_name: str
    key: str
    values: frozenset[str]


def label_zones(value: str) -> frozenset[str] | None:
    """``volumehelpers.LabelZonesToSet``: ``value`` split on ``__``, each part trimmed; None
    when a part is empty (upstream's error, after which the label is ignored)."""
    parts = [p.strip() for p in value.split(MULTI_ZONE_DELIMITER)]
    return None if any(not p for p in parts) else frozenset(parts)


def pv_topologies(pv: PVInfo) -> tuple[PVTopology, ...]:
    """The topology labels of ``pv`` (``getPVTopologies``), in :data:`TOPOLOGY_LABELS` order."""
    out = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        zones = label_zones(value)
        if zones is not None:
            out.append(PVTopology(pv.name, key, zones))
    return tuple(out)


class VolumeZone:
    """PreFilter and Filter over the claim, volume and class listers (see the module doc)."""

    name: str = NAME

    def __init__(self, volumes: VolumeListers) -> None:
        self.volumes = volumes

    def topologies(self, pod: PodInfo) -> tuple[PVTopology, ...] | Status:
        """The topology of the pod's bound volumes (``getPVbyPod``), or the
        UnschedulableAndUnresolvable status that stops it."""
        out: list[PVTopology] = []
        for claim in pod.pvc_names:
            if not claim:
                return Status.unresolvable("PersistentVolumeClaim had no name", plugin=self.name)
            pvc = self.volumes.pvc(pod.namespace, claim)
            if pvc is None:
                return Status.unresolvable(not_found(RESOURCE_PVC, claim), plugin=self.name)
            if not pvc.volume_name:
                sc_name = pvc.storage_class
                if not sc_name:
                    return Status.unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name", plugin=self.name
                    )
                sc = self.volumes.storage_class(sc_name)
                if sc is None:
                    return Status.unresolvable(not_found(RESOURCE_STORAGE_CLASS, sc_name), plugin=self.name)
                if sc.volume_binding_mode is None:
                    return Status.unresolvable(
                        f'VolumeBindingMode not set for StorageClass "{sc_name}"', plugin=self.name
                    )
                if sc.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER:
                    continue
                return Status.unresolvable("PersistentVolume had no name", plugin=self.name)
            pv = self.volumes.pv(pvc.volume_name)
            if pv is None:
                return Status.unresolvable(not_found(RESOURCE_PV, pvc.volume_name), plugin=self.name)
            out.extend(pv_topologies(pv))
        return tuple(out)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """The volumes' topology into the cycle state; Skip when there is none."""
        got = self.topologies(pod)
        if isinstance(got, Status):
            return got
        if not got:
            return Status.skip()
        state.write(_STATE_KEY, got)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Every volume label matched by the node's (a node with no topology label passes)."""
        if not pod.pvc_names:
            return Status.success()
        topologies = state.get(_STATE_KEY)
        if topologies is None:
            return missing_pre_filter_state(_STATE_KEY, self.name)
        labels = node.labels
        if not any(k in labels for k in TOPOLOGY_LABELS):
            return Status.success()
        for t in topologies:
            value = labels.get(t.key)
            if value is None:
                value = labels.get(_GA.get(t.key, t.key))
            if value is None or value not in t.values:
                return Status.unresolvable(ERR_REASON_CONFLICT, plugin=self.name)
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A StorageClass added (hint: WaitForFirstConsumer), a node added or its labels (or
        taints) changed, a claim added or updated (hint: one the pod names), a volume added or
        updated (hint: added, or its topology changed)."""
        return [
            ClusterEventWithHint(events.STORAGE_CLASS_ADD, _after_storage_class_added),
            ClusterEventWithHint(events.NODE_ADD_OR_LABEL_OR_TAINT_CHANGE),
            ClusterEventWithHint(events.PVC_ADD_OR_UPDATE, _after_pvc_change),
            ClusterEventWithHint(events.PV_ADD_OR_UPDATE, _after_pv_change),
        ]


def _after_storage_class_added(pod: PodInfo, old: object, new: object) -> QueueingHint:
    if isinstance(new, StorageClassInfo) and new.volume_binding_mode == WAIT_FOR_FIRST_CONSUMER:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_pvc_change(pod: PodInfo, old: object, new: object) -> QueueingHint:
    if isinstance(new, PVCInfo) and new.namespace == pod.namespace and new.name in pod.pvc_names:
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_pv_change(pod: PodInfo, old: object, new: object) -> QueueingHint:
    if old is None:
        return QueueingHint.QUEUE
    if isinstance(old, PVInfo) and isinstance(new, PVInfo) and pv_topologies(old) == pv_topologies(new):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> VolumeZone:
    """The plugin's factory (registered as :data:`NAME`; no args): reads the handle's listers."""
    return VolumeZone(handle.volumes)
