"""The coscheduling wing's informers: PodGroups and the pods carrying the group label,
built here as the underlayip wing builds its own (:mod:`ipscheduler.underlayip.informers`);
:class:`~ipscheduler.coscheduling.controller.PodGroupController` runs them."""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio import client

from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import GROUP, PLURAL, POD_GROUP_LABEL, VERSION, PodGroupView
from ipscheduler.kube.informer import Endpoint, ObjectStore, namespaced_key, uid_key

log = logging.getLogger(__name__)


def podgroup_informer(index: GroupIndex) -> ObjectStore[PodGroupView]:
    """``<namespace>/<name>`` → PodGroupView, every namespace. A PodGroup that does not
    parse is left out, its reason kept in ``index.invalid`` (its pods say it)."""

    def parse(body: dict[str, Any]) -> PodGroupView | None:
        try:
            view = PodGroupView.from_obj(body)
        except ValueError as e:
            key = namespaced_key(body)
            if key is not None:
                index.invalid[key] = str(e)
            log.warning("PodGroup %s is invalid: %s", key, e)
            return None
        index.invalid.pop(view.key, None)
        return view

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        return client.CustomObjectsApi(api_client).list_cluster_custom_object, (GROUP, VERSION, PLURAL), {}

    return ObjectStore("PodGroup", endpoint, parse, key=namespaced_key)


def member_informer() -> ObjectStore[Member]:
    """Every pod with the group label, any phase, by UID (narrowed server-side)."""

    def endpoint(api_client: client.ApiClient) -> Endpoint:
        core = client.CoreV1Api(api_client)
        return core.list_pod_for_all_namespaces, (), {"label_selector": POD_GROUP_LABEL}

    return ObjectStore("PodGroup members", endpoint, Member.from_obj, key=uid_key)
