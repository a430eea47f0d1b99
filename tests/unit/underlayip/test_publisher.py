"""underlayip/publisher: the nodes' extended resource follows their pools' capacity."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.publisher import RESOURCE, ResourcePublisher, changes, desired
from tests.builders import pool_body
from tests.unit.fakes import pool_cache


def node(name: str, shown: int | None = None) -> NodeInfo:
    allocatable = {"pods": Decimal(110)} | ({RESOURCE: Decimal(shown)} if shown is not None else {})
    return NodeInfo(name=name, ready=True, allocatable=allocatable)


def pools(*bodies: dict[str, object]) -> dict[str, PoolView]:
    return {str(b["metadata"]["name"]): PoolView.from_obj(b) for b in bodies}  # type: ignore[index]


def test_desired_sums_the_pools_of_each_node_and_leaves_deleting_ones_out() -> None:
    views = pools(
        pool_body("a", "n1", capacity=4),
        pool_body("b", "n1", capacity=6),
        pool_body("c", "n2", capacity=3),
    )
    deleting = PoolView.from_obj(
        {
            **pool_body("d", "n3", capacity=9),
            "metadata": {
                "name": "d",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "resourceVersion": "1",
                "generation": 1,
            },
        }
    )
    views["d"] = deleting
    assert desired(views, {"a": 4, "b": 6, "c": 3, "d": 9}) == {"n1": 10, "n2": 3}


@pytest.mark.parametrize(
    ("want", "shown", "expected"),
    [
        ({"n1": 10}, {"n1": None}, {"n1": 10}),  # not there yet
        ({"n1": 10}, {"n1": 10}, {}),  # right
        ({"n1": 12}, {"n1": 10}, {"n1": 12}),  # a pool grew
        ({}, {"n1": 10}, {"n1": None}),  # the last pool went
        ({}, {"n1": None}, {}),  # nothing to do
        ({"gone": 5}, {}, {}),  # a pool of a node that does not exist: nothing to patch
    ],
    ids=["add", "same", "grow", "remove", "none", "no-node"],
)
def test_changes(want: dict[str, int], shown: dict[str, int | None], expected: dict[str, int | None]) -> None:
    nodes = {name: node(name, q) for name, q in shown.items()}
    assert changes(want, nodes, RESOURCE) == expected


class FakeNodeApi:
    def __init__(self) -> None:
        self.patches: list[tuple[str, str, int | None]] = []

    async def set_node_extended_resource(self, node: str, resource: str, quantity: int | None) -> None:
        self.patches.append((node, resource, quantity))


async def test_run_patches_what_differs_once_ready() -> None:
    cache = pool_cache(
        {"n1": [node("n1")], "n2": [node("n2", 7)], "n3": [node("n3", 5)]},
        {
            "a": [PoolView.from_obj(pool_body("a", "n1", addresses=["10.0.0.1-10.0.0.4"]))],
            "b": [PoolView.from_obj(pool_body("b", "n2", capacity=7))],
        },
    )
    api = FakeNodeApi()
    publisher = ResourcePublisher(api, cache)  # type: ignore[arg-type]
    assert publisher.pending() == {"n1": 4, "n3": None}
    ready = asyncio.Event()
    task = asyncio.create_task(publisher.run(ready))
    await asyncio.sleep(0.3)
    assert api.patches == [], "nothing before the caches are ready"
    ready.set()
    for _ in range(20):
        await asyncio.sleep(0.05)
        if len(api.patches) == 2:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert api.patches == [("n1", RESOURCE, 4), ("n3", RESOURCE, None)]
