"""The in-tree plugins by name (``pkg/scheduler/framework/plugins/registry.go``, ``NewInTreeRegistry``).

Out-of-tree plugins (UnderlayIP) are merged into it by the command that wires
the scheduler (:func:`ipscheduler.framework.registry.with_plugin`).
"""

from __future__ import annotations

from ipscheduler.framework.registry import Registry
from ipscheduler.plugins import (
    defaultbinder,
    defaultpreemption,
    interpodaffinity,
    nodeaffinity,
    nodename,
    nodeports,
    nodeready,
    noderesources,
    nodeunschedulable,
    nodevolumelimits,
    podtopologyspread,
    queuesort,
    tainttoleration,
    volumebinding,
    volumerestrictions,
    volumezone,
)


def new_in_tree_registry() -> Registry:
    """A fresh registry of every in-tree plugin (with its args model where it has one)."""
    registry = Registry()
    registry.register(queuesort.NAME, queuesort.new)
    registry.register(nodeready.NAME, nodeready.new)
    registry.register(nodeunschedulable.NAME, nodeunschedulable.new)
    registry.register(nodename.NAME, nodename.new)
    registry.register(tainttoleration.NAME, tainttoleration.new)
    registry.register(nodeaffinity.NAME, nodeaffinity.new)
    registry.register(nodeports.NAME, nodeports.new)
    registry.register(noderesources.NAME, noderesources.new)
    registry.register(
        noderesources.LEAST_ALLOCATED_NAME, noderesources.new_least_allocated, noderesources.ResourcesArgs
    )
    registry.register(
        noderesources.BALANCED_ALLOCATION_NAME,
        noderesources.new_balanced_allocation,
        noderesources.ResourcesArgs,
    )
    registry.register(volumerestrictions.NAME, volumerestrictions.new)
    registry.register(nodevolumelimits.NAME, nodevolumelimits.new)
    registry.register(volumebinding.NAME, volumebinding.new, volumebinding.VolumeBindingArgs)
    registry.register(volumezone.NAME, volumezone.new)
    registry.register(podtopologyspread.NAME, podtopologyspread.new)
    registry.register(interpodaffinity.NAME, interpodaffinity.new, interpodaffinity.InterPodAffinityArgs)
    registry.register(defaultbinder.NAME, defaultbinder.new)
    registry.register(defaultpreemption.NAME, defaultpreemption.new, defaultpreemption.DefaultPreemptionArgs)
    return registry
