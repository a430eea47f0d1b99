"""UnderlayIP: our plugin. A pod needs a free underlay address on its node.

Extension points:

- PreFilter: free addresses per node from the cache's incrementally kept
  counts (pools of a node add up; an address the pod already holds counts
  as free for it).
- Filter: the node has a NodeIPPool with a free address.
- Score: ``spread`` (default, as the original ip-scheduler): most free
  addresses first; ``binpack``: fewest free first. Normalized to 0..100.
- Reserve: assume a place in the node's pool with the most available
  addresses and queue its compare-and-swap write; the cache counts it as
  taken meanwhile (as VolumeBinding assumes in Reserve and writes in
  PreBind). The allocation records the cycle that made it (``reservedBy``:
  replica identity and a per-cycle token). An allocation the pod already
  holds is never adopted as this cycle's own: another cycle's (another
  replica's) reservation in flight fails this cycle with an error (retried
  after backoff); one left Reserved longer than ``reserved_ttl`` by a cycle
  that died is taken over by CAS.
- Unreserve: after a live read shows the pod not bound with it, release the
  reservation this cycle wrote, and only that one (CAS, conditional on
  ``reservedBy``).
- PreBind: wait for the write, which takes the lowest free address of that
  pool (other pools of the node if it turned out full), and put
  ``ipscheduler.io/ip``, ``ipscheduler.io/pool`` and ``ipscheduler.io/network``
  (the address with its subnet's prefix, gateway and routes, as a CNI IPAM
  result: :func:`ipscheduler.underlayip.pool.network_of`) into the binding
  annotations.
- PostBind: mark the allocation Bound (deferred: rides along with the pool's next write).

``hostNetwork`` pods use the node's own address: every extension point
skips them.

UnderlayIP is an out-of-tree plugin: :func:`new` is its factory, registered by
the command that wires the scheduler (``cmd/profiles``, as upstream's
``app.WithPlugin(Name, New)``), which supplies its dependencies; its
``pluginConfig`` args are :class:`UnderlayIPArgs`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from ipscheduler.framework.events import NODE_ADD_OR_DELETE
from ipscheduler.framework.interface import (
    BIND_ANNOTATIONS,
    LOG_FIELDS,
    SCHEDULED_NOTE,
    ClusterEventWithHint,
    CycleState,
    EventRecorder,
    Handle,
    Status,
    default_normalize,
)
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import KubeApi
from ipscheduler.underlayip import events, multus
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    ANNOTATION_POOLS,
    NOMINATED,
)
from ipscheduler.underlayip.pool import PoolView, freed_by_eviction
from ipscheduler.underlayip.reservation import ERR_NO_FREE, NAME, CycleReservation, ReservationManager
from ipscheduler.underlayip.retention import Retention, retention_of
from ipscheduler.underlayip.selection import PoolChoice, may_use, pool_choice
from ipscheduler.underlayip.sticky import HELD, REHOME, WAITING, KeptAddress, StickyAddresses, kept_address
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

__all__ = ["ERR_NO_FREE", "NAME", "UnderlayIP", "UnderlayIPArgs", "UnderlayIPDeps", "new"]

ERR_NO_POOL = "node(s) had no NodeIPPool"
ERR_NO_USABLE_POOL = "node(s) had no NodeIPPool the pod may use"
ERR_RETAINED = "node(s) didn't hold the pod's retained address"
ERR_RETAINING = "the pod's retained address is still recorded for its previous pod"
_STATE = f"{NAME}/cycle"


Strategy = Literal["spread", "binpack"]


class UnderlayIPArgs(PluginArgs):
    """``pluginConfig`` args of UnderlayIP: the address strategy and the Multus network
    (``[namespace/]name``, checked by :func:`ipscheduler.underlayip.multus.parse_network_name`)."""

    strategy: Strategy = "spread"
    multus_network: str | None = Field(default=None, alias="multusNetwork")

    @model_validator(mode="after")
    def _network_name(self) -> UnderlayIPArgs:
        if self.multus_network is not None:
            try:
                multus.parse_network_name(self.multus_network)
            except multus.MultusError as e:
                raise ValueError(str(e)) from e
        return self

    def defaulted(self, strategy: Strategy | None, multus_network: str | None) -> UnderlayIPArgs:
        """These args over the command line's (``--ip-strategy``, ``--multus-network``):
        the file's ``strategy`` if it sets one, else ``strategy`` (None: ``spread``); the
        file's ``multusNetwork`` if it names one, else ``multus_network``."""
        return UnderlayIPArgs(
            strategy=self.strategy if "strategy" in self.model_fields_set else (strategy or "spread"),
            multus_network=self.multus_network or multus_network,
        )


@dataclass
class _Cycle:
    """UnderlayIP's part of one scheduling cycle (one CycleState key).

    ``choice``: the pools the pod may use; ``retention``: its release policy; ``kept``: the
    address its identity keeps (:func:`~ipscheduler.underlayip.sticky.kept_address`);
    ``free``: pods each node's usable pools can take (PreFilter's count, by node name);
    ``ranks``: by node, the rank of its first pool in ``ipscheduler.io/pools``;
    ``reservation``: what Reserve and PreBind did."""

    choice: PoolChoice
    retention: Retention
    kept: KeptAddress | None = None
    free: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    reservation: CycleReservation = field(init=False)

    def __post_init__(self) -> None:
        self.reservation = CycleReservation(self.choice, self.retention, self.held)

    def clone(self) -> _Cycle:
        """A copy for a what-if run (:meth:`CycleState.clone
        <ipscheduler.framework.interface.CycleState.clone>`): its own free counts."""
        return dataclasses.replace(self, free=dict(self.free))

    @property
    def held(self) -> PoolView | None:
        """The pool of the Retained address the pod is held to (None: not held)."""
        return self.kept.claim.pool if self.kept is not None and self.kept.kind == HELD else None


@dataclass(frozen=True)
class _Verdict:
    """PreFilter's outcome before any act: the cycle state, or the status to end with."""

    cycle: _Cycle | None
    status: Status


class UnderlayIP:
    """PreFilter/Filter/Score/Reserve/PreBind/PostBind on NodeIPPool addresses (module doc),
    a thin plugin over :class:`~ipscheduler.underlayip.reservation.ReservationManager` and
    :class:`~ipscheduler.underlayip.sticky.StickyAddresses`.

    ``api`` is read live by Unreserve (None: release without it). ``identity``,
    ``reserved_ttl`` and ``takeover_before``: the reservation manager's.
    ``multus_network`` (``[namespace/]name``, validated by the caller with
    :func:`ipscheduler.underlayip.multus.parse_network_name`): PreBind also puts the address
    into the ``ips`` of that element of the pod's ``k8s.v1.cni.cncf.io/networks``.
    ``activate``, ``recorder``, ``rehomed``: the sticky-address acts'."""

    name = NAME

    def __init__(
        self,
        cache: PoolCache,
        writer: PoolWriter,
        strategy: Strategy = "spread",
        api: KubeApi | None = None,
        identity: str = "",
        reserved_ttl: float = 60.0,
        multus_network: str | None = None,
        takeover_before: datetime.datetime | None = None,
        recorder: EventRecorder | None = None,
        activate: Callable[[set[str]], object] | None = None,
        rehomed: Callable[[], object] | None = None,
    ) -> None:
        self.cache = cache
        self.strategy = strategy
        self.multus_network = multus_network
        self.reservations = ReservationManager(cache, writer, api, identity, reserved_ttl, takeover_before)
        self.sticky = StickyAddresses(writer, activate, recorder, rehomed)

    def _cycle(self, state: CycleState, pod: PodInfo) -> _Cycle:
        """This cycle's state; made from the pod when PreFilter did not run (the extender's
        verbs each start a new cycle state)."""
        cycle: _Cycle | None = state.get(_STATE)
        if cycle is None:
            cycle = _Cycle(pool_choice(pod, self.cache.default_pools(pod.namespace)), retention_of(pod))
            state.write(_STATE, cycle)
        return cycle

    # -- PreFilter -----------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Compute the pods each node's pools can take into the cycle state, counting only
        the pools the pod may use (:mod:`ipscheduler.underlayip.selection`: its
        ``ipscheduler.io/pools`` and the pools' ``spec.namespaces``); skip for hostNetwork.
        A malformed ``ipscheduler.io/pools``, or one naming a pool that does not exist,
        leaves the pod unschedulable with that reason. A pod held to its retained address's
        node is activated again at its retain-timeout; a release policy that cannot be
        honoured is said once in a Warning event."""
        if pod.host_network:
            return Status.success()
        verdict = self._verdict(pod)
        if verdict.cycle is not None:
            state.write(_STATE, verdict.cycle)
            if verdict.cycle.retention.problem:
                self.sticky.refused(pod, verdict.cycle.retention.problem)
            kept = verdict.cycle.kept
            if kept is not None and kept.kind == HELD and kept.timeout_in is not None:
                self.sticky.activate_at_timeout(pod.uid, kept.timeout_in)
        return verdict.status

    def _verdict(self, pod: PodInfo) -> _Verdict:
        """PreFilter's computation, without its acts (events, timers)."""
        choice = pool_choice(pod, self.cache.default_pools(pod.namespace))
        if choice.problem:
            return _Verdict(None, Status.unschedulable(choice.problem, plugin=NAME))
        retention = retention_of(pod)
        kept = kept_address(self.cache, pod, retention, datetime.datetime.now(datetime.UTC))
        cycle = _Cycle(choice, retention, kept)
        if kept is not None and kept.kind == WAITING:
            return _Verdict(cycle, Status.unschedulable(ERR_RETAINING, plugin=NAME))
        if kept is not None and kept.kind == HELD:
            return _Verdict(cycle, Status.success())
        pools = self.cache.pools()
        if choice.names:
            unknown = [n for n in choice.names if n not in pools]
            if unknown:
                message = f"NodeIPPool(s) {', '.join(unknown)} named by {ANNOTATION_POOLS} do not exist"
                return _Verdict(cycle, Status.unschedulable(message, plugin=NAME))
            for rank, name in enumerate(choice.names):
                pool = pools[name]
                if pool.serves(pod.namespace):
                    cycle.free[pool.node_name] = cycle.free.get(pool.node_name, 0) + self.cache.available(
                        pool
                    )
                    cycle.ranks.setdefault(pool.node_name, rank)
        else:
            cycle.free = dict(self.cache.node_free())
            for pool in self.cache.namespaced_pools().values():
                if not pool.serves(pod.namespace) and pool.node_name in cycle.free:
                    cycle.free[pool.node_name] -= self.cache.available(pool)
        for pool in self.cache.pools_holding(pod.uid):
            if may_use(pod, choice, pool):  # the address the pod already holds counts as free for it
                blocked = self.cache.context(pool).blocked
                own = pool.free(blocked) + 1
                if pool.allocations[pod.uid].phase == NOMINATED:
                    # A place preemption holds is the pod's once a victim's is released: while
                    # the pool is still one over its capacity it counts 0.
                    own = max(0, pool.capacity(blocked) - len(pool.allocations) + 1)
                cycle.free[pool.node_name] = (
                    cycle.free.get(pool.node_name, 0) - self.cache.available(pool) + own
                )
        return _Verdict(cycle, Status.success())

    # -- Filter --------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Unschedulable when no pool the pod may use on the node has a free address (evicting
        a pod may free one); UnschedulableAndUnresolvable when the node has no pool, none the
        pod may use, or the pod's retained address is on another node (no eviction helps:
        kube-scheduler's preemption, and the extender's ``FailedAndUnresolvableNodes``).
        Raises KeyError when PreFilter did not run in ``state``."""
        if pod.host_network:
            return Status.success()
        cycle: _Cycle = state.read(_STATE)
        held = cycle.held
        if held is not None:
            return (
                Status.success()
                if node.name == held.node_name
                else Status.unresolvable(ERR_RETAINED, plugin=NAME)
            )
        free = cycle.free.get(node.name)
        if free is not None and free > 0:  # only nodes with pools have a count
            return Status.success()
        pools = self.cache.pools_for_node(node.name)
        if not pools:
            return Status.unresolvable(ERR_NO_POOL, plugin=NAME)
        if not any(may_use(pod, cycle.choice, p) for p in pools):
            return Status.unresolvable(ERR_NO_USABLE_POOL, plugin=NAME)
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    room_resource = "free underlay IPs"
    """What :meth:`room` counts (:class:`~ipscheduler.framework.interface.CapacityAware`)."""

    def room(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int | None:
        """Pods like ``pod`` the pools it may use on ``nodes`` can take now (free addresses,
        assumed reservations deducted: PreFilter's count, summed); 0 when PreFilter would
        reject it, 1 for a pod held to its retained address; None for hostNetwork pods
        (they take no address). Coscheduling asks before a group reserves anything. Changes
        nothing (no event, no timer)."""
        if pod.host_network:
            return None
        verdict = self._verdict(pod)
        if verdict.cycle is None or not verdict.status.is_success():
            return 0
        if verdict.cycle.held is not None:
            return 1
        return sum(n for name, n in verdict.cycle.free.items() if n > 0 and name in nodes)

    # -- PreFilter extensions (preemption's dry run, nominated pods) ------------------
    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_remove`` is evicted from ``node`` in a what-if run: the place its address
        would free there counts as free for ``pod`` when ``pod`` may use that pool
        (:func:`~ipscheduler.underlayip.pool.freed_by_eviction`: a Retained sticky address,
        a sticky pod's own and a foreign hold do not count)."""
        cycle: _Cycle | None = state.get(_STATE)
        if cycle is not None and not pod.host_network and self._frees(cycle, pod, pod_to_remove, node):
            cycle.free[node.name] = cycle.free.get(node.name, 0) + 1
        return Status.success()

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_add`` counts on ``node`` in a what-if run: a victim given back retakes the
        place :meth:`remove_pod` counted; a pod nominated there (pending, no address yet)
        takes one place."""
        cycle: _Cycle | None = state.get(_STATE)
        if cycle is None or pod.host_network or pod_to_add.host_network:
            return Status.success()
        if self._frees(cycle, pod, pod_to_add, node) or not self.cache.pools_holding(pod_to_add.uid):
            cycle.free[node.name] = cycle.free.get(node.name, 0) - 1
        return Status.success()

    def _frees(self, cycle: _Cycle, pod: PodInfo, other: PodInfo, node: NodeInfo) -> bool:
        return any(
            pool.node_name == node.name
            and may_use(pod, cycle.choice, pool)
            and freed_by_eviction(pool, other.uid)
            for pool in self.cache.pools_holding(other.uid)
        )

    async def nominated(self, pod: PodInfo, node: str, victims: frozenset[str]) -> None:
        """Preemption nominated ``pod`` to ``node`` ("": to none): hold the place a victim
        frees there as a Nominated allocation, so no other pod takes it while the victims
        terminate, and drop the pod's holds elsewhere
        (:meth:`~ipscheduler.underlayip.reservation.ReservationManager.hold`)."""
        if pod.host_network:
            return
        choice = pool_choice(pod, self.cache.default_pools(pod.namespace))
        pool = await self.reservations.hold(pod, node, choice, victims)
        if pool is not None:
            log.info("holding a place in NodeIPPool %s for %s, nominated to %s", pool, pod.key, node)

    def fits_after_evicting(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, victims: frozenset[str]
    ) -> bool:
        """Whether the pod passes :meth:`filter` on ``node`` once the pods of UIDs ``victims``
        are gone (the extender's ``preempt``): it does already, or a victim holds an address
        of a pool on that node the pod may use (released when the victim ends). A pod held
        to its retained address's node fits only there, whatever the victims."""
        if self.filter(state, pod, node).is_success():
            return True
        cycle: _Cycle = state.read(_STATE)
        if cycle.held is not None:
            return False
        return any(
            pool.node_name == node.name and may_use(pod, cycle.choice, pool)
            for uid in victims
            for pool in self.cache.pools_holding(uid)
        )

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A NodeIPPool added, changed or deleted, or addresses released
        (:data:`~ipscheduler.underlayip.events.NODE_IP_POOL_CHANGE`,
        :data:`~ipscheduler.underlayip.events.ADDRESS_RELEASED`), or a node added or deleted
        (a pool may name a node that did not exist yet; the node set decides which pools'
        addresses conflict), or a namespace's default pools changed
        (:data:`~ipscheduler.underlayip.events.DEFAULT_POOLS_CHANGE`): retry the pod. A bound
        pod deleted does not: its address is free only once released."""
        return [
            ClusterEventWithHint(events.NODE_IP_POOL_CHANGE),
            ClusterEventWithHint(NODE_ADD_OR_DELETE),
            ClusterEventWithHint(events.DEFAULT_POOLS_CHANGE),
        ]

    # -- Score ---------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Free addresses on the node (0 for hostNetwork pods)."""
        if pod.host_network:
            return 0
        cycle: _Cycle = state.read(_STATE)
        return cycle.free.get(node.name, 0)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """spread: most free → 100; binpack: fewest free → 100. A pod naming several pools
        (``ipscheduler.io/pools``) prefers the nodes of an earlier one whatever their free
        counts: of ``n`` pools, the ``r``-th (from 0) gives ``((n-1-r)*100 + free score) / n``."""
        default_normalize(scores, reverse=self.strategy == "binpack")
        cycle: _Cycle | None = state.get(_STATE)
        if cycle is None or len(cycle.choice.names) < 2:
            return
        n = len(cycle.choice.names)
        for node, score in scores.items():
            scores[node] = ((n - 1 - cycle.ranks.get(node, n - 1)) * 100 + score) // n

    # -- Reserve / Unreserve ---------------------------------------------
    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume a place in the node's pool with the most available addresses and queue its
        compare-and-swap write (no I/O here: PreBind waits for the write); see
        :meth:`~ipscheduler.underlayip.reservation.ReservationManager.reserve`."""
        if pod.host_network:
            return Status.success()
        return self.reservations.reserve(self._cycle(state, pod).reservation, pod, node)

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Wait for a write still pending, then release what this cycle's reservation wrote
        (:meth:`~ipscheduler.underlayip.reservation.ReservationManager.unreserve`); the pod
        identity's Retained address taken back, or held to, is Retained again. Logs instead
        of raising."""
        c: _Cycle | None = state.get(_STATE)
        if c is None:
            return
        await self.reservations.commit(c.reservation, pod, node)
        await self.reservations.unreserve(c.reservation, pod)

    # -- PreBind / PostBind ----------------------------------------------
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the reservation's write, then add the address annotations to the binding;
        a pod re-homed after its retain-timeout releases its old address now."""
        c: _Cycle | None = state.get(_STATE)
        if c is None:
            return Status.success()
        r = c.reservation
        st = await self.reservations.commit(r, pod, node)
        if not st.is_success() or r.pool is None:
            return st
        if (
            c.kept is not None
            and c.kept.kind == REHOME
            and not (r.pool == c.kept.claim.pool.name and r.taken_back == r.pool)
        ):
            await self.sticky.rehome(pod, c.retention.timeout, c.kept.claim, node.name, r.pool, r.ip)
        annotations = dict(state.get(BIND_ANNOTATIONS) or {})
        if r.ip:
            annotations[ANNOTATION_POOL] = r.pool
            annotations[ANNOTATION_IP] = r.ip
            annotations[ANNOTATION_NETWORK] = r.network
            state.write(SCHEDULED_NOTE, f"IP {r.ip}")
            state.write(LOG_FIELDS, {"pool": r.pool, "ip": r.ip})
            if self.multus_network:
                self._multus_ips(pod, json.loads(r.network), annotations)
        else:
            # Count-only slot: none of the three (the pool's status records the slot). A
            # Binding can only add annotations, so any of them the pod was created with (stale
            # or forged) is overwritten with an empty value, which reads as "no address".
            for key in (ANNOTATION_POOL, ANNOTATION_IP, ANNOTATION_NETWORK):
                if key in pod.annotations:
                    annotations[key] = ""
        state.write(BIND_ANNOTATIONS, annotations)
        return Status.success()

    def _multus_ips(self, pod: PodInfo, network: dict[str, Any], annotations: dict[str, str]) -> None:
        """Put the address (with its prefix) into the ``ips`` of the pod's Multus element
        naming ``multus_network``. A pod that selects no such network is left alone; an
        annotation Multus itself could not parse is left alone with a warning (the pod's
        sandbox will fail in Multus with its own message)."""
        assert self.multus_network is not None
        ips = [str(entry["address"]) for entry in network["ips"]]
        try:
            updated = multus.with_ips(
                pod.annotations.get(multus.NETWORKS_ANNOTATION), self.multus_network, pod.namespace, ips
            )
        except multus.MultusError as e:
            log.warning("%s: %s; left as it is", pod.key, e)
            return
        if updated is not None:
            annotations[multus.NETWORKS_ANNOTATION] = updated

    async def post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Mark the allocation Bound: a deferred mutation that rides along with the pool's
        next write, never a write of its own; the GC sweep writes what is left after
        ``--bound-mark-delay``, in one write per pool."""
        c: _Cycle | None = state.get(_STATE)
        if c is not None:
            self.reservations.mark_bound(c.reservation, pod.uid)


@dataclass(frozen=True)
class UnderlayIPDeps:
    """What UnderlayIP's factory binds besides its args and the handle (see
    :class:`UnderlayIP` for each): the pool cache and writer it reserves through, this
    replica's identity and timings, and the re-homing counter."""

    cache: PoolCache
    writer: PoolWriter
    identity: str = ""
    reserved_ttl: float = 60.0
    takeover_before: datetime.datetime | None = None
    rehomed: Callable[[], object] | None = None


def new(args: UnderlayIPArgs, handle: Handle, deps: UnderlayIPDeps) -> UnderlayIP:
    """UnderlayIP's factory ``new(args, handle)`` once its registration has bound ``deps``.
    From the handle: the API client (Unreserve's live reads), the event recorder, and
    ``activate`` (a pod held to its retained address's node, at its retain-timeout)."""
    api: KubeApi | None = handle.client
    recorder: EventRecorder | None = handle.recorder
    return UnderlayIP(
        deps.cache,
        deps.writer,
        args.strategy,
        api,
        deps.identity,
        deps.reserved_ttl,
        args.multus_network,
        deps.takeover_before,
        recorder,
        handle.activate,
        deps.rehomed,
    )
