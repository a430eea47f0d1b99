"""underlayip/publisher: the nodes' extended resource follows their pools' capacity."""

from __future__ import annotations

import asyncio
import re
from decimal import Decimal

import pytest

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip.pool import PoolView
from ipscheduler.underlayip.publisher import (
    RELEASED_ANNOTATION,
    RESOURCE,
    ResourcePublisher,
    changes,
    desired,
    grown,
    node_patch,
)
from tests.builders import bound_allocs, pool, pool_body
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


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        ({"a": ("n1", 2)}, {"a": ("n1", 3)}, {"n1"}),
        ({"a": ("n1", 3)}, {"a": ("n1", 2)}, set()),
        ({"a": ("n1", 3)}, {"a": ("n1", 3)}, set()),
        ({}, {"a": ("n1", 3)}, set()),
        ({"a": ("n1", 0), "b": ("n2", 1)}, {"a": ("n1", 1), "b": ("n2", 1)}, {"n1"}),
        ({"a": ("n1", 0), "b": ("n1", 1)}, {"a": ("n1", 1), "b": ("n1", 0)}, {"n1"}),
    ],
    ids=["released", "taken", "same", "new-pool", "one-of-two-nodes", "freed-in-one-pool-taken-in-another"],
)
def test_grown(
    before: dict[str, tuple[str, int]], now: dict[str, tuple[str, int]], expected: set[str]
) -> None:
    assert grown(before, now) == expected


@pytest.mark.parametrize(
    ("resource", "quantity", "stamp", "expected"),
    [
        (RESOURCE, 4, None, {"status": {"capacity": {RESOURCE: "4"}, "allocatable": {RESOURCE: "4"}}}),
        (RESOURCE, None, None, {"status": {"capacity": {RESOURCE: None}, "allocatable": {RESOURCE: None}}}),
        (None, None, "T", {"metadata": {"annotations": {RELEASED_ANNOTATION: "T"}}}),
        (
            RESOURCE,
            2,
            "T",
            {
                "status": {"capacity": {RESOURCE: "2"}, "allocatable": {RESOURCE: "2"}},
                "metadata": {"annotations": {RELEASED_ANNOTATION: "T"}},
            },
        ),
    ],
    ids=["set", "remove", "stamp-only", "both"],
)
def test_node_patch(
    resource: str | None, quantity: int | None, stamp: str | None, expected: dict[str, object]
) -> None:
    assert node_patch(resource, quantity, stamp) == expected


class FakeNodeApi:
    def __init__(self, fail: int = 0) -> None:
        self.patches: list[tuple[str, dict[str, object]]] = []
        self.fail = fail

    async def patch_node_status(self, node: str, patch: dict[str, object]) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("apiserver away")
        self.patches.append((node, patch))


def resource_of(patch: dict[str, object]) -> object:
    return patch["status"]["allocatable"][RESOURCE]  # type: ignore[index]


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
    assert [(n, resource_of(p)) for n, p in api.patches] == [("n1", "4"), ("n3", None)]
    assert all("metadata" not in p for _, p in api.patches), "nothing was freed: no stamp"


def holding(name: str, node_name: str, n: int) -> list[PoolView]:
    """Pool ``name`` of node ``node_name``: 4 addresses of its own (10.<node number>.0.1-4),
    the first ``n`` Bound."""
    prefix = f"10.{node_name[1:]}.0."
    return [pool(name, node_name, addresses=[f"{prefix}1-{prefix}4"], allocations=bound_allocs(n, prefix))]


async def test_a_node_whose_free_addresses_grew_is_stamped_until_a_patch_goes_through() -> None:
    index = {"a": holding("a", "n1", 2), "b": holding("b", "n2", 1)}
    cache = pool_cache({"n1": [node("n1", 4)], "n2": [node("n2", 4)]}, index)
    publisher = ResourcePublisher(FakeNodeApi(), cache)  # type: ignore[arg-type]
    assert publisher.take_patches() == {}, "the first call only learns the free counts"
    index["a"] = holding("a", "n1", 1)  # an address of n1 released
    index["b"] = holding("b", "n2", 2)  # one more of n2 taken: no stamp
    cache.invalidate()
    first = publisher.take_patches()
    assert list(first) == ["n1"]
    stamp = first["n1"]["metadata"]["annotations"][RELEASED_ANNOTATION]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), stamp
    assert "status" not in first["n1"], "the resource is right: only the stamp"
    assert list(publisher.take_patches()) == ["n1"], "not patched yet: the stamp is kept"
    publisher.patched("n1")
    assert publisher.take_patches() == {}


async def test_a_failed_stamp_is_sent_again() -> None:
    index = {"a": holding("a", "n1", 2)}
    cache = pool_cache({"n1": [node("n1", 4)]}, index)
    api = FakeNodeApi(fail=1)
    publisher = ResourcePublisher(api, cache)  # type: ignore[arg-type]
    ready = asyncio.Event()
    ready.set()
    task = asyncio.create_task(publisher.run(ready))
    await asyncio.sleep(0.3)
    index["a"] = holding("a", "n1", 0)
    cache.invalidate()
    publisher._on_event()
    for _ in range(60):
        await asyncio.sleep(0.05)
        if api.patches:
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert [(n, list(p)) for n, p in api.patches] == [("n1", ["metadata"])]
