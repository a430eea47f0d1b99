"""Unit tests for the Filter/Score plugins (no server).

Cases follow kube-scheduler's own plugin tests: taint_toleration_test.go,
node_affinity_test.go and node_unschedulable_test.go.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ipscheduler.framework.interface import Code, CycleState, FilterPlugin, ScorePlugin, Status
from ipscheduler.framework.types import HostPort, NodeInfo, PodInfo, Taint, Toleration
from ipscheduler.plugins.helper import match_node_selector_terms
from ipscheduler.plugins.nodeaffinity import NodeAffinity
from ipscheduler.plugins.nodeports import NodePorts
from ipscheduler.plugins.nodeready import NodeReady
from ipscheduler.plugins.nodeunschedulable import NodeUnschedulable
from ipscheduler.plugins.tainttoleration import TaintToleration

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def make_node(
    name: str = "node-a",
    labels: dict[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: tuple[Taint, ...] = (),
) -> NodeInfo:
    """A NodeInfo built directly (no API body)."""
    return NodeInfo(name=name, labels=labels or {}, ready=ready, unschedulable=unschedulable, taints=taints)


def make_pod(
    tolerations: tuple[Toleration, ...] = (),
    node_selector: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
) -> PodInfo:
    """A PodInfo built directly (no API body)."""
    return PodInfo(
        uid="uid-1",
        namespace="default",
        name="pod",
        tolerations=tolerations,
        node_selector=node_selector or {},
        affinity=affinity or {},
    )


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect)


def run_filter(plugin: FilterPlugin, pod: PodInfo, node: NodeInfo) -> Status:
    return plugin.filter(CycleState(), pod, node)


def run_score(plugin: ScorePlugin, pod: PodInfo, nodes: list[NodeInfo]) -> dict[str, int]:
    state = CycleState()
    scores = {n.name: plugin.score(state, pod, n) for n in nodes}
    plugin.normalize_score(state, pod, scores)
    return scores


@pytest.mark.parametrize(
    ("plugin", "name", "kinds"),
    [
        (NodeReady(), "NodeReady", (FilterPlugin,)),
        (NodeUnschedulable(), "NodeUnschedulable", (FilterPlugin,)),
        (TaintToleration(), "TaintToleration", (FilterPlugin, ScorePlugin)),
        (NodeAffinity(), "NodeAffinity", (FilterPlugin, ScorePlugin)),
    ],
    ids=["NodeReady", "NodeUnschedulable", "TaintToleration", "NodeAffinity"],
)
def test_plugin_names_and_protocols(plugin: Any, name: str, kinds: tuple[type, ...]) -> None:
    assert plugin.name == name
    for kind in kinds:
        assert isinstance(plugin, kind)


# --------------------------------------------------------------------------- NodeReady


@pytest.mark.parametrize(
    ("ready", "code", "reasons"),
    [(True, OK, ()), (False, UNSCHED, ("node(s) were not ready",))],
    ids=["ready", "not-ready-is-retryable-unschedulable"],
)
def test_node_ready(ready: bool, code: Code, reasons: tuple[str, ...]) -> None:
    status = run_filter(NodeReady(), make_pod(), make_node(ready=ready))
    assert status.code is code
    assert status.reasons == reasons


# --------------------------------------------------------------------------- NodeUnschedulable

UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"

UNSCHEDULABLE_CASES: list[tuple[str, bool, tuple[Toleration, ...], Code]] = [
    ("unschedulable-node-rejected", True, (), UNRES),
    ("normal-node-accepted", False, (), OK),
    (
        "toleration-for-unschedulable-taint",
        True,
        (tol(UNSCHEDULABLE_KEY, "Exists", effect="NoSchedule"),),
        OK,
    ),
    ("toleration-key-any-effect", True, (tol(UNSCHEDULABLE_KEY, "Exists"),), OK),
    ("empty-key-exists-tolerates-all", True, (tol(operator="Exists"),), OK),
    ("toleration-wrong-effect", True, (tol(UNSCHEDULABLE_KEY, "Exists", effect="NoExecute"),), UNRES),
    ("toleration-other-key", True, (tol("dedicated", "Exists", effect="NoSchedule"),), UNRES),
    ("toleration-equal-nonempty-value", True, (tol(UNSCHEDULABLE_KEY, "Equal", "yes", "NoSchedule"),), UNRES),
    ("toleration-equal-empty-value", True, (tol(UNSCHEDULABLE_KEY, "Equal", "", "NoSchedule"),), OK),
    ("toleration-irrelevant-on-normal-node", False, (tol(UNSCHEDULABLE_KEY, "Exists"),), OK),
]


@pytest.mark.parametrize(
    ("unschedulable", "tolerations", "code"),
    [c[1:] for c in UNSCHEDULABLE_CASES],
    ids=[c[0] for c in UNSCHEDULABLE_CASES],
)
def test_node_unschedulable(unschedulable: bool, tolerations: tuple[Toleration, ...], code: Code) -> None:
    status = run_filter(
        NodeUnschedulable(), make_pod(tolerations=tolerations), make_node(unschedulable=unschedulable)
    )
    assert status.code is code
    assert status.reasons == (() if code is OK else ("node(s) were unschedulable",))


# --------------------------------------------------------------------------- TaintToleration Filter

TAINT_FILTER_CASES: list[tuple[str, tuple[Toleration, ...], tuple[Taint, ...], str | None]] = [
    ("no-tolerations-nonempty-taints", (), (taint("dedicated", "user1"),), "{dedicated: user1}"),
    ("no-taints", (), (), None),
    (
        "equal-toleration-matches",
        (tol("dedicated", "Equal", "user1", "NoSchedule"),),
        (taint("dedicated", "user1"),),
        None,
    ),
    (
        "equal-toleration-different-value",
        (tol("dedicated", "Equal", "user2", "NoSchedule"),),
        (taint("dedicated", "user1"),),
        "{dedicated: user1}",
    ),
    ("empty-operator-means-equal", (tol("dedicated", "", "user1"),), (taint("dedicated", "user1"),), None),
    (
        "exists-toleration-any-value",
        (tol("foo", "Exists", effect="NoSchedule"),),
        (taint("foo", "bar"),),
        None,
    ),
    (
        "multiple-tolerations-multiple-taints-all-tolerated",
        (tol("dedicated", "Equal", "user2", "NoSchedule"), tol("foo", "Exists", effect="NoSchedule")),
        (taint("dedicated", "user2"), taint("foo", "somevalue")),
        None,
    ),
    (
        "effect-mismatch",
        (tol("foo", "Equal", "bar", "PreferNoSchedule"),),
        (taint("foo", "bar", "NoSchedule"),),
        "{foo: bar}",
    ),
    (
        "empty-effect-toleration-matches-noschedule",
        (tol("foo", "Equal", "bar"),),
        (taint("foo", "bar"),),
        None,
    ),
    (
        "prefernoschedule-untolerated-ignored-by-filter",
        (tol("dedicated", "Equal", "user2", "NoSchedule"),),
        (taint("dedicated", "user1", "PreferNoSchedule"),),
        None,
    ),
    ("prefernoschedule-no-tolerations", (), (taint("dedicated", "user1", "PreferNoSchedule"),), None),
    ("noexecute-untolerated-rejected", (), (taint("evict", "now", "NoExecute"),), "{evict: now}"),
    (
        "noexecute-tolerated",
        (tol("evict", "Exists", effect="NoExecute"),),
        (taint("evict", "now", "NoExecute"),),
        None,
    ),
    (
        "noschedule-toleration-does-not-cover-noexecute",
        (tol("evict", "Exists", effect="NoSchedule"),),
        (taint("evict", "now", "NoExecute"),),
        "{evict: now}",
    ),
    (
        "empty-key-exists-tolerates-all",
        (tol(operator="Exists"),),
        (taint("a", "1"), taint("b", "2", "NoExecute"), taint("c", "", "PreferNoSchedule")),
        None,
    ),
    (
        "empty-key-exists-with-effect-only-that-effect",
        (tol(operator="Exists", effect="NoSchedule"),),
        (taint("a", "1"), taint("b", "2", "NoExecute")),
        "{b: 2}",
    ),
    ("key-mismatch", (tol("other", "Exists"),), (taint("gpu", "true"),), "{gpu: true}"),
    (
        "empty-taint-value-printed",
        (),
        (taint("node-role.kubernetes.io/control-plane"),),
        "{node-role.kubernetes.io/control-plane: }",
    ),
    (
        "first-untolerated-taint-reported",
        (tol("a", "Exists"),),
        (taint("a", "1"), taint("b", "2"), taint("c", "3", "NoExecute")),
        "{b: 2}",
    ),
    ("unknown-operator-tolerates-nothing", (tol("a", "Bogus", "1"),), (taint("a", "1"),), "{a: 1}"),
]


@pytest.mark.parametrize(
    ("tolerations", "taints", "untolerated"),
    [c[1:] for c in TAINT_FILTER_CASES],
    ids=[c[0] for c in TAINT_FILTER_CASES],
)
def test_taint_toleration_filter(
    tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...], untolerated: str | None
) -> None:
    status = run_filter(TaintToleration(), make_pod(tolerations=tolerations), make_node(taints=taints))
    if untolerated is None:
        assert status.is_success()
    else:
        assert status.code is UNRES
        assert status.reasons == (f"node(s) had untolerated taint {untolerated}",)


def test_taint_toleration_filter_judges_each_taint_list_once_per_cycle() -> None:
    """One CycleState over nodes whose taint lists repeat (equal, not identical, tuples):
    each node still gets its own verdict."""
    pod = make_pod(tolerations=(tol("a", "Exists"),))
    nodes = [
        make_node("n1", taints=(taint("a"),)),
        make_node("n2", taints=(taint("b"),)),
        make_node("n3", taints=(taint("a"),)),
        make_node("n4", taints=(taint("b"),)),
        make_node("n5"),
    ]
    state, plugin = CycleState(), TaintToleration()
    got = {n.name: plugin.filter(state, pod, n).code for n in nodes}
    assert got == {"n1": Code.SUCCESS, "n2": UNRES, "n3": Code.SUCCESS, "n4": UNRES, "n5": Code.SUCCESS}


# --------------------------------------------------------------------------- TaintToleration Score

TAINT_SCORE_CASES: list[tuple[str, tuple[Toleration, ...], dict[str, tuple[Taint, ...]], dict[str, int]]] = [
    (
        "tolerated-taint-scores-higher",
        (tol("foo", "Equal", "bar", "PreferNoSchedule"),),
        {"a": (taint("foo", "bar", "PreferNoSchedule"),), "b": (taint("foo", "blah", "PreferNoSchedule"),)},
        {"a": 100, "b": 0},
    ),
    (
        "all-tolerated-same-score-regardless-of-count",
        (
            tol("cpu-type", "Equal", "arm64", "PreferNoSchedule"),
            tol("disk-type", "Equal", "ssd", "PreferNoSchedule"),
        ),
        {
            "a": (),
            "b": (taint("cpu-type", "arm64", "PreferNoSchedule"),),
            "c": (
                taint("cpu-type", "arm64", "PreferNoSchedule"),
                taint("disk-type", "ssd", "PreferNoSchedule"),
            ),
        },
        {"a": 100, "b": 100, "c": 100},
    ),
    (
        "more-intolerable-taints-lower-score",
        (tol("foo", "Equal", "bar", "PreferNoSchedule"),),
        {
            "a": (),
            "b": (taint("cpu-type", "arm64", "PreferNoSchedule"),),
            "c": (
                taint("cpu-type", "arm64", "PreferNoSchedule"),
                taint("disk-type", "ssd", "PreferNoSchedule"),
            ),
        },
        {"a": 100, "b": 50, "c": 0},
    ),
    (
        "only-prefernoschedule-effects-checked",
        (tol("cpu-type", "Equal", "arm64", "NoSchedule"), tol("disk-type", "Equal", "ssd", "NoSchedule")),
        {
            "a": (),
            "b": (taint("cpu-type", "arm64", "NoSchedule"),),
            "c": (
                taint("cpu-type", "arm64", "PreferNoSchedule"),
                taint("disk-type", "ssd", "PreferNoSchedule"),
            ),
        },
        {"a": 100, "b": 100, "c": 0},
    ),
    (
        "no-tolerations-lands-on-untainted",
        (),
        {"a": (), "b": (taint("cpu-type", "arm64", "PreferNoSchedule"),)},
        {"a": 100, "b": 0},
    ),
    (
        "empty-effect-toleration-counts",
        (tol("cpu-type", "Exists"),),
        {"a": (taint("cpu-type", "x", "PreferNoSchedule"),), "b": (taint("gpu", "x", "PreferNoSchedule"),)},
        {"a": 100, "b": 0},
    ),
    ("no-taints-anywhere-all-max", (), {"a": (), "b": ()}, {"a": 100, "b": 100}),
]


@pytest.mark.parametrize(
    ("tolerations", "node_taints", "expected"),
    [c[1:] for c in TAINT_SCORE_CASES],
    ids=[c[0] for c in TAINT_SCORE_CASES],
)
def test_taint_toleration_score(
    tolerations: tuple[Toleration, ...], node_taints: dict[str, tuple[Taint, ...]], expected: dict[str, int]
) -> None:
    nodes = [make_node(name=n, taints=t) for n, t in node_taints.items()]
    assert run_score(TaintToleration(), make_pod(tolerations=tolerations), nodes) == expected


def test_taint_toleration_raw_score_counts_intolerable() -> None:
    node = make_node(
        taints=(
            taint("a", "1", "PreferNoSchedule"),
            taint("b", "2", "PreferNoSchedule"),
            taint("c", "3", "NoSchedule"),
        )
    )
    pod = make_pod(tolerations=(tol("a", "Exists", effect="PreferNoSchedule"),))
    assert TaintToleration().score(CycleState(), pod, node) == 1


# --------------------------------------------------------------------------- NodeAffinity Filter


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """A NodeSelectorRequirement."""
    return {"key": key, "operator": operator, "values": list(values)}


def term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A NodeSelectorTerm."""
    t: dict[str, Any] = {"matchExpressions": list(exprs)}
    if fields is not None:
        t["matchFields"] = fields
    return t


def required(*terms: Any) -> dict[str, Any]:
    """A pod affinity with requiredDuringSchedulingIgnoredDuringExecution terms."""
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def name_in(name: str) -> dict[str, Any]:
    return expr("metadata.name", "In", name)


AFFINITY_FILTER_CASES: list[tuple[str, dict[str, str], Any, str, dict[str, str], bool]] = [
    # (id, nodeSelector, affinity, node name, node labels, fits)
    ("missing-labels", {"foo": "bar"}, None, "n1", {}, False),
    ("same-labels", {"foo": "bar"}, None, "n1", {"foo": "bar"}, True),
    ("node-labels-superset", {"foo": "bar"}, None, "n1", {"foo": "bar", "baz": "blah"}, True),
    ("node-labels-subset", {"foo": "bar", "baz": "blah"}, None, "n1", {"foo": "bar"}, False),
    ("selector-value-mismatch", {"foo": "bar"}, None, "n1", {"foo": "baz"}, False),
    ("selector-empty-value-needs-label", {"foo": ""}, None, "n1", {}, False),
    ("selector-empty-value-present", {"foo": ""}, None, "n1", {"foo": ""}, True),
    ("in-matches", {}, required(term(expr("foo", "In", "bar", "value2"))), "n1", {"foo": "bar"}, True),
    ("in-no-match", {}, required(term(expr("foo", "In", "value1", "value2"))), "n1", {"foo": "bar"}, False),
    ("in-missing-label", {}, required(term(expr("foo", "In", "bar"))), "n1", {}, False),
    (
        "gt-matches",
        {},
        required(term(expr("kernel-version", "Gt", "0204"))),
        "n1",
        {"kernel-version": "0206"},
        True,
    ),
    ("gt-equal-no-match", {}, required(term(expr("v", "Gt", "5"))), "n1", {"v": "5"}, False),
    # "-3"/"+3" parse as integers but are not valid label values, so labels.NewRequirement rejects them.
    (
        "gt-negative-value-invalid-label-value",
        {},
        required(term(expr("v", "Gt", "-3"))),
        "n1",
        {"v": "2"},
        False,
    ),
    ("gt-plus-sign-invalid-label-value", {}, required(term(expr("v", "Gt", "+3"))), "n1", {"v": "4"}, False),
    ("lt-negative-node-label-parses", {}, required(term(expr("v", "Lt", "5"))), "n1", {"v": "-2"}, True),
    ("lt-matches", {}, required(term(expr("v", "Lt", "10"))), "n1", {"v": "9"}, True),
    ("lt-no-match", {}, required(term(expr("v", "Lt", "10"))), "n1", {"v": "10"}, False),
    ("gt-missing-label", {}, required(term(expr("v", "Gt", "1"))), "n1", {}, False),
    ("gt-non-integer-label", {}, required(term(expr("v", "Gt", "1"))), "n1", {"v": "abc"}, False),
    ("lt-non-integer-label", {}, required(term(expr("v", "Lt", "100"))), "n1", {"v": "1.5"}, False),
    ("gt-non-integer-value", {}, required(term(expr("v", "Gt", "1.5"))), "n1", {"v": "3"}, False),
    ("lt-non-integer-value", {}, required(term(expr("v", "Lt", "ten"))), "n1", {"v": "3"}, False),
    ("gt-two-values", {}, required(term(expr("v", "Gt", "1", "2"))), "n1", {"v": "3"}, False),
    ("gt-no-values", {}, required(term(expr("v", "Gt"))), "n1", {"v": "3"}, False),
    ("gt-value-overflows-int64", {}, required(term(expr("v", "Lt", str(2**63)))), "n1", {"v": "3"}, False),
    ("gt-label-overflows-int64", {}, required(term(expr("v", "Gt", "1"))), "n1", {"v": str(2**63)}, False),
    ("gt-underscore-not-integer", {}, required(term(expr("v", "Gt", "1"))), "n1", {"v": "1_000"}, False),
    (
        "notin-matches",
        {},
        required(term(expr("mem-type", "NotIn", "DDR", "DDR2"))),
        "n1",
        {"mem-type": "DDR3"},
        True,
    ),
    (
        "notin-no-match",
        {},
        required(term(expr("mem-type", "NotIn", "DDR", "DDR2"))),
        "n1",
        {"mem-type": "DDR"},
        False,
    ),
    ("notin-missing-label-matches", {}, required(term(expr("mem-type", "NotIn", "DDR"))), "n1", {}, True),
    ("exists-matches", {}, required(term(expr("GPU", "Exists"))), "n1", {"GPU": "NVIDIA-GRID-K1"}, True),
    ("exists-no-match", {}, required(term(expr("GPU", "Exists"))), "n1", {"foo": "bar"}, False),
    ("exists-with-values-invalid", {}, required(term(expr("GPU", "Exists", "x"))), "n1", {"GPU": "x"}, False),
    ("doesnotexist-matches", {}, required(term(expr("GPU", "DoesNotExist"))), "n1", {"foo": "bar"}, True),
    ("doesnotexist-no-match", {}, required(term(expr("GPU", "DoesNotExist"))), "n1", {"GPU": ""}, False),
    (
        "exists-no-values-key",
        {},
        required(term({"key": "GPU", "operator": "Exists"})),
        "n1",
        {"GPU": "a"},
        True,
    ),
    ("in-empty-values-invalid", {}, required(term(expr("foo", "In"))), "n1", {"foo": "bar"}, False),
    ("notin-empty-values-invalid", {}, required(term(expr("foo", "NotIn"))), "n1", {}, False),
    ("unknown-operator", {}, required(term(expr("foo", "Equals", "bar"))), "n1", {"foo": "bar"}, False),
    (
        "invalid-label-value",
        {},
        required(term(expr("foo", "NotIn", "invalid value: ___@#$%^"))),
        "n1",
        {"foo": "bar"},
        False,
    ),
    ("invalid-label-key", {}, required(term(expr("a/b/c", "DoesNotExist"))), "n1", {}, False),
    ("invalid-key-prefix", {}, required(term(expr("Bad_Prefix/x", "DoesNotExist"))), "n1", {}, False),
    (
        "prefixed-key-valid",
        {},
        required(term(expr("example.com/gpu", "Exists"))),
        "n1",
        {"example.com/gpu": "1"},
        True,
    ),
    ("empty-match-expressions", {}, required({"matchExpressions": []}), "n1", {"foo": "bar"}, False),
    ("empty-term", {}, required({}), "n1", {"foo": "bar"}, False),
    ("empty-terms-list", {}, required(), "n1", {"foo": "bar"}, False),
    (
        "null-terms",
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}},
        "n1",
        {},
        False,
    ),
    (
        "required-without-terms",
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        "n1",
        {},
        False,
    ),
    ("no-affinity", {}, None, "n1", {"foo": "bar"}, True),
    ("affinity-without-node-affinity", {}, {"podAffinity": {}}, "n1", {}, True),
    ("node-affinity-without-required", {}, {"nodeAffinity": {}}, "n1", {}, True),
    (
        "null-required",
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}},
        "n1",
        {},
        True,
    ),
    (
        "expressions-anded-match",
        {},
        required(term(expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER"))),
        "n1",
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "expressions-anded-no-match",
        {},
        required(term(expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER"))),
        "n1",
        {"GPU": "NVIDIA-GRID-K1"},
        False,
    ),
    (
        "terms-ored",
        {},
        required(term(expr("foo", "In", "bar", "value2")), term(expr("diffkey", "In", "wrong", "value2"))),
        "n1",
        {"foo": "bar"},
        True,
    ),
    (
        "terms-ored-second-matches",
        {},
        required(term(expr("diffkey", "In", "wrong")), term(expr("foo", "In", "bar"))),
        "n1",
        {"foo": "bar"},
        True,
    ),
    (
        "invalid-term-does-not-block-valid-term",
        {},
        required(term(expr("foo", "Gt", "abc")), term(expr("foo", "Exists"))),
        "n1",
        {"foo": "bar"},
        True,
    ),
    (
        "invalid-expression-fails-its-whole-term",
        {},
        required(term(expr("foo", "Exists"), expr("foo", "Bogus"))),
        "n1",
        {"foo": "bar"},
        False,
    ),
    (
        "selector-and-affinity-both-satisfied",
        {"foo": "bar"},
        required(term(expr("foo", "Exists"))),
        "n1",
        {"foo": "bar"},
        True,
    ),
    (
        "affinity-matches-selector-not",
        {"foo": "bar"},
        required(term(expr("foo", "Exists"))),
        "n1",
        {"foo": "barrrrrr"},
        False,
    ),
    (
        "selector-matches-affinity-not",
        {"foo": "bar"},
        required(term(expr("gpu", "Exists"))),
        "n1",
        {"foo": "bar"},
        False,
    ),
    ("match-fields-in-matches", {}, required(term(fields=[name_in("node_1")])), "node_1", {}, True),
    ("match-fields-in-no-match", {}, required(term(fields=[name_in("node_1")])), "node_2", {}, False),
    (
        "match-fields-notin",
        {},
        required(term(fields=[expr("metadata.name", "NotIn", "node_1")])),
        "node_2",
        {},
        True,
    ),
    (
        "match-fields-notin-self",
        {},
        required(term(fields=[expr("metadata.name", "NotIn", "node_1")])),
        "node_1",
        {},
        False,
    ),
    (
        "match-fields-in-two-values-invalid",
        {},
        required(term(fields=[expr("metadata.name", "In", "node_1", "node_2")])),
        "node_1",
        {},
        False,
    ),
    (
        "match-fields-exists-unsupported",
        {},
        required(term(fields=[expr("metadata.name", "Exists")])),
        "node_1",
        {},
        False,
    ),
    (
        "match-fields-other-key-unsupported",
        {},
        required(term(fields=[expr("metadata.uid", "NotIn", "x")])),
        "n1",
        {},
        False,
    ),
    (
        "two-terms-fields-no-expressions-yes",
        {},
        required(term(fields=[name_in("node_1")]), term(expr("foo", "In", "bar"))),
        "node_2",
        {"foo": "bar"},
        True,
    ),
    (
        "one-term-fields-no-expressions-yes",
        {},
        required(term(expr("foo", "In", "bar"), fields=[name_in("node_1")])),
        "node_2",
        {"foo": "bar"},
        False,
    ),
    (
        "one-term-fields-and-expressions-match",
        {},
        required(term(expr("foo", "In", "bar"), fields=[name_in("node_1")])),
        "node_1",
        {"foo": "bar"},
        True,
    ),
    (
        "two-terms-neither-matches",
        {},
        required(term(fields=[name_in("node_1")]), term(expr("foo", "In", "not-match-to-bar"))),
        "node_2",
        {"foo": "bar"},
        False,
    ),
    # Malformed bodies: never raise, never match.
    ("malformed-node-affinity-list", {}, {"nodeAffinity": []}, "n1", {}, False),
    (
        "malformed-required-string",
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "x"}},
        "n1",
        {},
        False,
    ),
    (
        "malformed-terms-dict",
        {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {"a": 1}}}},
        "n1",
        {},
        False,
    ),
    ("malformed-term-string", {}, required("foo"), "n1", {"foo": "bar"}, False),
    ("malformed-term-none", {}, required(None), "n1", {"foo": "bar"}, False),
    (
        "malformed-expressions-dict",
        {},
        required({"matchExpressions": {"key": "foo"}}),
        "n1",
        {"foo": "bar"},
        False,
    ),
    ("malformed-expression-string", {}, required({"matchExpressions": ["foo"]}), "n1", {"foo": "bar"}, False),
    (
        "malformed-values-string",
        {},
        required(term({"key": "foo", "operator": "In", "values": "bar"})),
        "n1",
        {"foo": "bar"},
        False,
    ),
    (
        "malformed-values-int",
        {},
        required(term({"key": "v", "operator": "Gt", "values": [1]})),
        "n1",
        {"v": "3"},
        False,
    ),
    ("malformed-key-int", {}, required(term({"key": 1, "operator": "DoesNotExist"})), "n1", {}, False),
    (
        "malformed-operator-list",
        {},
        required(term({"key": "foo", "operator": ["In"], "values": ["bar"]})),
        "n1",
        {"foo": "bar"},
        False,
    ),
    ("malformed-fields-string", {}, required({"matchFields": "metadata.name"}), "n1", {}, False),
    (
        "malformed-field-operator-list",
        {},
        required(term(fields=[{"key": "metadata.name", "operator": ["In"], "values": ["n1"]}])),
        "n1",
        {},
        False,
    ),
]


@pytest.mark.parametrize(
    ("node_selector", "affinity", "node_name", "labels", "fits"),
    [c[1:] for c in AFFINITY_FILTER_CASES],
    ids=[c[0] for c in AFFINITY_FILTER_CASES],
)
def test_node_affinity_filter(
    node_selector: dict[str, str], affinity: Any, node_name: str, labels: dict[str, str], fits: bool
) -> None:
    pod = make_pod(node_selector=node_selector, affinity=affinity)
    status = run_filter(NodeAffinity(), pod, make_node(name=node_name, labels=labels))
    if fits:
        assert status.is_success()
    else:
        assert status.code is UNRES
        assert status.reasons == (AFFINITY_REASON,)


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([term(expr("zone", "In", "a"))], True),
        ([term(expr("zone", "In", "b"))], False),
        ([], False),
        (None, False),
        ("zone", False),
        ([{"matchExpressions": None, "matchFields": None}], False),
        ([term(fields=[name_in("n1")])], True),
    ],
    ids=["match", "no-match", "empty-list", "none", "not-a-list", "null-parts", "fields-only"],
)
def test_match_node_selector_terms(terms: Any, expected: bool) -> None:
    node = make_node(name="n1", labels={"zone": "a"})
    assert match_node_selector_terms(terms, node) is expected


def test_match_fields_ignored_for_nameless_node() -> None:
    """A nameless node has no fields upstream: matchFields cannot reject it, parse errors still do."""
    node = make_node(name="", labels={"foo": "bar"})
    assert match_node_selector_terms([term(expr("foo", "Exists"), fields=[name_in("x")])], node)
    assert not match_node_selector_terms([term(expr("foo", "Exists"), fields=[name_in("x"), {"a": 1}])], node)


# --------------------------------------------------------------------------- NodeAffinity Score


def preferred(*items: tuple[Any, Any]) -> dict[str, Any]:
    """A pod affinity with preferredDuringSchedulingIgnoredDuringExecution (weight, preference) items."""
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": p} for w, p in items
            ]
        }
    }


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}

AFFINITY1 = preferred((2, term(expr("foo", "In", "bar"))))
AFFINITY2 = preferred(
    (2, term(expr("foo", "In", "bar"))),
    (4, term(expr("key", "In", "value"))),
    (5, term(expr("foo", "In", "bar"), expr("key", "In", "value"), expr("az", "In", "az1"))),
)

AFFINITY_SCORE_CASES: list[tuple[str, Any, dict[str, dict[str, str]], dict[str, int]]] = [
    ("nil-affinity-all-zero", None, {"m1": LABEL1, "m2": LABEL2, "m3": LABEL3}, {"m1": 0, "m2": 0, "m3": 0}),
    ("no-node-matches", AFFINITY1, {"m1": LABEL4, "m2": LABEL2, "m3": LABEL3}, {"m1": 0, "m2": 0, "m3": 0}),
    (
        "only-one-matches",
        AFFINITY1,
        {"m1": LABEL1, "m2": LABEL2, "m3": LABEL3},
        {"m1": 100, "m2": 0, "m3": 0},
    ),
    (
        "different-weights",
        AFFINITY2,
        {"m1": LABEL1, "m5": LABEL5, "m2": LABEL2},
        {"m1": 18, "m5": 100, "m2": 36},
    ),
    (
        "zero-weight-skipped",
        preferred((0, term(expr("foo", "Exists")))),
        {"m1": LABEL1, "m2": {}},
        {"m1": 0, "m2": 0},
    ),
    (
        "empty-preference-skipped",
        preferred((5, {}), (1, term(expr("foo", "Exists")))),
        {"m1": LABEL1, "m2": {}},
        {"m1": 100, "m2": 0},
    ),
    (
        "invalid-term-contributes-nothing",
        preferred((50, term(expr("foo", "Gt", "x"))), (1, term(expr("key", "Exists")))),
        {"m1": LABEL1, "m2": LABEL2},
        {"m1": 0, "m2": 100},
    ),
    (
        "malformed-weights-skipped",
        preferred(
            ("5", term(expr("foo", "Exists"))),
            (True, term(expr("foo", "Exists"))),
            (-3, term(expr("foo", "Exists"))),
        ),
        {"m1": LABEL1},
        {"m1": 0},
    ),
    (
        "malformed-preferred-dict",
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": {}}},
        {"m1": LABEL1},
        {"m1": 0},
    ),
    (
        "malformed-item-string",
        {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": ["x"]}},
        {"m1": LABEL1},
        {"m1": 0},
    ),
    ("malformed-node-affinity", {"nodeAffinity": "x"}, {"m1": LABEL1}, {"m1": 0}),
    (
        "match-fields-preference",
        preferred((3, term(fields=[name_in("m2")]))),
        {"m1": LABEL1, "m2": LABEL1},
        {"m1": 0, "m2": 100},
    ),
]


@pytest.mark.parametrize(
    ("affinity", "node_labels", "expected"),
    [c[1:] for c in AFFINITY_SCORE_CASES],
    ids=[c[0] for c in AFFINITY_SCORE_CASES],
)
def test_node_affinity_score(
    affinity: Any, node_labels: dict[str, dict[str, str]], expected: dict[str, int]
) -> None:
    nodes = [make_node(name=n, labels=lab) for n, lab in node_labels.items()]
    assert run_score(NodeAffinity(), make_pod(affinity=affinity), nodes) == expected


def test_node_affinity_raw_score_sums_weights() -> None:
    node = make_node(name="m5", labels=LABEL5)
    assert NodeAffinity().score(CycleState(), make_pod(affinity=AFFINITY2), node) == 11


# --------------------------------------------------------------------------- PreFilter / PreScore Skip

SKIP_CASES = [
    # (plugin, extension point, pod fields, expected code)
    (NodePorts(), "pre_filter", {}, Code.SKIP),
    (NodePorts(), "pre_filter", {"host_ports": (HostPort("", "TCP", 8080),)}, Code.SUCCESS),
    (NodeAffinity(), "pre_filter", {}, Code.SKIP),
    (NodeAffinity(), "pre_filter", {"node_selector": {"disk": "ssd"}}, Code.SUCCESS),
    (NodeAffinity(), "pre_filter", {"affinity": {"nodeAffinity": {}}}, Code.SKIP),
    (
        NodeAffinity(),
        "pre_filter",
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        Code.SUCCESS,
    ),
    (NodeAffinity(), "pre_filter", {"affinity": {"nodeAffinity": "garbage"}}, Code.SUCCESS),
    (NodeAffinity(), "pre_score", {}, Code.SKIP),
    (
        NodeAffinity(),
        "pre_score",
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}},
        Code.SKIP,
    ),
    (
        NodeAffinity(),
        "pre_score",
        {
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": []}}
                    ]
                }
            }
        },
        Code.SUCCESS,
    ),
]


@pytest.mark.parametrize(
    ("plugin", "point", "fields", "code"),
    SKIP_CASES,
    ids=[
        "nodeports-no-host-port",
        "nodeports-host-port",
        "nodeaffinity-nothing",
        "nodeaffinity-selector",
        "nodeaffinity-empty-node-affinity",
        "nodeaffinity-required",
        "nodeaffinity-malformed-is-checked",
        "nodeaffinity-score-nothing",
        "nodeaffinity-score-required-only",
        "nodeaffinity-score-preferred",
    ],
)
def test_pre_filter_and_pre_score_skip(plugin: Any, point: str, fields: dict[str, Any], code: Code) -> None:
    """As upstream: Skip when the pod gives the plugin nothing to check or score."""
    pod = dataclasses.replace(PodInfo(uid="u1", namespace="ns", name="p1"), **fields)
    node = NodeInfo(name="n1", ready=True)
    arg: Any = {"n1": node} if point == "pre_filter" else [node]
    assert getattr(plugin, point)(CycleState(), pod, arg).code == code
