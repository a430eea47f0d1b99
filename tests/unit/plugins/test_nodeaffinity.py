"""plugins/nodeaffinity: NodeAffinity Filter, Score, its PreFilter/PreScore Skip and its queueing
hints (no server).

Cases follow kube-scheduler's own plugin tests: node_affinity_test.go.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ipscheduler.framework.interface import (
    Code,
    CycleState,
    FilterPlugin,
    QueueingHint,
    ScorePlugin,
)
from ipscheduler.framework.types import PodInfo, Taint
from ipscheduler.plugins.nodeaffinity import NodeAffinity
from tests.builders import node as make_node
from tests.builders import node_selector_expr as expr
from tests.builders import node_selector_term as term
from tests.builders import pod_info
from tests.unit.plugins.cycle import (
    HINT_NODE,
    assert_plugin,
    hints_test,
    pre_point_code,
    run_filter,
    run_score,
)

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodeAffinity(), "NodeAffinity", FilterPlugin, ScorePlugin)


# --------------------------------------------------------------------------- NodeAffinity Filter


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
    pod = pod_info(node_selector=node_selector or {}, affinity=affinity or {})
    status = run_filter(NodeAffinity(), pod, make_node(name=node_name, labels=labels))
    if fits:
        assert status.is_success()
    else:
        assert status.code is UNRES
        assert status.reasons == (AFFINITY_REASON,)


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
    assert run_score(NodeAffinity(), pod_info(affinity=affinity or {}), nodes) == expected


def test_node_affinity_raw_score_sums_weights() -> None:
    node = make_node(name="m5", labels=LABEL5)
    assert NodeAffinity().score(CycleState(), pod_info(affinity=AFFINITY2), node) == 11


# --------------------------------------------------------------------------- PreFilter / PreScore Skip

SKIP_CASES = [
    # (plugin, extension point, pod fields, expected code)
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
    assert pre_point_code(plugin, point, fields) == code


# --------------------------------------------------------------------------- queueing hints

P_ZONE_B = PodInfo(uid="u", namespace="ns", name="p", node_selector={"zone": "b"})
NOSCHED = Taint(key="dedicated", value="gpu", effect="NoSchedule")

HINTS = [
    # id, event (None: node update from old/new), pod, old, new, expected
    (
        "affinity-label-now-matches",
        None,
        P_ZONE_B,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, labels={"zone": "b"}),
        QueueingHint.QUEUE,
    ),
    (
        "affinity-label-still-not",
        None,
        P_ZONE_B,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, labels={"zone": "c"}),
        QueueingHint.SKIP,
    ),
    (
        "affinity-taint-change-not-registered",
        None,
        P_ZONE_B,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
]


test_plugin_hints = hints_test(NodeAffinity, HINTS)
