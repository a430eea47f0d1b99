"""UnderlayIP's reservation manager: where a pod's address is reserved, written, given back.

As kube-scheduler's VolumeBinding plugin sits over its volume binder
(``pkg/scheduler/framework/plugins/volumebinding/binder.go``: assume in Reserve, write in
PreBind, revert in Unreserve), UnderlayIP sits over :class:`ReservationManager`:

- **candidates**: the node's pools the pod may use, in the order Reserve tries them;
- **reserve**: assume a place in the first candidate with room (the cache counts it as
  taken) and queue its compare-and-swap write (:func:`ipscheduler.underlayip.allocator.reserve`
  decides, in the pool as written, which address and whether it is the identity's
  Retained one taken back);
- **commit** (PreBind): wait for that write; if the pool turned out full (a stale cache,
  another replica), try the node's other candidates one by one;
- **unreserve**: after a live read shows the pod not bound with it, release what this
  cycle wrote, and only that (CAS on ``reservedBy``); a Retained address taken back is
  Retained again;
- **mark_bound** (PostBind): a deferred mutation that rides along with the pool's next
  write; what no write carries within ``--bound-mark-delay`` the GC sweep writes.

Each cycle's part is a :class:`CycleReservation`, kept in the plugin's cycle state.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import logging
import secrets
import socket
import uuid
from dataclasses import dataclass, field

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.interface import Status
from ipscheduler.framework.klog import kv
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import TRANSIENT_ERRORS, KubeApi, live_pod
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import ANNOTATION_POOL, NOMINATED, RESERVED, RETAINED, NodeIPPoolStatus
from ipscheduler.underlayip.pool import PoolContext, PoolView, freed_by_eviction, network_of, utc_now
from ipscheduler.underlayip.retention import Retention
from ipscheduler.underlayip.selection import PoolChoice, may_use
from ipscheduler.underlayip.writer import MutateFn, PoolWriter

log = logging.getLogger(__name__)

NAME = "UnderlayIP"
ERR_NO_FREE = "node(s) had no free underlay IPs"


@dataclass
class _Write:
    """One queued reservation write: its pool, its future (the pool as written; None: the
    pool is gone) and what the mutation decided the last time the writer called it."""

    pool: str
    decided: allocator.Reservation | None = None
    future: asyncio.Future[PoolView | None] = field(init=False)


@dataclass
class CycleReservation:
    """One scheduling cycle's reservation for one pod.

    What the cycle asks: ``choice``, the pools the pod may use (from PreFilter);
    ``retention``, its release policy, recorded with a new address; ``held``, the pool of
    the Retained address the pod is held to (None: any usable pool of the node).

    What it did: ``owner``: the cycle's ``reservedBy`` (``<replica identity>/<token>``); ``written``:
    every pool this cycle queued a write to (what Unreserve may undo); ``pending``: the
    write Reserve queued, until PreBind waits for it; ``pool``/``ip``: the allocation made
    (``ip`` None: a count-only slot); ``network``: its CNI IPAM result (JSON, for the
    ``ipscheduler.io/network`` annotation); ``taken_back``: the pool where the identity's
    Retained address was taken back (None: a new address)."""

    choice: PoolChoice
    retention: Retention
    held: PoolView | None = None
    owner: str = ""
    written: set[str] = field(default_factory=set)
    pending: _Write | None = None
    pool: str | None = None
    ip: str | None = None
    network: str = ""
    taken_back: str | None = None


class ReservationManager:
    """Reserves, writes and gives back a pod's address in its node's pools (module doc).

    ``api`` is read live by :meth:`unreserve` (None: release without reading).
    ``identity``: this replica's, recorded in every reservation (default: host name and a
    random suffix). ``reserved_ttl``: seconds after which a Reserved allocation of a pod
    still pending counts as abandoned by its cycle and may be taken over.
    ``takeover_before``: when this replica took the scheduler's Lease (None: no leader
    election); another replica's Reserved allocations made before then are abandoned at
    once (:func:`ipscheduler.underlayip.allocator.abandoned`)."""

    def __init__(
        self,
        cache: PoolCache,
        writer: PoolWriter,
        api: KubeApi | None = None,
        identity: str = "",
        reserved_ttl: float = 60.0,
        takeover_before: datetime.datetime | None = None,
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.api = api
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"
        self.reserved_ttl = reserved_ttl
        self.takeover_before = takeover_before

    def candidates(
        self, pod: PodInfo, node: NodeInfo, choice: PoolChoice, skip: str = "", kept: PoolView | None = None
    ) -> list[PoolView]:
        """The pools of ``node`` the pod may use (``choice``: its pools, from PreFilter) to
        reserve in: the one keeping its retained address (``kept``) alone, else one holding
        the pod's allocation first, then in the pod's order of preference
        (``ipscheduler.io/pools``), then by most available (assumed reservations deducted),
        then by name. ``skip``: a pool already tried."""
        if kept is not None:
            pool = self.cache.pool(kept.name)
            return [pool] if pool is not None and pool.node_name == node.name and pool.name != skip else []
        pools = [
            p
            for p in self.cache.pools_for_node(node.name)
            if p.node_name == node.name and p.name != skip and may_use(pod, choice, p)
        ]
        held = [p for p in pools if pod.uid in p.allocations]
        rest = sorted(
            (p for p in pools if pod.uid not in p.allocations),
            key=lambda p: (choice.rank(p.name), -self.cache.available(p), p.name),
        )
        return held + rest

    def reserve(self, r: CycleReservation, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume a place for the pod in the first of :meth:`candidates` with room and queue
        its write (no I/O here: :meth:`commit` waits for it). Until the write lands the cache
        counts the place as taken, so the cycles running meanwhile do not give it away;
        concurrent reservations in one pool are coalesced into one write by the PoolWriter.
        A pod whose allocation on the node is another cycle's, still in flight (not
        :func:`~ipscheduler.underlayip.allocator.abandoned`), gets an Error status: that
        cycle binds or releases it, and this pod is retried after backoff."""
        r.owner = f"{self.identity}/{secrets.token_hex(4)}"
        kept = r.held
        for pool in self.candidates(pod, node, r.choice, kept=kept):
            held = pool.allocations.get(pod.uid)
            if held is not None and held.phase not in (RETAINED, NOMINATED):
                if not allocator.abandoned(held, r.owner, utc_now(), self.reserved_ttl, self.takeover_before):
                    return Status.error(str(allocator.ReservedElsewhere(pool.name, held)), plugin=NAME)
            elif kept is None and held is None and self.cache.available(pool) <= 0:
                continue
            r.pending = self._submit(r, pod, node, pool.name)
            self.cache.assume(pool.name, pod.uid)
            self._release_abandoned(pod, r.owner, pool.name)
            return Status.success()
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    def _release_abandoned(self, pod: PodInfo, owner: str, kept: str) -> None:
        """The pod, reserved in pool ``kept`` by cycle ``owner``, gives up its Reserved
        allocations in other pools that another cycle made and abandoned
        (:func:`~ipscheduler.underlayip.allocator.abandoned`: older than ``--reserved-ttl``,
        or made by another replica before this one took the Lease, e.g. a process
        SIGKILLed while the pod waited at Permit): a pod holds one address at a time. Each
        release is its own write, queued now (no I/O here) and only if the allocation is
        still the one seen (``expect``); a failure is logged, the GC sweep releases it."""
        now = utc_now()
        for pool in self.cache.pools_holding(pod.uid):
            held = pool.allocations.get(pod.uid)
            if (
                pool.name == kept
                or held is None
                or held.phase != RESERVED
                or not allocator.abandoned(held, owner, now, self.reserved_ttl, self.takeover_before)
            ):
                continue
            log.info(
                "releasing %s of %s in pool %s: reserved by %s, a cycle that is over",
                held.ip or "a place",
                pod.key,
                pool.name,
                held.reserved_by,
                extra=kv(pod=pod.key, pool=pool.name, ip=held.ip or ""),
            )
            release = functools.partial(allocator.release, uid=pod.uid, expect=held)
            future = self.writer.submit(pool.name, release)
            future.add_done_callback(functools.partial(_log_failure, f"release of {pod.key}'s reservation"))

    async def commit(self, r: CycleReservation, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the write :meth:`reserve` queued (nothing pending: success); if that pool
        turned out full, try the node's other candidates one by one (CAS each). On success
        ``r.pool``, ``r.ip``, ``r.network`` and ``r.taken_back`` say what was allocated."""
        first, r.pending = r.pending, None
        if first is None:
            return Status.success()
        try:
            st = await self._landed(r, first)
        finally:
            self.cache.forget_assumed(first.pool, pod.uid)
        if st is not None:
            if st.is_success():
                self._drop_other_holds(pod, r.pool)
            return st
        for pool in self.candidates(pod, node, r.choice, skip=first.pool, kept=r.held):
            st = await self._landed(r, self._submit(r, pod, node, pool.name))
            if st is not None:
                if st.is_success():
                    self._drop_other_holds(pod, r.pool)
                return st
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    def _drop_other_holds(self, pod: PodInfo, kept: str | None) -> None:
        """The pod has its reservation (in pool ``kept``): the places preemption held for it
        in other pools go, with those pools' next writes. No deadline of their own: a place
        that no write carries is released by the next GC sweep once the pod is bound (within
        ``--gc-interval``, and the sweep's release retries the pending pods, which a deferred
        write never did), and preemption is rare enough that its holds are no write cost."""
        for pool in self.cache.pools_holding(pod.uid):
            held = pool.allocations.get(pod.uid)
            if pool.name != kept and held is not None and held.phase == NOMINATED:
                self.writer.defer(
                    pool.name,
                    functools.partial(allocator.drop_nomination, uid=pod.uid),
                    key=("drop_nomination", pod.uid),
                )

    # -- preemption's hold ---------------------------------------------------------
    async def hold(self, pod: PodInfo, node: str, choice: PoolChoice, victims: frozenset[str]) -> str | None:
        """Hold a place for ``pod``, nominated to ``node`` ("": to none) after evicting the
        pods of UIDs ``victims``: a Nominated allocation in a pool of the node where a victim
        frees a place the pod may use (:func:`~ipscheduler.underlayip.pool.freed_by_eviction`),
        unless the pod holds an allocation on the node already; its places held on other
        nodes are dropped. Returns the pool holding the place (None: none). Logs instead of
        raising: the GC sweep settles what a failed write leaves."""
        held_here: str | None = None
        for pool in self.cache.pools_holding(pod.uid):
            a = pool.allocations.get(pod.uid)
            if pool.node_name == node:
                held_here = pool.name
            elif a is not None and a.phase == NOMINATED:
                await self._write(pool.name, functools.partial(allocator.drop_nomination, uid=pod.uid), pod)
        if held_here is not None or not node:
            return held_here
        for uid in sorted(victims):
            for pool in self.cache.pools_holding(uid):
                if pool.node_name == node and may_use(pod, choice, pool) and freed_by_eviction(pool, uid):
                    nominate = functools.partial(allocator.nominate, uid=pod.uid, pod_key=pod.key)
                    return pool.name if await self._write(pool.name, nominate, pod) else None
        return None

    async def _write(self, pool: str, mutate: MutateFn, pod: PodInfo) -> bool:
        try:
            await self.writer.submit(pool, mutate)
        except Exception as e:
            log.warning(
                "preemption's hold for %s in pool %s not written (%r); the GC settles it", pod.key, pool, e
            )
            return False
        return True

    async def _landed(self, r: CycleReservation, write: _Write) -> Status | None:
        """Wait for ``write``: success (recorded in ``r``) when it allocated, an Error when
        it failed, None when the pool was full or gone (try the next)."""
        try:
            written = await write.future
        except allocator.PoolFull:
            return None
        except Exception as e:
            return Status.error(f"reserving an address in NodeIPPool {write.pool}: {e}", plugin=NAME)
        if written is None or write.decided is None:
            return None
        r.pool, r.ip = written.name, write.decided.ip
        r.taken_back = written.name if write.decided.taken_back else None
        r.network = json.dumps(network_of(written, r.ip), separators=(",", ":")) if r.ip else ""
        return Status.success()

    def _submit(self, r: CycleReservation, pod: PodInfo, node: NodeInfo, pool: str) -> _Write:
        """Queue :func:`~ipscheduler.underlayip.allocator.reserve` for ``pod`` in ``pool`` on
        behalf of ``r``'s cycle, refusing a pool that no longer serves ``node``; remember the
        pool for Unreserve."""
        r.written.add(pool)
        ttl, before, owner, retention = self.reserved_ttl, self.takeover_before, r.owner, r.retention
        write: _Write

        def mutate(p: PoolView, ctx: PoolContext) -> NodeIPPoolStatus | None:
            if p.node_name != node.name:
                raise allocator.PoolFull(p.name)
            write.decided = allocator.reserve(
                p,
                ctx,
                pod.uid,
                pod.key,
                owner=owner,
                takeover_after=ttl,
                takeover_before=before,
                retention=retention,
            )
            return write.decided.status

        write = _Write(pool)
        write.future = self.writer.submit(pool, mutate)
        return write

    async def _bound_pool(self, pod: PodInfo) -> str | None:
        """The pool named by the live pod's ``ipscheduler.io/pool`` if the pod (same UID) is
        bound ("" when bound without one: a count-only slot), else None (also when it is
        gone). Raises what the read raises."""
        if self.api is None:
            return None
        live = await live_pod(self.api, pod.uid, pod.key)
        if live is None or not live.bound:
            return None
        return live.annotations.get(ANNOTATION_POOL) or ""

    async def unreserve(self, r: CycleReservation, pod: PodInfo) -> None:
        """Release what ``r``'s cycle wrote; logs instead of raising.

        Waits for a write still pending first (its outcome does not matter: a write that
        failed on a timeout may still have landed; :meth:`commit` has run then). Then a live
        read of the pod: the pool it is bound with (our Binding may have landed although it
        reported an error) keeps its allocation; if the read fails everything is kept and the
        GC decides later. In the other pools this cycle wrote to, the pod's allocation is
        released only if its ``reservedBy`` is this cycle's: never another replica's
        reservation. Where the cycle took back, or was held to, the identity's Retained
        address, it is Retained again instead."""
        written, r.written = r.written, set()
        if not written:
            return
        try:
            bound = await self._bound_pool(pod)
        except Exception as e:
            log.warning(
                "unreserve of %s keeps its reservation: live read failed (%s); the GC decides", pod.key, e
            )
            return
        if bound == "":
            log.info(
                "unreserve of %s keeps its reservations in %s: the pod is bound (count-only slot); "
                "the GC releases any it is not bound with",
                pod.key,
                ", ".join(sorted(written)),
            )
            return
        retained = {r.taken_back, r.held.name if r.held is not None else None}
        for pool_name in sorted(written - {bound}):
            undo = functools.partial(
                allocator.unreserve, uid=pod.uid, owner=r.owner, keep=pool_name in retained
            )
            try:
                await self.writer.submit(pool_name, undo)
            except Exception as e:
                expected = isinstance(e, (*TRANSIENT_ERRORS, ApiException))
                log.log(
                    logging.WARNING if expected else logging.ERROR,
                    "unreserve of %s in pool %s failed (%r); the GC will release it",
                    pod.key,
                    pool_name,
                    e,
                    exc_info=not expected,
                )
        if bound and bound in written:
            log.info(
                "unreserve of %s keeps its allocation in pool %s: the pod is bound with it", pod.key, bound
            )

    def mark_bound(self, r: CycleReservation, uid: str) -> None:
        """Mark pod ``uid``'s allocation Bound: a deferred mutation that rides along with
        the pool's next write and never costs one of its own (:meth:`PoolWriter.defer`). The
        GC sweep writes, in batches, the marks still not written once the allocation is
        older than ``--bound-mark-delay``; until then the allocation stays Reserved, which
        the TTL never releases while the pod is bound with it."""
        if r.pool is not None:
            self.writer.defer(
                r.pool, functools.partial(allocator.mark_bound, uid=uid), key=allocator.mark_bound_key(uid)
            )


def _log_failure(what: str, future: asyncio.Future[PoolView | None]) -> None:
    """Done callback of a write nobody awaits: log its failure (the GC sweep repairs it)."""
    if not future.cancelled() and (e := future.exception()) is not None:
        log.warning("%s failed: %s", what, e)
