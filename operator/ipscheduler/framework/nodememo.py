"""Per-node memos of Filter and Score results that cannot differ between cycles.

Most nodes do not change between two scheduling cycles, and the pods of one workload ask
the same. A plugin that implements
:class:`~ipscheduler.framework.interface.NodeLocal` says that its Filter and Score results
on a node are a function of the :class:`~ipscheduler.framework.types.NodeInfo` object and
of what :meth:`~ipscheduler.framework.interface.NodeLocal.node_local_key` returns for the
pod (its *shape*: the requests, tolerations, node selector... that the plugin reads), and
of nothing else: no other node, no cache outside the NodeInfo, no clock. The cache keeps a
node that did not change as the very same NodeInfo object in the next snapshot
(:mod:`ipscheduler.backend.cache`), and builds a new one for any change of the node, its
bound pods or its assumed pods; so a result computed for ``(node object, shape)`` holds for
as long as that object is the node's.

Upstream has no such memo (kube-scheduler's Go filters are cheap enough); it is how this
scheduler meets kube-scheduler's CPU per pod in Python. The framework
(:meth:`~ipscheduler.framework.runtime.Framework.find_feasible`,
:meth:`~ipscheduler.framework.runtime.Framework.run_scores`) uses it for the leading run of
node-local filters and for node-local scores; the result it returns is the one the plugins
would have returned, which the unit tests check against runs without the memo.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Any, Generic, TypeVar

from ipscheduler.framework.types import NodeInfo, PodInfo

V = TypeVar("V")

MAX_SHAPES = 1024
"""Distinct shapes remembered; one more clears every memo (ids are then reused)."""

MAX_SHAPES_PER_NODE = 8
"""Results kept per node object; one more clears that node's (a cluster with more
distinct workloads than this interleaved recomputes, as without the memo)."""


def freeze(value: Any) -> Hashable:
    """``value`` (JSON-like: mappings, lists, scalars, frozen dataclasses) as a hashable
    equal for equal content: a mapping becomes a sorted tuple of ``(key, frozen value)``, a
    list or tuple a tuple of frozen items. Keys must be mutually comparable (strings)."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value  # type: ignore[no-any-return]


class NodeMemo(Generic[V]):
    """Results by ``(NodeInfo object, shape id)``.

    :meth:`shape` turns a key (hashable, compared by value) into a small id once per cycle;
    :meth:`get` and :meth:`put` then cost one dict lookup each per node. A node's results
    are dropped as soon as a different NodeInfo object for it is seen.
    """

    def __init__(self) -> None:
        self._shapes: dict[Hashable, int] = {}
        self._by_node: dict[str, tuple[NodeInfo, dict[int, V]]] = {}

    def shape(self, key: Hashable) -> int:
        """The id of ``key`` (the same id for an equal key until :data:`MAX_SHAPES` distinct
        keys were seen, when every memo is cleared and ids start again)."""
        sid = self._shapes.get(key)
        if sid is None:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
                self._by_node.clear()
            sid = self._shapes[key] = len(self._shapes)
        return sid

    def get(self, node: NodeInfo, shape: int) -> V | None:
        """The result kept for this very ``node`` object and ``shape``, or None."""
        seen = self._by_node.get(node.name)
        if seen is None or seen[0] is not node:
            return None
        return seen[1].get(shape)

    def put(self, node: NodeInfo, shape: int, value: V) -> None:
        """Keep ``value`` for ``node`` (this object) and ``shape``."""
        seen = self._by_node.get(node.name)
        if seen is None or seen[0] is not node or len(seen[1]) >= MAX_SHAPES_PER_NODE:
            self._by_node[node.name] = (node, {shape: value})
        else:
            seen[1][shape] = value

    def prune(self, names: Collection[str]) -> None:
        """Forget the nodes not in ``names`` once more than a few are kept that are not
        (removed nodes), so the memo holds about one NodeInfo per node."""
        if len(self._by_node) > len(names) + 64:
            self._by_node = {k: v for k, v in self._by_node.items() if k in names}

    def __len__(self) -> int:
        return len(self._by_node)


def node_local_key(plugin: object, pod: PodInfo) -> Hashable | None:
    """``plugin.node_local_key(pod)`` for a :class:`~ipscheduler.framework.interface.NodeLocal`
    plugin; None for any other plugin (its results are never reused)."""
    key = getattr(plugin, "node_local_key", None)
    return key(pod) if callable(key) else None
