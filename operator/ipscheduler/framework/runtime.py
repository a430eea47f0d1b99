"""A scheduling profile: which plugins run at each extension point, and how.

The runtime part of ``pkg/scheduler/framework/runtime/framework.go`` (building one,
``NewFramework``, is :mod:`ipscheduler.framework.building`): filters stop at the first
rejection per node; PostFilter runs when none fits; a PreScore Skip leaves that plugin's
Score out; scores are normalized per plugin and summed with weights; Reserve failures run
Unreserve on every Reserve plugin in reverse order; Bind plugins are tried until one does
not return Skip; PreBind, Bind and PostBind are one binding cycle.

Size: one class, as upstream's ``frameworkImpl`` runs every extension point in one
``framework.go``: the scheduling cycle (with the nominated pods, the node-local memos and
the what-if runs preemption makes) reads as one walk through the points.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from ipscheduler.framework.diagnosis import Diagnosis as Diagnosis  # noqa: PLC0414 (re-exported)
from ipscheduler.framework.interface import (
    MAX_NODE_SCORE,
    PERMIT_TIMED_OUT,
    WILDCARD_EVENT,
    BindPlugin,
    CapacityAware,
    Client,
    ClusterEventWithHint,
    Code,
    CycleState,
    EnqueueExtensions,
    EventRecorder,
    FilterPlugin,
    MetricsRecorder,
    NominationAware,
    PermitPlugin,
    PodActivator,
    PodNominator,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreemptionMetrics,
    PreFilterExtensions,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    Room,
    ScorePlugin,
    Status,
)
from ipscheduler.framework.nodememo import NodeMemo, node_local_key, normalizes
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, VolumeListers
from ipscheduler.framework.waiting import WaitingPods

log = logging.getLogger(__name__)

MAX_PERMIT_TIMEOUT = 15 * 60.0
"""The longest a Permit plugin may hold a pod, seconds (upstream ``maxTimeout``: 15 minutes)."""

SKIP_FILTER_PLUGINS = "framework/skip-filter-plugins"
"""CycleState key: names of the plugins whose PreFilter returned Skip in this cycle."""


MIN_FEASIBLE_NODES_TO_FIND = 100
"""Upstream ``minFeasibleNodesToFind``: below this many nodes, every node is scored."""
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
"""Upstream ``minFeasibleNodesPercentageToFind``: the adaptive percentage's floor."""


def num_feasible_nodes_to_find(percentage: int | None, num_all_nodes: int) -> int:
    """How many feasible nodes a scheduling cycle looks for among ``num_all_nodes``.

    Upstream ``numFeasibleNodesToFind`` (``pkg/scheduler/schedule_one.go``): every
    node below :data:`MIN_FEASIBLE_NODES_TO_FIND` nodes; else ``percentage`` % of them
    (None or 0: adaptive, ``50 - nodes/125`` with a floor of
    :data:`MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND` %), but at least
    :data:`MIN_FEASIBLE_NODES_TO_FIND`. E.g. 1000 nodes → 420, 5000 → 500.
    """
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if not percentage:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass
class Framework:
    """The plugins of one scheduler profile, by extension point.

    ``score`` holds ``(plugin, weight)`` pairs. :func:`new_framework` builds one
    from a registry and a profile configuration; tests may list plugins directly.

    It is also the :class:`~ipscheduler.framework.interface.Handle` its plugins' factories
    get (upstream's ``frameworkImpl``): whole from its construction, with the profile's
    :attr:`client`, event :attr:`recorder`, :attr:`volumes` and :attr:`waiting_pods`, the
    nominated pods, ``room_for`` and the what-if runs preemption makes.
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

    percentage_of_nodes_to_score: int | None = None
    """``percentageOfNodesToScore`` (0..100; None or 0: upstream's adaptive default)."""
    next_start_node_index: int = field(default=0, compare=False)
    """Where the next limited search starts (upstream ``nextStartNodeIndex``)."""
    waiting_pods: WaitingPods = field(default_factory=WaitingPods, compare=False)
    """The pods held at Permit (the plugins reach them as the handle's)."""
    client: Client | None = field(default=None, compare=False)
    """The API calls the plugins make (:class:`~ipscheduler.framework.interface.Client`:
    upstream ``Handle.ClientSet``; None: nothing talks to the API server, ``explain`` and
    tests)."""
    recorder: EventRecorder | None = field(default=None, compare=False)
    """Posts the plugins' Events (upstream ``Handle.EventRecorder``; None: only logged)."""
    volumes: VolumeListers = field(default_factory=MapVolumeListers, compare=False)
    """The storage objects' listers the volume plugins read (none by default: every claim is
    then not found)."""
    pod_activator: PodActivator | None = field(default=None, compare=False)
    """The scheduling queue, where the handle's ``activate`` moves pods (upstream
    ``SetPodActivator``: set once the queue, which is made from this profile, exists)."""
    metrics_recorder: MetricsRecorder | None = field(default=None, compare=False)
    """Where extension-point and plugin timings go (None: not timed; upstream's
    ``metricsRecorder``). Every extension point
    is timed in every cycle; each plugin in the cycles whose CycleState says
    ``record_plugin_metrics``. Filter and Score plugins are timed once per cycle, their time
    summed over the nodes they saw (upstream observes each node: that many observations
    would cost more than the plugins)."""

    pod_nominator: PodNominator | None = field(default=None, compare=False)
    """The scheduling queue, which knows the pods nominated to each node (upstream
    ``SetPodNominator``); None: no pod is nominated anywhere."""
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict, compare=False)
    """The nodes of the current cycle, as the last :meth:`find_feasible` got them (upstream
    ``SnapshotSharedLister``: PostFilter reads them)."""
    memoize: bool = field(default=True, compare=False)
    """Reuse node-local Filter and Score results for unchanged nodes and pods of the same
    shape (:mod:`ipscheduler.framework.nodememo`); tests turn it off to compare."""
    filter_memo: NodeMemo[Status] = field(default_factory=NodeMemo, compare=False, repr=False)
    score_memo: NodeMemo[tuple[int, ...]] = field(default_factory=NodeMemo, compare=False, repr=False)
    total_memo: NodeMemo[tuple[int, tuple[int, ...]]] = field(
        default_factory=NodeMemo, compare=False, repr=False
    )

    def set_pod_activator(self, activator: PodActivator) -> None:
        """Where the plugins' ``handle.activate`` moves pods: the scheduling queue (upstream
        ``SetPodActivator``; the queue is made from the profile, so after it)."""
        self.pod_activator = activator

    def set_pod_nominator(self, nominator: PodNominator) -> None:
        """Where the nominated pods are known: the scheduling queue (upstream
        ``SetPodNominator``, set with the activator)."""
        self.pod_nominator = nominator

    # -- the handle (upstream's frameworkImpl is its plugins' Handle) ---------------
    def activate(self, uids: set[str]) -> None:
        """Move the pods of these UIDs to activeQ through the pod activator (upstream
        ``Handle.Activate``); nothing before :meth:`set_pod_activator`."""
        if self.pod_activator is not None:
            self.pod_activator.activate(uids)

    @property
    def metrics(self) -> PreemptionMetrics | None:
        """Where preemption is counted: the metrics recorder when it counts preemption
        (:class:`~ipscheduler.framework.interface.PreemptionMetrics`), else None."""
        recorder = self.metrics_recorder
        return recorder if isinstance(recorder, PreemptionMetrics) else None

    def snapshot(self) -> Mapping[str, NodeInfo]:
        """The nodes of the current cycle, by name (:attr:`nodes`; upstream
        ``SnapshotSharedLister``; empty before the first cycle)."""
        return self.nodes

    def _point(self, point: str, started: float, st: Status | None = None) -> None:
        if self.metrics_recorder is not None:
            code = st.code.value if st is not None else Code.SUCCESS.value
            self.metrics_recorder.observe_extension_point(point, code, time.perf_counter() - started)

    def _plugin(self, state: CycleState, plugin: str, point: str, started: float, st: Status | None) -> None:
        if self.metrics_recorder is not None and state.record_plugin_metrics:
            code = st.code.value if st is not None else Code.SUCCESS.value
            self.metrics_recorder.observe_plugin(plugin, point, code, time.perf_counter() - started)

    # -- scheduling cycle ------------------------------------------------
    def find_feasible(
        self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo], *, find_all: bool = False
    ) -> tuple[list[NodeInfo], Diagnosis]:
        """PreFilter, then Filter node by node until enough feasible nodes are found.
        Returns feasible nodes and the diagnosis.

        As upstream's ``findNodesThatPassFilters`` (``pkg/scheduler/schedule_one.go``):
        the search starts where the previous one stopped (:attr:`next_start_node_index`,
        wrapping around) and stops once :func:`num_feasible_nodes_to_find` nodes fit, so
        a cycle's cost does not grow with the cluster; a pod that fits few nodes still
        has every node tried. ``find_all`` (``explain``) filters every node, in order.
        The diagnosis holds a status for every node tried and rejected.

        A PreFilter that returns Skip has nothing to check for this pod: its
        Filter is not called (``SkipFilterPlugins`` in upstream's
        ``RunPreFilterPlugins``).
        """
        self.nodes = nodes
        diagnosis = Diagnosis(num_all_nodes=len(nodes))
        skip: set[str] = set()
        started = time.perf_counter()
        for plugin in self.pre_filter:
            t0 = time.perf_counter()
            st = plugin.pre_filter(state, pod, nodes)
            self._plugin(state, plugin.name, "PreFilter", t0, st)
            if st.code is Code.SKIP:
                skip.add(plugin.name)
            elif not st.is_success():
                diagnosis.pre_filter = st if st.plugin else Status(st.code, st.reasons, plugin.name)
                self._point("PreFilter", started, st)
                return [], diagnosis
        self._point("PreFilter", started)
        state.write(SKIP_FILTER_PLUGINS, frozenset(skip))
        filters = [p for p in self.filter if p.name not in skip]
        feasible: list[NodeInfo] = []
        all_nodes = list(nodes.values())
        total = len(all_nodes)
        if find_all or total == 0:
            to_find, start = total, 0
        else:
            to_find = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, total)
            start = self.next_start_node_index % total
        processed = 0
        started = time.perf_counter()
        timed: dict[str, float] | None = (
            dict.fromkeys((p.name for p in filters), 0.0)
            if self.metrics_recorder is not None and state.record_plugin_metrics
            else None
        )
        head, sid = self._node_local_head(filters, pod) if timed is None else (0, -1)
        rest = filters[head:]
        nominated = self.pod_nominator is not None and self.pod_nominator.any_nominated()
        if sid >= 0 and not nominated and total:
            return self._find_feasible_memo(
                state, pod, all_nodes, (start, to_find, not find_all), filters, head, sid, diagnosis, started
            )
        for i in range(total):
            node = all_nodes[(start + i) % total]
            processed += 1
            if sid >= 0:
                kept = node.memo.get(sid)
                if kept is None:
                    kept = self._filter(filters[:head], state, pod, node)
                    self.filter_memo.put(node, sid, kept)
                st = kept
                if st.code is Code.SUCCESS and rest:
                    st = self._filter(rest, state, pod, node)
            elif timed is None:
                st = self._filter(filters, state, pod, node)
            else:
                st = self._timed_filter(filters, state, pod, node, timed)
            if nominated and st.code is Code.SUCCESS and self._nominated_here(pod, node):
                st = self._filter_with_nominated_pods(filters, state, pod, node)
            if st.is_success():
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            else:
                diagnosis.node_to_status[node.name] = st
        if not find_all and total:
            self.next_start_node_index = (start + processed) % total
        if self.metrics_recorder is not None:
            outcome = Status.success() if feasible or not total else Status.unschedulable()
            self._point("Filter", started, outcome)
            for name, seconds in (timed or {}).items():
                self.metrics_recorder.observe_plugin(name, "Filter", outcome.code.value, seconds)
        return feasible, diagnosis

    def _find_feasible_memo(
        self,
        state: CycleState,
        pod: PodInfo,
        all_nodes: list[NodeInfo],
        search: tuple[int, int, bool],
        filters: Sequence[FilterPlugin],
        head: int,
        sid: int,
        diagnosis: Diagnosis,
        started: float,
    ) -> tuple[list[NodeInfo], Diagnosis]:
        """:meth:`find_feasible`'s node loop when the ``head`` first filters are memoised
        under shape ``sid``, no pod is nominated anywhere and the cycle is not timed: the
        same verdicts, with the least work per node (this loop runs for every node a cycle
        visits). ``search``: the index of the first node to visit, how many feasible nodes
        to find, and whether the next search starts where this one stopped."""
        start, to_find, advance = search
        total = len(all_nodes)
        feasible: list[NodeInfo] = []
        statuses = diagnosis.node_to_status
        head_filters, rest = filters[:head], filters[head:]
        run, put, success = self._filter, self.filter_memo.put, Code.SUCCESS
        processed = 0
        for node in itertools.chain(all_nodes[start:], all_nodes[:start]):
            processed += 1
            st = node.memo.get(sid)
            if st is None:
                st = run(head_filters, state, pod, node)
                put(node, sid, st)
            if st.code is success and rest:
                st = run(rest, state, pod, node)
            if st.code is success:
                feasible.append(node)
                if len(feasible) >= to_find:
                    break
            else:
                statuses[node.name] = st
        if advance:
            self.next_start_node_index = (start + processed) % total
        if self.metrics_recorder is not None:
            self._point("Filter", started, Status.success() if feasible else Status.unschedulable())
        return feasible, diagnosis

    def _node_local_head(self, filters: Sequence[FilterPlugin], pod: PodInfo) -> tuple[int, int]:
        """How many of ``filters``, from the first, are node-local for ``pod``, and the memo
        shape id of their keys (``(0, -1)``: none, or the memo is off)."""
        keys: list[Hashable] = []
        for plugin in filters if self.memoize else ():
            key = node_local_key(plugin, pod)
            if key is None:
                break
            keys.append((plugin.name, key))
        if not keys:
            return 0, -1
        return len(keys), self.filter_memo.shape(tuple(keys))

    def queueing_hints(self) -> list[tuple[str, ClusterEventWithHint]]:
        """Every plugin that can reject a pod (PreFilter, Filter, Reserve, Permit) with the
        events it registers, as ``(plugin name, registration)`` for the queue. A plugin
        without :class:`~ipscheduler.framework.interface.EnqueueExtensions` registers
        :data:`~ipscheduler.framework.interface.WILDCARD_EVENT` (upstream
        ``Framework.EnqueueExtensions`` and ``buildQueueingHintMap``)."""
        out: list[tuple[str, ClusterEventWithHint]] = []
        seen: set[str] = set()
        for plugin in (*self.pre_filter, *self.filter, *self.reserve, *self.permit):
            if plugin.name in seen:
                continue
            seen.add(plugin.name)
            if isinstance(plugin, EnqueueExtensions):
                out.extend((plugin.name, reg) for reg in plugin.events_to_register())
            else:
                out.append((plugin.name, ClusterEventWithHint(WILDCARD_EVENT)))
        return out

    def _active_filters(self, state: CycleState) -> list[FilterPlugin]:
        skip = state.get(SKIP_FILTER_PLUGINS) or frozenset()
        return [p for p in self.filter if p.name not in skip]

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """All Filter plugins in order (but those PreFilter skipped); the first non-success wins."""
        return self._filter(self._active_filters(state), state, pod, node)

    # -- nominated pods and what-if runs (preemption) ------------------------
    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` (none without a nominator)."""
        return self.pod_nominator.nominated_pods_for_node(node) if self.pod_nominator is not None else []

    def _nominated_here(self, pod: PodInfo, node: NodeInfo) -> bool:
        """Whether pods of at least ``pod``'s priority other than ``pod`` are nominated to ``node``."""
        return self.pod_nominator is not None and any(
            p.priority >= pod.priority and p.uid != pod.uid for p in self.nominated_pods_for_node(node.name)
        )

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        """``add_pod`` of every PreFilter plugin with :class:`PreFilterExtensions` that did
        not skip (upstream ``RunPreFilterExtensionAddPod``); the first failure is returned
        as an Error naming the plugin."""
        return self._extensions(state, lambda p: p.add_pod(state, pod, pod_to_add, node))

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        """``remove_pod`` of every PreFilter plugin with :class:`PreFilterExtensions` that did
        not skip (upstream ``RunPreFilterExtensionRemovePod``)."""
        return self._extensions(state, lambda p: p.remove_pod(state, pod, pod_to_remove, node))

    def _extensions(self, state: CycleState, call: Callable[[PreFilterExtensions], Status]) -> Status:
        skip = state.get(SKIP_FILTER_PLUGINS) or frozenset()
        for plugin in self.pre_filter:
            if isinstance(plugin, PreFilterExtensions) and plugin.name not in skip:
                st = call(plugin)
                if not st.is_success():
                    return Status.error(*st.reasons, plugin=plugin.name)
        return Status.success()

    def run_filters_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The filters on ``node``, first with the pods nominated there of at least ``pod``'s
        priority counted as if bound (on a clone of ``state``), then, if they passed and
        there were such pods, without them (upstream ``RunFilterPluginsWithNominatedPods``,
        ``pkg/scheduler/framework/runtime/framework.go``: a pod must fit both ways, as the
        nominated pods may or may not land there)."""
        filters = self._active_filters(state)
        if self._nominated_here(pod, node):
            st = self._filter_with_nominated_pods(filters, state, pod, node)
            if not st.is_success():
                return st
        return self._filter(filters, state, pod, node)

    def _filter_with_nominated_pods(
        self, filters: Sequence[FilterPlugin], state: CycleState, pod: PodInfo, node: NodeInfo
    ) -> Status:
        """The filters on ``node`` with its nominated pods of at least ``pod``'s priority
        counted (upstream ``addGENominatedPods``), on a clone of ``state``; the run without
        them is the caller's (find_feasible has made it already)."""
        with_them, cloned = node, state.clone()
        for other in self.nominated_pods_for_node(node.name):
            if other.priority >= pod.priority and other.uid != pod.uid:
                with_them = dataclasses.replace(with_them, pods=(*with_them.pods, other))
                st = self.run_pre_filter_extension_add_pod(cloned, pod, other, with_them)
                if not st.is_success():
                    return st
        return self._filter(filters, cloned, pod, with_them)

    @staticmethod
    def _filter(filters: Sequence[FilterPlugin], state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for plugin in filters:
            st = plugin.filter(state, pod, node)
            if st.code is not Code.SUCCESS:
                return st if st.plugin else Status(st.code, st.reasons, plugin.name)
        return Status.success()

    @staticmethod
    def _timed_filter(
        filters: Sequence[FilterPlugin],
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        spent: dict[str, float],
    ) -> Status:
        """:meth:`_filter`, adding each plugin's seconds to ``spent``."""
        for plugin in filters:
            t0 = time.perf_counter()
            st = plugin.filter(state, pod, node)
            spent[plugin.name] += time.perf_counter() - t0
            if st.code is not Code.SUCCESS:
                return st if st.plugin else Status(st.code, st.reasons, plugin.name)
        return Status.success()

    async def run_nominated(self, pod: PodInfo, result: PostFilterResult) -> None:
        """Tell every :class:`~ipscheduler.framework.interface.NominationAware` Filter plugin
        where PostFilter nominated ``pod`` (``result``), one after the other."""
        for plugin in self.filter:
            if isinstance(plugin, NominationAware):
                await plugin.nominated(pod, result.nominated_node_name, result.victims)

    async def run_post_filter(
        self, state: CycleState, pod: PodInfo, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter plugins in order, when no node fits (``RunPostFilterPlugins``).

        Each plugin gets every rejected node's status, or the PreFilter's for every node
        (upstream's absent-nodes status). The first success (or Error) ends the run;
        Unschedulable results let the next plugin try and are returned merged if none
        succeeds (no plugins: an Unschedulable status without reasons), with the last
        result a plugin gave (e.g. preemption clearing a stale nomination).
        """
        reasons: list[str] = []
        result: PostFilterResult | None = None
        statuses: Mapping[str, Status] = diagnosis.node_to_status
        if diagnosis.pre_filter is not None:  # upstream: every node gets the PreFilter's status
            statuses = dict.fromkeys(self.nodes, diagnosis.pre_filter)
        started = time.perf_counter()
        for plugin in self.post_filter:
            t0 = time.perf_counter()
            got, st = await plugin.post_filter(state, pod, statuses)
            self._plugin(state, plugin.name, "PostFilter", t0, st)
            if st.is_success() or not st.is_rejected():
                self._point("PostFilter", started, st)
                return got, st
            result = got if got is not None else result
            reasons.extend(st.reasons)
        merged = Status.unschedulable(*reasons)
        self._point("PostFilter", started, merged)
        return result, merged

    def run_scores(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> dict[str, dict[str, int]]:
        """PreScore, then Score: plugin name → node name → 0..100 (normalized, unweighted).

        A Score plugin whose PreScore returned Skip is left out (upstream's
        ``SkipScorePlugins``): it adds nothing to any node's total. Other
        PreScore results are not acted upon. Raises ValueError when a plugin's
        (normalized) score is outside ``0..MAX_NODE_SCORE``.
        """
        out: dict[str, dict[str, int]] = {}
        active = [p for p, _ in self._run_pre_score(state, pod, nodes)]
        started = time.perf_counter()
        local = {} if state.record_plugin_metrics else self._node_local_scores(state, pod, nodes, active)
        for plugin in active:
            t0 = time.perf_counter()
            scores = local.get(plugin.name) or {n.name: plugin.score(state, pod, n) for n in nodes}
            plugin.normalize_score(state, pod, scores)
            self._plugin(state, plugin.name, "Score", t0, None)
            _check_scores(plugin.name, scores)
            out[plugin.name] = scores
        self._point("Score", started)
        return out

    def _run_pre_score(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]
    ) -> list[tuple[ScorePlugin, int]]:
        """PreScore; the Score plugins (with their weights) that did not skip."""
        skip: set[str] = set()
        started = time.perf_counter()
        for pre in self.pre_score:
            t0 = time.perf_counter()
            st = pre.pre_score(state, pod, nodes)
            self._plugin(state, pre.name, "PreScore", t0, st)
            if st.code is Code.SKIP:
                skip.add(pre.name)
        self._point("PreScore", started)
        return [(p, w) for p, w in self.score if p.name not in skip]

    def score_totals(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
        """PreScore and Score, summed: node name → weighted total of the normalized scores,
        equal to ``total_scores(run_scores(...))`` (which this is when the memo is off or
        the cycle is timed). Raises ValueError as :meth:`run_scores`.

        Faster for the node-local plugins (:mod:`ipscheduler.framework.nodememo`): each
        unchanged node keeps, per pod shape, the weighted sum of the raw scores of those
        without NormalizeScore (:func:`~ipscheduler.framework.nodememo.normalizes`) and the
        raw scores of the others, so a cycle builds one column per plugin that normalizes
        instead of one per plugin.
        """
        if state.record_plugin_metrics or not self.memoize or not nodes:
            return self.total_scores(self.run_scores(state, pod, nodes), nodes)
        active = self._run_pre_score(state, pod, nodes)
        started = time.perf_counter()
        summed: list[tuple[ScorePlugin, int]] = []
        columned: list[tuple[ScorePlugin, int]] = []
        keys: list[Hashable] = []
        other: list[tuple[ScorePlugin, int]] = []
        for plugin, weight in active:
            key = node_local_key(plugin, pod)
            if key is None:
                other.append((plugin, weight))
            else:
                normalized = normalizes(plugin)
                (columned if normalized else summed).append((plugin, weight))
                keys.append((plugin.name, key, normalized))
        totals: dict[str, int] = {}
        columns: list[dict[str, int]] = [{} for _ in columned]
        if keys:
            memo = self.total_memo
            sid = memo.shape(tuple(keys))
            for n in nodes:
                got = n.memo.get(sid)
                if got is None:
                    got = self._local_entry(state, pod, n, summed, columned)
                    memo.put(n, sid, got)
                totals[n.name] = got[0]
                for column, score in zip(columns, got[1], strict=True):
                    column[n.name] = score
        else:
            totals = dict.fromkeys((n.name for n in nodes), 0)
        for plugin, weight in other:
            columned.append((plugin, weight))
            columns.append({n.name: plugin.score(state, pod, n) for n in nodes})
        for (plugin, weight), scores in zip(columned, columns, strict=True):
            plugin.normalize_score(state, pod, scores)
            _check_scores(plugin.name, scores)
            for name in totals:
                totals[name] += weight * scores[name]
        self._point("Score", started)
        return totals

    @staticmethod
    def _local_entry(
        state: CycleState,
        pod: PodInfo,
        node: NodeInfo,
        summed: Sequence[tuple[ScorePlugin, int]],
        columned: Sequence[tuple[ScorePlugin, int]],
    ) -> tuple[int, tuple[int, ...]]:
        """What :meth:`score_totals` keeps on ``node``: the weighted sum of the ``summed``
        plugins' scores (each checked within ``0..MAX_NODE_SCORE``: nothing normalizes
        them) and the raw scores of the ``columned`` ones."""
        total = 0
        for plugin, weight in summed:
            score = plugin.score(state, pod, node)
            _check_scores(plugin.name, {node.name: score})
            total += weight * score
        return total, tuple(p.score(state, pod, node) for p, _ in columned)

    def _node_local_scores(
        self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo], plugins: Sequence[ScorePlugin]
    ) -> dict[str, dict[str, int]]:
        """The raw scores (before NormalizeScore) of the node-local ``plugins`` for ``pod``:
        plugin name → node name → score, reused per node object and pod shape
        (:attr:`score_memo`); plugins that are not node-local for ``pod`` are absent."""
        keyed = [(p, node_local_key(p, pod)) for p in plugins] if self.memoize and nodes else []
        local = [p for p, key in keyed if key is not None]
        if not local:
            return {}
        memo = self.score_memo
        sid = memo.shape(tuple((p.name, key) for p, key in keyed if key is not None))
        columns: list[dict[str, int]] = [{} for _ in local]
        for n in nodes:
            got = n.memo.get(sid)
            if got is None:
                got = tuple(p.score(state, pod, n) for p in local)
                memo.put(n, sid, got)
            for column, score in zip(columns, got, strict=True):
                column[n.name] = score
        return {p.name: column for p, column in zip(local, columns, strict=True)}

    def total_scores(
        self, per_plugin: dict[str, dict[str, int]], nodes: Sequence[NodeInfo]
    ) -> dict[str, int]:
        """Weighted sum of :meth:`run_scores` output per node."""
        weights = {p.name: w for p, w in self.score}
        totals = dict.fromkeys((n.name for n in nodes), 0)
        for plugin, scores in per_plugin.items():
            weight = weights[plugin]
            for name in totals:
                totals[name] += weight * scores[name]
        return totals

    async def run_reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reserve plugins in order; on failure unreserve all of them and return the failure."""
        started = time.perf_counter()
        for plugin in self.reserve:
            t0 = time.perf_counter()
            try:
                st = await plugin.reserve(state, pod, node)
            except Exception as e:
                log.exception("Reserve plugin %s failed for %s", plugin.name, pod.key)
                st = Status.error(f"{plugin.name}: {e}", plugin=plugin.name)
            self._plugin(state, plugin.name, "Reserve", t0, st)
            if not st.is_success():
                self._point("Reserve", started, st)
                await self.run_unreserve(state, pod, node)
                return st
        self._point("Reserve", started)
        return Status.success()

    async def run_unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        started = time.perf_counter()
        for plugin in reversed(self.reserve):
            t0 = time.perf_counter()
            await plugin.unreserve(state, pod, node)
            self._plugin(state, plugin.name, "Unreserve", t0, None)
        self._point("Unreserve", started)

    def run_permit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Every Permit plugin (upstream ``RunPermitPlugins``): the first rejection is returned
        (naming its plugin); if some plugins said Wait and none rejected, the pod is held in
        :attr:`waiting_pods` for them (each with its timeout, at most
        :data:`MAX_PERMIT_TIMEOUT`) and Wait is returned; the binding cycle then awaits
        :meth:`wait_on_permit`. A plugin that raises is an Error naming it (upstream's
        ``AsStatus``), never an exception: the cycle then unreserves and forgets the pod like
        any Permit failure."""
        started = time.perf_counter()
        timeouts: dict[str, float] = {}
        for plugin in self.permit:
            t0 = time.perf_counter()
            try:
                st, timeout = plugin.permit(state, pod, node)
            except Exception as e:
                log.exception("Permit plugin %s failed for %s", plugin.name, pod.key)
                st, timeout = (
                    Status.error(f"running Permit plugin {plugin.name}: {e!r}", plugin=plugin.name),
                    0.0,
                )
            self._plugin(state, plugin.name, "Permit", t0, st)
            if st.code is Code.WAIT:
                timeouts[plugin.name] = min(max(timeout, 0.001), MAX_PERMIT_TIMEOUT)
                continue
            if not st.is_success():
                st = st if st.plugin else Status(st.code, st.reasons, plugin.name)
                self._point("Permit", started, st)
                return st
        if timeouts:
            self.waiting_pods.add(pod, node.name, timeouts)
            st = Status.wait(plugin=", ".join(timeouts))
            self._point("Permit", started, st)
            return st
        self._point("Permit", started)
        return Status.success()

    async def wait_on_permit(self, pod: PodInfo, state: CycleState | None = None) -> Status:
        """Until the Permit plugins that held ``pod`` allow it (success) or one rejects it or
        times out (Unschedulable naming that plugin; a timeout is also written in ``state``
        under :data:`~ipscheduler.framework.interface.PERMIT_TIMED_OUT` for Unreserve);
        success at once for a pod not held (upstream ``WaitOnPermit``)."""
        waiting = self.waiting_pods.get(pod.uid)
        if waiting is None:
            return Status.success()
        try:
            st = await waiting.wait()
        finally:
            self.waiting_pods.remove(pod.uid)
        if waiting.timed_out and state is not None:
            state.write(PERMIT_TIMED_OUT, waiting.timed_out)
        return st

    def room_for(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Room | None:
        """The least room among the :class:`~ipscheduler.framework.interface.CapacityAware`
        Filter plugins (see :meth:`Handle.room_for <ipscheduler.framework.interface.Handle.room_for>`)."""
        least: Room | None = None
        for plugin in self.filter:
            if isinstance(plugin, CapacityAware):
                n = plugin.room(pod, nodes)
                if n is not None and (least is None or n < least.pods):
                    least = Room(n, plugin.name, plugin.room_resource)
        return least

    # -- binding cycle ---------------------------------------------------
    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        started = time.perf_counter()
        for plugin in self.pre_bind:
            t0 = time.perf_counter()
            st = await plugin.pre_bind(state, pod, node)
            self._plugin(state, plugin.name, "PreBind", t0, st)
            if not st.is_success():
                self._point("PreBind", started, st)
                return st
        self._point("PreBind", started)
        return Status.success()

    async def run_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        started = time.perf_counter()
        for plugin in self.bind:
            t0 = time.perf_counter()
            st = await plugin.bind(state, pod, node)
            self._plugin(state, plugin.name, "Bind", t0, st)
            if st.code is not Code.SKIP:
                self._point("Bind", started, st)
                return st
        st = Status.error("no bind plugin handled the pod")
        self._point("Bind", started, st)
        return st

    async def run_post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        started = time.perf_counter()
        for plugin in self.post_bind:
            t0 = time.perf_counter()
            await plugin.post_bind(state, pod, node)
            self._plugin(state, plugin.name, "PostBind", t0, None)
        self._point("PostBind", started)

    async def run_binding_cycle(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, binding: Callable[[], object] | None = None
    ) -> Status:
        """PreBind → Bind → PostBind for a pod reserved (and permitted) on ``node``: the one
        binding cycle of the scheduler (upstream ``bindingCycle``,
        ``pkg/scheduler/schedule_one.go``) and of the extender's ``bind`` verb. ``binding()``
        is called just before Bind (the Binding may land from then on). Returns the failing
        PreBind or Bind status, after which the caller's failure handler unreserves; raises
        what a plugin raises."""
        st = await self.run_pre_bind(state, pod, node)
        if not st.is_success():
            return st
        if binding is not None:
            binding()
        st = await self.run_bind(state, pod, node)
        if st.is_success():
            await self.run_post_bind(state, pod, node)
        return st


def _check_scores(plugin: str, scores: Mapping[str, int]) -> None:
    """Raise ValueError naming ``plugin`` and a node when a score is outside ``0..MAX_NODE_SCORE``
    (upstream ``RunScorePlugins``: "plugin %q returns an invalid score %v")."""
    if scores and not 0 <= min(scores.values()) <= max(scores.values()) <= MAX_NODE_SCORE:
        name, s = next((k, v) for k, v in scores.items() if not 0 <= v <= MAX_NODE_SCORE)
        raise ValueError(f"plugin {plugin} gave node {name} score {s} outside 0..100")
