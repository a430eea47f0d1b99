"""plugins/tainttoleration: TaintToleration Filter, Score and queueing hints (no server).

Cases follow kube-scheduler's own plugin tests: taint_toleration_test.go.
"""

from __future__ import annotations

import dataclasses

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, CycleState, FilterPlugin, QueueingHint, ScorePlugin
from ipscheduler.framework.types import PodInfo, Taint, Toleration
from ipscheduler.plugins.tainttoleration import TaintToleration
from tests.builders import node as make_node
from tests.builders import pod_info
from tests.unit.plugins.cycle import HINT_NODE, HINT_POD, assert_plugin, hints_test, run_filter, run_score

UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key=key, value=value, effect=effect)


def test_plugin_name_and_protocols() -> None:
    assert_plugin(TaintToleration(), "TaintToleration", FilterPlugin, ScorePlugin)


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
    status = run_filter(TaintToleration(), pod_info(tolerations=tolerations), make_node(taints=taints))
    if untolerated is None:
        assert status.is_success()
    else:
        assert status.code is UNRES
        assert status.reasons == (f"node(s) had untolerated taint {untolerated}",)


def test_taint_toleration_filter_judges_each_taint_list_once_per_cycle() -> None:
    """One CycleState over nodes whose taint lists repeat (equal, not identical, tuples):
    each node still gets its own verdict."""
    pod = pod_info(tolerations=(tol("a", "Exists"),))
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
    assert run_score(TaintToleration(), pod_info(tolerations=tolerations), nodes) == expected


def test_taint_toleration_raw_score_counts_intolerable() -> None:
    node = make_node(
        taints=(
            taint("a", "1", "PreferNoSchedule"),
            taint("b", "2", "PreferNoSchedule"),
            taint("c", "3", "NoSchedule"),
        )
    )
    pod = pod_info(tolerations=(tol("a", "Exists", effect="PreferNoSchedule"),))
    assert TaintToleration().score(CycleState(), pod, node) == 1


# --------------------------------------------------------------------------- queueing hints

NOSCHED = Taint(key="dedicated", value="gpu", effect="NoSchedule")
GPU_TOL = Toleration(key="dedicated", operator="Equal", value="gpu", effect="NoSchedule")
P_GPU = PodInfo(uid="u", namespace="ns", name="p", tolerations=(GPU_TOL,))

HINTS = [
    # id, event (None: node update from old/new), pod, old, new, expected
    (
        "taint-removed",
        None,
        HINT_POD,
        dataclasses.replace(HINT_NODE, taints=(NOSCHED,)),
        HINT_NODE,
        QueueingHint.QUEUE,
    ),
    (
        "taint-added",
        None,
        HINT_POD,
        HINT_NODE,
        dataclasses.replace(HINT_NODE, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
    (
        "taint-tolerated-new-node",
        events.NODE_ADD,
        P_GPU,
        None,
        dataclasses.replace(HINT_NODE, taints=(NOSCHED,)),
        QueueingHint.QUEUE,
    ),
    (
        "taint-untolerated-new-node",
        events.NODE_ADD,
        HINT_POD,
        None,
        dataclasses.replace(HINT_NODE, taints=(NOSCHED,)),
        QueueingHint.SKIP,
    ),
]


test_plugin_hints = hints_test(TaintToleration, HINTS)
