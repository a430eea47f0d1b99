"""Cache: the scheduler's read cache of nodes.

Backed by the node informer (:mod:`ipscheduler.kube.informer`; attached, and
:attr:`Cache.ready` set, once it holds a full LIST). The NodeIPPools have a
cache of their own in the underlayip wing
(:class:`ipscheduler.underlayip.cache.PoolCache`), which reads the node set
from here.

The map of all nodes is built once and kept until the node set changes
(:meth:`Cache.invalidate`, which bumps :attr:`Cache.node_set_version`); a changed
node is swapped in place (:meth:`Cache.node_changed`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping

from ipscheduler.framework.types import NodeInfo

IndexLike = Mapping[str, Iterable[object]]
"""key → values: an informer's index (name → one-element tuple) or, in tests, a dict of lists."""


class Cache:
    """Nodes by name (see the module doc)."""

    def __init__(self) -> None:
        self._nodes: IndexLike = {}
        self._node_snap: dict[str, NodeInfo] | None = None
        self.node_set_version = 0
        """Bumped whenever a node may have been added or deleted (:meth:`invalidate`)."""
        self.ready = asyncio.Event()

    def attach(self, nodes: IndexLike) -> None:
        """Use this index from now on: node name → NodeInfo. Sets :attr:`ready`."""
        self._nodes = nodes
        self.invalidate()
        self.ready.set()

    def invalidate(self) -> None:
        """Nodes were added or deleted: rebuild the map of all nodes on the next read."""
        self._node_snap = None
        self.node_set_version += 1

    # -- nodes ---------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        """All nodes by name; memoized until :meth:`node_changed` or :meth:`invalidate`.

        The returned dict is shared: read it, do not modify it.
        """
        if self._node_snap is None:
            out: dict[str, NodeInfo] = {}
            for name, store in self._nodes.items():
                for node in store:
                    if isinstance(node, NodeInfo):
                        out[name] = node
            self._node_snap = out
        return self._node_snap

    def node(self, name: str) -> NodeInfo | None:
        store = self._nodes.get(name)
        for node in store or ():
            if isinstance(node, NodeInfo):
                return node
        return None

    def node_changed(self, name: str) -> None:
        """Node ``name`` changed in the index (not added or deleted: use :meth:`invalidate`)."""
        if self._node_snap is None:
            return
        node = self.node(name)
        if node is None or name not in self._node_snap:
            self.invalidate()  # the node set changed: pools' node existence too
        else:
            self._node_snap[name] = node
