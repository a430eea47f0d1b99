"""The client: every request the scheduler makes, on kubernetes-asyncio, as plain JSON.

- Cluster-scoped custom objects (the NodeIPPools) through generic calls
  parameterized by a :class:`ClusterResource`: list, get, a status PUT that
  carries the resourceVersion that was read (compare-and-swap; 409 raises
  :class:`Conflict`), and a resourceVersion-checked finalizer PATCH. Nothing
  here knows what a NodeIPPool is (the ``underlayip`` wing does).
- Binding: POST ``pods/binding`` with the pod UID as precondition and the
  address annotations (the API server copies them onto the pod and sets
  ``PodScheduled=True``).
- Pod condition ``PodScheduled=False`` (strategic merge patch on ``pods/status``).
- Events: create and patch (the deduplicating recorder is :mod:`ipscheduler.kube.events`).

Size: one class, as client-go's typed clients are the one door to the API server: every
request, its error mapping (404, 409 → :class:`Conflict`) and the lean path of the three
writes per pod (:meth:`KubeApi.send_json`) in one place, so no other module talks HTTP.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.types import REASON_PREEMPTION_BY_SCHEDULER, PodInfo

LIST_PAGE_SIZE = 500
"""Objects per LIST page (client-go's pager and reflector default, ``k8s.io/client-go/tools/pager``):
a LIST of 10 000 pods is read and parsed 500 at a time, so its raw JSON never sits in
memory all at once."""

REQUEST_TIMEOUT = aiohttp.ClientTimeout(sock_connect=10, sock_read=65)
"""Timeout of every request that does not give its own (a watch gives its inactivity): 10 s
to open a connection, 65 s without a byte of the answer. kubernetes-asyncio sends requests
with no timeout at all, so a connection that dies silently (a cut without a reset, a peer
gone) would hold its caller, a binding cycle's slot or an informer's LIST, forever;
client-go finds such a connection by its HTTP/2 health check instead
(``k8s.io/client-go/transport``: ``ReadIdleTimeout`` 30 s, ``PingTimeout`` 15 s).
65 s: the API server answers every request that is not a watch within its own
``--request-timeout`` (60 s, ``k8s.io/apiserver/pkg/server/options/server_run_options.go``),
with a 504 at worst; an answer that has not begun 5 s later will not come."""

log = logging.getLogger(__name__)


async def load_client_config(kubeconfig: str | None, context: str | None = None) -> client.Configuration:
    """kubeconfig file (``--kubeconfig``, else $KUBECONFIG, else ~/.kube/config) or in-cluster.

    ``context`` (``--context``): that context of the kubeconfig instead of its current one
    (a context always means a kubeconfig file, as with kubectl). Raises
    ``config.ConfigException`` when no configuration can be found or the context does not
    exist.
    """
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        if context is not None:
            _named_context(path, context)  # kubernetes-asyncio's own error does not say "context"
        await config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    elif os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        await config.load_kube_config(context=context, client_configuration=cfg)
    return cfg


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def context_namespace(kubeconfig: str | None, context: str | None = None) -> str:
    """The namespace kubectl would use without ``-n``: that of the kubeconfig context
    (``context``, else the current one; the file as :func:`load_client_config` picks it),
    or in-cluster the pod's own namespace, else ``default``. Raises
    ``config.ConfigException`` when ``context`` is not in the kubeconfig."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        try:
            with open(SERVICE_ACCOUNT_NAMESPACE) as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    path = path or os.path.expanduser("~/.kube/config")
    if not any(os.path.exists(os.path.expanduser(p)) for p in path.split(os.pathsep) if p):
        if context is not None:
            raise config.ConfigException(f"context {context!r}: no kubeconfig file at {path}")
        return "default"
    current = (
        _named_context(path, context) if context is not None else config.list_kube_config_contexts(path)[1]
    )
    inner = (current or {}).get("context") or {}
    return str(inner.get("namespace") or "default")


def _named_context(path: str, context: str) -> dict[str, Any]:
    """Context ``context`` of the kubeconfig ``path`` (``a:b`` merges files, as kubectl).
    Raises ``config.ConfigException`` (``context 'x' not found in <path>``)."""
    contexts, _ = config.list_kube_config_contexts(path)
    found = next((c for c in contexts if c.get("name") == context), None)
    if found is None:
        raise config.ConfigException(f"context {context!r} not found in {path}")
    return dict(found)


def now_rfc3339() -> str:
    """Now as the API server writes a ``metav1.Time`` (UTC, whole seconds): ``2026-11-25T18:00:00Z``."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


TRANSIENT_ERRORS = (TimeoutError, OSError, aiohttp.ClientError)
"""What a request meets when the API server restarts, drops or cuts a connection: retried
and logged as a warning, never with a traceback."""


class Conflict(Exception):
    """The object changed since it was read (HTTP 409)."""


@dataclass(frozen=True)
class ClusterResource:
    """A cluster-scoped custom resource: ``/apis/<group>/<version>/<plural>``, objects of
    ``kind`` (a dynamic client's GroupVersionResource plus the kind for request bodies)."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``<group>/<version>``."""
        return f"{self.group}/{self.version}"


class PodReader(Protocol):
    """What :func:`live_pod` reads through: :class:`KubeApi`, or the plugins' handle's client
    (:class:`~ipscheduler.framework.interface.Client`)."""

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Pod ``namespace/name`` as the API server has it now; None when it does not exist."""


async def live_pod(api: PodReader, uid: str, key: str) -> PodInfo | None:
    """Pod ``uid`` as the API server has it now: read by ``key`` (``namespace/name``) and
    matched by UID, never by name (a new pod that reused the name is not this pod; see
    whereabouts#176). None when it is gone. The one live read behind every decision to
    release or keep an allocation that an event alone does not prove (the pool
    controller's release and GC, UnderlayIP's Unreserve). Raises what the read raises."""
    namespace, _, name = key.partition("/")
    body = await api.get_pod(namespace, name) if namespace and name else None
    live = PodInfo.from_obj(body) if body else None
    return live if live is not None and live.uid == uid else None


async def lean_pods(
    api: KubeApi, field_selector: str, keep_annotations: str | None = None
) -> dict[str, PodInfo]:
    """The pods matching ``field_selector`` by UID, from a live LIST parsed page by page into
    their lean form (:meth:`PodInfo.lean`, keeping the annotations whose key starts with
    ``keep_annotations``), so a LIST of 10 000 pods never holds their raw bodies at once.
    Unparsable pods are left out. Raises what the LIST raises."""
    pods: dict[str, PodInfo] = {}
    async for page in api.pod_pages(field_selector):
        for body in page:
            try:
                info = PodInfo.from_obj(body)
            except ValueError:
                continue
            pods[info.uid] = info.lean(keep_annotations)
    return pods


def _with_default_timeout(request: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """``RESTClientObject.request`` with :data:`REQUEST_TIMEOUT` where the caller gave none."""

    async def timed(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return await request(*args, _request_timeout=_request_timeout or REQUEST_TIMEOUT, **kwargs)

    return timed


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
        with ``python -m hack.bench --profile``). A proxy is still used when the kubeconfig
        names one (``proxy-url``, sent per request); kopf's own session does not trust
        the environment either (``kopf.ConnectionInfo.trust_env`` defaults to False).

        Every request without a timeout of its own gets :data:`REQUEST_TIMEOUT`.
        """
        self.client = api_client
        rest = getattr(api_client, "rest_client", None)
        session = getattr(rest, "pool_manager", None)
        if session is not None and hasattr(session, "_trust_env"):
            session._trust_env = False
        if rest is not None and not getattr(rest, "_ipscheduler_timeout", False):
            rest.request = _with_default_timeout(rest.request)
            rest._ipscheduler_timeout = True
        # Typed as Any: we pass plain dict bodies and use _preload_content=False /
        # _content_type, which the generated stubs do not describe.
        self.core: Any = client.CoreV1Api(api_client)
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.policy: Any = client.PolicyV1Api(api_client)

    async def close(self) -> None:
        await self.client.close()

    @staticmethod
    async def read_json(call: Awaitable[Any]) -> Any:
        """Await a ``_preload_content=False`` call; return its JSON body (``{}`` when empty).

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
            return orjson.loads(raw) if raw else {}
        finally:
            resp.release()

    async def send_json(self, method: str, path: str, body: dict[str, Any]) -> Any:
        """``method`` (POST, PUT) ``body`` as JSON to ``path`` (under the API server's URL,
        segments already quoted); the JSON answer. Raises ApiException on a non-2xx answer.

        The scheduler's three writes per pod (the pool's status, the Binding, the Scheduled
        event) go this way: straight to kubernetes-asyncio's REST client (the same session,
        TLS, ``--kube-api-qps`` limit and ``Authorization`` from
        ``ApiClient.update_params_for_auth``, so a refreshed token is used) without the
        generated API's per-call parameter handling and body sanitizing, measured at about
        a fifth of each request's CPU (``python -m hack.bench --profile``).
        """
        api = self.client
        headers = {**api.default_headers, "Accept": "application/json", "Content-Type": "application/json"}
        await api.update_params_for_auth(headers, [], ["BearerToken"])
        return await self.read_json(
            api.rest_client.request(
                method, f"{api.configuration.host}{path}", headers=headers, body=body, _preload_content=False
            )
        )

    # -- cluster-scoped custom objects -----------------------------------------
    async def list_cluster_objects(self, res: ClusterResource) -> list[dict[str, Any]]:
        """Every object of ``res`` (one LIST). Raises ApiException."""
        body = await self.custom.list_cluster_custom_object(res.group, res.version, res.plural)
        return list(body.get("items", []))

    async def get_cluster_object(self, res: ClusterResource, name: str) -> dict[str, Any] | None:
        """Object ``name`` of ``res``; None when it does not exist (404). Raises ApiException."""
        try:
            return dict(await self.custom.get_cluster_custom_object(res.group, res.version, res.plural, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def replace_cluster_status(
        self, res: ClusterResource, name: str, resource_version: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """PUT the ``status`` subresource of ``name`` if it is still at ``resource_version``.

        Returns the object as written. Raises Conflict on 409 (changed since
        read) and ApiException otherwise (404 when it is gone).
        """
        body = {
            "apiVersion": res.api_version,
            "kind": res.kind,
            "metadata": {"name": name, "resourceVersion": resource_version},
            "status": status,
        }
        path = f"/apis/{res.group}/{res.version}/{res.plural}/{quote(name, safe='')}/status"
        try:
            return dict(await self.send_json("PUT", path, body))
        except ApiException as e:
            if e.status == 409:
                raise Conflict(name) from e
            raise

    async def set_cluster_finalizers(
        self, res: ClusterResource, name: str, resource_version: str, finalizers: list[str]
    ) -> dict[str, Any] | None:
        """Replace the finalizers of ``name`` if it is still at ``resource_version``
        (a merge patch carrying the resourceVersion).

        Returns the object as written, None when it is gone (404). Raises Conflict
        (changed since read) and ApiException otherwise.
        """
        patch = {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}}
        try:
            return dict(
                await self.read_json(
                    self.custom.patch_cluster_custom_object(
                        res.group,
                        res.version,
                        res.plural,
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

    # -- namespaced custom objects ---------------------------------------------
    async def serves(self, res: ClusterResource) -> bool:
        """Whether the API server serves ``res`` (its CRD is installed): one LIST of at most
        one object; False on 404. Raises ApiException otherwise."""
        try:
            await self.custom.list_cluster_custom_object(res.group, res.version, res.plural, limit=1)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    async def patch_namespaced_status(
        self, res: ClusterResource, namespace: str, name: str, status: dict[str, Any]
    ) -> bool:
        """Merge-patch ``status`` into the status subresource of ``namespace/name`` of a
        namespaced ``res``. False when the object is gone (404). Raises ApiException."""
        try:
            await self.read_json(
                self.custom.patch_namespaced_custom_object_status(
                    res.group,
                    res.version,
                    namespace,
                    res.plural,
                    name,
                    {"status": status},
                    _content_type="application/merge-patch+json",
                    _preload_content=False,
                )
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    # -- storage (VolumeBinding) --------------------------------------
    async def patch_persistent_volume(self, name: str, patch: dict[str, Any]) -> Any:
        """Merge-patch PersistentVolume ``name`` (VolumeBinding's claimRef; a
        ``metadata.resourceVersion`` in ``patch`` makes it conditional); the volume as written.
        Raises ApiException (409 when the volume changed meanwhile)."""
        return await self.read_json(
            self.core.patch_persistent_volume(
                name, patch, _content_type="application/merge-patch+json", _preload_content=False
            )
        )

    async def patch_persistent_volume_claim(self, namespace: str, name: str, patch: dict[str, Any]) -> Any:
        """Merge-patch claim ``namespace/name`` (VolumeBinding's selected-node annotation); the
        claim as written. Raises ApiException."""
        return await self.read_json(
            self.core.patch_namespaced_persistent_volume_claim(
                name, namespace, patch, _content_type="application/merge-patch+json", _preload_content=False
            )
        )

    # -- nodes ---------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every node (one LIST). Raises ApiException."""
        body = await self.read_json(self.core.list_node(_preload_content=False))
        return list(body.get("items", []))

    # -- pods ----------------------------------------------------------
    async def list_pods(self, field_selector: str, label_selector: str = "") -> list[dict[str, Any]]:
        """Every pod matching ``field_selector`` (and ``label_selector`` if given; a LIST,
        page by page). Raises ApiException."""
        return [pod async for page in self.pod_pages(field_selector, label_selector) for pod in page]

    async def pod_pages(
        self, field_selector: str, label_selector: str = ""
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The pods matching ``field_selector`` (and ``label_selector`` if given), one LIST
        page of :data:`LIST_PAGE_SIZE` at a time, so a caller that parses each page holds no
        more raw pods than that. Raises ApiException (410 when a continue token expired:
        list again)."""
        token = ""
        while True:
            page: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
            if label_selector:
                page["label_selector"] = label_selector
            if token:
                page["_continue"] = token
            body = await self.read_json(
                self.core.list_pod_for_all_namespaces(
                    field_selector=field_selector, _preload_content=False, **page
                )
            )
            items = body.get("items")
            yield [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
            meta = body.get("metadata")
            token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
            if not token:
                return

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                await self.read_json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def get_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """StatefulSet ``namespace/name`` (None when it does not exist). Raises ApiException."""
        apps = client.AppsV1Api(self.client)
        try:
            return dict(
                await self.read_json(
                    apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)
                )
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def list_namespaces(self) -> list[dict[str, Any]]:
        """Every namespace (one LIST). Raises ApiException."""
        body = await self.read_json(self.core.list_namespace(_preload_content=False))
        return list(body.get("items", []))

    async def get_namespace(self, name: str) -> dict[str, Any] | None:
        """Namespace ``name`` (None when it does not exist). Raises ApiException."""
        try:
            return dict(await self.read_json(self.core.read_namespace(name, _preload_content=False)))
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
        path = f"/api/v1/namespaces/{quote(pod.namespace, safe='')}/pods/{quote(pod.name, safe='')}/binding"
        try:
            await self.send_json("POST", path, body)
        except ApiException as e:
            if e.status in (404, 409):
                raise Conflict(f"{pod.key}: {e.reason}") from e
            raise

    async def set_unschedulable(
        self, pod: PodInfo, message: str, nominated_node_name: str | None = None
    ) -> None:
        """Set the pod condition PodScheduled=False, reason Unschedulable, and, unless
        ``nominated_node_name`` is None, ``status.nominatedNodeName`` ("" clears it) in the
        same patch (upstream ``updatePod``). A pod that is gone (404) is left alone."""
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": now_rfc3339(),
                }
            ]
        }
        if nominated_node_name is not None:
            status["nominatedNodeName"] = nominated_node_name or None
        await self._patch_pod_status(pod, {"status": status})

    async def set_nominated_node_name(self, pod: PodInfo, node: str) -> None:
        """Set (or with "" clear) ``status.nominatedNodeName`` (upstream
        ``clearNominatedNodeName``). A pod that is gone (404) is left alone."""
        await self._patch_pod_status(pod, {"status": {"nominatedNodeName": node or None}})

    async def _patch_pod_status(self, pod: PodInfo, patch: dict[str, Any]) -> None:
        try:
            await self.read_json(
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

    async def preempt_pod(self, victim: PodInfo, message: str) -> bool:
        """Evict a victim of preemption as kube-scheduler does (``PreemptPod`` in
        ``pkg/scheduler/framework/preemption/preemption.go``): the ``DisruptionTarget``
        condition (True, reason ``PreemptionByScheduler``, ``message``), then a DELETE with
        the pod's UID as precondition (a pod re-created under the same name is not
        touched) and its own grace period. Returns False when the pod is gone already (404,
        or 409: another UID); raises ApiException otherwise."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": REASON_PREEMPTION_BY_SCHEDULER,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        try:
            await self._patch_pod_status(victim, {"status": {"conditions": [condition]}})
            await self.read_json(
                self.core.delete_namespaced_pod(
                    victim.name,
                    victim.namespace,
                    body={"preconditions": {"uid": victim.uid}},
                    _preload_content=False,
                )
            )
        except ApiException as e:
            if e.status in (404, 409):
                return False
            raise
        return True

    async def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget (``policy/v1``, all namespaces; one LIST). Raises ApiException."""
        body = await self.read_json(
            self.policy.list_pod_disruption_budget_for_all_namespaces(_preload_content=False)
        )
        items = body.get("items")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    async def patch_node_status(self, node: str, patch: dict[str, Any]) -> None:
        """Merge-patch node ``node``'s status subresource with ``patch`` (e.g. an extended
        resource in ``status.capacity``/``status.allocatable``, as a device plugin or the
        documented "advertise extended resources" call does; annotations ride along). A
        node that is gone (404) is left alone."""
        try:
            await self.read_json(
                self.core.patch_node_status(
                    node, patch, _preload_content=False, _content_type="application/merge-patch+json"
                )
            )
        except ApiException as e:
            if e.status != 404:
                raise

    # -- events --------------------------------------------------------
    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST the Event ``body`` in ``namespace``; the Event as created. Raises ApiException."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events"
        return dict(await self.send_json("POST", path, body))

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self.read_json(
            self.core.patch_namespaced_event(
                name, namespace, patch, _preload_content=False, _content_type="application/merge-patch+json"
            )
        )
