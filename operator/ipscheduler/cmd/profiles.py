"""Profiles: the in-tree registry, UnderlayIP's out-of-tree registration, the
default plugins, and the one function that builds a profile from them.

UnderlayIP joins the in-tree plugins as an out-of-tree plugin joins
kube-scheduler: ``app.WithPlugin(Name, New)`` (``cmd/kube-scheduler/app/server.go``),
here :func:`with_underlay_ip`, whose factory closes over what the plugin needs
(pool cache, writer, API, replica identity, ``--reserved-ttl``; ``--ip-strategy``
and ``--multus-network`` as defaults its ``pluginConfig`` overrides). NetworkTraffic
joins the same way (:func:`with_network_traffic`: its factory makes the Prometheus reader
its args describe), in every registry but off by default.

The default plugins per extension point (:func:`default_plugins`) are
written as upstream's ``pkg/scheduler/apis/config/v1/default_plugins.go``.
Filters run in kube-scheduler's default order (cheap node-only checks first,
then resources, then pod-to-pod constraints), with our NodeReady first and
UnderlayIP last. Score weights are kube-scheduler's defaults; UnderlayIP
(the address strategy) weighs 2. ``run`` and ``explain`` both build their
framework with :func:`build_profile`, so both honour ``--config``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ipscheduler.coscheduling import plugin as coscheduling
from ipscheduler.coscheduling.groups import GroupIndex
from ipscheduler.coscheduling.plugin import Coscheduling, CoschedulingArgs
from ipscheduler.framework.building import new_framework
from ipscheduler.framework.config import ConfigError, Plugins, ProfileConfig, SchedulerConfiguration, load
from ipscheduler.framework.interface import Client, Handle, MetricsRecorder
from ipscheduler.framework.registry import PluginFactory, Registry, with_plugin
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.volumes import VolumeListers
from ipscheduler.kube.client import KubeApi
from ipscheduler.kube.events import EventRecorder
from ipscheduler.kube.prometheus import PrometheusReader
from ipscheduler.plugins import defaultbinder, defaultpreemption, networktraffic, queuesort, volumebinding
from ipscheduler.plugins.registry import new_in_tree_registry
from ipscheduler.underlayip import plugin as underlay
from ipscheduler.underlayip.args import Strategy, UnderlayIPArgs
from ipscheduler.underlayip.plugin import UnderlayIP, UnderlayIPDeps

FILTER_PLUGINS: tuple[str, ...] = (
    "NodeReady",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "UnderlayIP",
)
"""Default filters, in the order they run."""

SCORE_WEIGHTS: dict[str, int] = {
    "UnderlayIP": 2,
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesLeastAllocated": 1,
    "NodeResourcesBalancedAllocation": 1,
}
"""Default score plugins and weights."""

SCORE_PLUGINS: tuple[str, ...] = tuple(SCORE_WEIGHTS)

UNDISABLEABLE: dict[str, str] = {
    "filter": "the UnderlayIP filter cannot be disabled",
    "reserve": "the UnderlayIP reserve plugin cannot be disabled",
    "preBind": "the UnderlayIP preBind plugin cannot be disabled",
}
"""Extension points whose UnderlayIP plugin a configuration may not disable (it is what
makes the scheduler address-aware), with the refusal."""


def default_plugins() -> Plugins:
    """The default profile's plugins per extension point (upstream ``getDefaultPlugins``).

    Coscheduling (PodGroups) sorts the queue, as scheduler-plugins' coscheduling
    profile has it (PrioritySort's order for pods outside a group), and runs at
    PreFilter, PostFilter (after DefaultPreemption, as a profile that enables it gets it
    in kube-scheduler), Permit and Reserve; a pod without the group label passes it
    untouched. VolumeBinding reserves and pre-binds first (upstream's MultiPoint order), so
    a pod's claims are bound before its address is written. Besides it, PreFilter and
    PreScore default to the Filter and Score plugins that implement them (see
    :func:`~ipscheduler.framework.building.new_framework`).
    """
    return Plugins.model_validate(
        {
            "queueSort": {"enabled": [{"name": coscheduling.NAME}]},
            "preFilter": {"enabled": [{"name": coscheduling.NAME}]},
            "filter": {"enabled": [{"name": n} for n in FILTER_PLUGINS]},
            "postFilter": {"enabled": [{"name": defaultpreemption.NAME}, {"name": coscheduling.NAME}]},
            "score": {"enabled": [{"name": n, "weight": w} for n, w in SCORE_WEIGHTS.items()]},
            "reserve": {
                "enabled": [
                    {"name": volumebinding.NAME},
                    {"name": underlay.NAME},
                    {"name": coscheduling.NAME},
                ]
            },
            "permit": {"enabled": [{"name": coscheduling.NAME}]},
            "preBind": {"enabled": [{"name": volumebinding.NAME}, {"name": underlay.NAME}]},
            "bind": {"enabled": [{"name": defaultbinder.NAME}]},
            "postBind": {"enabled": [{"name": underlay.NAME}]},
        }
    )


def _underlay_ip(new: PluginFactory) -> Registry:
    return with_plugin(underlay.NAME, new, UnderlayIPArgs)


def with_underlay_ip(
    deps: UnderlayIPDeps, strategy: Strategy | None = None, multus_network: str | None = None
) -> Registry:
    """UnderlayIP's out-of-tree registration (upstream ``app.WithPlugin(Name, New)``).

    Its factory binds ``deps`` (the pool cache and writer, Unreserve's API client and the
    rest: :class:`~ipscheduler.underlayip.plugin.UnderlayIPDeps`); ``strategy``
    (``--ip-strategy``) and ``multus_network`` (``--multus-network``) apply unless the
    profile's pluginConfig sets UnderlayIP's ``strategy`` / ``multusNetwork``.
    """

    def new(args: UnderlayIPArgs, handle: Handle) -> UnderlayIP:
        return underlay.new(args.defaulted(strategy, multus_network), handle, deps)

    return _underlay_ip(new)


def with_coscheduling(groups: GroupIndex) -> Registry:
    """Coscheduling's out-of-tree registration: its factory binds the PodGroup index (fed by
    the PodGroup informers); its PodGroup events go through the handle's recorder."""

    def new(args: CoschedulingArgs | None, handle: Handle) -> Coscheduling:
        return coscheduling.new(args, handle, groups)

    return with_plugin(coscheduling.NAME, new, CoschedulingArgs)


def network_traffic_reader(
    config: SchedulerConfiguration, on_failure: Callable[[], object] = lambda: None
) -> PrometheusReader | None:
    """The Prometheus reader NetworkTraffic's ``pluginConfig`` args in ``config`` describe
    (``on_failure()``: called once per failed query), None when the profile has no args for
    it (it cannot be enabled without them: ``prometheusAddress`` is required). The one
    place the reader is made: the wiring runs it when the profile scores with NetworkTraffic.
    Raises ValueError for invalid args (a checked configuration has none)."""
    raw = config.profile.plugin_args().get(networktraffic.NAME)
    if raw is None:
        return None
    args = networktraffic.NetworkTrafficArgs.model_validate(raw)
    return PrometheusReader(
        args.prometheus_address,
        args.promql(),
        args.node_label,
        args.interval,
        args.query_timeout,
        on_failure=on_failure,
    )


def with_network_traffic(reader: PrometheusReader | None) -> Registry:
    """NetworkTraffic's registration (out-of-tree style: the plugin imports only the
    framework): its factory hands the plugin ``reader`` (:func:`network_traffic_reader`).
    Making the plugin without one raises ValueError."""

    def new(args: networktraffic.NetworkTrafficArgs, handle: Handle) -> networktraffic.NetworkTraffic:
        if reader is None:
            raise ValueError("NetworkTraffic needs its Prometheus reader (its pluginConfig args)")
        return networktraffic.new(args, handle, reader)

    return with_plugin(networktraffic.NAME, new, networktraffic.NetworkTrafficArgs)


def scores_with_network_traffic(profile: Framework) -> bool:
    """Whether ``profile`` scores with NetworkTraffic (then its reader must run)."""
    return any(plugin.name == networktraffic.NAME for plugin, _ in profile.score)


def plugin_registry(
    out_of_tree: Registry,
    groups: GroupIndex | None = None,
    traffic: PrometheusReader | None = None,
) -> Registry:
    """The in-tree registry with NetworkTraffic (over ``traffic``), ``out_of_tree`` and
    Coscheduling (over ``groups``, a fresh index when None) merged in. Raises ValueError on
    a name two of them have."""
    registry = new_in_tree_registry()
    registry.merge(with_network_traffic(traffic))
    registry.merge(out_of_tree)
    registry.merge(with_coscheduling(groups if groups is not None else GroupIndex()))
    return registry


def _unwired(args: Any, handle: Handle) -> UnderlayIP:
    raise RuntimeError("UnderlayIP needs its dependencies: register it with with_underlay_ip()")


def config_registry() -> Registry:
    """The registry a configuration file is checked against (names and args). UnderlayIP is
    in it with its args model, but cannot be made from it."""
    return plugin_registry(_underlay_ip(_unwired))


def load_config(path: str | Path) -> SchedulerConfiguration:
    """``--config``: read and validate the file against :func:`config_registry`, refusing a
    profile that disables UnderlayIP where it may not be (:data:`UNDISABLEABLE`). Raises
    :class:`~ipscheduler.framework.config.ConfigError` naming the offending field."""
    config = load(path, config_registry())
    refusal = underlay_ip_refusal(config)
    if refusal is not None:
        raise ConfigError(f"{path}: profiles[0].plugins: {refusal}")
    return config


def underlay_ip_refusal(config: SchedulerConfiguration) -> str | None:
    """Why ``config``'s profile may not run (it disables UnderlayIP at a point of
    :data:`UNDISABLEABLE`, by name or with ``*``), or None."""
    plugins = config.profile.plugins
    for point, refusal in UNDISABLEABLE.items():
        off = {r.name for r in plugins.point(point).disabled}
        if underlay.NAME in off or "*" in off:
            return refusal
    return None


def new_profile(
    registry: Registry,
    config: SchedulerConfiguration,
    *,
    client: Client | None = None,
    events: EventRecorder | None = None,
    volumes: VolumeListers | None = None,
    metrics: MetricsRecorder | None = None,
) -> Framework:
    """The framework of ``config``'s profile, from ``registry`` over :func:`default_plugins`,
    the handle of its plugins with ``client``, ``events`` and ``volumes``, timed into
    ``metrics`` (None: not timed) (:func:`~ipscheduler.framework.building.new_framework`).

    Raises ValueError when the profile disables UnderlayIP at a point of
    :data:`UNDISABLEABLE` (even with ``*``), and whatever
    :func:`~ipscheduler.framework.building.new_framework` raises.
    """
    refusal = underlay_ip_refusal(config)
    if refusal is not None:
        raise ValueError(refusal)
    return new_framework(
        registry,
        config.profile,
        default_plugins(),
        config.percentage_of_nodes_to_score,
        client=client,
        events=events,
        volumes=volumes,
        metrics=metrics,
    )


def build_profile(
    deps: UnderlayIPDeps,
    config: SchedulerConfiguration | None = None,
    *,
    api: KubeApi | None = None,
    strategy: Strategy | None = None,
    multus_network: str | None = None,
    groups: GroupIndex | None = None,
    events: EventRecorder | None = None,
    metrics: MetricsRecorder | None = None,
    traffic: PrometheusReader | None = None,
    volumes: VolumeListers | None = None,
) -> Framework:
    """The profile described by ``config`` (None: all defaults): UnderlayIP over ``deps``
    (``strategy``, ``multus_network``: ``--ip-strategy``, ``--multus-network``),
    Coscheduling over ``groups`` (None: an empty index), NetworkTraffic over ``traffic``
    (None: a reader made from the config's args, not run). The framework, its plugins'
    handle, gives them ``api`` as their client (DefaultBinder binds through it; None only
    where nothing binds: explain, tests), ``events`` (the event recorder) and ``volumes``
    (the storage listers the volume plugins read; None: empty ones, where every claim is
    missing); it is timed into ``metrics``.

    Raises ValueError as :func:`new_profile` does.
    """
    config = config or SchedulerConfiguration.defaults()
    traffic = traffic if traffic is not None else network_traffic_reader(config)
    registry = plugin_registry(with_underlay_ip(deps, strategy, multus_network), groups, traffic)
    return new_profile(registry, config, client=api, events=events, volumes=volumes, metrics=metrics)


EXTENDER_PLUGINS = Plugins.model_validate(
    {
        "queueSort": {"enabled": [{"name": queuesort.NAME}]},
        **{point: {"enabled": [{"name": underlay.NAME}]} for point in ("preFilter", "filter", "reserve")},
        "score": {"enabled": [{"name": underlay.NAME, "weight": 1}]},
        "preBind": {"enabled": [{"name": underlay.NAME}]},
        "bind": {"enabled": [{"name": defaultbinder.NAME}]},
        "postBind": {"enabled": [{"name": underlay.NAME}]},
    }
)
"""The extender's plugins: UnderlayIP at PreFilter, Filter, Score, Reserve, PreBind and
PostBind, DefaultBinder at Bind (kube-scheduler ran every other plugin before it calls the
extender)."""


def extender_profile(
    deps: UnderlayIPDeps,
    api: KubeApi,
    strategy: Strategy | None = None,
    multus_network: str | None = None,
    scheduler_name: str = "ip-scheduler",
    events: EventRecorder | None = None,
) -> Framework:
    """The profile the extender verbs run (``ipscheduler extender``): :data:`EXTENDER_PLUGINS`
    built by :func:`~ipscheduler.framework.building.new_framework` as every profile is, its
    handle (the framework) giving ``api`` as the client (DefaultBinder binds through it) and
    ``events``."""
    registry = with_underlay_ip(deps, strategy, multus_network)
    registry.merge(new_in_tree_registry())
    profile = ProfileConfig.model_validate({"schedulerName": scheduler_name})
    return new_framework(registry, profile, EXTENDER_PLUGINS, client=api, events=events)
