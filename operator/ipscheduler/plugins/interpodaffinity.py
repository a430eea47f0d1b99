"""InterPodAffinity: ``spec.affinity.podAffinity`` / ``podAntiAffinity`` between pods.

Mirrors kube-scheduler 1.34's
``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`` (PreFilter,
Filter) and ``.../interpodaffinity/scoring.go`` (PreScore, Score,
NormalizeScore), with the term semantics of ``pkg/scheduler/framework/types.go``
(``AffinityTerm.Matches``, ``getNamespacesFromPodAffinityTerm``) and the
selector semantics of ``staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go``
(``LabelSelectorAsSelector``) and ``staging/src/k8s.io/apimachinery/pkg/labels/selector.go``:

* PreFilter counts, over every pod on every node, per ``(topologyKey, value)``
  of the pod's node: (a) existing pods' required anti-affinity terms the
  incoming pod matches; (b) existing pods matching *all* of the incoming pod's
  required affinity terms; (c) existing pods matching each of the incoming
  pod's required anti-affinity terms. An invalid selector in the incoming
  pod's terms rejects the pod everywhere (UnschedulableAndUnresolvable,
  ``parsing pod: ...``). Returns Skip when there is nothing to check (the
  state is still written, because our Framework runs Filter after a Skip).
* Filter, in upstream order:

  - affinity: the node must carry every term's topologyKey and each
    ``(key, value)`` must hold a matching pod; except the first pod of a
    set: when no pod anywhere matches the terms and the incoming pod
    matches all of its own terms, any node carrying the keys passes
    (``satisfyPodAffinity``). Rejection: UnschedulableAndUnresolvable,
    ``node(s) didn't match pod affinity rules`` (upstream uses
    UnschedulableAndUnresolvable here: preemption cannot help).
  - anti-affinity: no term's ``(key, node value)`` may hold a matching pod.
    Unschedulable, ``node(s) didn't match pod anti-affinity rules``.
  - existing pods' anti-affinity: no node label pair may hold an existing
    pod whose required anti-affinity term matches the incoming pod.
    Unschedulable, ``node(s) didn't satisfy existing pods anti-affinity rules``.

* Score (upstream PreScore is folded into PreFilter, which sees all nodes as
  upstream PreScore's snapshot does): per ``(topologyKey, value)`` the sum of
  +weight for each of the incoming pod's preferred affinity terms matched by
  an existing pod there, -weight for its preferred anti-affinity terms,
  +``hard_pod_affinity_weight`` for each existing pod's *required* affinity
  term matched by the incoming pod, +/-weight for existing pods' preferred
  affinity/anti-affinity terms matched by the incoming pod. A node scores the
  sum over its label pairs; NormalizeScore maps min..max linearly onto
  0..MAX_NODE_SCORE (all equal → 0).

Namespaces: a term with no ``namespaces`` and no ``namespaceSelector``
selects its owner pod's namespace; otherwise the listed namespaces plus the
namespaces matching ``namespaceSelector`` (``{}`` = all namespaces, absent =
none). We do not watch Namespaces, so a namespace's labels are taken to be
``{kubernetes.io/metadata.name: <name>}`` (which the API server sets on every
namespace) merged with whatever the optional ``namespace_labels`` callback
returns. Limitation: without that callback, a namespaceSelector on any other
namespace label sees it as absent (``In`` never matches, ``NotIn`` /
``DoesNotExist`` always match).

``matchLabelKeys`` / ``mismatchLabelKeys`` are ignored: since 1.29 the API
server merges them into ``labelSelector`` at pod creation
(MatchLabelKeysInPodAffinity), so the scheduler only reads ``labelSelector``.
Label keys/values inside selectors are not syntax-checked (only operators,
value counts and JSON types are); the API server validates them.

PreFilter extensions (``AddPod``/``RemovePod``, upstream ``updateWithPod``) update the
three counts for a pod added to or removed from a node in preemption's dry run.

Size: one module where upstream has three files (``filtering.go``, ``scoring.go``,
``plugin.go``), because the term parsing and the per-cycle memo of pods' terms are shared
by all three parts and plugins may not import each other; most of its length is this
docstring and the term semantics.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from ipscheduler.framework import events
from ipscheduler.framework.interface import MAX_NODE_SCORE, ClusterEventWithHint, CycleState, Handle, Status
from ipscheduler.framework.labels import NOTHING, InvalidSelectorError, LabelSelector
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo, Snapshot
from ipscheduler.plugins.helper import missing_pre_filter_state

NAME = "InterPodAffinity"

ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_REASON_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod affinity rules"
ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH = "node(s) didn't match pod anti-affinity rules"

LABEL_METADATA_NAME = "kubernetes.io/metadata.name"
"""Label the API server puts on every Namespace (its name)."""

_PRE_FILTER_KEY = "InterPodAffinity/preFilter"
_PRE_SCORE_KEY = "InterPodAffinity/preScore"
_SCORED_NODES_KEY = "InterPodAffinity/scoredNodes"

# --------------------------------------------------------------------------- affinity terms


@dataclass(frozen=True)
class AffinityTerm:
    """A parsed ``PodAffinityTerm`` (``framework.AffinityTerm``)."""

    namespaces: frozenset[str]
    selector: LabelSelector
    topology_key: str
    namespace_selector: LabelSelector = NOTHING

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str]) -> bool:
        """``pod`` is in one of the term's namespaces (by name or namespaceSelector on
        ``ns_labels``, the labels of ``pod``'s namespace) and its labels match the selector."""
        if pod.namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(pod.labels)
        return False


@dataclass(frozen=True)
class WeightedAffinityTerm:
    """A parsed ``WeightedPodAffinityTerm``."""

    term: AffinityTerm
    weight: int


def parse_affinity_term(owner: PodInfo, raw: Any) -> AffinityTerm:
    """Parse one raw ``PodAffinityTerm`` of ``owner``; raises :class:`InvalidSelectorError`.

    No ``namespaces`` and no ``namespaceSelector`` → ``owner``'s namespace
    (``getNamespacesFromPodAffinityTerm``).
    """
    if not isinstance(raw, Mapping):
        raise InvalidSelectorError(f"pod affinity term is not a mapping: {raw!r}")
    selector = LabelSelector.parse(raw.get("labelSelector"))
    ns_raw = raw.get("namespaces")
    ns_list = [] if ns_raw is None else ns_raw
    if not isinstance(ns_list, list) or not all(isinstance(n, str) for n in ns_list):
        raise InvalidSelectorError("namespaces must be a list of strings")
    ns_selector_raw = raw.get("namespaceSelector")
    namespaces = frozenset(ns_list)
    if not ns_list and ns_selector_raw is None:
        namespaces = frozenset({owner.namespace})
    topology_key = raw.get("topologyKey")
    return AffinityTerm(
        namespaces=namespaces,
        selector=selector,
        topology_key=topology_key if isinstance(topology_key, str) else "",
        namespace_selector=LabelSelector.parse(ns_selector_raw),
    )


@dataclass(frozen=True)
class PodAffinityTerms:
    """A pod's parsed inter-pod (anti-)affinity terms (as ``framework.PodInfo`` holds them).

    A list with an invalid term is dropped whole (upstream ``getAffinityTerms``
    returns nil on the first error) and the error is recorded in ``errors``.
    """

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


_NO_TERMS = PodAffinityTerms()

_PodTerms = tuple[PodInfo, PodAffinityTerms]
"""An existing pod and its parsed terms."""


def _list_of(section: Any, field_name: str) -> list[Any]:
    if not isinstance(section, Mapping):
        return []
    value = section.get(field_name)
    return value if isinstance(value, list) else []


def _parse_required(owner: PodInfo, raw_terms: list[Any]) -> tuple[AffinityTerm, ...]:
    return tuple(parse_affinity_term(owner, t) for t in raw_terms)


def _parse_preferred(owner: PodInfo, raw_terms: list[Any]) -> tuple[WeightedAffinityTerm, ...]:
    out = []
    for item in raw_terms:
        if not isinstance(item, Mapping):
            raise InvalidSelectorError(f"weighted pod affinity term is not a mapping: {item!r}")
        weight = item.get("weight")
        if not isinstance(weight, int) or isinstance(weight, bool):
            raise InvalidSelectorError(f"invalid weight {weight!r}")
        out.append(WeightedAffinityTerm(parse_affinity_term(owner, item.get("podAffinityTerm")), weight))
    return tuple(out)


def pod_affinity_terms(pod: PodInfo) -> PodAffinityTerms:
    """Parse ``pod``'s required and preferred pod (anti-)affinity terms."""
    affinity = pod.affinity
    pa, paa = affinity.get("podAffinity"), affinity.get("podAntiAffinity")
    if pa is None and paa is None:
        return _NO_TERMS
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    errors: list[str] = []

    def required(label: str, section: Any) -> tuple[AffinityTerm, ...]:
        try:
            return _parse_required(pod, _list_of(section, req))
        except InvalidSelectorError as e:
            errors.append(f"{label}: {e}")
            return ()

    def preferred(label: str, section: Any) -> tuple[WeightedAffinityTerm, ...]:
        try:
            return _parse_preferred(pod, _list_of(section, pref))
        except InvalidSelectorError as e:
            errors.append(f"{label}: {e}")
            return ()

    return PodAffinityTerms(
        required_affinity=required("requiredAffinityTerms", pa),
        required_anti_affinity=required("requiredAntiAffinityTerms", paa),
        preferred_affinity=preferred("preferredAffinityTerms", pa),
        preferred_anti_affinity=preferred("preferredAntiAffinityTerms", paa),
        errors=tuple(errors),
    )


def pod_matches_all_affinity_terms(
    terms: Iterable[AffinityTerm], pod: PodInfo, ns_labels: Mapping[str, str]
) -> bool:
    """True iff ``terms`` is non-empty and ``pod`` matches every one (``podMatchesAllAffinityTerms``)."""
    terms = tuple(terms)
    return bool(terms) and all(t.matches(pod, ns_labels) for t in terms)


# --------------------------------------------------------------------------- plugin state

TopologyPair = tuple[str, str]


@dataclass
class _PreFilterState:
    terms: PodAffinityTerms
    existing_anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    anti_affinity_counts: dict[TopologyPair, int] = field(default_factory=dict)
    self_matches_affinity: bool = False

    def clone(self) -> _PreFilterState:
        """A copy with its own counts (upstream ``preFilterState.Clone``)."""
        return dataclasses.replace(
            self,
            existing_anti_affinity_counts=dict(self.existing_anti_affinity_counts),
            affinity_counts=dict(self.affinity_counts),
            anti_affinity_counts=dict(self.anti_affinity_counts),
        )


def _update(counts: dict[TopologyPair, int], node: NodeInfo, key: str, value: int) -> None:
    """Add ``value`` to the count of ``node``'s pair for ``key``, dropping a count that
    reaches zero (upstream ``topologyToMatchedTermCount.update``)."""
    if key in node.labels:
        pair = (key, node.labels[key])
        n = counts.get(pair, 0) + value
        if n:
            counts[pair] = n
        else:
            counts.pop(pair, None)


@dataclass
class _PreScoreState:
    topology_score: dict[str, dict[str, int]] = field(default_factory=dict)


class _TermsCache:
    """Per-cycle memo of :func:`pod_affinity_terms` by object identity (pods are immutable)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[PodInfo, PodAffinityTerms]] = {}

    def __call__(self, pod: PodInfo) -> PodAffinityTerms:
        hit = self._memo.get(id(pod))
        if hit is None or hit[0] is not pod:
            hit = (pod, pod_affinity_terms(pod))
            self._memo[id(pod)] = hit
        return hit[1]


def _bump(counts: dict[TopologyPair, int], node: NodeInfo, key: str, value: int = 1) -> None:
    if key in node.labels:
        pair = (key, node.labels[key])
        counts[pair] = counts.get(pair, 0) + value


def _visit(nodes: Mapping[str, NodeInfo], every_node: bool) -> Iterable[NodeInfo]:
    """The nodes whose pods PreFilter and PreScore must look at: every node when the
    incoming pod has terms of its own (``every_node``), else only the nodes with pods that
    have any (:attr:`Snapshot.have_pods_with_affinity`, upstream's
    ``HavePodsWithAffinityNodeInfoList``) when ``nodes`` is a :class:`Snapshot`."""
    if not every_node and isinstance(nodes, Snapshot):
        return nodes.have_pods_with_affinity.values()
    return nodes.values()


class InterPodAffinity:
    """Filter on required pod (anti-)affinity (both directions); score on preferred terms.

    ``hard_pod_affinity_weight`` (0..100, default 1) and
    ``ignore_preferred_terms_of_existing_pods`` are upstream's
    ``InterPodAffinityArgs``. ``namespace_labels`` may return extra labels of a
    namespace for namespaceSelector matching (see module docstring).

    PreFilter must run in the same cycle: it also computes the score state
    (upstream PreScore). Without it, Filter returns an Error status and Score
    falls back to counting pods on the scored (feasible) nodes only.
    """

    name: str = NAME

    def __init__(
        self,
        hard_pod_affinity_weight: int = 1,
        ignore_preferred_terms_of_existing_pods: bool = False,
        namespace_labels: Callable[[str], Mapping[str, str] | None] | None = None,
    ) -> None:
        if not 0 <= hard_pod_affinity_weight <= 100:
            raise ValueError("hard_pod_affinity_weight must be in 0..100")
        self.hard_pod_affinity_weight = hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = ignore_preferred_terms_of_existing_pods
        self._namespace_labels = namespace_labels
        self._node_terms: dict[str, tuple[NodeInfo, tuple[_PodTerms, ...]]] = {}

    def _with_terms(self, node: NodeInfo) -> tuple[_PodTerms, ...]:
        """The node's pods that have any affinity term, with their terms (upstream's
        ``PodsWithAffinity``), memoized per NodeInfo object: most pods have none, and
        an unchanged node is the same object in the next cycle."""
        seen = self._node_terms.get(node.name)
        if seen is not None and seen[0] is node:
            return seen[1]
        found = tuple((p, t) for p in node.pods if (t := pod_affinity_terms(p)).any)
        self._node_terms[node.name] = (node, found)
        return found

    def _existing(
        self, node: NodeInfo, every_pod: bool, terms_of: Callable[[PodInfo], PodAffinityTerms]
    ) -> Iterable[_PodTerms]:
        """All pods of ``node`` with their terms, or only those that have any."""
        if every_pod:
            return ((p, terms_of(p)) for p in node.pods)
        return self._with_terms(node)

    def ns_labels(self, namespace: str) -> dict[str, str]:
        """Labels of ``namespace`` as seen by namespaceSelectors."""
        extra = self._namespace_labels(namespace) if self._namespace_labels else None
        return {**(extra or {}), LABEL_METADATA_NAME: namespace}

    # -- PreFilter / Filter ----------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Count matching pods per topology pair for Filter, and compute the score state."""
        terms = pod_affinity_terms(pod)
        if terms.errors:
            return Status.unresolvable(f"parsing pod: {'; '.join(terms.errors)}", plugin=self.name)
        own_ns = self.ns_labels(pod.namespace)
        s = _PreFilterState(terms=terms)
        s.self_matches_affinity = pod_matches_all_affinity_terms(terms.required_affinity, pod, own_ns)
        ns_cache: dict[str, dict[str, str]] = {}
        terms_of = _TermsCache()
        own_required = bool(terms.required_affinity or terms.required_anti_affinity)
        for node in _visit(nodes, every_node=own_required):
            for existing, ex_terms in self._existing(node, own_required, terms_of):
                for t in ex_terms.required_anti_affinity:
                    if t.matches(pod, own_ns):
                        _bump(s.existing_anti_affinity_counts, node, t.topology_key)
                if not (terms.required_affinity or terms.required_anti_affinity):
                    continue
                if existing.namespace not in ns_cache:
                    ns_cache[existing.namespace] = self.ns_labels(existing.namespace)
                ex_ns = ns_cache[existing.namespace]
                if pod_matches_all_affinity_terms(terms.required_affinity, existing, ex_ns):
                    for t in terms.required_affinity:
                        _bump(s.affinity_counts, node, t.topology_key)
                for t in terms.required_anti_affinity:
                    if t.matches(existing, ex_ns):
                        _bump(s.anti_affinity_counts, node, t.topology_key)
        state.write(_PRE_FILTER_KEY, s)
        has_preferred = bool(terms.preferred_affinity or terms.preferred_anti_affinity)
        state.write(_PRE_SCORE_KEY, self._pre_score(pod, terms, _visit(nodes, has_preferred), terms_of))
        if not (s.existing_anti_affinity_counts or terms.required_affinity or terms.required_anti_affinity):
            return Status.skip()
        return Status.success()

    # -- PreFilter extensions (upstream ``AddPod``/``RemovePod``) -----------------
    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """Count ``pod_to_add`` on ``node`` (upstream ``updateWithPod`` with +1)."""
        return self._update_with_pod(state, pod, pod_to_add, node, 1)

    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """No longer count ``pod_to_remove`` on ``node`` (``updateWithPod`` with -1)."""
        return self._update_with_pod(state, pod, pod_to_remove, node, -1)

    def _update_with_pod(
        self, state: CycleState, pod: PodInfo, other: PodInfo, node: NodeInfo, value: int
    ) -> Status:
        s = state.get(_PRE_FILTER_KEY)
        if not isinstance(s, _PreFilterState):
            return missing_pre_filter_state(_PRE_FILTER_KEY, self.name)
        own_ns = self.ns_labels(pod.namespace)
        other_ns = self.ns_labels(other.namespace)
        for t in pod_affinity_terms(other).required_anti_affinity:
            if t.matches(pod, own_ns):
                _update(s.existing_anti_affinity_counts, node, t.topology_key, value)
        if s.terms.required_affinity and pod_matches_all_affinity_terms(
            s.terms.required_affinity, other, other_ns
        ):
            for t in s.terms.required_affinity:
                _update(s.affinity_counts, node, t.topology_key, value)
        for t in s.terms.required_anti_affinity:
            if t.matches(other, other_ns):
                _update(s.anti_affinity_counts, node, t.topology_key, value)
        return Status.success()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` if it breaks the pod's required (anti-)affinity or existing pods' anti-affinity."""
        s = state.get(_PRE_FILTER_KEY)
        if not isinstance(s, _PreFilterState):
            return missing_pre_filter_state(_PRE_FILTER_KEY, self.name)
        if not self._satisfy_pod_affinity(s, node):
            return Status.unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH, plugin=self.name)
        if not self._satisfy_pod_anti_affinity(s, node):
            return Status.unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH, plugin=self.name)
        if not self._satisfy_existing_pods_anti_affinity(s, node):
            return Status.unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH, plugin=self.name)
        return Status.success()

    @staticmethod
    def _satisfy_pod_affinity(s: _PreFilterState, node: NodeInfo) -> bool:
        pods_exist = True
        for t in s.terms.required_affinity:
            if t.topology_key not in node.labels:
                return False  # all topology labels must exist on the node
            if s.affinity_counts.get((t.topology_key, node.labels[t.topology_key]), 0) <= 0:
                pods_exist = False
        if pods_exist:
            return True
        # The first pod of a set with affinity to itself: allowed if no pod anywhere matches.
        return not s.affinity_counts and s.self_matches_affinity

    @staticmethod
    def _satisfy_pod_anti_affinity(s: _PreFilterState, node: NodeInfo) -> bool:
        return not any(
            t.topology_key in node.labels
            and s.anti_affinity_counts.get((t.topology_key, node.labels[t.topology_key]), 0) > 0
            for t in s.terms.required_anti_affinity
        )

    @staticmethod
    def _satisfy_existing_pods_anti_affinity(s: _PreFilterState, node: NodeInfo) -> bool:
        if not s.existing_anti_affinity_counts:
            return True
        return all(s.existing_anti_affinity_counts.get(pair, 0) <= 0 for pair in node.labels.items())

    # -- Score -----------------------------------------------------------
    def _pre_score(
        self,
        pod: PodInfo,
        terms: PodAffinityTerms,
        nodes: Iterable[NodeInfo],
        terms_of: Callable[[PodInfo], PodAffinityTerms] = pod_affinity_terms,
    ) -> _PreScoreState:
        """Upstream PreScore: weighted matches per (topologyKey, value) over all ``nodes``."""
        out = _PreScoreState()
        has_constraints = bool(terms.preferred_affinity or terms.preferred_anti_affinity)
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return out
        own_ns = self.ns_labels(pod.namespace)
        scores = out.topology_score

        def add(
            term: AffinityTerm, weight: int, target: PodInfo, ns: Mapping[str, str], node: NodeInfo
        ) -> None:
            if term.matches(target, ns) and term.topology_key in node.labels:
                per_key = scores.setdefault(term.topology_key, {})
                value = node.labels[term.topology_key]
                per_key[value] = per_key.get(value, 0) + weight

        for node in nodes:
            if not node.labels:
                continue
            for existing, ex_terms in self._existing(node, has_constraints, terms_of):
                if not has_constraints and not ex_terms.any:
                    continue
                if has_constraints:
                    ex_ns = self.ns_labels(existing.namespace)
                    for w in terms.preferred_affinity:
                        add(w.term, w.weight, existing, ex_ns, node)
                    for w in terms.preferred_anti_affinity:
                        add(w.term, -w.weight, existing, ex_ns, node)
                if self.hard_pod_affinity_weight > 0:
                    for t in ex_terms.required_affinity:
                        add(t, self.hard_pod_affinity_weight, pod, own_ns, node)
                for w in ex_terms.preferred_affinity:
                    add(w.term, w.weight, pod, own_ns, node)
                for w in ex_terms.preferred_anti_affinity:
                    add(w.term, -w.weight, pod, own_ns, node)
        return out

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Skip when PreFilter's pass found no topology score for any pair: every node would
        score 0 after NormalizeScore, so the totals are the same without this plugin (upstream
        runs it and sums the zeros). Success otherwise, or when PreFilter did not run."""
        s = state.get(_PRE_SCORE_KEY)
        return Status.skip() if isinstance(s, _PreScoreState) and not s.topology_score else Status.success()

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Sum of the topology scores of ``node``'s label pairs (negative for anti-affinity)."""
        s = state.get(_PRE_SCORE_KEY)
        if not isinstance(s, _PreScoreState):
            scored: dict[str, NodeInfo] = state.get(_SCORED_NODES_KEY) or {}
            scored[node.name] = node
            state.write(_SCORED_NODES_KEY, scored)
            return 0
        return _node_score(s, node)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """Min-max normalize into 0..MAX_NODE_SCORE (upstream NormalizeScore)."""
        s = state.get(_PRE_SCORE_KEY)
        if not isinstance(s, _PreScoreState):
            # PreFilter did not run: fall back to the pods on the scored nodes.
            scored: dict[str, NodeInfo] = state.get(_SCORED_NODES_KEY) or {}
            terms = pod_affinity_terms(pod)
            s = self._pre_score(pod, terms, scored.values())
            for name in scores:
                if name in scored:
                    scores[name] = _node_score(s, scored[name])
        if not s.topology_score:
            for name in scores:
                scores[name] = 0
            return
        normalize_min_max(scores)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """Any change of a bound pod (it may start or stop matching a term), a node added
        or its labels changed (topology): retry the pod. Upstream registers the same
        events (``interpodaffinity/plugin.go``); its hints are not ported, so each
        occurrence queues."""
        return [
            ClusterEventWithHint(events.ASSIGNED_POD_CHANGE),
            ClusterEventWithHint(events.NODE_ADD_OR_LABEL_CHANGE),
        ]


def _node_score(s: _PreScoreState, node: NodeInfo) -> int:
    total = 0
    for key, values in s.topology_score.items():
        if key in node.labels:
            total += values.get(node.labels[key], 0)
    return total


def normalize_min_max(scores: dict[str, int]) -> None:
    """Map the lowest score to 0 and the highest to MAX_NODE_SCORE linearly (truncating).

    All-equal scores become 0. Upstream:
    ``pkg/scheduler/framework/plugins/interpodaffinity/scoring.go`` NormalizeScore.
    """
    if not scores:
        return
    lo, hi = min(scores.values()), max(scores.values())
    diff = hi - lo
    for name, v in scores.items():
        scores[name] = math.trunc(MAX_NODE_SCORE * ((v - lo) / diff)) if diff > 0 else 0


class InterPodAffinityArgs(PluginArgs):
    """``pluginConfig`` args of InterPodAffinity, as upstream's ``InterPodAffinityArgs``
    (``staging/src/k8s.io/kube-scheduler/config/v1/types_pluginargs.go``; the 0..100
    range from ``pkg/scheduler/apis/config/validation/validation_pluginargs.go``)."""

    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=MAX_NODE_SCORE, alias="hardPodAffinityWeight")
    ignore_preferred_terms_of_existing_pods: bool = Field(
        default=False, alias="ignorePreferredTermsOfExistingPods"
    )


def new(args: InterPodAffinityArgs, handle: Handle) -> InterPodAffinity:
    """The plugin's factory (registered as :data:`NAME` with :class:`InterPodAffinityArgs`)."""
    return InterPodAffinity(args.hard_pod_affinity_weight, args.ignore_preferred_terms_of_existing_pods)
