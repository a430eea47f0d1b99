"""NodeUnschedulable: honour ``spec.unschedulable`` (``kubectl cordon``).

Mirrors ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``:
a cordoned node is rejected (UnschedulableAndUnresolvable) unless the pod
tolerates the taint ``node.kubernetes.io/unschedulable:NoSchedule``.
"""

from __future__ import annotations

from collections.abc import Hashable

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint

NAME = "NodeUnschedulable"

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

_UNSCHEDULABLE_TAINT = Taint(key=TAINT_NODE_UNSCHEDULABLE, effect="NoSchedule")


class NodeUnschedulable:
    """Filter: rejects cordoned nodes unless the pod tolerates the unschedulable taint."""

    name: str = NAME

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        The pod's tolerations (of the unschedulable taint)."""
        return pod.tolerations

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success unless ``node`` is unschedulable and the pod lacks a matching toleration."""
        if not node.unschedulable:
            return Status.success()
        if any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return Status.success()
        return Status.unresolvable(ERR_REASON_UNSCHEDULABLE, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or its taints (``spec.unschedulable``) changed: retry the pod if
        the node now passes (``isSchedulableAfterNodeChange``)."""
        return [ClusterEventWithHint(events.NODE_ADD_OR_TAINT_CHANGE, self._after_node_change)]

    def _after_node_change(self, pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
        if new is None or not self.filter(CycleState(), pod, new).is_success():
            return QueueingHint.SKIP
        return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> NodeUnschedulable:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodeUnschedulable()
