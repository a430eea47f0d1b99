"""Building a profile's framework: ``NewFramework``.

As ``pkg/scheduler/framework/runtime/framework.go``'s ``NewFramework``:
:func:`new_framework` makes a :class:`~ipscheduler.framework.runtime.Framework` with the
profile's client, event recorder and storage listers, hands it to every plugin factory as
its :class:`~ipscheduler.framework.interface.Handle`, and fills its extension points from a
registry and the profile configuration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    Client,
    EventRecorder,
    MetricsRecorder,
    Plugin,
    QueuedPodInfo,
)
from ipscheduler.framework.registry import Registry
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.volumes import MapVolumeListers, VolumeListers


class _QueueSortToCome:
    """The queue sort of a framework whose factories are still running (:func:`new_framework`
    sets the profile's before it returns; nothing sorts by this one)."""

    name = "QueueSortToCome"

    def less(self, a: QueuedPodInfo, b: QueuedPodInfo) -> bool:
        raise RuntimeError("the framework is still being built: it has no QueueSort plugin yet")


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
    defaults: Plugins | None = None,
    percentage_of_nodes_to_score: int | None = None,
    *,
    client: Client | None = None,
    events: EventRecorder | None = None,
    volumes: VolumeListers | None = None,
    metrics: MetricsRecorder | None = None,
) -> Framework:
    """The framework of ``profile``: every extension point filled with plugins made by
    ``registry``, timed into ``metrics`` (None: not timed).

    As upstream ``NewFramework`` (``pkg/scheduler/framework/runtime/framework.go``): the
    :class:`~ipscheduler.framework.runtime.Framework` is made first, with the profile's
    ``client`` (the API calls plugins make; None: none, ``explain`` and tests), ``events``
    (the event recorder) and ``volumes`` (the storage listers; None: empty ones), and it is
    the :class:`~ipscheduler.framework.interface.Handle` every plugin factory gets, whole
    from then on (nothing is bound to it later). Each point's plugins are ``defaults``
    merged with the profile's set (:func:`~ipscheduler.framework.config.merge_plugin_set`);
    a plugin is made once, with its ``pluginConfig`` args, and shared by all its points,
    which are filled in once every plugin is made (upstream's ``updatePluginList``). A
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
    framework = Framework(
        scheduler_name=profile.scheduler_name,
        queue_sort=_QueueSortToCome(),
        percentage_of_nodes_to_score=(
            profile.percentage_of_nodes_to_score
            if profile.percentage_of_nodes_to_score is not None
            else percentage_of_nodes_to_score
        ),
        metrics_recorder=metrics,
        client=client,
        recorder=events,
        volumes=volumes if volumes is not None else MapVolumeListers(),
    )
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
                plugin = made[ref.name] = registry.new_plugin(ref.name, args.get(ref.name), framework)
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
    framework.queue_sort = queue_sort[0]
    framework.pre_filter = with_companions("preFilter", [*filters, *(p for p, _ in scores)])
    framework.filter = filters
    framework.post_filter = at("postFilter")
    framework.pre_score = with_companions("preScore", [p for p, _ in scores])
    framework.score = scores
    framework.reserve = at("reserve")
    framework.permit = at("permit")
    framework.pre_bind = at("preBind")
    framework.bind = binders
    framework.post_bind = at("postBind")
    return framework
