"""The underlayip wing's informers: NodeIPPools, the namespaces' defaults for their pods and the
NetworkAttachmentDefinitions that name pools (their CRD may not be installed), built
here as the coscheduling wing builds its own (:mod:`ipscheduler.coscheduling.informers`);
``cmd/wiring`` runs them and hands them to their subscribers (the pool controller, the
pool cache, the publisher)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from ipscheduler.kube.client import ClusterResource
from ipscheduler.kube.informer import Endpoint, ObjectStore, OptionalResource, namespaced_key
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.interfaces import NetworkPools, network_pools
from ipscheduler.underlayip.models import GROUP, PLURAL, VERSION
from ipscheduler.underlayip.multus import NAD_GROUP, NAD_KIND, NAD_PLURAL, NAD_VERSION
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


NETWORK_ATTACHMENT_DEFINITIONS = ClusterResource(NAD_GROUP, NAD_VERSION, NAD_PLURAL, NAD_KIND)
"""Multus' NetworkAttachmentDefinitions (namespaced; LIST and WATCH across namespaces)."""


def network_informer() -> OptionalResource[NetworkPools]:
    """``namespace/name`` → the pools and families a NetworkAttachmentDefinition's annotations
    give the Multus elements naming it (:func:`~ipscheduler.underlayip.interfaces.network_pools`),
    for the NADs that carry one of them (the others are left out of the index), run once the
    API is served (:class:`~ipscheduler.kube.informer.OptionalResource`: without Multus there
    is no CRD, and no NAD to read)."""

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        res = NETWORK_ATTACHMENT_DEFINITIONS
        return (
            client.CustomObjectsApi(api_client).list_cluster_custom_object,
            (res.group, res.version, res.plural),
            {},
        )

    store: ObjectStore[NetworkPools] = ObjectStore(
        "NetworkAttachmentDefinition", endpoint, network_pools, key=namespaced_key
    )
    return OptionalResource(store, NETWORK_ATTACHMENT_DEFINITIONS)
