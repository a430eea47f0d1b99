"""VolumeRestrictions: same-disk conflicts of inline volumes, and ReadWriteOncePod claims.

Mirrors kube-scheduler 1.34's
``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go``:

* PreFilter looks up each ``persistentVolumeClaim`` of the pod (``spec.volumes[]``) in the
  claim lister: a claim that is not there → UnschedulableAndUnresolvable with the API
  server's NotFound message (``persistentvolumeclaim "data" not found``). The claims with the
  ``ReadWriteOncePod`` access mode are kept, with how many of them a pod already placed
  (bound or assumed, on any node of the snapshot: ``StorageInfos().IsPVCUsedByPods``) uses.
  Skip when the pod has no inline disk to check and no such claim is in use.
* Filter: an inline GCE PD, AWS EBS, RBD or iSCSI volume of the pod that conflicts with one
  of a pod on the node (:meth:`~ipscheduler.framework.types.DiskVolume.conflicts`: same PD
  unless both read-only, same EBS volume always, same IQN unless both read-only, same RBD
  pool and image with a monitor in common unless both read-only) → Unschedulable ``node(s)
  had no available disk``; else, a ReadWriteOncePod claim in use by another pod →
  Unschedulable ``node has pod using PersistentVolumeClaim with the same name and
  ReadWriteOncePod access mode`` (Unschedulable, not UnschedulableAndUnresolvable, as
  upstream: preempting the pod that holds the claim frees it).

* PreFilterExtensions (``AddPod``/``RemovePod``, for preemption's what-if runs on a cloned
  cycle state): a pod added or removed changes the count of ReadWriteOncePod claims in use
  by the claims of the pod's namespace it names (upstream counts the claim names whatever the
  namespace; a same-named claim of another namespace is another claim, so it is not counted
  here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import (
    READ_WRITE_ONCE_POD,
    RESOURCE_PVC,
    PVCInfo,
    VolumeListers,
    not_found,
)
from ipscheduler.plugins.helper import missing_pre_filter_state

NAME = "VolumeRestrictions"

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)

_STATE_KEY = "PreFilter" + NAME


@dataclass(frozen=True)
class _State:
    """The pod's ReadWriteOncePod claim names and how many of them pods already placed use."""

    rwop_claims: frozenset[str]
    conflicting: int


def disks_conflict(pod: PodInfo, node: NodeInfo) -> bool:
    """True if an inline disk of ``pod`` conflicts with one of a pod on ``node``
    (``satisfyVolumeConflicts`` negated)."""
    if not pod.disk_volumes:
        return False
    return any(d.conflicts(e) for d in pod.disk_volumes for other in node.pods for e in other.disk_volumes)


class VolumeRestrictions:
    """PreFilter and Filter over the claim lister (see the module doc)."""

    name: str = NAME

    def __init__(self, volumes: VolumeListers) -> None:
        self.volumes = volumes

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Look the pod's claims up; keep its ReadWriteOncePod ones and count those in use.
        UnschedulableAndUnresolvable when a claim is missing; Skip when nothing is to check."""
        rwop: set[str] = set()
        for claim in pod.pvc_names:
            pvc = self.volumes.pvc(pod.namespace, claim)
            if pvc is None:
                return Status.unresolvable(not_found(RESOURCE_PVC, claim), plugin=self.name)
            if READ_WRITE_ONCE_POD in pvc.access_modes:
                rwop.add(pvc.name)
        conflicting = 0
        if rwop:
            used = {
                c
                for node in nodes.values()
                for p in node.pods
                if p.namespace == pod.namespace and p.uid != pod.uid
                for c in p.pvc_names
            }
            conflicting = len(rwop & used)
        if not pod.disk_volumes and conflicting == 0:
            return Status.skip()
        state.write(_STATE_KEY, _State(frozenset(rwop), conflicting))
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Disk conflicts on ``node`` first, then the ReadWriteOncePod claims in use."""
        if disks_conflict(pod, node):
            return Status.unschedulable(ERR_REASON_DISK_CONFLICT, plugin=self.name)
        got = state.get(_STATE_KEY)
        if not isinstance(got, _State):
            return missing_pre_filter_state(_STATE_KEY, self.name)
        if got.conflicting > 0:
            return Status.unschedulable(ERR_REASON_RWOP_CONFLICT, plugin=self.name)
        return Status.success()

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """``AddPod``: ``pod_to_add``'s uses of the pod's ReadWriteOncePod claims count."""
        return self._update(state, pod, pod_to_add, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """``RemovePod``: ``pod_to_remove``'s uses of them no longer count."""
        return self._update(state, pod, pod_to_remove, -1)

    def _update(self, state: CycleState, pod: PodInfo, other: PodInfo, sign: int) -> Status:
        got = state.get(_STATE_KEY)
        if not isinstance(got, _State):
            return missing_pre_filter_state(_STATE_KEY, self.name)
        if other.namespace == pod.namespace:
            uses = sum(1 for c in other.pvc_names if c in got.rwop_claims)
            if uses:
                state.write(_STATE_KEY, replace(got, conflicting=got.conflicting + sign * uses))
        return Status.success()

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod deleted (hint: it held a conflicting disk or one of the pod's claims),
        a node added (or its labels or taints changed, as upstream without hints), a claim
        added (hint: one the pod names, in its namespace)."""
        return [
            ClusterEventWithHint(events.ASSIGNED_POD_DELETE, _after_pod_deleted),
            ClusterEventWithHint(events.NODE_ADD_OR_LABEL_OR_TAINT_CHANGE),
            ClusterEventWithHint(events.PVC_ADD, _after_pvc_added),
        ]


def _after_pod_deleted(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    """``isSchedulableAfterPodDeleted``: the deleted pod (same namespace) had a disk that
    conflicts with the pod's, or a claim the pod names."""
    if old is None or old.namespace != pod.namespace:
        return QueueingHint.SKIP
    if any(d.conflicts(e) for d in pod.disk_volumes for e in old.disk_volumes):
        return QueueingHint.QUEUE
    if set(pod.pvc_names) & set(old.pvc_names):
        return QueueingHint.QUEUE
    return QueueingHint.SKIP


def _after_pvc_added(pod: PodInfo, old: object, new: object) -> QueueingHint:
    """``isSchedulableAfterPersistentVolumeClaimAdded``: a claim of the pod's namespace that
    the pod names."""
    if not isinstance(new, PVCInfo) or new.namespace != pod.namespace:
        return QueueingHint.SKIP
    return QueueingHint.QUEUE if new.name in pod.pvc_names else QueueingHint.SKIP


def new(args: None, handle: Handle) -> VolumeRestrictions:
    """The plugin's factory (registered as :data:`NAME`; no args): reads the handle's claim
    lister."""
    return VolumeRestrictions(handle.volumes)
