"""In-memory stand-ins for pure-logic unit tests (the API behaviour itself is tested e2e)."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import Cache
from ipscheduler.framework.types import NodeInfo
from ipscheduler.kube.client import Conflict
from ipscheduler.underlayip.cache import IndexLike, PoolCache


class FakePoolApi:
    """The API server's side of NodeIPPool status writes, in memory: resourceVersion CAS."""

    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.bodies = {b["metadata"]["name"]: copy.deepcopy(b) for b in bodies}
        self.puts: list[str] = []
        self.finalizer_patches: list[str] = []
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.pod_error: Exception | None = None

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A pod by namespace/name (None: not found); raises ``pod_error`` when set."""
        if self.pod_error is not None:
            raise self.pod_error
        body = self.pods.get((namespace, name))
        return copy.deepcopy(body) if body is not None else None

    async def get_cluster_object(self, res: Any, name: str) -> dict[str, Any] | None:
        body = self.bodies.get(name)
        return copy.deepcopy(body) if body is not None else None

    async def replace_cluster_status(
        self, res: Any, name: str, rv: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        body = self.bodies.get(name)
        if body is None:
            raise ApiException(status=404, reason="Not Found")
        if body["metadata"]["resourceVersion"] != rv:
            raise Conflict(name)
        body["status"] = copy.deepcopy(status)
        body["metadata"]["resourceVersion"] = str(int(rv) + 1)
        self.puts.append(name)
        return copy.deepcopy(body)

    async def set_cluster_finalizers(
        self, res: Any, name: str, rv: str, finalizers: list[str]
    ) -> dict[str, Any] | None:
        body = self.bodies.get(name)
        if body is None:
            return None
        if body["metadata"]["resourceVersion"] != rv:
            raise Conflict(name)
        body["metadata"]["finalizers"] = list(finalizers)
        body["metadata"]["resourceVersion"] = str(int(rv) + 1)
        self.finalizer_patches.append(name)
        return copy.deepcopy(body)

    def racing_write(self, name: str, allocations: dict[str, Any]) -> None:
        """Another writer (replica) adds allocations: the cache does not know yet."""
        body = self.bodies[name]
        body["status"]["allocations"] = {**body["status"].get("allocations", {}), **allocations}
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)


def pool_cache(nodes: IndexLike | None = None, pools: IndexLike | None = None) -> PoolCache:
    """A PoolCache over a node Cache, holding these nodes (name → [NodeInfo]) and attached
    to this pool index (name → [PoolView]), both ready, as cmd/wiring leaves them once the
    informers have synced."""
    node_cache = Cache()
    for values in (nodes or {}).values():
        for node in values:
            assert isinstance(node, NodeInfo)
            node_cache.add_node(node)
    node_cache.ready.set()
    cache = PoolCache(node_cache)
    cache.attach(pools if pools is not None else {})
    return cache
