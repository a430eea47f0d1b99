"""The underlay addresses as an extended resource on the nodes, for kube-scheduler to count.

In extender mode (or scheduler mode with ``--publish-resource``) every node with a
NodeIPPool carries ``<resource>: <the sum of its pools' capacity>`` (default
``ipscheduler.io/underlay-ip``) in ``status.capacity`` and ``status.allocatable``, as
AWS's VPC resource controller publishes ``vpc.amazonaws.com/PrivateIPv4Address``: the
kubelet then admits a pod that requests it only on such a node, and kube-scheduler
counts the pods that request it against it. A node whose last pool is gone loses it.

kube-scheduler does not watch NodeIPPools, so an address released on a node would not
wake the pods it parked after our filter refused that node: a pod whose retry (on the
ended pod's deletion) came before the release would wait for its 5-minute unschedulable
flush (``podMaxInUnschedulablePodsDuration``). So when a node's free addresses grow, the
publisher stamps the node with :data:`RELEASED_ANNOTATION` (the time, in microseconds);
kube-scheduler takes the annotation change as a Node update event
(``UpdateNodeAnnotation``, ``pkg/scheduler/framework/events.go``) and moves the pods an
extender rejected back to its active or backoff queue (any event does,
``pkg/scheduler/schedule_one.go``: ``framework.ExtenderName``).

:class:`ResourcePublisher` compares what each node shows (the node informer's view)
with what its pools say (the pool cache), and patches the difference, with the stamp
where free addresses grew since its last look, in one merge patch of the node's status
subresource; it runs whenever a pool or node event marks it dirty (debounced), and once
at start.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from ipscheduler.framework import klog
from ipscheduler.framework.aio import Batch, WorkQueue
from ipscheduler.framework.backoff import Backoff
from ipscheduler.framework.types import NodeInfo
from ipscheduler.kube.client import KubeApi
from ipscheduler.kube.informer import ObjectStore
from ipscheduler.underlayip.addresses import AddressSet
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.pool import PoolView

log = logging.getLogger(__name__)

RESOURCE = "ipscheduler.io/underlay-ip"
"""The extended resource pods request to be placed by kube-scheduler with our addresses."""

LOOK_DELAY = 0.2
"""Seconds the publisher gathers pool and node events for before it looks."""
RETRY_DELAY = 1.0
"""Seconds after a failed patch before the publisher looks again."""

RELEASED_ANNOTATION = "ipscheduler.io/underlay-ip-released"
"""Node annotation: when an underlay address of the node was last freed (RFC 3339, UTC,
microseconds), written so that kube-scheduler retries the pods waiting for one."""


def desired(pools: Mapping[str, PoolView], capacity: Mapping[str, int]) -> dict[str, int]:
    """Node name → the sum of its pools' capacity (``capacity``: pool name → its usable
    capacity), for the nodes that have a pool. Pools being deleted do not count."""
    out: dict[str, int] = {}
    for name, pool in pools.items():
        if pool.deleting or not pool.node_name:
            continue
        out[pool.node_name] = out.get(pool.node_name, 0) + capacity.get(name, 0)
    return out


def free_by_pool(pools: Mapping[str, PoolView], free: Mapping[str, int]) -> dict[str, tuple[str, int]]:
    """Pool name → (its node, its free addresses) (``free``: pool name → that pool's free
    count), for the pools of a node. Pools being deleted do not count."""
    return {
        name: (pool.node_name, free.get(name, 0))
        for name, pool in pools.items()
        if pool.node_name and not pool.deleting
    }


def grown(before: Mapping[str, tuple[str, int]], now: Mapping[str, tuple[str, int]]) -> set[str]:
    """The nodes of the pools whose free count rose from ``before`` to ``now`` (pool name
    → (node, free)). Per pool, not per node: an address freed in the pool a waiting pod
    asks for counts even when another pool of the node filled up meanwhile. A pool seen
    for the first time has not grown (its capacity reaches kube-scheduler as an
    allocatable change)."""
    return {node for name, (node, count) in now.items() if name in before and count > before[name][1]}


def node_patch(resource: str | None, quantity: int | None, stamp: str | None) -> dict[str, Any]:
    """The merge patch of a node's status subresource that sets ``resource`` in
    ``status.capacity`` and ``status.allocatable`` to ``quantity`` (None: removes it;
    ``resource`` None: leaves it alone) and, when ``stamp`` is given,
    :data:`RELEASED_ANNOTATION` to it. The status subresource keeps metadata changes
    (``pkg/registry/core/node/strategy.go`` resets only ``spec``), so the publisher needs
    no more than ``nodes/status`` patch."""
    patch: dict[str, Any] = {}
    if resource is not None:
        value = None if quantity is None else str(quantity)
        patch["status"] = {"capacity": {resource: value}, "allocatable": {resource: value}}
    if stamp is not None:
        patch["metadata"] = {"annotations": {RELEASED_ANNOTATION: stamp}}
    return patch


def stamp_now() -> str:
    """Now as :data:`RELEASED_ANNOTATION` holds it (``metav1.MicroTime``'s layout)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    """Keeps the nodes' ``resource`` equal to their pools' capacity, and stamps a node
    whose free addresses grew (see the module doc)."""

    def __init__(self, api: KubeApi, cache: PoolCache, resource: str = RESOURCE) -> None:
        self.api = api
        self.cache = cache
        self.resource = resource
        self.queue: WorkQueue[str] = WorkQueue(LOOK_DELAY, lambda: Backoff(RETRY_DELAY, RETRY_DELAY, 0.0))
        """Whether to look again (only ever every key: :meth:`look` compares every node)."""
        self.queue.add()
        self._free: dict[str, tuple[str, int]] | None = None
        self._wake: set[str] = set()

    def subscribe(self, nodes: ObjectStore[NodeInfo], pools: ObjectStore[PoolView]) -> None:
        """Look again whenever a node or a pool changes."""
        nodes.subscribe(self._on_event)
        pools.subscribe(self._on_event)

    def _on_event(self, *args: Any) -> None:
        self.queue.add()

    def pending(self) -> dict[str, int | None]:
        """The resource changes :meth:`run` would patch now: node name → quantity (None:
        remove)."""
        pools = self.cache.pools()
        return self._resource_changes(pools, self._blocked(pools))

    def _blocked(self, pools: Mapping[str, PoolView]) -> dict[str, AddressSet | None]:
        """Pool name → the addresses its context blocks (read once per look)."""
        return {name: self.cache.context(pool).blocked for name, pool in pools.items()}

    def _resource_changes(
        self, pools: Mapping[str, PoolView], blocked: Mapping[str, AddressSet | None]
    ) -> dict[str, int | None]:
        capacity = {name: pool.capacity(blocked[name]) for name, pool in pools.items()}
        return changes(desired(pools, capacity), self.cache.node_cache.nodes(), self.resource)

    def take_patches(self) -> dict[str, dict[str, Any]]:
        """Node name → the patch :meth:`run` sends now (:func:`node_patch`): the resource
        changes, and the stamp for the nodes whose free addresses grew since the last call.
        Takes them: remembers the free counts seen, so the next call reports only what grew
        after (a stamp is kept until a patch carrying it succeeds: :meth:`patched`)."""
        pools = self.cache.pools()
        blocked = self._blocked(pools)
        free = free_by_pool(pools, {name: pool.free(blocked[name]) for name, pool in pools.items()})
        if self._free is not None:
            self._wake |= grown(self._free, free)
        self._free = free
        self._wake &= self.cache.node_cache.nodes().keys()
        resource = self._resource_changes(pools, blocked)
        stamp = stamp_now() if self._wake else None
        out: dict[str, dict[str, Any]] = {}
        for node in sorted(resource.keys() | self._wake):
            out[node] = node_patch(
                self.resource if node in resource else None,
                resource.get(node),
                stamp if node in self._wake else None,
            )
        return out

    def patched(self, node: str) -> None:
        """``node``'s patch from :meth:`look` went through."""
        self._wake.discard(node)

    async def run(self, ready: asyncio.Event) -> None:
        """The publisher task: once ``ready`` (the caches hold the cluster), patch what
        :meth:`look` finds whenever something changed (debounced :data:`LOOK_DELAY`); after
        a failed patch the publisher looks again in :data:`RETRY_DELAY`."""
        await ready.wait()
        await self.queue.run(self._publish)

    async def _publish(self, batch: Batch[str]) -> None:
        """Patch what :meth:`look` finds (``batch`` is always None: every node)."""
        failed = False
        for node, patch in self.take_patches().items():
            try:
                await self.api.patch_node_status(node, patch)
            except Exception as e:
                log.warning("patching node %s (%s) failed: %r; retrying", node, self.resource, e)
                failed = True
                continue
            self.patched(node)
            if "status" in patch:
                quantity = patch["status"]["allocatable"][self.resource]
                log.info(
                    "node %s: %s %s",
                    node,
                    self.resource,
                    "removed (no NodeIPPool)" if quantity is None else f"= {quantity}",
                )
            if "metadata" in patch:
                log.log(klog.V4, "node %s: an underlay address was freed; stamped", node)
        if failed:
            self.queue.add_rate_limited(None)
        else:
            self.queue.forget(None)
