"""NodeUnschedulable: honour ``spec.unschedulable`` (``kubectl cordon``).

Mirrors ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``:
a cordoned node is rejected (UnschedulableAndUnresolvable) unless the pod
tolerates the taint ``node.kubernetes.io/unschedulable:NoSchedule``.
"""

from __future__ import annotations

from ipscheduler.framework.interface import CycleState, Handle, Status
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint

NAME = "NodeUnschedulable"

ERR_REASON_UNSCHEDULABLE = "node(s) were unschedulable"
TAINT_NODE_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

_UNSCHEDULABLE_TAINT = Taint(key=TAINT_NODE_UNSCHEDULABLE, effect="NoSchedule")


class NodeUnschedulable:
    """Filter: rejects cordoned nodes unless the pod tolerates the unschedulable taint."""

    name: str = NAME

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success unless ``node`` is unschedulable and the pod lacks a matching toleration."""
        if not node.unschedulable:
            return Status.success()
        if any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return Status.success()
        return Status.unresolvable(ERR_REASON_UNSCHEDULABLE, plugin=self.name)


def new(args: None, handle: Handle) -> NodeUnschedulable:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodeUnschedulable()
