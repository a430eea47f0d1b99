"""NodeReady: skip nodes whose ``Ready`` condition is not ``True``.

Not a kube-scheduler plugin: upstream relies on the node lifecycle
controller's ``node.kubernetes.io/not-ready`` / ``unreachable`` taints
(handled by TaintToleration). We also check the condition directly, because
the taints lag the condition. The rejection is plain ``Unschedulable``
(readiness can change, so the pod is worth retrying).
"""

from __future__ import annotations

from collections.abc import Hashable

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NodeReady"

ERR_REASON_NOT_READY = "node(s) were not ready"


class NodeReady:
    """Filter: rejects nodes that are not Ready."""

    name: str = NAME

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        Nothing of the pod: the node's Ready condition alone decides."""
        return ()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success if ``node`` is Ready, else Unschedulable ``node(s) were not ready``."""
        if node.ready:
            return Status.success()
        return Status.unschedulable(ERR_REASON_NOT_READY, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added, or its conditions changed: retry the pod if the node is Ready."""
        return [ClusterEventWithHint(events.NODE_ADD_OR_CONDITION_CHANGE, _after_node_change)]


def _after_node_change(pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
    return QueueingHint.QUEUE if new is not None and new.ready else QueueingHint.SKIP


def new(args: None, handle: Handle) -> NodeReady:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodeReady()
