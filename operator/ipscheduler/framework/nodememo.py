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

import itertools
from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

from ipscheduler.framework.types import NodeInfo, PodInfo

V = TypeVar("V")

MAX_SHAPES = 1024
"""Distinct shapes a memo remembers; one more and it starts again (with new ids)."""

MAX_SHAPES_PER_NODE = 16
"""Results kept per node object, Filter and Score together; one more clears them (a cluster
with more distinct workloads than this interleaved recomputes, as without the memo)."""


def freeze(value: Any) -> Hashable:
    """``value`` (JSON-like: mappings, lists, scalars, frozen dataclasses) as a hashable
    equal for equal content: a mapping becomes a sorted tuple of ``(key, frozen value)``, a
    list or tuple a tuple of frozen items. Keys must be mutually comparable (strings)."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value  # type: ignore[no-any-return]


_SHAPE_IDS = itertools.count()
"""Shape ids of every memo of the process: never reused, so a result kept on a node under
an id that a memo forgot cannot be taken for another shape's."""


class NodeMemo(Generic[V]):
    """Results by ``(NodeInfo object, shape id)``, kept on the node object
    (:attr:`~ipscheduler.framework.types.NodeInfo.memo`): a rebuilt node starts empty, and a
    node that is gone takes its results with it.

    :meth:`shape` turns a key (hashable, compared by value) into an id once per cycle;
    :meth:`get` and :meth:`put` then cost one dict operation each per node (the framework
    inlines :meth:`get`: ``node.memo.get(shape)``).
    """

    def __init__(self) -> None:
        self._shapes: dict[Hashable, int] = {}

    def shape(self, key: Hashable) -> int:
        """The id of ``key``: the same id for an equal key until :data:`MAX_SHAPES` distinct
        keys were seen; then they are forgotten and new ids are handed out."""
        sid = self._shapes.get(key)
        if sid is None:
            if len(self._shapes) >= MAX_SHAPES:
                self._shapes.clear()
            sid = self._shapes[key] = next(_SHAPE_IDS)
        return sid

    @staticmethod
    def get(node: NodeInfo, shape: int) -> V | None:
        """The result kept on this very ``node`` object for ``shape``, or None."""
        value: V | None = node.memo.get(shape)
        return value

    @staticmethod
    def put(node: NodeInfo, shape: int, value: V) -> None:
        """Keep ``value`` on ``node`` for ``shape`` (a node holding :data:`MAX_SHAPES_PER_NODE`
        results drops them first)."""
        memo = node.memo
        if len(memo) >= MAX_SHAPES_PER_NODE:
            memo.clear()
        memo[shape] = value


def normalizes(plugin: object) -> bool:
    """Whether Score plugin ``plugin`` has a NormalizeScore that does something: False when
    it declares ``normalizes = False`` (upstream: its ``ScoreExtensions()`` returns nil, as
    NodeResourcesFit's and NodeResourcesBalancedAllocation's do). The framework then adds
    its raw scores, which must be within ``0..MAX_NODE_SCORE``, without calling
    ``normalize_score``."""
    return getattr(plugin, "normalizes", True) is not False


def node_local_key(plugin: object, pod: PodInfo) -> Hashable | None:
    """``plugin.node_local_key(pod)`` for a :class:`~ipscheduler.framework.interface.NodeLocal`
    plugin; None for any other plugin (its results are never reused)."""
    key = getattr(plugin, "node_local_key", None)
    return key(pod) if callable(key) else None
