"""PoolWriter: compare-and-swap writes of NodeIPPool status, coalesced per pool.

The group-commit writer every allocation goes through (Reserve, Unreserve,
release, repairs, status refresh). It reads and writes through the generic
cluster-object calls of :class:`ipscheduler.kube.client.KubeApi` with
:data:`~ipscheduler.underlayip.models.POOLS`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.backoff import Backoff
from ipscheduler.kube.client import Conflict, KubeApi
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import FINALIZER, POOLS, NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView

log = logging.getLogger(__name__)

CAS_ATTEMPTS = 20
"""Conflicting writes after which a batch gives up (RuntimeError)."""
CONFLICT_BACKOFF_INITIAL = 0.01
CONFLICT_BACKOFF_MAX = 0.64
"""Seconds before the re-read after a conflict: drawn in ``[0, delay]`` ("full jitter"),
the delay doubling from 10 ms to 640 ms."""

MutateFn = Callable[[PoolView, PoolContext], NodeIPPoolStatus | None]


@dataclass
class _Write:
    """One queued mutation; ``future`` is None for a deferred one nobody waits for."""

    mutate: MutateFn
    future: asyncio.Future[PoolView | None] | None


class PoolWriter:
    """Compare-and-swap writes of NodeIPPool status, coalesced per pool (group commit).

    :meth:`submit` queues ``mutate(pool, ctx) -> new status | None`` for a
    pool and returns a future. One flusher task per pool takes every queued
    mutation, applies them in order to the newest known pool (each one sees
    the status the previous one produced) and PUTs the combined status with
    the pool's resourceVersion: one write for all of them. On 409 it re-reads
    the pool and applies them all again (up to CAS_ATTEMPTS times, with
    jittered sleeps), so the allocation truth is always the API server's.
    A mutation that raises (e.g. ``PoolFull``) fails only its own future; the
    others are written. Mutations queued while a PUT is in flight go into the
    next one, so a burst of reservations on one pool costs one write per
    round trip instead of one per pod.

    :meth:`defer` queues a mutation nobody waits for (marking an allocation
    Bound) that rides along with the pool's next write: it never costs a write
    of its own. Whatever is still deferred when no write comes is the GC
    sweep's to write (:mod:`ipscheduler.underlayip.reconciler`), in batches;
    :meth:`drop_deferred` forgets the deferred mutations of a pool that is gone.

    No allocation without the finalizer: before the first write that adds an
    allocation to a pool lacking ``ipscheduler.io/allocations``, the finalizer is
    added by a resourceVersion-checked PATCH, and the status PUT carries the
    version that PATCH produced; a pool deleted meanwhile answers 404 or 409, and
    the mutations then see it gone or deleting (so nothing is reserved in it).

    The future resolves to the pool as written (or unchanged, when no
    mutation changed anything) or None when the pool is gone; it raises the
    mutation's own exception, or whatever the API call raised (ApiException,
    aiohttp's ClientError family, OSError, TimeoutError...), or RuntimeError
    after CAS_ATTEMPTS conflicts. Every future is settled, whatever happens.
    """

    def __init__(
        self,
        api: KubeApi,
        cache: PoolCache,
        on_conflict: Callable[[], object] = lambda: None,
        on_write: Callable[[int], object] = lambda mutations: None,
    ) -> None:
        """``on_conflict()`` is called for every 409 Conflict, ``on_write(mutations)`` for
        every write that landed, with the mutations it carried (the wing's metrics)."""
        self.api = api
        self.cache = cache
        self._queues: dict[str, list[_Write]] = {}
        self._deferred_keys: dict[str, set[Hashable]] = {}
        """The keys of the deferred mutations in each pool's queue (duplicates are dropped)."""
        self._flushers: dict[str, asyncio.Task[None]] = {}
        self.conflicts = 0
        self.writes = 0
        """Successful PUTs (for tests and the benchmark)."""
        self.on_conflict = on_conflict
        self.on_write = on_write

    # -- queueing --------------------------------------------------------
    def submit(self, name: str, mutate: MutateFn) -> asyncio.Future[PoolView | None]:
        """Queue ``mutate`` for pool ``name``; the future resolves once it is written, to the
        pool as written (or unchanged), or None when the pool is gone (``await`` it to apply
        a mutation and wait)."""
        future: asyncio.Future[PoolView | None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(name, []).append(_Write(mutate, future))
        self._kick(name)
        return future

    def defer(self, name: str, mutate: MutateFn, key: Hashable | None = None) -> None:
        """Queue ``mutate`` for pool ``name`` without waiting: it rides along with the pool's
        next write (a :meth:`submit` or :meth:`flush`), however late that comes; it never
        starts a write of its own. ``key`` (e.g. ``("mark_bound", uid)``): a deferred
        mutation with the same key still queued for the pool makes this one a duplicate,
        dropped. Failures are logged; the start-up reconcile and the GC sweep repair what a
        deferred mutation that never landed would have done."""
        if key is not None:
            keys = self._deferred_keys.setdefault(name, set())
            if key in keys:
                return
            keys.add(key)
        self._queues.setdefault(name, []).append(_Write(mutate, None))

    def pending(self, name: str) -> int:
        """Mutations queued for pool ``name`` and not yet taken into a write."""
        return len(self._queues.get(name, ()))

    def deferred_pools(self) -> set[str]:
        """The pools with deferred mutations queued (nobody waits for them)."""
        return {name for name, queue in self._queues.items() if any(w.future is None for w in queue)}

    def drop_deferred(self, name: str) -> int:
        """Forget the deferred mutations queued for pool ``name``, which is gone (deleted:
        no write would ever carry them); submitted ones stay, their write settles them.
        Returns how many were dropped."""
        queue = self._queues.get(name)
        self._deferred_keys.pop(name, None)
        if not queue:
            return 0
        kept = [w for w in queue if w.future is not None]
        if kept:
            self._queues[name] = kept
        else:
            del self._queues[name]
        return len(queue) - len(kept)

    def drop_deferred_except(self, names: Collection[str]) -> int:
        """:meth:`drop_deferred` for every pool not in ``names`` (e.g. a live LIST of the
        pools: the GC sweep's bound on what deleted pools leave queued). Returns how many."""
        return sum(self.drop_deferred(name) for name in self.deferred_pools() if name not in names)

    async def flush(self) -> None:
        """Write everything queued now, deferred mutations included, and wait for it."""
        for name in list(self._queues):
            self._kick(name)
        while self._flushers:
            await asyncio.gather(*self._flushers.values(), return_exceptions=True)

    def _kick(self, name: str) -> None:
        if name not in self._flushers:
            loop = asyncio.get_running_loop()
            self._flushers[name] = loop.create_task(self._flush(name), name=f"write NodeIPPool {name}")

    async def _flush(self, name: str) -> None:
        batch: list[_Write] = []
        try:
            while batch := self._queues.pop(name, []):
                self._deferred_keys.pop(name, None)
                await self._commit(name, batch)
        except asyncio.CancelledError:
            for w in batch:
                if w.future is not None and not w.future.done():
                    w.future.cancel()
            raise
        except BaseException as e:  # _commit settles its batch; this is the last line of defence
            log.exception("writer of NodeIPPool %s failed", name)
            for w in batch:
                if w.future is not None and not w.future.done():
                    w.future.set_exception(RuntimeError(f"NodeIPPool {name} writer failed: {e!r}"))
            raise
        finally:
            del self._flushers[name]

    # -- writing ---------------------------------------------------------
    async def _reread(self, name: str) -> PoolView | None:
        body = await self.api.get_cluster_object(POOLS, name)
        if body is None:
            self.cache.forget(name)
            return None
        pool = PoolView.from_obj(body)
        self.cache.store_fresh(pool)
        return pool

    async def _add_finalizer(self, pool: PoolView) -> PoolView | None:
        """PATCH our finalizer onto ``pool`` (resourceVersion-checked); the pool as written,
        None if gone. On Conflict the pool is re-read and returned unchanged (the caller
        looks again)."""
        try:
            body = await self.api.set_cluster_finalizers(
                POOLS, pool.name, pool.resource_version, [*pool.finalizers, FINALIZER]
            )
        except Conflict:
            self.conflicts += 1
            self.on_conflict()
            return await self._reread(pool.name)
        if body is None:
            self.cache.forget(pool.name)
            return None
        written = PoolView.from_obj(body)
        self.cache.store_fresh(written)
        log.info("NodeIPPool %s: finalizer %s added before its first allocation", pool.name, FINALIZER)
        return written

    async def _commit(self, name: str, batch: list[_Write]) -> None:
        """Write ``batch`` in one CAS (retrying on conflicts) and settle its futures."""
        try:
            pool = self.cache.pool(name) or await self._reread(name)
            backoff = Backoff(CONFLICT_BACKOFF_INITIAL, CONFLICT_BACKOFF_MAX, jitter=1.0)
            for _ in range(CAS_ATTEMPTS):
                if pool is None:
                    _settle(name, batch, None, {})
                    return
                view, errors = _apply(pool, self.cache.context(pool), batch)
                if view is pool:
                    _settle(name, batch, pool, errors)
                    return
                try:
                    if FINALIZER not in pool.finalizers and view.allocations.keys() - pool.allocations.keys():
                        pool = await self._add_finalizer(pool)
                        continue  # apply the batch again to the version that carries it
                    wire = view.status.to_wire()
                    body = await self.api.replace_cluster_status(POOLS, name, pool.resource_version, wire)
                except Conflict:
                    self.conflicts += 1
                    self.on_conflict()
                    await asyncio.sleep(backoff.next())
                    pool = await self._reread(name)
                    continue
                except ApiException as e:
                    if e.status == 404:
                        self.cache.forget(name)
                        _settle(name, batch, None, {})
                        return
                    raise
                # A CAS that succeeded changed nothing but the status (we sent it) and the
                # resourceVersion: no need to parse the whole object back.
                meta = body.get("metadata") or {}
                written = dataclasses.replace(view, resource_version=str(meta.get("resourceVersion", "")))
                self.cache.store_fresh(written, own_write=True)
                self.writes += 1
                self.on_write(len(batch))
                _settle(name, batch, written, errors)
                return
            raise RuntimeError(f"NodeIPPool {name}: gave up after {CAS_ATTEMPTS} conflicting writes")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            for w in batch:
                if w.future is None:
                    log.warning("deferred write of NodeIPPool %s failed: %s", name, e)
                elif not w.future.done():
                    w.future.set_exception(e)


def _apply(pool: PoolView, ctx: PoolContext, batch: list[_Write]) -> tuple[PoolView, dict[int, Exception]]:
    """Run the batch's mutations in order on ``pool``; the result (``pool`` itself if nothing
    changed) and the exceptions raised, by position."""
    view = pool
    errors: dict[int, Exception] = {}
    for i, w in enumerate(batch):
        try:
            status = w.mutate(view, ctx)
        except Exception as e:
            errors[i] = e
            continue
        if status is not None:
            view = dataclasses.replace(view, status=status)
    return view, errors


def _settle(name: str, batch: list[_Write], result: PoolView | None, errors: dict[int, Exception]) -> None:
    for i, w in enumerate(batch):
        error = errors.get(i)
        if w.future is None:
            if error is not None:
                log.warning("deferred write of NodeIPPool %s failed: %r", name, error)
        elif w.future.done():
            continue
        elif error is not None:
            w.future.set_exception(error)
        else:
            w.future.set_result(result)
