"""plugins/podtopologyspread: PodTopologySpread PreFilter, Filter, PreScore, Score and queueing
hints (no server).

Cases follow kube-scheduler's own plugin tests:
``pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go`` / ``scoring_test.go``
(the spread score expectations are upstream's numbers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    Code,
    CycleState,
    FilterPlugin,
    PreFilterPlugin,
    QueueingHint,
    ScorePlugin,
)
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.plugins.podtopologyspread import (
    ERR_REASON_CONSTRAINTS_NOT_MATCH,
    ERR_REASON_NODE_LABEL_NOT_MATCH,
    PodTopologySpread,
)
from ipscheduler.underlayip import events as pool_events
from tests.builders import label_selector_exprs
from tests.builders import node as mk_node
from tests.builders import workload_pod as mk_pod
from tests.unit.plugins.cycle import (
    HINT_NODE,
    HINT_POD,
    assert_plugin,
    assert_statuses,
    cycle_filter,
    cycle_score,
    hints_test,
)

OK = Code.SUCCESS
UNSCHED = Code.UNSCHEDULABLE
UNRES = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
HOST = "kubernetes.io/hostname"

SKEW = ERR_REASON_CONSTRAINTS_NOT_MATCH
NOLABEL = ERR_REASON_NODE_LABEL_NOT_MATCH

CODE_OF = {SKEW: UNSCHED, NOLABEL: UNRES}


def test_plugin_name_and_protocols() -> None:
    assert_plugin(PodTopologySpread(), "PodTopologySpread", PreFilterPlugin, FilterPlugin, ScorePlugin)


def spread(
    max_skew: int, key: str, when: str = "DoNotSchedule", selector: Any = None, **extra: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    c["labelSelector"] = label_selector_exprs(("foo", "Exists", [])) if selector is None else selector
    c.update(extra)
    return c


def foo_pods(node: str, n: int, ns: str = "default", **labels: str) -> list[PodInfo]:
    return [mk_pod(f"p-{node}-{i}", ns=ns, labels={"foo": "", **labels}) for i in range(n)]


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
        out.append(mk_node(name, labels, pods, taints=(taints or {}).get(name, ())))
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
    assert_statuses(got, want, "PodTopologySpread", CODE_OF)


def test_pod_topology_spread_prefilter_statuses() -> None:
    plugin = PodTopologySpread()
    nodes = {x.name: x for x in zone_cluster()}
    assert plugin.pre_filter(CycleState(), mk_pod(), nodes).code is Code.SKIP
    soft_only = mk_pod(spread=[spread(1, HOST, "ScheduleAnyway")])
    assert plugin.pre_filter(CycleState(), soft_only, nodes).code is Code.SKIP
    bad = mk_pod(spread=[spread(1, HOST, selector=label_selector_exprs(("a", "Foo", ["x"])))])
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
            spread=[soft(1, "zone"), soft(1, HOST, label_selector_exprs(("bar", "Exists", [])))],
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


# --------------------------------------------------------------------------- queueing hints

HINTS = [
    # id, event, pod, old, new, expected
    ("spread-node-deleted", events.NODE_DELETE, HINT_POD, HINT_NODE, None, QueueingHint.QUEUE),
    ("spread-pool-change", pool_events.ADDRESS_RELEASED, HINT_POD, None, None, QueueingHint.SKIP),
]


test_plugin_hints = hints_test(PodTopologySpread, HINTS)
