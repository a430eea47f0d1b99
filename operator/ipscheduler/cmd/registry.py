"""Plugin registry and the default profile (``pkg/scheduler/framework/plugins/registry.go``,
``pkg/scheduler/apis/config/v1/default_plugins.go``).

Filters run in kube-scheduler's default order (cheap node-only checks first,
then resources, then pod-to-pod constraints), with our NodeReady first and
UnderlayIP last. Score weights are kube-scheduler's defaults; UnderlayIP
(the address strategy) weighs 2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ipscheduler.backend.cache import ClusterCache
from ipscheduler.framework.interface import (
    BindPlugin,
    FilterPlugin,
    PostBindPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReservePlugin,
    ScorePlugin,
)
from ipscheduler.framework.runtime import Framework
from ipscheduler.kube.client import KubeApi, PoolWriter
from ipscheduler.plugins.defaultbinder import DefaultBinder
from ipscheduler.plugins.interpodaffinity import InterPodAffinity
from ipscheduler.plugins.nodeaffinity import NodeAffinity
from ipscheduler.plugins.nodename import NodeName
from ipscheduler.plugins.nodeports import NodePorts
from ipscheduler.plugins.nodeready import NodeReady
from ipscheduler.plugins.noderesources import (
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeResourcesLeastAllocated,
)
from ipscheduler.plugins.nodeunschedulable import NodeUnschedulable
from ipscheduler.plugins.podtopologyspread import PodTopologySpread
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.plugins.tainttoleration import TaintToleration
from ipscheduler.underlayip.plugin import Strategy, UnderlayIP

if TYPE_CHECKING:
    from ipscheduler.framework.config import SchedulerConfiguration

FILTER_PLUGINS: tuple[str, ...] = (
    "NodeReady",
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
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


def _factories(
    cache: ClusterCache,
    api: KubeApi,
    writer: PoolWriter,
    strategy: Strategy,
    identity: str,
    reserved_ttl: float,
    multus_network: str | None,
) -> dict[str, Callable[[], Any]]:
    return {
        "NodeReady": NodeReady,
        "NodeUnschedulable": NodeUnschedulable,
        "NodeName": NodeName,
        "TaintToleration": TaintToleration,
        "NodeAffinity": NodeAffinity,
        "NodePorts": NodePorts,
        "NodeResourcesFit": NodeResourcesFit,
        "NodeResourcesLeastAllocated": NodeResourcesLeastAllocated,
        "NodeResourcesBalancedAllocation": NodeResourcesBalancedAllocation,
        "PodTopologySpread": PodTopologySpread,
        "InterPodAffinity": InterPodAffinity,
        "UnderlayIP": lambda: UnderlayIP(
            cache, writer, strategy, api, identity, reserved_ttl, multus_network
        ),
    }


def build_profile(
    cache: ClusterCache,
    api: KubeApi,
    writer: PoolWriter,
    config: SchedulerConfiguration | None = None,
    strategy: Strategy | None = None,
    identity: str = "",
    reserved_ttl: float = 60.0,
    multus_network: str | None = None,
) -> Framework:
    """The profile described by ``config`` (None: all defaults).

    ``strategy`` (the ``--ip-strategy`` flag) applies unless the file's
    pluginConfig sets UnderlayIP's strategy. Disabling UnderlayIP's filter is
    refused: it is what makes the scheduler address-aware. ``identity`` and
    ``reserved_ttl`` go to UnderlayIP (who reserved an allocation; when an
    abandoned reservation may be taken over); so does ``multus_network`` (the
    ``--multus-network`` flag) unless the file's pluginConfig sets ``multusNetwork``.
    """
    from ipscheduler.framework.config import SchedulerConfiguration

    cfg = config or SchedulerConfiguration()
    prof = cfg.profile
    chosen: Strategy = cfg.strategy or strategy or "spread"
    network = cfg.multus_network or multus_network
    make = _factories(cache, api, writer, chosen, identity, reserved_ttl, network)
    instances: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in instances:
            instances[name] = make[name]()
        return instances[name]

    off = {r.name for r in prof.plugins.filter.disabled}
    if "UnderlayIP" in off or "*" in off:
        raise ValueError("the UnderlayIP filter cannot be disabled")
    filters = [n for n in FILTER_PLUGINS if n not in off]
    filters += [r.name for r in prof.plugins.filter.enabled if r.name not in filters]

    weights = {} if any(r.name == "*" for r in prof.plugins.score.disabled) else dict(SCORE_WEIGHTS)
    for r in prof.plugins.score.disabled:
        weights.pop(r.name, None)
    for r in prof.plugins.score.enabled:
        weights[r.name] = r.weight if r.weight is not None else SCORE_WEIGHTS.get(r.name, 1)

    filter_objs = [get(n) for n in filters]
    score_objs = [(get(n), w) for n, w in weights.items() if w > 0]
    every = [*filter_objs, *(p for p, _ in score_objs)]
    underlay = get("UnderlayIP")
    pre_filter: list[PreFilterPlugin] = []
    for p in every:
        if isinstance(p, PreFilterPlugin) and p not in pre_filter:
            pre_filter.append(p)
    return Framework(
        scheduler_name=prof.scheduler_name,
        queue_sort=PrioritySort(),
        pre_filter=pre_filter,
        filter=[p for p in filter_objs if isinstance(p, FilterPlugin)],
        pre_score=[p for p, _ in score_objs if isinstance(p, PreScorePlugin)],
        score=[(p, w) for p, w in score_objs if isinstance(p, ScorePlugin)],
        reserve=[underlay] if isinstance(underlay, ReservePlugin) else [],
        pre_bind=[underlay] if isinstance(underlay, PreBindPlugin) else [],
        bind=[b for b in [DefaultBinder(api)] if isinstance(b, BindPlugin)],
        post_bind=[underlay] if isinstance(underlay, PostBindPlugin) else [],
    )


def default_profile(
    scheduler_name: str, cache: ClusterCache, api: KubeApi, writer: PoolWriter, strategy: Strategy = "spread"
) -> Framework:
    """All defaults, for ``scheduler_name`` and the given address strategy."""
    from ipscheduler.framework.config import ProfileConfig, SchedulerConfiguration

    cfg = SchedulerConfiguration(profiles=[ProfileConfig.model_validate({"schedulerName": scheduler_name})])
    return build_profile(cache, api, writer, cfg, strategy)
