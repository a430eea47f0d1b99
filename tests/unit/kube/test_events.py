"""EventRecorder: deduplication, and emit() that never waits for the API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ipscheduler.kube.events import EventRecorder, pod_key_ref

POD = {"kind": "Pod", "apiVersion": "v1", "namespace": "ns", "name": "p", "uid": "u1"}


class Api:
    """create_event/patch_event that wait for ``gate`` and remember what was sent."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.created: list[dict[str, Any]] = []
        self.patched: list[dict[str, Any]] = []

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        await self.gate.wait()
        self.created.append(body)
        return {"metadata": {"name": f"e{len(self.created)}", "namespace": namespace}}

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self.gate.wait()
        self.patched.append(patch)


def recorder(api: Api, **kw: Any) -> EventRecorder:
    return EventRecorder(api, **kw)  # type: ignore[arg-type]


async def test_emit_returns_before_the_api_answers_and_flush_waits() -> None:
    api = Api()
    rec = recorder(api)
    rec.emit(POD, "Normal", "Scheduled", "Successfully assigned ns/p to n1")
    await asyncio.sleep(0)
    assert api.created == []  # the POST is still waiting: emit did not
    api.gate.set()
    await rec.flush()
    assert [(b["reason"], b["involvedObject"]["uid"]) for b in api.created] == [("Scheduled", "u1")]


async def test_emit_drops_beyond_max_queued() -> None:
    api = Api()
    rec = recorder(api, max_queued=2)
    for i in range(5):
        rec.emit({**POD, "name": f"p{i}", "uid": f"u{i}"}, "Normal", "Scheduled", "m")
    assert rec.dropped == 3
    api.gate.set()
    await rec.flush()
    assert [b["involvedObject"]["name"] for b in api.created] == ["p0", "p1"]
    rec.emit(POD, "Normal", "Scheduled", "after the queue drained")
    await rec.flush()
    assert len(api.created) == 3 and rec.dropped == 3


async def test_flush_timeout_cancels_what_is_still_in_flight() -> None:
    rec = recorder(Api())  # the gate never opens
    rec.emit(POD, "Warning", "FailedScheduling", "0/3 nodes are available")
    await rec.flush(grace=0.01)
    assert not rec._in_flight


@pytest.mark.parametrize(
    ("message2", "created", "patched"),
    [
        pytest.param("same", 1, 1, id="repeat-bumps-count"),
        pytest.param("other", 2, 0, id="new-message-new-event"),
    ],
)
async def test_record_deduplicates_like_the_correlator(message2: str, created: int, patched: int) -> None:
    api = Api()
    api.gate.set()
    rec = recorder(api, min_interval=0.0)
    await rec.record(POD, "Warning", "FailedScheduling", "same")
    await rec.record(POD, "Warning", "FailedScheduling", message2)
    assert (len(api.created), len(api.patched)) == (created, patched)
    if patched:
        assert api.patched[0]["count"] == 2


async def test_dedup_remembers_the_most_recent_events_only() -> None:
    """An LRU of ``max_entries`` (client-go's 4096): the least recently recorded event is
    forgotten first, so its repeat creates a new event; memory stays bounded."""
    api = Api()
    api.gate.set()
    rec = recorder(api, max_entries=2, min_interval=0.0)
    pods = [{**POD, "name": f"p{i}", "uid": f"u{i}"} for i in range(3)]
    await rec.record(pods[0], "Normal", "Scheduled", "m")
    await rec.record(pods[1], "Normal", "Scheduled", "m")
    await rec.record(pods[0], "Normal", "Scheduled", "m")  # a repeat: p0 is now the most recent
    await rec.record(pods[2], "Normal", "Scheduled", "m")  # evicts p1
    assert (len(api.created), len(api.patched)) == (3, 1)
    await rec.record(pods[0], "Normal", "Scheduled", "m")  # still remembered
    await rec.record(pods[1], "Normal", "Scheduled", "m")  # forgotten: a new event
    assert (len(api.created), len(api.patched)) == (4, 2)
    assert len(rec._seen) == 2 and set(rec._keys_of) == {"u0", "u1"}


@pytest.mark.parametrize(
    ("key", "uid", "ref"),
    [
        (
            "ns/web-0",
            "u1",
            {"kind": "Pod", "apiVersion": "v1", "namespace": "ns", "name": "web-0", "uid": "u1"},
        ),
        ("ns/web-0", "", {"kind": "Pod", "apiVersion": "v1", "namespace": "ns", "name": "web-0"}),
    ],
    ids=["with-uid", "without-uid"],
)
def test_the_ref_of_a_pod_named_by_its_key(key: str, uid: str, ref: dict[str, str]) -> None:
    """As an allocation records its pod (``namespace/name``); the same as PodInfo.ref."""
    assert pod_key_ref(key, uid) == ref
    if uid:
        from tests.builders import pod_info

        assert pod_info("web-0", uid=uid).ref == ref
