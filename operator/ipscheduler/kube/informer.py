"""List+watch informers on kubernetes-asyncio: nodes, NodeIPPools and bound pods.

Why not kopf indexes for nodes and pools: kopf holds back every handler until
every indexed object has been indexed, with one readiness toggle per object
and a ``notify_all`` to every waiting per-object worker on each toggle change
(``kopf/_core/reactor/queueing.py`` and ``_cogs/aiokits/aiotoggles.py``,
kopf 1.45). Start-up is then quadratic in the number of indexed objects: with
1000 nodes and 1000 pools the first bind came 21-25 s after start
(``python -m hack.bench --nodes 1000 --capacity 10 --pods 200 --phases ours``).
kopf keeps what it is good at here, the pending pods of our schedulerName.

An informer LISTs, then WATCHes from the list's resourceVersion with
bookmarks; a watch that ends (server timeout) or stays silent past
``inactivity`` seconds is reopened from the last resourceVersion. Any other
failure (a 410 Gone, a connection refused or reset, a stream cut mid-chunk,
a decode error, an exception in a handler) is logged and re-LISTs after a
jittered, capped exponential backoff (as client-go's reflector: 1 s doubling
to 30 s, reset after a successful LIST): an informer never ends by itself.
``synced`` is set after the first LIST has been applied; :meth:`ListWatch.down_for`
says how long the informer has been without a working LIST+WATCH (``/healthz``
fails past the watch timeout).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import aiohttp
import orjson
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.backoff import Backoff
from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import LIST_PAGE_SIZE, TRANSIENT_ERRORS, ClusterResource, KubeApi

log = logging.getLogger(__name__)

T = TypeVar("T")

EXPECTED_FAILURES = (TimeoutError, ApiException, OSError, ValueError, aiohttp.ClientError)
"""What a watch meets when the API server restarts, drops or cuts a stream: logged as a warning.
Anything else (a bug in a handler) is logged with its traceback; both re-LIST."""

BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 30.0

Endpoint = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
"""A list function of kubernetes-asyncio, its positional and its keyword arguments."""


class RawWatch(watch.Watch):
    """kubernetes-asyncio's Watch, minus the model round trip.

    With any ``return_type`` (even ``"object"``) the library json-dumps each
    event's object and parses it again: three JSON passes per event. Here an
    event is decoded once; ``object`` and ``raw_object`` are the same dict.
    An ERROR event raises ApiException (``status`` = its code, e.g. 410), as
    upstream's does; the resourceVersion to resume from is tracked.

    Upstream's constructor builds a whole ApiClient (SSL context with the
    system CA bundle, aiohttp session) only to deserialize models, which this
    class never does: about 35 ms of CPU per watch opened (more under load),
    three of them on the way to the first bind after a start. Skipped here.
    """

    def __init__(self, return_type: str | None = None) -> None:
        self._raw_return_type = return_type
        self._stop = False
        self.resource_version = None
        self.resp = None

    async def close(self) -> None:
        if self.resp is not None:
            self.resp.release()
            self.resp = None

    def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
        try:
            js = orjson.loads(data)
        except ValueError as e:  # a line cut mid-way or garbage: reconnect and relist
            raise ValueError(f"undecodable watch event: {str(data)[:200]}") from e
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


async def _list_raw(endpoint: Endpoint, token: str = "") -> dict[str, Any]:
    """One page of a LIST (``token``: the previous page's ``metadata.continue``)."""
    func, args, kwargs = endpoint
    page: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
    if token:
        page["_continue"] = token
    body = await KubeApi.read_json(func(*args, _preload_content=False, **kwargs, **page))
    if not isinstance(body, dict):
        raise ValueError("LIST answered with no object")
    return body


class ListWatch:
    """The list+watch loop; subclasses say what to list and how to apply what comes."""

    what = "objects"
    """Name used in log lines."""

    def __init__(self) -> None:
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.down_since: float | None = time.monotonic()
        """``time.monotonic()`` since when no LIST+WATCH has been working (None: working)."""
        self.last_error = "not listed yet"
        self.failures = 0
        """Failed LIST or WATCH attempts so far (for tests and logs)."""
        self._relist_handlers: list[Callable[[], None]] = []

    def on_relisted(self, handler: Callable[[], None]) -> None:
        """Call ``handler()`` after each LIST but the first: the watch had failed and what
        happened meanwhile was learnt from a LIST (other watches of the process were likely
        away as long). Handlers run in the order they subscribed."""
        self._relist_handlers.append(handler)

    def endpoint(self, api_client: client.ApiClient) -> Endpoint:
        raise NotImplementedError

    def replace_all(self, items: list[dict[str, Any]]) -> None:
        """Apply a fresh LIST (what is missing from it was deleted meanwhile)."""
        self.list_started()
        self.list_page(items)
        self.list_done()

    def list_started(self) -> None:
        """A LIST begins; its pages follow (:meth:`list_page`), then :meth:`list_done`."""
        raise NotImplementedError

    def list_page(self, items: list[dict[str, Any]]) -> None:
        """Apply one page of the LIST in progress."""
        raise NotImplementedError

    def list_done(self) -> None:
        """The LIST is complete: what it did not hold was deleted meanwhile."""
        raise NotImplementedError

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        """Apply one ADDED, MODIFIED or DELETED watch event."""
        raise NotImplementedError

    def down_for(self) -> float:
        """Seconds since the informer last had a working LIST+WATCH (0.0 while it has one)."""
        return 0.0 if self.down_since is None else time.monotonic() - self.down_since

    def health(self, timeout: float) -> str | None:
        """Why the informer is unhealthy (down longer than ``timeout`` seconds), or None."""
        down = self.down_for()
        if down <= timeout:
            return None
        return f"{self.what} watch down for {down:.0f}s (last error: {self.last_error})"

    async def run(
        self, api_client: client.ApiClient, timeout_seconds: int = 300, inactivity: float = 90.0
    ) -> None:
        """List, then watch, forever; re-list after any failure. Never returns; raises only
        CancelledError."""
        endpoint = self.endpoint(api_client)
        backoff = Backoff(BACKOFF_INITIAL, BACKOFF_MAX)
        while True:
            try:
                relisted = self.synced.is_set()
                self.resource_version = await self._list(endpoint)
                self.synced.set()
                if relisted:
                    for relist_handler in self._relist_handlers:
                        relist_handler()
                self.down_since = None
                backoff.reset()
                await self._watch(endpoint, timeout_seconds, inactivity)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.failures += 1
                self.last_error = f"{type(e).__name__}: {e}"[:300]
                if self.down_since is None:
                    self.down_since = time.monotonic()
                wait = backoff.next()
                expected = isinstance(e, EXPECTED_FAILURES)
                log.log(
                    logging.WARNING if expected else logging.ERROR,
                    "%s watch failed (%s); re-listing in %.1fs",
                    self.what,
                    self.last_error,
                    wait,
                    exc_info=not expected,
                )
                await asyncio.sleep(wait)

    async def _list(self, endpoint: Endpoint) -> str:
        """LIST page by page (:data:`LIST_PAGE_SIZE`), applying each as it comes; returns the
        list's resourceVersion. An expired continue token (410) raises, and the caller lists
        again from the start."""
        self.list_started()
        token = ""
        while True:
            body = await _list_raw(endpoint, token)
            items = body.get("items")
            self.list_page([i for i in items if isinstance(i, dict)] if isinstance(items, list) else [])
            meta = body.get("metadata")
            meta = meta if isinstance(meta, dict) else {}
            token = str(meta.get("continue") or "")
            if not token:
                self.list_done()
                return str(meta.get("resourceVersion", ""))

    async def _watch(self, endpoint: Endpoint, timeout_seconds: int, inactivity: float) -> None:
        func, args, kwargs = endpoint
        while True:
            log.debug("%s watch (re)opened at resourceVersion %s", self.what, self.resource_version)
            w = RawWatch()
            try:
                async with w.stream(
                    func,
                    *args,
                    resource_version=self.resource_version,
                    timeout_seconds=timeout_seconds,
                    allow_watch_bookmarks=True,
                    _request_timeout=(10, inactivity),
                    **kwargs,
                ) as stream:
                    async for event in stream:  # an ERROR event (e.g. 410 Gone) raises ApiException
                        kind = event.get("type")
                        obj = event.get("raw_object")
                        if not isinstance(obj, dict):
                            continue
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.resource_version = str(rv)
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            self.apply(kind, obj)
            except TimeoutError:
                log.debug("%s watch silent for %.0fs; reopening it", self.what, inactivity)


EventHandler = Callable[[str | None, str, dict[str, Any], T | None, T | None], None]
"""``handler(kind, key, body, old, new)``: an :class:`ObjectStore` subscriber."""


class ObjectStore(ListWatch, Generic[T]):
    """Objects of one kind by key (the name, unless ``key`` says otherwise), parsed, kept
    current by :meth:`run`.

    ``index`` maps key → a one-element tuple (the shape of a kopf index, which
    :class:`ipscheduler.underlayip.cache.PoolCache` reads). ``parse(body)`` returns the
    value to keep, or None for an object to leave out. Each handler that subscribed
    (:meth:`subscribe`; ``on_event`` is the first) is called as ``handler(kind, key, body,
    old, new)`` after the index changed, in the order they subscribed, with the value kept
    before (``old``, None if there was none) and after (``new``, None once it left the
    index), as client-go's ``OnUpdate(oldObj, newObj)``, so a handler can tell what
    changed without a copy of its own: kind None for objects of the first LIST,
    ``"ADDED"``/``"MODIFIED"``/``"DELETED"`` afterwards (a re-LIST reports as MODIFIED
    what it holds and as DELETED what vanished; DELETED has body ``{"metadata": {"name":
    key}}`` when only a re-LIST noticed).
    ``key(body)`` gives an object's key (None: ignored); default ``metadata.name``.
    """

    def __init__(
        self,
        what: str,
        endpoint: Callable[[client.ApiClient], Endpoint],
        parse: Callable[[dict[str, Any]], T | None],
        on_event: EventHandler[T] | None = None,
        key: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        super().__init__()
        self.what = what
        self._endpoint = endpoint
        self.parse = parse
        self._handlers: list[EventHandler[T]] = [] if on_event is None else [on_event]
        self.key = key if key is not None else _name
        self.index: dict[str, tuple[T]] = {}
        self._listed: set[str] = set()

    def endpoint(self, api_client: client.ApiClient) -> Endpoint:
        return self._endpoint(api_client)

    def subscribe(self, handler: EventHandler[T]) -> None:
        """Call ``handler(kind, key, body, old, new)`` for every change from now on, after the
        handlers that subscribed before (as client-go's ``AddEventHandler``: one informer,
        several consumers, each told the same facts)."""
        self._handlers.append(handler)

    def _notify(self, kind: str | None, key: str, body: dict[str, Any], old: T | None, new: T | None) -> None:
        for handler in self._handlers:
            handler(kind, key, body, old, new)

    def get(self, key: str) -> T | None:
        entry = self.index.get(key)
        return entry[0] if entry else None

    def list_started(self) -> None:
        self._listed = set()

    def list_page(self, items: list[dict[str, Any]]) -> None:
        kind = "MODIFIED" if self.synced.is_set() else None
        for obj in items:
            key = self.key(obj)
            if key is not None:
                self._listed.add(key)
                self._put(kind, key, obj)

    def list_done(self) -> None:
        seen, self._listed = self._listed, set()
        for key in [k for k in self.index if k not in seen]:
            old = self.index.pop(key)[0]
            self._notify("DELETED", key, {"metadata": {"name": key}}, old, None)

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = self.key(obj)
        if key is None:
            return
        if kind == "DELETED":
            old = self.index.pop(key, None)
            self._notify(kind, key, obj, old[0] if old else None, None)
        else:
            self._put(kind, key, obj)

    def _put(self, kind: str | None, key: str, obj: dict[str, Any]) -> None:
        value = self.parse(obj)
        old = self.index.pop(key, None) if value is None else self.index.get(key)
        if value is not None:
            self.index[key] = (value,)
        self._notify(kind, key, obj, old[0] if old else None, value)


PROBE_INTERVAL = 30.0
"""Seconds between checks for an :class:`OptionalResource`'s API while it is not served."""


class OptionalResource(Generic[T]):
    """The informer ``store`` over ``resource``, a custom resource of another project whose CRD
    may not be installed (Multus' NetworkAttachmentDefinitions). :meth:`run` checks whether
    the API server serves it (:meth:`KubeApi.serves`, a LIST of one) and runs ``store`` once it
    does; until then it says so once, at info, and checks again every ``interval`` seconds, so
    a CRD installed later is picked up without a restart. A 403 (no RBAC grant) is taken as
    not served, with one warning. Other failures of the check (the API server away) are
    retried with the informers' backoff.

    ``settled`` is set once the first check found the resource not served, or the store's
    first LIST is applied: what waits for the informers to sync waits for this instead. While
    not served the store's index stays empty and :meth:`health` is None. A CRD removed while
    the store runs leaves it failing (and re-listing, with warnings) until the CRD is back or
    the process restarts."""

    def __init__(
        self, store: ObjectStore[T], resource: ClusterResource, interval: float = PROBE_INTERVAL
    ) -> None:
        self.store = store
        self.resource = resource
        self.interval = interval
        self.settled = asyncio.Event()
        self.served = False

    def health(self, timeout: float) -> str | None:
        """The store's :meth:`ListWatch.health` once it runs; None before."""
        return self.store.health(timeout) if self.served else None

    async def _check(self, api: KubeApi, said: set[str]) -> bool | None:
        """Whether ``resource`` is served; None when the check failed for another reason than
        a 403. ``said``: what was logged already (each said once)."""
        what = f"{self.resource.kind} API {self.resource.api_version}"
        try:
            served = await api.serves(self.resource)
        except ApiException as e:
            if e.status != 403:
                log.warning("could not check for the %s: %s", what, e.status)
                return None
            if "403" not in said:
                said.add("403")
                log.warning(
                    "may not list %s (%s); checking again every %.0fs",
                    self.resource.plural,
                    e.reason,
                    self.interval,
                )
            return False
        except TRANSIENT_ERRORS as e:
            log.warning("could not check for the %s: %r", what, e)
            return None
        if not served and "absent" not in said:
            said.add("absent")
            log.info(
                "%s is not served (its CRD is not installed); checking again every %.0fs", what, self.interval
            )
        return served

    async def run(self, api: KubeApi) -> None:
        """Wait until ``resource`` is served, then run the store. Never returns; raises only
        CancelledError."""
        said: set[str] = set()
        backoff = Backoff(BACKOFF_INITIAL, BACKOFF_MAX)
        while True:
            served = await self._check(api, said)
            if served:
                break
            if served is None:
                await asyncio.sleep(backoff.next())
                continue
            backoff.reset()
            self.settled.set()
            await asyncio.sleep(self.interval)
        log.info("%s API %s is served: watching it", self.resource.kind, self.resource.api_version)
        self.served = True
        await asyncio.gather(self.store.run(api.client), self._settle())

    async def _settle(self) -> None:
        await self.store.synced.wait()
        self.settled.set()


def uid_key(obj: dict[str, Any]) -> str | None:
    """``metadata.uid`` as an :class:`ObjectStore` key (pods: names are per namespace)."""
    return _meta_str(obj, "uid")


def namespaced_key(obj: dict[str, Any]) -> str | None:
    """``metadata.namespace/metadata.name`` as an :class:`ObjectStore` key (namespaced kinds
    looked up by name, e.g. PersistentVolumeClaims)."""
    namespace, name = _meta_str(obj, "namespace"), _meta_str(obj, "name")
    return f"{namespace}/{name}" if namespace and name else None


def _name(obj: dict[str, Any]) -> str | None:
    return _meta_str(obj, "name")


def _meta_str(obj: dict[str, Any], key: str) -> str | None:
    """A non-empty string ``metadata.<key>`` of ``obj``, else None."""
    meta = obj.get("metadata")
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, str) and value else None


PendingPodHandler = Callable[[str | None, PodInfo], None]
"""``handler(event_type, pod)``: a :class:`PendingPodEvents` subscriber."""


class PendingPodEvents:
    """The pending pods of one schedulerName as kopf's watch reports them
    (:mod:`ipscheduler.cmd.kopf_handlers`), parsed once and handed to every subscriber in
    the order they subscribed: kopf takes one handler per resource, this is its fan-out.

    ``event_type`` is kopf's: None for an object of a LIST (its first, or a re-LIST after
    its watch expired), else ``"ADDED"``/``"MODIFIED"``/``"DELETED"``. Pods of another
    schedulerName are ignored; a pod that does not parse is logged and ignored.
    """

    def __init__(self, scheduler_name: str) -> None:
        self.scheduler_name = scheduler_name
        self._handlers: list[PendingPodHandler] = []

    def subscribe(self, handler: PendingPodHandler) -> None:
        """Call ``handler(event_type, pod)`` for every event from now on."""
        self._handlers.append(handler)

    def on_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """One event of the watch: parse ``body`` and tell every subscriber."""
        try:
            pod = PodInfo.from_obj(body)
        except ValueError as e:
            log.warning("ignoring malformed pod: %s", e)
            return
        if pod.scheduler_name != self.scheduler_name:
            return
        log.debug("pod event %s %s node=%s phase=%s", event_type, pod.key, pod.node_name, pod.phase)
        for handler in self._handlers:
            handler(event_type, pod)
