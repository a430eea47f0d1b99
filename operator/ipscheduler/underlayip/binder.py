"""The address binder: every address question UnderlayIP asks, answered in one place.

As kube-scheduler's VolumeBinding plugin sits over its ``SchedulerVolumeBinder``
(``pkg/scheduler/framework/plugins/volumebinding/binder.go``: ``FindPodVolumes`` in
PreFilter/Filter, ``AssumePodVolumes`` in Reserve, ``BindPodVolumes`` in PreBind,
``RevertAssumedPodVolumes`` in Unreserve), UnderlayIP sits over an :class:`AddressBinder`:

- **find** (PreFilter): the pools the pod may use, the address its identity keeps, and how
  many pods like it each node's usable pools can take (:class:`PodAddresses`);
- **fit** (Filter): whether one node can give the pod an address, and if not why
  (:class:`Fit`);
- **room**: how many pods like it a set of nodes can take (Coscheduling asks);
- **frees** / **fits_after_evicting** / **count_eviction** / **count_addition**: what
  evicting a pod frees. One predicate (:meth:`PoolBinder.frees`) answers in-process
  preemption's dry run, the extender's ``/preempt`` and the nominated place alike;
- **nominate**: preemption nominated the pod to a node: the place a victim frees there is
  the pod's nominated place (a Nominated allocation) while the victims terminate;
- **assume** (Reserve): a place in the first candidate pool with room; the ledger counts it
  as taken and its compare-and-swap write is queued (no I/O);
- **commit** (PreBind): wait for that write; if the pool turned out full (a stale cache,
  another replica), try the node's other candidates one by one. Returns
  :class:`Committed` (which pool, which address, taken back or not, and the retained
  address to let go when the pod was placed anew) or a :class:`Refusal`;
- **revert** (Unreserve): after a live read shows the pod not bound with it, release what
  this cycle wrote, and only that (CAS on ``reservedBy``); a Retained address taken back is
  Retained again;
- **mark_bound** (PostBind): a deferred mutation that rides along with the pool's next
  write; what no write carries within ``--bound-mark-delay`` the GC sweep writes.

Results are plain values; the plugin alone turns them into framework Statuses and
messages. Each cycle's part is a :class:`PodAddresses`, kept in the plugin's cycle state
(upstream's ``stateData``).

Size: the one room where every "how many, which address, is it freed" question is
answered, so that dual-stack and several interfaces extend one interface; upstream's
``binder.go`` is one file for the same reason. Most of its lines are the docstrings that
say what each answer counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import functools
import json
import logging
import secrets
import socket
import uuid
from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.framework.klog import kv
from ipscheduler.framework.types import PodInfo
from ipscheduler.kube.client import TRANSIENT_ERRORS, PodReader, live_pod
from ipscheduler.underlayip import allocator
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.families import (
    ANY_FAMILY,
    PREFER_DUAL_STACK,
    SINGLE_STACK,
    VERSION,
    FamilyNeed,
    family_need,
    family_of,
)
from ipscheduler.underlayip.interfaces import (
    DEFAULT_INTERFACE,
    InterfaceNeed,
    bound_pools,
    further_interfaces,
)
from ipscheduler.underlayip.ledger import AddressLedger
from ipscheduler.underlayip.models import NOMINATED, RESERVED, RETAINED, NodeIPPoolStatus
from ipscheduler.underlayip.pool import (
    PoolContext,
    PoolView,
    freed_by_eviction,
    merge_networks,
    network_of_all,
    utc_now,
    without_default_route,
)
from ipscheduler.underlayip.retention import Retention, retention_of
from ipscheduler.underlayip.selection import PoolChoice, may_use, pool_choice
from ipscheduler.underlayip.sticky import PINNED, REHOME, WAITING, Claim, KeptAddress, kept_address
from ipscheduler.underlayip.writer import MutateFn, PoolWriter

log = logging.getLogger(__name__)


class Fit(enum.Enum):
    """Whether a node can give a pod an address (:meth:`AddressBinder.fit`), and if not why.

    ``NO_FREE`` and its per-family kinds (a pod that names IP families: the first of them the
    node cannot give) may change by evicting a pod; the others cannot (kube-scheduler's
    UnschedulableAndUnresolvable). The ``INTERFACE_`` kinds are about a further interface
    of the pod (:mod:`ipscheduler.underlayip.interfaces`): which one, the cycle's
    :attr:`PodAddresses.short` says by node."""

    FITS = "fits"
    NO_FREE = "no free address"
    NO_FREE_IPV4 = "no free IPv4 address"
    NO_FREE_IPV6 = "no free IPv6 address"
    NO_POOL = "no pool on the node"
    NO_USABLE_POOL = "no pool on the node the pod may use"
    RETAINED_ELSEWHERE = "the pod's retained address is on another node"
    INTERFACE_NO_FREE = "no free address for a further interface"
    INTERFACE_NO_POOL = "no pool on the node a further interface may use"


ASSIGNMENT_STEPS = 10_000
"""The most pools :meth:`PoolBinder.assignment` tries for one pod on one node (a bound on a
backtracking search that real pods, a few interfaces of a few pools each, never reach)."""

_EVICTION_MAY_HELP = frozenset({Fit.NO_FREE, Fit.NO_FREE_IPV4, Fit.NO_FREE_IPV6, Fit.INTERFACE_NO_FREE})
"""What evicting a pod may change: a free place of the first interface or of a further one."""


@dataclass(frozen=True)
class Problem:
    """Why no node can give the pod an address, whatever the nodes (PreFilter), by
    ``reason``:

    - ``pool-list``: its (or its namespace's) pool list is malformed (``detail``: how, in
      words, from :func:`~ipscheduler.underlayip.selection.pool_choice`);
    - ``unknown-pools``: it names ``pools`` that do not exist;
    - ``families``: its (or its namespace's) IP family annotations are malformed
      (``detail``: how, from :func:`~ipscheduler.underlayip.families.family_need`);
    - ``interfaces``: its further interfaces cannot be read (``detail``: how, from
      :func:`~ipscheduler.underlayip.interfaces.further_interfaces`);
    - ``retaining``: its identity's address is still recorded for the identity's previous
      pod (the pod waits for it, never takes a second)."""

    reason: Literal["pool-list", "unknown-pools", "families", "interfaces", "retaining"]
    detail: str = ""
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """Why an address could not be assumed or committed, by ``reason``:

    - ``no-free``: no candidate pool of the node had room;
    - ``reserved-elsewhere``: the pod's allocation on the node is another cycle's, still in
      flight (``detail``: which, in words); retried after backoff;
    - ``failed``: the write to pool ``pool`` failed (``detail``: the error)."""

    reason: Literal["no-free", "reserved-elsewhere", "failed"]
    detail: str = ""
    pool: str = ""


@dataclass(frozen=True)
class InterfaceAddresses:
    """What a further interface of the pod got: ``interface``, its ``pool``, ``ips`` (primary
    first), ``network`` (its CNI IPAM result as a dict, no default route) and the ``need`` it
    answers (its Multus element, if any)."""

    interface: str
    pool: str
    ips: tuple[str, ...]
    network: dict[str, Any]
    need: InterfaceNeed
    routed: dict[str, Any] | None = None
    """The first interface's second family from a second pool (``interface`` is ``eth0``):
    its network with the pool's default route, which the first interface carries."""


@dataclass(frozen=True)
class Committed:
    """The allocation a cycle made: ``pool``, ``ip`` (None: a count-only slot), ``network``
    (its CNI IPAM result as JSON, every address of ``ips``; "" for a slot), ``taken_back``
    (it is the identity's Retained address, taken back), ``rehome``: the identity's
    retained address to let go because the pod waited past its retain-timeout and was
    placed anew (None: none), and ``ips``: every address, primary first (``ip`` is the
    first; two for a dual-stack pod; default: ``ip`` alone)."""

    pool: str
    ip: str | None
    network: str = ""
    taken_back: bool = False
    rehome: Claim | None = None
    ips: tuple[str, ...] = ()
    interfaces: tuple[InterfaceAddresses, ...] = ()
    """The pod's further interfaces, in the order it asked for them."""

    def __post_init__(self) -> None:
        if not self.ips and self.ip:
            object.__setattr__(self, "ips", (self.ip,))  # one address: ip alone


@dataclass
class _Write:
    """One queued reservation write: its pool, its future (the pool as written; None: the
    pool is gone) and what the mutation decided the last time the writer called it."""

    pool: str
    decided: allocator.Reservation | None = None
    future: asyncio.Future[PoolView | None] = field(init=False)


@dataclass
class PodAddresses:
    """One pod's address needs in one scheduling cycle and what the binder did for them.

    What the pod asks: ``choice``, the pools it may use; ``retention``, its release policy;
    ``kept``, the address its identity keeps (None: none); ``problem``, why no node can take
    it (None: nodes may); ``family``, its IP families (:mod:`ipscheduler.underlayip.families`).
    What the nodes offer: ``free``, by node name, the pods like it its usable pools can
    take (only nodes with pools have a count; a pod naming families counts pools that give
    one address of each from one pool); ``fallback``, for a PreferDualStack pod, by node
    name, the pods like it that could get one family only there (nodes where ``free`` is 0);
    ``ranks``, by node name, the rank of its first usable pool in the pod's
    ``ipscheduler.io/pools``; ``interface_free``, by further interface (``interfaces``, the
    pod's, :mod:`ipscheduler.underlayip.interfaces`) then node, the pods like it that
    interface's usable pools can take; ``short``, by node, the further interface Filter found
    no address for there.
    What the binder did (its own bookkeeping): ``owner`` (this cycle's ``reservedBy``),
    ``written`` (every pool it queued a write to: what Unreserve may undo), ``pending``
    (the write Reserve queued, until PreBind waits for it; ``pending_more``: those of the
    further interfaces) and ``committed``."""

    choice: PoolChoice
    retention: Retention
    kept: KeptAddress | None = None
    problem: Problem | None = None
    family: FamilyNeed = ANY_FAMILY
    interfaces: tuple[InterfaceNeed, ...] = ()
    free: dict[str, int] = field(default_factory=dict)
    fallback: dict[str, int] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    interface_free: dict[str, dict[str, int]] = field(default_factory=dict)
    short: dict[str, str] = field(default_factory=dict)
    evicted: dict[str, set[str]] = field(default_factory=dict)
    """By node, the pods a what-if run of preemption evicted there (:meth:`PoolBinder.count_eviction`):
    the places they free count as room for the pod's interfaces."""
    reserved: frozenset[str] = frozenset()
    """Pools the pod's further interfaces name and its first interface does not: never the
    first interface's (:meth:`PoolBinder.candidates`)."""
    disjoint: bool = False
    """Whether the pools of the pod's interfaces can never be the same one (each further
    interface's list apart from the others' and from the first interface's pools): Filter
    then needs no :meth:`PoolBinder.assignment`."""
    owner: str = ""
    written: set[str] = field(default_factory=set)
    pending: _Write | None = None
    pending_more: list[tuple[InterfaceNeed, _Write]] = field(default_factory=list)
    taken_back: set[str] = field(default_factory=set)
    """The pools where this cycle took back the identity's Retained address (Unreserve keeps
    them Retained)."""
    committed: Committed | Refusal | None = None

    def clone(self) -> PodAddresses:
        """A copy for a what-if run (:meth:`CycleState.clone
        <ipscheduler.framework.interface.CycleState.clone>`): its own free counts."""
        return dataclasses.replace(
            self,
            free=dict(self.free),
            fallback=dict(self.fallback),
            interface_free={k: dict(v) for k, v in self.interface_free.items()},
            evicted={k: set(v) for k, v in self.evicted.items()},
            short={},
        )

    @property
    def versions(self) -> tuple[int, ...]:
        """The IP versions of the pod's families, primary first (empty: any one address)."""
        return self.family.versions

    @property
    def pinned(self) -> PoolView | None:
        """The pool of the Retained address the pod is pinned to (None: not pinned)."""
        return self.kept.claim.pool if self.kept is not None and self.kept.kind == PINNED else None

    @property
    def retain_timeout_in(self) -> float | None:
        """Seconds until a pod pinned to its retained address's node may be placed anew (None:
        not pinned, or pinned for ever)."""
        return self.kept.timeout_in if self.kept is not None and self.kept.kind == PINNED else None


class AddressBinder(Protocol):
    """Every address question of UnderlayIP (module doc); results, never Statuses.

    Implemented by :class:`PoolBinder`; the plugin's tests use a fake."""

    def find(self, pod: PodInfo) -> PodAddresses:
        """The pod's needs and what each node offers (PreFilter)."""
        ...

    def needs_of(self, pod: PodInfo) -> PodAddresses:
        """What the pod asks, without free counts (Reserve without PreFilter)."""
        ...

    def fit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Fit:
        """Whether node ``node`` can give the pod an address now (Filter)."""
        ...

    def room(self, pod: PodInfo, nodes: Collection[str]) -> int:
        """Pods like ``pod`` the pools it may use on ``nodes`` can take now."""
        ...

    def fits_after_evicting(
        self, needs: PodAddresses, pod: PodInfo, node: str, victims: frozenset[str]
    ) -> bool:
        """Whether the pod fits on ``node`` once the pods of UIDs ``victims`` are gone."""
        ...

    def count_eviction(self, needs: PodAddresses, pod: PodInfo, victim: str, node: str) -> None:
        """A what-if run evicts pod ``victim`` from ``node``: count what it frees."""
        ...

    def count_addition(self, needs: PodAddresses, pod: PodInfo, other: PodInfo, node: str) -> None:
        """A what-if run adds pod ``other`` on ``node``: count the place it takes."""
        ...

    async def nominate(self, pod: PodInfo, node: str, victims: frozenset[str]) -> str | None:
        """Preemption nominated ``pod`` to ``node``: keep its nominated place; the pool."""
        ...

    def assume(self, needs: PodAddresses, pod: PodInfo, node: str) -> Refusal | None:
        """Take a place in memory and queue its write (Reserve); None: assumed."""
        ...

    async def commit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Committed | Refusal | None:
        """Wait for the assumed write (PreBind); None: nothing was assumed."""
        ...

    async def revert(self, needs: PodAddresses, pod: PodInfo, node: str) -> None:
        """Give back what the cycle wrote (Unreserve)."""
        ...

    def mark_bound(self, needs: PodAddresses, uid: str) -> None:
        """Mark the committed allocation Bound (PostBind)."""
        ...


class PoolBinder:
    """:class:`AddressBinder` over the NodeIPPools of a :class:`PoolCache`, writing through a
    :class:`PoolWriter` (module doc).

    ``cache``: the pool index it reads; ``ledger``: the address ledger over it, where
    :meth:`assume` counts a place as taken (default: a ledger of its own; the plugin's
    dependencies share one between profiles). ``api`` is read live by :meth:`revert` (None:
    release without reading).
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
        *,
        ledger: AddressLedger | None = None,
        api: PodReader | None = None,
        identity: str = "",
        reserved_ttl: float = 60.0,
        takeover_before: datetime.datetime | None = None,
    ) -> None:
        self.cache = cache
        self.ledger = ledger if ledger is not None else AddressLedger(cache)
        self.writer = writer
        self.api = api
        self.identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"
        self.reserved_ttl = reserved_ttl
        self.takeover_before = takeover_before

    def _choice(self, pod: PodInfo) -> PoolChoice:
        return pool_choice(pod, self.cache.default_pools(pod.namespace))

    def needs_of(self, pod: PodInfo) -> PodAddresses:
        """What the pod asks (pools, release policy, kept address, problem), without what
        the nodes offer: for a Reserve that no PreFilter of its cycle preceded (the
        extender's bind verb), which needs no free counts."""
        return self.find(pod, count=False)

    # -- find / fit / room -------------------------------------------------------
    def find(self, pod: PodInfo, count: bool = True) -> PodAddresses:
        """The pools the pod may use (:mod:`ipscheduler.underlayip.selection`: its
        ``ipscheduler.io/pools``, its namespace's default and the pools'
        ``spec.namespaces``), its release policy and kept address, and by node the pods like
        it those pools can take (pools of a node add up; assumed reservations deducted; an
        address the pod already holds counts as free for it; a place preemption holds for
        it counts once the pool is no longer over its capacity). ``problem`` says why no
        node can (:class:`Problem`). ``count`` False: the pod's needs alone, no free counts
        (:meth:`needs_of`)."""
        choice = self._choice(pod)
        retention = retention_of(pod)
        if choice.problem:
            return PodAddresses(choice, retention, problem=Problem("pool-list", choice.problem))
        family = family_need(pod.annotations, self.cache.default_families(pod.namespace))
        if family.problem:
            return PodAddresses(choice, retention, problem=Problem("families", family.problem))
        further = further_interfaces(pod, self.cache.networks)
        if further.problem:
            return PodAddresses(choice, retention, problem=Problem("interfaces", further.problem))
        kept = kept_address(self.cache, pod, retention, datetime.datetime.now(datetime.UTC))  # to the µs
        needs = PodAddresses(choice, retention, kept, family=family, interfaces=further.interfaces)
        if further.interfaces:
            _mark_reserved(needs)
        if kept is not None and kept.kind == WAITING:
            needs.problem = Problem("retaining")
            return needs
        if not count:
            return needs
        if needs.interfaces and self._count_interfaces(needs, pod):
            return needs
        if kept is not None and kept.kind == PINNED:
            return needs
        pools = self.cache.pools()
        if choice.names:
            unknown = [n for n in choice.names if n not in pools]
            if unknown:
                needs.problem = Problem("unknown-pools", pools=tuple(unknown))
                return needs
        if family.families:
            self._count_families(needs, pod)
            return needs
        if choice.names:
            for rank, name in enumerate(choice.names):
                pool = pools[name]
                if pool.serves(pod.namespace):
                    needs.free[pool.node_name] = needs.free.get(pool.node_name, 0) + self.ledger.available(
                        pool
                    )
                    needs.ranks.setdefault(pool.node_name, rank)
        else:
            needs.free = dict(self.ledger.node_free())
            for pool in self.cache.namespaced_pools().values():
                if not pool.serves(pod.namespace) and pool.node_name in needs.free:
                    needs.free[pool.node_name] -= self.ledger.available(pool)
            for name in needs.reserved:  # a further interface's pools are not the first one's
                reserved = pools.get(name)
                if (
                    reserved is not None
                    and reserved.serves(pod.namespace)
                    and reserved.node_name in needs.free
                ):
                    needs.free[reserved.node_name] -= self.ledger.available(reserved)
        for pool in self.cache.pools_holding(pod.uid):  # its own allocation counts as free for it
            if (
                may_use(pod, choice, pool)
                and pool.allocations[pod.uid].interface is None
                and pool.name not in needs.reserved
            ):
                own = self.ledger.available_to(pool, pod.uid) - self.ledger.available(pool)
                needs.free[pool.node_name] = needs.free.get(pool.node_name, 0) + own
        return needs

    def _usable(self, needs: PodAddresses, pod: PodInfo) -> list[tuple[int, PoolView]]:
        """``(rank, pool)`` of every pool the pod may use, in its order of preference."""
        pools = self.cache.pools()
        if needs.choice.names:
            named = [(rank, pools[n]) for rank, n in enumerate(needs.choice.names) if n in pools]
            return [(rank, p) for rank, p in named if p.serves(pod.namespace)]
        return [(0, p) for p in pools.values() if p.serves(pod.namespace) and p.name not in needs.reserved]

    def pods_like(self, needs: PodAddresses, pool: PoolView, versions: tuple[int, ...], uid: str = "") -> int:
        """Pods like the pod of ``needs`` that ``pool`` can take, each one address of every
        version of ``versions`` (:func:`~ipscheduler.underlayip.allocator.pods_like`, assumed
        reservations deducted); pod ``uid``'s own allocation there counts as one more. Without
        ``versions`` (any one address) the pool's places alone: the per-family counts (a pass
        over every address held) are asked only for pods that name families."""
        avail = self.ledger.available(pool)
        n = allocator.pods_like(avail, self.ledger.family_free(pool), versions) if versions else avail
        return n + 1 if uid and uid in pool.allocations else n

    def _count_interfaces(self, needs: PodAddresses, pod: PodInfo) -> bool:
        """:meth:`find`'s counts for the pod's further interfaces: by interface and node, the
        pods like it that interface's usable pools can take (its own allocation there counts
        as one more). Returns True when an interface names pools that do not exist
        (``needs.problem`` says which)."""
        pools = self.cache.pools()
        for need in needs.interfaces:
            unknown = [n for n in need.choice.names if n not in pools]
            if unknown:
                needs.problem = Problem("unknown-pools", need.choice.source, tuple(unknown))
                return True
            versions = need.family.versions
            free = needs.interface_free.setdefault(need.interface, {})
            for name in need.choice.names:
                pool = pools[name]
                if pool.serves(pod.namespace):
                    n = self.pods_like(needs, pool, versions) + (
                        1 if self._kept_for(needs, pod, need, pool) else 0
                    )
                    free[pool.node_name] = free.get(pool.node_name, 0) + n
        return False

    def _kept_for(self, needs: PodAddresses, pod: PodInfo, need: InterfaceNeed, pool: PoolView) -> bool:
        """Whether ``pool`` holds an allocation further interface ``need`` of the pod takes
        whatever the pool's room: the pod's own for that interface, or its identity's Retained
        one for it (taken back); a place preemption holds for it (Nominated) once the pool is
        no longer over its capacity."""
        a = pool.allocations.get(pod.uid)
        if a is not None:
            if a.interface != need.interface:
                return False
            return a.phase != NOMINATED or self.ledger.available_to(pool, pod.uid) > 0
        return allocator.to_take_back(pool, pod.uid, pod.key, needs.retention, need.interface) is not None

    def _room_for(
        self, needs: PodAddresses, pod: PodInfo, need: InterfaceNeed | None, pool: PoolView
    ) -> bool:
        """Whether a reservation of the pod's first interface (``need`` None) or further
        interface ``need`` can be had in ``pool`` now."""
        if need is None:
            a = pool.allocations.get(pod.uid)
            return (
                needs.pinned is not None
                or a is not None
                or self._gives(needs, pool) is not None
                or self._freed_by_evicted(needs, pool)
            )
        versions = need.family.versions
        return (
            self._kept_for(needs, pod, need, pool)
            or self.pods_like(needs, pool, versions) > 0
            or self._freed_by_evicted(needs, pool)
        )

    def _freed_by_evicted(self, needs: PodAddresses, pool: PoolView) -> bool:
        """Whether a pod a what-if run evicted from ``pool``'s node gives a place of ``pool``
        back (:func:`~ipscheduler.underlayip.pool.freed_by_eviction`)."""
        evicted = needs.evicted.get(pool.node_name)
        return bool(evicted) and any(
            uid in pool.allocations and freed_by_eviction(pool, uid) for uid in evicted or ()
        )

    def assignment(self, needs: PodAddresses, pod: PodInfo, node: str) -> dict[str | None, PoolView] | str:
        """One pool of ``node`` for each of the pod's interfaces (None: its first; else the
        further interface's name), all different (a pod holds one allocation per pool), each
        with room, every interface in its order of preference (the first interface first):
        a backtracking search over the candidates (:meth:`candidates`,
        :meth:`interface_candidates`), so a further interface whose only pool the first
        interface could also use still gets it. When there is none, the interface it fails
        for ("": the first)."""
        options: list[tuple[str | None, list[PoolView]]] = [
            (None, [p for p in self.candidates(pod, node, needs) if self._room_for(needs, pod, None, p)])
        ]
        for need in needs.interfaces:
            pools = self.interface_candidates(need, pod, node, frozenset())
            options.append((need.interface, [p for p in pools if self._room_for(needs, pod, need, p)]))
        for key, opts in options:
            if not opts:
                return key or ""
        chosen: dict[str | None, PoolView] = {}
        budget = [ASSIGNMENT_STEPS]

        def search(i: int) -> bool:
            if i == len(options):
                return True
            key, opts = options[i]
            for pool in opts:
                budget[0] -= 1
                if budget[0] < 0:
                    return False
                if any(p.name == pool.name for p in chosen.values()):
                    continue
                chosen[key] = pool
                if search(i + 1):
                    return True
                del chosen[key]
            return False

        if search(0):
            return chosen
        # No assignment: name a further interface all of whose pools another interface needs.
        for key, opts in options[1:]:
            others = {p.name for k, o in options if k != key for p in o}
            if all(p.name in others for p in opts):
                return key or ""
        return options[-1][0] or ""

    def _count_families(self, needs: PodAddresses, pod: PodInfo) -> None:
        """:meth:`find`'s counts for a pod that names IP families: by node, the pods like it
        its usable pools can take with one address of each family from one pool, and for a
        PreferDualStack pod (``fallback``) those that could get one of its families there."""
        versions = needs.versions
        prefer = needs.family.policy == PREFER_DUAL_STACK
        split = len(versions) == 2 and not needs.interfaces
        each: dict[str, list[tuple[int, int]]] = {}  # node → per pool, its pods like it per family
        for rank, pool in self._usable(needs, pod):
            node = pool.node_name
            needs.ranks[node] = min(rank, needs.ranks.get(node, rank))
            needs.free[node] = needs.free.get(node, 0) + self.pods_like(needs, pool, versions, pod.uid)
            if prefer or split:
                one = tuple(self.pods_like(needs, pool, (v,), pod.uid) for v in versions)
                each.setdefault(node, []).append((one[0], one[-1]))
                if prefer:
                    needs.fallback[node] = needs.fallback.get(node, 0) + max(one)
        if split:
            for node, per_pool in each.items():
                if needs.free.get(node, 0) <= 0:
                    needs.free[node] = _split_count(per_pool)

    def fit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Fit:
        """Whether ``node`` can give the pod an address now, by :meth:`find`'s counts: a pod
        pinned to its retained address fits on that address's node only. A pod with further
        interfaces fits where each of them has a free address too (the first that has none
        is recorded in ``needs.short``)."""
        fit = self._fit_first(needs, pod, node)
        if fit is Fit.FITS and needs.interfaces:
            return self._fit_interfaces(needs, pod, node)
        return fit

    def _fit_interfaces(self, needs: PodAddresses, pod: PodInfo, node: str) -> Fit:
        """:meth:`fit` for the pod's further interfaces on ``node``: each has room in :meth:`find`'s
        counts, and one pool each can be had (:meth:`assignment`)."""
        for need in needs.interfaces:
            if needs.interface_free.get(need.interface, {}).get(node, 0) > 0:
                continue
            needs.short[node] = need.interface
            names = need.choice.name_set
            usable = any(p.name in names and p.serves(pod.namespace) for p in self.cache.pools_for_node(node))
            return Fit.INTERFACE_NO_FREE if usable else Fit.INTERFACE_NO_POOL
        if needs.disjoint:
            return Fit.FITS  # no pool two interfaces could both want: the counts decide
        plan = self.assignment(needs, pod, node)
        if isinstance(plan, str):
            if not plan:
                return Fit.NO_FREE
            needs.short[node] = plan
            return Fit.INTERFACE_NO_FREE
        return Fit.FITS

    def _fit_first(self, needs: PodAddresses, pod: PodInfo, node: str) -> Fit:
        pinned = needs.pinned
        if pinned is not None:
            return Fit.FITS if node == pinned.node_name else Fit.RETAINED_ELSEWHERE
        free = needs.free.get(node)
        if free is not None and free > 0:
            return Fit.FITS
        if needs.fallback.get(node, 0) > 0:
            return Fit.FITS  # PreferDualStack: one family here
        pools = self.cache.pools_for_node(node)
        if not pools:
            return Fit.NO_POOL
        usable = [p for p in pools if may_use(pod, needs.choice, p) and p.name not in needs.reserved]
        if not usable:
            return Fit.NO_USABLE_POOL
        if needs.family.families:
            return self._missing_family(needs, usable)
        return Fit.NO_FREE

    def _missing_family(self, needs: PodAddresses, pools: list[PoolView]) -> Fit:
        """Why ``pools`` (usable, on one node) cannot give a pod that names families an
        address: the first of its families none of them has free, else :attr:`Fit.NO_FREE`
        (each family is free somewhere, but no pool can give them all)."""
        if needs.family.policy == PREFER_DUAL_STACK:
            return Fit.NO_FREE  # neither family free: fallback found none
        for version in needs.versions:
            if not any(self.pods_like(needs, p, (version,)) > 0 for p in pools):
                return Fit.NO_FREE_IPV6 if version == 6 else Fit.NO_FREE_IPV4
        return Fit.NO_FREE

    def room(self, pod: PodInfo, nodes: Collection[str]) -> int:
        """Pods like ``pod`` the pools it may use on ``nodes`` can take now (:meth:`find`'s
        counts, summed); 0 when PreFilter would refuse it, 1 for a pod pinned to its retained
        address. Changes nothing."""
        needs = self.find(pod)
        if needs.problem is not None:
            return 0
        if needs.pinned is not None:
            return 1
        return sum(n for name, n in needs.free.items() if n > 0 and name in nodes)

    # -- eviction ------------------------------------------------------------------
    def frees(
        self, choice: PoolChoice, pod: PodInfo, victim: str, node: str, versions: tuple[int, ...] = ()
    ) -> bool:
        """Whether evicting pod ``victim`` frees, on ``node``, a place ``pod`` may use: the one
        predicate of every preemption path (in-process dry run, the extender's ``/preempt``,
        the nominated place). The victim's allocation there must give its place back
        (:func:`~ipscheduler.underlayip.pool.freed_by_eviction`: not a sticky address, which
        turns Retained, nor a nominated place, nor an address held outside the pool's spec,
        nor in a pool being deleted or with a spec error), in a pool the pod may use.
        ``versions``: the IP versions the pod needs, one address each from one pool (its
        required families): that pool, with the victim's places and addresses given back, must
        then give them all (the victim's IPv4 address frees nothing for a pod that also needs
        an IPv6 address none is free of)."""
        return self._freeing_pool(choice, pod, victim, node, versions) is not None

    def _freeing_pool(
        self,
        choice: PoolChoice,
        pod: PodInfo,
        victim: str,
        node: str,
        versions: tuple[int, ...],
        need: InterfaceNeed | None = None,
        skip: AbstractSet[str] = frozenset(),
    ) -> PoolView | None:
        """The pool where evicting pod ``victim`` frees a place for ``pod``'s first interface
        (:meth:`frees`), or for its further interface ``need`` (a pool that interface may
        use), other than the pools of ``skip``."""
        for pool in self.cache.pools_holding(victim):
            if (
                pool.node_name == node
                and pool.name not in skip
                and (
                    may_use(pod, choice, pool)
                    if need is None
                    else pool.name in need.choice.name_set and pool.serves(pod.namespace)
                )
                and freed_by_eviction(pool, victim)
                and (not versions or self._frees_families(pool, victim, versions, pod, choice, need))
            ):
                return pool
        return None

    def _frees_families(
        self,
        pool: PoolView,
        victim: str,
        versions: tuple[int, ...],
        pod: PodInfo,
        choice: PoolChoice,
        need: InterfaceNeed | None,
    ) -> bool:
        """Whether ``pool`` gives one address of each of ``versions`` once pod ``victim``'s
        allocation there is released; for the first interface of a pod that needs two
        families, also when it then gives one of them and another pool of the node the pod may
        use gives the other now (dual-stack from two pools)."""
        a = pool.allocations[victim]
        free = dict(self.ledger.family_free(pool))
        for ip in a.addresses:
            version = VERSION[family_of(ip)]
            free[version] = free.get(version, 0) + 1
        places = self.ledger.available(pool) + a.places
        if allocator.pods_like(places, free, versions) > 0:
            return True
        if need is not None or len(versions) != 2:
            return False
        others = [
            p
            for p in self.cache.pools_for_node(pool.node_name)
            if p.name != pool.name and may_use(pod, choice, p) and pod.uid not in p.allocations
        ]
        return any(
            allocator.pods_like(places, free, (v,)) > 0
            and any(
                allocator.pods_like(self.ledger.available(p), self.ledger.family_free(p), (w,)) > 0
                for p in others
            )
            for v, w in (versions, versions[::-1])
        )

    def fits_after_evicting(
        self, needs: PodAddresses, pod: PodInfo, node: str, victims: frozenset[str]
    ) -> bool:
        """Whether the pod fits on ``node`` once the pods of UIDs ``victims`` are gone (the
        extender's ``preempt``): it fits already, or it fits once :meth:`count_eviction` has
        counted every victim (a place for its first interface, and for each further interface
        short there). A pod pinned to its retained address's node fits only there, whatever
        the victims."""
        fit = self.fit(needs, pod, node)
        if fit is Fit.FITS:
            return True
        if fit not in _EVICTION_MAY_HELP:
            return False
        what_if = needs.clone()
        for uid in sorted(victims):
            self.count_eviction(what_if, pod, uid, node)
        return self.fit(what_if, pod, node) is Fit.FITS

    def count_eviction(self, needs: PodAddresses, pod: PodInfo, victim: str, node: str) -> None:
        """A what-if run evicts pod ``victim`` from ``node``: the place it :meth:`frees` there
        counts as free for the pod's first interface, and a place it frees in a pool one of
        the pod's further interfaces may use counts as free for that interface."""
        if self.frees(needs.choice, pod, victim, node, _required(needs)):
            needs.free[node] = needs.free.get(node, 0) + 1
        if needs.interfaces:
            needs.evicted.setdefault(node, set()).add(victim)
            self._count_interface_places(needs, pod, victim, node, 1)

    def count_addition(self, needs: PodAddresses, pod: PodInfo, other: PodInfo, node: str) -> None:
        """A what-if run adds pod ``other`` on ``node``: a victim given back retakes the places
        :meth:`count_eviction` counted; a pod nominated there (pending, no address yet)
        takes one place of the first interface."""
        if self.frees(needs.choice, pod, other.uid, node, _required(needs)) or not self.cache.pools_holding(
            other.uid
        ):
            needs.free[node] = needs.free.get(node, 0) - 1
        evicted = needs.evicted.get(node)
        if evicted and other.uid in evicted:
            evicted.discard(other.uid)
            self._count_interface_places(needs, pod, other.uid, node, -1)

    def _count_interface_places(
        self, needs: PodAddresses, pod: PodInfo, victim: str, node: str, delta: int
    ) -> None:
        """Add ``delta`` to the free count on ``node`` of each further interface of the pod for
        which evicting pod ``victim`` frees a place."""
        for need in needs.interfaces:
            versions = need.family.required_versions
            if self._freeing_pool(needs.choice, pod, victim, node, versions, need) is not None:
                free = needs.interface_free.setdefault(need.interface, {})
                free[node] = free.get(node, 0) + delta

    async def nominate(self, pod: PodInfo, node: str, victims: frozenset[str]) -> str | None:
        """Preemption nominated ``pod`` to ``node`` ("": to none) after evicting the pods of
        UIDs ``victims``: keep its nominated places, a Nominated allocation in a pool of the
        node where a victim :meth:`frees` a place (for its first interface, then one for each
        further interface, recording the interface, each in a pool of its own), unless the
        pod holds an allocation on the node already; its nominated places on other nodes are
        dropped. Returns the pool holding the first interface's place, else the first
        further interface's (None: none). Logs instead of raising: the GC sweep settles what
        a failed write leaves."""
        here: str | None = None
        for pool in self.cache.pools_holding(pod.uid):
            a = pool.allocations.get(pod.uid)
            if pool.node_name == node:
                here = pool.name
            elif a is not None and a.phase == NOMINATED:
                await self._write(pool.name, functools.partial(allocator.drop_nomination, uid=pod.uid), pod)
        if here is not None or not node:
            return here
        needs = self.needs_of(pod)
        held: list[str] = []
        for need in (None, *needs.interfaces):
            versions = needs.family.required_versions if need is None else need.family.required_versions
            skip = {*held, *needs.reserved} if need is None else set(held)
            for uid in sorted(victims):
                freeing = self._freeing_pool(needs.choice, pod, uid, node, versions, need, skip)
                if freeing is None:
                    continue
                nominate = functools.partial(
                    allocator.nominate,
                    uid=pod.uid,
                    pod_key=pod.key,
                    interface=None if need is None else need.interface,
                )
                if await self._write(freeing.name, nominate, pod):
                    held.append(freeing.name)
                break
        return held[0] if held else None

    async def _write(self, pool: str, mutate: MutateFn, pod: PodInfo) -> bool:
        try:
            await self.writer.submit(pool, mutate)
        except Exception as e:
            log.warning(
                "the nominated place of %s in pool %s not written (%r); the GC settles it", pod.key, pool, e
            )
            return False
        return True

    # -- assume / commit / revert / mark_bound -----------------------------------------
    def candidates(self, pod: PodInfo, node: str, needs: PodAddresses, skip: str = "") -> list[PoolView]:
        """The pools of ``node`` the pod may use, in the order :meth:`assume` tries them: the
        one keeping its retained address alone (when pinned to it), else one holding the pod's
        allocation first, then in the pod's order of preference (``ipscheduler.io/pools``),
        then by most available (assumed reservations deducted), then by name. ``skip``: a
        pool already tried."""
        pinned = needs.pinned
        if pinned is not None:
            pool = self.cache.pool(pinned.name)
            return [pool] if pool is not None and pool.node_name == node and pool.name != skip else []
        pools = [
            p
            for p in self.cache.pools_for_node(node)
            if p.node_name == node
            and p.name != skip
            and p.name not in needs.reserved
            and may_use(pod, needs.choice, p)
            and ((a := p.allocations.get(pod.uid)) is None or a.interface is None)
        ]
        holding = [p for p in pools if pod.uid in p.allocations]
        versions = needs.versions
        rest = sorted(
            (p for p in pools if pod.uid not in p.allocations),
            key=lambda p: (
                bool(versions) and self.pods_like(needs, p, versions) <= 0,  # PreferDualStack: both first
                needs.choice.rank(p.name),
                -self.ledger.available(p),
                p.name,
            ),
        )
        return holding + rest

    def _gives(self, needs: PodAddresses, pool: PoolView) -> tuple[int, ...] | None:
        """The IP versions a new allocation of the pod in ``pool`` would take (empty: any one
        address), or None when the pool has no room for it: every family of the pod, or for
        a PreferDualStack pod the first one the pool can give."""
        versions = needs.versions
        if not versions:
            return () if self.ledger.available(pool) > 0 else None
        if self.pods_like(needs, pool, versions) > 0:
            return versions
        if needs.family.policy == PREFER_DUAL_STACK:
            return next(((v,) for v in versions if self.pods_like(needs, pool, (v,)) > 0), None)
        return None

    def assume(self, needs: PodAddresses, pod: PodInfo, node: str) -> Refusal | None:
        """Assume a place for the pod in the first of :meth:`candidates` with room and queue
        its write (no I/O here: :meth:`commit` waits for it). Until the write lands the ledger
        counts the place as taken, so the cycles running meanwhile do not give it away;
        concurrent reservations in one pool are coalesced into one write by the PoolWriter.
        A pod whose allocation on the node is another cycle's, still in flight (not
        :func:`~ipscheduler.underlayip.allocator.abandoned`), is refused
        ``reserved-elsewhere``: that cycle binds or releases it."""
        needs.owner = f"{self.identity}/{secrets.token_hex(4)}"
        pinned = needs.pinned
        plan: dict[str | None, PoolView] | None = None
        if needs.interfaces:
            found = self.assignment(needs, pod, node)
            if isinstance(found, str):
                return Refusal("no-free", found)
            plan = found
        candidates = self.candidates(pod, node, needs) if plan is None else [plan[None]]
        if plan is None and len(needs.versions) == 2:
            split = self._split(needs, pod, node, candidates)
            if split is not None:
                return self._assume_split(needs, pod, node, *split)
        for pool in candidates:
            existing = pool.allocations.get(pod.uid)
            taking: tuple[int, ...] | None = needs.versions
            if existing is not None and existing.phase not in (RETAINED, NOMINATED):
                if not allocator.abandoned(
                    existing, needs.owner, utc_now(), self.reserved_ttl, self.takeover_before
                ):
                    return Refusal(
                        "reserved-elsewhere", str(allocator.ReservedElsewhere(pool.name, existing))
                    )
            elif pinned is None and existing is None and (taking := self._gives(needs, pool)) is None:
                continue
            needs.pending = self._submit(needs, pod, node, pool.name)
            self.ledger.assume(pool.name, pod.uid, taking or ())
            refusal = self._assume_interfaces(needs, pod, node, plan or {})
            self._release_abandoned(pod, needs.owner, {pool.name, *(w.pool for _, w in needs.pending_more)})
            return refusal
        return Refusal("no-free")

    def _split(
        self, needs: PodAddresses, pod: PodInfo, node: str, candidates: list[PoolView]
    ) -> tuple[PoolView, PoolView, InterfaceNeed] | None:
        """For a pod that needs two families where no candidate pool of ``node`` gives both:
        the pool for its primary family (one holding its allocation of that family alone
        first, then in :meth:`candidates` order), the other pool for its second family (one
        holding its ``eth0`` allocation first, then the pod's order of preference, then by
        most available) and the need of that second address; None when one pool gives both,
        or no two pools give one each."""
        v0, v1 = needs.versions
        first: PoolView | None = None
        pinned = needs.kept.claim if needs.kept is not None and needs.kept.kind == PINNED else None
        if pinned is not None:  # a sticky pod: its retained primary address alone pins it
            if not candidates or {VERSION[family_of(ip)] for ip in pinned.allocation.addresses} != {v0}:
                return None
            first = candidates[0]
        for pool in candidates if first is None else ():
            a = pool.allocations.get(pod.uid)
            if a is not None and a.phase != NOMINATED:
                if {VERSION[family_of(ip)] for ip in a.addresses} != {v0}:
                    return None  # its allocation here is the one it keeps (both)
                first = pool
                break
        if first is None:
            if any(self.pods_like(needs, p, needs.versions) > 0 for p in candidates):
                return None
            first = next((p for p in candidates if self.pods_like(needs, p, (v0,), pod.uid) > 0), None)
            if first is None:
                return None
        second_family = needs.family.families[1]
        need = InterfaceNeed(DEFAULT_INTERFACE, needs.choice, FamilyNeed(SINGLE_STACK, (second_family,)))
        others = [
            p
            for p in self.cache.pools_for_node(node)
            if p.node_name == node
            and p.name != first.name
            and p.name not in needs.reserved
            and may_use(pod, needs.choice, p)
            and (
                (a := p.allocations.get(pod.uid)) is None
                or a.interface == DEFAULT_INTERFACE
                or a.phase == NOMINATED
            )
            and (self._kept_for(needs, pod, need, p) or self.pods_like(needs, p, (v1,), pod.uid) > 0)
        ]
        if not others:
            return None
        others.sort(
            key=lambda p: (
                not self._kept_for(needs, pod, need, p),  # its own, or its identity's retained one
                needs.choice.rank(p.name),
                -self.ledger.available(p),
                p.name,
            )
        )
        return first, others[0], need

    def _assume_split(
        self,
        needs: PodAddresses,
        pod: PodInfo,
        node: str,
        first: PoolView,
        second: PoolView,
        need: InterfaceNeed,
    ) -> Refusal | None:
        """Assume the pod's primary family in ``first`` and its second family in ``second``
        (an allocation recording interface ``eth0``), and queue both writes: the first
        interface's two addresses from two pools, all or nothing (:meth:`commit`)."""
        existing = first.allocations.get(pod.uid)
        if (
            existing is not None
            and existing.phase not in (RETAINED, NOMINATED)
            and not allocator.abandoned(
                existing, needs.owner, utc_now(), self.reserved_ttl, self.takeover_before
            )
        ):
            return Refusal("reserved-elsewhere", str(allocator.ReservedElsewhere(first.name, existing)))
        primary = FamilyNeed(SINGLE_STACK, needs.family.families[:1])
        needs.pending = self._submit(needs, pod, node, first.name, family=primary)
        self.ledger.assume(first.name, pod.uid, primary.versions)
        needs.pending_more.append((need, self._submit(needs, pod, node, second.name, need)))
        self.ledger.assume(second.name, pod.uid, need.family.versions)
        self._release_abandoned(pod, needs.owner, {first.name, second.name})
        return None

    def interface_candidates(
        self, need: InterfaceNeed, pod: PodInfo, node: str, taken: AbstractSet[str]
    ) -> list[PoolView]:
        """The pools of ``node`` further interface ``need`` may use, in the order they are tried:
        one holding the pod's allocation for that interface first, then in the interface's
        order of preference, then by most available, then by name; never one of ``taken`` (the
        pools this cycle gave the pod's other interfaces) nor one holding the pod's allocation
        of another interface (a pod holds one allocation per pool)."""
        pools = []
        names = need.choice.name_set
        for p in self.cache.pools_for_node(node):
            a = p.allocations.get(pod.uid)
            if (
                p.node_name == node
                and p.name not in taken
                and p.name in names
                and p.serves(pod.namespace)
                and (a is None or a.interface == need.interface)
            ):
                pools.append(p)
        return sorted(
            pools,
            key=lambda p: (
                pod.uid not in p.allocations,
                need.choice.rank(p.name),
                -self.ledger.available(p),
                p.name,
            ),
        )

    def _assume_interfaces(
        self, needs: PodAddresses, pod: PodInfo, node: str, plan: Mapping[str | None, PoolView]
    ) -> Refusal | None:
        """Assume a place for each further interface of the pod in the pool :meth:`assignment`
        gave it and queue their writes (Unreserve gives back what this cycle queued)."""
        for need in needs.interfaces:
            pool = plan[need.interface]
            versions = need.family.versions
            needs.pending_more.append((need, self._submit(needs, pod, node, pool.name, need)))
            self.ledger.assume(pool.name, pod.uid, versions)
        return None

    def _release_abandoned(self, pod: PodInfo, owner: str, kept: AbstractSet[str]) -> None:
        """The pod, reserved in the pools ``kept`` by cycle ``owner``, gives up its Reserved
        allocations in other pools that another cycle made and abandoned
        (:func:`~ipscheduler.underlayip.allocator.abandoned`: older than ``--reserved-ttl``,
        or made by another replica before this one took the Lease, e.g. a process
        SIGKILLed while the pod waited at Permit): a pod holds one allocation per interface. Each
        release is its own write, queued now (no I/O here) and only if the allocation is
        still the one seen (``expect``); a failure is logged, the GC sweep releases it."""
        now = utc_now()
        for pool in self.cache.pools_holding(pod.uid):
            existing = pool.allocations.get(pod.uid)
            if (
                pool.name in kept
                or existing is None
                or existing.phase != RESERVED
                or not allocator.abandoned(existing, owner, now, self.reserved_ttl, self.takeover_before)
            ):
                continue
            log.info(
                "releasing %s of %s in pool %s: reserved by %s, a cycle that is over",
                existing.ip or "a place",
                pod.key,
                pool.name,
                existing.reserved_by,
                extra=kv(pod=pod.key, pool=pool.name, ip=existing.ip or ""),
            )
            release = functools.partial(allocator.release, uid=pod.uid, expect=existing)
            future = self.writer.submit(pool.name, release)
            future.add_done_callback(functools.partial(_log_failure, f"release of {pod.key}'s reservation"))

    async def commit(self, needs: PodAddresses, pod: PodInfo, node: str) -> Committed | Refusal | None:
        """Wait for the write :meth:`assume` queued; if that pool turned out full, try the
        node's other candidates one by one (CAS each). Returns what was allocated
        (:class:`Committed`), a :class:`Refusal`, or None when nothing was assumed; a second
        call returns the first one's outcome."""
        first, needs.pending = needs.pending, None
        if first is None:
            return needs.committed
        try:
            outcome = await self._landed(needs, pod, first)
        finally:
            self.ledger.forget_assumed(first.pool, pod.uid)
        if outcome is None:
            for pool in self.candidates(pod, node, needs, skip=first.pool):
                outcome = await self._landed(needs, pod, self._submit(needs, pod, node, pool.name))
                if outcome is not None:
                    break
        if outcome is None:
            outcome = Refusal("no-free")
        more, needs.pending_more = needs.pending_more, []
        if more:
            outcome = await self._commit_interfaces(needs, pod, node, outcome, more)
        if isinstance(outcome, Committed):
            outcome = _with_second_family(outcome)
            self._drop_other_nominations(pod, {outcome.pool, *(i.pool for i in outcome.interfaces)})
        needs.committed = outcome
        return outcome

    async def _commit_interfaces(
        self,
        needs: PodAddresses,
        pod: PodInfo,
        node: str,
        first: Committed | Refusal,
        pending: list[tuple[InterfaceNeed, _Write]],
    ) -> Committed | Refusal:
        """Wait for every further interface's write (all of them, whatever the first
        outcome: each was counted as assumed); an interface whose pool turned out full tries
        the node's other candidates for it. The pod's :class:`Committed` with its
        ``interfaces``, or the first :class:`Refusal` (a ``no-free`` one names the interface)."""
        got: list[InterfaceAddresses] = []
        refusal = first if isinstance(first, Refusal) else None
        taken = {first.pool} if isinstance(first, Committed) else set()
        taken.update(write.pool for _, write in pending)
        for need, write in pending:
            try:
                landed = await self._landed_interface(needs, need, write)
            finally:
                self.ledger.forget_assumed(write.pool, pod.uid)
            if landed is None and refusal is None:
                for pool in self.interface_candidates(need, pod, node, taken):
                    taken.add(pool.name)
                    landed = await self._landed_interface(
                        needs, need, self._submit(needs, pod, node, pool.name, need)
                    )
                    if landed is not None:
                        break
                if landed is None:
                    landed = Refusal("no-free", need.interface)
            if isinstance(landed, Refusal):
                refusal = refusal or landed
            elif landed is not None:
                got.append(landed)
        if refusal is not None:
            return refusal
        assert isinstance(first, Committed)
        return dataclasses.replace(first, interfaces=tuple(got))

    async def _landed_interface(
        self, needs: PodAddresses, need: InterfaceNeed, write: _Write
    ) -> InterfaceAddresses | Refusal | None:
        """Wait for further interface ``need``'s ``write``: what it got, a ``failed``
        :class:`Refusal`, or None when the pool was full or gone."""
        try:
            written = await write.future
        except allocator.PoolFull:
            return None
        except Exception as e:
            return Refusal("failed", str(e), pool=write.pool)
        if written is None or write.decided is None or not write.decided.ips:
            return None
        if write.decided.taken_back:
            needs.taken_back.add(written.name)
        ips = write.decided.ips
        network = network_of_all(written, ips)
        routed = network if need.interface == DEFAULT_INTERFACE else None
        return InterfaceAddresses(
            need.interface, written.name, ips, without_default_route(network), need, routed
        )

    def _drop_other_nominations(self, pod: PodInfo, kept: AbstractSet[str]) -> None:
        """The pod has its reservations (in the pools ``kept``): the nominated places preemption kept
        for it in other pools go, with those pools' next writes. No deadline of their own: a
        place that no write carries is released by the next GC sweep once the pod is bound
        (within ``--gc-interval``, and the sweep's release retries the pending pods, which a
        deferred write never did), and preemption is rare enough that its places are no
        write cost."""
        for pool in self.cache.pools_holding(pod.uid):
            existing = pool.allocations.get(pod.uid)
            if pool.name not in kept and existing is not None and existing.phase == NOMINATED:
                self.writer.defer(
                    pool.name,
                    functools.partial(allocator.drop_nomination, uid=pod.uid),
                    key=("drop_nomination", pod.uid),
                )

    async def _landed(self, needs: PodAddresses, pod: PodInfo, write: _Write) -> Committed | Refusal | None:
        """Wait for ``write``: :class:`Committed` when it allocated, a ``failed``
        :class:`Refusal` when it failed, None when the pool was full or gone (try the next)."""
        try:
            written = await write.future
        except allocator.PoolFull:
            # Reserve counted a place the write did not find: say what the cache shows, so
            # that a stale count can be told from another writer.
            view = self.cache.pool(write.pool)
            log.info(
                "NodeIPPool %s had no room for %s when written (the cache shows %s allocation(s), "
                "%d assumed, %d available); trying the node's other pools",
                write.pool,
                pod.key,
                len(view.allocations) if view is not None else "no pool:",
                len(self.ledger.assumed(write.pool)),
                self.ledger.available(view) if view is not None else 0,
            )
            return None
        except Exception as e:
            return Refusal("failed", str(e), pool=write.pool)
        if written is None or write.decided is None:
            return None
        ip, ips, taken_back = write.decided.ip, write.decided.ips, write.decided.taken_back
        if taken_back:
            needs.taken_back.add(written.name)
        kept = needs.kept
        rehome = (
            kept.claim
            if kept is not None
            and kept.kind == REHOME
            and not (written.name == kept.claim.pool.name and taken_back)
            else None
        )
        return Committed(
            pool=written.name,
            ip=ip,
            network=json.dumps(network_of_all(written, ips), separators=(",", ":")) if ip else "",
            taken_back=taken_back,
            rehome=rehome,
            ips=ips,
        )

    def _submit(
        self,
        needs: PodAddresses,
        pod: PodInfo,
        node: str,
        pool: str,
        need: InterfaceNeed | None = None,
        family: FamilyNeed | None = None,
    ) -> _Write:
        """Queue :func:`~ipscheduler.underlayip.allocator.reserve` for ``pod`` in ``pool`` on
        behalf of the cycle of ``needs``, for its first interface (its families, or
        ``family``: the primary one of two pools) or further interface ``need``, refusing a
        pool that no longer serves ``node``; remember the pool for :meth:`revert`."""
        needs.written.add(pool)
        ttl, before, owner, retention = self.reserved_ttl, self.takeover_before, needs.owner, needs.retention
        if family is None:
            family = needs.family if need is None else need.family
        versions = family.versions
        fallback = family.policy == PREFER_DUAL_STACK
        interface = None if need is None else need.interface
        write = _Write(pool)

        def mutate(p: PoolView, ctx: PoolContext) -> NodeIPPoolStatus | None:
            if p.node_name != node:
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
                versions=versions,
                fallback=fallback,
                interface=interface,
            )
            return write.decided.status

        write.future = self.writer.submit(pool, mutate)
        return write

    async def _bound_pools(self, pod: PodInfo) -> frozenset[str] | None:
        """The pools the live pod's annotations name if the pod (same UID) is bound
        (:func:`~ipscheduler.underlayip.interfaces.bound_pools`: "" among them when it is bound
        without ``ipscheduler.io/pool``, a count-only slot), else None (also when it is gone).
        Raises what the read raises."""
        if self.api is None:
            return None
        live = await live_pod(self.api, pod.uid, pod.key)
        if live is None or not live.bound:
            return None
        return bound_pools(live.annotations)

    async def revert(self, needs: PodAddresses, pod: PodInfo, node: str) -> None:
        """Release what the cycle of ``needs`` wrote for the pod on ``node``; logs instead of
        raising.

        Waits for a write still pending first (its outcome does not matter: a write that
        failed on a timeout may still have landed). Then a live read of the pod: the pool it
        is bound with (our Binding may have landed although it reported an error) keeps its
        allocation; if the read fails everything is kept and the GC decides later. In the
        other pools this cycle wrote to, the pod's allocation is released only if its
        ``reservedBy`` is this cycle's: never another replica's reservation. Where the cycle
        took back, or was pinned to, the identity's Retained address, it is Retained again
        instead."""
        if needs.pending is not None:
            await self.commit(needs, pod, node)
        written, needs.written = needs.written, set()
        if not written:
            return
        try:
            bound = await self._bound_pools(pod)
        except Exception as e:
            log.warning(
                "unreserve of %s keeps its reservation: live read failed (%s); the GC decides", pod.key, e
            )
            return
        if bound is not None and "" in bound:
            log.info(
                "unreserve of %s keeps its reservations in %s: the pod is bound (count-only slot); "
                "the GC releases any it is not bound with",
                pod.key,
                ", ".join(sorted(written)),
            )
            return
        retained = {*needs.taken_back, needs.pinned.name if needs.pinned is not None else None}
        for pool_name in sorted(written - (bound or frozenset())):
            undo = functools.partial(
                allocator.unreserve, uid=pod.uid, owner=needs.owner, keep=pool_name in retained
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
        if bound and (kept := written & bound):
            log.info(
                "unreserve of %s keeps its allocations in %s: the pod is bound with them",
                pod.key,
                ", ".join(sorted(kept)),
            )

    def mark_bound(self, needs: PodAddresses, uid: str) -> None:
        """Mark pod ``uid``'s committed allocation Bound: a deferred mutation that rides along
        with the pool's next write and never costs one of its own (:meth:`PoolWriter.defer`).
        The GC sweep writes, in batches, the marks still not written once the allocation is
        older than ``--bound-mark-delay``; until then the allocation stays Reserved, which
        the TTL never releases while the pod is bound with it."""
        if isinstance(needs.committed, Committed):
            for pool in (needs.committed.pool, *(i.pool for i in needs.committed.interfaces)):
                self.writer.defer(
                    pool, functools.partial(allocator.mark_bound, uid=uid), key=allocator.mark_bound_key(uid)
                )


def _split_count(per_pool: list[tuple[int, int]]) -> int:
    """Pods like it a node's pools can take with their primary family from one pool and their
    second from another (``per_pool``: each pool's pods like it of each family): the lesser
    family total, once two different pools give one each (0 otherwise)."""
    firsts = [i for i, (a, _) in enumerate(per_pool) if a > 0]
    seconds = [i for i, (_, b) in enumerate(per_pool) if b > 0]
    if not firsts or not seconds or (len(firsts) == 1 and firsts == seconds):
        return 0
    return min(sum(a for a, _ in per_pool), sum(b for _, b in per_pool))


def _with_second_family(done: Committed) -> Committed:
    """``done`` with the first interface's second family from a second pool (its ``eth0``
    entry) among its addresses and in its network (with that pool's routes, the default one
    included); unchanged without one."""
    second = next((i for i in done.interfaces if i.interface == DEFAULT_INTERFACE), None)
    if second is None or second.routed is None or not done.network:
        return done
    network = merge_networks(json.loads(done.network), second.routed)
    return dataclasses.replace(
        done, ips=(*done.ips, *second.ips), network=json.dumps(network, separators=(",", ":"))
    )


def _mark_reserved(needs: PodAddresses) -> None:
    """Set ``needs.reserved`` (the pools the pod's further interfaces name and its first
    interface does not) and ``needs.disjoint`` (no pool two of its interfaces may both use:
    each further interface's list apart from the others'; the first interface's pools, its
    list or any pool but those reserved, then never one of theirs)."""
    first = needs.choice.name_set
    seen: set[str] = set()
    disjoint = True
    for need in needs.interfaces:
        names = need.choice.name_set
        disjoint = disjoint and not (names & seen) and not (names & first)
        seen |= names
    needs.reserved = frozenset(seen - first)
    needs.disjoint = disjoint


def _required(needs: PodAddresses) -> tuple[int, ...]:
    """The IP versions a pod must get (:attr:`FamilyNeed.required
    <ipscheduler.underlayip.families.FamilyNeed.required>`; empty: any one address)."""
    return needs.family.required_versions


def _log_failure(what: str, future: asyncio.Future[PoolView | None]) -> None:
    """Done callback of a write nobody awaits: log its failure (the GC sweep repairs it)."""
    if not future.cancelled() and (e := future.exception()) is not None:
        log.warning("%s failed: %s", what, e)
