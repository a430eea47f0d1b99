"""DefaultPreemption: a pod that fits no node evicts pods of lower priority to make room.

Mirrors kube-scheduler's PostFilter plugin
(``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``): the policy
only. Its PostFilter runs the generic
:class:`~ipscheduler.framework.preemption.Evaluator` (candidates, the dry run, the node,
evicting the victims: ``framework/preemption.py``), which asks the plugin, as its
:class:`~ipscheduler.framework.preemption.Policy`:

1. **Eligibility** (``PodEligibleToPreemptOthers``): a pod with ``preemptionPolicy:
   Never`` does not preempt; nor does a pod already nominated to a node where a pod of
   lower priority is still terminating by preemption (unless its nominated node is now
   UnschedulableAndUnresolvable for it).
2. **How many candidates** (``GetOffsetAndNumCandidates``): the dry run starts at a random
   offset among the nodes it may try and looks for ``max(10 % of them, 100)`` candidates
   (``minCandidateNodesPercentage``, ``minCandidateNodesAbsolute``), at most all.
3. **Victims on a node** (``SelectVictimsOnNode``): every pod of lower priority is removed
   (each removal told to the PreFilter extensions on the clone of the cycle state the
   Evaluator gives, e.g. UnderlayIP counts the address a victim would free); if the pod
   then passes every filter (counting the pods nominated there), the removed pods are
   added back one by one, most important first (priority, then earliest start), those
   whose eviction would violate a PodDisruptionBudget first, and every pod whose return
   makes the pod fail again is a victim.

The PostFilter counts the attempt, runs the Evaluator's plan and, with a candidate, its
evictions; the message of a plan without one is prefixed ``preemption: `` as upstream's
(e.g. ``preemption: 0/3 nodes are available: 3 No preemption victims found for incoming
pod.``).
"""

from __future__ import annotations

import dataclasses
import datetime
import random
from collections.abc import Callable, Mapping, Sequence

from pydantic import Field, model_validator

from ipscheduler.framework.interface import (
    Code,
    CycleState,
    Handle,
    PostFilterResult,
    Status,
)
from ipscheduler.framework.preemption import DisruptionBudget, Evaluator
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import PREEMPT_NEVER, NodeInfo, PodInfo

NAME = "DefaultPreemption"

MSG_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING = "not eligible due to a terminating pod on the nominated node."
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"


class DefaultPreemptionArgs(PluginArgs):
    """``DefaultPreemptionArgs`` (``pkg/scheduler/apis/config/types_pluginargs.go``), with
    upstream's defaults and validation (``ValidateDefaultPreemptionArgs``)."""

    min_candidate_nodes_percentage: int = Field(default=10, ge=0, le=100, alias="minCandidateNodesPercentage")
    min_candidate_nodes_absolute: int = Field(default=100, ge=0, alias="minCandidateNodesAbsolute")

    @model_validator(mode="after")
    def _not_both_zero(self) -> DefaultPreemptionArgs:
        if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
            raise ValueError("minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be zero")
        return self


def pods_with_pdb_violation(
    pods: Sequence[PodInfo], budgets: Sequence[DisruptionBudget]
) -> tuple[list[PodInfo], list[PodInfo]]:
    """``(violating, non_violating)``: the pods whose eviction, in the given order, would
    take a matching budget below zero, and the others; both in the given order (upstream
    ``filterPodsWithPDBViolation``). A budget with an empty or match-nothing selector
    matches no pod; a pod in a budget's ``disruptedPods`` does not use it up."""
    allowed = [b.disruptions_allowed for b in budgets]
    violating: list[PodInfo] = []
    non_violating: list[PodInfo] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or budget.selector.empty:
                    continue
                if not budget.selector.matches(pod.labels) or pod.name in budget.disrupted_pods:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else non_violating).append(pod)
    return violating, non_violating


def importance(now: datetime.datetime) -> Callable[[PodInfo], tuple[int, datetime.datetime]]:
    """Sort key putting the more important pod first (upstream ``util.MoreImportantPod``):
    higher priority, then the earlier start (a pod not started counts as starting ``now``)."""
    return lambda p: (-p.priority, p.start_time or now)


class DefaultPreemption:
    """PostFilter: preempt pods of lower priority (module doc) through ``evaluator``, with
    this plugin as its policy. ``rand(n)`` picks the dry run's offset in ``0..n-1`` (a
    seeded one makes tests deterministic)."""

    name: str = NAME

    def __init__(
        self,
        handle: Handle,
        args: DefaultPreemptionArgs | None = None,
        rand: Callable[[int], int] = random.randrange,
    ) -> None:
        self.handle = handle
        self.args = args or DefaultPreemptionArgs()
        self._rand = rand
        self.evaluator = Evaluator(NAME, handle, self)

    # -- PostFilter ------------------------------------------------------------
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Preempt for ``pod``: the Evaluator's plan, then, with a candidate, its
        evictions (success nominates the pod there). A plan's message is prefixed
        ``preemption: `` as upstream's ``PostFilter``."""
        metrics = self.handle.metrics
        if metrics is not None:
            metrics.observe_preemption_attempt()
        plan = await self.evaluator.plan(state, pod, statuses)
        if plan.candidate is not None:
            return await self.evaluator.prepare_candidate(plan, pod)
        st = plan.status
        if st.reasons:
            st = Status(st.code, (f"preemption: {st.message}",), st.plugin or NAME)
        return plan.result, st

    # -- the policy (framework.preemption.Policy) -----------------------------------
    def pod_eligible_to_preempt_others(
        self, pod: PodInfo, nominated_status: Status | None
    ) -> tuple[bool, str]:
        """Whether ``pod`` may preempt, and why not (upstream ``PodEligibleToPreemptOthers``)."""
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, MSG_NEVER
        nominated = pod.nominated_node_name
        if nominated:
            if nominated_status is not None and nominated_status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                return True, ""
            node = self.handle.snapshot().get(nominated)
            if node is not None and any(
                p.priority < pod.priority and p.deleting and p.preempted for p in node.pods
            ):
                return False, MSG_TERMINATING
        return True, ""

    def num_candidates(self, potential: int) -> int:
        """Candidates the dry run looks for among ``potential`` nodes (upstream
        ``calculateNumCandidates``)."""
        n = potential * self.args.min_candidate_nodes_percentage // 100
        return min(max(n, self.args.min_candidate_nodes_absolute), potential)

    def offset_and_num_candidates(self, nodes: int) -> tuple[int, int]:
        """A random offset among ``nodes`` and :meth:`num_candidates` (upstream
        ``GetOffsetAndNumCandidates``)."""
        return self._rand(nodes), self.num_candidates(nodes)

    def select_victims_on_node(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, budgets: Sequence[DisruptionBudget]
    ) -> tuple[list[PodInfo], int, Status]:
        """The fewest pods of lower priority on ``node`` whose eviction lets ``pod`` pass
        every filter (most important first), how many of them violate a budget, and the
        status (upstream ``SelectVictimsOnNode``). ``state`` is a clone the call changes."""
        handle = self.handle
        potential = [p for p in node.pods if p.priority < pod.priority]
        if not potential:
            return [], 0, Status.unresolvable(MSG_NO_VICTIMS, plugin=NAME)
        current = node
        for victim in potential:
            current = dataclasses.replace(current, pods=tuple(p for p in current.pods if p.uid != victim.uid))
            st = handle.run_pre_filter_extension_remove_pod(state, pod, victim, current)
            if not st.is_success():
                return [], 0, st
        st = handle.run_filters_with_nominated_pods(state, pod, current)
        if not st.is_success():
            return [], 0, st
        potential.sort(key=importance(datetime.datetime.now(datetime.UTC)))
        violating, non_violating = pods_with_pdb_violation(potential, budgets)
        victims: list[PodInfo] = []
        violations = 0
        for group, counts in ((violating, True), (non_violating, False)):
            for candidate in group:
                back = dataclasses.replace(current, pods=(*current.pods, candidate))
                st = handle.run_pre_filter_extension_add_pod(state, pod, candidate, back)
                if not st.is_success():
                    return [], 0, st
                if handle.run_filters_with_nominated_pods(state, pod, back).is_success():
                    current = back
                    continue
                st = handle.run_pre_filter_extension_remove_pod(state, pod, candidate, current)
                if not st.is_success():
                    return [], 0, st
                victims.append(candidate)
                violations += counts
        if violating and non_violating:
            victims.sort(key=importance(datetime.datetime.now(datetime.UTC)))
        return victims, violations, Status.success()


def new(args: DefaultPreemptionArgs | None, handle: Handle) -> DefaultPreemption:
    """The plugin factory (registered in-tree as ``DefaultPreemption``)."""
    return DefaultPreemption(handle, args)
