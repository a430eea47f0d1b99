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
import dataclasses
import datetime
import json
import logging
import os
import random
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.backend.cache import ClusterCache
from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.allocator import PoolContext, PoolView
from ipscheduler.underlayip.models import (
    API_VERSION,
    FINALIZER,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    NodeIPPoolStatus,
)

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
        """Wrap ``api_client``. Its HTTP session stops trusting the environment:
        kubernetes-asyncio creates it with aiohttp's ``trust_env=True``, which reads
        ``~/.netrc`` and the ``*_PROXY`` variables in a worker thread on every request
        (two thread hops, measured at about a tenth of the scheduler's CPU under load
        with ``hack/bench.py --profile``). A proxy is still used when the kubeconfig
        names one (``proxy-url``, sent per request); kopf's own session does not trust
        the environment either (``kopf.ConnectionInfo.trust_env`` defaults to False).
        """
        self.client = api_client
        session = getattr(getattr(api_client, "rest_client", None), "pool_manager", None)
        if session is not None and hasattr(session, "_trust_env"):
            session._trust_env = False
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

    async def set_pool_finalizers(
        self, name: str, resource_version: str, finalizers: list[str]
    ) -> dict[str, Any] | None:
        """Replace the pool's finalizers if it is still at ``resource_version``.

        Returns the pool as written, None when it is gone (404). Raises Conflict
        (changed since read) and ApiException otherwise.
        """
        patch = {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}
        try:
            return dict(
                await self._raw(
                    self.custom.patch_cluster_custom_object(
                        GROUP,
                        VERSION,
                        PLURAL,
                        name,
                        patch,
                        _content_type="application/merge-patch+json",
                        _preload_content=False,
                    )
                )
            )
        except ApiException as e:
            if e.status == 409:
                raise Conflict(name) from e
            if e.status == 404:
                return None
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


@dataclass
class _Write:
    """One queued mutation; ``future`` is None for a deferred one nobody waits for."""

    mutate: MutateFn
    future: asyncio.Future[PoolView | None] | None


class PoolWriter:
    """Compare-and-swap writes of NodeIPPool status, coalesced per pool (group commit).

    :meth:`submit` queues ``mutate(pool, ctx) -> new status | None`` for a
    pool and returns a future. One flusher task per pool takes every queued
    mutation, applies them in order to the newest known pool (each one sees
    the status the previous one produced) and PUTs the combined status with
    the pool's resourceVersion: one write for all of them. On 409 it re-reads
    the pool and applies them all again (up to CAS_ATTEMPTS times, with
    jittered sleeps), so the allocation truth is always the API server's.
    A mutation that raises (e.g. ``PoolFull``) fails only its own future; the
    others are written. Mutations queued while a PUT is in flight go into the
    next one, so a burst of reservations on one pool costs one write per
    round trip instead of one per pod.

    :meth:`defer` queues a mutation nobody waits for (marking an allocation
    Bound) that rides along with the pool's next write, or is written after
    ``defer_delay`` seconds if none comes.

    No allocation without the finalizer: before the first write that adds an
    allocation to a pool lacking ``ipscheduler.io/allocations``, the finalizer is
    added by a resourceVersion-checked PATCH, and the status PUT carries the
    version that PATCH produced; a pool deleted meanwhile answers 404 or 409, and
    the mutations then see it gone or deleting (so nothing is reserved in it).

    The future resolves to the pool as written (or unchanged, when no
    mutation changed anything) or None when the pool is gone; it raises the
    mutation's own exception, or whatever the API call raised (ApiException,
    aiohttp's ClientError family, OSError, TimeoutError...), or RuntimeError
    after CAS_ATTEMPTS conflicts. Every future is settled, whatever happens.
    """

    def __init__(self, api: KubeApi, cache: ClusterCache, defer_delay: float = 5.0) -> None:
        self.api = api
        self.cache = cache
        self.defer_delay = defer_delay
        self._queues: dict[str, list[_Write]] = {}
        self._flushers: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.conflicts = 0
        self.writes = 0
        """Successful PUTs (for tests and the benchmark)."""
        self._written: dict[str, str] = {}  # pool → resourceVersion of our last write
        self.on_conflict: Callable[[], None] = lambda: None
        self.on_write: Callable[[int], None] = lambda mutations: None

    # -- queueing --------------------------------------------------------
    def submit(self, name: str, mutate: MutateFn) -> asyncio.Future[PoolView | None]:
        """Queue ``mutate`` for pool ``name``; the future resolves once it is written."""
        future: asyncio.Future[PoolView | None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(name, []).append(_Write(mutate, future))
        self._kick(name)
        return future

    async def update(self, name: str, mutate: MutateFn) -> PoolView | None:
        """Apply ``mutate`` by CAS; return the pool as written (or unchanged), None if gone."""
        return await self.submit(name, mutate)

    def defer(self, name: str, mutate: MutateFn) -> None:
        """Queue ``mutate`` without waiting: written with the next write of the pool, or
        after ``defer_delay`` s. Failures are logged; the start-up reconcile and the GC
        sweep repair what a lost deferred write would have done."""
        self._queues.setdefault(name, []).append(_Write(mutate, None))
        if name not in self._flushers and name not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[name] = loop.call_later(self.defer_delay, self._kick, name)

    def is_own_write(self, name: str, resource_version: str) -> bool:
        """Is this version of pool ``name`` the one our last write produced (its watch echo)?"""
        return bool(resource_version) and self._written.get(name) == resource_version

    def pending(self, name: str) -> int:
        """Mutations queued for pool ``name`` and not yet taken into a write."""
        return len(self._queues.get(name, ()))

    async def flush(self) -> None:
        """Write everything queued now, deferred mutations included, and wait for it."""
        for name in list(self._queues):
            self._kick(name)
        while self._flushers:
            await asyncio.gather(*self._flushers.values(), return_exceptions=True)

    def _kick(self, name: str) -> None:
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        if name not in self._flushers:
            loop = asyncio.get_running_loop()
            self._flushers[name] = loop.create_task(self._flush(name), name=f"write NodeIPPool {name}")

    async def _flush(self, name: str) -> None:
        batch: list[_Write] = []
        try:
            while batch := self._queues.pop(name, []):
                await self._commit(name, batch)
        except asyncio.CancelledError:
            for w in batch:
                if w.future is not None and not w.future.done():
                    w.future.cancel()
            raise
        except BaseException as e:  # _commit settles its batch; this is the last line of defence
            log.exception("writer of NodeIPPool %s failed", name)
            for w in batch:
                if w.future is not None and not w.future.done():
                    w.future.set_exception(RuntimeError(f"NodeIPPool {name} writer failed: {e!r}"))
            raise
        finally:
            del self._flushers[name]

    # -- writing ---------------------------------------------------------
    async def _reread(self, name: str) -> PoolView | None:
        body = await self.api.get_pool(name)
        if body is None:
            self.cache.forget(name)
            return None
        pool = PoolView.from_obj(body)
        self.cache.store_fresh(pool)
        return pool

    async def _add_finalizer(self, pool: PoolView) -> PoolView | None:
        """PATCH our finalizer onto ``pool`` (resourceVersion-checked); the pool as written,
        None if gone. On Conflict the pool is re-read and returned unchanged (the caller
        looks again)."""
        try:
            body = await self.api.set_pool_finalizers(
                pool.name, pool.resource_version, [*pool.finalizers, FINALIZER]
            )
        except Conflict:
            self.conflicts += 1
            self.on_conflict()
            return await self._reread(pool.name)
        if body is None:
            self.cache.forget(pool.name)
            return None
        written = PoolView.from_obj(body)
        self.cache.store_fresh(written)
        log.info("NodeIPPool %s: finalizer %s added before its first allocation", pool.name, FINALIZER)
        return written

    async def _commit(self, name: str, batch: list[_Write]) -> None:
        """Write ``batch`` in one CAS (retrying on conflicts) and settle its futures."""
        try:
            pool = self.cache.pool(name) or await self._reread(name)
            for attempt in range(CAS_ATTEMPTS):
                if pool is None:
                    _settle(name, batch, None, {})
                    return
                view, errors = _apply(pool, self.cache.context(pool), batch)
                if view is pool:
                    _settle(name, batch, pool, errors)
                    return
                try:
                    if FINALIZER not in pool.finalizers and view.allocations.keys() - pool.allocations.keys():
                        pool = await self._add_finalizer(pool)
                        continue  # apply the batch again to the version that carries it
                    wire = view.status.to_wire()
                    body = await self.api.replace_pool_status(name, pool.resource_version, wire)
                except Conflict:
                    self.conflicts += 1
                    self.on_conflict()
                    await asyncio.sleep(random.uniform(0, 0.01 * 2 ** min(attempt, 6)))
                    pool = await self._reread(name)
                    continue
                except ApiException as e:
                    if e.status == 404:
                        self.cache.forget(name)
                        _settle(name, batch, None, {})
                        return
                    raise
                # A CAS that succeeded changed nothing but the status (we sent it) and the
                # resourceVersion: no need to parse the whole object back.
                meta = body.get("metadata") or {}
                written = dataclasses.replace(view, resource_version=str(meta.get("resourceVersion", "")))
                self.cache.store_fresh(written)
                self.writes += 1
                self.on_write(len(batch))
                self._written[name] = written.resource_version
                _settle(name, batch, written, errors)
                return
            raise RuntimeError(f"NodeIPPool {name}: gave up after {CAS_ATTEMPTS} conflicting writes")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            for w in batch:
                if w.future is None:
                    log.warning("deferred write of NodeIPPool %s failed: %s", name, e)
                elif not w.future.done():
                    w.future.set_exception(e)


def _apply(pool: PoolView, ctx: PoolContext, batch: list[_Write]) -> tuple[PoolView, dict[int, Exception]]:
    """Run the batch's mutations in order on ``pool``; the result (``pool`` itself if nothing
    changed) and the exceptions raised, by position."""
    view = pool
    errors: dict[int, Exception] = {}
    for i, w in enumerate(batch):
        try:
            status = w.mutate(view, ctx)
        except Exception as e:
            errors[i] = e
            continue
        if status is not None:
            view = dataclasses.replace(view, status=status)
    return view, errors


def _settle(name: str, batch: list[_Write], result: PoolView | None, errors: dict[int, Exception]) -> None:
    for i, w in enumerate(batch):
        error = errors.get(i)
        if w.future is None:
            if error is not None:
                log.warning("deferred write of NodeIPPool %s failed: %r", name, error)
        elif w.future.done():
            continue
        elif error is not None:
            w.future.set_exception(error)
        else:
            w.future.set_result(result)


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
        self._keys_of: dict[str, set[tuple[str, str, str, str]]] = {}  # object → its keys in _seen

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
            self._keys_of.setdefault(key[0], set()).add(key)
            if len(self._seen) > 10_000:
                cutoff = now - self.window
                self._seen = {k: v for k, v in self._seen.items() if v[3] >= cutoff}
                self._keys_of = {}
                for k in self._seen:
                    self._keys_of.setdefault(k[0], set()).add(k)
        except Exception as e:  # best effort: never fail the caller (API down, stream reset...)
            log.warning("could not record event %s/%s on %s: %s", reason, event_type, obj.get("name"), e)

    def forget(self, uid: str) -> None:
        """Drop dedup state of an object that is gone."""
        for key in self._keys_of.pop(uid, ()):
            self._seen.pop(key, None)


def pod_ref(pod: PodInfo) -> dict[str, str]:
    """The involvedObject of an event about ``pod``."""
    return {"kind": "Pod", "apiVersion": "v1", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}


def pool_ref(pool: PoolView) -> dict[str, str]:
    """The involvedObject of an event about a (cluster-scoped) NodeIPPool."""
    return {"kind": KIND, "apiVersion": API_VERSION, "name": pool.name, "uid": pool.uid}
