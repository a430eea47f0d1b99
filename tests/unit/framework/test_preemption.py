"""framework/preemption: the Evaluator's steps over a scripted policy (what it asks the
policy, the nodes it tries and the candidates it keeps, the budgets it reads, its
messages, the evictions), and which candidate node it picks, in upstream's order.

DefaultPreemption's policy run through it: ``tests/unit/plugins/test_defaultpreemption.py``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from ipscheduler.framework.interface import Code, CycleState, PostFilterResult, Status
from ipscheduler.framework.preemption import (
    Candidate,
    DisruptionBudget,
    Evaluator,
    Victim,
    earliest_start_of_highest_priority,
    select_candidate,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.waiting import WaitingPods
from tests.builders import node, pod_info
from tests.unit.fakes import EventLog, PreemptionApi, PreemptionCounts

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
PLUGIN = "Scripted"


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


# --------------------------------------------------------------------------- select_candidate


def candidate(name: str, *victims: tuple[int, int | None], pdb: int = 0) -> Candidate:
    """Candidate ``name`` with victims ``(priority, started seconds after T0 or None)``, in
    decreasing priority as upstream's victim selection orders them."""
    ordered = sorted(victims, key=lambda v: -v[0])
    return Candidate(
        name,
        tuple(Victim(f"{name}-{i}", p, None if s is None else at(s)) for i, (p, s) in enumerate(ordered)),
        pdb,
    )


@pytest.mark.parametrize(
    ("candidates", "picked"),
    [
        ([], None),
        ([candidate("a", (10, 0))], "a"),
        ([candidate("a", (1, 0), pdb=1), candidate("b", (100, 0))], "b"),
        ([candidate("a", (10, 0)), candidate("b", (5, 0), (5, 0))], "b"),
        ([candidate("a", (5, 0), (5, 0)), candidate("b", (5, 0), (1, 0))], "b"),
        ([candidate("a", (-5, 0), (-5, 0)), candidate("b", (-5, 0))], "b"),
        ([candidate("a", (5, 0), (0, 0)), candidate("b", (5, 0), (-1, 0), (1, 0))], "a"),
        ([candidate("a", (5, 10)), candidate("b", (5, 20))], "b"),
        ([candidate("a", (5, 20), (5, 5)), candidate("b", (5, 10), (5, 10))], "b"),
        ([candidate("a", (5, None)), candidate("b", (5, 1))], "b"),
        ([candidate("a", (5, 7)), candidate("b", (5, 7))], "a"),
    ],
    ids=[
        "none",
        "one",
        "fewest-pdb-violations-first",
        "lowest-highest-priority",
        "smallest-priority-sum",
        "negative-priorities-more-victims-cost-more",
        "more-victims-cost-more-in-the-sum",
        "latest-start",
        "earliest-of-the-highest-priority-counts",
        "not-started-loses",
        "tie-first-given",
    ],
)
def test_select_candidate(candidates: list[Candidate], picked: str | None) -> None:
    got = select_candidate(candidates)
    assert (got.node if got is not None else None) == picked


@pytest.mark.parametrize(
    ("victims", "expected"),
    [
        ((), None),
        (((5, 30), (5, 10), (1, 0)), 10),
        (((5, None), (1, 0)), None),
    ],
    ids=["no-victims", "only-the-highest-priority-counts", "none-started"],
)
def test_earliest_start_of_highest_priority(
    victims: tuple[tuple[int, int | None], ...], expected: int | None
) -> None:
    got = earliest_start_of_highest_priority(candidate("n", *victims).victims)
    assert got == (None if expected is None else at(expected))


# --------------------------------------------------------------------------- DisruptionBudget


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


# --------------------------------------------------------------------------- the Evaluator

CLEAN: tuple[list[str], int] = (["v"], 0)
"""A node's scripted answer: its pod ``v`` is the victim, violating no budget."""
VIOLATING: tuple[list[str], int] = (["v"], 1)
"""Its pod ``v`` is the victim, violating one budget."""
UNSCHEDULABLE = Status.unschedulable("Too many pods", plugin="NodeResourcesFit")
UNRESOLVABLE = Status.unresolvable("node(s) had untolerated taint {k: v}", plugin="TaintToleration")
HIGH = pod_info("high", priority=100)


@dataclass
class ScriptedPolicy:
    """A :class:`~ipscheduler.framework.preemption.Policy` whose answers are given.

    ``victims``: node → the names of its victims and how many of them violate a budget, or
    the Status the node gets (a node left out: a success without victims). It records the
    nominated node's status it was asked about, the nodes tried, the budgets seen, and
    writes into each cycle state it gets what that state held before.
    """

    victims: dict[str, tuple[list[str], int] | Status] = field(default_factory=dict)
    offset: int = 0
    wanted: int = 100
    eligible: tuple[bool, str] = (True, "")
    asked: list[Status | None] = field(default_factory=list)
    tried: list[str] = field(default_factory=list)
    budgets: list[list[DisruptionBudget]] = field(default_factory=list)
    states_before: list[Any] = field(default_factory=list)

    def offset_and_num_candidates(self, nodes: int) -> tuple[int, int]:
        return self.offset, min(self.wanted, nodes)

    def pod_eligible_to_preempt_others(
        self, pod: PodInfo, nominated_status: Status | None
    ) -> tuple[bool, str]:
        self.asked.append(nominated_status)
        return self.eligible

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, budgets: list[DisruptionBudget]
    ) -> tuple[list[PodInfo], int, Status]:
        self.tried.append(node.name)
        self.budgets.append(list(budgets))
        self.states_before.append(state.get("Scripted/tried"))
        state.write("Scripted/tried", node.name)
        got = self.victims.get(node.name, ([], 0))
        if isinstance(got, Status):
            return [], 0, got
        names, violations = got
        return [p for p in node.pods if p.name in names], violations, Status.success()


@dataclass
class FakeHandle:
    """What the Evaluator reads of a plugin's Handle."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    client: PreemptionApi | None = field(default_factory=PreemptionApi)
    recorder: EventLog = field(default_factory=EventLog)
    metrics: PreemptionCounts = field(default_factory=PreemptionCounts)
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    nominated: dict[str, list[PodInfo]] = field(default_factory=dict)

    def snapshot(self) -> dict[str, NodeInfo]:
        return self.nodes

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return self.nominated.get(node, [])


def holding(name: str, *pods: PodInfo) -> NodeInfo:
    """Node ``name`` with ``pods`` bound to it."""
    return node(name, pods=[p.__class__(**{**p.__dict__, "node_name": name}) for p in pods])


def low(name: str = "v", priority: int = 0) -> PodInfo:
    return pod_info(name, priority=priority)


def evaluator(policy: ScriptedPolicy, *nodes: NodeInfo, **handle: Any) -> tuple[Evaluator, FakeHandle]:
    fake = FakeHandle(nodes={n.name: n for n in nodes}, **handle)
    return Evaluator(PLUGIN, fake, policy), fake  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("nodes", "statuses", "victims", "code", "message", "result"),
    [
        pytest.param(
            [],
            {},
            {},
            Code.ERROR,
            "no nodes available",
            None,
            id="no nodes: an error, the nomination kept",
        ),
        pytest.param(
            [holding("a", low())],
            {"a": UNRESOLVABLE},
            {"a": CLEAN},
            Code.UNSCHEDULABLE,
            "0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
            PostFilterResult(""),
            id="only unresolvable nodes: not tried, the nomination cleared",
        ),
        pytest.param(
            [holding("a", low()), holding("b", low())],
            {"a": UNSCHEDULABLE, "b": UNRESOLVABLE},
            {"a": Status.unresolvable("No preemption victims found for incoming pod")},
            Code.UNSCHEDULABLE,
            "0/2 nodes are available: 1 No preemption victims found for incoming pod, "
            "1 Preemption is not helpful for scheduling.",
            PostFilterResult(""),
            id="a node tried says why; the others are not helpful",
        ),
        pytest.param(
            [holding("a", low())],
            {"a": UNSCHEDULABLE},
            {},
            Code.UNSCHEDULABLE,
            '0/1 nodes are available: 1 expected at least one victim pod on node "a".',
            PostFilterResult(""),
            id="a success without victims is no candidate",
        ),
    ],
)
async def test_a_plan_without_a_candidate_says_why_in_upstreams_words(
    nodes: list[NodeInfo],
    statuses: dict[str, Status],
    victims: dict[str, tuple[list[str], int] | Status],
    code: Code,
    message: str,
    result: PostFilterResult | None,
) -> None:
    ev, _ = evaluator(ScriptedPolicy(victims), *nodes)
    plan = await ev.plan(CycleState(), HIGH, statuses)
    assert plan.candidate is None and plan.victims == ()
    assert (plan.status.code, plan.status.message, plan.status.plugin, plan.result) == (
        code,
        message,
        PLUGIN,
        result,
    )


async def test_the_plan_is_the_candidate_select_candidate_picks_with_its_victims() -> None:
    nodes = [holding("a", low("v", 10)), holding("b", low("w", 5), low("x", 200))]
    ev, _ = evaluator(ScriptedPolicy({"a": (["v"], 0), "b": (["w"], 0)}), *nodes)
    plan = await ev.plan(CycleState(), HIGH, {"a": UNSCHEDULABLE, "b": UNSCHEDULABLE})
    assert plan.status.is_success() and plan.result is None
    assert plan.candidate == Candidate("b", (Victim("uid-w", 5),), 0)
    assert [v.name for v in plan.victims] == ["w"]


@pytest.mark.parametrize(
    ("nominated", "asked"),
    [
        pytest.param("", None, id="no nominated node: no status"),
        pytest.param("a", UNRESOLVABLE, id="the nominated node's rejection"),
        pytest.param("b", None, id="a nominated node not rejected: no status"),
    ],
)
async def test_eligibility_is_asked_with_the_nominated_nodes_status(
    nominated: str, asked: Status | None
) -> None:
    policy = ScriptedPolicy()
    ev, _ = evaluator(policy, holding("a"), holding("b"))
    await ev.plan(
        CycleState(), pod_info("high", priority=100, nominated_node_name=nominated), {"a": UNRESOLVABLE}
    )
    assert policy.asked == [asked]


async def test_a_pod_not_eligible_tries_no_node_and_keeps_its_nomination() -> None:
    policy = ScriptedPolicy({"a": CLEAN}, eligible=(False, "not eligible: scripted"))
    ev, handle = evaluator(policy, holding("a", low()))
    plan = await ev.plan(CycleState(), HIGH, {"a": UNSCHEDULABLE})
    assert (plan.status.code, plan.status.message, plan.result) == (
        Code.UNSCHEDULABLE,
        "not eligible: scripted",
        None,
    )
    assert policy.tried == [] and handle.client is not None and handle.client.lists == 0


ANSWERS: dict[str, tuple[list[str], int] | Status] = {"c": CLEAN, "v": VIOLATING, "x": UNRESOLVABLE}
"""Node answers of the dry-run table by letter: clean, violating, rejected (``-``: no victims)."""


@pytest.mark.parametrize(
    ("offset", "wanted", "answers", "tried", "found"),
    [
        pytest.param(0, 3, "ccc", "abc", "abc", id="every node for as many"),
        pytest.param(1, 1, "ccc", "b", "b", id="from the offset, as many as wanted"),
        pytest.param(2, 2, "ccc", "ca", "ca", id="round from the offset"),
        pytest.param(0, 1, "vcc", "ab", "ba", id="on until one violates no budget, it first"),
        pytest.param(0, 1, "vvv", "abc", "abc", id="every node when all violate"),
        pytest.param(0, 1, "x-c", "abc", "c", id="nodes rejected or without victims are no candidates"),
    ],
)
def test_the_dry_run_tries_nodes_from_the_offset_until_enough_candidates(
    offset: int, wanted: int, answers: str, tried: str, found: str
) -> None:
    """``answers``: node a's, b's and c's (:data:`ANSWERS`); ``tried``, ``found``: node names
    in order; each node tried that is no candidate keeps its status."""
    nodes = [holding(n, low()) for n in "abc"]
    policy = ScriptedPolicy({n: ANSWERS[a] for n, a in zip("abc", answers, strict=True) if a != "-"})
    ev, _ = evaluator(policy, *nodes)
    got, statuses = ev.dry_run_preemption(CycleState(), HIGH, nodes, [], offset, wanted)
    assert "".join(policy.tried) == tried
    assert "".join(c.node for c, _ in got) == found
    assert set(statuses) == set(tried) - set(found)


def test_each_node_is_tried_on_its_own_clone_of_the_cycle_state() -> None:
    nodes = [holding(n, low()) for n in "ab"]
    policy = ScriptedPolicy()
    ev, _ = evaluator(policy, *nodes)
    state = CycleState()
    ev.dry_run_preemption(state, HIGH, nodes, [], 0, 2)
    assert policy.states_before == [None, None] and "Scripted/tried" not in state


PDB = {
    "metadata": {"namespace": "ns", "name": "pdb"},
    "spec": {"selector": {"matchLabels": {"app": "db"}}},
    "status": {"disruptionsAllowed": 0},
}


@pytest.mark.parametrize(
    ("nodes", "statuses", "lists"),
    [
        pytest.param(
            [holding("a", low(priority=100))], {"a": UNSCHEDULABLE}, 0, id="no pod of lower priority"
        ),
        pytest.param([holding("a", low())], {"a": UNRESOLVABLE}, 0, id="lower only where not tried"),
        pytest.param([holding("a", low())], {"a": UNSCHEDULABLE}, 1, id="a pod of lower priority: one LIST"),
        pytest.param(
            [holding("a", low()), holding("b", low())],
            {"a": UNSCHEDULABLE, "b": UNSCHEDULABLE},
            1,
            id="one LIST for every node",
        ),
    ],
)
async def test_budgets_are_listed_once_and_only_when_a_pod_could_be_a_victim(
    nodes: list[NodeInfo], statuses: dict[str, Status], lists: int
) -> None:
    client = PreemptionApi(budgets=[PDB, {"metadata": {}}])
    policy = ScriptedPolicy()
    ev, _ = evaluator(policy, *nodes, client=client)
    await ev.plan(CycleState(), HIGH, statuses)
    assert client.lists == lists
    want = [DisruptionBudget.from_obj(PDB)] if lists else []
    assert policy.budgets == [want] * len(policy.tried), "parsed, the malformed left out"


async def test_a_failed_list_of_budgets_is_an_error_plan() -> None:
    client = PreemptionApi(errors={"list_pod_disruption_budgets": RuntimeError("down")})
    policy = ScriptedPolicy({"a": CLEAN})
    ev, _ = evaluator(policy, holding("a", low()), client=client)
    plan = await ev.plan(CycleState(), HIGH, {"a": UNSCHEDULABLE})
    assert (plan.status.code, plan.status.message, plan.candidate) == (
        Code.ERROR,
        "listing PodDisruptionBudgets: RuntimeError('down')",
        None,
    )
    assert policy.tried == []


PREEMPTED = "default-scheduler: preempting to accommodate a higher priority pod"
EVENT = ("v", "Normal", "Preempted", "Preempted by pod uid-high on node a")


@pytest.mark.parametrize(
    ("errors", "result", "message", "preempted", "events", "cleared", "counted"),
    [
        pytest.param(
            {},
            PostFilterResult("a", frozenset({"uid-v"})),
            "",
            [("v", PREEMPTED)],
            [EVENT],
            ["lower"],
            [1],
            id="the victim deleted with upstream's event, lower nominations cleared",
        ),
        pytest.param(
            {"preempt_pod": RuntimeError("gone")},
            None,
            "preempting ns/v: RuntimeError('gone')",
            [],
            [],
            [],
            [],
            id="a failed eviction is an error, nothing more done",
        ),
        pytest.param(
            {"set_nominated_node_name": RuntimeError("conflict")},
            PostFilterResult("a", frozenset({"uid-v"})),
            "",
            [("v", PREEMPTED)],
            [EVENT],
            [],
            [1],
            id="a nomination not cleared is only logged",
        ),
    ],
)
async def test_prepare_candidate(
    errors: dict[str, Exception],
    result: PostFilterResult | None,
    message: str,
    preempted: list[tuple[str, str]],
    events: list[tuple[str, str, str, str]],
    cleared: list[str],
    counted: list[int],
) -> None:
    client = PreemptionApi(errors=errors)
    nominated = {"a": [pod_info("lower", priority=1), pod_info("higher", priority=200)]}
    ev, handle = evaluator(
        ScriptedPolicy({"a": CLEAN}), holding("a", low()), client=client, nominated=nominated
    )
    plan = await ev.plan(CycleState(), HIGH, {"a": UNSCHEDULABLE})
    got, st = await ev.prepare_candidate(plan, HIGH)
    assert (got, st.message) == (result, message)
    assert st.code is (Code.SUCCESS if result else Code.ERROR)
    assert (client.preempted, handle.recorder.events, client.cleared) == (preempted, events, cleared)
    assert handle.metrics.victims == counted


async def test_a_victim_held_at_permit_is_rejected_not_deleted() -> None:
    victim = low()
    ev, handle = evaluator(ScriptedPolicy({"a": CLEAN}), holding("a", victim))
    held = handle.waiting_pods.add(victim, "a", {"Coscheduling": 30})
    plan = await ev.plan(CycleState(), HIGH, {"a": UNSCHEDULABLE})
    _, st = await ev.prepare_candidate(plan, HIGH)
    assert st.is_success()
    assert handle.client is not None and handle.client.preempted == []
    assert await held.wait() == Status.unschedulable("preempted", plugin=PLUGIN)
