"""NodeName: a pod that names its node only fits that node.

Mirrors ``pkg/scheduler/framework/plugins/nodename/node_name.go``: when the
pod names a node and it is not this one, the node is rejected as
UnschedulableAndUnresolvable, reason ``node(s) didn't match the requested
node name``. The name comes from ``spec.nodeName`` (a bound pod, e.g. under
``explain``) or, for a pending pod, from its required node affinity
``matchFields`` on ``metadata.name`` with operator ``In`` (how a pod pinned
to a node reaches a scheduler; upstream leaves that form to NodeAffinity).
The affinity pins the pod only if every ``nodeSelectorTerm`` (they are
ORed) carries such a field; the pod may then go to any of the named nodes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from ipscheduler.framework import events
from ipscheduler.framework.interface import ClusterEventWithHint, CycleState, Handle, QueueingHint, Status
from ipscheduler.framework.nodememo import freeze
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NodeName"

ERR_REASON = "node(s) didn't match the requested node name"


def _term_names(term: object) -> frozenset[str] | None:
    """Names one nodeSelectorTerm allows by ``metadata.name In``; None if it has no such field."""
    fields = term.get("matchFields") if isinstance(term, Mapping) else None
    pinned = [
        frozenset(v for v in f["values"] if isinstance(v, str))
        for f in (fields if isinstance(fields, list) else [])
        if isinstance(f, Mapping)
        and f.get("key") == "metadata.name"
        and f.get("operator") == "In"
        and isinstance(f.get("values"), list)
    ]
    return frozenset.intersection(*pinned) if pinned else None  # fields of a term are ANDed


def requested_node_names(pod: PodInfo) -> frozenset[str] | None:
    """The node names the pod may run on, or None if it does not name any."""
    if pod.node_name:
        return frozenset({pod.node_name})
    node_affinity = pod.affinity.get("nodeAffinity")
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, Mapping)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return None
    names: set[str] = set()
    for term in terms:  # terms are ORed
        allowed = _term_names(term)
        if allowed is None:
            return None
        names |= allowed
    return frozenset(names)


_STATE_KEY = "NodeName/names"


class NodeName:
    """Filter: reject every node but the one the pod names."""

    name: str = NAME

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        The names the pod may run on come from its ``nodeName`` and required node affinity."""
        return (pod.node_name, freeze(pod.affinity.get("nodeAffinity")))

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Success if the pod names no node or names this one (the names are read from the
        pod once per cycle and kept in ``state``)."""
        names = state.memo(_STATE_KEY, lambda: requested_node_names(pod))
        if names is None or node.name in names:
            return Status.success()
        return Status.unresolvable(ERR_REASON, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added: retry the pod if it is a node the pod names
        (``isSchedulableAfterNodeAdd``)."""
        return [ClusterEventWithHint(events.NODE_ADD, _after_node_add)]


def _after_node_add(pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
    names = requested_node_names(pod)
    if new is None or (names is not None and new.name not in names):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> NodeName:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodeName()
