"""plugins/registry.new_in_tree_registry: every in-tree plugin under its name, with its args."""

from __future__ import annotations

from ipscheduler.framework.interface import (
    EnqueueExtensions,
    FilterPlugin,
    Handle,
    PermitPlugin,
    PreFilterPlugin,
    ReservePlugin,
)
from ipscheduler.plugins import interpodaffinity, noderesources
from ipscheduler.plugins.registry import new_in_tree_registry
from tests.unit.fakes import handle

HANDLE: Handle = handle()


def test_in_tree_registry_has_no_underlay_ip() -> None:
    assert "UnderlayIP" not in new_in_tree_registry()


IN_TREE = [
    "DefaultBinder",
    "DefaultPreemption",
    "InterPodAffinity",
    "NodeAffinity",
    "NodeName",
    "NodePorts",
    "NodeReady",
    "NodeResourcesBalancedAllocation",
    "NodeResourcesFit",
    "NodeResourcesLeastAllocated",
    "NodeUnschedulable",
    "NodeVolumeLimits",
    "PodTopologySpread",
    "PrioritySort",
    "TaintToleration",
    "VolumeBinding",
    "VolumeRestrictions",
    "VolumeZone",
]


def test_in_tree_registry_makes_every_plugin_under_its_name() -> None:
    r = new_in_tree_registry()
    assert r.names() == IN_TREE
    for name in r:
        assert r.new_plugin(name, None, HANDLE).name == name


def test_in_tree_args_reach_the_plugin() -> None:
    r = new_in_tree_registry()
    ipa = r.new_plugin("InterPodAffinity", {"hardPodAffinityWeight": 7}, HANDLE)
    assert isinstance(ipa, interpodaffinity.InterPodAffinity) and ipa.hard_pod_affinity_weight == 7
    least = r.new_plugin("NodeResourcesLeastAllocated", {"resources": [{"name": "memory"}]}, HANDLE)
    assert isinstance(least, noderesources.NodeResourcesLeastAllocated)
    assert least.resources == {"memory": 1}
    default = r.new_plugin("NodeResourcesBalancedAllocation", None, HANDLE)
    assert isinstance(default, noderesources.NodeResourcesBalancedAllocation)
    assert default.resources == dict(noderesources.DEFAULT_RESOURCES)


def test_every_in_tree_plugin_that_can_reject_registers_events() -> None:
    """A plugin that can reject a pod (PreFilter, Filter, Reserve, Permit) without registrations
    would fall back to the wildcard: every event would move the pods it rejected."""
    r = new_in_tree_registry()
    plugins = [r.new_plugin(name, None, HANDLE) for name in r]
    rejecting = [
        p for p in plugins if isinstance(p, (PreFilterPlugin, FilterPlugin, ReservePlugin, PermitPlugin))
    ]
    assert len(rejecting) == 13, [p.name for p in rejecting]
    for plugin in rejecting:
        assert isinstance(plugin, EnqueueExtensions) and plugin.events_to_register(), plugin.name
