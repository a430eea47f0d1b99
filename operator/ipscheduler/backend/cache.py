"""Cache: the scheduler's one cache of nodes, bound pods and assumed pods.

As kube-scheduler's ``pkg/scheduler/backend/cache`` (``cache.go``,
``interface.go``): informer event handlers feed it with
:meth:`Cache.add_node` / :meth:`~Cache.update_node` / :meth:`~Cache.remove_node`
and :meth:`Cache.add_pod` / :meth:`~Cache.update_pod` / :meth:`~Cache.remove_pod`
(bound, non-terminal pods of any scheduler); the scheduling cycle
:meth:`Cache.assume_pod` s the pod it placed on its node before its binding
cycle runs, and :meth:`Cache.forget_pod` s it when that fails. An assumed pod
that the bound-pods informer then adds is confirmed: it is counted once.
:meth:`Cache.snapshot` gives the scheduling cycle every node with its pods.

**Reuse of unchanged NodeInfo (a facility, not a side effect).** The snapshot
is kept between cycles and only the nodes touched since the last one are
rebuilt (each mutation marks its node dirty, like upstream's per-node
generation numbers in ``UpdateSnapshot``). A node whose object, bound pods and
assumed pods are unchanged is the *very same* :class:`NodeInfo` object in the
next snapshot, so what it memoizes (``requested``, ``used_ports``) and what
plugins memoize on its identity (InterPodAffinity's per-node terms) carry
over. ``update_node`` with a node equal to the cached one (a kubelet or kwok
heartbeat) keeps the cached object and marks nothing dirty.

The NodeIPPools have a cache of their own in the underlayip wing
(:class:`ipscheduler.underlayip.cache.PoolCache`), which reads the node set
from here (:meth:`Cache.node`, :attr:`Cache.node_set_version`).

Not thread-safe: everything runs on the event loop. Maps returned by reads
are shared: read them, do not modify them.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

from ipscheduler.framework.types import NodeInfo, PodInfo, Snapshot


class Cache:
    """Nodes, bound pods and assumed pods (see the module doc)."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pods: dict[str, PodInfo] = {}  # bound pods by UID
        self._assumed: dict[str, PodInfo] = {}  # assumed pods by UID (node_name set)
        self._binding_finished: set[str] = set()  # assumed pods whose Binding was posted
        self._bound_on: dict[str, dict[str, PodInfo]] = {}  # node → UID → bound pod
        self._assumed_on: dict[str, dict[str, PodInfo]] = {}  # node → UID → assumed pod
        self._snapshot = Snapshot()
        self._dirty: set[str] = set()  # nodes to rebuild in the next snapshot()
        self.node_set_version = 0
        """Bumped whenever a node was added or removed."""
        self.ready = asyncio.Event()
        """Set (by cmd/wiring) once the node informer has applied its first full LIST."""

    # -- nodes ---------------------------------------------------------
    def add_node(self, node: NodeInfo) -> None:
        """Add ``node`` (replacing any node of that name)."""
        if node.name not in self._nodes:
            self.node_set_version += 1
        self._nodes[node.name] = node
        self._dirty.add(node.name)

    def update_node(self, old: NodeInfo | None, new: NodeInfo) -> bool:
        """``new`` replaces ``old`` (its previous state, None if unknown). True when what the
        plugins read changed; False when ``new`` equals the cached node (e.g. a heartbeat),
        which is then kept, object and memos alike."""
        cached = self._nodes.get(new.name)
        if cached is None:
            self.add_node(new)
            return True
        if cached == new:
            return False
        self._nodes[new.name] = new
        self._dirty.add(new.name)
        return True

    def remove_node(self, name: str) -> None:
        """Remove node ``name``. Its pods stay, counted again if a node of that name returns
        (as upstream keeps a deleted node's pods until they are deleted)."""
        if self._nodes.pop(name, None) is not None:
            self.node_set_version += 1
            self._dirty.add(name)

    def nodes(self) -> Mapping[str, NodeInfo]:
        """Every node by name, as its informer gave it (no pods: see :meth:`snapshot`)."""
        return self._nodes

    def node(self, name: str) -> NodeInfo | None:
        """Node ``name`` as its informer gave it, or None."""
        return self._nodes.get(name)

    # -- bound pods ----------------------------------------------------
    def add_pod(self, pod: PodInfo) -> None:
        """A bound pod (``pod.node_name`` set) appeared. Confirms it if it was assumed."""
        self._drop_assumed(pod.uid)
        old = self._pods.get(pod.uid)
        if old is not None:
            self._unlink(self._bound_on, old)
            self._touch(old.node_name)
        self._pods[pod.uid] = pod
        self._bound_on.setdefault(pod.node_name, {})[pod.uid] = pod
        self._touch(pod.node_name)

    def update_pod(self, old: PodInfo | None, new: PodInfo) -> None:
        """A bound pod changed (``old``: its previous state, as upstream's UpdatePod; the
        cache's own copy decides which node it leaves). No-op if it is unchanged."""
        if self._pods.get(new.uid) == new and new.uid not in self._assumed:
            return
        self.add_pod(new)

    def remove_pod(self, pod: PodInfo) -> None:
        """A bound pod was deleted or turned terminal; also forgets it if it was assumed."""
        self._drop_assumed(pod.uid)
        old = self._pods.pop(pod.uid, None)
        if old is not None:
            self._unlink(self._bound_on, old)
            self._touch(old.node_name)

    def pod(self, uid: str) -> PodInfo | None:
        """The bound pod ``uid`` (None if not bound, or only assumed)."""
        return self._pods.get(uid)

    def bound_pods(self) -> Mapping[str, PodInfo]:
        """Every bound pod by UID (shared: do not modify)."""
        return self._pods

    def pod_count(self) -> int:
        """Number of bound pods held."""
        return len(self._pods)

    def pods_on(self, node: str) -> tuple[PodInfo, ...]:
        """Bound and assumed pods on ``node``, bound ones first, each sorted by UID."""
        bound = self._bound_on.get(node, {})
        assumed = self._assumed_on.get(node, {})
        return tuple(bound[u] for u in sorted(bound)) + tuple(assumed[u] for u in sorted(assumed))

    # -- assumed pods ------------------------------------------------------
    def assume_pod(self, pod: PodInfo) -> None:
        """Count ``pod`` (``node_name`` = the node chosen) on its node until the bound-pods
        informer adds it (:meth:`add_pod`) or :meth:`forget_pod`. As upstream's AssumePod."""
        self._drop_assumed(pod.uid)
        self._assumed[pod.uid] = pod
        self._assumed_on.setdefault(pod.node_name, {})[pod.uid] = pod
        self._touch(pod.node_name)

    def finish_binding(self, uid: str) -> None:
        """Assumed pod ``uid``'s Binding is being posted (upstream ``FinishBinding``): from now
        on its pending-pod watch may report it gone because it was bound, and it stays
        counted until the bound-pods informer adds it or :meth:`forget_pod`."""
        if uid in self._assumed:
            self._binding_finished.add(uid)

    def binding_finished(self, uid: str) -> bool:
        """Whether pod ``uid`` is assumed and its Binding was posted (:meth:`finish_binding`)."""
        return uid in self._binding_finished

    def forget_pod(self, uid: str) -> None:
        """Stop counting assumed pod ``uid`` (its binding failed, or it went away unbound).
        A pod the informer already added stays."""
        self._drop_assumed(uid)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    # -- the snapshot ------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Every node with its bound and assumed pods (:attr:`NodeInfo.pods`), and the
        nodes with pods that have pod (anti-)affinity (:class:`Snapshot`).

        Only nodes changed since the previous call are rebuilt; every other node
        is the same NodeInfo object as before (see the module doc). The mapping
        is shared and updated by the next call: use it within one cycle.
        """
        for name in self._dirty:
            node = self._nodes.get(name)
            if node is None:
                self._snapshot.drop(name)
            else:
                self._snapshot.put(dataclasses.replace(node, pods=self.pods_on(name)))
        self._dirty.clear()
        return self._snapshot

    # -- internals -----------------------------------------------------
    def _touch(self, node: str) -> None:
        self._dirty.add(node)

    def _drop_assumed(self, uid: str) -> None:
        self._binding_finished.discard(uid)
        pod = self._assumed.pop(uid, None)
        if pod is not None:
            self._unlink(self._assumed_on, pod)
            self._touch(pod.node_name)

    @staticmethod
    def _unlink(by_node: dict[str, dict[str, PodInfo]], pod: PodInfo) -> None:
        on = by_node.get(pod.node_name)
        if on is not None:
            on.pop(pod.uid, None)
            if not on:
                del by_node[pod.node_name]
