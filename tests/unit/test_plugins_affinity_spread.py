"""Unit tests for InterPodAffinity and PodTopologySpread (no server).

Cases follow kube-scheduler's own plugin tests:
``pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go`` /
``scoring_test.go`` and
``pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go`` /
``scoring_test.go`` (the spread score expectations are upstream's numbers).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from ipscheduler.framework.interface import (
    Code,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
    Status,
)
from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector, label_selector_matches
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo, Snapshot, Taint
from ipscheduler.plugins.interpodaffinity import (
    ERR_REASON_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
    InterPodAffinity,
    normalize_min_max,
)
from ipscheduler.plugins.podtopologyspread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)
from ipscheduler.plugins.queuesort import PrioritySort

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
HOST = "kubernetes.io/hostname"

AFF = ERR_REASON_AFFINITY_RULES_NOT_MATCH
ANTI = ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH
EXISTING = ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH
SKEW = ERR_REASON_CONSTRAINTS_NOT_MATCH
NOLABEL = ERR_REASON_NODE_LABEL_NOT_MATCH

CODE_OF = {AFF: UNRES, ANTI: UNSCHED, EXISTING: UNSCHED, SKEW: UNSCHED, NOLABEL: UNRES}

_uid = itertools.count()


# --------------------------------------------------------------------------- builders


def mk_pod(
    name: str = "p",
    ns: str = "default",
    labels: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    spread: Iterable[Mapping[str, Any]] = (),
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    terminating: bool = False,
) -> PodInfo:
    """A PodInfo parsed from a raw pod body."""
    meta: dict[str, Any] = {
        "uid": f"uid-{next(_uid)}",
        "namespace": ns,
        "name": name,
        "labels": dict(labels or {}),
    }
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = tolerations
    return PodInfo.from_obj({"metadata": meta, "spec": spec})


def mk_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    pods: Iterable[PodInfo] = (),
    taints: Iterable[Taint] = (),
) -> NodeInfo:
    return NodeInfo(name=name, labels=dict(labels or {}), pods=tuple(pods), taints=tuple(taints), ready=True)


def sel(**match_labels: str) -> dict[str, Any]:
    return {"matchLabels": match_labels}


def exprs(*items: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": op, "values": v} for k, op, v in items]}


def term(
    selector: Any, key: str, namespaces: list[str] | None = None, ns_selector: Any = "absent"
) -> dict[str, Any]:
    t: dict[str, Any] = {"labelSelector": selector, "topologyKey": key}
    if namespaces is not None:
        t["namespaces"] = namespaces
    if ns_selector != "absent":
        t["namespaceSelector"] = ns_selector
    return t


def affinity(
    required: list[dict[str, Any]] | None = None,
    anti: list[dict[str, Any]] | None = None,
    preferred: list[tuple[int, dict[str, Any]]] | None = None,
    preferred_anti: list[tuple[int, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    if required is not None or preferred is not None:
        out["podAffinity"] = {}
        if required is not None:
            out["podAffinity"][req] = required
        if preferred is not None:
            out["podAffinity"][pref] = [{"weight": w, "podAffinityTerm": t} for w, t in preferred]
    if anti is not None or preferred_anti is not None:
        out["podAntiAffinity"] = {}
        if anti is not None:
            out["podAntiAffinity"][req] = anti
        if preferred_anti is not None:
            out["podAntiAffinity"][pref] = [{"weight": w, "podAffinityTerm": t} for w, t in preferred_anti]
    return out


def spread(
    max_skew: int, key: str, when: str = "DoNotSchedule", selector: Any = None, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    c["labelSelector"] = exprs(("foo", "Exists", [])) if selector is None else selector
    c.update(extra)
    return c


def foo_pods(node: str, n: int, ns: str = "default", **labels: str) -> list[PodInfo]:
    return [mk_pod(f"p-{node}-{i}", ns=ns, labels={"foo": "", **labels}) for i in range(n)]


def by_name(nodes: list[NodeInfo], snapshot: bool = False) -> Mapping[str, NodeInfo]:
    """The nodes as a plain mapping, or as the cache's :class:`Snapshot` (with its list of
    nodes that have pods with affinity terms)."""
    if not snapshot:
        return {n.name: n for n in nodes}
    snap = Snapshot()
    for node in nodes:
        snap.put(node)
    return snap


def cycle_filter(
    plugin: Any, pod: PodInfo, nodes: list[NodeInfo], snapshot: bool = False
) -> tuple[Status, dict[str, Status]]:
    """PreFilter over all nodes, then Filter each node with the same CycleState."""
    state = CycleState()
    pre = plugin.pre_filter(state, pod, by_name(nodes, snapshot))
    return pre, {n.name: plugin.filter(state, pod, n) for n in nodes}


def cycle_score(
    plugin: Any,
    pod: PodInfo,
    nodes: list[NodeInfo],
    feasible: Iterable[str] | None = None,
    snapshot: bool = False,
) -> dict[str, int]:
    """PreFilter over all nodes, Score + NormalizeScore over the feasible ones."""
    state = CycleState()
    plugin.pre_filter(state, pod, by_name(nodes, snapshot))
    names = set(feasible) if feasible is not None else {n.name for n in nodes}
    scores = {n.name: plugin.score(state, pod, n) for n in nodes if n.name in names}
    plugin.normalize_score(state, pod, scores)
    return scores


def assert_statuses(got: dict[str, Status], want: Mapping[str, str | None], plugin: str) -> None:
    for name, reason in want.items():
        st = got[name]
        if reason is None:
            assert st.is_success(), f"{name}: {st}"
        else:
            assert st.code is CODE_OF[reason], f"{name}: {st}"
            assert st.reasons == (reason,), f"{name}: {st}"
            assert st.plugin == plugin


@pytest.mark.parametrize(
    ("plugin", "name"),
    [(InterPodAffinity(), "InterPodAffinity"), (PodTopologySpread(), "PodTopologySpread")],
    ids=["InterPodAffinity", "PodTopologySpread"],
)
def test_plugin_names_and_protocols(plugin: Any, name: str) -> None:
    assert plugin.name == name
    for kind in (PreFilterPlugin, FilterPlugin, ScorePlugin):
        assert isinstance(plugin, kind)


# --------------------------------------------------------------------------- label selectors

SELECTOR_CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    ("none-matches-nothing", None, {"a": "1"}, False),
    ("empty-matches-everything", {}, {}, True),
    ("null-parts-match-everything", {"matchLabels": None, "matchExpressions": None}, {}, True),
    ("match-labels", sel(a="1"), {"a": "1", "b": "2"}, True),
    ("match-labels-wrong-value", sel(a="1"), {"a": "2"}, False),
    ("match-labels-missing", sel(a="1"), {}, False),
    ("in", exprs(("a", "In", ["1", "2"])), {"a": "2"}, True),
    ("in-missing", exprs(("a", "In", ["1"])), {}, False),
    ("notin-absent-matches", exprs(("a", "NotIn", ["1"])), {}, True),
    ("notin-listed", exprs(("a", "NotIn", ["1"])), {"a": "1"}, False),
    ("exists", exprs(("a", "Exists", [])), {"a": ""}, True),
    ("exists-missing", exprs(("a", "Exists", [])), {}, False),
    ("doesnotexist", exprs(("a", "DoesNotExist", [])), {}, True),
    ("doesnotexist-present", exprs(("a", "DoesNotExist", [])), {"a": "x"}, False),
    ("anded", {**sel(a="1"), **exprs(("b", "Exists", []))}, {"a": "1"}, False),
    ("invalid-operator-matches-nothing", exprs(("a", "Gt", ["1"])), {"a": "2"}, False),
    ("in-without-values-invalid", exprs(("a", "In", [])), {"a": "x"}, False),
    ("exists-with-values-invalid", exprs(("a", "Exists", ["x"])), {"a": "x"}, False),
    ("not-a-mapping", ["a"], {"a": "x"}, False),
    ("non-string-match-label", {"matchLabels": {"a": 1}}, {"a": "1"}, False),
]


@pytest.mark.parametrize(
    ("raw", "labels", "expected"), [c[1:] for c in SELECTOR_CASES], ids=[c[0] for c in SELECTOR_CASES]
)
def test_label_selector_matches(raw: Any, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matches(raw, labels) is expected


def test_label_selector_parse_errors_and_emptiness() -> None:
    with pytest.raises(InvalidSelectorError, match="not a valid label selector operator"):
        LabelSelector.parse(exprs(("a", "Foo", ["1"])))
    assert LabelSelector.parse({}).empty
    assert not LabelSelector.parse(None).empty
    assert not LabelSelector.parse(sel(a="1")).empty


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
    assert_statuses(got, want, "InterPodAffinity")


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
    assert_statuses(got, {"n1": None, "n2": AFF}, "InterPodAffinity")


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
    assert cycle_score_without_prefilter(plugin, pod, nodes) == {"n1": 71, "n2": 100, "n3": 0}


def cycle_score_without_prefilter(plugin: Any, pod: PodInfo, nodes: list[NodeInfo]) -> dict[str, int]:
    state = CycleState()
    scores = {x.name: plugin.score(state, pod, x) for x in nodes}
    plugin.normalize_score(state, pod, scores)
    return scores


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


# --------------------------------------------------------------------------- PodTopologySpread Filter

ZONES = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}


def zone_cluster(
    counts: Mapping[str, int] | None = None,
    extra_pods: Mapping[str, list[PodInfo]] | None = None,
    drop_zone: Iterable[str] = (),
    taints: Mapping[str, list[Taint]] | None = None,
) -> list[NodeInfo]:
    """node-a/node-b in zone1, node-x/node-y in zone2, ``counts[node]`` pods labelled foo on each."""
    out = []
    for name, zone in ZONES.items():
        labels = {HOST: name} if name in drop_zone else {"zone": zone, HOST: name}
        pods = foo_pods(name, (counts or {}).get(name, 0)) + (extra_pods or {}).get(name, [])
        out.append(mk_node(name, labels, pods, (taints or {}).get(name, ())))
    return out


FOO_POD = {"foo": ""}
ALL_FIT: dict[str, str | None] = dict.fromkeys(ZONES)


def want(**reasons: str | None) -> dict[str, str | None]:
    return {k.replace("_", "-"): v for k, v in reasons.items()}


PTS_FILTER_CASES: list[tuple[str, PodInfo, list[NodeInfo], dict[str, str | None]]] = [
    ("no-existing-pods", mk_pod(labels=FOO_POD, spread=[spread(1, "zone")]), zone_cluster(), ALL_FIT),
    (
        "no-existing-pods-incoming-does-not-match-itself",
        mk_pod(labels={"bar": ""}, spread=[spread(1, "zone")]),
        zone_cluster(),
        ALL_FIT,
    ),
    (
        "existing-pods-in-another-namespace-do-not-count",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone")]),
        zone_cluster(extra_pods={"node-a": foo_pods("node-a", 3, ns="ns1")}),
        ALL_FIT,
    ),
    (
        "zones-3-3-all-fit",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone")]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-x": 2, "node-y": 1}),
        ALL_FIT,
    ),
    (
        "zones-of-unequal-size-maxskew-1",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone")]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-x": 1}),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=None),
    ),
    (
        "node-without-zone-label-is-unresolvable-and-its-pods-do-not-count",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone")]),
        zone_cluster({"node-a": 1, "node-b": 5, "node-x": 2}, drop_zone=["node-b"]),
        want(node_a=None, node_b=NOLABEL, node_x=SKEW, node_y=SKEW),
    ),
    (
        "all-nodes-lack-the-rack-label",
        mk_pod(labels=FOO_POD, spread=[spread(1, "rack")]),
        zone_cluster(),
        dict.fromkeys(ZONES, NOLABEL),
    ),
    (
        "hostname-2-1-0-3-only-node-x-fits",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST)]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-y": 3}),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=SKEW),
    ),
    (
        "hostname-2-1-0-3-maxskew-2",
        mk_pod(labels=FOO_POD, spread=[spread(2, HOST)]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-y": 3}),
        want(node_a=SKEW, node_b=None, node_x=None, node_y=SKEW),
    ),
    (
        "hostname-2-1-0-3-incoming-pod-does-not-match-itself",
        mk_pod(labels={"bar": ""}, spread=[spread(1, HOST)]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-y": 3}),
        want(node_a=SKEW, node_b=None, node_x=None, node_y=SKEW),
    ),
    (
        "node-affinity-policy-honor-limits-domains",
        # matching pods 2/~1~/~0~/3: only node-a and node-y are domains, global min is 2
        mk_pod(
            labels=FOO_POD,
            spread=[spread(1, HOST)],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": HOST, "operator": "In", "values": ["node-a", "node-y"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        zone_cluster({"node-a": 2, "node-b": 1, "node-y": 3}),
        # node-b / node-x pass here; NodeAffinity rejects them in a real cycle
        want(node_a=None, node_b=None, node_x=None, node_y=SKEW),
    ),
    (
        "node-affinity-policy-ignore-counts-all-domains",
        mk_pod(
            labels=FOO_POD,
            spread=[spread(1, HOST, nodeAffinityPolicy="Ignore")],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": HOST, "operator": "In", "values": ["node-a", "node-y"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        zone_cluster({"node-a": 2, "node-b": 1, "node-y": 3}),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=SKEW),
    ),
    (
        "node-selector-honored",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone")], node_selector={"zone": "zone1"}),
        zone_cluster({"node-a": 1, "node-b": 1}),
        ALL_FIT,
    ),
    (
        "node-selector-ignored",
        mk_pod(
            labels=FOO_POD,
            spread=[spread(1, "zone", nodeAffinityPolicy="Ignore")],
            node_selector={"zone": "zone1"},
        ),
        zone_cluster({"node-a": 1, "node-b": 1}),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=None),
    ),
    (
        "node-taints-policy-ignore-by-default",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST)]),
        zone_cluster(
            {"node-a": 1, "node-b": 1, "node-y": 1},
            taints={"node-x": [Taint("dedicated", "gpu", "NoSchedule")]},
        ),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=SKEW),
    ),
    (
        "node-taints-policy-honor-drops-tainted-domain",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST, nodeTaintsPolicy="Honor")]),
        zone_cluster(
            {"node-a": 1, "node-b": 1, "node-y": 1},
            taints={"node-x": [Taint("dedicated", "gpu", "NoSchedule")]},
        ),
        ALL_FIT,
    ),
    (
        "node-taints-policy-honor-tolerated-taint-keeps-domain",
        mk_pod(
            labels=FOO_POD,
            spread=[spread(1, HOST, nodeTaintsPolicy="Honor")],
            tolerations=[{"key": "dedicated", "operator": "Exists"}],
        ),
        zone_cluster(
            {"node-a": 1, "node-b": 1, "node-y": 1},
            taints={"node-x": [Taint("dedicated", "gpu", "NoSchedule")]},
        ),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=SKEW),
    ),
    (
        "min-domains-greater-than-domains-treats-min-as-zero",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone", minDomains=3)]),
        zone_cluster({"node-a": 1, "node-x": 1}),
        dict.fromkeys(ZONES, SKEW),
    ),
    (
        "min-domains-equal-to-domains",
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone", minDomains=2)]),
        zone_cluster({"node-a": 1, "node-x": 1}),
        ALL_FIT,
    ),
    (
        "min-domains-with-larger-maxskew",
        # 2/1 across zones, 2 < minDomains 3 → min 0: zone1 2+1 > 2, zone2 1+1 <= 2
        mk_pod(labels=FOO_POD, spread=[spread(2, "zone", minDomains=3)]),
        zone_cluster({"node-a": 2, "node-x": 1}),
        want(node_a=SKEW, node_b=SKEW, node_x=None, node_y=None),
    ),
    (
        "terminating-pods-are-excluded",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST)]),
        zone_cluster(
            {"node-b": 1, "node-x": 1, "node-y": 1},
            extra_pods={"node-a": [mk_pod("t", labels=FOO_POD, terminating=True)] * 2},
        ),
        want(node_a=None, node_b=SKEW, node_x=SKEW, node_y=SKEW),
    ),
    (
        "match-label-keys-narrow-the-selector",
        mk_pod(labels={"foo": "", "rev": "2"}, spread=[spread(1, HOST, matchLabelKeys=["rev"])]),
        zone_cluster(
            extra_pods={
                "node-a": [mk_pod(f"old{i}", labels={"foo": "", "rev": "1"}) for i in range(3)],
                "node-b": [mk_pod("new", labels={"foo": "", "rev": "2"})],
            }
        ),
        want(node_a=None, node_b=SKEW, node_x=None, node_y=None),
    ),
    (
        "empty-selector-counts-nothing-but-self-matches",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST, selector={})]),
        zone_cluster({"node-a": 3}),
        ALL_FIT,
    ),
    (
        "two-constraints-zone-and-hostname",
        # zone 3/1 and hosts 2/1/1/0: zone1 fails the zone constraint, node-x the hostname one
        mk_pod(labels=FOO_POD, spread=[spread(1, "zone"), spread(1, HOST)]),
        zone_cluster({"node-a": 2, "node-b": 1, "node-x": 1}),
        want(node_a=SKEW, node_b=SKEW, node_x=SKEW, node_y=None),
    ),
    (
        "schedule-anyway-constraints-do-not-filter",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST, "ScheduleAnyway")]),
        zone_cluster({"node-a": 5}),
        ALL_FIT,
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "want"), [c[1:] for c in PTS_FILTER_CASES], ids=[c[0] for c in PTS_FILTER_CASES]
)
def test_pod_topology_spread_filter(pod: PodInfo, nodes: list[NodeInfo], want: dict[str, str | None]) -> None:
    pre, got = cycle_filter(PodTopologySpread(), pod, nodes)
    assert pre.code in (OK, Code.SKIP)
    assert_statuses(got, want, "PodTopologySpread")


def test_pod_topology_spread_prefilter_statuses() -> None:
    plugin = PodTopologySpread()
    nodes = {x.name: x for x in zone_cluster()}
    assert plugin.pre_filter(CycleState(), mk_pod(), nodes).code is Code.SKIP
    soft_only = mk_pod(spread=[spread(1, HOST, "ScheduleAnyway")])
    assert plugin.pre_filter(CycleState(), soft_only, nodes).code is Code.SKIP
    bad = mk_pod(spread=[spread(1, HOST, selector=exprs(("a", "Foo", ["x"])))])
    assert plugin.pre_filter(CycleState(), bad, nodes).code is Code.ERROR
    assert plugin.filter(CycleState(), mk_pod(), nodes["node-a"]).code is Code.ERROR


# --------------------------------------------------------------------------- PodTopologySpread Score


def host_cluster(
    counts: Mapping[str, int], labels: Mapping[str, Mapping[str, str]] | None = None
) -> list[NodeInfo]:
    labels = labels or {}
    return [mk_node(name, labels.get(name, {HOST: name}), foo_pods(name, c)) for name, c in counts.items()]


def soft(max_skew: int, key: str, selector: Any = None, **extra: Any) -> dict[str, Any]:
    return spread(max_skew, key, "ScheduleAnyway", selector, **extra)


ZL = {name: {"zone": zone, HOST: name} for name, zone in ZONES.items()}

PTS_SCORE_CASES: list[tuple[str, PodInfo, list[NodeInfo], list[str] | None, dict[str, int]]] = [
    (
        "one-constraint-on-node-no-existing-pods",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 0, "node-b": 0}),
        None,
        {"node-a": 100, "node-b": 100},
    ),
    (
        "only-one-candidate-node",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 2, "node-b": 1}),
        ["node-a"],
        {"node-a": 100},
    ),
    (
        "all-nodes-same-number-of-matching-pods",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 1, "node-b": 1}),
        None,
        {"node-a": 100, "node-b": 100},
    ),
    (
        "hostname-2-1-0-3",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 2, "node-b": 1, "node-c": 0, "node-d": 3}),
        None,
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    (
        "null-selector-matches-nothing",
        mk_pod(
            labels=FOO_POD,
            spread=[{"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"}],
        ),
        host_cluster({"node-a": 2, "node-b": 1, "node-c": 0, "node-d": 3}),
        None,
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    (
        "hostname-2-1-0-3-maxskew-2",
        mk_pod(labels=FOO_POD, spread=[soft(2, HOST)]),
        host_cluster({"node-a": 2, "node-b": 1, "node-c": 0, "node-d": 3}),
        None,
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    (
        "hostname-4-3-2-1-maxskew-3",
        mk_pod(labels=FOO_POD, spread=[soft(3, HOST)]),
        host_cluster({"node-a": 4, "node-b": 3, "node-c": 2, "node-d": 1}),
        None,
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    (
        "hostname-3-of-4-candidates",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}),
        ["node-a", "node-b", "node-x"],
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    (
        "candidate-without-topology-key-is-ignored",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        host_cluster({"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}, {"node-b": {"n": "node-b"}}),
        ["node-a", "node-b", "node-x"],
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    (
        "zone-3-of-4-candidates",
        mk_pod(labels=FOO_POD, spread=[soft(1, "zone")]),
        host_cluster({"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}, ZL),
        ["node-a", "node-b", "node-x"],
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    (
        "zone-and-hostname-2-of-4-candidates",
        mk_pod(labels=FOO_POD, spread=[soft(1, "zone"), soft(1, HOST)]),
        host_cluster({"node-a": 2, "node-b": 1, "node-x": 2, "node-y": 4}, ZL),
        ["node-a", "node-x"],
        {"node-a": 100, "node-x": 63},
    ),
    (
        "zone-and-hostname-with-different-selectors",
        mk_pod(
            labels={"foo": "", "bar": ""},
            spread=[soft(1, "zone"), soft(1, HOST, exprs(("bar", "Exists", [])))],
        ),
        [
            mk_node("node-a", ZL["node-a"], [mk_pod("a1", labels={"foo": ""})]),
            mk_node("node-b", ZL["node-b"], [mk_pod("b1", labels={"foo": "", "bar": ""})]),
            mk_node("node-x", ZL["node-x"]),
            mk_node(
                "node-y", ZL["node-y"], [mk_pod("y1", labels={"foo": ""}), mk_pod("y2", labels={"bar": ""})]
            ),
        ],
        None,
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    (
        "existing-pods-in-another-namespace-do-not-count",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        [
            mk_node("node-a", {HOST: "node-a"}, foo_pods("node-a", 1, ns="ns1") + foo_pods("node-a", 1)),
            mk_node("node-b", {HOST: "node-b"}, foo_pods("node-b", 2)),
        ],
        None,
        {"node-a": 100, "node-b": 33},
    ),
    (
        "terminating-pods-are-excluded",
        mk_pod(labels=FOO_POD, spread=[soft(1, HOST)]),
        [
            mk_node("node-a", {HOST: "node-a"}, [mk_pod("t", labels=FOO_POD, terminating=True)]),
            mk_node("node-b", {HOST: "node-b"}, foo_pods("node-b", 1)),
        ],
        None,
        {"node-a": 100, "node-b": 0},
    ),
    (
        "node-affinity-honor-excludes-pods-on-unmatched-nodes",
        mk_pod(labels=FOO_POD, spread=[soft(1, "zone")], node_selector={"pool": "a"}),
        [
            mk_node("node-a", {"zone": "zone1", "pool": "a"}, foo_pods("node-a", 1)),
            mk_node("node-b", {"zone": "zone1"}, foo_pods("node-b", 5)),
            mk_node("node-x", {"zone": "zone2", "pool": "a"}, foo_pods("node-x", 2)),
        ],
        ["node-a", "node-x"],
        {"node-a": 100, "node-x": 33},
    ),
    (
        "node-affinity-ignore-counts-pods-on-unmatched-nodes",
        mk_pod(
            labels=FOO_POD, spread=[soft(1, "zone", nodeAffinityPolicy="Ignore")], node_selector={"pool": "a"}
        ),
        [
            mk_node("node-a", {"zone": "zone1", "pool": "a"}, foo_pods("node-a", 1)),
            mk_node("node-b", {"zone": "zone1"}, foo_pods("node-b", 5)),
            mk_node("node-x", {"zone": "zone2", "pool": "a"}, foo_pods("node-x", 2)),
        ],
        ["node-a", "node-x"],
        {"node-a": 37, "node-x": 100},
    ),
    (
        "no-soft-constraints-scores-zero",
        mk_pod(labels=FOO_POD, spread=[spread(1, HOST)]),
        host_cluster({"node-a": 2, "node-b": 0}),
        None,
        {"node-a": 0, "node-b": 0},
    ),
]


@pytest.mark.parametrize(
    ("pod", "nodes", "feasible", "want"),
    [c[1:] for c in PTS_SCORE_CASES],
    ids=[c[0] for c in PTS_SCORE_CASES],
)
def test_pod_topology_spread_score(
    pod: PodInfo, nodes: list[NodeInfo], feasible: list[str] | None, want: dict[str, int]
) -> None:
    assert cycle_score(PodTopologySpread(), pod, nodes, feasible) == want


def test_pod_topology_spread_explicit_pre_score_matches_lazy() -> None:
    plugin = PodTopologySpread()
    pod = mk_pod(labels=FOO_POD, spread=[soft(1, "zone")])
    nodes = host_cluster({"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}, ZL)
    feasible = nodes[:3]
    state = CycleState()
    plugin.pre_filter(state, pod, {x.name: x for x in nodes})
    assert plugin.pre_score(state, pod, feasible).is_success()
    raw = {x.name: plugin.score(state, pod, x) for x in feasible}
    # zone1 = 6 pods, zone2 = 4 pods, weight log(2 + 2)
    assert raw == {"node-a": 8, "node-b": 8, "node-x": 6}
    plugin.normalize_score(state, pod, raw)
    assert raw == {"node-a": 75, "node-b": 75, "node-x": 100}


def test_the_snapshot_lists_only_nodes_with_pods_that_have_affinity_terms() -> None:
    anti = affinity(anti=[term(sel(foo="bar"), HOST)])
    plain, with_terms = mk_pod("plain"), mk_pod("anti", affinity=anti)
    snap = by_name([n("n1", [plain]), n("n2", [plain, with_terms]), n("n3")], snapshot=True)
    assert isinstance(snap, Snapshot) and list(snap.have_pods_with_affinity) == ["n2"]
    snap.put(n("n2", [plain]))  # the pod with terms left
    snap.put(n("n3", [with_terms]))
    assert list(snap.have_pods_with_affinity) == ["n3"]
    snap.drop("n3")
    assert not snap.have_pods_with_affinity and sorted(snap) == ["n1", "n2"]
