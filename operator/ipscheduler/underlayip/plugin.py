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
- PostBind: mark the allocation Bound (deferred, coalesced write).

``hostNetwork`` pods use the node's own address: every extension point
skips them.

UnderlayIP is an out-of-tree plugin: :func:`new` is its factory, registered by
the command that wires the scheduler (``cmd/profiles``, as upstream's
``app.WithPlugin(Name, New)``), which supplies its dependencies; its
``pluginConfig`` args are :class:`UnderlayIPArgs`.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio.client.exceptions import ApiException
from pydantic import Field, model_validator

from ipscheduler.framework.interface import (
    BIND_ANNOTATIONS,
    LOG_FIELDS,
    SCHEDULED_NOTE,
    ActionType,
    ClusterEvent,
    ClusterEventWithHint,
    CycleState,
    EventResource,
    Handle,
    Status,
    default_normalize,
)
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.kube.client import TRANSIENT_ERRORS, KubeApi, live_pod
from ipscheduler.kube.events import EventRecorder, pod_ref
from ipscheduler.underlayip import allocator, events, multus
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    ANNOTATION_POOLS,
    RETAINED,
    NodeIPPoolStatus,
)
from ipscheduler.underlayip.pool import PoolContext, PoolView, age, network_of, utc_now
from ipscheduler.underlayip.retention import Retention, claims, retention_of
from ipscheduler.underlayip.selection import ANY, PoolChoice, may_use, pool_choice
from ipscheduler.underlayip.writer import MutateFn, PoolWriter

log = logging.getLogger(__name__)

NAME = "UnderlayIP"
ERR_NO_POOL = "node(s) had no NodeIPPool"
ERR_NO_FREE = "node(s) had no free underlay IPs"
ERR_NO_USABLE_POOL = "node(s) had no NodeIPPool the pod may use"
ERR_RETAINED = "node(s) didn't hold the pod's retained address"
ERR_RETAINING = "the pod's retained address is still recorded for its previous pod"
_FREE = f"{NAME}/free"
_ALLOC = f"{NAME}/allocation"
_PENDING = f"{NAME}/pending"
_OWNER = f"{NAME}/owner"
_MINE = f"{NAME}/written"
_NETWORK = f"{NAME}/network"
_CHOICE = f"{NAME}/choice"
_RETENTION = f"{NAME}/retention"
_KEPT = f"{NAME}/kept"
_REHOME = f"{NAME}/rehome"
_TAKEN_BACK = f"{NAME}/taken-back"
_RANK = f"{NAME}/rank"

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


class UnderlayIP:
    """Filter/Score/Reserve/PreBind/PostBind on NodeIPPool addresses (see module doc)."""

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
        requeue: Callable[[ClusterEvent], object] | None = None,
        rehomed: Callable[[], object] | None = None,
    ) -> None:
        """``api`` is used by Unreserve for a live read of the pod (None: release without it).
        ``identity``: this replica's, recorded in every reservation (default: host name and a
        random suffix). ``reserved_ttl``: seconds after which a Reserved allocation of a pod
        that is still pending counts as abandoned by its cycle and may be taken over.
        ``takeover_before``: when this replica took the scheduler's Lease (None: no leader
        election); another replica's Reserved allocations made before then are abandoned at
        once (:func:`ipscheduler.underlayip.allocator.abandoned`), so the pods the previous
        leader was binding when it died keep their address without waiting ``reserved_ttl``.
        ``multus_network`` (``[namespace/]name``, validated by the caller with
        :func:`ipscheduler.underlayip.multus.parse_network_name`): PreBind also puts the address into
        the ``ips`` of that element of the pod's ``k8s.v1.cni.cncf.io/networks``."""
        self.cache = cache
        self.writer = writer
        self.strategy = strategy
        self.api = api
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"
        self.reserved_ttl = reserved_ttl
        self.multus_network = multus_network
        self.takeover_before = takeover_before
        self.recorder = recorder
        """Posts the pod's ``AddressRehomed`` event (None: logged only)."""
        self.requeue = requeue
        """Moves the pods this plugin rejected when a cluster event may help them: told
        :data:`~ipscheduler.underlayip.events.RETAIN_TIMEOUT` when a pod held to the node of
        its retained address reaches its retain-timeout (None: they wait for another event)."""
        self.rehomed = rehomed
        """Counts the pods placed anew after their retain-timeout (``ipscheduler_pods_rehomed_total``)."""
        self._timeouts: dict[str, asyncio.TimerHandle] = {}
        self._refusals: set[str] = set()  # UIDs told ReleasePolicyRefused

    # -- PreFilter -----------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Compute the pods each node's pools can take into the cycle state, counting only
        the pools the pod may use (:mod:`ipscheduler.underlayip.selection`: its
        ``ipscheduler.io/pools`` and the pools' ``spec.namespaces``); skip for hostNetwork.
        A malformed ``ipscheduler.io/pools``, or one naming a pool that does not exist,
        leaves the pod unschedulable with that reason."""
        if pod.host_network:
            return Status.success()
        choice = pool_choice(pod, self.cache.default_pools(pod.namespace))
        if choice.problem:
            return Status.unschedulable(choice.problem, plugin=NAME)
        state.write(_CHOICE, choice)
        retention = retention_of(pod)
        state.write(_RETENTION, retention)
        if retention.problem:
            self._refused(pod, retention.problem)
        kept = self._kept_address(state, pod, retention)
        if kept is not None:
            return kept
        pools = self.cache.pools()
        if choice.names:
            unknown = [n for n in choice.names if n not in pools]
            if unknown:
                return Status.unschedulable(
                    f"NodeIPPool(s) {', '.join(unknown)} named by {ANNOTATION_POOLS} do not exist",
                    plugin=NAME,
                )
            free: dict[str, int] = {}
            ranks: dict[str, int] = {}
            for rank, name in enumerate(choice.names):
                pool = pools[name]
                if pool.serves(pod.namespace):
                    free[pool.node_name] = free.get(pool.node_name, 0) + self.cache.available(pool)
                    ranks.setdefault(pool.node_name, rank)
            state.write(_RANK, ranks)
        else:
            free = dict(self.cache.node_free())
            for pool in self.cache.namespaced_pools().values():
                if not pool.serves(pod.namespace) and pool.node_name in free:
                    free[pool.node_name] -= self.cache.available(pool)
        for pool in self.cache.pools_holding(pod.uid):
            if not may_use(pod, choice, pool):
                continue
            # The address the pod already holds there counts as free for it.
            free[pool.node_name] = (
                free.get(pool.node_name, 0)
                - self.cache.available(pool)
                + pool.free(self.cache.context(pool).blocked)
                + 1
            )
        state.write(_FREE, free)
        return Status.success()

    def _kept_address(self, state: CycleState, pod: PodInfo, retention: Retention) -> Status | None:
        """Look for the address the pod's identity kept (release policies StatefulSet and
        Never; a pod of policy Pod still gets back one kept with Never for its name). A
        Retained one restricts the pod to its pool's node (``_KEPT``), unless the pod has
        waited longer than its retain-timeout: then it is placed anew and the old address
        released once the new one is written (``_REHOME``). An allocation of the identity
        still recorded for its previous pod (gone from the node cache; the pool controller is
        about to retain it) leaves the pod unschedulable until AddressReleased. Returns the
        PreFilter status to end with, or None to go on."""
        identity = retention.identity or pod.key
        for pool, uid, a in claims(pod.uid, retention, self.cache.kept_for(identity)):
            if a.phase != RETAINED:
                if self.cache.node_cache.pod(uid) is None and not self.cache.node_cache.is_assumed(uid):
                    return Status.unschedulable(ERR_RETAINING, plugin=NAME)
                continue
            start = max(t for t in (pod.creation, a.retained_since, a.since) if t is not None)
            waited = age(start, datetime.datetime.now(datetime.UTC))  # to the microsecond
            if retention.timeout is not None and waited > retention.timeout:
                state.write(_REHOME, (pool.name, uid, a))
                return None
            state.write(_KEPT, pool)
            if retention.timeout is not None:
                self._retry_at_timeout(pod.uid, retention.timeout - waited)
            return None
        return None

    def _refused(self, pod: PodInfo, problem: str) -> None:
        """Say once per pod (Warning ``ReleasePolicyRefused``) that its release-policy or
        retain-timeout annotation cannot be honoured as written, and what is used instead."""
        if pod.uid in self._refusals:
            return
        if len(self._refusals) > 10_000:
            self._refusals.clear()  # a bound on memory; at worst an event is said twice
        self._refusals.add(pod.uid)
        log.warning("%s: %s", pod.key, problem)
        if self.recorder is not None:
            self.recorder.emit(pod_ref(pod), "Warning", "ReleasePolicyRefused", problem)

    def _retry_at_timeout(self, uid: str, seconds: float) -> None:
        """Requeue the pods this plugin rejected once pod ``uid``'s retain-timeout is reached
        (``seconds`` from now; one timer per pod)."""
        if self.requeue is None or uid in self._timeouts:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no event loop (a synchronous caller: explain, tests)
        requeue = self.requeue

        def fire() -> None:
            self._timeouts.pop(uid, None)
            requeue(events.RETAIN_TIMEOUT)

        self._timeouts[uid] = loop.call_later(max(0.0, seconds) + 0.1, fire)

    # -- Filter --------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Unschedulable when no pool the pod may use on the node has a free address (evicting
        a pod may free one); UnschedulableAndUnresolvable when the node has no pool, none the
        pod may use, or the pod's retained address is on another node (no eviction helps:
        kube-scheduler's preemption, and the extender's ``FailedAndUnresolvableNodes``)."""
        if pod.host_network:
            return Status.success()
        kept: PoolView | None = state.get(_KEPT)
        if kept is not None:
            if node.name != kept.node_name:
                return Status.unresolvable(ERR_RETAINED, plugin=NAME)
            return Status.success()
        free = state.read(_FREE).get(node.name)
        if free is not None and free > 0:  # only nodes with pools have a count
            return Status.success()
        pools = self.cache.pools_for_node(node.name)
        if not pools:
            return Status.unresolvable(ERR_NO_POOL, plugin=NAME)
        choice: PoolChoice = state.get(_CHOICE) or ANY
        if not any(may_use(pod, choice, p) for p in pools):
            return Status.unresolvable(ERR_NO_USABLE_POOL, plugin=NAME)
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    room_resource = "free underlay IPs"
    """What :meth:`room` counts (:class:`~ipscheduler.framework.interface.CapacityAware`)."""

    def room(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int | None:
        """Pods like ``pod`` the pools it may use on ``nodes`` can take now (free addresses,
        assumed reservations deducted: PreFilter's count, summed); 0 when PreFilter would
        reject it, 1 for a pod held to its retained address; None for hostNetwork pods
        (they take no address). Coscheduling asks before a group reserves anything."""
        if pod.host_network:
            return None
        state = CycleState()
        if not self.pre_filter(state, pod, nodes).is_success():
            return 0
        if state.get(_KEPT) is not None:
            return 1
        free: dict[str, int] = state.get(_FREE) or {}
        return sum(n for name, n in free.items() if n > 0 and name in nodes)

    def fits_after_evicting(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, victims: frozenset[str]
    ) -> bool:
        """Whether the pod passes :meth:`filter` on ``node`` once the pods of UIDs ``victims``
        are gone (the extender's ``preempt``): it does already, or a victim holds an address
        of a pool on that node the pod may use (released when the victim ends). A pod held
        to its retained address's node fits only there, whatever the victims."""
        if self.filter(state, pod, node).is_success():
            return True
        if state.get(_KEPT) is not None:
            return False
        choice: PoolChoice = state.get(_CHOICE) or ANY
        return any(
            pool.node_name == node.name and may_use(pod, choice, pool)
            for uid in victims
            for pool in self.cache.pools_holding(uid)
        )

    # -- Score ---------------------------------------------------------
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
            ClusterEventWithHint(ClusterEvent(EventResource.NODE, ActionType.ADD | ActionType.DELETE)),
            ClusterEventWithHint(events.DEFAULT_POOLS_CHANGE),
        ]

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Free addresses on the node (0 for hostNetwork pods)."""
        if pod.host_network:
            return 0
        return int(state.read(_FREE).get(node.name, 0))

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """spread: most free → 100; binpack: fewest free → 100. A pod naming several pools
        (``ipscheduler.io/pools``) prefers the nodes of an earlier one whatever their free
        counts: of ``n`` pools, the ``r``-th (from 0) gives ``((n-1-r)*100 + free score) / n``."""
        default_normalize(scores, reverse=self.strategy == "binpack")
        choice: PoolChoice | None = state.get(_CHOICE)
        if choice is None or len(choice.names) < 2:
            return
        n = len(choice.names)
        ranks: dict[str, int] = state.get(_RANK) or {}
        for node, score in scores.items():
            scores[node] = ((n - 1 - ranks.get(node, n - 1)) * 100 + score) // n

    # -- Reserve / Unreserve ---------------------------------------------
    def _candidates(
        self, pod: PodInfo, node: NodeInfo, skip: str = "", kept: PoolView | None = None
    ) -> list[PoolView]:
        """The node's pools the pod may use to reserve in: the one keeping its retained
        address (``kept``) alone, else one holding the pod's allocation first, then in the
        pod's order of preference (``ipscheduler.io/pools``), then by most available
        (assumed reservations deducted), then by name."""
        if kept is not None:
            pool = self.cache.pool(kept.name)
            return [pool] if pool is not None and pool.node_name == node.name and pool.name != skip else []
        choice = pool_choice(pod, self.cache.default_pools(pod.namespace))
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

    def _mutation(
        self,
        pod: PodInfo,
        node: NodeInfo,
        owner: str,
        got: dict[str, str | None],
        retention: Retention | None,
    ) -> MutateFn:
        """allocator.reserve for ``pod`` on behalf of cycle ``owner``, refusing a pool that no
        longer serves ``node``; the address taken goes into ``got["ip"]`` (the last call is
        the one written), and ``got["taken_back"]`` is set when it was the pod identity's
        Retained address."""
        ttl, before = self.reserved_ttl, self.takeover_before

        def mutate(p: PoolView, ctx: PoolContext) -> NodeIPPoolStatus | None:
            if p.node_name != node.name:
                raise allocator.PoolFull(p.name)
            taken_back = allocator.to_take_back(p, pod.uid, pod.key, retention) is not None
            new, ip = allocator.reserve(
                p,
                ctx,
                pod.uid,
                pod.key,
                owner=owner,
                takeover_after=ttl,
                takeover_before=before,
                retention=retention,
            )
            got["ip"] = ip
            if taken_back:
                got["taken_back"] = "yes"
            else:
                got.pop("taken_back", None)
            return new

        return mutate

    def _submit(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, pool: str
    ) -> tuple[asyncio.Future[PoolView | None], dict[str, str | None]]:
        """Queue this cycle's reservation write for ``pool``; remember the pool for Unreserve."""
        got: dict[str, str | None] = {}
        written: set[str] = state.get(_MINE) or set()
        written.add(pool)
        state.write(_MINE, written)
        mutate = self._mutation(pod, node, state.read(_OWNER), got, state.get(_RETENTION))
        return self.writer.submit(pool, mutate), got

    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume a place for the pod in the node's pool with the most available addresses
        and queue its compare-and-swap write (no I/O here: PreBind waits for the write).

        Until the write lands the cache counts the place as taken, so the next
        scheduling cycles, running meanwhile, do not give it away again; concurrent
        reservations in one pool are coalesced into one write by the PoolWriter.
        A pod whose allocation on the node is another cycle's, still in flight (not
        :func:`~ipscheduler.underlayip.allocator.abandoned`), gets an error status: that
        cycle binds or releases it, and this pod is retried after backoff.
        """
        if pod.host_network:
            return Status.success()
        owner = f"{self.identity}/{secrets.token_hex(4)}"
        state.write(_OWNER, owner)
        kept: PoolView | None = state.get(_KEPT)
        for pool in self._candidates(pod, node, kept=kept):
            held = pool.allocations.get(pod.uid)
            if held is not None and held.phase != RETAINED:
                if not allocator.abandoned(held, owner, utc_now(), self.reserved_ttl, self.takeover_before):
                    return Status.error(str(allocator.ReservedElsewhere(pool.name, held)), plugin=NAME)
            elif kept is None and held is None and self.cache.available(pool) <= 0:
                continue
            future, got = self._submit(state, pod, node, pool.name)
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
            self._allocated(state, written, got)
            return Status.success()
        for pool in self._candidates(pod, node, skip=pool_name, kept=state.get(_KEPT)):
            future, got = self._submit(state, pod, node, pool.name)
            try:
                written = await future
            except allocator.PoolFull:
                continue
            except Exception as e:
                return Status.error(f"reserving an address in NodeIPPool {pool.name}: {e}", plugin=NAME)
            if written is not None and "ip" in got:
                self._allocated(state, written, got)
                return Status.success()
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)

    @staticmethod
    def _allocated(state: CycleState, pool: PoolView, got: dict[str, str | None]) -> None:
        """Record the allocation this cycle got, with its network facts (address pools), and
        whether it was the pod identity's Retained address (Unreserve keeps it then)."""
        ip = got["ip"]
        state.write(_ALLOC, (pool.name, ip))
        if got.get("taken_back"):
            state.write(_TAKEN_BACK, pool.name)
        if ip:
            state.write(_NETWORK, json.dumps(network_of(pool, ip), separators=(",", ":")))

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

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Release what this cycle's reservation wrote; logs instead of raising.

        A reservation still being written is waited for first (its outcome does
        not matter: a write that failed on a timeout may still have landed). Then
        a live read of the pod: the pool it is bound with (our Binding may have
        landed although it reported an error) keeps its allocation; if the read
        fails everything is kept and the GC decides later. In the other pools
        this cycle wrote to, the pod's allocation is released only if its
        ``reservedBy`` is this cycle's: never another replica's reservation; one that was
        the pod identity's Retained address is Retained again instead.
        """
        await self._commit(state, pod, node)
        written: set[str] = state.get(_MINE) or set()
        if not written:
            return
        state.write(_MINE, set())
        owner = state.read(_OWNER)
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
        keep = {bound} if bound else set()
        kept: PoolView | None = state.get(_KEPT)
        retained = {state.get(_TAKEN_BACK), kept.name if kept is not None else None}
        for pool_name in sorted(written - keep):
            try:
                await self.writer.submit(
                    pool_name,
                    functools.partial(
                        allocator.unreserve, uid=pod.uid, owner=owner, keep=pool_name in retained
                    ),
                )
            except Exception as e:
                log.log(
                    logging.WARNING if isinstance(e, (*TRANSIENT_ERRORS, ApiException)) else logging.ERROR,
                    "unreserve of %s in pool %s failed (%r); the GC will release it",
                    pod.key,
                    pool_name,
                    e,
                    exc_info=not isinstance(e, (*TRANSIENT_ERRORS, ApiException)),
                )
        if bound and bound in written:
            log.info(
                "unreserve of %s keeps its allocation in pool %s: the pod is bound with it", pod.key, bound
            )

    # -- PreBind / PostBind ----------------------------------------------
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the reservation's write, then add the address annotations to the binding;
        a pod re-homed after its retain-timeout releases its old address now."""
        st = await self._commit(state, pod, node)
        if not st.is_success():
            return st
        alloc = state.get(_ALLOC)
        if alloc is None:
            return Status.success()
        if state.get(_REHOME) is not None:
            await self._rehome(state, pod, node, alloc)
        annotations = dict(state.get(BIND_ANNOTATIONS) or {})
        if alloc[1]:
            network = state.read(_NETWORK)
            annotations[ANNOTATION_POOL] = alloc[0]
            annotations[ANNOTATION_IP] = alloc[1]
            state.write(SCHEDULED_NOTE, f"IP {alloc[1]}")
            state.write(LOG_FIELDS, {"pool": alloc[0], "ip": alloc[1]})
            annotations[ANNOTATION_NETWORK] = network
            if self.multus_network:
                self._multus_ips(pod, json.loads(network), annotations)
        else:
            # Count-only slot: none of the three (the pool's status records the slot). A
            # Binding can only add annotations, so any of them the pod was created with (stale
            # or forged) is overwritten with an empty value, which reads as "no address".
            for key in (ANNOTATION_POOL, ANNOTATION_IP, ANNOTATION_NETWORK):
                if key in pod.annotations:
                    annotations[key] = ""
        state.write(BIND_ANNOTATIONS, annotations)
        return Status.success()

    async def _rehome(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, got: tuple[str, str | None]
    ) -> None:
        """The pod waited longer than its retain-timeout for its retained address's node and
        got ``got`` (pool, address) instead: release the retained allocation (exactly the one
        read) and say so in a Warning ``AddressRehomed`` event. Nothing to do when the cycle
        took the retained address back after all."""
        old_pool, old_uid, old = state.read(_REHOME)
        if got[0] == old_pool and state.get(_TAKEN_BACK) == old_pool:
            return
        retention: Retention = state.read(_RETENTION)
        timeout = f"{retention.timeout:.0f}s" if retention.timeout is not None else "ever"
        message = (
            f"retained address {old.ip or '(slot)'} of NodeIPPool {old_pool} released: its node could not "
            f"take the pod for {timeout}; the pod now has {got[1] or 'a slot'} of {got[0]} on {node.name}"
        )
        try:
            await self.writer.submit(old_pool, functools.partial(allocator.release, uid=old_uid, expect=old))
        except Exception as e:
            log.warning("%s: releasing its retained address %s failed (%r); kept", pod.key, old.ip, e)
            return
        log.warning("%s: %s", pod.key, message)
        if self.rehomed is not None:
            self.rehomed()
        if self.recorder is not None:
            self.recorder.emit(pod_ref(pod), "Warning", "AddressRehomed", message)

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
        """Mark the allocation Bound: a deferred write that rides along with the pool's next
        write (at most ``PoolWriter.defer_delay`` later); if lost, the start-up reconcile
        and the GC sweep mark it."""
        alloc = state.get(_ALLOC)
        if alloc is None:
            return
        self.writer.defer(alloc[0], functools.partial(allocator.mark_bound, uid=pod.uid))


@dataclass(frozen=True)
class UnderlayIPDeps:
    """What UnderlayIP's factory binds besides its args (see :class:`UnderlayIP` for each):
    the pool cache and writer it reserves through, and the rest of the process it talks to."""

    cache: PoolCache
    writer: PoolWriter
    api: KubeApi | None = None
    identity: str = ""
    reserved_ttl: float = 60.0
    takeover_before: datetime.datetime | None = None
    recorder: EventRecorder | None = None
    requeue: Callable[[ClusterEvent], object] | None = None
    rehomed: Callable[[], object] | None = None


def new(args: UnderlayIPArgs, handle: Handle, deps: UnderlayIPDeps) -> UnderlayIP:
    """UnderlayIP's factory ``new(args, handle)`` once its registration has bound ``deps``."""
    return UnderlayIP(
        deps.cache,
        deps.writer,
        args.strategy,
        deps.api,
        deps.identity,
        deps.reserved_ttl,
        args.multus_network,
        deps.takeover_before,
        deps.recorder,
        deps.requeue,
        deps.rehomed,
    )
