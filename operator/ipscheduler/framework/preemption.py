"""Preemption's generic part: the :class:`Evaluator`, over a plugin's :class:`Policy`.

Mirrors kube-scheduler's ``pkg/scheduler/framework/preemption/preemption.go``,
synchronous as upstream without ``SchedulerAsyncPreemption``. The Evaluator runs the steps
every preemption plugin shares and asks its :class:`Policy` (upstream's
``preemption.Interface``, which ``plugins/defaultpreemption.py`` implements) what differs
from plugin to plugin:

1. **Eligibility**: :meth:`Policy.pod_eligible_to_preempt_others`, given the Filter
   status of the pod's nominated node.
2. **Candidates** (upstream ``findCandidates``, :meth:`Evaluator.dry_run_preemption`):
   only the nodes whose Filter rejection was Unschedulable (not
   UnschedulableAndUnresolvable) are tried, one after the other from the policy's offset
   (:meth:`Policy.offset_and_num_candidates`), each on a clone of the cycle state with
   the victims the policy picks there (:meth:`Policy.select_victims_on_node`), until the
   policy's number of candidates are found and one of them violates no
   PodDisruptionBudget; those that violate none come first. The budgets are read through
   the handle's client (:class:`~ipscheduler.framework.interface.Client`), one LIST, only
   when one of those nodes has a pod of lower priority than the preemptor (only such a pod
   may be a victim, as upstream requires of every policy): a pod that can preempt nothing
   costs no API call.
3. **The node**: :func:`select_candidate`.
4. **Preparing it** (:meth:`Evaluator.prepare_candidate`): a victim held at Permit is
   rejected; any other gets the ``DisruptionTarget`` condition and is deleted (its UID as
   precondition: the client's ``preempt_pod``), with a Normal ``Preempted`` event
   ``Preempted by pod <uid> on node <node>``; pods of lower priority nominated to the node
   lose their nomination. The pod is nominated to the node (the PostFilterResult) and
   retried when the victims are gone.

Steps 1-3 are :meth:`Evaluator.plan`, which acts on nothing (``explain`` shows it);
upstream's ``Preempt`` is ``plan`` then ``prepare_candidate``. Messages are upstream's
(the plugin prefixes them). Of upstream's ``Interface``, :class:`Policy` leaves out
``CandidatesToVictimsMap`` (the map handed to extenders' ``ProcessPreemption``: no
extender is called here) and ``OrderedScoreFuncs`` (DefaultPreemption's is nil: the
default order below).

:func:`select_candidate` (upstream ``SelectCandidate``, ``pickOneNodeForPreemption``, and
``GetEarliestPodStartTime`` of ``pkg/scheduler/util/utils.go``) picks, in order:

1. the fewest PodDisruptionBudget violations;
2. the lowest priority of its highest-priority victim;
3. the smallest sum of the victims' priorities (each shifted by ``2**31`` so that more
   victims of a negative priority never look cheaper);
4. the fewest victims;
5. the latest start time of its highest-priority victims (the earliest of them counts);
6. the first candidate in the given order.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ipscheduler.framework.diagnosis import Diagnosis
from ipscheduler.framework.fields import as_dict, as_str
from ipscheduler.framework.interface import Code, CycleState, Handle, PostFilterResult, Status
from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector
from ipscheduler.framework.types import NodeInfo, PodInfo

log = logging.getLogger(__name__)

MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_CANDIDATE = "no candidate node for preemption"

PRIORITY_SHIFT = 2**31
"""Added to every victim's priority before they are summed (upstream ``math.MaxInt32+1``)."""


# -- the candidates and their choice (pure) ----------------------------------------------
@dataclass(frozen=True)
class Victim:
    """A pod preemption would evict: its ``uid``, ``priority`` and ``start_time`` (UTC;
    None when the pod has not started)."""

    uid: str
    priority: int
    start_time: datetime.datetime | None = None


def victim_of(pod: PodInfo) -> Victim:
    """The :class:`Victim` view of a pod."""
    return Victim(pod.uid, pod.priority, pod.start_time)


@dataclass(frozen=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (ordered by decreasing priority, as
    upstream's victim selection leaves them) are gone, violating ``pdb_violations``
    PodDisruptionBudgets."""

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0


Found = tuple[Candidate, tuple[PodInfo, ...]]
"""A candidate of the dry run with its victims' pods, most important first."""


def earliest_start_of_highest_priority(victims: Sequence[Victim]) -> datetime.datetime | None:
    """The earliest start time among the victims of the highest priority (upstream
    ``GetEarliestPodStartTime``); None without victims or when none of them started."""
    if not victims:
        return None
    top = max(v.priority for v in victims)
    starts = [v.start_time for v in victims if v.priority == top and v.start_time is not None]
    return min(starts) if starts else None


def _latest_start(candidate: Candidate) -> float:
    start = earliest_start_of_highest_priority(candidate.victims)
    return start.timestamp() if start is not None else float("-inf")


SCORES: tuple[Callable[[Candidate], float], ...] = (
    lambda c: -c.pdb_violations,
    lambda c: -c.victims[0].priority if c.victims else 0,
    lambda c: -sum(v.priority + PRIORITY_SHIFT for v in c.victims),
    lambda c: -len(c.victims),
    _latest_start,
)
"""The criteria of the module doc, each a score where higher is better."""


def select_candidate(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate preemption nominates (module doc), or None when there is none. Each
    criterion keeps the candidates of its best score; the first left wins."""
    left = list(candidates)
    for score in SCORES:
        if len(left) <= 1:
            break
        best = max(score(c) for c in left)
        left = [c for c in left if score(c) == best]
    return left[0] if left else None


# -- what the Evaluator reads and asks ----------------------------------------------------
@dataclass(frozen=True)
class DisruptionBudget:
    """What preemption reads of a PodDisruptionBudget: its namespace, selector,
    ``status.disruptionsAllowed`` and ``status.disruptedPods`` (pod names)."""

    namespace: str
    selector: LabelSelector
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> DisruptionBudget | None:
        """Parse a ``policy/v1`` PodDisruptionBudget; None when it has no namespace or its
        selector is invalid (upstream: an invalid selector matches no pod)."""
        meta, spec, status = (
            as_dict(body.get("metadata")),
            as_dict(body.get("spec")),
            as_dict(body.get("status")),
        )
        namespace = as_str(meta.get("namespace"))
        allowed = status.get("disruptionsAllowed")
        try:
            selector = LabelSelector.parse(spec.get("selector"))
        except InvalidSelectorError:
            return None
        if not namespace:
            return None
        return cls(
            namespace=namespace,
            selector=selector,
            disruptions_allowed=allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0,
            disrupted_pods=frozenset(str(k) for k in as_dict(status.get("disruptedPods"))),
        )


class Policy(Protocol):
    """What a preemption plugin decides (upstream ``preemption.Interface``, module doc)."""

    def offset_and_num_candidates(self, nodes: int) -> tuple[int, int]:
        """Where the dry run starts among ``nodes`` potential nodes (``0..nodes-1``) and
        how many candidates it looks for (upstream ``GetOffsetAndNumCandidates``)."""
        ...

    def pod_eligible_to_preempt_others(
        self, pod: PodInfo, nominated_status: Status | None
    ) -> tuple[bool, str]:
        """Whether ``pod`` may preempt, and why not; ``nominated_status``: the Filter
        rejection of its nominated node (None: it has none, or that node was not rejected)
        (upstream ``PodEligibleToPreemptOthers``)."""
        ...

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, budgets: Sequence[DisruptionBudget]
    ) -> tuple[list[PodInfo], int, Status]:
        """The pods on ``node`` whose eviction lets ``pod`` pass every filter, most
        important first, how many of them violate a budget, and the status (upstream
        ``SelectVictimsOnNode``). ``state`` is a clone the call may change."""
        ...


@dataclass(frozen=True)
class Plan:
    """What preemption would do for a pod: the chosen ``candidate`` with its ``victims``
    (most important first), or None with the ``status`` saying why not and the ``result``
    to return with it (a nomination cleared, or None: left as it is)."""

    status: Status
    candidate: Candidate | None = None
    victims: tuple[PodInfo, ...] = ()
    result: PostFilterResult | None = None


# -- the Evaluator ----------------------------------------------------------------------------
class Evaluator:
    """Preemption's steps (module doc) for the plugin ``plugin_name`` (upstream
    ``preemption.Evaluator``, ``NewEvaluator``): ``handle`` gives the nodes of the cycle,
    the client (its PodDisruptionBudget LIST, eviction and ``nominatedNodeName``
    calls; None: nothing is read or deleted), the
    recorder, the pods held at Permit and those nominated, and the metrics; ``policy``
    answers the plugin's questions."""

    def __init__(self, plugin_name: str, handle: Handle, policy: Policy) -> None:
        self.plugin_name = plugin_name
        self.handle = handle
        self.policy = policy

    async def plan(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> Plan:
        """What preemption would do for ``pod`` (steps 1-3 of the module doc), acting on
        nothing; ``statuses``: each rejected node's Filter status. A failed LIST of the
        budgets is an Error plan."""
        name = self.plugin_name
        nominated = pod.nominated_node_name
        eligible, why = self.policy.pod_eligible_to_preempt_others(
            pod, statuses.get(nominated) if nominated else None
        )
        if not eligible:
            return Plan(Status.unschedulable(why, plugin=name))
        nodes = self.handle.snapshot()
        if not nodes:
            return Plan(Status.error("no nodes available", plugin=name))
        potential = [
            n for node, n in nodes.items() if (st := statuses.get(node)) and st.code is Code.UNSCHEDULABLE
        ]
        found: list[Found] = []
        node_statuses: dict[str, Status] = {}
        if potential:
            try:
                budgets = await self._budgets(pod, potential)
            except Exception as e:
                return Plan(Status.error(f"listing PodDisruptionBudgets: {e!r}", plugin=name))
            offset, wanted = self.policy.offset_and_num_candidates(len(potential))
            found, node_statuses = self.dry_run_preemption(state, pod, potential, budgets, offset, wanted)
        if not found:
            not_helpful = Status.unresolvable(MSG_NOT_HELPFUL, plugin=name)
            fit = Diagnosis(
                node_to_status={node: node_statuses.get(node, not_helpful) for node in nodes},
                num_all_nodes=len(nodes),
            )
            return Plan(Status.unschedulable(fit.message(), plugin=name), result=PostFilterResult(""))
        best = select_candidate([c for c, _ in found])
        if best is None:
            return Plan(Status.unschedulable(MSG_NO_CANDIDATE, plugin=name))
        victims = next(v for c, v in found if c is best)
        return Plan(Status.success(), best, victims)

    async def _budgets(self, pod: PodInfo, potential: Sequence[NodeInfo]) -> list[DisruptionBudget]:
        """Every PodDisruptionBudget, one LIST through the handle's client; none without a
        client or when no pod on ``potential`` is of lower priority than ``pod``."""
        client = self.handle.client
        if client is None or not any(p.priority < pod.priority for n in potential for p in n.pods):
            return []
        raw = await client.list_pod_disruption_budgets()
        return [b for b in map(DisruptionBudget.from_obj, raw) if b is not None]

    def dry_run_preemption(
        self,
        state: CycleState,
        pod: PodInfo,
        potential: Sequence[NodeInfo],
        budgets: Sequence[DisruptionBudget],
        offset: int,
        wanted: int,
    ) -> tuple[list[Found], dict[str, Status]]:
        """The candidates on ``potential`` nodes, those that violate no budget first, with
        their victims; and the status of each node tried that is not one (upstream
        ``DryRunPreemption``, one node after the other from ``offset``, until ``wanted``
        candidates are found and one of them violates no budget)."""
        clean: list[Found] = []
        violating: list[Found] = []
        statuses: dict[str, Status] = {}
        for i in range(len(potential)):
            node = potential[(offset + i) % len(potential)]
            victims, violations, st = self.policy.select_victims_on_node(state.clone(), pod, node, budgets)
            if st.is_success() and victims:
                found = (Candidate(node.name, tuple(map(victim_of, victims)), violations), tuple(victims))
                (clean if violations == 0 else violating).append(found)
                if clean and len(clean) + len(violating) >= wanted:
                    break
                continue
            if st.is_success():
                st = Status.error(
                    f'expected at least one victim pod on node "{node.name}"', plugin=self.plugin_name
                )
            statuses[node.name] = st
        return clean + violating, statuses

    async def prepare_candidate(self, plan: Plan, pod: PodInfo) -> tuple[PostFilterResult | None, Status]:
        """Evict the victims of ``plan`` and clear lower nominations on its node (step 4,
        upstream ``prepareCandidate``); the result nominates ``pod`` there. A failed
        eviction is an Error; a nomination not cleared is only logged, as upstream."""
        assert plan.candidate is not None
        node = plan.candidate.node
        handle = self.handle
        client = handle.client
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod"
        for victim in plan.victims:
            waiting = handle.waiting_pods.get(victim.uid)
            try:
                if waiting is not None:
                    waiting.reject(self.plugin_name, "preempted")
                elif client is not None:
                    await client.preempt_pod(victim, message)
            except Exception as e:
                log.warning("preempting %s for %s failed: %r", victim.key, pod.key, e)
                return None, Status.error(f"preempting {victim.key}: {e!r}", plugin=self.plugin_name)
            log.info("%s preempted %s on node %s", pod.key, victim.key, node)
            if handle.recorder is not None:
                handle.recorder.emit(
                    victim.ref, "Normal", "Preempted", f"Preempted by pod {pod.uid} on node {node}"
                )
        if handle.metrics is not None:
            handle.metrics.observe_preemption_victims(len(plan.victims))
        if client is not None:
            for lower in handle.nominated_pods_for_node(node):
                if lower.priority < pod.priority:
                    try:
                        await client.set_nominated_node_name(lower, "")
                    except Exception as e:  # not critical, as upstream
                        log.warning("could not clear the nomination of %s: %r", lower.key, e)
        return PostFilterResult(node, frozenset(v.uid for v in plan.victims)), Status.success()
