"""framework/runtime: the extension-point runners of a profile's Framework (its building is
test_building's, the FitError text test_diagnosis's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    WILDCARD_EVENT,
    ClusterEventWithHint,
    Code,
    CycleState,
    Status,
    default_normalize,
)
from ipscheduler.framework.runtime import (
    Framework,
    num_feasible_nodes_to_find,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.plugins.queuesort import PrioritySort

TAINT = "node(s) had untolerated taint {a: b}"
NO_IP = "node(s) had no free underlay IPs"
POD = PodInfo(uid="uid-1", namespace="ns", name="pod")


def nodes(*names: str) -> dict[str, NodeInfo]:
    return {n: NodeInfo(name=n, ready=True) for n in names}


# --------------------------------------------------------------------------- fake plugins


@dataclass
class FakePreFilter:
    name: str
    result: Status = field(default_factory=Status.success)
    calls: list[str] = field(default_factory=list)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        self.calls.append(",".join(sorted(nodes)))
        return self.result


@dataclass
class FakeFilter:
    """Rejects the nodes in ``reject`` with ``reason``; records (plugin, node) calls in ``log``."""

    name: str
    reject: set[str]
    reason: str
    log: list[tuple[str, str]]
    set_plugin: bool = False

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.log.append((self.name, node.name))
        if node.name in self.reject:
            return Status.unschedulable(self.reason, plugin="SelfNamed" if self.set_plugin else "")
        return Status.success()


@dataclass
class FakeScore:
    name: str
    raw: dict[str, int]
    reverse: bool = False

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.raw[node.name]

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        default_normalize(scores, reverse=self.reverse)


@dataclass
class FakeReserve:
    name: str
    log: list[str]
    result: Status = field(default_factory=Status.success)
    boom: bool = False

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.log.append(f"reserve {self.name}")
        if self.boom:
            raise RuntimeError("kaput")
        return self.result

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        self.log.append(f"unreserve {self.name}")


@dataclass
class FakeBind:
    name: str
    log: list[str]
    result: Status

    async def bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        self.log.append(self.name)
        return self.result


def profile(**kw: object) -> Framework:
    return Framework(scheduler_name="ipscheduler", queue_sort=PrioritySort(), **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- find_feasible


def test_find_feasible_stops_at_first_failing_filter_per_node() -> None:
    log: list[tuple[str, str]] = []
    f1 = FakeFilter("F1", {"n1"}, TAINT, log)
    f2 = FakeFilter("F2", {"n1", "n2"}, NO_IP, log)
    f3 = FakeFilter("F3", {"n3"}, "node(s) z", log, set_plugin=True)
    p = profile(filter=[f1, f2, f3])
    feasible, diag = p.find_feasible(CycleState(), POD, nodes("n1", "n2", "n3", "n4"))
    assert [n.name for n in feasible] == ["n4"]
    assert log == [
        ("F1", "n1"),
        ("F1", "n2"),
        ("F2", "n2"),
        ("F1", "n3"),
        ("F2", "n3"),
        ("F3", "n3"),
        ("F1", "n4"),
        ("F2", "n4"),
        ("F3", "n4"),
    ]
    assert diag.node_to_status == {
        "n1": Status(Code.UNSCHEDULABLE, (TAINT,), "F1"),
        "n2": Status(Code.UNSCHEDULABLE, (NO_IP,), "F2"),
        "n3": Status(Code.UNSCHEDULABLE, ("node(s) z",), "SelfNamed"),
    }
    assert diag.pre_filter is None
    assert diag.num_all_nodes == 4
    assert diag.message() == (
        "0/4 nodes are available: 1 node(s) had no free underlay IPs, "
        "1 node(s) had untolerated taint {a: b}, 1 node(s) z."
    )


class Timings:
    """A MetricsRecorder that keeps what it is told."""

    def __init__(self) -> None:
        self.points: list[tuple[str, str]] = []
        self.plugins: list[tuple[str, str, str]] = []

    def observe_extension_point(self, point: str, status: str, seconds: float) -> None:
        assert seconds >= 0
        self.points.append((point, status))

    def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        assert seconds >= 0
        self.plugins.append((plugin, point, status))


@pytest.mark.parametrize(
    ("sampled", "plugin_rows"),
    [(False, []), (True, [("F1", "Filter", "Success"), ("F2", "Filter", "Success")])],
    ids=["not-sampled", "sampled"],
)
def test_extension_points_are_timed_every_cycle_plugins_in_sampled_ones(
    sampled: bool, plugin_rows: list[tuple[str, str, str]]
) -> None:
    log: list[tuple[str, str]] = []
    timings = Timings()
    p = profile(
        filter=[FakeFilter("F1", {"n1"}, TAINT, log), FakeFilter("F2", set(), NO_IP, log)],
        metrics_recorder=timings,
    )
    feasible, _ = p.find_feasible(CycleState(record_plugin_metrics=sampled), POD, nodes("n1", "n2", "n3"))
    assert [n.name for n in feasible] == ["n2", "n3"]
    assert timings.points == [("PreFilter", "Success"), ("Filter", "Success")]
    assert timings.plugins == plugin_rows  # one row per plugin per cycle, summed over the nodes


def test_a_cycle_where_no_node_fits_times_filter_as_unschedulable() -> None:
    timings = Timings()
    p = profile(filter=[FakeFilter("F1", {"n1"}, TAINT, [])], metrics_recorder=timings)
    p.find_feasible(CycleState(), POD, nodes("n1"))
    assert timings.points[-1] == ("Filter", "Unschedulable")


async def test_bind_points_are_timed_with_their_status() -> None:
    timings = Timings()
    p = profile(bind=[FakeBind("B", [], Status.error("boom"))], metrics_recorder=timings)
    await p.run_bind(CycleState(record_plugin_metrics=True), POD, NodeInfo(name="n1"))
    assert timings.points == [("Bind", "Error")]
    assert timings.plugins == [("B", "Bind", "Error")]


def test_find_feasible_all_pass() -> None:
    log: list[tuple[str, str]] = []
    p = profile(filter=[FakeFilter("F1", set(), TAINT, log)])
    feasible, diag = p.find_feasible(CycleState(), POD, nodes("n1", "n2"))
    assert [n.name for n in feasible] == ["n1", "n2"]
    assert diag.node_to_status == {}


@pytest.mark.parametrize(
    "rejection",
    [Status.unschedulable("pod has unbound PVC"), Status.error("pod has unbound PVC")],
    ids=["unschedulable", "error"],
)
def test_pre_filter_rejection_fails_every_node(rejection: Status) -> None:
    log: list[tuple[str, str]] = []
    pf1 = FakePreFilter("P1")
    pf2 = FakePreFilter("P2", rejection)
    pf3 = FakePreFilter("P3")
    p = profile(pre_filter=[pf1, pf2, pf3], filter=[FakeFilter("F1", set(), TAINT, log)])
    feasible, diag = p.find_feasible(CycleState(), POD, nodes("n1", "n2", "n3"))
    assert feasible == []
    assert log == []  # no Filter ran
    assert pf1.calls == ["n1,n2,n3"]
    assert pf3.calls == []
    assert diag.pre_filter == Status(rejection.code, rejection.reasons, "P2")  # named after its plugin
    assert diag.unschedulable_plugins == {"P2"}
    assert diag.histogram() == {"pod has unbound PVC": 3}
    assert diag.message() == "0/3 nodes are available: pod has unbound PVC."


def test_pre_filter_skip_leaves_out_that_plugins_filter_only() -> None:
    """Upstream SkipFilterPlugins: a PreFilter Skip means its Filter is not called."""
    log: list[tuple[str, str]] = []
    skipping = FakeFilter("F1", {"n1", "n2"}, TAINT, log)
    other = FakeFilter("F2", {"n2"}, NO_IP, log)
    p = profile(
        pre_filter=[FakePreFilter("F1", Status.skip()), FakePreFilter("P2")],
        filter=[skipping, other],
    )
    state = CycleState()
    feasible, diag = p.find_feasible(state, POD, nodes("n1", "n2"))
    assert [n.name for n in feasible] == ["n1"]
    assert log == [("F2", "n1"), ("F2", "n2")]
    assert diag.pre_filter is None
    assert p.run_filters(state, POD, nodes("n1")["n1"]).is_success()  # explain sees the same


@dataclass
class FakePreScore(FakeScore):
    pre: Status = field(default_factory=Status.success)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: object) -> Status:
        return self.pre


def test_pre_score_skip_leaves_the_plugin_out_of_the_totals() -> None:
    skipped = FakePreScore("S1", {"n1": 0, "n2": 9}, pre=Status.skip())
    kept = FakePreScore("S2", {"n1": 5, "n2": 1})
    p = profile(pre_score=[skipped, kept], score=[(skipped, 3), (kept, 1)])
    feasible = list(nodes("n1", "n2").values())
    per_plugin = p.run_scores(CycleState(), POD, feasible)
    assert per_plugin == {"S2": {"n1": 100, "n2": 20}}
    assert p.total_scores(per_plugin, feasible) == {"n1": 100, "n2": 20}


def test_find_feasible_no_nodes() -> None:
    feasible, diag = profile().find_feasible(CycleState(), POD, {})
    assert feasible == []
    assert diag.message() == "no nodes available to schedule pods"


# --------------------------------------------------------------------------- percentageOfNodesToScore


@pytest.mark.parametrize(
    ("percentage", "all_nodes", "want"),
    [
        (None, 0, 0),
        (None, 99, 99),  # below 100 nodes: every node
        (10, 99, 99),
        (None, 100, 100),  # 50 - 0 = 50 % of 100 = 50, raised to the minimum of 100
        (None, 1000, 420),  # 50 - 8 = 42 %
        (None, 5000, 500),  # 50 - 40 = 10 %
        (None, 6000, 300),  # 50 - 48 = 2 % → floor 5 %
        (0, 1000, 420),  # 0 is adaptive too
        (100, 5000, 5000),
        (1, 5000, 100),  # never below 100
        (30, 1000, 300),
    ],
    ids=[
        "no-nodes",
        "99-nodes",
        "99-nodes-10pct",
        "100-nodes",
        "1000-adaptive",
        "5000-adaptive",
        "6000-adaptive-floor",
        "zero-is-adaptive",
        "100pct",
        "1pct-min-100",
        "30pct",
    ],
)
def test_num_feasible_nodes_to_find_as_upstream(percentage: int | None, all_nodes: int, want: int) -> None:
    """Figures from upstream's ``numFeasibleNodesToFind`` (pkg/scheduler/schedule_one.go)."""
    assert num_feasible_nodes_to_find(percentage, all_nodes) == want


def many(n: int) -> dict[str, NodeInfo]:
    return nodes(*(f"n{i:04d}" for i in range(n)))


def test_a_cycle_stops_once_enough_nodes_fit_and_the_next_one_goes_on_from_there() -> None:
    log: list[tuple[str, str]] = []
    p = profile(filter=[FakeFilter("F", {"n0001"}, TAINT, log)], percentage_of_nodes_to_score=10)
    all_nodes = many(1000)
    feasible, diag = p.find_feasible(CycleState(), POD, all_nodes)
    assert len(feasible) == 100 and len(log) == 101  # n0001 rejected on the way
    assert feasible[0].name == "n0000" and feasible[-1].name == "n0100"
    assert diag.node_to_status == {"n0001": Status(Code.UNSCHEDULABLE, (TAINT,), "F")}
    feasible, _ = p.find_feasible(CycleState(), POD, all_nodes)
    assert feasible[0].name == "n0101"  # the rotating start index
    p.next_start_node_index = 950
    feasible, _ = p.find_feasible(CycleState(), POD, all_nodes)
    assert feasible[0].name == "n0950" and feasible[-1].name == "n0050"  # wraps around (n0001 fails)
    assert p.next_start_node_index == 51


def test_the_only_feasible_node_beyond_the_first_slice_is_found() -> None:
    log: list[tuple[str, str]] = []
    all_nodes = many(1000)
    reject = set(all_nodes) - {"n0999"}
    p = profile(filter=[FakeFilter("F", reject, NO_IP, log)])
    feasible, diag = p.find_feasible(CycleState(), POD, all_nodes)
    assert [n.name for n in feasible] == ["n0999"] and len(log) == 1000
    reject.add("n0999")
    feasible, diag = p.find_feasible(CycleState(), POD, all_nodes)
    assert feasible == [] and len(diag.node_to_status) == 1000  # the message counts every node
    assert diag.message() == "0/1000 nodes are available: 1000 node(s) had no free underlay IPs."


def test_find_all_filters_every_node_and_leaves_the_start_index() -> None:
    log: list[tuple[str, str]] = []
    p = profile(filter=[FakeFilter("F", set(), TAINT, log)], percentage_of_nodes_to_score=10)
    p.next_start_node_index = 7
    feasible, _ = p.find_feasible(CycleState(), POD, many(1000), find_all=True)
    assert len(feasible) == 1000 and feasible[0].name == "n0000"
    assert p.next_start_node_index == 7


# --------------------------------------------------------------------------- scores

SCORE_CASES = [
    # (raw per plugin, weights, reverse per plugin, expected normalized, expected totals)
    (
        {"A": {"n1": 10, "n2": 5, "n3": 0}},
        {"A": 1},
        {"A": False},
        {"A": {"n1": 100, "n2": 50, "n3": 0}},
        {"n1": 100, "n2": 50, "n3": 0},
    ),
    (
        {"A": {"n1": 10, "n2": 5, "n3": 0}},
        {"A": 1},
        {"A": True},
        {"A": {"n1": 0, "n2": 50, "n3": 100}},
        {"n1": 0, "n2": 50, "n3": 100},
    ),
    (
        {"A": {"n1": 4, "n2": 2, "n3": 1}, "B": {"n1": 0, "n2": 3, "n3": 3}},
        {"A": 1, "B": 2},
        {"A": False, "B": False},
        {"A": {"n1": 100, "n2": 50, "n3": 25}, "B": {"n1": 0, "n2": 100, "n3": 100}},
        {"n1": 100, "n2": 250, "n3": 225},
    ),
    (
        {"A": {"n1": 0, "n2": 0}},
        {"A": 3},
        {"A": False},
        {"A": {"n1": 0, "n2": 0}},
        {"n1": 0, "n2": 0},
    ),
    (
        {"A": {"n1": 3, "n2": 1}},
        {"A": 0},
        {"A": False},
        {"A": {"n1": 100, "n2": 33}},
        {"n1": 0, "n2": 0},
    ),
]


@pytest.mark.parametrize(
    ("raw", "weights", "reverse", "normalized", "totals"),
    SCORE_CASES,
    ids=["one-plugin", "reversed", "two-plugins-weighted", "all-zero", "weight-zero"],
)
def test_run_scores_and_total_scores(
    raw: dict[str, dict[str, int]],
    weights: dict[str, int],
    reverse: dict[str, bool],
    normalized: dict[str, dict[str, int]],
    totals: dict[str, int],
) -> None:
    plugins = [(FakeScore(name, scores, reverse[name]), weights[name]) for name, scores in raw.items()]
    p = profile(score=plugins)
    node_list = list(nodes(*next(iter(raw.values()))).values())
    per_plugin = p.run_scores(CycleState(), POD, node_list)
    assert per_plugin == normalized
    assert p.total_scores(per_plugin, node_list) == totals


@dataclass
class LocalScore(FakeScore):
    """A node-local FakeScore (its memo key is fixed); ``normalizes`` False: no NormalizeScore."""

    normalizes: bool = True
    calls: int = 0
    noop_normalizations: int = 0

    def node_local_key(self, pod: PodInfo) -> str:
        return "shape"

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        self.calls += 1
        return self.raw[node.name]

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        if not self.normalizes:  # as upstream's plugins without ScoreExtensions: nothing
            self.noop_normalizations += 1
            return
        default_normalize(scores, reverse=self.reverse)


SCORE_TOTAL_CASES = [
    # (plugins as (name, raw, weight, normalizes, node-local)), expected totals
    ([("A", {"n1": 30, "n2": 70}, 2, False, True)], {"n1": 60, "n2": 140}),
    (
        [("A", {"n1": 30, "n2": 70}, 1, False, True), ("B", {"n1": 4, "n2": 2}, 3, True, True)],
        {"n1": 330, "n2": 220},
    ),
    (
        [
            ("A", {"n1": 30, "n2": 70}, 1, False, True),
            ("B", {"n1": 4, "n2": 2}, 3, True, True),
            ("C", {"n1": 0, "n2": 5}, 2, True, False),
        ],
        {"n1": 330, "n2": 420},
    ),
    ([("C", {"n1": 1, "n2": 5}, 1, True, False)], {"n1": 20, "n2": 100}),
    (
        [("A", {"n1": 0, "n2": 0}, 1, False, True), ("B", {"n1": 0, "n2": 0}, 1, True, True)],
        {"n1": 0, "n2": 0},
    ),
]


@pytest.mark.parametrize(
    ("specs", "totals"),
    SCORE_TOTAL_CASES,
    ids=[
        "summed-only",
        "summed-and-normalized",
        "with-a-plugin-not-node-local",
        "none-node-local",
        "all-zero",
    ],
)
def test_score_totals_equal_the_weighted_sum_of_run_scores_and_reuse_node_local_scores(
    specs: list[tuple[str, dict[str, int], int, bool, bool]], totals: dict[str, int]
) -> None:
    plugins = [
        (LocalScore(name, raw, normalizes=norm) if local else FakeScore(name, raw), weight)
        for name, raw, weight, norm, local in specs
    ]
    p = profile(score=plugins)
    node_list = list(nodes("n1", "n2").values())
    assert p.score_totals(CycleState(), POD, node_list) == totals
    local = [plugin for plugin, _ in plugins if isinstance(plugin, LocalScore)]
    assert all(plugin.noop_normalizations == 0 for plugin in local)  # summed, never normalized
    assert p.total_scores(p.run_scores(CycleState(), POD, node_list), node_list) == totals
    before = [plugin.calls for plugin in local]
    assert p.score_totals(CycleState(), POD, node_list) == totals  # the same node objects again
    assert [plugin.calls for plugin in local] == before  # ... scored from the memo
    p.memoize = False
    assert p.score_totals(CycleState(), POD, node_list) == totals
    assert all(plugin.calls == b + len(node_list) for plugin, b in zip(local, before, strict=True))


def test_score_totals_rejects_a_summed_score_out_of_range() -> None:
    p = profile(score=[(LocalScore("Big", {"n1": 101}, normalizes=False), 1)])
    with pytest.raises(ValueError, match="plugin Big gave node n1 score 101"):
        p.score_totals(CycleState(), POD, list(nodes("n1").values()))


def test_run_scores_rejects_out_of_range() -> None:
    class Bad:
        name = "Bad"

        def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
            return 500

        def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
            pass

    p = profile(score=[(Bad(), 1)])
    with pytest.raises(ValueError, match="Bad"):
        p.run_scores(CycleState(), POD, list(nodes("n1").values()))


# --------------------------------------------------------------------------- reserve


async def test_run_reserve_failure_unreserves_all_in_reverse_order() -> None:
    log: list[str] = []
    failure = Status.unschedulable(NO_IP, plugin="B")
    plugins = [FakeReserve("A", log), FakeReserve("B", log, failure), FakeReserve("C", log)]
    p = profile(reserve=plugins)
    st = await p.run_reserve(CycleState(), POD, NodeInfo(name="n1"))
    assert st == failure
    assert log == ["reserve A", "reserve B", "unreserve C", "unreserve B", "unreserve A"]


async def test_run_reserve_exception_becomes_error_and_unreserves() -> None:
    log: list[str] = []
    plugins = [FakeReserve("A", log), FakeReserve("B", log, boom=True)]
    p = profile(reserve=plugins)
    st = await p.run_reserve(CycleState(), POD, NodeInfo(name="n1"))
    assert st.code is Code.ERROR
    assert st.plugin == "B"
    assert "kaput" in st.message
    assert log == ["reserve A", "reserve B", "unreserve B", "unreserve A"]


async def test_run_reserve_success_does_not_unreserve() -> None:
    log: list[str] = []
    p = profile(reserve=[FakeReserve("A", log), FakeReserve("B", log)])
    st = await p.run_reserve(CycleState(), POD, NodeInfo(name="n1"))
    assert st.is_success()
    assert log == ["reserve A", "reserve B"]


# --------------------------------------------------------------------------- bind

BIND_CASES = [
    # (binder results in order, expected calls, expected code)
    ([Status.skip(), Status.success(), Status.success()], ["B0", "B1"], Code.SUCCESS),
    ([Status.success(), Status.skip()], ["B0"], Code.SUCCESS),
    ([Status.skip(), Status.error("boom")], ["B0", "B1"], Code.ERROR),
    ([Status.skip(), Status.skip()], ["B0", "B1"], Code.ERROR),
    ([], [], Code.ERROR),
]


@pytest.mark.parametrize(
    ("results", "calls", "code"),
    BIND_CASES,
    ids=["skip-then-bind", "first-binds", "skip-then-error", "all-skip", "no-binders"],
)
async def test_run_bind_skips_plugins_that_skip(results: list[Status], calls: list[str], code: Code) -> None:
    log: list[str] = []
    p = profile(bind=[FakeBind(f"B{i}", log, r) for i, r in enumerate(results)])
    st = await p.run_bind(CycleState(), POD, NodeInfo(name="n1"))
    assert log == calls
    assert st.code is code


# --------------------------------------------------------------------------- queueing hints


class Rejecting:
    def __init__(self, name: str, registrations: list[ClusterEventWithHint] | None = None) -> None:
        self.name = name
        self._registrations = registrations

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return Status.unschedulable("no", plugin=self.name)

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Any) -> Status:
        return Status.success()


class Registering(Rejecting):
    def events_to_register(self) -> list[ClusterEventWithHint]:
        return list(self._registrations or [])


def test_framework_collects_registrations_once_per_plugin() -> None:
    reg = ClusterEventWithHint(events.NODE_ADD)
    with_ext, without = Registering("With", [reg]), Rejecting("Without")
    fw = Framework(
        scheduler_name="s", queue_sort=PrioritySort(), pre_filter=[with_ext], filter=[with_ext, without]
    )
    assert fw.queueing_hints() == [("With", reg), ("Without", ClusterEventWithHint(WILDCARD_EVENT))]


def test_diagnosis_names_every_rejecting_filter() -> None:
    a, b = Rejecting("A"), Rejecting("B")
    pod = PodInfo(uid="uid-p", namespace="ns", name="p")
    fw = Framework(scheduler_name="s", queue_sort=PrioritySort(), filter=[a])
    _, diagnosis = fw.find_feasible(CycleState(), pod, {"n1": NodeInfo(name="n1")})
    assert diagnosis.unschedulable_plugins == {"A"}
    fw = Framework(scheduler_name="s", queue_sort=PrioritySort(), filter=[b, a])
    _, diagnosis = fw.find_feasible(CycleState(), pod, {"n1": NodeInfo(name="n1")})
    assert diagnosis.unschedulable_plugins == {"B"}  # the first failing filter of each node


# --------------------------------------------------------------------------- plugin hints
