"""Building a profile's framework: the plugins' handle and ``NewFramework``.

As ``pkg/scheduler/framework/runtime/framework.go``'s ``NewFramework``:
:func:`new_framework` fills every extension point of a
:class:`~ipscheduler.framework.runtime.Framework` from a registry and the profile
configuration; :class:`PluginHandle` is what every plugin factory gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ipscheduler.framework import interface
from ipscheduler.framework.config import (
    EXTENSION_POINTS,
    PluginRef,
    Plugins,
    PluginSet,
    ProfileConfig,
    merge_plugin_set,
)
from ipscheduler.framework.interface import (
    Binder,
    CycleState,
    EventRecorder,
    Handle,
    MetricsRecorder,
    Plugin,
    PreemptionMetrics,
    Room,
    Status,
)
from ipscheduler.framework.registry import Registry
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.framework.volumes import MapVolumeListers, VolumeListers
from ipscheduler.framework.waiting import WaitingPods


@dataclass
class PluginHandle:
    """The :class:`~ipscheduler.framework.interface.Handle` plugin factories get: one per
    profile (:func:`new_framework` points it at the framework it builds, whose
    :attr:`Framework.waiting_pods` is this handle's; ``volumes``: the storage listers the
    volume plugins read)."""

    binder: Binder
    waiting_pods: WaitingPods = field(default_factory=WaitingPods)
    framework: Framework | None = field(default=None, repr=False)
    recorder: EventRecorder | None = None
    client: Any = None
    volumes: VolumeListers = field(default_factory=MapVolumeListers)
    """The storage objects' listers (none by default: every claim is then not found)."""

    def activate(self, uids: set[str]) -> None:
        if self.framework is not None and self.framework.pod_activator is not None:
            self.framework.pod_activator.activate(uids)

    def room_for(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Room | None:
        return self.framework.room_for(pod, nodes) if self.framework is not None else None

    @property
    def metrics(self) -> PreemptionMetrics | None:
        recorder = self.framework.recorder if self.framework is not None else None
        return recorder if isinstance(recorder, PreemptionMetrics) else None

    def _framework(self) -> Framework:
        if self.framework is None:
            raise RuntimeError("the handle is not attached to a framework yet")
        return self.framework

    def snapshot(self) -> Mapping[str, NodeInfo]:
        return self.framework.nodes if self.framework is not None else {}

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        return self.framework.nominated_pods_for_node(node) if self.framework is not None else []

    def run_filters_with_nominated_pods(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        return self._framework().run_filters_with_nominated_pods(state, pod, node)

    def run_pre_filter_extension_add_pod(
        self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo
    ) -> Status:
        return self._framework().run_pre_filter_extension_add_pod(state, pod, pod_to_add, node)

    def run_pre_filter_extension_remove_pod(
        self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo
    ) -> Status:
        return self._framework().run_pre_filter_extension_remove_pod(state, pod, pod_to_remove, node)


_PROTOCOLS: dict[str, type] = {
    "queueSort": interface.QueueSortPlugin,
    "preFilter": interface.PreFilterPlugin,
    "filter": interface.FilterPlugin,
    "postFilter": interface.PostFilterPlugin,
    "preScore": interface.PreScorePlugin,
    "score": interface.ScorePlugin,
    "reserve": interface.ReservePlugin,
    "permit": interface.PermitPlugin,
    "preBind": interface.PreBindPlugin,
    "bind": interface.BindPlugin,
    "postBind": interface.PostBindPlugin,
}
assert tuple(_PROTOCOLS) == EXTENSION_POINTS


def new_framework(
    registry: Registry,
    profile: ProfileConfig,
    handle: Handle,
    defaults: Plugins | None = None,
    percentage_of_nodes_to_score: int | None = None,
    recorder: MetricsRecorder | None = None,
) -> Framework:
    """The framework of ``profile``: every extension point filled with plugins made by
    ``registry``, timed into ``recorder`` (None: not timed).

    As upstream ``NewFramework`` (``pkg/scheduler/framework/runtime/framework.go``):
    each point's plugins are ``defaults`` merged with the profile's set
    (:func:`~ipscheduler.framework.config.merge_plugin_set`); a plugin is made once,
    with its ``pluginConfig`` args and ``handle`` (a
    :class:`~ipscheduler.framework.interface.Handle`), and shared by all its points. A
    score plugin's weight defaults to its weight in ``defaults``, else 1; weight 0
    leaves it out. The profile's ``percentageOfNodesToScore``, if set, overrides
    ``percentage_of_nodes_to_score`` (the configuration's), as upstream.

    PreFilter and PreScore have companion defaults (unlike upstream, where
    MultiPoint plays that part): PreFilter runs, besides ``defaults.preFilter``, every
    enabled Filter or Score plugin that implements it, in that order; PreScore every
    enabled Score plugin that implements it. So a plugin disabled at filter loses its
    PreFilter too; the profile's ``preFilter``/``preScore`` sets still override both.

    Raises ValueError for an unknown plugin name (listing the known ones), a plugin
    listed twice at a point, a plugin enabled at a point whose Protocol it does not
    implement, invalid ``pluginConfig`` args, not exactly one QueueSort plugin, or no
    Bind plugin.
    """
    defaults = defaults or Plugins()
    config = profile.plugins
    args = profile.plugin_args()
    for name, raw in args.items():
        registry.validate_args(name, raw)
    made: dict[str, Plugin] = {}

    def enabled(point: str, refs: Sequence[PluginRef]) -> list[Any]:
        out: list[Any] = []
        for ref in refs:
            registry.require(ref.name, point)
            if any(p.name == ref.name for p in out):
                raise ValueError(f"plugin {ref.name!r} is listed twice in {point}")
            plugin = made.get(ref.name)
            if plugin is None:
                plugin = made[ref.name] = registry.new_plugin(ref.name, args.get(ref.name), handle)
            if not isinstance(plugin, _PROTOCOLS[point]):
                raise ValueError(f"plugin {ref.name!r} does not implement {point}")
            out.append(plugin)
        return out

    def at(point: str) -> list[Any]:
        return enabled(point, merge_plugin_set(defaults.point(point), config.point(point)))

    def with_companions(point: str, companions: Sequence[Plugin]) -> list[Any]:
        base = list(defaults.point(point).enabled)
        for plugin in companions:
            if isinstance(plugin, _PROTOCOLS[point]) and all(r.name != plugin.name for r in base):
                base.append(PluginRef(name=plugin.name))
        return enabled(point, merge_plugin_set(PluginSet(enabled=base), config.point(point)))

    queue_sort = at("queueSort")
    if len(queue_sort) != 1:
        raise ValueError(f"queueSort needs exactly one plugin, got {len(queue_sort)}")
    filters = at("filter")
    weights = {r.name: r.weight for r in defaults.score.enabled if r.weight is not None}
    score_refs = merge_plugin_set(defaults.score, config.score)
    scores = [
        (p, w)
        for p, ref in zip(enabled("score", score_refs), score_refs, strict=True)
        if (w := ref.weight if ref.weight is not None else weights.get(ref.name, 1)) > 0
    ]
    binders = at("bind")
    if not binders:
        raise ValueError("at least one bind plugin is needed")
    framework = Framework(
        scheduler_name=profile.scheduler_name,
        queue_sort=cast(interface.QueueSortPlugin, queue_sort[0]),
        pre_filter=with_companions("preFilter", [*filters, *(p for p, _ in scores)]),
        filter=filters,
        post_filter=at("postFilter"),
        pre_score=with_companions("preScore", [p for p, _ in scores]),
        score=scores,
        reserve=at("reserve"),
        permit=at("permit"),
        pre_bind=at("preBind"),
        bind=binders,
        post_bind=at("postBind"),
        percentage_of_nodes_to_score=(
            profile.percentage_of_nodes_to_score
            if profile.percentage_of_nodes_to_score is not None
            else percentage_of_nodes_to_score
        ),
        recorder=recorder,
    )
    if isinstance(handle, PluginHandle):
        handle.framework = framework
        framework.waiting_pods = handle.waiting_pods
    return framework
