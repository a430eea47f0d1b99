"""The underlayip wing's informers: NodeIPPools and the namespaces' defaults for their pods, built
here as the coscheduling wing builds its own (:mod:`ipscheduler.coscheduling.informers`);
``cmd/wiring`` runs them and hands them to their subscribers (the pool controller, the
pool cache, the publisher)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from ipscheduler.kube.informer import Endpoint, ObjectStore
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import GROUP, PLURAL, VERSION
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.selection import NamespaceDefaults, namespace_defaults


def pool_informer(cache: PoolCache) -> ObjectStore[PoolView]:
    """Pool name → PoolView. The echo of our own write reuses the view we built then
    (:meth:`PoolCache.fresh`) instead of parsing the body again."""

    def parse(body: dict[str, Any]) -> PoolView | None:
        meta = body.get("metadata") or {}
        own = cache.fresh(str(meta.get("name", "")), str(meta.get("resourceVersion", "")))
        if own is not None:
            return own
        try:
            return PoolView.from_obj(body)
        except ValueError:
            return None

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CustomObjectsApi(api_client).list_cluster_custom_object, (GROUP, VERSION, PLURAL), {}

    return ObjectStore("NodeIPPool", endpoint, parse)


def namespace_informer() -> ObjectStore[NamespaceDefaults]:
    """Namespace name → its defaults for its pods (``ipscheduler.io/default-pools``, the IP
    family annotations), for the namespaces that carry one (the others are left out of the
    index)."""

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CoreV1Api(api_client).list_namespace, (), {}

    return ObjectStore("namespace", endpoint, namespace_defaults)
