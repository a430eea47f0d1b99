"""Every bound, non-terminal pod of the cluster, whichever scheduler placed it, by node.

NodeResourcesFit, NodePorts, InterPodAffinity and PodTopologySpread need the
pods already on each node. kopf watches pods once, narrowed to our
schedulerName, so this is a second, independent list+watch with
kubernetes-asyncio, narrowed server-side to
``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``: a pod that
turns terminal leaves the selection and arrives as DELETED. The list+watch
loop is :class:`ipscheduler.kube.informer.ListWatch`.

Memory: one PodInfo per pod (no raw bodies are kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.informer import Endpoint, ListWatch, RawWatch

__all__ = ["FIELD_SELECTOR", "NodePods", "RawWatch"]

FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class NodePods(ListWatch):
    """pod UID → PodInfo and node name → UIDs, kept current by :meth:`run`."""

    def __init__(
        self,
        on_change: Callable[[PodInfo], None] = lambda pod: None,
        on_bound: Callable[[PodInfo], None] = lambda pod: None,
    ) -> None:
        """``on_change(pod)`` is called with the last known state of a pod that left its
        node (deleted, or turned Succeeded/Failed): capacity freed, its address too.
        ``on_bound(pod)`` is called when a bound pod appears or changes."""
        super().__init__()
        self.what = "pods-by-node"
        self._pods: dict[str, PodInfo] = {}
        self._by_node: dict[str, set[str]] = {}
        self._on: dict[str, tuple[PodInfo, ...]] = {}  # memo of on(); dropped when the node's pods change
        self.on_change = on_change
        self.on_bound = on_bound

    # -- reads -----------------------------------------------------------
    def pods_on(self, node: str) -> tuple[PodInfo, ...]:
        """Pods bound to ``node`` (sorted by UID for determinism).

        The same tuple object is returned until a pod of ``node`` changes, so
        callers may memoize on its identity.
        """
        pods = self._on.get(node)
        if pods is None:
            pods = self._on[node] = tuple(self._pods[u] for u in sorted(self._by_node.get(node, ())))
        return pods

    def get(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)

    def __len__(self) -> int:
        return len(self._pods)

    # -- updates (also used by tests) ---------------------------------------
    def upsert(self, body: dict[str, Any]) -> None:
        try:
            pod = PodInfo.from_obj(body)
        except ValueError:
            return
        if not pod.node_name or pod.terminal:
            self.remove(pod.uid)
            return
        old = self._pods.get(pod.uid)
        if old == pod:
            return
        if old is not None and old.node_name != pod.node_name:
            self._by_node.get(old.node_name, set()).discard(pod.uid)
            self._on.pop(old.node_name, None)
        self._pods[pod.uid] = pod
        self._on.pop(pod.node_name, None)
        self._by_node.setdefault(pod.node_name, set()).add(pod.uid)
        self.on_bound(pod)

    def remove(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            self._on.pop(old.node_name, None)
            uids = self._by_node.get(old.node_name)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_node[old.node_name]
            self.on_change(old)

    def replace_all(self, bodies: list[dict[str, Any]]) -> None:
        """A fresh LIST: pods missing from it left their node while the watch was down."""
        before = self._pods
        self._pods = {}
        self._by_node.clear()
        self._on.clear()
        for b in bodies:
            self.upsert(b)
        for uid, pod in before.items():
            if uid not in self._pods:
                self.on_change(pod)

    def values(self) -> list[PodInfo]:
        """Every pod in the index."""
        return list(self._pods.values())

    # -- the informer (ListWatch) -----------------------------------------------
    def endpoint(self, api_client: client.ApiClient) -> Endpoint:
        core = client.CoreV1Api(api_client)
        return core.list_pod_for_all_namespaces, (), {"field_selector": FIELD_SELECTOR}

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            uid = (obj.get("metadata") or {}).get("uid")
            if isinstance(uid, str):
                self.remove(uid)
        else:
            self.upsert(obj)
