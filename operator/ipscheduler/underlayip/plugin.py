"""UnderlayIP: our plugin. A pod needs a free underlay address on its node.

The extension points only: every address question goes to an
:class:`~ipscheduler.underlayip.binder.AddressBinder` (as kube-scheduler's VolumeBinding
plugin over its ``SchedulerVolumeBinder``), and this module turns its answers into
Statuses, messages and the Binding's annotations.

- PreFilter/Filter: the binder's ``find`` and ``fit``: a node fits when a pool the pod may
  use there has a free address (``explain`` words the same answers).
- Score: ``spread`` (default, as the original ip-scheduler): most free addresses first;
  ``binpack``: fewest free first; the pools the pod names first. Normalized to 0..100.
- Reserve / Unreserve: the binder's ``assume`` (in memory, write queued) and ``revert``.
- PreBind: the binder's ``commit`` (waits for the write), then ``ipscheduler.io/ip``,
  ``ipscheduler.io/pool`` and ``ipscheduler.io/network`` (a CNI IPAM result:
  :func:`ipscheduler.underlayip.pool.network_of`) into the Binding's annotations.
- PostBind: the binder's ``mark_bound`` (deferred: rides along with the pool's next write).
- Preemption (PreFilter extensions, the nominated place, the extender's ``/preempt``):
  the binder's one eviction predicate.

``hostNetwork`` pods use the node's own address: every extension point skips them.

UnderlayIP is an out-of-tree plugin: :func:`new` is its factory, registered by the command
that wires the scheduler (``cmd/profiles``, as upstream's ``app.WithPlugin(Name, New)``),
which supplies its dependencies; its ``pluginConfig`` args are :class:`UnderlayIPArgs`.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ipscheduler.framework.events import NODE_ADD_OR_DELETE
from ipscheduler.framework.interface import (
    BIND_ANNOTATIONS,
    LOG_FIELDS,
    SCHEDULED_NOTE,
    ClusterEventWithHint,
    CycleState,
    Handle,
    Status,
    default_normalize,
)
from ipscheduler.framework.types import NodeInfo, PodInfo
from ipscheduler.underlayip import events, multus
from ipscheduler.underlayip.args import Strategy, UnderlayIPArgs
from ipscheduler.underlayip.binder import (
    AddressBinder,
    Committed,
    Fit,
    PodAddresses,
    PoolBinder,
    Problem,
    Refusal,
)
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.ledger import AddressLedger
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_IPS,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    ANNOTATION_POOLS,
)
from ipscheduler.underlayip.sticky import StickyAddresses
from ipscheduler.underlayip.writer import PoolWriter

log = logging.getLogger(__name__)

__all__ = ["ERR_NO_FREE", "NAME", "UnderlayIP", "UnderlayIPArgs", "UnderlayIPDeps", "new"]

NAME = "UnderlayIP"
ERR_NO_FREE = "node(s) had no free underlay IPs"
ERR_NO_FREE_FAMILY = "node(s) had no free {family} underlay IP"
"""A pod that names IP families: the first family the node cannot give (IPv4, IPv6)."""
ERR_NO_FREE_INTERFACE = "node(s) had no free underlay IP for interface {interface}"
ERR_NO_POOL_INTERFACE = "node(s) had no NodeIPPool interface {interface} may use"
"""A further interface of the pod (:mod:`ipscheduler.underlayip.interfaces`) that the node
cannot serve: no free address in its pools there, or none of its pools there."""
ERR_NO_POOL = "node(s) had no NodeIPPool"
ERR_NO_USABLE_POOL = "node(s) had no NodeIPPool the pod may use"
ERR_RETAINED = "node(s) didn't hold the pod's retained address"
ERR_RETAINING = "the pod's retained address is still recorded for its previous pod"
_STATE = f"{NAME}/cycle"
"""The CycleState key of UnderlayIP's part of a cycle: the binder's
:class:`~ipscheduler.underlayip.binder.PodAddresses` (upstream's ``stateData``)."""


class UnderlayIP:
    """PreFilter/Filter/Score/Reserve/PreBind/PostBind on NodeIPPool addresses (module doc):
    the extension points over an :class:`~ipscheduler.underlayip.binder.AddressBinder`,
    which answers every address question, and the sticky-address acts
    (:class:`~ipscheduler.underlayip.sticky.StickyAddresses`: events, the retain-timeout
    timer, re-homing). The plugin alone turns the binder's results into Statuses.

    ``strategy``: the Score's (``spread`` or ``binpack``). ``multus_network``
    (``[namespace/]name``, validated by the caller with
    :func:`ipscheduler.underlayip.multus.parse_network_name`): PreBind also puts the address
    into the ``ips`` of that element of the pod's ``k8s.v1.cni.cncf.io/networks``."""

    name = NAME

    def __init__(
        self,
        binder: AddressBinder,
        sticky: StickyAddresses,
        strategy: Strategy = "spread",
        multus_network: str | None = None,
    ) -> None:
        self.binder = binder
        self.sticky = sticky
        self.strategy = strategy
        self.multus_network = multus_network

    def _cycle(self, state: CycleState, pod: PodInfo, counts: bool = True) -> PodAddresses:
        """This cycle's state; found when PreFilter did not run (the extender's verbs each
        start a new cycle state), with the nodes' free counts unless ``counts`` is False
        (Reserve needs none)."""
        cycle: PodAddresses | None = state.get(_STATE)
        if cycle is None:
            cycle = self.binder.find(pod) if counts else self.binder.needs_of(pod)
            state.write(_STATE, cycle)
        return cycle

    # -- PreFilter -----------------------------------------------------
    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Find the pod's needs and what each node offers
        (:meth:`~ipscheduler.underlayip.binder.AddressBinder.find`) into the cycle state;
        skip for hostNetwork. A malformed ``ipscheduler.io/pools``, or one naming a pool that
        does not exist, leaves the pod unschedulable with that reason. A pod pinned to its
        retained address's node is activated again at its retain-timeout; a release policy
        that cannot be honoured is said once in a Warning event."""
        if pod.host_network:
            return Status.success()
        needs = self.binder.find(pod)
        if needs.problem is not None and needs.problem.reason == "pool-list":
            return Status.unschedulable(needs.problem.detail, plugin=NAME)
        state.write(_STATE, needs)
        if needs.retention.problem:
            self.sticky.refused(pod, needs.retention.problem)
        if needs.retain_timeout_in is not None:
            self.sticky.activate_at_timeout(pod.uid, needs.retain_timeout_in)
        return _problem_status(needs.problem)

    # -- Filter --------------------------------------------------------
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Unschedulable when no pool the pod may use on the node has a free address (evicting
        a pod may free one); UnschedulableAndUnresolvable when the node has no pool, none the
        pod may use, or the pod's retained address is on another node (no eviction helps:
        kube-scheduler's preemption, and the extender's ``FailedAndUnresolvableNodes``).
        Raises KeyError when PreFilter did not run in ``state``."""
        if pod.host_network:
            return Status.success()
        needs = state.read(_STATE)
        fit = self.binder.fit(needs, pod, node.name)
        if fit is Fit.FITS:
            return _SUCCESS  # the hot path: no enum hash
        if fit is Fit.INTERFACE_NO_FREE:
            return Status.unschedulable(
                ERR_NO_FREE_INTERFACE.format(interface=needs.short[node.name]), plugin=NAME
            )
        if fit is Fit.INTERFACE_NO_POOL:
            return Status.unresolvable(
                ERR_NO_POOL_INTERFACE.format(interface=needs.short[node.name]), plugin=NAME
            )
        return _FIT_STATUS[fit]

    room_resource = "free underlay IPs"
    """What :meth:`room` counts (:class:`~ipscheduler.framework.interface.CapacityAware`)."""

    def room(self, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> int | None:
        """Pods like ``pod`` the pools it may use on ``nodes`` can take now
        (:meth:`~ipscheduler.underlayip.binder.AddressBinder.room`); None for hostNetwork pods
        (they take no address). Coscheduling asks before a group reserves anything. Changes
        nothing (no event, no timer)."""
        return None if pod.host_network else self.binder.room(pod, nodes.keys())

    # -- PreFilter extensions (preemption's dry run, nominated pods) ------------------
    def remove_pod(self, state: CycleState, pod: PodInfo, pod_to_remove: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_remove`` is evicted from ``node`` in a what-if run: the place it frees
        there counts as free for ``pod``
        (:meth:`~ipscheduler.underlayip.binder.PoolBinder.frees`)."""
        cycle: PodAddresses | None = state.get(_STATE)
        if cycle is not None and not pod.host_network:
            self.binder.count_eviction(cycle, pod, pod_to_remove.uid, node.name)
        return Status.success()

    def add_pod(self, state: CycleState, pod: PodInfo, pod_to_add: PodInfo, node: NodeInfo) -> Status:
        """``pod_to_add`` counts on ``node`` in a what-if run: a victim given back retakes the
        place :meth:`remove_pod` counted; a pod nominated there (pending, no address yet)
        takes one place."""
        cycle: PodAddresses | None = state.get(_STATE)
        if cycle is not None and not pod.host_network and not pod_to_add.host_network:
            self.binder.count_addition(cycle, pod, pod_to_add, node.name)
        return Status.success()

    async def nominated(self, pod: PodInfo, node: str, victims: frozenset[str]) -> None:
        """Preemption nominated ``pod`` to ``node`` ("": to none): keep its nominated place,
        where a victim frees one, so no other pod takes it while the victims terminate
        (:meth:`~ipscheduler.underlayip.binder.AddressBinder.nominate`)."""
        if pod.host_network:
            return
        pool = await self.binder.nominate(pod, node, victims)
        if pool is not None:
            log.info("the nominated place of %s is in NodeIPPool %s (nominated to %s)", pod.key, pool, node)

    def fits_after_evicting(
        self, state: CycleState, pod: PodInfo, node: NodeInfo, victims: frozenset[str]
    ) -> bool:
        """Whether the pod passes :meth:`filter` on ``node`` once the pods of UIDs ``victims``
        are gone (the extender's ``preempt``), by the same predicate as :meth:`remove_pod`
        (:meth:`~ipscheduler.underlayip.binder.AddressBinder.fits_after_evicting`)."""
        if pod.host_network:
            return True
        return self.binder.fits_after_evicting(self._cycle(state, pod), pod, node.name, victims)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A NodeIPPool added, changed or deleted, or addresses released
        (:data:`~ipscheduler.underlayip.events.NODE_IP_POOL_CHANGE`,
        :data:`~ipscheduler.underlayip.events.ADDRESS_RELEASED`), or a node added or deleted
        (a pool may name a node that did not exist yet; the node set decides which pools'
        addresses conflict), or a namespace's default pools changed
        (:data:`~ipscheduler.underlayip.events.DEFAULT_POOLS_CHANGE`), or a
        NetworkAttachmentDefinition's pools (:data:`~ipscheduler.underlayip.events.NETWORK_POOLS_CHANGE`:
        a pod refused for a NAD's malformed annotation, or for its pools):
        retry the pod. A bound pod deleted does not: its address is free only once released."""
        return [
            ClusterEventWithHint(events.NODE_IP_POOL_CHANGE),
            ClusterEventWithHint(NODE_ADD_OR_DELETE),
            ClusterEventWithHint(events.DEFAULT_POOLS_CHANGE),
            ClusterEventWithHint(events.NETWORK_POOLS_CHANGE),
        ]

    # -- Score ---------------------------------------------------------
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Free addresses on the node (0 for hostNetwork pods): pods like it the node can take;
        for a PreferDualStack pod on a node that can give it one family only, those
        (:meth:`normalize_score` ranks such nodes below the others)."""
        if pod.host_network:
            return 0
        cycle: PodAddresses = state.read(_STATE)
        return cycle.free.get(node.name, 0) or cycle.fallback.get(node.name, 0)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """spread: most free → 100; binpack: fewest free → 100. A pod naming several pools
        (``ipscheduler.io/pools``) prefers the nodes of an earlier one whatever their free
        counts: of ``n`` pools, the ``r``-th (from 0) gives ``((n-1-r)*100 + free score) / n``."""
        default_normalize(scores, reverse=self.strategy == "binpack")
        cycle: PodAddresses | None = state.get(_STATE)
        if cycle is not None and cycle.fallback:
            # PreferDualStack: nodes that give every family (upper half) before those that
            # give one (lower half), each ordered by the strategy.
            for node, score in scores.items():
                scores[node] = (score + (100 if cycle.free.get(node, 0) > 0 else 0)) // 2
        if cycle is None or len(cycle.choice.names) < 2:
            return
        n = len(cycle.choice.names)
        for node, score in scores.items():
            scores[node] = ((n - 1 - cycle.ranks.get(node, n - 1)) * 100 + score) // n

    # -- Reserve / Unreserve ---------------------------------------------
    async def reserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Assume a place in the node's pool with the most available addresses and queue its
        compare-and-swap write (no I/O here: PreBind waits for the write); see
        :meth:`~ipscheduler.underlayip.binder.PoolBinder.assume`."""
        if pod.host_network:
            return Status.success()
        return _refusal_status(self.binder.assume(self._cycle(state, pod, counts=False), pod, node.name))

    async def unreserve(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Give back what this cycle's reservation wrote
        (:meth:`~ipscheduler.underlayip.binder.PoolBinder.revert`); the pod identity's
        Retained address taken back, or pinned to, is Retained again. Logs instead of raising."""
        c: PodAddresses | None = state.get(_STATE)
        if c is not None:
            await self.binder.revert(c, pod, node.name)

    # -- PreBind / PostBind ----------------------------------------------
    async def pre_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Wait for the reservation's write, then add the address annotations to the binding;
        a pod placed anew after its retain-timeout lets its old address go now."""
        c: PodAddresses | None = state.get(_STATE)
        if c is None:
            return Status.success()
        done = await self.binder.commit(c, pod, node.name)
        if not isinstance(done, Committed):
            return _refusal_status(done)
        if done.rehome is not None:
            await self.sticky.rehome(pod, c.retention.timeout, done.rehome, node.name, done.pool, done.ip)
        annotations = dict(state.get(BIND_ANNOTATIONS) or {})
        if done.ip:
            annotations[ANNOTATION_POOL] = done.pool
            annotations[ANNOTATION_IP] = done.ip
            annotations[ANNOTATION_NETWORK] = done.network
            if c.family.dual or len(done.ips) > 1:
                annotations[ANNOTATION_IPS] = ",".join(done.ips)
            elif ANNOTATION_IPS in pod.annotations:
                annotations[ANNOTATION_IPS] = ""  # stale or forged: a Binding only adds
            state.write(
                SCHEDULED_NOTE, f"IP {done.ip}" if len(done.ips) < 2 else f"IPs {', '.join(done.ips)}"
            )
            state.write(LOG_FIELDS, {"pool": done.pool, "ip": done.ip})
            if self.multus_network:
                self._multus_ips(pod, json.loads(done.network), annotations)
        else:
            # Count-only slot: none of the three (the pool's status records the slot). A
            # Binding can only add annotations, so any of them the pod was created with (stale
            # or forged) is overwritten with an empty value, which reads as "no address".
            for key in (ANNOTATION_POOL, ANNOTATION_IP, ANNOTATION_IPS, ANNOTATION_NETWORK):
                if key in pod.annotations:
                    annotations[key] = ""
        if done.interfaces:
            annotations[ANNOTATION_INTERFACES] = json.dumps(
                {
                    i.interface: {"pool": i.pool, "ips": list(i.ips), "network": i.network}
                    for i in done.interfaces
                },
                separators=(",", ":"),
            )
            self._multus_interface_ips(pod, done, annotations)
        elif ANNOTATION_INTERFACES in pod.annotations:
            annotations[ANNOTATION_INTERFACES] = ""  # stale or forged: a Binding only adds
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

    def _multus_interface_ips(self, pod: PodInfo, done: Committed, annotations: dict[str, str]) -> None:
        """Put each further interface's addresses (with their prefixes) into the ``ips`` of the
        pod's Multus element it came from (the network-status Multus writes then lists them
        per network); an annotation Multus could not parse is left alone with a warning."""
        placed = [(i.need.element, [str(e["address"]) for e in i.network["ips"]]) for i in done.interfaces]
        placed = [(element, ips) for element, ips in placed if element >= 0]
        if not placed:
            return
        current = annotations.get(multus.NETWORKS_ANNOTATION, pod.annotations.get(multus.NETWORKS_ANNOTATION))
        try:
            for element, ips in placed:
                current = multus.with_element_ips(current, element, ips)
        except multus.MultusError as e:
            log.warning("%s: %s; left as it is", pod.key, e)
            return
        if current is not None:
            annotations[multus.NETWORKS_ANNOTATION] = current

    async def post_bind(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> None:
        """Mark the allocation Bound: a deferred mutation that rides along with the pool's
        next write, never a write of its own; the GC sweep writes what is left after
        ``--bound-mark-delay``, in one write per pool."""
        c: PodAddresses | None = state.get(_STATE)
        if c is not None:
            self.binder.mark_bound(c, pod.uid)


_SUCCESS = Status.success()
_FIT_STATUS = {
    Fit.FITS: Status.success(),
    Fit.NO_FREE: Status.unschedulable(ERR_NO_FREE, plugin=NAME),
    Fit.NO_FREE_IPV4: Status.unschedulable(ERR_NO_FREE_FAMILY.format(family="IPv4"), plugin=NAME),
    Fit.NO_FREE_IPV6: Status.unschedulable(ERR_NO_FREE_FAMILY.format(family="IPv6"), plugin=NAME),
    Fit.NO_POOL: Status.unresolvable(ERR_NO_POOL, plugin=NAME),
    Fit.NO_USABLE_POOL: Status.unresolvable(ERR_NO_USABLE_POOL, plugin=NAME),
    Fit.RETAINED_ELSEWHERE: Status.unresolvable(ERR_RETAINED, plugin=NAME),
}
"""Filter's Status for each :class:`~ipscheduler.underlayip.binder.Fit` (shared: Statuses
are not modified once made)."""


def _problem_status(problem: Problem | None) -> Status:
    """PreFilter's Status for the binder's :class:`~ipscheduler.underlayip.binder.Problem`."""
    if problem is None:
        return Status.success()
    if problem.reason == "unknown-pools":
        named_by = problem.detail or ANNOTATION_POOLS
        message = f"NodeIPPool(s) {', '.join(problem.pools)} named by {named_by} do not exist"
    elif problem.reason == "retaining":
        message = ERR_RETAINING
    else:
        message = problem.detail
    return Status.unschedulable(message, plugin=NAME)


def _refusal_status(refusal: Refusal | None) -> Status:
    """Reserve's and PreBind's Status for the binder's
    :class:`~ipscheduler.underlayip.binder.Refusal` (None: success): no free address is
    Unschedulable; another cycle's reservation in flight and a failed write are Errors
    (retried after backoff)."""
    if refusal is None:
        return Status.success()
    if refusal.reason == "no-free":
        if refusal.detail:  # a further interface
            return Status.unschedulable(ERR_NO_FREE_INTERFACE.format(interface=refusal.detail), plugin=NAME)
        return Status.unschedulable(ERR_NO_FREE, plugin=NAME)
    if refusal.reason == "failed":
        return Status.error(
            f"reserving an address in NodeIPPool {refusal.pool}: {refusal.detail}", plugin=NAME
        )
    return Status.error(refusal.detail, plugin=NAME)


@dataclass(frozen=True)
class UnderlayIPDeps:
    """What UnderlayIP's factory binds besides its args and the handle: the pool cache and
    writer its binder reserves through, this replica's identity and timings
    (:class:`~ipscheduler.underlayip.binder.PoolBinder`), and the re-homing counter
    (:class:`~ipscheduler.underlayip.sticky.StickyAddresses`)."""

    cache: PoolCache
    writer: PoolWriter
    identity: str = ""
    reserved_ttl: float = 60.0
    takeover_before: datetime.datetime | None = None
    rehomed: Callable[[], object] | None = None
    ledger: AddressLedger = field(init=False)
    """The address ledger over ``cache``, built here once: every profile's binder shares it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ledger", AddressLedger(self.cache))


def new(args: UnderlayIPArgs, handle: Handle, deps: UnderlayIPDeps) -> UnderlayIP:
    """UnderlayIP's factory ``new(args, handle)`` once its registration has bound ``deps``:
    builds the binder (with the handle's API client for Unreserve's live reads) and the
    sticky-address acts (the handle's event recorder and ``activate``: a pod pinned to its
    retained address's node, at its retain-timeout), and hands both to the plugin."""
    binder = PoolBinder(
        deps.cache,
        deps.writer,
        ledger=deps.ledger,
        api=handle.client,
        identity=deps.identity,
        reserved_ttl=deps.reserved_ttl,
        takeover_before=deps.takeover_before,
    )
    sticky = StickyAddresses(deps.writer, handle.activate, handle.recorder, deps.rehomed)
    return UnderlayIP(binder, sticky, args.strategy, args.multus_network)
