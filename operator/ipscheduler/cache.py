"""The scheduler's read cache of nodes and NodeIPPools.

Backed by kopf indexes (filled from watches, complete before any handler
runs) plus an overlay of pool objects returned by our own status writes,
which are newer than the watch until it catches up. The cache is a hint for
filtering and scoring; allocations are always written by compare-and-swap,
so a stale cache costs a retry, never a double allocation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from ipscheduler.addresses import AddressSet
from ipscheduler.allocator import PoolContext, PoolView, find_conflicts, held_addresses
from ipscheduler.objects import NodeInfo, PodInfo

IndexLike = Mapping[str, Iterable[object]]
"""A kopf.Index (key → Store of values) or, in tests, a dict of lists."""


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


class ClusterCache:
    """Nodes by name, pools by name and by node, and pool conflicts."""

    def __init__(self) -> None:
        self._nodes: IndexLike = {}
        self._pools: IndexLike = {}
        self._pods: IndexLike = {}
        self._fresh: dict[str, PoolView] = {}
        self._conflicts: dict[str, PoolContext] = {}
        self._conflict_key: tuple[tuple[str, int, str], ...] | None = None
        self._held: dict[str, str] = {}
        self._held_key: tuple[tuple[str, str, str], ...] | None = None
        self.ready = asyncio.Event()

    def attach(self, nodes: IndexLike, pools: IndexLike, pods: IndexLike | None = None) -> None:
        """Use these indexes from now on: node name → NodeInfo, pool name → PoolView,
        pod UID → PodInfo (our pods only)."""
        self._nodes = nodes
        self._pools = pools
        self._pods = pods if pods is not None else {}
        self.ready.set()

    def pods(self) -> dict[str, PodInfo]:
        """Our pods (any phase) by UID, as last seen by the watch."""
        out: dict[str, PodInfo] = {}
        for uid, store in self._pods.items():
            for pod in store:
                if isinstance(pod, PodInfo):
                    out[uid] = pod
        return out

    # -- nodes ---------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        out: dict[str, NodeInfo] = {}
        for name, store in self._nodes.items():
            for node in store:
                if isinstance(node, NodeInfo):
                    out[name] = node
        return out

    def node(self, name: str) -> NodeInfo | None:
        store = self._nodes.get(name)
        for node in store or ():
            if isinstance(node, NodeInfo):
                return node
        return None

    # -- pools ---------------------------------------------------------
    def pool(self, name: str) -> PoolView | None:
        """The newest known version of pool ``name`` (None if it is gone)."""
        indexed: PoolView | None = None
        for p in self._pools.get(name) or ():
            if isinstance(p, PoolView):
                indexed = p
        fresh = self._fresh.get(name)
        if indexed is None:
            self._fresh.pop(name, None)
            return None
        if (
            fresh is not None
            and fresh.uid == indexed.uid
            and _rv(fresh.resource_version) > _rv(indexed.resource_version)
        ):
            return fresh
        self._fresh.pop(name, None)
        return indexed

    def pools(self) -> dict[str, PoolView]:
        out = {}
        for name in list(self._pools.keys()):
            p = self.pool(name)
            if p is not None:
                out[name] = p
        return out

    def pools_for_node(self, node_name: str) -> list[PoolView]:
        """Pools serving ``node_name``, sorted by name."""
        return sorted((p for p in self.pools().values() if p.node_name == node_name), key=lambda p: p.name)

    def store_fresh(self, pool: PoolView) -> None:
        """Remember a pool object returned by our own write (newer than the watch)."""
        self._fresh[pool.name] = pool

    def forget(self, name: str) -> None:
        self._fresh.pop(name, None)

    def holder(self, uid: str) -> list[PoolView]:
        """Pools holding an allocation for pod ``uid`` (normally zero or one)."""
        return [p for p in self.pools().values() if uid in p.allocations]

    # -- context -------------------------------------------------------
    def context(self, pool: PoolView) -> PoolContext:
        """Node existence and address conflicts of ``pool`` with all other pools."""
        pools = self.pools()
        key = tuple(sorted((p.name, p.generation, p.uid) for p in pools.values()))
        if key != self._conflict_key:
            self._conflicts = find_conflicts(pools.values())
            self._conflict_key = key
        held_key = tuple(sorted((p.name, p.uid, p.resource_version) for p in pools.values()))
        if held_key != self._held_key:
            self._held = held_addresses(pools.values())
            self._held_key = held_key
        base = self._conflicts.get(pool.name, PoolContext())
        return PoolContext(
            node_exists=self.node(pool.node_name) is not None,
            blocked=base.blocked,
            conflicts=base.conflicts,
            held_by=self._held,
        )

    def blocked(self, pool: PoolView) -> AddressSet | None:
        return self.context(pool).blocked
