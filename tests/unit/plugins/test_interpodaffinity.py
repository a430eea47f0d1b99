"""plugins/interpodaffinity: InterPodAffinity PreFilter, Filter, Score and queueing hints
(no server).

Cases follow kube-scheduler's own plugin tests:
``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go`` / ``scoring_test.go``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    ActionType,
    ClusterEvent,
    Code,
    CycleState,
    EventResource,
    FilterPlugin,
    PreFilterPlugin,
    QueueingHint,
    ScorePlugin,
)
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.interpodaffinity import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
    normalize_min_max,
)
from ipscheduler.plugins.queuesort import PrioritySort
from tests.builders import affinity_term as term
from tests.builders import label_selector as sel
from tests.builders import label_selector_exprs as exprs
from tests.builders import node as mk_node
from tests.builders import pod_affinity as affinity
from tests.builders import workload_pod as mk_pod
from tests.unit.plugins.cycle import (
    HINT_NODE,
    HINT_POD,
    assert_plugin,
    assert_statuses,
    cycle_filter,
    cycle_score,
    hints_test,
    run_score,
)

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
HOST = "kubernetes.io/hostname"

AFF = ERR_REASON_AFFINITY_RULES_NOT_MATCH
ANTI = ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH
EXISTING = ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH

CODE_OF = {AFF: UNRES, ANTI: UNSCHED, EXISTING: UNSCHED}


def test_plugin_name_and_protocols() -> None:
    assert_plugin(InterPodAffinity(), "InterPodAffinity", PreFilterPlugin, FilterPlugin, ScorePlugin)


# --------------------------------------------------------------------------- InterPodAffinity Filter

SEC_S1 = sel(security="S1")
Z = {"zone": "z1", "region": "r1"}


def n(name: str, pods: Iterable[PodInfo] = (), **labels: str) -> NodeInfo:
    """Node with a hostname label plus ``labels``."""
    return mk_node(name, {HOST: name, **labels}, pods)


IPA_FILTER_CASES: list[tuple[str, PodInfo, list[NodeInfo], dict[str, str | None]]] = [
    ("no-affinity-empty-node", mk_pod(), [n("n1")], {"n1": None}),
    (
        "affinity-in-matches-existing-pod",
        mk_pod(
            affinity=affinity(required=[term(exprs(("service", "In", ["securityscan", "v2"])), "region")])
        ),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1")],
        {"n1": None},
    ),
    (
        "affinity-existing-pod-in-other-namespace-does-not-count",
        mk_pod(affinity=affinity(required=[term(sel(service="securityscan"), HOST)])),
        [n("n1", [mk_pod("e", ns="other", labels={"service": "securityscan"})])],
        {"n1": AFF},
    ),
    (
        "affinity-to-pods-in-listed-namespace",
        mk_pod(affinity=affinity(required=[term(sel(service="securityscan"), HOST, namespaces=["other"])])),
        [n("n1", [mk_pod("e", ns="other", labels={"service": "securityscan"})])],
        {"n1": None},
    ),
    (
        "affinity-listed-namespace-excludes-own",
        mk_pod(affinity=affinity(required=[term(sel(service="securityscan"), HOST, namespaces=["other"])])),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})])],
        {"n1": AFF},
    ),
    (
        "affinity-empty-namespace-selector-means-all-namespaces",
        mk_pod(affinity=affinity(required=[term(sel(service="securityscan"), HOST, ns_selector={})])),
        [n("n1", [mk_pod("e", ns="other", labels={"service": "securityscan"})])],
        {"n1": None},
    ),
    (
        "affinity-namespace-selector-by-metadata-name",
        mk_pod(
            affinity=affinity(
                required=[
                    term(
                        sel(service="securityscan"),
                        HOST,
                        ns_selector=exprs(("kubernetes.io/metadata.name", "In", ["other"])),
                    )
                ]
            )
        ),
        [n("n1", [mk_pod("e", ns="other", labels={"service": "securityscan"})])],
        {"n1": None},
    ),
    (
        "affinity-namespace-selector-on-unknown-label-matches-nothing",
        mk_pod(
            affinity=affinity(required=[term(sel(service="securityscan"), HOST, ns_selector=sel(team="a"))])
        ),
        [n("n1", [mk_pod("e", ns="other", labels={"service": "securityscan"})])],
        {"n1": AFF},
    ),
    (
        "affinity-unmatching-selector",
        mk_pod(affinity=affinity(required=[term(sel(service="antivirusscan"), "region")])),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1")],
        {"n1": AFF},
    ),
    (
        "affinity-different-operators-all-satisfied",
        mk_pod(
            affinity=affinity(
                required=[
                    term(
                        exprs(
                            ("service", "Exists", []),
                            ("service", "NotIn", ["WrongValue"]),
                            ("wrongkey", "DoesNotExist", []),
                        ),
                        "region",
                    ),
                    term(exprs(("service", "In", ["securityscan"])), "region"),
                ]
            )
        ),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1")],
        {"n1": None},
    ),
    (
        "affinity-expressions-anded-one-fails",
        mk_pod(
            affinity=affinity(
                required=[
                    term(exprs(("service", "Exists", []), ("wrongkey", "In", ["x"])), "region"),
                ]
            )
        ),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1")],
        {"n1": AFF},
    ),
    (
        "affinity-and-anti-affinity-both-satisfied",
        mk_pod(
            affinity=affinity(
                required=[term(sel(service="securityscan"), "region")],
                anti=[term(sel(service="antivirusscan"), "node")],
            )
        ),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1", node="n1")],
        {"n1": None},
    ),
    (
        "affinity-satisfied-anti-affinity-violated",
        mk_pod(
            affinity=affinity(
                required=[term(sel(service="securityscan"), "region")],
                anti=[term(sel(service="securityscan"), "zone")],
            )
        ),
        [n("n1", [mk_pod("e", labels={"service": "securityscan"})], region="r1", zone="z1")],
        {"n1": ANTI},
    ),
    (
        "anti-affinity-on-hostname",
        mk_pod(affinity=affinity(anti=[term(sel(app="db"), HOST)])),
        [n("n1", [mk_pod("e", labels={"app": "db"})], zone="z1"), n("n2", zone="z1")],
        {"n1": ANTI, "n2": None},
    ),
    (
        "anti-affinity-on-zone-blocks-the-whole-zone",
        mk_pod(affinity=affinity(anti=[term(sel(app="db"), "zone")])),
        [n("n1", [mk_pod("e", labels={"app": "db"})], zone="z1"), n("n2", zone="z1"), n("n3", zone="z2")],
        {"n1": ANTI, "n2": ANTI, "n3": None},
    ),
    (
        "anti-affinity-node-without-topology-key-passes",
        mk_pod(affinity=affinity(anti=[term(sel(app="db"), "zone")])),
        [n("n1", [mk_pod("e", labels={"app": "db"})], zone="z1"), n("n2")],
        {"n1": ANTI, "n2": None},
    ),
    (
        "anti-affinity-any-term-matching-rejects",
        mk_pod(affinity=affinity(anti=[term(sel(foo="bar"), "zone"), term(sel(bar="foo"), "zone")])),
        [n("n1", [mk_pod("e", labels={"bar": "foo"})], zone="z1"), n("n2", zone="z2")],
        {"n1": ANTI, "n2": None},
    ),
    (
        "existing-pod-anti-affinity-rejects-incoming-pod",
        mk_pod(labels={"service": "securityscan"}),
        [
            n(
                "n1",
                [mk_pod("e", affinity=affinity(anti=[term(sel(service="securityscan"), "zone")]))],
                zone="z1",
            ),
            n("n2", zone="z1"),
            n("n3", zone="z2"),
        ],
        {"n1": EXISTING, "n2": EXISTING, "n3": None},
    ),
    (
        "existing-pod-anti-affinity-selector-not-matching",
        mk_pod(labels={"service": "other"}),
        [
            n(
                "n1",
                [mk_pod("e", affinity=affinity(anti=[term(sel(service="securityscan"), "zone")]))],
                zone="z1",
            )
        ],
        {"n1": None},
    ),
    (
        "existing-pod-anti-affinity-scoped-to-its-namespace",
        mk_pod(labels={"service": "securityscan"}),
        [
            n(
                "n1",
                [
                    mk_pod(
                        "e", ns="other", affinity=affinity(anti=[term(sel(service="securityscan"), "zone")])
                    )
                ],
                zone="z1",
            )
        ],
        {"n1": None},
    ),
    (
        "existing-pod-anti-affinity-key-missing-on-its-node",
        mk_pod(labels={"service": "securityscan"}),
        [
            n("n1", [mk_pod("e", affinity=affinity(anti=[term(sel(service="securityscan"), "rack")]))]),
            n("n2", rack="r1"),
        ],
        {"n1": None, "n2": None},
    ),
    (
        "both-directions-anti-affinity-reports-incoming-first",
        mk_pod(labels={"app": "web"}, affinity=affinity(anti=[term(sel(app="db"), HOST)])),
        [n("n1", [mk_pod("e", labels={"app": "db"}, affinity=affinity(anti=[term(sel(app="web"), HOST)]))])],
        {"n1": ANTI},
    ),
    (
        "first-pod-of-a-set-matching-its-own-term",
        mk_pod(labels={"app": "set"}, affinity=affinity(required=[term(sel(app="set"), "zone")])),
        [n("n1", zone="z1"), n("n2", zone="z2"), n("n3")],
        {"n1": None, "n2": None, "n3": AFF},
    ),
    (
        "first-pod-but-not-matching-its-own-term",
        mk_pod(labels={"app": "other"}, affinity=affinity(required=[term(sel(app="set"), "zone")])),
        [n("n1", zone="z1"), n("n2", zone="z2")],
        {"n1": AFF, "n2": AFF},
    ),
    (
        "not-first-pod-must-follow-the-existing-one",
        mk_pod(labels={"app": "set"}, affinity=affinity(required=[term(sel(app="set"), "zone")])),
        [n("n1", zone="z1"), n("n2", [mk_pod("e", labels={"app": "set"})], zone="z2"), n("n3", zone="z2")],
        {"n1": AFF, "n2": None, "n3": None},
    ),
    (
        "affinity-terms-must-be-matched-by-the-same-pod",
        mk_pod(affinity=affinity(required=[term(sel(foo="bar"), "zone"), term(sel(bar="foo"), "region")])),
        [
            n("n1", [mk_pod("e1", labels={"foo": "bar"})], zone="z1", region="r1"),
            n("n2", [mk_pod("e2", labels={"bar": "foo"})], zone="z1", region="r1"),
        ],
        {"n1": AFF, "n2": AFF},
    ),
    (
        "affinity-terms-same-pod-all-topology-pairs-must-match",
        mk_pod(affinity=affinity(required=[term(sel(foo="bar"), "zone"), term(sel(foo="bar"), "region")])),
        [
            n("n1", [mk_pod("e1", labels={"foo": "bar"})], zone="z1", region="r1"),
            n("n2", zone="z2", region="r1"),
            n("n3", zone="z1"),
        ],
        {"n1": None, "n2": AFF, "n3": AFF},
    ),
]


@pytest.mark.parametrize("snapshot", [False, True], ids=["mapping", "snapshot"])
@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in IPA_FILTER_CASES], ids=[c[0] for c in IPA_FILTER_CASES]
)
def test_inter_pod_affinity_filter(
    pod: PodInfo, nodes: list[NodeInfo], want: dict[str, str | None], snapshot: bool
) -> None:
    """The same verdicts whether every node is visited or, from a Snapshot, only the nodes
    with pods that have affinity terms."""
    pre, got = cycle_filter(InterPodAffinity(), pod, nodes, snapshot=snapshot)
    assert pre.code in (OK, Code.SKIP)
    assert_statuses(got, want, "InterPodAffinity", CODE_OF)


def test_inter_pod_affinity_prefilter_skip_and_parse_error() -> None:
    plugin = InterPodAffinity()
    pre, got = cycle_filter(plugin, mk_pod(), [n("n1", [mk_pod("e", labels={"a": "b"})])])
    assert pre.code is Code.SKIP
    assert got["n1"].is_success()
    bad = mk_pod(affinity=affinity(required=[term(exprs(("a", "Foo", ["x"])), HOST)]))
    pre = plugin.pre_filter(CycleState(), bad, {"n1": n("n1")})
    assert pre.code is UNRES
    assert pre.reasons[0].startswith("parsing pod: requiredAffinityTerms:")


def test_inter_pod_affinity_filter_without_prefilter_is_error() -> None:
    st = InterPodAffinity().filter(CycleState(), mk_pod(), n("n1"))
    assert st.code is Code.ERROR


def test_namespace_labels_callback() -> None:
    plugin = InterPodAffinity(namespace_labels=lambda ns: {"team": "a"} if ns == "other" else None)
    pod = mk_pod(affinity=affinity(required=[term(sel(app="x"), HOST, ns_selector=sel(team="a"))]))
    nodes = [n("n1", [mk_pod("e", ns="other", labels={"app": "x"})]), n("n2")]
    _, got = cycle_filter(plugin, pod, nodes)
    assert_statuses(got, {"n1": None, "n2": AFF}, "InterPodAffinity", CODE_OF)


def test_inter_pod_affinity_in_profile_message() -> None:
    """The reasons reach the FailedScheduling histogram through the Framework."""
    plugin = InterPodAffinity()
    profile = Framework(scheduler_name="s", queue_sort=PrioritySort(), pre_filter=[plugin], filter=[plugin])
    pod = mk_pod(affinity=affinity(anti=[term(sel(app="db"), "zone")]))
    nodes = [n("n1", [mk_pod("e", labels={"app": "db"})], zone="z1"), n("n2", zone="z1"), n("n3", zone="z2")]
    feasible, diag = profile.find_feasible(CycleState(), pod, {x.name: x for x in nodes})
    assert [x.name for x in feasible] == ["n3"]
    assert diag.histogram() == {ANTI: 2}


# --------------------------------------------------------------------------- InterPodAffinity Score

REGION_NODES = {"n1": {"region": "china"}, "n2": {"region": "india"}, "n3": {"region": "china"}}


def region_cluster(pods_on: Mapping[str, list[PodInfo]]) -> list[NodeInfo]:
    return [mk_node(name, labels, pods_on.get(name, ())) for name, labels in REGION_NODES.items()]


IPA_SCORE_CASES: list[tuple[str, InterPodAffinity, PodInfo, list[NodeInfo], dict[str, int]]] = [
    (
        "no-affinity-anywhere-all-zero",
        InterPodAffinity(),
        mk_pod(),
        region_cluster({"n1": [mk_pod("e", labels={"security": "S1"})]}),
        {"n1": 0, "n2": 0, "n3": 0},
    ),
    (
        "preferred-affinity-favours-the-region-with-a-match",
        InterPodAffinity(),
        mk_pod(affinity=affinity(preferred=[(5, term(SEC_S1, "region"))])),
        region_cluster({"n1": [mk_pod("e", labels={"security": "S1"})]}),
        {"n1": 100, "n2": 0, "n3": 100},
    ),
    (
        "preferred-anti-affinity-avoids-the-region-with-a-match",
        InterPodAffinity(),
        mk_pod(affinity=affinity(preferred_anti=[(5, term(SEC_S1, "region"))])),
        region_cluster({"n1": [mk_pod("e", labels={"security": "S1"})]}),
        {"n1": 0, "n2": 100, "n3": 0},
    ),
    (
        "weights-add-up-and-min-max-normalize",
        InterPodAffinity(),
        mk_pod(
            affinity=affinity(
                preferred=[(8, term(SEC_S1, "region")), (2, term(sel(disk="ssd"), "region"))],
                preferred_anti=[(5, term(sel(app="noisy"), "region"))],
            )
        ),
        region_cluster(
            {
                "n1": [mk_pod("e1", labels={"security": "S1"}), mk_pod("e2", labels={"app": "noisy"})],
                "n2": [mk_pod("e3", labels={"disk": "ssd"})],
            }
        ),
        # raw: china 8-5=3, india 2 → min 2, max 3
        {"n1": 100, "n2": 0, "n3": 100},
    ),
    (
        "negative-raw-scores-normalize-from-the-minimum",
        InterPodAffinity(),
        mk_pod(
            affinity=affinity(
                preferred=[(3, term(SEC_S1, "region"))],
                preferred_anti=[(5, term(sel(app="noisy"), "region"))],
            )
        ),
        region_cluster(
            {"n1": [mk_pod("e1", labels={"app": "noisy"})], "n2": [mk_pod("e2", labels={"security": "S1"})]}
        ),
        # raw: china -5, india 3 → 0 / 100
        {"n1": 0, "n2": 100, "n3": 0},
    ),
    (
        "existing-pod-preferred-affinity-toward-incoming",
        InterPodAffinity(),
        mk_pod(labels={"security": "S1"}),
        region_cluster({"n2": [mk_pod("e", affinity=affinity(preferred=[(5, term(SEC_S1, "region"))]))]}),
        {"n1": 0, "n2": 100, "n3": 0},
    ),
    (
        "existing-pod-preferred-anti-affinity-toward-incoming",
        InterPodAffinity(),
        mk_pod(labels={"security": "S1"}),
        region_cluster(
            {"n2": [mk_pod("e", affinity=affinity(preferred_anti=[(5, term(SEC_S1, "region"))]))]}
        ),
        {"n1": 100, "n2": 0, "n3": 100},
    ),
    (
        "existing-pod-required-affinity-counts-with-hard-weight",
        InterPodAffinity(hard_pod_affinity_weight=1),
        mk_pod(labels={"security": "S1"}),
        region_cluster({"n2": [mk_pod("e", affinity=affinity(required=[term(SEC_S1, "region")]))]}),
        {"n1": 0, "n2": 100, "n3": 0},
    ),
    (
        "hard-pod-affinity-weight-zero-ignores-required-terms",
        InterPodAffinity(hard_pod_affinity_weight=0),
        mk_pod(labels={"security": "S1"}),
        region_cluster({"n2": [mk_pod("e", affinity=affinity(required=[term(SEC_S1, "region")]))]}),
        {"n1": 0, "n2": 0, "n3": 0},
    ),
    (
        "ignore-preferred-terms-of-existing-pods",
        InterPodAffinity(ignore_preferred_terms_of_existing_pods=True),
        mk_pod(labels={"security": "S1"}),
        region_cluster({"n2": [mk_pod("e", affinity=affinity(preferred=[(5, term(SEC_S1, "region"))]))]}),
        {"n1": 0, "n2": 0, "n3": 0},
    ),
    (
        "preferred-term-in-other-namespace-does-not-count",
        InterPodAffinity(),
        mk_pod(affinity=affinity(preferred=[(5, term(SEC_S1, "region"))])),
        region_cluster({"n1": [mk_pod("e", ns="other", labels={"security": "S1"})]}),
        {"n1": 0, "n2": 0, "n3": 0},
    ),
]


@pytest.mark.parametrize(
    ("plugin", "pod", "nodes", "want"), [c[1:] for c in IPA_SCORE_CASES], ids=[c[0] for c in IPA_SCORE_CASES]
)
@pytest.mark.parametrize("snapshot", [False, True], ids=["mapping", "snapshot"])
def test_inter_pod_affinity_score(
    plugin: InterPodAffinity, pod: PodInfo, nodes: list[NodeInfo], want: dict[str, int], snapshot: bool
) -> None:
    assert cycle_score(plugin, pod, nodes, snapshot=snapshot) == want


def test_inter_pod_affinity_raw_scores_and_fallback_without_prefilter() -> None:
    plugin = InterPodAffinity()
    pod = mk_pod(
        affinity=affinity(preferred=[(7, term(SEC_S1, "region"))], preferred_anti=[(2, term(SEC_S1, HOST))])
    )
    nodes = [
        mk_node("n1", {"region": "china", HOST: "n1"}, [mk_pod("e", labels={"security": "S1"})]),
        mk_node("n2", {"region": "china", HOST: "n2"}),
        mk_node("n3", {"region": "india", HOST: "n3"}),
    ]
    state = CycleState()
    plugin.pre_filter(state, pod, {x.name: x for x in nodes})
    assert [plugin.score(state, pod, x) for x in nodes] == [5, 7, 0]
    # Without PreFilter, only the scored nodes' pods are seen; here that is the whole cluster.
    assert run_score(plugin, pod, nodes) == {"n1": 71, "n2": 100, "n3": 0}


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ({}, {}),
        ({"a": 3, "b": 3}, {"a": 0, "b": 0}),
        ({"a": -5, "b": 0, "c": 3}, {"a": 0, "b": 62, "c": 100}),
        ({"a": 1, "b": 2, "c": 4}, {"a": 0, "b": 33, "c": 100}),
    ],
    ids=["empty", "all-equal", "negative", "positive"],
)
def test_normalize_min_max(raw: dict[str, int], want: dict[str, int]) -> None:
    normalize_min_max(raw)
    assert raw == want


# --------------------------------------------------------------------------- queueing hints

NODE_TAINT = ClusterEvent(EventResource.NODE, ActionType.UPDATE_NODE_TAINT, "NodeUpdate")

HINTS = [
    # id, event, pod, old, new, expected
    ("interpod-pod-added", events.ASSIGNED_POD_ADD, HINT_POD, None, HINT_POD, QueueingHint.QUEUE),
    ("interpod-taint-change", NODE_TAINT, HINT_POD, HINT_NODE, HINT_NODE, QueueingHint.SKIP),
]


test_plugin_hints = hints_test(InterPodAffinity, HINTS)
