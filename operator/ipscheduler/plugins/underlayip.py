"""UnderlayIP: our plugin. A pod needs a free underlay address on its node.

Extension points:

- PreFilter: one pass over the pools → free addresses per node (pools of a
  node add up; an address the pod already holds counts as free for it).
- Filter: the node has a NodeIPPool with a free address.
- Score: ``spread`` (default, as the original ip-scheduler): most free
  addresses first; ``binpack``: fewest free first. Normalized to 0..100.
- Reserve: take the lowest free address of the node's pool with the most
  free addresses (a pod that already holds a reservation there keeps it),
  written into the pool status by compare-and-swap.
- Unreserve: release it again (CAS).
- PreBind: put ``ipscheduler.io/ip`` and ``ipscheduler.io/pool`` into the
  binding annotations.
- PostBind: mark the allocation Bound.

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
from ipscheduler.api import KubeApi, PoolWriter
from ipscheduler.cache import ClusterCache
from ipscheduler.framework import CycleState, Status, default_normalize
from ipscheduler.models import NodeIPPoolStatus
from ipscheduler.objects import ANNOTATION_IP, ANNOTATION_POOL, NodeInfo, PodInfo

log = logging.getLogger(__name__)

NAME = "UnderlayIP"
ERR_NO_POOL = "node(s) had no NodeIPPool"
ERR_NO_FREE = "node(s) had no free underlay IPs"
_FREE = f"{NAME}/free"
_POOLS = f"{NAME}/pools"
_ALLOC = f"{NAME}/allocation"
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
        free: dict[str, int] = {}
        pools: dict[str, list[PoolView]] = {}
        for pool in self.cache.pools().values():
            ctx = self.cache.context(pool)
            possible, _ = allocator.pick(pool, ctx, pod.uid)
            n = pool.free(ctx.blocked) + (1 if pod.uid in pool.allocations else 0)
            free[pool.node_name] = free.get(pool.node_name, 0) + (n if possible else 0)
            pools.setdefault(pool.node_name, []).append(pool)
        state.write(_FREE, free)
        state.write(_POOLS, pools)
        return Status.success()

    # -- Filter --------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Unschedulable when the node has no pool, or no free address in any."""
        if pod.host_network:
            return Status.success()
        if node.name not in state.read(_POOLS):
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
    def _candidates(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> list[PoolView]:
        pools = [p for p in self.cache.pools_for_node(node.name) if p.node_name == node.name]
        held = [p for p in pools if pod.uid in p.allocations]
        rest = sorted(
            (p for p in pools if pod.uid not in p.allocations),
            key=lambda p: (-p.free(self.cache.context(p).blocked), p.name),
        )
        return held + rest

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Write a Reserved allocation for the pod into one of the node's pools (CAS)."""
        if pod.host_network:
            return Status.success()
        for pool in self._candidates(state, pod, node):
            got: dict[str, str | None] = {}

            def mutate(
                p: PoolView, ctx: PoolContext, got: dict[str, str | None] = got
            ) -> NodeIPPoolStatus | None:
                if p.node_name != node.name:
                    raise allocator.PoolFull(p.name)
                new, ip = allocator.reserve(p, ctx, pod.uid, pod.key)
                got["ip"] = ip
                return new

            try:
                written = await self.writer.update(pool.name, mutate)
            except allocator.PoolFull:
                continue
            if written is None or "ip" not in got:
                continue
            # Allocations this pod may still hold in other pools (an earlier attempt) are NOT
            # released here: another replica may be binding the pod with one of them right now.
            # The GC releases them once the pod is bound elsewhere (Reserved past the TTL).
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

        First a live read of the pod: if it is bound with this very allocation
        (another replica won the bind with the same reservation), the
        allocation is kept; if that read fails it is kept too and the GC
        decides later. Never releases what a bound pod uses.
        """
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
        """Add the address annotations to the binding."""
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
        """Mark the allocation Bound (CAS); a failure is repaired at start-up."""
        alloc = state.get(_ALLOC)
        if alloc is None:
            return
        try:
            await self.writer.update(alloc[0], functools.partial(allocator.mark_bound, uid=pod.uid))
        except Exception:
            log.exception("could not mark %s Bound in pool %s", pod.key, alloc[0])


def allocated_ip(state: CycleState) -> str | None:
    """The address Reserve took in this cycle (None: none, or count-only)."""
    alloc = state.get(_ALLOC)
    return None if alloc is None else alloc[1]
