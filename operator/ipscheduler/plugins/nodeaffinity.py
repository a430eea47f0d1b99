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

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ipscheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    QueueingHint,
    Status,
    default_normalize,
)
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NodeAffinity"

ERR_REASON_POD = "node(s) didn't match Pod's node affinity/selector"

FIELD_METADATA_NAME = "metadata.name"

_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_NAME_LEN = 63
_MAX_PREFIX_LEN = 253


def _valid_label_key(key: str) -> bool:
    """validation.IsQualifiedName: ``[prefix/]name``, DNS-1123 subdomain prefix, 63-char name."""
    parts = key.split("/")
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > _MAX_PREFIX_LEN or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return False
    elif len(parts) == 1:
        name = parts[0]
    else:
        return False
    return 0 < len(name) <= _MAX_NAME_LEN and _NAME_RE.fullmatch(name) is not None


def _valid_label_value(value: str) -> bool:
    """validation.IsValidLabelValue: empty, or up to 63 name characters."""
    return value == "" or (len(value) <= _MAX_NAME_LEN and _NAME_RE.fullmatch(value) is not None)


def _parse_int64(value: str) -> int | None:
    """strconv.ParseInt(value, 10, 64); None when it would fail."""
    if not _INT_RE.fullmatch(value):
        return None
    n = int(value)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


def _str_list(value: Any) -> list[str] | None:
    """``values`` of a requirement: absent/null is empty; anything but a list of str is invalid."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return value


def _match_label_requirement(expr: Any, labels: Mapping[str, str]) -> bool | None:
    """Evaluate one ``matchExpressions`` entry; None if the requirement is invalid."""
    if not isinstance(expr, Mapping):
        return None
    key, op, values = expr.get("key"), expr.get("operator"), _str_list(expr.get("values"))
    if not isinstance(key, str) or not isinstance(op, str) or values is None or not _valid_label_key(key):
        return None
    if not all(_valid_label_value(v) for v in values):
        return None
    if op in ("In", "NotIn"):
        if not values:
            return None
        hit = key in labels and labels[key] in values
        return hit if op == "In" else not hit
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return (key in labels) == (op == "Exists")
    if op in ("Gt", "Lt"):
        if len(values) != 1:
            return None
        want = _parse_int64(values[0])
        if want is None:
            return None
        if key not in labels:
            return False
        have = _parse_int64(labels[key])
        if have is None:
            return False
        return have > want if op == "Gt" else have < want
    return None


def _match_field_requirement(expr: Any, node: NodeInfo) -> bool | None:
    """Evaluate one ``matchFields`` entry (only ``metadata.name`` In/NotIn); None if invalid."""
    if not isinstance(expr, Mapping):
        return None
    key, op, values = expr.get("key"), expr.get("operator"), _str_list(expr.get("values"))
    if key != FIELD_METADATA_NAME or not isinstance(op, str) or op not in ("In", "NotIn"):
        return None
    if values is None or len(values) != 1:
        return None
    return (node.name == values[0]) == (op == "In")


def _match_term(term: Any, node: NodeInfo) -> bool:
    """One NodeSelectorTerm: matchExpressions AND matchFields; empty or invalid → False."""
    if not isinstance(term, Mapping):
        return False
    exprs = term.get("matchExpressions")
    fields = term.get("matchFields")
    exprs = [] if exprs is None else exprs
    fields = [] if fields is None else fields
    if not isinstance(exprs, list) or not isinstance(fields, list):
        return False
    if not exprs and not fields:
        return False
    label_results = [_match_label_requirement(e, node.labels) for e in exprs]
    field_results = [_match_field_requirement(f, node) for f in fields]
    if None in label_results or None in field_results:
        return False
    # Upstream ignores matchFields (but not their parse errors) for a node without a name.
    return all(label_results) and (not node.name or all(field_results))


def match_node_selector_terms(terms: Any, node: NodeInfo) -> bool:
    """Whether ``node`` matches any of ``terms`` (a raw ``nodeSelectorTerms`` list).

    Terms are ORed; within a term matchExpressions and matchFields are ANDed.
    An empty list, an empty term, an invalid term or a non-list matches nothing.
    """
    if not isinstance(terms, list):
        return False
    return any(_match_term(t, node) for t in terms)


def _match_node_selector(selector: Mapping[str, str], node: NodeInfo) -> bool:
    """``spec.nodeSelector``: every key present on the node with exactly that value."""
    return all(k in node.labels and node.labels[k] == v for k, v in selector.items())


def match_required_node_affinity(pod: PodInfo, node: NodeInfo) -> bool:
    """nodeSelector AND requiredDuringSchedulingIgnoredDuringExecution (GetRequiredNodeAffinity.Match)."""
    if not _match_node_selector(pod.node_selector, node):
        return False
    node_affinity = pod.affinity.get("nodeAffinity")
    if node_affinity is None:
        return True
    if not isinstance(node_affinity, Mapping):
        return False
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    if not isinstance(required, Mapping):
        return False
    terms = required.get("nodeSelectorTerms")
    return match_node_selector_terms([] if terms is None else terms, node)


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
        if _match_term(item.get("preference"), node):
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

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` unless it satisfies the pod's nodeSelector and required node affinity."""
        if match_required_node_affinity(pod, node):
            return Status.success()
        return Status.unresolvable(ERR_REASON_POD, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A node added or its labels changed: retry the pod if the node matches its
        nodeSelector and required affinity now and did not before
        (``isSchedulableAfterNodeChange``)."""
        event = ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.UPDATE_NODE_LABEL)
        return [ClusterEventWithHint(event, _after_node_change)]

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
