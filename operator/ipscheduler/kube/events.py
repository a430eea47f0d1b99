"""Events (core/v1), deduplicated like client-go's event correlator, and object refs.

A repeat of the same reason and message for the same object bumps ``count``
instead of creating a new event. Recording is best effort: errors are
logged, never raised.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket

from ipscheduler.kube.client import KubeApi, now_rfc3339

log = logging.getLogger(__name__)

COMPONENT = "ip-scheduler"
"""``source.component`` and ``reportingComponent`` of our events."""

MAX_LRU_ENTRIES = 4096
"""Events the deduplication remembers, least recently recorded dropped first: client-go's
``maxLruCacheEntries`` (staging/src/k8s.io/client-go/tools/record/events_cache.go). Each
insert and lookup is O(1), however many pods the scheduler has seen."""

MAX_QUEUED_EVENTS = 1000
"""Events :meth:`EventRecorder.emit` holds in flight at most; more are dropped, as
client-go's broadcaster drops beyond ``maxQueuedEvents`` (staging/src/k8s.io/client-go/
tools/record/event.go)."""


class EventRecorder:
    """Posts core/v1 Events, deduplicated like client-go's event correlator.

    The same (object, type, reason, message) within ``window`` seconds bumps
    the existing event's ``count`` and ``lastTimestamp`` (at most once per
    ``min_interval`` seconds) instead of creating another event. The last
    ``max_entries`` events are remembered for that (an LRU, as client-go's).
    Errors are logged, never raised: events are best effort.

    :meth:`record` waits for the API server; :meth:`emit` does not (the scheduling and
    binding cycles use it, as kube-scheduler's recorder hands events to a broadcaster and
    goes on): at most ``max_queued`` emitted events are in flight, later ones are dropped
    and counted in ``dropped``.
    """

    def __init__(
        self,
        api: KubeApi,
        window: float = 600.0,
        min_interval: float = 10.0,
        max_queued: int = MAX_QUEUED_EVENTS,
        max_entries: int = MAX_LRU_ENTRIES,
    ) -> None:
        self.api = api
        self.max_queued = max_queued
        self.dropped = 0
        self._in_flight: set[asyncio.Task[None]] = set()
        self.window = window
        self.min_interval = min_interval
        self.instance = socket.gethostname()
        self.max_entries = max_entries
        self._seen: collections.OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float, float]] = (
            collections.OrderedDict()
        )
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
            if seen is not None:
                self._seen.move_to_end(key)
            if seen is not None and now - seen[3] < self.window:
                name, ev_ns, count, first, last_patch = seen
                count += 1
                if now - last_patch >= self.min_interval:
                    await self.api.patch_event(ev_ns, name, {"count": count, "lastTimestamp": now_rfc3339()})
                    last_patch = now
                self._seen[key] = (name, ev_ns, count, first, last_patch)
                return
            ts = now_rfc3339()
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
            while len(self._seen) > self.max_entries:  # least recently recorded first
                old, _ = self._seen.popitem(last=False)
                keys = self._keys_of.get(old[0])
                if keys is not None:
                    keys.discard(old)
                    if not keys:
                        del self._keys_of[old[0]]
        except Exception as e:  # best effort: never fail the caller (API down, stream reset...)
            log.warning("could not record event %s/%s on %s: %s", reason, event_type, obj.get("name"), e)

    def emit(
        self, obj: dict[str, str], event_type: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        """:meth:`record` in a task, without waiting for it; dropped (``dropped`` + 1, a
        warning every 100th) when ``max_queued`` emitted events are still in flight.
        Needs a running event loop."""
        if len(self._in_flight) >= self.max_queued:
            self.dropped += 1
            if self.dropped % 100 == 1:
                log.warning(
                    "event queue full (%d in flight): dropped %d event(s)", self.max_queued, self.dropped
                )
            return
        task = asyncio.get_running_loop().create_task(
            self.record(obj, event_type, reason, message, namespace)
        )
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def flush(self, grace: float | None = None) -> None:
        """Wait until the events emitted so far are recorded (at most ``grace`` seconds;
        the rest are cancelled then)."""
        pending = set(self._in_flight)
        if not pending:
            return
        _, late = await asyncio.wait(pending, timeout=grace)
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)

    def forget(self, uid: str) -> None:
        """Drop dedup state of an object that is gone."""
        for key in self._keys_of.pop(uid, ()):
            self._seen.pop(key, None)


def object_ref(kind: str, api_version: str, name: str, namespace: str = "", uid: str = "") -> dict[str, str]:
    """The involvedObject of an event: ``kind``, ``apiVersion``, ``name`` and, when set,
    ``namespace`` (empty for cluster-scoped objects) and ``uid``."""
    ref = {"kind": kind, "apiVersion": api_version, "name": name}
    if namespace:
        ref["namespace"] = namespace
    if uid:
        ref["uid"] = uid
    return ref


def pod_key_ref(key: str, uid: str = "") -> dict[str, str]:
    """The involvedObject of an event about the pod ``key`` (``namespace/name``, as an
    allocation records it) of UID ``uid``."""
    namespace, _, name = key.partition("/")
    return object_ref("Pod", "v1", name, namespace, uid)
