"""PodTopologySpread: ``spec.topologySpreadConstraints``.

Mirrors kube-scheduler 1.34's
``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go`` (PreFilter,
Filter), ``.../podtopologyspread/scoring.go`` (PreScore, Score,
NormalizeScore) and ``.../podtopologyspread/common.go`` (constraint parsing,
node inclusion policies, pod counting):

* Constraint parsing (``filterTopologySpreadConstraints``): only the pod's own
  constraints with the ``whenUnsatisfiable`` of the extension point
  (``DoNotSchedule`` for Filter, ``ScheduleAnyway`` for Score); ``minDomains``
  defaults to 1, ``nodeAffinityPolicy`` to ``Honor``, ``nodeTaintsPolicy`` to
  ``Ignore``; ``matchLabelKeys`` adds ``key In (pod's value)`` for each key the
  pod has (a null labelSelector stays match-nothing). An invalid selector
  makes PreFilter return Error.
* Counting (``countPodsMatchSelector``): pods in the incoming pod's namespace,
  not terminating, whose labels match the selector; an empty selector ``{}``
  counts nothing (upstream quirk, while it still self-matches).
* PreFilter: a node is a domain member only if it carries *every*
  constraint's topologyKey and passes the constraint's inclusion policies
  (Honor nodeAffinity: the pod's nodeSelector + required node affinity;
  Honor taints: no untolerated NoSchedule/NoExecute taint). Domains with zero
  matching pods count. The global minimum per constraint is the smallest
  domain count, or 0 when there are fewer domains than ``minDomains``.
* Filter: a node without a constraint's topologyKey →
  UnschedulableAndUnresolvable ``node(s) didn't match pod topology spread
  constraints (missing required label)``; ``count(node's domain) +
  selfMatch - globalMin > maxSkew`` → Unschedulable ``node(s) didn't match
  pod topology spread constraints``. ``selfMatch`` is 1 if the incoming pod
  matches the constraint's selector.
* Score (ScheduleAnyway): nodes lacking a topologyKey are ignored (score 0).
  Per constraint, ``count * log(domains + 2) + (maxSkew - 1)`` summed and
  rounded, where ``count`` is the matching pods in the node's domain (for
  ``kubernetes.io/hostname``, on the node itself) and ``domains`` the distinct
  values among the scored nodes (for hostname, the number of non-ignored
  scored nodes). NormalizeScore: ``100 * (max + min - s) // max`` (fewer pods
  → higher), all 100 when max is 0, ignored nodes 0.

Not implemented: kube-scheduler's cluster-level default constraints
(``defaultConstraints`` / system defaulting: hostname maxSkew 3 and zone
maxSkew 5, ScheduleAnyway, selected by the pod's Services/ReplicaSets/...).
A pod that declares no constraints is neither filtered nor scored here.

Our framework has no PreScore point: Score records the nodes it is called
with and NormalizeScore (which sees all of them) computes upstream's PreScore
over exactly those nodes before normalizing; the raw value Score returns uses
all PreFilter nodes as an approximation. :meth:`PodTopologySpread.pre_score`
computes the exact state up front when a caller can provide the feasible
nodes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipscheduler.framework import events
from ipscheduler.framework.interface import MAX_NODE_SCORE, ClusterEventWithHint, CycleState, Handle, Status
from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector, Requirement
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.helper import (
    find_untolerated_taint,
    match_required_node_affinity,
    missing_pre_filter_state,
)

NAME = "PodTopologySpread"

ERR_REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
ERR_REASON_NODE_LABEL_NOT_MATCH = ERR_REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
POLICY_HONOR = "Honor"
POLICY_IGNORE = "Ignore"
LABEL_HOSTNAME = "kubernetes.io/hostname"

_MAX_INT32 = 2**31 - 1
_PRE_FILTER_KEY = "PodTopologySpread/preFilter"
_ALL_NODES_KEY = "PodTopologySpread/allNodes"
_PRE_SCORE_KEY = "PodTopologySpread/preScore"
_SCORED_NODES_KEY = "PodTopologySpread/scoredNodes"


@dataclass(frozen=True)
class SpreadConstraint:
    """A parsed ``TopologySpreadConstraint`` (upstream ``topologySpreadConstraint``)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = POLICY_HONOR
    node_taints_policy: str = POLICY_IGNORE

    def match_node_inclusion_policies(self, pod: PodInfo, node: NodeInfo) -> bool:
        """Whether ``node`` counts as a domain member for ``pod`` under the two policies."""
        if self.node_affinity_policy == POLICY_HONOR and not match_required_node_affinity(pod, node):
            return False
        return not (
            self.node_taints_policy == POLICY_HONOR
            and find_untolerated_taint(node, pod.tolerations) is not None
        )


def _int_field(raw: Mapping[str, Any], name: str, default: int | None) -> int:
    value = raw.get(name)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidSelectorError(f"{name} must be an integer, got {value!r}")
    return value


def parse_constraints(pod: PodInfo, action: str) -> tuple[SpreadConstraint, ...]:
    """The pod's constraints whose ``whenUnsatisfiable`` is ``action``; raises ValueError if malformed."""
    out = []
    for raw in pod.topology_spread:
        if raw.get("whenUnsatisfiable") != action:
            continue
        key = raw.get("topologyKey")
        if not isinstance(key, str):
            raise InvalidSelectorError(f"topologyKey must be a string, got {key!r}")
        selector = LabelSelector.parse(raw.get("labelSelector"))
        match_label_keys = raw.get("matchLabelKeys")
        if isinstance(match_label_keys, list):
            extra = [
                Requirement(k, "In", frozenset({pod.labels[k]}))
                for k in match_label_keys
                if isinstance(k, str) and k in pod.labels
            ]
            if extra:
                selector = selector.with_requirements(extra)
        affinity_policy = raw.get("nodeAffinityPolicy")
        taints_policy = raw.get("nodeTaintsPolicy")
        out.append(
            SpreadConstraint(
                max_skew=_int_field(raw, "maxSkew", None),
                topology_key=key,
                selector=selector,
                min_domains=_int_field(raw, "minDomains", 1),
                node_affinity_policy=affinity_policy if isinstance(affinity_policy, str) else POLICY_HONOR,
                node_taints_policy=taints_policy if isinstance(taints_policy, str) else POLICY_IGNORE,
            )
        )
    return tuple(out)


def node_labels_match_spread_constraints(
    labels: Mapping[str, str], constraints: Iterable[SpreadConstraint]
) -> bool:
    """Whether ``labels`` carry every constraint's topologyKey."""
    return all(c.topology_key in labels for c in constraints)


def count_pods_match_selector(pods: Iterable[PodInfo], selector: LabelSelector, namespace: str) -> int:
    """Non-terminating pods in ``namespace`` matching ``selector``; an empty selector counts 0."""
    if selector.empty:
        return 0
    return sum(1 for p in pods if not p.deleting and p.namespace == namespace and selector.matches(p.labels))


@dataclass
class _PreFilterState:
    constraints: tuple[SpreadConstraint, ...] = ()
    tp_value_to_match_num: list[dict[str, int]] = field(default_factory=list)
    min_match_num: list[int] = field(default_factory=list)

    def clone(self) -> _PreFilterState:
        """A copy with its own counts (upstream ``preFilterState.Clone``)."""
        return _PreFilterState(
            self.constraints, [dict(m) for m in self.tp_value_to_match_num], list(self.min_match_num)
        )

    def update_with_pod(self, updated: PodInfo, preemptor: PodInfo, node: NodeInfo, delta: int) -> None:
        """Count ``updated`` ``delta`` times more in ``node``'s domains (upstream
        ``preFilterState.updateWithPod``): only a pod of the preemptor's namespace that a
        constraint's selector matches, on a node with every topology key that the
        constraint's node inclusion policies take."""
        if updated.namespace != preemptor.namespace or not self.constraints:
            return
        if not node_labels_match_spread_constraints(node.labels, self.constraints):
            return
        for i, c in enumerate(self.constraints):
            if not c.selector.matches(updated.labels) or not c.match_node_inclusion_policies(preemptor, node):
                continue
            counts = self.tp_value_to_match_num[i]
            value = node.labels[c.topology_key]
            counts[value] = counts.get(value, 0) + delta
            self.min_match_num[i] = min(counts.values(), default=_MAX_INT32)

    def global_min(self, i: int) -> int:
        """The minimum domain count of constraint ``i``, 0 if there are fewer domains than minDomains."""
        if len(self.tp_value_to_match_num[i]) < self.constraints[i].min_domains:
            return 0
        return self.min_match_num[i]


@dataclass
class _PreScoreState:
    constraints: tuple[SpreadConstraint, ...] = ()
    ignored_nodes: set[str] = field(default_factory=set)
    topology_value_to_pod_counts: list[dict[str, int]] = field(default_factory=list)
    topology_normalizing_weight: list[float] = field(default_factory=list)
    exact: bool = True


def topology_normalizing_weight(size: int) -> float:
    """``log(size + 2)``: counts in topologies with few domains weigh less."""
    return math.log(size + 2)


def score_for_count(count: int, max_skew: int, weight: float) -> float:
    """``count * weight + (maxSkew - 1)``."""
    return count * weight + (max_skew - 1)


def _round_half_away(x: float) -> int:
    """Go's math.Round (half away from zero)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


class PodTopologySpread:
    """Filter on DoNotSchedule spread constraints; score on ScheduleAnyway ones."""

    name: str = NAME

    # -- PreFilter / Filter ----------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Count matching pods per domain of every DoNotSchedule constraint."""
        state.write(_ALL_NODES_KEY, tuple(nodes.values()))
        try:
            constraints = parse_constraints(pod, DO_NOT_SCHEDULE)
        except ValueError as e:
            return Status.error(f"get constraints from pod: {e}", plugin=self.name)
        s = _PreFilterState(constraints=constraints)
        state.write(_PRE_FILTER_KEY, s)
        if not constraints:
            return Status.skip()
        s.tp_value_to_match_num = [{} for _ in constraints]
        for node in nodes.values():
            if not node_labels_match_spread_constraints(node.labels, constraints):
                continue
            for i, c in enumerate(constraints):
                if not c.match_node_inclusion_policies(pod, node):
                    continue
                value = node.labels[c.topology_key]
                counts = s.tp_value_to_match_num[i]
                counts[value] = counts.get(value, 0) + count_pods_match_selector(
                    node.pods, c.selector, pod.namespace
                )
        s.min_match_num = [min(m.values(), default=_MAX_INT32) for m in s.tp_value_to_match_num]
        return Status.success()

    # -- PreFilter extensions (upstream ``AddPod``/``RemovePod``) -----------------
    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """Count ``pod_to_add`` in ``node``'s domains."""
        return self._update_with_pod(state, pod, pod_to_add, node, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """No longer count ``pod_to_remove`` in ``node``'s domains."""
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    def _update_with_pod(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, delta: int
    ) -> Status:
        s = state.get(_PRE_FILTER_KEY)
        if not isinstance(s, _PreFilterState):
            return missing_pre_filter_state(_PRE_FILTER_KEY, self.name)
        s.update_with_pod(other, pod, node, delta)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` if it lacks a topologyKey or placing the pod there exceeds a maxSkew."""
        s = state.get(_PRE_FILTER_KEY)
        if not isinstance(s, _PreFilterState):
            return missing_pre_filter_state(_PRE_FILTER_KEY, self.name)
        for i, c in enumerate(s.constraints):
            if c.topology_key not in node.labels:
                return Status.unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH, plugin=self.name)
            self_match = 1 if c.selector.matches(pod.labels) else 0
            match_num = s.tp_value_to_match_num[i].get(node.labels[c.topology_key], 0)
            if match_num + self_match - s.global_min(i) > c.max_skew:
                return Status.unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH, plugin=self.name)
        return Status.success()

    # -- Score -----------------------------------------------------------
    def pre_score(self, state: CycleState, pod: PodInfo, filtered_nodes: Sequence[NodeInfo]) -> Status:
        """Upstream PreScore over the feasible ``filtered_nodes`` (pods counted on all PreFilter nodes).

        Optional: Score/NormalizeScore compute the same state themselves if
        this was not called.
        """
        all_nodes: Sequence[NodeInfo] = state.get(_ALL_NODES_KEY) or filtered_nodes
        try:
            s = self._compute_pre_score(pod, all_nodes, filtered_nodes)
        except ValueError as e:
            return Status.error(f"obtaining pod's soft topology spread constraints: {e}", plugin=self.name)
        state.write(_PRE_SCORE_KEY, s)
        return Status.success() if s.constraints else Status.skip()

    @staticmethod
    def _compute_pre_score(
        pod: PodInfo, all_nodes: Iterable[NodeInfo], filtered_nodes: Iterable[NodeInfo]
    ) -> _PreScoreState:
        constraints = parse_constraints(pod, SCHEDULE_ANYWAY)
        s = _PreScoreState(constraints=constraints)
        if not constraints:
            return s
        s.topology_value_to_pod_counts = [{} for _ in constraints]
        n_filtered = 0
        for node in filtered_nodes:
            n_filtered += 1
            if not node_labels_match_spread_constraints(node.labels, constraints):
                s.ignored_nodes.add(node.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key != LABEL_HOSTNAME:  # per-node counts are taken in Score
                    s.topology_value_to_pod_counts[i].setdefault(node.labels[c.topology_key], 0)
        s.topology_normalizing_weight = [
            topology_normalizing_weight(
                n_filtered - len(s.ignored_nodes)
                if c.topology_key == LABEL_HOSTNAME
                else len(s.topology_value_to_pod_counts[i])
            )
            for i, c in enumerate(constraints)
        ]
        for node in all_nodes:
            if not node_labels_match_spread_constraints(node.labels, constraints):
                continue
            for i, c in enumerate(constraints):
                if not c.match_node_inclusion_policies(pod, node):
                    continue
                counts = s.topology_value_to_pod_counts[i]
                value = node.labels[c.topology_key]
                if value in counts:  # only domains of scored nodes
                    counts[value] += count_pods_match_selector(node.pods, c.selector, pod.namespace)
        return s

    @staticmethod
    def _raw_score(s: _PreScoreState, pod: PodInfo, node: NodeInfo) -> int:
        if node.name in s.ignored_nodes:
            return 0
        total = 0.0
        for i, c in enumerate(s.constraints):
            if c.topology_key not in node.labels:
                continue
            if c.topology_key == LABEL_HOSTNAME:
                count = count_pods_match_selector(node.pods, c.selector, pod.namespace)
            else:
                count = s.topology_value_to_pod_counts[i].get(node.labels[c.topology_key], 0)
            total += score_for_count(count, c.max_skew, s.topology_normalizing_weight[i])
        return _round_half_away(total)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Weighted matching-pod count of ``node``'s domains (lower is better)."""
        scored: dict[str, NodeInfo] = state.get(_SCORED_NODES_KEY) or {}
        scored[node.name] = node
        state.write(_SCORED_NODES_KEY, scored)
        s = state.get(_PRE_SCORE_KEY)
        if not isinstance(s, _PreScoreState):
            all_nodes: Sequence[NodeInfo] = state.get(_ALL_NODES_KEY) or (node,)
            try:
                s = self._compute_pre_score(pod, all_nodes, all_nodes)
            except ValueError:
                s = _PreScoreState()
            s.exact = False
            state.write(_PRE_SCORE_KEY, s)
        return self._raw_score(s, pod, node)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Reverse min/max scaling: fewest matching pods → MAX_NODE_SCORE; ignored nodes → 0."""
        s = state.get(_PRE_SCORE_KEY)
        scored: dict[str, NodeInfo] = state.get(_SCORED_NODES_KEY) or {}
        if isinstance(s, _PreScoreState) and not s.exact:
            filtered = [scored[n] for n in scores if n in scored]
            all_nodes: Sequence[NodeInfo] = state.get(_ALL_NODES_KEY) or filtered
            try:
                s = self._compute_pre_score(pod, all_nodes, filtered)
            except ValueError:
                s = _PreScoreState()
            state.write(_PRE_SCORE_KEY, s)
            for name in scores:
                if name in scored:
                    scores[name] = self._raw_score(s, pod, scored[name])
        if not isinstance(s, _PreScoreState) or not s.constraints:
            for name in scores:
                scores[name] = 0
            return
        valid = [v for n, v in scores.items() if n not in s.ignored_nodes]
        min_score = min(valid, default=0)
        max_score = max([0, *valid])
        for name, v in scores.items():
            if name in s.ignored_nodes:
                scores[name] = 0
            elif max_score == 0:
                scores[name] = MAX_NODE_SCORE
            else:
                scores[name] = MAX_NODE_SCORE * (max_score + min_score - v) // max_score

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Any change of a bound pod (the counts), a node added, deleted, or its labels or
        taints changed (the domains): retry the pod. Upstream registers the same events
        (``podtopologyspread/plugin.go``); its hints are not ported, so each occurrence
        queues."""
        return [
            ClusterEventWithHint(events.ASSIGNED_POD_CHANGE),
            ClusterEventWithHint(events.NODE_DOMAIN_CHANGE),
        ]


def new(args: None, handle: Handle) -> PodTopologySpread:
    """The plugin's factory (registered as :data:`NAME`; it takes no args)."""
    return PodTopologySpread()
