"""underlayip/writer.PoolWriter: group commit of NodeIPPool status mutations, CAS retries,
deferred mutations (which ride along with a pool's next write and never cost one of their own)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.types import NodeInfo
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import FINALIZER
from ipscheduler.underlayip.pool import PoolContext, PoolView
from ipscheduler.underlayip.writer import CAS_ATTEMPTS, MutateFn, PoolWriter
from tests.builders import SINCE, alloc, pool_body
from tests.unit.fakes import FakePoolApi, pool_cache


def body(
    name: str = "p", addresses: str = "10.0.0.1-10.0.0.4", finalizer: bool = True, **allocs: str
) -> dict[str, Any]:
    """A pool on node-a with our finalizer (unless told) and ``allocs`` Reserved (uid → ip)."""
    return pool_body(
        name,
        addresses=[addresses],
        rv="10",
        finalizers=[FINALIZER] if finalizer else None,
        allocations={uid: alloc(ip, pod=f"ns/{uid}") for uid, ip in allocs.items()},
    )


def setup(*bodies: dict[str, Any], **observers: Any) -> tuple[FakePoolApi, PoolCache, PoolWriter]:
    cache = pool_cache(
        {"node-a": [NodeInfo(name="node-a", ready=True)]},
        {b["metadata"]["name"]: [PoolView.from_obj(b)] for b in bodies},
    )
    api = FakePoolApi(list(bodies))
    return api, cache, PoolWriter(api, cache, **observers)  # type: ignore[arg-type]


def reserve(uid: str) -> MutateFn:
    def mutate(p: PoolView, ctx: PoolContext) -> Any:
        return allocator.reserve(p, ctx, uid, f"ns/{uid}")[0]

    return mutate


def ips(api: FakePoolApi, name: str = "p") -> dict[str, str]:
    return {uid: a["ip"] for uid, a in api.bodies[name]["status"]["allocations"].items()}


async def test_concurrent_mutations_are_one_write_in_order() -> None:
    carried: list[int] = []
    api, _, writer = setup(body(), on_write=carried.append)
    futures = [writer.submit("p", reserve(f"u{i}")) for i in range(3)]
    written = await asyncio.gather(*futures)
    assert api.puts == ["p"]
    assert carried == [3]  # what the ipscheduler_pool_status_mutations metric counts
    assert ips(api) == {"u0": "10.0.0.1", "u1": "10.0.0.2", "u2": "10.0.0.3"}
    assert all(w is written[0] for w in written)
    assert written[0] is not None and written[0].status.allocated == 3


async def test_a_failing_mutation_fails_only_its_own_future() -> None:
    api, _, writer = setup(body(addresses="10.0.0.1-10.0.0.2"))
    futures = [writer.submit("p", reserve(f"u{i}")) for i in range(3)]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert isinstance(results[2], allocator.PoolFull)
    assert ips(api) == {"u0": "10.0.0.1", "u1": "10.0.0.2"}
    assert api.puts == ["p"]


async def test_mutations_queued_during_a_write_go_into_the_next_one() -> None:
    api, _, writer = setup(body())
    first = writer.submit("p", reserve("u0"))
    await asyncio.sleep(0)  # the flusher has taken u0 and is writing
    later = [writer.submit("p", reserve(f"u{i}")) for i in (1, 2)]
    await asyncio.gather(first, *later)
    assert api.puts == ["p", "p"]
    assert sorted(ips(api).values()) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


async def test_conflict_rereads_and_reapplies_every_mutation() -> None:
    """Another replica took 10.0.0.1 meanwhile: our batch is re-applied on its version."""
    api, cache, writer = setup(body())
    api.racing_write("p", {"other": alloc("10.0.0.1", pod="ns/other", phase="Bound")})
    await asyncio.gather(writer.submit("p", reserve("u0")), writer.submit("p", reserve("u1")))
    assert writer.conflicts == 1
    assert ips(api) == {"other": "10.0.0.1", "u0": "10.0.0.2", "u1": "10.0.0.3"}
    pool = cache.pool("p")
    assert pool is not None and set(pool.allocations) == {"other", "u0", "u1"}


async def test_gives_up_after_cas_attempts_conflicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipscheduler.underlayip.writer.CONFLICT_BACKOFF_INITIAL", 0.0)  # no sleeps
    api, _, writer = setup(body())
    real = api.replace_cluster_status

    async def always_stale(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        api.racing_write("p", {})
        return await real(res, name, rv, status)

    api.replace_cluster_status = always_stale  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="gave up"):
        await writer.submit("p", reserve("u0"))
    assert writer.conflicts == CAS_ATTEMPTS


async def test_nothing_to_change_writes_nothing_and_a_missing_pool_is_none() -> None:
    api, _, writer = setup(body(u0="10.0.0.1"))
    unchanged = await writer.submit("p", functools.partial(allocator.release, uid="nobody"))
    assert unchanged is not None and api.puts == []
    assert await writer.submit("gone", reserve("u1")) is None


def mark(uid: str) -> MutateFn:
    return functools.partial(allocator.mark_bound, uid=uid)


async def wait_an_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let an hour pass on the event loop's clock (no real waiting): every timer armed
    before now is due, and the loop runs what is ready."""
    loop = asyncio.get_running_loop()
    real = loop.time
    monkeypatch.setattr(loop, "time", lambda: real() + 3600.0)
    for _ in range(3):
        await asyncio.sleep(0)
    await asyncio.sleep(0.001)


@pytest.mark.parametrize(
    "next_write",
    [
        pytest.param("submit", id="a-submit"),
        pytest.param("flush", id="a-flush"),
    ],
)
async def test_a_deferred_mutation_is_never_written_alone_only_with_the_pools_next_write(
    monkeypatch: pytest.MonkeyPatch, next_write: str
) -> None:
    api, _, writer = setup(body(u0="10.0.0.1"))
    writer.defer("p", mark("u0"), key=allocator.mark_bound_key("u0"))
    await wait_an_hour(monkeypatch)
    assert api.puts == [] and writer.pending("p") == 1, "a deferred mutation costs no write of its own"
    if next_write == "submit":
        await writer.submit("p", reserve("u1"))
    else:
        await writer.flush()
    assert api.puts == ["p"] and writer.pending("p") == 0
    allocs = api.bodies["p"]["status"]["allocations"]
    assert allocs["u0"]["phase"] == "Bound"
    assert next_write == "flush" or allocs["u1"]["phase"] == "Reserved"


@pytest.mark.parametrize(
    ("keys", "queued"),
    [
        pytest.param(["u0", "u0", "u0"], 1, id="same-pods-mark-deferred-thrice"),
        pytest.param(["u0", "u1", "u0"], 2, id="two-pods"),
        pytest.param([None, None], 2, id="no-key-no-deduplication"),
    ],
)
async def test_duplicate_deferred_mutations_do_not_pile_up(keys: list[str | None], queued: int) -> None:
    api, _, writer = setup(body(u0="10.0.0.1", u1="10.0.0.2"))
    for key in keys:
        writer.defer("p", mark(key or "u0"), key=None if key is None else allocator.mark_bound_key(key))
    assert writer.pending("p") == queued
    await writer.flush()
    assert api.puts == ["p"]
    writer.defer(
        "p", mark("u0"), key=allocator.mark_bound_key("u0")
    )  # the first one is written: queued again
    assert writer.pending("p") == 1


async def test_deferred_mutations_of_a_deleted_pool_are_dropped() -> None:
    """A pool deleted before its next write would keep its deferred mutations forever: the
    pool informer's DELETED event (drop_deferred) and the GC sweep's LIST
    (drop_deferred_except) drop them; a submitted mutation is kept, its write settles it."""
    api, _, writer = setup(
        *(body(name, addresses=f"10.0.{i}.1-10.0.{i}.4", u0=f"10.0.{i}.1") for i, name in enumerate("pqr"))
    )
    for name in ("p", "q", "r"):
        writer.defer(name, mark("u0"), key=allocator.mark_bound_key("u0"))
    assert writer.deferred_pools() == {"p", "q", "r"}
    assert writer.drop_deferred("p") == 1 and writer.drop_deferred("p") == 0
    assert writer.drop_deferred_except({"r"}) == 1
    assert writer.deferred_pools() == {"r"} and writer.pending("q") == 0
    writer.defer("p", mark("u0"), key=allocator.mark_bound_key("u0"))  # the key went with the drop
    assert writer.pending("p") == 1
    submitted = writer.submit("r", reserve("u1"))  # queued behind r's deferred mark
    assert writer.drop_deferred("r") == 1 and writer.pending("r") == 1
    written = await submitted
    assert written is not None and written.allocations["u0"].phase == "Reserved"
    assert api.puts == ["r"]


# ---------------------------------------------------------------- no allocation without the finalizer


async def test_first_allocation_adds_the_finalizer_before_the_status_write() -> None:
    api, _, writer = setup(body(finalizer=False))
    order: list[str] = []
    real_patch, real_put = api.set_cluster_finalizers, api.replace_cluster_status

    async def patch(res: Any, name: str, rv: str, finalizers: list[str]) -> dict[str, Any] | None:
        order.append(f"finalizers {rv}")
        return await real_patch(res, name, rv, finalizers)

    async def put(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        order.append(f"status {rv}")
        return await real_put(res, name, rv, status)

    api.set_cluster_finalizers = patch  # type: ignore[method-assign]
    api.replace_cluster_status = put  # type: ignore[method-assign]
    written = await writer.submit("p", reserve("u0"))
    assert order == ["finalizers 10", "status 11"]
    assert api.bodies["p"]["metadata"]["finalizers"] == [FINALIZER]
    assert written is not None and FINALIZER in written.finalizers and "u0" in written.allocations
    await writer.submit("p", reserve("u1"))  # carries it already: no second PATCH
    assert api.finalizer_patches == ["p"]


async def test_a_write_that_adds_no_allocation_needs_no_finalizer() -> None:
    api, _, writer = setup(body(finalizer=False, u0="10.0.0.1"))
    await writer.submit("p", functools.partial(allocator.release, uid="u0"))
    assert api.finalizer_patches == [] and api.puts == ["p"]


async def test_pool_deleted_before_its_finalizer_reserves_nothing() -> None:
    api, _, writer = setup(body(finalizer=False))
    del api.bodies["p"]  # deleted (no finalizer yet): gone at once
    assert await writer.submit("p", reserve("u0")) is None
    assert api.puts == []


async def test_pool_marked_deleting_before_its_finalizer_refuses_the_reservation() -> None:
    api, _, writer = setup(body(finalizer=False))
    real_patch = api.set_cluster_finalizers

    async def deleted_meanwhile(res: Any, name: str, rv: str, finalizers: list[str]) -> dict[str, Any] | None:
        # Another finalizer kept it: the deletion only set deletionTimestamp (a new version).
        api.bodies["p"]["metadata"]["deletionTimestamp"] = SINCE
        api.bodies["p"]["metadata"]["resourceVersion"] = "11"
        return await real_patch(res, name, rv, finalizers)

    api.set_cluster_finalizers = deleted_meanwhile  # type: ignore[method-assign]
    with pytest.raises(allocator.PoolFull):
        await writer.submit("p", reserve("u0"))
    assert api.puts == [] and api.bodies["p"]["status"]["allocations"] == {}


# --------------------------------------------------------------------------- every future settled


@pytest.mark.parametrize(
    "error",
    [
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientPayloadError("Response payload is not completed"),
        ApiException(status=503, reason="Service Unavailable"),
        TimeoutError(),
        KeyError("a bug"),
    ],
    ids=["server-disconnected", "payload-cut", "503", "timeout", "unexpected-exception"],
)
async def test_a_failed_put_settles_every_future_with_its_error(error: Exception) -> None:
    api, _, writer = setup(body())

    async def broken(res: Any, name: str, rv: str, status: dict[str, Any]) -> dict[str, Any]:
        raise error

    api.replace_cluster_status = broken  # type: ignore[method-assign]
    futures = [writer.submit("p", reserve(f"u{i}")) for i in range(3)]
    done = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout=5)
    assert [type(r) for r in done] == [type(error)] * 3
    assert writer.pending("p") == 0
    api.replace_cluster_status = FakePoolApi.replace_cluster_status.__get__(api)  # type: ignore[method-assign]
    assert (await writer.submit("p", reserve("u9"))) is not None  # the writer still works
