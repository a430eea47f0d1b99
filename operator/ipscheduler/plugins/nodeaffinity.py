"""NodeAffinity: ``spec.nodeSelector`` and ``spec.affinity.nodeAffinity``.

Mirrors ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`` and
the matching rules of
``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go``
(with label requirements as in
``staging/src/k8s.io/apimachinery/pkg/labels/selector.go``):

* Filter: every ``nodeSelector`` entry must equal a node label, AND, when
  ``requiredDuringSchedulingIgnoredDuringExecution`` is set, one of its
  ``nodeSelectorTerms`` must match (terms are ORed; a term's
  ``matchExpressions`` and ``matchFields`` are ANDed; a term with neither,
  or an empty terms list, matches nothing). A term with an invalid
  requirement (unknown operator, wrong number of values, non-integer Gt/Lt
  value, invalid label key/value) matches nothing, as upstream's lazy parse
  errors do. Malformed input (wrong JSON types) never raises: it does not
  match. Rejection is UnschedulableAndUnresolvable with reason
  ``node(s) didn't match Pod's node affinity/selector``.
* Score: the sum of the weights of the
  ``preferredDuringSchedulingIgnoredDuringExecution`` terms that match the
  node; NormalizeScore scales so the best node gets MAX_NODE_SCORE. Upstream
  fails the whole Score on an invalid preferred term; here such a term (or a
  non-positive / non-integer weight) simply contributes nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    ClusterEventWithHint,
    CycleState,
    Handle,
    QueueingHint,
    Status,
    default_normalize,
)
from ipscheduler.framework.nodememo import freeze
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.helper import match_node_selector_term, match_required_node_affinity

NAME = "NodeAffinity"

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"


def preferred_score(pod: PodInfo, node: NodeInfo) -> int:
    """Sum of weights of the pod's preferred node-affinity terms that match ``node``."""
    node_affinity = pod.affinity.get("nodeAffinity")
    if not isinstance(node_affinity, Mapping):
        return 0
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(preferred, list):
        return 0
    total = 0
    for item in preferred:
        if not isinstance(item, Mapping):
            continue
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool) or weight <= 0:
            continue
        if match_node_selector_term(item.get("preference"), node):
            total += weight
    return total


class NodeAffinity:
    """Filter on nodeSelector + required node affinity; score on preferred node affinity."""

    name: str = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Skip when the pod has no nodeSelector and no required node affinity: Filter has
        nothing to check (``node_affinity.go`` PreFilter)."""
        node_affinity = pod.affinity.get("nodeAffinity")
        no_required = node_affinity is None or (
            isinstance(node_affinity, Mapping)
            and node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is None
        )
        return Status.skip() if no_required and not pod.node_selector else Status.success()

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Skip when the pod has no preferred node affinity: every node would score 0
        (``node_affinity.go`` PreScore)."""
        node_affinity = pod.affinity.get("nodeAffinity")
        preferred = (
            node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
            if isinstance(node_affinity, Mapping)
            else None
        )
        return Status.success() if preferred else Status.skip()

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        The pod's nodeSelector and node affinity (required for Filter, preferred for Score)."""
        return (freeze(pod.node_selector), freeze(pod.affinity.get("nodeAffinity")))

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` unless it satisfies the pod's nodeSelector and required node affinity."""
        if match_required_node_affinity(pod, node):
            return Status.success()
        return Status.unresolvable(ERR_REASON_POD, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added or its labels changed: retry the pod if the node matches its
        nodeSelector and required affinity now and did not before
        (``isSchedulableAfterNodeChange``)."""
        return [ClusterEventWithHint(events.NODE_ADD_OR_LABEL_CHANGE, _after_node_change)]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Sum of the weights of matching preferred scheduling terms."""
        return preferred_score(pod, node)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Scale so the highest-scoring node gets MAX_NODE_SCORE."""
        default_normalize(scores)


def _after_node_change(pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
    if new is None or not match_required_node_affinity(pod, new):
        return QueueingHint.SKIP
    if old is not None and match_required_node_affinity(pod, old):
        return QueueingHint.SKIP  # it matched before: not what rejected the pod
    return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> NodeAffinity:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return NodeAffinity()
