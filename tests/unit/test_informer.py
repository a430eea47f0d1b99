"""ObjectStore: the name index and the events an informer reports (no API server)."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.kube.informer import ObjectStore


def obj(name: str, value: Any = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "1"}, "value": value}


def store() -> tuple[ObjectStore[int], list[tuple[str | None, str, int | None]]]:
    seen: list[tuple[str | None, str, int | None]] = []

    def parse(body: dict[str, Any]) -> int | None:
        v = body.get("value")
        return v if isinstance(v, int) else None

    s: ObjectStore[int] = ObjectStore(
        "thing", lambda api: (print, (), {}), parse, lambda kind, name, body, v: seen.append((kind, name, v))
    )
    return s, seen


def test_first_list_reports_kind_none_and_fills_the_index() -> None:
    s, seen = store()
    s.replace_all([obj("a", 1), obj("b", 2), {"metadata": {}}])
    assert seen == [(None, "a", 1), (None, "b", 2)]
    assert s.index == {"a": (1,), "b": (2,)} and s.get("b") == 2 and s.get("c") is None


def test_relist_reports_modified_and_the_vanished_as_deleted_with_their_last_value() -> None:
    s, seen = store()
    s.replace_all([obj("a", 1), obj("gone", 7)])
    s.synced.set()
    seen.clear()
    s.replace_all([obj("a", 3), obj("new", 4)])
    assert seen == [("MODIFIED", "a", 3), ("MODIFIED", "new", 4), ("DELETED", "gone", 7)]
    assert s.index == {"a": (3,), "new": (4,)}


@pytest.mark.parametrize(
    ("events", "index", "reported"),
    [
        ([("ADDED", obj("a", 1))], {"a": (1,)}, [("ADDED", "a", 1)]),
        (
            [("ADDED", obj("a", 1)), ("MODIFIED", obj("a", 2))],
            {"a": (2,)},
            [("ADDED", "a", 1), ("MODIFIED", "a", 2)],
        ),
        ([("ADDED", obj("a", 1)), ("DELETED", obj("a", 1))], {}, [("ADDED", "a", 1), ("DELETED", "a", 1)]),
        ([("DELETED", obj("never", 1))], {}, [("DELETED", "never", None)]),
        (
            [("ADDED", obj("a", 1)), ("MODIFIED", obj("a", "bad"))],
            {},
            [("ADDED", "a", 1), ("MODIFIED", "a", None)],
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
