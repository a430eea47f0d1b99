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
        self._version = 0
        self._snap: dict[str, PoolView] = {}
        self._by_node: dict[str, list[PoolView]] = {}
        self._snap_version = -1
        self._spec_key: frozenset[tuple[str, AddressSet | None]] | None = None
        self._conflicts: dict[str, PoolContext] = {}
        self.layout_version = 0
        """Bumped whenever address conflicts between pools were recomputed."""
        self._ctx: dict[str, PoolContext] = {}
        self._ctx_held: dict[str, str] = {}
        self._ctx_version = -1
        self.ready = asyncio.Event()

    def attach(self, nodes: IndexLike, pools: IndexLike, pods: IndexLike | None = None) -> None:
        """Use these indexes from now on: node name → NodeInfo, pool name → PoolView,
        pod UID → PodInfo (our pods only)."""
        self._nodes = nodes
        self._pools = pools
        self._pods = pods if pods is not None else {}
        self.invalidate()
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
        """All pools by name (newest known versions); memoized until :meth:`invalidate`.

        The returned dict is shared: read it, do not modify it.
        """
        if self._snap_version != self._version:
            out = {}
            for name in list(self._pools.keys()):
                p = self.pool(name)
                if p is not None:
                    out[name] = p
            by_node: dict[str, list[PoolView]] = {}
            for name in sorted(out):
                by_node.setdefault(out[name].node_name, []).append(out[name])
            self._snap, self._by_node = out, by_node
            self._snap_version = self._version
        return self._snap

    def invalidate(self) -> None:
        """Pools or nodes changed: recompute snapshots and contexts on next use."""
        self._version += 1

    def pools_for_node(self, node_name: str) -> list[PoolView]:
        """Pools serving ``node_name``, sorted by name (the list is shared: do not modify it)."""
        self.pools()
        return self._by_node.get(node_name, [])

    def store_fresh(self, pool: PoolView) -> None:
        """Remember a pool object returned by our own write (newer than the watch)."""
        self._fresh[pool.name] = pool
        self.invalidate()

    def forget(self, name: str) -> None:
        self._fresh.pop(name, None)
        self.invalidate()

    def holder(self, uid: str) -> list[PoolView]:
        """Pools holding an allocation for pod ``uid`` (normally zero or one)."""
        return [p for p in self.pools().values() if uid in p.allocations]

    # -- context -------------------------------------------------------
    def ensure_contexts(self) -> None:
        """Recompute every pool's context if pools or nodes changed since the last time."""
        if self._ctx_version != self._version:
            pools = self.pools()
            spec_key = frozenset((name, p.addresses) for name, p in pools.items())
            if spec_key != self._spec_key:
                self._conflicts = find_conflicts(pools.values())
                self._spec_key = spec_key
                self.layout_version += 1
            conflicts = self._conflicts
            held = held_addresses(pools.values())
            self._ctx = {
                name: PoolContext(
                    node_exists=self.node(p.node_name) is not None,
                    blocked=conflicts.get(name, PoolContext()).blocked,
                    conflicts=conflicts.get(name, PoolContext()).conflicts,
                    held_by=held,
                )
                for name, p in pools.items()
            }
            self._ctx_held = held
            self._ctx_version = self._version

    def context(self, pool: PoolView) -> PoolContext:
        """Node existence and address conflicts/holdings of ``pool`` among all pools.

        Computed for every pool at once and memoized until the next
        :meth:`invalidate` (a pool or node change, or one of our writes);
        address conflicts only when some pool's address set changed.
        """
        self.ensure_contexts()
        ctx = self._ctx.get(pool.name)
        if ctx is None:  # a pool the snapshot does not know (e.g. just re-read)
            ctx = PoolContext(node_exists=self.node(pool.node_name) is not None, held_by=self._ctx_held)
        return ctx

    def blocked(self, pool: PoolView) -> AddressSet | None:
        return self.context(pool).blocked
