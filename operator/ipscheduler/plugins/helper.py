"""Helpers the in-tree plugins share, so that no plugin imports another (upstream keeps
them in ``pkg/scheduler/framework/plugins/helper`` and
``k8s.io/component-helpers/scheduling/corev1``): required node affinity and node selector
terms (NodeAffinity, PodTopologySpread's ``nodeAffinityPolicy``), taints against
tolerations (TaintToleration, PodTopologySpread's ``nodeTaintsPolicy``), and the status of
a Filter that finds no PreFilter state (InterPodAffinity, PodTopologySpread)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ipscheduler.framework.interface import Status
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint, Toleration

# --------------------------------------------------------------------------- node affinity

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


def match_node_selector_term(term: Any, node: NodeInfo) -> bool:
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
    return any(match_node_selector_term(t, node) for t in terms)


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


# --------------------------------------------------------------------------- taints

EFFECT_NO_SCHEDULE = "NoSchedule"
EFFECT_PREFER_NO_SCHEDULE = "PreferNoSchedule"
EFFECT_NO_EXECUTE = "NoExecute"

_DO_NOT_SCHEDULE_EFFECTS = frozenset({EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE})


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint`` (v1helper.TolerationsTolerateTaint)."""
    return any(t.tolerates(taint) for t in tolerations)


def find_untolerated_taint(node: NodeInfo, tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint of ``node`` that ``tolerations`` do not tolerate."""
    tols = tuple(tolerations)
    for taint in node.taints:
        if taint.effect in _DO_NOT_SCHEDULE_EFFECTS and not tolerations_tolerate_taint(tols, taint):
            return taint
    return None


# --------------------------------------------------------------------------- cycle state


def missing_pre_filter_state(key: str, plugin: str) -> Status:
    """The Error status of ``plugin``'s Filter when the cycle state holds no PreFilter state
    under ``key`` (PreFilter did not run; upstream ``getPreFilterState``)."""
    return Status.error(f"reading {key!r} from cycleState: PreFilter did not run", plugin=plugin)
