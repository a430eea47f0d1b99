"""The underlay addresses as an extended resource on the nodes, for kube-scheduler to count.

In extender mode (or scheduler mode with ``--publish-resource``) every node with a
NodeIPPool carries ``<resource>: <the sum of its pools' capacity>`` (default
``ipscheduler.io/underlay-ip``) in ``status.capacity`` and ``status.allocatable``, as
AWS's VPC resource controller publishes ``vpc.amazonaws.com/PrivateIPv4Address``: the
kubelet then admits a pod that requests it only on such a node, and kube-scheduler
counts the pods that request it against it. A node whose last pool is gone loses it.

:class:`ResourcePublisher` compares what each node shows (the node informer's view)
with what its pools say (the pool cache), and patches the difference; it runs whenever
a pool or node event marks it dirty (debounced), and once at start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ipscheduler.framework.types import NodeInfo
from ipscheduler.kube.client import KubeApi
from ipscheduler.kube.informer import ObjectStore
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.pool import PoolView

log = logging.getLogger(__name__)

RESOURCE = "ipscheduler.io/underlay-ip"
"""The extended resource pods request to be placed by kube-scheduler with our addresses."""


def desired(pools: Mapping[str, PoolView], capacity: Mapping[str, int]) -> dict[str, int]:
    """Node name → the sum of its pools' capacity (``capacity``: pool name → its usable
    capacity), for the nodes that have a pool. Pools being deleted do not count."""
    out: dict[str, int] = {}
    for name, pool in pools.items():
        if pool.deleting or not pool.node_name:
            continue
        out[pool.node_name] = out.get(pool.node_name, 0) + capacity.get(name, 0)
    return out


def changes(want: Mapping[str, int], nodes: Mapping[str, NodeInfo], resource: str) -> dict[str, int | None]:
    """Node name → the quantity to set (None: remove) where a node that exists shows
    otherwise than ``want``."""
    out: dict[str, int | None] = {}
    for name, node in nodes.items():
        shown = node.allocatable.get(resource)
        target = want.get(name)
        if target is None:
            if shown is not None:
                out[name] = None
        elif shown is None or shown != target:
            out[name] = target
    return out


class ResourcePublisher:
    """Keeps the nodes' ``resource`` equal to their pools' capacity (see the module doc)."""

    def __init__(self, api: KubeApi, cache: PoolCache, resource: str = RESOURCE) -> None:
        self.api = api
        self.cache = cache
        self.resource = resource
        self._dirty = asyncio.Event()
        self._dirty.set()

    def subscribe(self, nodes: ObjectStore[NodeInfo], pools: ObjectStore[PoolView]) -> None:
        """Look again whenever a node or a pool changes."""
        nodes.subscribe(self._on_event)
        pools.subscribe(self._on_event)

    def _on_event(self, *args: Any) -> None:
        self._dirty.set()

    def pending(self) -> dict[str, int | None]:
        """What :meth:`run` would patch now."""
        pools = self.cache.pools()
        capacity = {name: pool.capacity(self.cache.context(pool).blocked) for name, pool in pools.items()}
        return changes(desired(pools, capacity), self.cache.node_cache.nodes(), self.resource)

    async def run(self, ready: asyncio.Event) -> None:
        """The publisher task: once ``ready`` (the caches hold the cluster), patch what
        differs whenever something changed (debounced 0.2 s); a failed patch is retried
        after a pause."""
        await ready.wait()
        while True:
            await self._dirty.wait()
            await asyncio.sleep(0.2)
            self._dirty.clear()
            for node, quantity in sorted(self.pending().items()):
                try:
                    await self.api.set_node_extended_resource(node, self.resource, quantity)
                    log.info(
                        "node %s: %s %s",
                        node,
                        self.resource,
                        "removed (no NodeIPPool)" if quantity is None else f"= {quantity}",
                    )
                except Exception as e:
                    log.warning("publishing %s on node %s failed: %r; retrying", self.resource, node, e)
                    self._dirty.set()
                    await asyncio.sleep(1.0)
