"""UnderlayIP: our plugin. A pod needs a free underlay address on its node.

Extension points:

- PreFilter: free addresses per node from the cache's incrementally kept
  counts (pools of a node add up; an address the pod already holds counts
  as free for it).
- Filter: the node has a NodeIPPool with a free address.
- Score: ``spread`` (default, as the original ip-scheduler): most free
  addresses first; ``binpack``: fewest free first. Normalized to 0..100.
- Reserve: assume a place in the node's pool with the most available
  addresses (a pod that already holds a reservation there keeps it) and
  queue its compare-and-swap write; the cache counts it as taken meanwhile
  (as VolumeBinding assumes in Reserve and writes in PreBind).
- Unreserve: release it again (CAS).
- PreBind: wait for the write, which takes the lowest free address of that
  pool (other pools of the node if it turned out full), and put
  ``ipscheduler.io/ip`` and ``ipscheduler.io/pool`` into the binding
  annotations.
- PostBind: mark the allocation Bound (deferred, coalesced write).

``hostNetwork`` pods use the node's own address: every extension point
skips them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Literal

from ipscheduler import allocator
from ipscheduler.allocator import PoolContext, PoolView
from ipscheduler.api import KubeApi, MutateFn, PoolWriter
from ipscheduler.cache import ClusterCache
from ipscheduler.framework import CycleState, Status, default_normalize
from ipscheduler.models import NodeIPPoolStatus
from ipscheduler.objects import ANNOTATION_IP, ANNOTATION_POOL, NodeInfo, PodInfo

log = logging.getLogger(__name__)

NAME = "UnderlayIP"
ERR_NO_POOL = "node(s) had no NodeIPPool"
ERR_NO_FREE = "node(s) had no free underlay IPs"
_FREE = f"{NAME}/free"
_ALLOC = f"{NAME}/allocation"
_PENDING = f"{NAME}/pending"
BIND_ANNOTATIONS = "Bind/annotations"

Strategy = Literal["spread", "binpack"]


class UnderlayIP:
    """Filter/Score/Reserve/PreBind/PostBind on NodeIPPool addresses (see module doc)."""

    name = NAME

    def __init__(
        self,
        cache: ClusterCache,
        writer: PoolWriter,
        strategy: Strategy = "spread",
        api: KubeApi | None = None,
    ) -> None:
        """``api`` is used by Unreserve for a live read of the pod (None: release without it)."""
        self.cache = cache
        self.writer = writer
        self.strategy = strategy
        self.api = api

    # -- PreFilter -----------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Compute free addresses per node into the cycle state (skip for hostNetwork)."""
        if pod.host_network:
            return Status.success()
        free = dict(self.cache.node_free())
        for pool in self.cache.holder(pod.uid):
            # The address the pod already holds there counts as free for it.
            free[pool.node_name] = (
                free.get(pool.node_name, 0)
                - self.cache.available(pool)
                + pool.free(self.cache.context(pool).blocked)
                + 1
            )
        state.write(_FREE, free)
        return Status.success()

    # -- Filter --------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Unschedulable when the node has no pool, or no free address in any."""
        if pod.host_network:
            return Status.success()
        if not self.cache.pools_for_node(node.name):
            return Status.unschedulable(ERR_NO_POOL, plugin=NAME)
        if state.read(_FREE).get(node.name, 0) <= 0:
            return Status.unschedulable(ERR_NO_FREE, plugin=NAME)
        return Status.success()

    # -- Score ---------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Free addresses on the node (0 for hostNetwork pods)."""
        if pod.host_network:
            return 0
        return int(state.read(_FREE).get(node.name, 0))

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """spread: most free → 100; binpack: fewest free → 100."""
        default_normalize(scores, reverse=self.strategy == "binpack")

    # -- Reserve / Unreserve ---------------------------------------------
    def _candidates(self, pod: PodInfo, node: NodeInfo, skip: str = "") -> list[PoolView]:
        """The node's pools to reserve in: one holding the pod's allocation first, then by
        most available (assumed reservations deducted), then by name."""
        pools = [
            p for p in self.cache.pools_for_node(node.name) if p.node_name == node.name and p.name != skip
        ]
        held = [p for p in pools if pod.uid in p.allocations]
        rest = sorted(
            (p for p in pools if pod.uid not in p.allocations),
            key=lambda p: (-self.cache.available(p), p.name),
        )
        return held + rest

    @staticmethod
    def _mutation(pod: PodInfo, node: NodeInfo, got: dict[str, str | None]) -> MutateFn:
        """allocator.reserve for ``pod``, refusing a pool that no longer serves ``node``;
        the address taken goes into ``got["ip"]`` (the last call is the one written)."""

        def mutate(p: PoolView, ctx: PoolContext) -> NodeIPPoolStatus | None:
            if p.node_name != node.name:
                raise allocator.PoolFull(p.name)
            new, ip = allocator.reserve(p, ctx, pod.uid, pod.key)
            got["ip"] = ip
            return new

        return mutate

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume a place for the pod in the node's pool with the most available addresses
        and queue its compare-and-swap write (no I/O here: PreBind waits for the write).

        A pod that already holds an allocation on the node keeps it (nothing to write).
        Until the write lands the cache counts the place as taken, so the next
        scheduling cycles, running meanwhile, do not give it away again; concurrent
        reservations in one pool are coalesced into one write by the PoolWriter.
        """
        if pod.host_network:
            return Status.success()
        for pool in self._candidates(pod, node):
            held = pool.allocations.get(pod.uid)
            if held is not None:
                # Allocations this pod may still hold in other pools (an earlier attempt) are
                # NOT released here: another replica may be binding the pod with one of them
                # right now. The GC releases them once the pod is bound elsewhere.
                state.write(_ALLOC, (pool.name, held.ip))
                return Status.success()
            if self.cache.available(pool) <= 0:
                continue
            got: dict[str, str | None] = {}
            future = self.writer.submit(pool.name, self._mutation(pod, node, got))
            self.cache.assume(pool.name, pod.uid)
            state.write(_PENDING, (pool.name, future, got))
            return Status.success()
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    async def _commit(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the write Reserve queued; if that pool turned out full (a stale cache,
        another replica), try the node's other pools one by one (CAS each)."""
        pending = state.get(_PENDING)
        if pending is None:
            return Status.success()
        state.write(_PENDING, None)
        pool_name, future, got = pending
        try:
            written = await future
        except allocator.PoolFull:
            written = None
        except Exception as e:
            return Status.error(f"reserving an address in NodeIPPool {pool_name}: {e}", plugin=NAME)
        finally:
            self.cache.forget_assumed(pool_name, pod.uid)
        if written is not None and "ip" in got:
            state.write(_ALLOC, (pool_name, got["ip"]))
            return Status.success()
        for pool in self._candidates(pod, node, skip=pool_name):
            got = {}
            try:
                written = await self.writer.update(pool.name, self._mutation(pod, node, got))
            except allocator.PoolFull:
                continue
            except Exception as e:
                return Status.error(f"reserving an address in NodeIPPool {pool.name}: {e}", plugin=NAME)
            if written is not None and "ip" in got:
                state.write(_ALLOC, (pool.name, got["ip"]))
                return Status.success()
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    async def _bound_with(self, pod: PodInfo, pool_name: str, ip: str | None) -> bool | None:
        """Is the pod (same UID) bound carrying exactly this allocation? None if unknown."""
        if self.api is None:
            return False
        try:
            body = await self.api.get_pod(pod.namespace, pod.name)
        except Exception:
            return None
        if body is None:
            return False
        live = PodInfo.from_obj(body)
        return (
            live.uid == pod.uid
            and live.bound
            and live.annotations.get(ANNOTATION_POOL) == pool_name
            and (ip is None or live.annotations.get(ANNOTATION_IP) == ip)
        )

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Release the allocation made by :meth:`reserve`; logs instead of raising.

        A reservation still being written is waited for first. Then a live
        read of the pod: if it is bound with this very allocation (another
        replica won the bind with the same reservation), the allocation is
        kept; if that read fails it is kept too and the GC decides later.
        Never releases what a bound pod uses.
        """
        await self._commit(state, pod, node)
        alloc = state.get(_ALLOC)
        if alloc is None:
            return
        pool_name, ip = alloc
        try:
            bound = await self._bound_with(pod, pool_name, ip)
            if bound is None or bound:
                log.info(
                    "unreserve of %s keeps %s in pool %s (bound=%s)", pod.key, ip or "slot", pool_name, bound
                )
                return
            await self.writer.update(pool_name, functools.partial(allocator.release, uid=pod.uid))
        except Exception:
            log.exception("unreserve of %s in pool %s failed; the GC will release it", pod.key, pool_name)

    # -- PreBind / PostBind ----------------------------------------------
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the reservation's write, then add the address annotations to the binding."""
        st = await self._commit(state, pod, node)
        if not st.is_success():
            return st
        alloc = state.get(_ALLOC)
        if alloc is None:
            return Status.success()
        annotations = dict(state.get(BIND_ANNOTATIONS) or {})
        annotations[ANNOTATION_POOL] = alloc[0]
        if alloc[1]:
            annotations[ANNOTATION_IP] = alloc[1]
        elif ANNOTATION_IP in pod.annotations:
            # Count-only slot: a Binding can only add annotations, so a stale/foreign address
            # the pod was created with is overwritten with an empty value.
            annotations[ANNOTATION_IP] = ""
        state.write(BIND_ANNOTATIONS, annotations)
        return Status.success()

    async def post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Mark the allocation Bound: a deferred write that rides along with the pool's next
        write (at most ``PoolWriter.defer_delay`` later); if lost, the start-up reconcile
        and the GC sweep mark it."""
        alloc = state.get(_ALLOC)
        if alloc is None:
            return
        self.writer.defer(alloc[0], functools.partial(allocator.mark_bound, uid=pod.uid))


def allocated_ip(state: CycleState) -> str | None:
    """The address Reserve took in this cycle (None: none, or count-only)."""
    alloc = state.get(_ALLOC)
    return None if alloc is None else alloc[1]
