"""DefaultPreemption: a pod that fits no node evicts pods of lower priority to make room.

Mirrors kube-scheduler's PostFilter plugin
(``pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go``) over its
evaluator (``pkg/scheduler/framework/preemption/preemption.go``), synchronous as upstream
without ``SchedulerAsyncPreemption``:

1. **Eligibility** (``PodEligibleToPreemptOthers``): a pod with ``preemptionPolicy:
   Never`` does not preempt; nor does a pod already nominated to a node where a pod of
   lower priority is still terminating by preemption (unless its nominated node is now
   UnschedulableAndUnresolvable for it).
2. **Candidates** (``findCandidates``, ``DryRunPreemption``): only the nodes whose Filter
   rejection was Unschedulable (not UnschedulableAndUnresolvable) are tried, from a random
   offset, until ``max(10 % of them, 100)`` candidates are found
   (``minCandidateNodesPercentage``, ``minCandidateNodesAbsolute``).
3. **Victims on a node** (``SelectVictimsOnNode``): every pod of lower priority is removed
   (each removal told to the PreFilter extensions on a clone of the cycle state, e.g.
   UnderlayIP counts the address a victim would free); if the pod then passes every
   filter (counting the pods nominated there), the removed pods are added back one by one,
   most important first (priority, then earliest start), those whose eviction would
   violate a PodDisruptionBudget first, and every pod whose return makes the pod fail again
   is a victim.
4. **The node** (:func:`~ipscheduler.framework.preemption.select_candidate`): fewest PDB
   violations, lowest highest-victim priority, smallest priority sum, fewest victims,
   latest start.
5. **Preparing it** (``prepareCandidate``): a victim held at Permit is rejected; any other
   gets the ``DisruptionTarget`` condition and is deleted (its UID as precondition), with a
   Normal ``Preempted`` event ``Preempted by pod <uid> on node <node>``; pods of lower
   priority nominated to the node lose their nomination. The pod is nominated to the node
   (``status.nominatedNodeName``) and retried when the victims are gone.

Messages are upstream's, prefixed ``preemption: `` (e.g. ``preemption: 0/3 nodes are
available: 3 No preemption victims found for incoming pod.``).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import Field, model_validator

from ipscheduler.framework.diagnosis import Diagnosis
from ipscheduler.framework.fields import as_dict, as_str
from ipscheduler.framework.interface import (
    Code,
    CycleState,
    Handle,
    PostFilterResult,
    Status,
)
from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector
from ipscheduler.framework.preemption import Candidate, Victim, select_candidate
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import PREEMPT_NEVER, NodeInfo, PodInfo

log = logging.getLogger(__name__)

NAME = "DefaultPreemption"

MSG_NEVER = "not eligible due to preemptionPolicy=Never."
MSG_TERMINATING = "not eligible due to a terminating pod on the nominated node."
MSG_NO_VICTIMS = "No preemption victims found for incoming pod"
MSG_NOT_HELPFUL = "Preemption is not helpful for scheduling"
MSG_NO_CANDIDATE = "no candidate node for preemption"


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


def victim_of(pod: PodInfo) -> Victim:
    """The :class:`~ipscheduler.framework.preemption.Victim` view of a pod."""
    return Victim(pod.uid, pod.priority, pod.start_time)


@dataclass(frozen=True)
class Plan:
    """What preemption would do for a pod: the chosen ``candidate`` with its ``victims``
    (most important first), or None with the ``status`` saying why not."""

    status: Status
    candidate: Candidate | None = None
    victims: tuple[PodInfo, ...] = ()
    result: PostFilterResult | None = None


class PreemptionClient(Protocol):
    """The API calls preemption makes (``kube/client.KubeApi`` has them)."""

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]: ...

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool: ...

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None: ...


def _pod_ref(pod: PodInfo) -> dict[str, str]:
    return {"kind": "Pod", "apiVersion": "v1", "name": pod.name, "namespace": pod.namespace, "uid": pod.uid}


class DefaultPreemption:
    """PostFilter: preempt pods of lower priority (module doc). ``rand(n)`` picks the
    dry run's offset in ``0..n-1`` (a seeded one makes tests deterministic)."""

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

    # -- PostFilter ------------------------------------------------------------
    async def post_filter(
        self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]
    ) -> tuple[PostFilterResult | None, Status]:
        """Preempt for ``pod`` (module doc); success nominates it to the chosen node.
        Messages are prefixed ``preemption: `` as upstream's ``PostFilter``."""
        metrics = self.handle.metrics
        if metrics is not None:
            metrics.observe_preemption_attempt()
        plan = await self.plan(state, pod, statuses)
        if plan.candidate is not None:
            st = await self._prepare(plan, pod)
            if not st.is_success():
                return None, st
            if metrics is not None:
                metrics.observe_preemption_victims(len(plan.victims))
            return PostFilterResult(
                plan.candidate.node, frozenset(v.uid for v in plan.victims)
            ), Status.success()
        st = plan.status
        if st.reasons:
            st = Status(st.code, (f"preemption: {st.message}",), st.plugin or NAME)
        return plan.result, st

    async def plan(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> Plan:
        """What preemption would do for ``pod`` (steps 1-4 of the module doc), without
        acting: ``explain`` shows it. Reads the PodDisruptionBudgets through the handle's
        client (none without one), one LIST, only when some candidate node has a pod of
        lower priority (a pod that can preempt nothing costs no API call); an API error is
        an Error plan."""
        eligible, why = self.eligible(pod, statuses)
        if not eligible:
            return Plan(Status.unschedulable(why, plugin=NAME))
        nodes = self.handle.snapshot()
        if not nodes:
            return Plan(Status.error("no nodes available", plugin=NAME))
        potential = [
            n for name, n in nodes.items() if (st := statuses.get(name)) and st.code is Code.UNSCHEDULABLE
        ]
        node_statuses: dict[str, Status] = {}
        candidates: list[tuple[Candidate, tuple[PodInfo, ...]]] = []
        if potential:
            budgets: list[DisruptionBudget] = []
            if any(p.priority < pod.priority for n in potential for p in n.pods):  # else no victims: no LIST
                try:
                    budgets = await self._budgets()
                except Exception as e:
                    return Plan(Status.error(f"listing PodDisruptionBudgets: {e!r}", plugin=NAME))
            candidates, node_statuses = self.dry_run(state, pod, potential, budgets)
        if not candidates:
            not_helpful = Status.unresolvable(MSG_NOT_HELPFUL, plugin=NAME)
            fit = Diagnosis(
                node_to_status={name: node_statuses.get(name, not_helpful) for name in nodes},
                num_all_nodes=len(nodes),
            )
            return Plan(Status.unschedulable(fit.message(), plugin=NAME), result=PostFilterResult(""))
        best = select_candidate([c for c, _ in candidates])
        if best is None:
            return Plan(Status.unschedulable(MSG_NO_CANDIDATE, plugin=NAME))
        victims = next(v for c, v in candidates if c is best)
        return Plan(Status.success(), best, victims)

    def eligible(self, pod: PodInfo, statuses: Mapping[str, Status]) -> tuple[bool, str]:
        """Whether ``pod`` may preempt, and why not (upstream ``PodEligibleToPreemptOthers``)."""
        if pod.preemption_policy == PREEMPT_NEVER:
            return False, MSG_NEVER
        nominated = pod.nominated_node_name
        if nominated:
            st = statuses.get(nominated)
            if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
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

    def dry_run(
        self,
        state: CycleState,
        pod: PodInfo,
        potential: Sequence[NodeInfo],
        budgets: Sequence[DisruptionBudget],
    ) -> tuple[list[tuple[Candidate, tuple[PodInfo, ...]]], dict[str, Status]]:
        """The candidates on ``potential`` nodes, those that violate no budget first, with
        their victims; and the status of each node tried that is not one (upstream
        ``DryRunPreemption``, one node after the other from a random offset)."""
        wanted = self.num_candidates(len(potential))
        offset = self._rand(len(potential)) if potential else 0
        clean: list[tuple[Candidate, tuple[PodInfo, ...]]] = []
        violating: list[tuple[Candidate, tuple[PodInfo, ...]]] = []
        statuses: dict[str, Status] = {}
        for i in range(len(potential)):
            node = potential[(offset + i) % len(potential)]
            victims, violations, st = self.select_victims_on_node(state.clone(), pod, node, budgets)
            if st.is_success() and victims:
                found = (Candidate(node.name, tuple(map(victim_of, victims)), violations), tuple(victims))
                (clean if violations == 0 else violating).append(found)
                if clean and len(clean) + len(violating) >= wanted:
                    break
                continue
            if st.is_success():
                st = Status.error(f'expected at least one victim pod on node "{node.name}"', plugin=NAME)
            statuses[node.name] = st
        return clean + violating, statuses

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

    # -- acting -------------------------------------------------------------------
    async def _budgets(self) -> list[DisruptionBudget]:
        client: PreemptionClient | None = self.handle.client
        if client is None:
            return []
        raw = await client.list_pod_disruption_budgets()
        return [b for b in map(DisruptionBudget.from_obj, raw) if b is not None]

    async def _prepare(self, plan: Plan, pod: PodInfo) -> Status:
        """Evict the victims and clear lower nominations (upstream ``prepareCandidate``)."""
        assert plan.candidate is not None
        node = plan.candidate.node
        client: PreemptionClient | None = self.handle.client
        message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod"
        for victim in plan.victims:
            waiting = self.handle.waiting_pods.get(victim.uid)
            try:
                if waiting is not None:
                    waiting.reject(NAME, "preempted")
                elif client is not None:
                    await client.preempt_pod(victim, message)
            except Exception as e:
                log.warning("preempting %s for %s failed: %r", victim.key, pod.key, e)
                return Status.error(f"preempting {victim.key}: {e!r}", plugin=NAME)
            log.info("%s preempted %s on node %s", pod.key, victim.key, node)
            recorder = self.handle.recorder
            if recorder is not None:
                recorder.emit(
                    _pod_ref(victim), "Normal", "Preempted", f"Preempted by pod {pod.uid} on node {node}"
                )
        if client is not None:
            for lower in self.handle.nominated_pods_for_node(node):
                if lower.priority < pod.priority:
                    try:
                        await client.set_nominated_node_name(lower, "")
                    except Exception as e:  # not critical, as upstream
                        log.warning("could not clear the nomination of %s: %r", lower.key, e)
        return Status.success()


def new(args: DefaultPreemptionArgs | None, handle: Handle) -> DefaultPreemption:
    """The plugin factory (registered in-tree as ``DefaultPreemption``)."""
    return DefaultPreemption(handle, args)
