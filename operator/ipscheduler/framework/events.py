"""The cluster events the scheduler reacts to, and how an update is classified.

As upstream ``pkg/scheduler/framework/events.go``: the informer handlers
(:mod:`ipscheduler.scheduler.eventhandlers`) send these
:class:`~ipscheduler.framework.interface.ClusterEvent` values, with the object before and
after, to the queue; plugins register the ones that may
help the pods they reject (:class:`~ipscheduler.framework.interface.EnqueueExtensions`).
Extensions define the events of their own resources beside them (the NodeIPPools':
:mod:`ipscheduler.underlayip.events`).
"""

from __future__ import annotations

from ipscheduler.framework.interface import ActionType, ClusterEvent, EventResource
from ipscheduler.framework.types import NodeInfo, PodInfo

NODE_ADD = ClusterEvent(EventResource.NODE, ActionType.ADD, "NodeAdd")
NODE_DELETE = ClusterEvent(EventResource.NODE, ActionType.DELETE, "NodeDelete")
ASSIGNED_POD_ADD = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ADD, "AssignedPodAdd")
ASSIGNED_POD_DELETE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.DELETE, "AssignedPodDelete")

# What plugins register beyond the events above (upstream's plugins write these inline
# in their ``EventsToRegister``). They carry no label: the queue logs the label of
# the event sent, never that of a registration.

NODE_ADD_OR_LABEL_CHANGE = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
"""A node added or its labels changed (NodeAffinity, InterPodAffinity)."""
NODE_ADD_OR_TAINT_CHANGE = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_TAINT)
"""A node added or its taints or ``spec.unschedulable`` changed (TaintToleration,
NodeUnschedulable)."""
NODE_ADD_OR_CONDITION_CHANGE = ClusterEvent(
    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_CONDITION
)
"""A node added or its conditions changed (NodeReady)."""
NODE_ADD_OR_FIT_CHANGE = ClusterEvent(
    EventResource.NODE,
    ActionType.ADD
    | ActionType.UPDATE_NODE_ALLOCATABLE
    | ActionType.UPDATE_NODE_LABEL
    | ActionType.UPDATE_NODE_TAINT,
)
"""A node added or its allocatable, labels or taints changed (NodeResourcesFit)."""
NODE_DOMAIN_CHANGE = ClusterEvent(
    EventResource.NODE,
    ActionType.ADD | ActionType.DELETE | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT,
)
"""A node added, deleted, or its labels or taints changed: the topology domains
(PodTopologySpread)."""
ASSIGNED_POD_CHANGE = ClusterEvent(EventResource.ASSIGNED_POD, ActionType.ALL)
"""A bound pod added, updated or deleted (InterPodAffinity, PodTopologySpread)."""
ASSIGNED_POD_DELETE_OR_SCALE_DOWN = ClusterEvent(
    EventResource.ASSIGNED_POD, ActionType.DELETE | ActionType.UPDATE_POD_SCALE_DOWN
)
"""A bound pod deleted or its requests lowered: requests freed (NodeResourcesFit)."""
NODE_ADD_OR_DELETE = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.DELETE)
"""A node added or deleted: the node set changed."""
NODE_ADD_OR_ALLOCATABLE_CHANGE = ClusterEvent(
    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_ALLOCATABLE
)
"""A node added or its allocatable changed: room for more pods."""


def node_update_event(old: NodeInfo, new: NodeInfo) -> ClusterEvent | None:
    """The event for a node update: one action flag per part that changed, None when nothing
    the plugins read did (a heartbeat). Upstream ``NodeSchedulingPropertiesChange``
    (``pkg/scheduler/framework/events.go``) sends one event per part; one event with the
    flags combined matches the same registrations."""
    action = ActionType(0)
    if old.allocatable != new.allocatable:
        action |= ActionType.UPDATE_NODE_ALLOCATABLE
    if old.labels != new.labels:
        action |= ActionType.UPDATE_NODE_LABEL
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        action |= ActionType.UPDATE_NODE_TAINT
    if old.ready != new.ready:
        action |= ActionType.UPDATE_NODE_CONDITION
    if not action:
        if old == new:
            return None
        action = ActionType.UPDATE_OTHER
    return ClusterEvent(EventResource.NODE, action, "NodeUpdate")


def assigned_pod_update_event(old: PodInfo, new: PodInfo) -> ClusterEvent | None:
    """The event for an update of a bound pod: its labels changed (affinity and spreading
    read them), its requests went down (in-place scale-down), or something else; None when
    it is unchanged. Upstream ``PodSchedulingPropertiesChange``."""
    action = ActionType(0)
    if old.labels != new.labels:
        action |= ActionType.UPDATE_POD_LABEL
    if any(new.requests.get(k, 0) < v for k, v in old.requests.items()):
        action |= ActionType.UPDATE_POD_SCALE_DOWN
    if not action:
        if old == new:
            return None
        action = ActionType.UPDATE_OTHER
    return ClusterEvent(EventResource.ASSIGNED_POD, action, "AssignedPodUpdate")


# The storage objects the volume plugins read (upstream's ``PersistentVolumeClaim``,
# ``PersistentVolume``, ``StorageClass`` and ``CSINode`` resources). The informer handlers send
# these with the views of :mod:`ipscheduler.framework.volumes` as ``old``/``new``.

PVC_ADD = ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD, "PersistentVolumeClaimAdd")
PVC_UPDATE = ClusterEvent(
    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.UPDATE_OTHER, "PersistentVolumeClaimUpdate"
)
PVC_DELETE = ClusterEvent(
    EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.DELETE, "PersistentVolumeClaimDelete"
)
PV_ADD = ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD, "PersistentVolumeAdd")
PV_UPDATE = ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.UPDATE_OTHER, "PersistentVolumeUpdate")
PV_DELETE = ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.DELETE, "PersistentVolumeDelete")
STORAGE_CLASS_ADD = ClusterEvent(EventResource.STORAGE_CLASS, ActionType.ADD, "StorageClassAdd")
STORAGE_CLASS_UPDATE = ClusterEvent(
    EventResource.STORAGE_CLASS, ActionType.UPDATE_OTHER, "StorageClassUpdate"
)
STORAGE_CLASS_DELETE = ClusterEvent(EventResource.STORAGE_CLASS, ActionType.DELETE, "StorageClassDelete")
CSI_NODE_ADD = ClusterEvent(EventResource.CSI_NODE, ActionType.ADD, "CSINodeAdd")
CSI_NODE_UPDATE = ClusterEvent(EventResource.CSI_NODE, ActionType.UPDATE_OTHER, "CSINodeUpdate")
CSI_NODE_DELETE = ClusterEvent(EventResource.CSI_NODE, ActionType.DELETE, "CSINodeDelete")

VOLUME_EVENTS: dict[EventResource, tuple[ClusterEvent, ClusterEvent, ClusterEvent]] = {
    EventResource.PERSISTENT_VOLUME_CLAIM: (PVC_ADD, PVC_UPDATE, PVC_DELETE),
    EventResource.PERSISTENT_VOLUME: (PV_ADD, PV_UPDATE, PV_DELETE),
    EventResource.STORAGE_CLASS: (STORAGE_CLASS_ADD, STORAGE_CLASS_UPDATE, STORAGE_CLASS_DELETE),
    EventResource.CSI_NODE: (CSI_NODE_ADD, CSI_NODE_UPDATE, CSI_NODE_DELETE),
}
"""Each storage resource's (add, update, delete) events."""

PVC_ADD_OR_UPDATE = ClusterEvent(EventResource.PERSISTENT_VOLUME_CLAIM, ActionType.ADD | ActionType.UPDATE)
"""A claim added or changed (VolumeZone, VolumeBinding)."""
PV_ADD_OR_UPDATE = ClusterEvent(EventResource.PERSISTENT_VOLUME, ActionType.ADD | ActionType.UPDATE)
"""A volume added or changed (VolumeZone, VolumeBinding)."""
CSI_NODE_ADD_OR_UPDATE = ClusterEvent(EventResource.CSI_NODE, ActionType.ADD | ActionType.UPDATE)
"""A CSINode added or changed (its attach limits)."""
NODE_ADD_OR_LABEL_OR_TAINT_CHANGE = ClusterEvent(
    EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL | ActionType.UPDATE_NODE_TAINT
)
"""A node added or its labels or taints changed (the volume plugins register label and taint
changes beside Add, as upstream does without queueing hints: kubernetes#109437)."""


def volume_event(resource: EventResource, old: object, new: object) -> ClusterEvent | None:
    """The event of a storage informer's change from ``old`` to ``new`` (None: absent):
    add, delete, or update; None for an update that changed nothing (a re-LIST's echo)."""
    add, update, delete = VOLUME_EVENTS[resource]
    if new is None:
        return None if old is None else delete
    if old is None:
        return add
    return None if old == new else update
