"""DefaultPreemption: the policy (eligibility, victims per node, how many candidates) and
its PostFilter, run through the generic Evaluator as in a profile.

The cases mirror kube-scheduler's ``default_preemption_test.go``: node capacity is the
``pods`` allocatable (NodeResourcesFit's ``Too many pods``), so which pods must go is
plain to read. The Evaluator alone (the dry run, the budgets it lists, the evictions):
``tests/unit/framework/test_preemption.py``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from ipscheduler.framework.building import new_framework
from ipscheduler.framework.config import Plugins, ProfileConfig
from ipscheduler.framework.interface import Code, CycleState, PostFilterResult, Status
from ipscheduler.framework.preemption import DisruptionBudget
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo, Taint
from ipscheduler.plugins.defaultpreemption import (
    MSG_NEVER,
    MSG_TERMINATING,
    DefaultPreemption,
    DefaultPreemptionArgs,
    pods_with_pdb_violation,
)
from ipscheduler.plugins.registry import new_in_tree_registry
from tests.builders import node, pod_info
from tests.unit.fakes import PreemptionApi, PreemptionCounts, handle

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


class Nominated:
    def __init__(self, pods: dict[str, list[PodInfo]]) -> None:
        self.pods = pods

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return self.pods.get(node, [])

    def any_nominated(self) -> bool:
        return any(self.pods.values())


def profile(client: PreemptionApi | None = None, metrics: PreemptionCounts | None = None) -> Framework:
    """NodeUnschedulable, TaintToleration and NodeResourcesFit, then DefaultPreemption with
    its offset fixed at 0; the handle's client ``client``, preemption counted into ``metrics``."""
    plugins = Plugins.model_validate(
        {
            "queueSort": {"enabled": [{"name": "PrioritySort"}]},
            "filter": {"enabled": [{"name": n} for n in ("TaintToleration", "NodeResourcesFit")]},
            "postFilter": {"enabled": [{"name": "DefaultPreemption"}]},
            "bind": {"enabled": [{"name": "DefaultBinder"}]},
        }
    )
    fw = new_framework(
        new_in_tree_registry(),
        ProfileConfig(),
        plugins,
        client=client or PreemptionApi(),  # type: ignore[arg-type]
        metrics=metrics,  # type: ignore[arg-type]
    )
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


@dataclass
class Snapshot:
    """A handle with only the nodes of the cycle (what eligibility reads of it)."""

    nodes: dict[str, NodeInfo]

    def snapshot(self) -> dict[str, NodeInfo]:
        return self.nodes


def terminating(name: str, priority: int = 0, *, preempted: bool = True) -> PodInfo:
    """A pod of ``priority`` being deleted (by preemption unless told)."""
    return pod_info(name, priority=priority, deleting=True, preempted=preempted)


@pytest.mark.parametrize(
    ("preemptor", "on_a", "nominated_status", "want"),
    [
        pytest.param(
            pod_info("high", priority=100), [terminating("t")], None, (True, ""), id="not nominated"
        ),
        pytest.param(
            pod_info("high", priority=100, preemption_policy="Never"),
            [],
            None,
            (False, MSG_NEVER),
            id="Never",
        ),
        pytest.param(
            pod_info("high", priority=100, nominated_node_name="a"),
            [terminating("t")],
            Status.unschedulable("Too many pods"),
            (False, MSG_TERMINATING),
            id="a victim of its preemption still terminating there",
        ),
        pytest.param(
            pod_info("high", priority=100, nominated_node_name="a"),
            [terminating("t")],
            Status.unresolvable("node(s) didn't match Pod's node affinity"),
            (True, ""),
            id="its nominated node now unresolvable",
        ),
        pytest.param(
            pod_info("high", priority=100, nominated_node_name="a"),
            [terminating("t1", preempted=False), terminating("t2", 100)],
            None,
            (True, ""),
            id="terminating but not preempted, or not of lower priority",
        ),
        pytest.param(
            pod_info("high", priority=100, nominated_node_name="gone"),
            [terminating("t")],
            None,
            (True, ""),
            id="its nominated node gone",
        ),
    ],
)
def test_pod_eligible_to_preempt_others(
    preemptor: PodInfo, on_a: list[PodInfo], nominated_status: Status | None, want: tuple[bool, str]
) -> None:
    plugin = DefaultPreemption(Snapshot({"a": full("a", *on_a)}))  # type: ignore[arg-type]
    assert plugin.pod_eligible_to_preempt_others(preemptor, nominated_status) == want


def test_budgets_are_respected_as_upstream_minimises_violations() -> None:
    budget = {
        "metadata": {"namespace": "ns", "name": "pdb"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"disruptionsAllowed": 0},
    }
    nodes = [full("a", low("v", 1, labels={"app": "db"})), full("b", low("w", 5))]
    fw = profile(PreemptionApi(budgets=[budget]))
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


def test_post_filter_counts_each_attempt_and_nominates_where_it_evicted() -> None:
    client, metrics = PreemptionApi(), PreemptionCounts()
    fw = profile(client, metrics)
    result, st = run(fw, HIGH, [full("a", low("v"), room=1)])
    assert st.is_success() and result == PostFilterResult("a", frozenset({"uid-v"}))
    assert [name for name, _ in client.preempted] == ["v"]
    run(fw, pod_info("equal", priority=0), [full("a", low("v"), room=1)])
    assert (metrics.attempts, metrics.victims) == (2, [1])


def test_args_validation() -> None:
    with pytest.raises(ValueError, match="cannot both be zero"):
        DefaultPreemptionArgs(minCandidateNodesPercentage=0, minCandidateNodesAbsolute=0)
    plugin = DefaultPreemption(handle(), DefaultPreemptionArgs(minCandidateNodesAbsolute=2))
    assert [plugin.num_candidates(n) for n in (1, 10, 100)] == [1, 2, 10]


def test_offset_and_num_candidates() -> None:
    plugin = DefaultPreemption(handle(), rand=lambda n: n - 1)
    assert plugin.offset_and_num_candidates(150) == (149, 100)
