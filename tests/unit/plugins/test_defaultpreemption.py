"""DefaultPreemption: eligibility, victims per node, the node chosen, and what it does.

The cases mirror kube-scheduler's ``default_preemption_test.go``: node capacity is the
``pods`` allocatable (NodeResourcesFit's ``Too many pods``), so which pods must go is
plain to read.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from ipscheduler.framework.building import PluginHandle, new_framework
from ipscheduler.framework.config import Plugins, ProfileConfig
from ipscheduler.framework.interface import Code, CycleState, PostFilterResult, Status
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.plugins.defaultpreemption import (
    MSG_NEVER,
    DefaultPreemption,
    DefaultPreemptionArgs,
    DisruptionBudget,
    pods_with_pdb_violation,
)
from ipscheduler.plugins.registry import new_in_tree_registry
from tests.builders import node, pod_info

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def low(name: str, priority: int = 0, started: int = 0, **kw: Any) -> PodInfo:
    """A bound pod of ``priority`` started ``started`` minutes after T0."""
    return pod_info(name, priority=priority, start_time=T0 + datetime.timedelta(minutes=started), **kw)


def full(name: str, *pods: PodInfo, room: int | None = None, **kw: Any) -> NodeInfo:
    """A node that holds ``room`` pods (default: exactly ``pods``)."""
    n = len(pods) if room is None else room
    return node(
        name,
        pods=[p.__class__(**{**p.__dict__, "node_name": name}) for p in pods],
        allocatable={"pods": n},
        **kw,
    )


@dataclass
class FakeClient:
    budgets: list[dict[str, Any]] = field(default_factory=list)
    preempted: list[tuple[str, str]] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        return self.budgets

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool:
        self.preempted.append((victim.name, message))
        return True

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        self.cleared.append(pod.name)


@dataclass
class FakeRecorder:
    events: list[tuple[str, str, str, str]] = field(default_factory=list)

    def emit(
        self, obj: dict[str, str], event_type: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        self.events.append((obj["name"], event_type, reason, message))


@dataclass
class FakeMetrics:
    attempts: int = 0
    victims: list[int] = field(default_factory=list)

    def observe_extension_point(self, point: str, status: str, seconds: float) -> None:
        pass

    def observe_plugin(self, plugin: str, point: str, status: str, seconds: float) -> None:
        pass

    def observe_preemption_attempt(self) -> None:
        self.attempts += 1

    def observe_preemption_victims(self, victims: int) -> None:
        self.victims.append(victims)


class Nominated:
    def __init__(self, pods: dict[str, list[PodInfo]]) -> None:
        self.pods = pods

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return self.pods.get(node, [])

    def any_nominated(self) -> bool:
        return any(self.pods.values())


def profile(client: FakeClient | None = None, recorder: FakeRecorder | None = None) -> Framework:
    """NodeUnschedulable, TaintToleration and NodeResourcesFit, then DefaultPreemption with
    its offset fixed at 0."""
    plugins = Plugins.model_validate(
        {
            "queueSort": {"enabled": [{"name": "PrioritySort"}]},
            "filter": {"enabled": [{"name": n} for n in ("TaintToleration", "NodeResourcesFit")]},
            "postFilter": {"enabled": [{"name": "DefaultPreemption"}]},
            "bind": {"enabled": [{"name": "DefaultBinder"}]},
        }
    )
    handle = PluginHandle(binder=None, client=client or FakeClient(), recorder=recorder)  # type: ignore[arg-type]
    fw = new_framework(new_in_tree_registry(), ProfileConfig(), handle, plugins)
    for plugin in fw.post_filter:
        assert isinstance(plugin, DefaultPreemption)
        plugin._rand = lambda n: 0
    return fw


def run(
    fw: Framework, preemptor: PodInfo, nodes: Sequence[NodeInfo]
) -> tuple[PostFilterResult | None, Status]:
    state = CycleState()
    feasible, diagnosis = fw.find_feasible(state, preemptor, {n.name: n for n in nodes})
    assert not feasible, "the preemptor must fit nowhere for PostFilter to run"
    return asyncio.run(fw.run_post_filter(state, preemptor, diagnosis))


def plan_of(
    fw: Framework, preemptor: PodInfo, nodes: Sequence[NodeInfo]
) -> tuple[str | None, list[str], str]:
    state = CycleState()
    _, diagnosis = fw.find_feasible(state, preemptor, {n.name: n for n in nodes})
    plugin = fw.post_filter[0]
    assert isinstance(plugin, DefaultPreemption)
    plan = asyncio.run(plugin.evaluator.plan(state, preemptor, diagnosis.node_to_status))
    node_name = plan.candidate.node if plan.candidate else None
    return node_name, [v.name for v in plan.victims], plan.status.message


HIGH = pod_info("high", priority=100)

CASES = [
    pytest.param([full("a", low("v"))], HIGH, "a", ["v"], id="single victim"),
    pytest.param(
        [full("a", low("v1", 1), low("v2", 2), room=1)],
        HIGH,
        "a",
        ["v2", "v1"],
        id="every lower pod when none may stay",
    ),
    pytest.param(
        [full("a", low("v1", 1), low("v2", 2), room=2)],
        HIGH,
        "a",
        ["v1"],
        id="the more important pod is reprieved",
    ),
    pytest.param(
        [full("a", low("v1", 5, started=1), low("v2", 5, started=2), room=2)],
        HIGH,
        "a",
        ["v2"],
        id="among equals the pod started last goes",
    ),
    pytest.param(
        [full("a", low("v", 10)), full("b", low("w", 5))],
        HIGH,
        "b",
        ["w"],
        id="lowest highest-victim priority",
    ),
    pytest.param(
        [full("a", low("v1", 1), low("v2", 1), room=1), full("b", low("w", 1), room=1)],
        HIGH,
        "b",
        ["w"],
        id="smallest priority sum",
    ),
    pytest.param(
        [full("a", low("v", 0, started=1)), full("b", low("w", 0, started=5))],
        HIGH,
        "b",
        ["w"],
        id="the node whose victims started last",
    ),
    pytest.param([full("a", low("v", 100))], HIGH, None, [], id="equal priority is no victim"),
    pytest.param(
        [full("a", low("v")), full("b", low("w"), taints=[Taint("k", "v", "NoSchedule")])],
        HIGH,
        "a",
        ["v"],
        id="an unresolvable node is not tried",
    ),
]


@pytest.mark.parametrize(("nodes", "preemptor", "want_node", "want_victims"), CASES)
def test_the_victims_and_the_node(
    nodes: list[NodeInfo], preemptor: PodInfo, want_node: str | None, want_victims: list[str]
) -> None:
    got_node, victims, _ = plan_of(profile(), preemptor, nodes)
    assert (got_node, victims) == (want_node, want_victims)


@pytest.mark.parametrize(
    ("preemptor", "nodes", "message"),
    [
        pytest.param(
            pod_info("high", priority=100, preemption_policy="Never"),
            [full("a", low("v"))],
            f"preemption: {MSG_NEVER}",
            id="preemptionPolicy Never",
        ),
        pytest.param(
            HIGH,
            [full("a", low("v", 200))],
            "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
            id="no pod of lower priority",
        ),
        pytest.param(
            HIGH,
            [full("a", low("v")), full("b", low("w"), taints=[Taint("k", "v", "NoSchedule")])],
            None,
            id="success says nothing",
        ),
        pytest.param(
            HIGH,
            [full("b", low("w"), taints=[Taint("k", "v", "NoSchedule")])],
            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            id="only unresolvable nodes",
        ),
    ],
)
def test_post_filter_messages_are_kube_schedulers(
    preemptor: PodInfo, nodes: list[NodeInfo], message: str | None
) -> None:
    result, st = run(profile(), preemptor, nodes)
    if message is None:
        assert st.is_success() and result == PostFilterResult("a", frozenset({"uid-v"}))
    else:
        assert st.code is Code.UNSCHEDULABLE and st.message == message


def test_a_pod_nominated_elsewhere_with_a_terminating_victim_waits() -> None:
    victim = low("v").__class__(**{**low("v").__dict__, "deleting": True, "preempted": True})
    preemptor = pod_info("high", priority=100, nominated_node_name="a")
    _, st = run(profile(), preemptor, [full("a", victim)])
    assert st.message == "preemption: not eligible due to a terminating pod on the nominated node."


def test_budgets_are_respected_as_upstream_minimises_violations() -> None:
    budget = {
        "metadata": {"namespace": "ns", "name": "pdb"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"disruptionsAllowed": 0},
    }
    nodes = [full("a", low("v", 1, labels={"app": "db"})), full("b", low("w", 5))]
    fw = profile(FakeClient(budgets=[budget]))
    assert plan_of(fw, HIGH, nodes)[:2] == ("b", ["w"]), "the node without a violation wins"
    assert plan_of(fw, HIGH, nodes[:1])[:2] == ("a", ["v"]), "a violation is minimised, not forbidden"


@pytest.mark.parametrize(
    ("allowed", "disrupted", "want_violating"),
    [
        pytest.param(1, [], ["p1"], id="the second pod over the budget violates it"),
        pytest.param(2, [], [], id="within the budget"),
        pytest.param(0, ["p0"], ["p1"], id="a pod already disrupted uses nothing"),
    ],
)
def test_pods_with_pdb_violation(allowed: int, disrupted: list[str], want_violating: list[str]) -> None:
    pods = [pod_info(f"p{i}", labels={"app": "db"}) for i in range(2)]
    budget = DisruptionBudget.from_obj(
        {
            "metadata": {"namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {
                "disruptionsAllowed": allowed,
                "disruptedPods": {p: "2026-01-01T00:00:00Z" for p in disrupted},
            },
        }
    )
    assert budget is not None
    violating, non_violating = pods_with_pdb_violation(pods, [budget])
    assert [p.name for p in violating] == want_violating
    assert len(violating) + len(non_violating) == 2


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"metadata": {}, "spec": {}}, id="no namespace"),
        pytest.param(
            {"metadata": {"namespace": "ns"}, "spec": {"selector": {"matchExpressions": "x"}}},
            id="invalid selector",
        ),
    ],
)
def test_a_malformed_budget_is_left_out(body: dict[str, Any]) -> None:
    assert DisruptionBudget.from_obj(body) is None


def test_an_empty_selector_protects_no_pod() -> None:
    budget = DisruptionBudget.from_obj({"metadata": {"namespace": "ns"}, "spec": {"selector": {}}})
    assert budget is not None
    assert pods_with_pdb_violation([pod_info("p", labels={"a": "b"})], [budget])[0] == []


def test_nominated_pods_of_higher_priority_take_their_room() -> None:
    fw = profile()
    nominee = pod_info("nominee", priority=200)
    fw.set_pod_nominator(Nominated({"a": [nominee]}))
    nodes = [full("a", low("v", 1), room=1), full("b", low("w", 5), room=1)]
    assert plan_of(fw, HIGH, nodes)[:2] == ("b", ["w"]), "node a's room is the nominee's"


def test_success_evicts_the_victims_with_upstreams_event_and_clears_lower_nominations() -> None:
    client, recorder, metrics = FakeClient(), FakeRecorder(), FakeMetrics()
    fw = profile(client, recorder)
    fw.recorder = metrics  # type: ignore[assignment]
    lower = pod_info("lower", priority=1)
    fw.set_pod_nominator(Nominated({"a": [lower]}))
    result, st = run(fw, HIGH, [full("a", low("v"), room=1)])
    assert st.is_success() and result == PostFilterResult("a", frozenset({"uid-v"}))
    assert client.preempted == [("v", "default-scheduler: preempting to accommodate a higher priority pod")]
    assert recorder.events == [("v", "Normal", "Preempted", "Preempted by pod uid-high on node a")]
    assert client.cleared == ["lower"]
    assert (metrics.attempts, metrics.victims) == (1, [1])


async def test_a_victim_held_at_permit_is_rejected_not_deleted() -> None:
    client = FakeClient()
    fw = profile(client)
    waiting = low("gang-0")
    fw.waiting_pods.add(waiting, "a", {"Coscheduling": 30})
    state = CycleState()
    _, diagnosis = fw.find_feasible(state, HIGH, {"a": full("a", waiting)})
    _, st = await fw.run_post_filter(state, HIGH, diagnosis)
    assert st.is_success()
    assert client.preempted == []
    held = fw.waiting_pods.get(waiting.uid)
    assert held is not None and held._outcome.done()


def test_args_validation() -> None:
    with pytest.raises(ValueError, match="cannot both be zero"):
        DefaultPreemptionArgs(minCandidateNodesPercentage=0, minCandidateNodesAbsolute=0)
    plugin = DefaultPreemption(PluginHandle(binder=None), DefaultPreemptionArgs(minCandidateNodesAbsolute=2))  # type: ignore[arg-type]
    assert [plugin.num_candidates(n) for n in (1, 10, 100)] == [1, 2, 10]


@dataclass
class CountingClient(FakeClient):
    lists: int = 0

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        self.lists += 1
        return self.budgets


def test_a_pod_that_can_preempt_nothing_costs_no_api_call() -> None:
    client = CountingClient()
    fw = profile(client)
    run(fw, pod_info("equal", priority=0), [full("a", low("v", 0))])
    assert client.lists == 0
    run(fw, HIGH, [full("a", low("v", 0))])
    assert client.lists == 1
