"""The pods preemption nominated to nodes (upstream ``nominator``,
``pkg/scheduler/backend/queue/nominator.go``).

A pod whose preemption evicted pods on a node is *nominated* to it
(``status.nominatedNodeName``) while its victims terminate; later cycles count it on that
node (``Framework.run_filters_with_nominated_pods``), so a pod of lower priority does not
take the room made for it. The scheduling queue keeps one :class:`Nominator` and answers
``nominated_pods_for_node`` from it.
"""

from __future__ import annotations

from ipscheduler.framework.types import PodInfo


class Nominator:
    """Node name → the pending pods nominated to it, by UID."""

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        self._node_of: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._node_of)

    def any_nominated(self) -> bool:
        """Whether any pod is nominated to any node."""
        return bool(self._node_of)

    def nominated_pods_for_node(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node``, in the order they were nominated."""
        pods = self._by_node.get(node)
        return list(pods.values()) if pods else []

    def node_of(self, uid: str) -> str:
        """The node pod ``uid`` is nominated to ("" when none)."""
        return self._node_of.get(uid, "")

    def add(self, pod: PodInfo, node: str | None = None) -> None:
        """Nominate ``pod`` to ``node`` (upstream ``AddNominatedPod``): a node name overrides
        (the scheduler's own nomination; "" clears it); None takes the pod's
        ``status.nominatedNodeName``, keeping the nomination already known when the pod has
        none (an informer update that predates the scheduler's status patch, upstream's
        ``ModeNoop``). A pod already nominated gets its latest PodInfo."""
        if node is None:
            node = pod.nominated_node_name or self._node_of.get(pod.uid, "")
        self.delete(pod.uid)
        if node:
            self._node_of[pod.uid] = node
            self._by_node.setdefault(node, {})[pod.uid] = pod

    def update(self, old: PodInfo | None, new: PodInfo) -> None:
        """A pending pod was added or updated (upstream ``UpdateNominatedPod``): a nomination
        the update removed (``old`` had one, ``new`` none) is dropped; otherwise as
        :meth:`add` with the pod's own nomination."""
        if old is not None and old.nominated_node_name and not new.nominated_node_name:
            self.delete(new.uid)
        elif new.nominated_node_name or new.uid in self._node_of:
            self.add(new)

    def delete(self, uid: str) -> None:
        """Forget pod ``uid``'s nomination (deleted, bound, or nominated anew)."""
        node = self._node_of.pop(uid, None)
        if node is None:
            return
        pods = self._by_node.get(node)
        if pods is not None:
            pods.pop(uid, None)
            if not pods:
                del self._by_node[node]
