"""Every write the scheduler makes, on kubernetes-asyncio.

- NodeIPPool status: compare-and-swap (PUT ``/status`` carrying the
  resourceVersion that was read); on 409 re-read and retry with jitter.
  Never a last-writer-wins patch.
- Binding: POST ``pods/binding`` with the pod UID as precondition and the
  address annotations (the API server copies them onto the pod and sets
  ``PodScheduled=True``).
- Pod condition ``PodScheduled=False`` (strategic merge patch on ``pods/status``).
- Events (core/v1), deduplicated: a repeat of the same reason and message for
  the same object bumps ``count`` instead of creating a new event.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.allocator import PoolContext, PoolView
from ipscheduler.cache import ClusterCache
from ipscheduler.models import API_VERSION, GROUP, KIND, PLURAL, VERSION, NodeIPPoolStatus
from ipscheduler.objects import PodInfo

log = logging.getLogger(__name__)

COMPONENT = "ip-scheduler"
CAS_ATTEMPTS = 20


async def load_client_config(kubeconfig: str | None) -> client.Configuration:
    """kubeconfig file (``--kubeconfig``, else $KUBECONFIG, else ~/.kube/config) or in-cluster.

    Raises ``config.ConfigException`` when no configuration can be found.
    """
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        await config.load_kube_config(config_file=path, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(client_configuration=cfg)
    return cfg


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Conflict(Exception):
    """The object changed since it was read (HTTP 409)."""


class KubeApi:
    """Thin typed wrapper over the kubernetes-asyncio calls the scheduler makes.

    All methods return plain dicts (JSON) and raise ``ApiException`` on
    unexpected HTTP errors.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        self.client = api_client
        # Typed as Any: we pass plain dict bodies and use _preload_content=False /
        # _content_type, which the generated stubs do not describe.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)

    async def close(self) -> None:
        await self.client.close()

    @staticmethod
    async def _raw(call: Awaitable[Any]) -> Any:
        """Await a ``_preload_content=False`` call; return its JSON body.

        kubernetes-asyncio checks the HTTP status only when it preloads the
        content, so this does it: a non-2xx answer raises ApiException
        (status, reason and body set) like the preloading path would.
        """
        resp = await call
        try:
            raw = await resp.read()
            if not 200 <= resp.status <= 299:
                err = ApiException(status=resp.status, reason=resp.reason)
                err.body = raw.decode(errors="replace")
                raise err
            return json.loads(raw) if raw else {}
        finally:
            resp.release()

    # -- pools ---------------------------------------------------------
    async def list_pools(self) -> list[dict[str, Any]]:
        body = await self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return list(body.get("items", []))

    async def get_pool(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(await self.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def replace_pool_status(
        self, name: str, resource_version: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """PUT the status if the pool is still at ``resource_version``.

        Raises Conflict on 409 (changed since read) and ApiException otherwise.
        """
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "resourceVersion": resource_version},
            "status": status,
        }
        try:
            return dict(
                await self.custom.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, name, body)
            )
        except ApiException as e:
            if e.status == 409:
                raise Conflict(name) from e
            raise

    async def set_pool_finalizers(self, name: str, resource_version: str, finalizers: list[str]) -> None:
        """Replace the pool's finalizers if it is still at ``resource_version`` (raises Conflict)."""
        patch = {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}
        try:
            await self.custom.patch_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, patch, _content_type="application/merge-patch+json"
            )
        except ApiException as e:
            if e.status == 409:
                raise Conflict(name) from e
            if e.status != 404:
                raise

    # -- pods ----------------------------------------------------------
    async def list_pods(self, field_selector: str) -> list[dict[str, Any]]:
        body = await self._raw(
            self.core.list_pod_for_all_namespaces(field_selector=field_selector, _preload_content=False)
        )
        return list(body.get("items", []))

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                await self._raw(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def bind(self, pod: PodInfo, node: str, annotations: dict[str, str]) -> None:
        """POST a Binding of ``pod`` (by UID) to ``node`` carrying ``annotations``.

        Raises Conflict when the pod is already bound, gone or being deleted
        (409/404), ApiException otherwise.
        """
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            await self._raw(
                self.core.create_namespaced_pod_binding(pod.name, pod.namespace, body, _preload_content=False)
            )
        except ApiException as e:
            if e.status in (404, 409):
                raise Conflict(f"{pod.key}: {e.reason}") from e
            raise

    async def set_unschedulable(self, pod: PodInfo, message: str) -> None:
        """Set the pod condition PodScheduled=False, reason Unschedulable."""
        patch = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastTransitionTime": _now(),
                    }
                ]
            }
        }
        try:
            await self._raw(
                self.core.patch_namespaced_pod_status(
                    pod.name,
                    pod.namespace,
                    patch,
                    _preload_content=False,
                    _content_type="application/strategic-merge-patch+json",
                )
            )
        except ApiException as e:
            if e.status != 404:
                raise

    # -- events --------------------------------------------------------
    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(
            await self._raw(self.core.create_namespaced_event(namespace, body, _preload_content=False))
        )

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self._raw(
            self.core.patch_namespaced_event(
                name, namespace, patch, _preload_content=False, _content_type="application/merge-patch+json"
            )
        )


MutateFn = Callable[[PoolView, PoolContext], NodeIPPoolStatus | None]


class PoolWriter:
    """Compare-and-swap writes of NodeIPPool status, serialized per pool in-process.

    ``update(name, mutate)`` calls ``mutate(pool, ctx)`` on the newest known
    pool; if it returns a status, PUTs it with the pool's resourceVersion.
    On 409 it re-reads the pool from the API server and calls ``mutate``
    again (up to CAS_ATTEMPTS times, with jittered sleeps). ``mutate`` may
    raise to abort (the exception propagates).
    """

    def __init__(self, api: KubeApi, cache: ClusterCache) -> None:
        self.api = api
        self.cache = cache
        self._locks: dict[str, asyncio.Lock] = {}
        self.conflicts = 0
        self.on_conflict: Callable[[], None] = lambda: None

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def _reread(self, name: str) -> PoolView | None:
        body = await self.api.get_pool(name)
        if body is None:
            self.cache.forget(name)
            return None
        pool = PoolView.from_obj(body)
        self.cache.store_fresh(pool)
        return pool

    async def update(self, name: str, mutate: MutateFn) -> PoolView | None:
        """Apply ``mutate`` by CAS; return the pool as written (or unchanged), None if gone."""
        async with self._lock(name):
            pool = self.cache.pool(name) or await self._reread(name)
            for attempt in range(CAS_ATTEMPTS):
                if pool is None:
                    return None
                status = mutate(pool, self.cache.context(pool))
                if status is None:
                    return pool
                try:
                    body = await self.api.replace_pool_status(name, pool.resource_version, status.to_wire())
                except Conflict:
                    self.conflicts += 1
                    self.on_conflict()
                    await asyncio.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 6)))
                    pool = await self._reread(name)
                    continue
                except ApiException as e:
                    if e.status == 404:
                        self.cache.forget(name)
                        return None
                    raise
                pool = PoolView.from_obj(body)
                self.cache.store_fresh(pool)
                return pool
            raise RuntimeError(f"NodeIPPool {name}: gave up after {CAS_ATTEMPTS} conflicting writes")


class EventRecorder:
    """Posts core/v1 Events, deduplicated like client-go's event correlator.

    The same (object, type, reason, message) within ``window`` seconds bumps
    the existing event's ``count`` and ``lastTimestamp`` (at most once per
    ``min_interval`` seconds) instead of creating another event.
    Errors are logged, never raised: events are best effort.
    """

    def __init__(self, api: KubeApi, window: float = 600.0, min_interval: float = 10.0) -> None:
        self.api = api
        self.window = window
        self.min_interval = min_interval
        self.instance = socket.gethostname()
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int, float, float]] = {}

    async def record(
        self, obj: dict[str, str], event_type: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        """Record an event about ``obj`` (keys: kind, apiVersion, name, namespace?, uid?)."""
        ns = namespace or obj.get("namespace") or "default"
        key = (obj.get("uid") or f"{obj.get('kind')}/{ns}/{obj['name']}", event_type, reason, message)
        loop = asyncio.get_running_loop()
        now = loop.time()
        try:
            seen = self._seen.get(key)
            if seen is not None and now - seen[3] < self.window:
                name, ev_ns, count, first, last_patch = seen
                count += 1
                if now - last_patch >= self.min_interval:
                    await self.api.patch_event(ev_ns, name, {"count": count, "lastTimestamp": _now()})
                    last_patch = now
                self._seen[key] = (name, ev_ns, count, first, last_patch)
                return
            ts = _now()
            body = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{obj['name']}.", "namespace": ns},
                "involvedObject": {k: v for k, v in obj.items() if v},
                "type": event_type,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": COMPONENT},
                "reportingComponent": COMPONENT,
                "reportingInstance": self.instance,
                "firstTimestamp": ts,
                "lastTimestamp": ts,
                "count": 1,
            }
            created = await self.api.create_event(ns, body)
            self._seen[key] = (created["metadata"]["name"], ns, 1, now, now)
            if len(self._seen) > 10_000:
                cutoff = now - self.window
                self._seen = {k: v for k, v in self._seen.items() if v[3] >= cutoff}
        except (ApiException, OSError, KeyError) as e:
            log.warning("could not record event %s/%s on %s: %s", reason, event_type, obj.get("name"), e)

    def forget(self, uid: str) -> None:
        """Drop dedup state of an object that is gone."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] != uid}


def pod_ref(pod: PodInfo) -> dict[str, str]:
    """The involvedObject of an event about ``pod``."""
    return {"kind": "Pod", "apiVersion": "v1", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


def pool_ref(pool: PoolView) -> dict[str, str]:
    """The involvedObject of an event about a (cluster-scoped) NodeIPPool."""
    return {"kind": KIND, "apiVersion": API_VERSION, "name": pool.name, "uid": pool.uid}
