"""NodePorts: a pod's host ports must be free on the node.

Mirrors ``pkg/scheduler/framework/plugins/nodeports/node_ports.go`` (1.34):
the wanted ports are the ``hostPort`` > 0 entries of the app containers and
of sidecar init containers (``restartPolicy: Always``), as
``schedutil.GetHostPorts``; :attr:`PodInfo.host_ports` already holds them.
A wanted port conflicts with a port in use on the node when port and
protocol are equal and the host IPs overlap (``HostPortInfo.CheckConflict``:
an empty ``hostIP`` means ``0.0.0.0``, which overlaps every address; see
:meth:`HostPort.conflicts`). Rejection is Unschedulable (deleting the other
pod frees the port), reason ``node(s) didn't have free ports for the
requested pod ports``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NodePorts"

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"


def fits_ports(pod: PodInfo, node: NodeInfo) -> bool:
    """True if none of the pod's host ports conflicts with one in use on ``node`` (``Fits``)."""
    used = node.used_ports
    return not any(want.conflicts(have) for want in pod.host_ports for have in used)


class NodePorts:
    """Filter: reject nodes where a requested host port is already taken."""

    name: str = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Skip when the pod asks for no host port (``node_ports.go`` PreFilter)."""
        return Status.success() if pod.host_ports else Status.skip()

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        The pod's host ports (the node's used ports come from its pods, in the NodeInfo)."""
        return pod.host_ports

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success unless one of the pod's host ports conflicts with the node's used ports."""
        if not pod.host_ports or fits_ports(pod, node):
            return Status.success()
        return Status.unschedulable(ERR_REASON, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod deleted: retry the pod if the deleted one held a port it wants
        (``isSchedulableAfterPodDeleted``). A node added: retry (it has every port free)."""
        return [
            ClusterEventWithHint(events.ASSIGNED_POD_DELETE, _after_pod_deleted),
            ClusterEventWithHint(events.NODE_ADD),
        ]


def _after_pod_deleted(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    if old is None or not any(want.conflicts(had) for want in pod.host_ports for had in old.host_ports):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> NodePorts:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodePorts()
