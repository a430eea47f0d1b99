"""The default profile: which plugins run where (``pkg/scheduler/framework/plugins/registry.go``)."""

from __future__ import annotations

from ipscheduler.api import KubeApi, PoolWriter
from ipscheduler.cache import ClusterCache
from ipscheduler.plugins.defaultbinder import DefaultBinder
from ipscheduler.plugins.nodeaffinity import NodeAffinity
from ipscheduler.plugins.nodeready import NodeReady
from ipscheduler.plugins.nodeunschedulable import NodeUnschedulable
from ipscheduler.plugins.queuesort import PrioritySort
from ipscheduler.plugins.tainttoleration import TaintToleration
from ipscheduler.plugins.underlayip import Strategy, UnderlayIP
from ipscheduler.profile import Profile


def default_profile(
    scheduler_name: str, cache: ClusterCache, api: KubeApi, writer: PoolWriter, strategy: Strategy = "spread"
) -> Profile:
    """Filters in kube-scheduler's order (cheap, node-only checks first), then UnderlayIP.

    Score weights: UnderlayIP 2 (the product's purpose), TaintToleration
    and NodeAffinity 1 each (kube-scheduler's defaults for those two are 3
    and 2; ours favours the address strategy).
    """
    underlay = UnderlayIP(cache, writer, strategy, api)
    taints = TaintToleration()
    affinity = NodeAffinity()
    return Profile(
        scheduler_name=scheduler_name,
        queue_sort=PrioritySort(),
        pre_filter=[underlay],
        filter=[NodeReady(), NodeUnschedulable(), affinity, taints, underlay],
        score=[(underlay, 2), (taints, 1), (affinity, 1)],
        reserve=[underlay],
        pre_bind=[underlay],
        bind=[DefaultBinder(api)],
        post_bind=[underlay],
    )
