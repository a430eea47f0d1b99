"""kube/informer: ObjectStore and PendingPodEvents, the index and the events an informer reports to
its subscribers, and ListWatch.run that never ends on a failed watch (no API server)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.types import PodInfo
from ipscheduler.kube import informer
from ipscheduler.kube.client import LIST_PAGE_SIZE, ClusterResource
from ipscheduler.kube.informer import ObjectStore, OptionalResource, PendingPodEvents, uid_key
from tests import builders


def obj(name: str, value: Any = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "value": value}


Seen = list[tuple[str | None, str, int | None, int | None]]


def store() -> tuple[ObjectStore[int], Seen]:
    seen: Seen = []

    def parse(body: dict[str, Any]) -> int | None:
        v = body.get("value")
        return v if isinstance(v, int) else None

    s: ObjectStore[int] = ObjectStore(
        "thing",
        lambda api: (print, (), {}),
        parse,
        lambda kind, name, body, old, new: seen.append((kind, name, old, new)),
    )
    return s, seen


def test_first_list_reports_kind_none_and_fills_the_index() -> None:
    s, seen = store()
    s.replace_all([obj("a", 1), obj("b", 2), {"metadata": {}}])
    assert seen == [(None, "a", None, 1), (None, "b", None, 2)]
    assert s.index == {"a": (1,), "b": (2,)} and s.get("b") == 2 and s.get("c") is None


def test_relist_reports_modified_and_the_vanished_as_deleted_with_their_last_value() -> None:
    s, seen = store()
    s.replace_all([obj("a", 1), obj("gone", 7)])
    s.synced.set()
    seen.clear()
    s.replace_all([obj("a", 3), obj("new", 4)])
    assert seen == [("MODIFIED", "a", 1, 3), ("MODIFIED", "new", None, 4), ("DELETED", "gone", 7, None)]
    assert s.index == {"a": (3,), "new": (4,)}


@pytest.mark.parametrize(
    ("events", "index", "reported"),
    [
        ([("ADDED", obj("a", 1))], {"a": (1,)}, [("ADDED", "a", None, 1)]),
        (
            [("ADDED", obj("a", 1)), ("MODIFIED", obj("a", 2))],
            {"a": (2,)},
            [("ADDED", "a", None, 1), ("MODIFIED", "a", 1, 2)],
        ),
        (
            [("ADDED", obj("a", 1)), ("DELETED", obj("a", 1))],
            {},
            [("ADDED", "a", None, 1), ("DELETED", "a", 1, None)],
        ),
        ([("DELETED", obj("never", 1))], {}, [("DELETED", "never", None, None)]),
        (
            [("ADDED", obj("a", 1)), ("MODIFIED", obj("a", "bad"))],
            {},
            [("ADDED", "a", None, 1), ("MODIFIED", "a", 1, None)],
        ),
    ],
    ids=["added", "modified", "deleted", "deleted-unknown", "unparsable-leaves-the-index"],
)
def test_watch_events(
    events: list[tuple[str, dict[str, Any]]], index: dict[str, Any], reported: list[Any]
) -> None:
    s, seen = store()
    for kind, body in events:
        s.apply(kind, body)
    assert s.index == index
    assert seen == reported


def test_a_key_function_indexes_by_uid() -> None:
    s, seen = store()
    s.key = uid_key
    a = {"metadata": {"name": "same", "namespace": "x", "uid": "u1"}, "value": 1}
    b = {"metadata": {"name": "same", "namespace": "y", "uid": "u2"}, "value": 2}
    s.replace_all([a, b, {"metadata": {"name": "no-uid"}, "value": 3}])
    assert s.index == {"u1": (1,), "u2": (2,)}
    s.apply("DELETED", a)
    assert seen[-1] == ("DELETED", "u1", 1, None)


async def test_raw_watch_decodes_once_tracks_the_resource_version_and_raises_410() -> None:
    import json

    import pytest
    from kubernetes_asyncio.client.exceptions import ApiException

    from ipscheduler.kube.informer import RawWatch

    w = RawWatch()
    pod = {"metadata": {"name": "p", "resourceVersion": "42"}, "spec": {"nodeName": "n1"}}
    event = w.unmarshal_event(json.dumps({"type": "MODIFIED", "object": pod}), "object")
    assert event["object"] is event["raw_object"]
    assert event["object"] == pod
    assert w.resource_version == "42"
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}
    assert w.unmarshal_event(json.dumps(bookmark), None)["type"] == "BOOKMARK"
    assert w.resource_version == "50"
    gone = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
    with pytest.raises(ApiException) as err:
        w.unmarshal_event(json.dumps(gone), None)
    assert err.value.status == 410
    with pytest.raises(ValueError, match="undecodable watch event"):
        w.unmarshal_event('{"type": "MODIFIED", "obj', None)  # a line cut mid-way


def test_raw_watch_builds_no_api_client_of_its_own() -> None:
    """Upstream's Watch() builds an ApiClient (SSL context, aiohttp session: it even needs a
    running loop); ours must not (it costs ~35 ms per watch opened)."""
    import asyncio

    from ipscheduler.kube.informer import RawWatch

    w = RawWatch()  # no running loop here: upstream's constructor would raise
    assert not hasattr(w, "_api_client")
    asyncio.run(w.close())


class _Response:
    """What a ``_preload_content=False`` call answers (status, body, release)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.status, self.reason, self._body = 200, "OK", body

    async def read(self) -> bytes:
        return json.dumps(self._body).encode()

    def release(self) -> None:
        pass


async def test_a_list_is_read_page_by_page_and_deletes_only_once_complete() -> None:
    s, seen = store()
    s.replace_all([obj("a", 1), obj("gone", 7)])
    s.synced.set()
    seen.clear()
    pages = {
        "": {"metadata": {"continue": "p2", "resourceVersion": "50"}, "items": [obj("a", 2)]},
        "p2": {"metadata": {"continue": "", "resourceVersion": "50"}, "items": [obj("b", 3)]},
    }
    calls: list[dict[str, Any]] = []

    async def list_things(**kwargs: Any) -> _Response:
        calls.append(kwargs)
        if kwargs.get("_continue") == "p2":
            assert seen == [("MODIFIED", "a", 1, 2)]  # page 1 applied, nothing deleted yet
        return _Response(pages[kwargs.get("_continue", "")])

    rv = await s._list((list_things, (), {"field_selector": "x"}))
    assert rv == "50"
    assert [c.get("_continue") for c in calls] == [None, "p2"]
    assert all(c["limit"] == LIST_PAGE_SIZE and c["field_selector"] == "x" for c in calls)
    assert seen == [("MODIFIED", "a", 1, 2), ("MODIFIED", "b", None, 3), ("DELETED", "gone", 7, None)]
    assert s.index == {"a": (2,), "b": (3,)}


def test_every_subscriber_hears_every_change_in_the_order_they_subscribed() -> None:
    s, seen = store()
    later: list[tuple[str | None, str]] = []
    s.subscribe(lambda kind, name, body, old, new: later.append((kind, name)))
    s.replace_all([obj("a", 1)])
    s.apply("DELETED", obj("a", 1))
    assert seen == [(None, "a", None, 1), ("DELETED", "a", 1, None)]
    assert later == [(None, "a"), ("DELETED", "a")]


def pod_body(uid: str, scheduler: str = "ip-scheduler") -> dict[str, Any]:
    return builders.pod_body(uid=uid, name=f"p-{uid}", scheduler=scheduler, phase="Pending")


def test_pending_pod_events_parse_once_and_reach_every_subscriber_of_our_scheduler_name() -> None:
    events = PendingPodEvents("ip-scheduler")
    first: list[tuple[str | None, PodInfo]] = []
    second: list[tuple[str | None, PodInfo]] = []
    events.subscribe(lambda kind, pod: first.append((kind, pod)))
    events.subscribe(lambda kind, pod: second.append((kind, pod)))
    events.on_event("ADDED", pod_body("u1"))
    events.on_event("ADDED", pod_body("u2", scheduler="default-scheduler"))
    events.on_event("ADDED", {"metadata": {"name": "broken"}})  # no UID: logged and ignored
    assert [(k, p.uid) for k, p in first] == [("ADDED", "u1")]
    assert first == second and first[0][1] is second[0][1], "one parse for all subscribers"


# --------------------------------------------------------------------------- ListWatch.run


def thing_store() -> ObjectStore[int]:
    return ObjectStore("thing", lambda api: (print, (), {}), lambda body: 1)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoffs of 0 s: the loop runs its retries at once."""
    monkeypatch.setattr("ipscheduler.framework.backoff.random.uniform", lambda a, b: 0.0)


WATCH_FAILURES = [
    aiohttp.ClientPayloadError("Response payload is not completed"),
    aiohttp.ServerDisconnectedError(),
    aiohttp.ClientOSError(111, "Connect call failed"),
    ApiException(status=410, reason="Gone"),
    TimeoutError(),
    ValueError("malformed watch event"),
    RuntimeError("a bug in a handler"),
]
WATCH_IDS = ["payload-cut", "disconnected", "refused", "gone", "timeout", "decode", "handler-bug"]


@pytest.mark.usefixtures("no_backoff")
@pytest.mark.parametrize("failure", WATCH_FAILURES, ids=WATCH_IDS)
async def test_a_watch_failure_relists_and_never_ends_the_informer(
    failure: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = thing_store()
    lists: list[int] = []
    watches: list[int] = []
    relisted: list[str] = []
    s.on_relisted(lambda: relisted.append("first"))
    s.on_relisted(lambda: relisted.append("second"))
    forever = asyncio.Event()

    async def list_raw(endpoint: Any, token: str = "") -> dict[str, Any]:
        lists.append(1)
        return {"metadata": {"resourceVersion": str(len(lists))}, "items": [{"metadata": {"name": "a"}}]}

    async def watch(*args: Any) -> None:
        watches.append(1)
        if len(watches) == 1:
            assert s.down_for() == 0.0
            raise failure
        await forever.wait()

    monkeypatch.setattr(informer, "_list_raw", list_raw)
    monkeypatch.setattr(s, "_watch", watch)
    task = asyncio.get_running_loop().create_task(s.run(None))  # type: ignore[arg-type]
    for _ in range(100):
        if len(watches) >= 2:
            break
        await asyncio.sleep(0)
    assert (len(lists), len(watches)) == (2, 2), "re-listed, then watched again"
    assert relisted == ["first", "second"], "each relist handler, once, after the second LIST only"
    assert not task.done()
    assert s.failures == 1 and s.down_since is None and s.health(0.0) is None
    assert type(failure).__name__ in s.last_error
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.usefixtures("no_backoff")
async def test_an_informer_without_a_working_list_reports_how_long_it_is_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = thing_store()
    attempts: list[int] = []

    async def refused(endpoint: Any, token: str = "") -> dict[str, Any]:
        attempts.append(1)
        raise aiohttp.ClientOSError(111, "Connect call failed")

    monkeypatch.setattr(informer, "_list_raw", refused)
    task = asyncio.get_running_loop().create_task(s.run(None))  # type: ignore[arg-type]
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(attempts) > 3 and not task.done()
    assert s.health(90.0) is None  # not for long yet
    assert s.down_since is not None
    s.down_since = time.monotonic() - 120
    why = s.health(90.0)
    assert why is not None and why.startswith("thing watch down for 120s (last error: ClientOSError")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# --------------------------------------------------------------------------- OptionalResource

THINGS = ClusterResource("example.com", "v1", "things", "Thing")
THING_API = "Thing API example.com/v1"


class ScriptedApi:
    """Answers ``serves`` from ``answers`` in turn (a bool, or an exception to raise); the last
    one repeats."""

    def __init__(self, *answers: bool | Exception) -> None:
        self.answers = list(answers)
        self.client: Any = None
        self.checks = 0

    async def serves(self, res: ClusterResource) -> bool:
        assert res == THINGS
        self.checks += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.mark.usefixtures("no_backoff")
@pytest.mark.parametrize(
    ("answers", "settled_before_served", "said"),
    [
        pytest.param(
            (True,), False, [("INFO", "Thing API example.com/v1 is served: watching it")], id="served-at-once"
        ),
        pytest.param(
            (False, False, False, True),
            True,
            [
                ("INFO", f"{THING_API} is not served (its CRD is not installed); checking again every 0s"),
                ("INFO", "Thing API example.com/v1 is served: watching it"),
            ],
            id="installed-later-said-once",
        ),
        pytest.param(
            (
                ApiException(status=403, reason="Forbidden"),
                ApiException(status=403, reason="Forbidden"),
                True,
            ),
            True,
            [
                ("WARNING", "may not list things (Forbidden); checking again every 0s"),
                ("INFO", "Thing API example.com/v1 is served: watching it"),
            ],
            id="forbidden-is-not-served-warned-once",
        ),
        pytest.param(
            (aiohttp.ClientOSError(111, "Connect call failed"), ApiException(status=500, reason="x"), True),
            False,
            [
                (
                    "WARNING",
                    f"could not check for the {THING_API}: ClientOSError(111, 'Connect call failed')",
                ),
                ("WARNING", f"could not check for the {THING_API}: 500"),
                ("INFO", "Thing API example.com/v1 is served: watching it"),
            ],
            id="api-server-away-retried-not-settled",
        ),
    ],
)
async def test_an_optional_resource_is_watched_once_served(
    answers: tuple[bool | Exception, ...],
    settled_before_served: bool,
    said: list[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = thing_store()
    optional = OptionalResource(store, THINGS, interval=0.0)
    api = ScriptedApi(*answers)
    settled_early: list[bool] = []
    runs: list[int] = []
    forever = asyncio.Event()

    async def run(api_client: Any) -> None:
        runs.append(1)
        settled_early.append(optional.settled.is_set())
        store.down_since = None
        await asyncio.sleep(0)
        store.synced.set()
        await forever.wait()

    monkeypatch.setattr(store, "run", run)
    caplog.set_level("INFO", logger="ipscheduler.kube.informer")
    assert optional.health(0.0) is None, "no health check before the API is served"
    task = asyncio.get_running_loop().create_task(optional.run(api))  # type: ignore[arg-type]
    await asyncio.wait_for(optional.settled.wait(), 1)
    for _ in range(20):
        await asyncio.sleep(0)
    assert runs == [1] and api.checks == len(answers) and not task.done()
    assert settled_early == [settled_before_served]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == said
    assert optional.served and optional.health(0.0) is None
    store.down_since = time.monotonic() - 120
    assert (optional.health(90.0) or "").startswith("thing watch down for 120s")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
