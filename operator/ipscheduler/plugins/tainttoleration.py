"""TaintToleration: node taints versus pod tolerations.

Mirrors ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``:

* Filter: the first node taint with effect ``NoSchedule`` or ``NoExecute``
  that no pod toleration tolerates (``FindMatchingUntoleratedTaint`` with
  ``DoNotScheduleTaintsFilterFunc``) rejects the node as
  UnschedulableAndUnresolvable, reason ``node(s) had untolerated taint {key: value}``.
* Score: the number of ``PreferNoSchedule`` taints not tolerated by the
  pod's tolerations whose effect is ``PreferNoSchedule`` or empty
  (``countIntolerableTaintsPreferNoSchedule``); NormalizeScore reverses it,
  so the node with the fewest such taints gets MAX_NODE_SCORE.
"""

from __future__ import annotations

from collections.abc import Hashable

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    ClusterEventWithHint,
    CycleState,
    Handle,
    QueueingHint,
    Status,
    default_normalize,
)
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.plugins.helper import (
    EFFECT_PREFER_NO_SCHEDULE,
    find_untolerated_taint,
    tolerations_tolerate_taint,
)

NAME = "TaintToleration"

_FILTER_KEY = "TaintToleration/untolerated"
_UNSEEN = Taint("", "", "")
_SCORE_KEY = "TaintToleration/preferNoSchedule"


class TaintToleration:
    """Filter on NoSchedule/NoExecute taints; score on PreferNoSchedule taints."""

    name: str = NAME

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`:
        The pod's tolerations (Filter reads NoSchedule and NoExecute ones, Score PreferNoSchedule ones)."""
        return pod.tolerations

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` if it has a NoSchedule/NoExecute taint the pod does not tolerate.

        Nodes of one cycle mostly share their taints: the answer per distinct taint list is
        kept in ``state`` for the rest of the cycle."""
        if not node.taints:
            return Status.success()
        seen: dict[tuple[Taint, ...], Taint | None] = state.memo(_FILTER_KEY, dict)
        taint = seen.get(node.taints, _UNSEEN)
        if taint is _UNSEEN:
            taint = seen[node.taints] = find_untolerated_taint(node, pod.tolerations)
        if taint is None:
            return Status.success()
        return Status.unresolvable(f"node(s) had untolerated taint {taint}", plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added or its taints changed: retry the pod if it tolerates the node's
        taints now and did not before (``isSchedulableAfterNodeChange``)."""
        return [ClusterEventWithHint(events.NODE_ADD_OR_TAINT_CHANGE, _after_node_change)]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Count of PreferNoSchedule taints on ``node`` the pod does not tolerate (lower is better)."""
        if not node.taints:
            return 0
        seen: dict[tuple[Taint, ...], int] = state.memo(_SCORE_KEY, dict)
        count = seen.get(node.taints)
        if count is None:
            tols = tuple(t for t in pod.tolerations if t.effect in ("", EFFECT_PREFER_NO_SCHEDULE))
            count = seen[node.taints] = sum(
                1
                for taint in node.taints
                if taint.effect == EFFECT_PREFER_NO_SCHEDULE and not tolerations_tolerate_taint(tols, taint)
            )
        return count

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Reverse-normalize: fewest intolerable taints → MAX_NODE_SCORE."""
        default_normalize(scores, reverse=True)


def _after_node_change(pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
    if new is None or find_untolerated_taint(new, pod.tolerations) is not None:
        return QueueingHint.SKIP
    if old is not None and find_untolerated_taint(old, pod.tolerations) is None:
        return QueueingHint.SKIP  # it was tolerated before: not what rejected the pod
    return QueueingHint.QUEUE


def new(args: None, handle: Handle) -> TaintToleration:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return TaintToleration()
