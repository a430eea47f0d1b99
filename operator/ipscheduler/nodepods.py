"""Every bound, non-terminal pod of the cluster, whichever scheduler placed it, by node.

NodeResourcesFit, NodePorts, InterPodAffinity and PodTopologySpread need the
pods already on each node. kopf watches pods once, narrowed to our
schedulerName, so this is a second, independent list+watch with
kubernetes-asyncio, narrowed server-side to
``spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed``: a pod that
turns terminal leaves the selection and arrives as DELETED. The watch
resumes from the last resourceVersion and re-lists on 410 Gone or errors
(with capped exponential backoff).

Memory: one PodInfo per pod (no raw bodies are kept).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.api import KubeApi
from ipscheduler.objects import PodInfo

log = logging.getLogger(__name__)

FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class RawWatch(watch.Watch):
    """kubernetes-asyncio's Watch, minus the model round trip.

    With any ``return_type`` (even ``"object"``) the library json-dumps each
    event's object and parses it again: three JSON passes per event. Here an
    event is decoded once; ``object`` and ``raw_object`` are the same dict.
    An ERROR event raises ApiException (``status`` = its code, e.g. 410), as
    upstream's does; the resourceVersion to resume from is tracked.
    """

    def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
        try:
            js = json.loads(data)
        except ValueError:
            return data
        if not isinstance(js, dict) or "object" not in js or "type" not in js:
            code = js.get("code") if isinstance(js, dict) else None
            if code:
                raise ApiException(status=code, reason=f"{js.get('reason')}: {js.get('message')}")
            raise ValueError(f"malformed watch event: {str(data)[:200]}")
        obj = js["object"]
        js["raw_object"] = obj
        if js["type"] == "ERROR":
            obj = obj if isinstance(obj, dict) else {}
            raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if isinstance(meta, dict) and meta.get("resourceVersion"):
            self.resource_version = meta["resourceVersion"]
        return js


class NodePods:
    """pod UID → PodInfo and node name → UIDs, kept current by :meth:`run`."""

    def __init__(self, on_change: Callable[[PodInfo], None] = lambda pod: None) -> None:
        """``on_change(pod)`` is called with the last known state of a pod that left its
        node (deleted, or turned Succeeded/Failed): capacity freed, its address too."""
        self._pods: dict[str, PodInfo] = {}
        self._by_node: dict[str, set[str]] = {}
        self._on: dict[str, tuple[PodInfo, ...]] = {}  # memo of on(); dropped when the node's pods change
        self.synced = asyncio.Event()
        self.on_change = on_change
        self.resource_version = ""

    # -- reads -----------------------------------------------------------
    def on(self, node: str) -> tuple[PodInfo, ...]:
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

    # -- the informer loop -----------------------------------------------------
    async def run(self, api_client: client.ApiClient, timeout_seconds: int = 300) -> None:
        """List, then watch, forever; re-list after 410 Gone or errors."""
        core: Any = client.CoreV1Api(api_client)
        delay = 1.0
        while True:
            try:
                body = await KubeApi._raw(
                    core.list_pod_for_all_namespaces(field_selector=FIELD_SELECTOR, _preload_content=False)
                )
                self.replace_all(list(body.get("items", [])))
                self.resource_version = str(body.get("metadata", {}).get("resourceVersion", ""))
                self.synced.set()
                delay = 1.0
                await self._watch(core, timeout_seconds)
            except asyncio.CancelledError:
                raise
            except (TimeoutError, ApiException, OSError, ValueError) as e:
                log.warning("pods-by-node watch failed (%s); re-listing in %.0fs", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _watch(self, core: Any, timeout_seconds: int) -> None:
        while True:
            w = RawWatch()
            async with w.stream(
                core.list_pod_for_all_namespaces,
                field_selector=FIELD_SELECTOR,
                resource_version=self.resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
            ) as stream:
                async for event in stream:  # an ERROR event (e.g. 410 Gone) raises ApiException
                    kind = event.get("type")
                    obj = event.get("raw_object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self.resource_version = str(rv)
                    if kind == "BOOKMARK":
                        continue
                    if kind == "DELETED":
                        uid = (obj.get("metadata") or {}).get("uid")
                        if isinstance(uid, str):
                            self.remove(uid)
                    else:
                        self.upsert(obj)
