"""coscheduling/controller: the index follows the informers, new groups and members move the
queue, and a group's status is written only when its pods say something new."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.coscheduling import events
from ipscheduler.coscheduling.controller import PodGroupController
from ipscheduler.coscheduling.groups import GroupIndex, Member
from ipscheduler.coscheduling.models import PodGroupView
from ipscheduler.framework.interface import ClusterEvent


class Api:
    """Records status patches (``patch_namespaced_status``) and answers ``serves``."""

    def __init__(self, served: bool = True) -> None:
        self.served = served
        self.patches: list[tuple[str, str, dict[str, Any]]] = []

    async def serves(self, res: object) -> bool:
        return self.served

    async def patch_namespaced_status(self, res: object, ns: str, name: str, status: dict[str, Any]) -> bool:
        self.patches.append((ns, name, status))
        return True


def controller(api: Api | None = None) -> tuple[PodGroupController, list[ClusterEvent], Api]:
    moved: list[ClusterEvent] = []
    api = api or Api()
    c = PodGroupController(api, GroupIndex(), requeue=lambda e, old, new: moved.append(e))  # type: ignore[arg-type]
    return c, moved, api


GROUP = PodGroupView(
    "ns", "g", uid="u", min_member=2, creation=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
)


def member(uid: str, node: str = "") -> Member:
    return Member(uid, "ns", uid, "ns/g", node_name=node)


def test_a_new_group_and_a_new_member_move_the_queue_once_each() -> None:
    c, moved, _ = controller()
    c.on_group(None, "ns/g", {}, None, GROUP)
    c.on_group("MODIFIED", "ns/g", {}, GROUP, GROUP)  # status-only change: no move
    c.on_member("ADDED", "a", {}, None, member("a"))
    c.on_member("MODIFIED", "a", {}, member("a"), member("a", "n1"))
    assert moved == [events.POD_GROUP_CHANGE, events.GROUP_MEMBER_ADD]
    assert c.index.group("ns/g") is GROUP
    assert c.index.active_count("ns/g") == 1


@pytest.mark.parametrize(
    ("change", "moves"),
    [
        ({"status": {"phase": "Scheduling"}}, False),
        ({"min_member": 3}, True),
        ({"timeout": 30.0}, True),
        ({"min_resources": {"cpu": Decimal(2)}}, True),
    ],
    ids=["status-only", "min-member", "timeout", "min-resources"],
)
def test_a_spec_change_moves_the_groups_pods(change: dict[str, Any], moves: bool) -> None:
    c, moved, _ = controller()
    c.on_group(None, "ns/g", {}, None, GROUP)
    c.on_group("MODIFIED", "ns/g", {}, GROUP, dataclasses.replace(GROUP, **change))
    assert moved == [events.POD_GROUP_CHANGE] * (2 if moves else 1)


def test_status_is_written_when_it_changes_and_not_again() -> None:
    async def go() -> list[tuple[str, str, dict[str, Any]]]:
        c, _, api = controller()
        c.on_group(None, "ns/g", {}, None, GROUP)
        for uid in ("a", "b"):
            c.on_member("ADDED", uid, {}, None, member(uid, "n1"))
        assert await c.sync("ns/g")
        assert not await c.sync("ns/g")  # the index holds what was written
        return api.patches

    patches = asyncio.run(go())
    assert len(patches) == 1
    ns, name, status = patches[0]
    assert (ns, name, status["phase"], status["scheduled"]) == ("ns", "g", "Scheduled", 2)


def test_without_the_api_the_index_says_so() -> None:
    async def go() -> bool:
        c, _, _ = controller(Api(served=False))
        return await c._served() or c.index.installed

    assert asyncio.run(go()) is False


def test_events_queue_the_groups_status_write() -> None:
    c, _, _ = controller()
    c.on_group(None, "ns/g", {}, None, GROUP)
    c.on_member("ADDED", "a", {}, None, dataclasses.replace(member("a"), group="ns/h"))
    assert c.status_queue.pending() == frozenset({"ns/g", "ns/h"})


def test_a_failed_status_write_is_retried_after_its_backoff_and_forgotten_once_written() -> None:
    class Failing(Api):
        fail = True

        async def patch_namespaced_status(
            self, res: object, ns: str, name: str, status: dict[str, Any]
        ) -> bool:
            if self.fail:
                raise OSError("connection refused")
            return await super().patch_namespaced_status(res, ns, name, status)

    async def go() -> tuple[int, int, int]:
        api = Failing()
        c, _, _ = controller(api)
        c.on_group(None, "ns/g", {}, None, GROUP)
        c.on_member("ADDED", "a", {}, None, member("a", "n1"))
        await c._write(c.status_queue.take())
        failed = c.status_queue.num_requeues("ns/g")
        api.fail = False
        await c._write(frozenset({"ns/g"}))
        c.status_queue.shut_down()
        return failed, c.status_queue.num_requeues("ns/g"), len(api.patches)

    assert asyncio.run(go()) == (1, 0, 1)
