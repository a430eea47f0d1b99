"""A scheduling profile: which plugins run at each extension point, and how.

The runtime part of ``pkg/scheduler/framework/runtime/framework.go``:
filters stop at the first rejection per node; PostFilter runs when none
fits; a PreScore Skip leaves that plugin's Score out; scores are normalized per
plugin and summed with weights; Reserve failures run Unreserve on every
Reserve plugin in reverse order; Bind plugins are tried until one does not
return Skip.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ipscheduler.framework.interface import (
    MAX_NODE_SCORE,
    BindPlugin,
    Code,
    CycleState,
    FilterPlugin,
    PermitPlugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from ipscheduler.framework.types import NodeInfo, PodInfo

log = logging.getLogger(__name__)

SKIP_FILTER_PLUGINS = "framework/skip-filter-plugins"
"""CycleState key: names of the plugins whose PreFilter returned Skip in this cycle."""


@dataclass
class Diagnosis:
    """Why a pod fits no node: per-node rejection, for the FailedScheduling message."""

    node_to_status: dict[str, Status] = field(default_factory=dict)
    pre_filter: Status | None = None
    num_all_nodes: int = 0

    def histogram(self) -> dict[str, int]:
        """Reason → number of nodes that gave it (only the first failing filter counts)."""
        counts: dict[str, int] = {}
        statuses = (
            [self.pre_filter] * self.num_all_nodes if self.pre_filter else list(self.node_to_status.values())
        )
        for st in statuses:
            for reason in st.reasons:
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def message(self) -> str:
        """kube-scheduler's FitError text (``pkg/scheduler/framework/types.go``).

        ``0/N nodes are available: <count> <reason>, ....`` with the
        "<count> <reason>" strings sorted as strings, as upstream does.
        """
        if self.num_all_nodes == 0:
            return "no nodes available to schedule pods"
        parts = sorted(f"{n} {reason}" for reason, n in self.histogram().items())
        return f"0/{self.num_all_nodes} nodes are available: {', '.join(parts)}."


@dataclass
class Framework:
    """The plugins of one scheduler profile, by extension point.

    ``score`` holds ``(plugin, weight)`` pairs.
    """

    scheduler_name: str
    queue_sort: QueueSortPlugin
    pre_filter: Sequence[PreFilterPlugin] = ()
    filter: Sequence[FilterPlugin] = ()
    post_filter: Sequence[PostFilterPlugin] = ()
    pre_score: Sequence[PreScorePlugin] = ()
    score: Sequence[tuple[ScorePlugin, int]] = ()
    reserve: Sequence[ReservePlugin] = ()
    permit: Sequence[PermitPlugin] = ()
    pre_bind: Sequence[PreBindPlugin] = ()
    bind: Sequence[BindPlugin] = ()
    post_bind: Sequence[PostBindPlugin] = ()

    # -- scheduling cycle ------------------------------------------------
    def find_feasible(
        self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]
    ) -> tuple[list[NodeInfo], Diagnosis]:
        """PreFilter, then Filter on every node. Returns feasible nodes and the diagnosis.

        A PreFilter that returns Skip has nothing to check for this pod: its
        Filter is not called (``SkipFilterPlugins`` in upstream's
        ``RunPreFilterPlugins``).
        """
        diagnosis = Diagnosis(num_all_nodes=len(nodes))
        skip: set[str] = set()
        for plugin in self.pre_filter:
            st = plugin.pre_filter(state, pod, nodes)
            if st.code is Code.SKIP:
                skip.add(plugin.name)
            elif not st.is_success():
                diagnosis.pre_filter = st
                return [], diagnosis
        state.write(SKIP_FILTER_PLUGINS, frozenset(skip))
        filters = [p for p in self.filter if p.name not in skip]
        feasible = []
        for node in nodes.values():
            st = self._filter(filters, state, pod, node)
            if st.is_success():
                feasible.append(node)
            else:
                diagnosis.node_to_status[node.name] = st
        return feasible, diagnosis

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """All Filter plugins in order (but those PreFilter skipped); the first non-success wins."""
        skip = state.get(SKIP_FILTER_PLUGINS) or frozenset()
        return self._filter([p for p in self.filter if p.name not in skip], state, pod, node)

    @staticmethod
    def _filter(filters: Sequence[FilterPlugin], state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for plugin in filters:
            st = plugin.filter(state, pod, node)
            if not st.is_success():
                return st if st.plugin else Status(st.code, st.reasons, plugin.name)
        return Status.success()

    async def run_post_filter(self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis) -> Status:
        """PostFilter plugins in order, when no node fits (``RunPostFilterPlugins``).

        The first success (or Error) ends the run and is returned; Unschedulable
        results let the next plugin try and are returned merged if none succeeds
        (no plugins: an Unschedulable status without reasons).
        """
        reasons: list[str] = []
        for plugin in self.post_filter:
            st = await plugin.post_filter(state, pod, diagnosis.node_to_status)
            if st.is_success() or not st.is_rejected():
                return st
            reasons.extend(st.reasons)
        return Status.unschedulable(*reasons)

    def run_scores(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[str, dict[str, int]]:
        """PreScore, then Score: plugin name → node name → 0..100 (normalized, unweighted).

        A Score plugin whose PreScore returned Skip is left out (upstream's
        ``SkipScorePlugins``): it adds nothing to any node's total. Other
        PreScore results are not acted upon.
        """
        out: dict[str, dict[str, int]] = {}
        skip: set[str] = set()
        for pre in self.pre_score:
            if pre.pre_score(state, pod, nodes).code is Code.SKIP:
                skip.add(pre.name)
        for plugin, _ in self.score:
            if plugin.name in skip:
                continue
            scores = {n.name: plugin.score(state, pod, n) for n in nodes}
            plugin.normalize_score(state, pod, scores)
            for name, s in scores.items():
                if not 0 <= s <= MAX_NODE_SCORE:
                    raise ValueError(f"plugin {plugin.name} gave node {name} score {s} outside 0..100")
            out[plugin.name] = scores
        return out

    def total_scores(
        self, per_plugin: dict[str, dict[str, int]], nodes: Sequence[NodeInfo]
    ) -> dict[str, int]:
        """Weighted sum of :meth:`run_scores` output per node."""
        weights = {p.name: w for p, w in self.score}
        return {n.name: sum(weights[p] * s[n.name] for p, s in per_plugin.items()) for n in nodes}

    async def run_reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reserve plugins in order; on failure unreserve all of them and return the failure."""
        for plugin in self.reserve:
            try:
                st = await plugin.reserve(state, pod, node)
            except Exception as e:
                log.exception("Reserve plugin %s failed for %s", plugin.name, pod.key)
                st = Status.error(f"{plugin.name}: {e}", plugin=plugin.name)
            if not st.is_success():
                await self.run_unreserve(state, pod, node)
                return st
        return Status.success()

    async def run_unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        for plugin in reversed(self.reserve):
            await plugin.unreserve(state, pod, node)

    def run_permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for plugin in self.permit:
            st = plugin.permit(state, pod, node)
            if not st.is_success():
                return st
        return Status.success()

    # -- binding cycle ---------------------------------------------------
    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for plugin in self.pre_bind:
            st = await plugin.pre_bind(state, pod, node)
            if not st.is_success():
                return st
        return Status.success()

    async def run_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for plugin in self.bind:
            st = await plugin.bind(state, pod, node)
            if st.code is not Code.SKIP:
                return st
        return Status.error("no bind plugin handled the pod")

    async def run_post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        for plugin in self.post_bind:
            await plugin.post_bind(state, pod, node)
