"""A NodeIPPool as the scheduler reads it: pure views and derivations, no I/O.

:class:`PoolView` is one pool at one resourceVersion (spec parsed once, status as
written); :class:`PoolContext` is what the other pools and the cluster add to it
(addresses declared twice, held by another pool's allocation or by a running pod's
annotation, whether its node exists); :func:`find_conflicts` and :func:`foreign_holds`
derive the contexts; :func:`ready_condition` and :func:`desired_status` the status the
pool should have; :func:`network_of` the network facts of one of its addresses. The
moves that change allocations are in :mod:`ipscheduler.underlayip.allocator`.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from ipscheduler.kube.events import object_ref
from ipscheduler.underlayip.addresses import (
    AddressError,
    AddressSet,
    SubnetInfo,
    canonical,
    parse_subnets,
    subnet_for,
)
from ipscheduler.underlayip.models import (
    API_VERSION,
    KIND,
    NOMINATED,
    POD,
    RELEASING,
    RETAINED,
    Allocation,
    Condition,
    NodeIPPoolSpec,
    NodeIPPoolStatus,
)

MAX_REPORTED = 2**31 - 1
"""Status counts are clamped to this (an IPv6 /64 holds 2**64 addresses)."""

READY = "Ready"
EXHAUSTED = "Exhausted"
EXHAUSTED_CLEAR_FRACTION = 0.05
EXHAUSTED_CLEAR_MIN = 2
"""Exhausted's hysteresis: it turns True when no address is free and back to False only once
``max(2, 5 %)`` of the capacity is free again (all of it for a pool smaller than that), so a
pool hovering at its last address does not flap (nor its alert)."""


def utc_now() -> datetime.datetime:
    """Now in UTC, whole seconds: what allocations are stamped with (``since``, as a
    ``metav1.Time`` serializes) and what their ages are measured against."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def age(since: datetime.datetime, now: datetime.datetime) -> float:
    """Seconds from ``since`` to ``now``; a ``since`` in the future (stamped by a replica
    whose clock runs ahead) counts as now, i.e. age 0. Naive timestamps are UTC."""
    if since.tzinfo is None:
        since = since.replace(tzinfo=datetime.UTC)
    return max(0.0, (now - since).total_seconds())


@dataclass(frozen=True)
class PoolView:
    """A NodeIPPool as the allocator sees it, parsed once per resourceVersion.

    ``addresses`` is None for a count-only pool. ``spec_error`` is set when
    the spec is unusable (e.g. a malformed entry that got past the schema);
    such a pool hands out nothing but keeps its allocations.
    """

    name: str
    node_name: str
    resource_version: str = ""
    generation: int = 0
    uid: str = ""
    addresses: AddressSet | None = None
    cap: int | None = None
    spec_error: str | None = None
    deleting: bool = False
    status: NodeIPPoolStatus = field(default_factory=NodeIPPoolStatus)
    finalizers: tuple[str, ...] = ()
    subnets: tuple[SubnetInfo, ...] = ()
    """Validated ``spec.subnets`` (empty: addresses are host routes)."""
    namespaces: frozenset[str] | None = None
    """``spec.namespaces``: the only namespaces whose pods may use the pool (None: any)."""

    @classmethod
    def from_obj(cls, body: Mapping[str, Any]) -> PoolView:
        """Parse a NodeIPPool body. Raises ValueError only when it has no name.

        An invalid spec or status never raises: the spec error is recorded in
        ``spec_error``; an unparsable status is treated as empty only if it
        has no allocations map at all (otherwise the broken entries are
        dropped one by one, so valid allocations are never lost).
        """
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("NodeIPPool without metadata.name")
        raw_spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
        assert isinstance(raw_spec, dict)
        node_name = raw_spec.get("nodeName") if isinstance(raw_spec.get("nodeName"), str) else ""
        addresses: AddressSet | None = None
        cap: int | None = None
        spec_error: str | None = None
        subnets: tuple[SubnetInfo, ...] = ()
        namespaces: frozenset[str] | None = None
        try:
            spec = NodeIPPoolSpec.model_validate(raw_spec)
            cap = spec.capacity
            namespaces = frozenset(spec.namespaces) if spec.namespaces is not None else None
            subnets = parse_subnets(spec.subnets, spec.addresses)
            if spec.addresses:
                # A gateway is never handed out as a pod address.
                gateways = tuple(s.gateway for s in subnets if s.gateway is not None)
                addresses = AddressSet.of_spec(tuple(spec.addresses), (*spec.exclude, *gateways))
            elif spec.exclude:
                AddressSet.of_spec((), tuple(spec.exclude))  # validate: a bad entry is a spec error
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            spec_error = f"spec.{loc}: {first['msg']}"
        except AddressError as e:
            spec_error = str(e)
        generation = meta.get("generation")
        return cls(
            name=name,
            node_name=str(node_name),
            resource_version=str(meta.get("resourceVersion") or ""),
            generation=generation if isinstance(generation, int) else 0,
            uid=str(meta.get("uid") or ""),
            addresses=addresses,
            cap=cap,
            spec_error=spec_error,
            deleting=meta.get("deletionTimestamp") is not None,
            status=parse_status(body.get("status")),
            finalizers=tuple(f for f in (meta.get("finalizers") or []) if isinstance(f, str)),
            subnets=subnets,
            namespaces=namespaces,
        )

    def serves(self, namespace: str) -> bool:
        """Whether pods of ``namespace`` may use the pool (``spec.namespaces``)."""
        return self.namespaces is None or namespace in self.namespaces

    @functools.cached_property
    def retained(self) -> dict[str, list[tuple[str, Allocation]]]:
        """The Retained allocations by pod identity (``namespace/name``): ``[(UID of the pod
        that ended, allocation)]``, in status order. Computed once per view (a view is one
        resourceVersion; the moves copy the allocations, never change them in place)."""
        out: dict[str, list[tuple[str, Allocation]]] = {}
        for uid, a in self.allocations.items():
            if a.phase == RETAINED and a.identity:
                out.setdefault(a.identity, []).append((uid, a))
        return out

    @property
    def allocations(self) -> dict[str, Allocation]:
        return self.status.allocations

    @functools.cached_property
    def allocated(self) -> int:
        """Places the allocations take (:attr:`Allocation.places
        <ipscheduler.underlayip.models.Allocation.places>`: one per address, a dual-stack
        allocation two)."""
        return sum(a.places for a in self.allocations.values())

    @property
    def count_only(self) -> bool:
        return self.addresses is None

    def capacity(self, blocked: AddressSet | None = None) -> int:
        """Pods this pool can hold: usable addresses (minus ``blocked``), capped by spec.capacity."""
        if self.spec_error:
            return 0
        if self.addresses is None:
            total = self.cap if self.cap is not None else 0
        else:
            usable = self.addresses.difference(blocked) if blocked else self.addresses
            total = usable.size if self.cap is None else min(usable.size, self.cap)
        return min(total, MAX_REPORTED)

    def condition(self, kind: str) -> Condition | None:
        """The status condition of type ``kind``, or None."""
        return next((c for c in self.status.conditions if c.type == kind), None)

    def free(self, blocked: AddressSet | None = None) -> int:
        """``capacity - allocated``, never below zero."""
        return max(0, self.capacity(blocked) - self.allocated)

    def holder_of(self, ip: str) -> str | None:
        """The pod UID holding ``ip`` (any spelling of the address) in this pool, if any."""
        want = _canonical_or_none(ip)
        for uid, a in self.allocations.items():
            if any(_canonical_or_none(held) == want for held in a.addresses):
                return uid
        return None


def _canonical_or_none(ip: str) -> str | None:
    try:
        return canonical(ip)
    except AddressError:
        return None


def parse_status(raw: Any) -> NodeIPPoolStatus:
    """Parse ``status``, dropping (not failing on) individually broken allocations."""
    if not isinstance(raw, dict):
        return NodeIPPoolStatus()
    allocs: dict[str, Allocation] = {}
    raw_allocs = raw.get("allocations")
    if isinstance(raw_allocs, dict):
        for uid, a in raw_allocs.items():
            try:
                allocs[str(uid)] = Allocation.model_validate(a)
            except ValidationError:
                continue
    rest = {k: v for k, v in raw.items() if k != "allocations"}
    try:
        status = NodeIPPoolStatus.model_validate(rest)
    except ValidationError:
        status = NodeIPPoolStatus()
    status.allocations = allocs
    return status


@dataclass(frozen=True)
class PoolContext:
    """What a pool's status depends on beyond the pool itself.

    ``blocked``: addresses this pool shares with other pools (handed to
    nobody); ``conflicts``: names of those other pools; ``held_by``:
    canonical address → name of a pool whose allocation holds it; at least
    every address held outside its own pool's spec (:func:`foreign_holds`),
    e.g. after a spec change. An address held by another pool is never
    handed out here.

    What running pods hold, whatever the pool status says (a status edit
    that removes a running pod's allocation must not free its address): ``pod_held``:
    canonical address → UIDs of the bound, live pods of our scheduler that carry it in
    their ``ipscheduler.io/ip`` annotation, never handed out either; ``pod_holders``:
    those whose ``ipscheduler.io/pool`` names this pool, UID → (canonical address or
    None, node): each one on the pool's node with an address of the pool takes a place
    (from ``capacity``) whether or not an allocation records it (:func:`unrecorded`).
    Both are live views kept by :class:`ipscheduler.underlayip.cache.PoolCache` from the
    bound-pods informer.
    """

    node_exists: bool = True
    blocked: AddressSet | None = None
    conflicts: tuple[str, ...] = ()
    held_by: Mapping[str, str] = field(default_factory=dict)
    pod_held: Mapping[str, AbstractSet[str]] = field(default_factory=dict)
    pod_holders: Mapping[str, tuple[str | None, str]] = field(default_factory=dict)
    pod_more: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Running pods' other carried addresses (a dual-stack pod's), by UID: each takes a place
    too (:func:`unrecorded`)."""


def unrecorded(pool: PoolView, ctx: PoolContext) -> int:
    """Running pods on ``pool``'s node that carry one of its addresses and name it in their
    annotation but have no allocation in it (an allocation removed by a status edit, a pod
    created bound and not adopted yet): places taken that the status does not count. A pod
    whose annotation cannot be adopted (another node, an address outside the pool, no
    address) takes none."""
    allocations, addresses = pool.allocations, pool.addresses
    if addresses is None:
        return 0
    return sum(
        1 + len(ctx.pod_more.get(uid, ()))
        for uid, (ip, node) in ctx.pod_holders.items()
        if uid not in allocations and node == pool.node_name and ip is not None and ip in addresses
    )


def nominated(pool: PoolView) -> int:
    """Places ``pool`` holds for pods preemption nominated to its node (phase Nominated)."""
    return sum(1 for a in pool.allocations.values() if a.phase == NOMINATED)


def freed_by_eviction(pool: PoolView, uid: str) -> bool:
    """Whether evicting pod ``uid`` would free a place in ``pool`` for another pod
    (preemption counts it): the pod holds a Reserved or Bound allocation there under the
    release policy ``Pod`` (a sticky one turns Retained, kept for the pod's identity), in
    the pool's own addresses (a foreign hold, outside the spec after an edit, gives no
    place back), and the pool hands out addresses (no spec error, not being deleted)."""
    a = pool.allocations.get(uid)
    if a is None or a.phase in (RETAINED, NOMINATED) or a.release_policy not in (None, POD):
        return False
    if pool.spec_error or pool.deleting:
        return False
    if a.ip is not None and pool.addresses is not None:
        held = [_canonical_or_none(ip) for ip in a.addresses]
        return all(ip is not None and ip in pool.addresses for ip in held)
    return True


def foreign_holds(pool: PoolView) -> dict[str, str]:
    """Addresses ``pool``'s allocations hold outside its own spec: canonical address → pool name.

    That happens after a spec change (the address was removed or the spec
    became invalid) and matters to the other pools: such an address may be
    declared by another pool and must not be handed out there. An address
    held inside the pool's own spec needs no entry: another pool declaring
    it overlaps this one, and overlapping addresses are blocked anyway
    (:func:`find_conflicts`).
    """
    out: dict[str, str] = {}
    for a in pool.allocations.values():
        for held in a.addresses:
            if (ip := _canonical_or_none(held)) and (pool.addresses is None or ip not in pool.addresses):
                out[ip] = pool.name
    return out


def find_conflicts(pools: Iterable[PoolView]) -> dict[str, PoolContext]:
    """Addresses declared by more than one pool, per pool.

    Returns pool name → PoolContext(blocked=shared addresses, conflicts=other
    pool names) for the pools that overlap any other; pools without overlap
    are absent. Count-only and invalid pools never overlap.
    """
    with_addr = [p for p in pools if p.addresses]
    # Sweep over all intervals sorted by (version, first): only pools whose intervals
    # overlap are intersected, so n pools cost O(intervals log intervals), not O(n²).
    events = sorted(
        (version, first, last, i)
        for i, p in enumerate(with_addr)
        for version, first, last in (p.addresses.intervals if p.addresses else ())
    )
    pairs: set[tuple[int, int]] = set()
    active: list[tuple[int, int, int]] = []  # (version, last, pool index) of open intervals
    for version, first, last, i in events:
        active = [a for a in active if a[0] == version and a[1] >= first]
        pairs.update((min(i, j), max(i, j)) for _, _, j in active if j != i)
        active.append((version, last, i))
    out: dict[str, tuple[AddressSet, set[str]]] = {}
    for i, j in sorted(pairs):
        a, b = with_addr[i], with_addr[j]
        assert a.addresses is not None and b.addresses is not None
        shared = a.addresses.intersection(b.addresses)
        for me, other in ((a, b), (b, a)):
            blocked, names = out.get(me.name, (AddressSet.empty(), set()))
            out[me.name] = (blocked.union(shared), names | {other.name})
    return {name: PoolContext(blocked=b, conflicts=tuple(sorted(n))) for name, (b, n) in out.items()}


def ready_condition(pool: PoolView, ctx: PoolContext) -> tuple[Literal["True", "False"], str, str]:
    """``(status, reason, message)`` of the pool's Ready condition, worst problem first."""
    capacity = pool.capacity(ctx.blocked)
    allocated = pool.allocated
    if pool.deleting:
        released = f"deletion waits until {len(pool.allocations)} allocation(s) are released"
        return "False", "Terminating", released
    if pool.spec_error:
        return "False", "InvalidSpec", pool.spec_error
    if not ctx.node_exists:
        return "False", "NodeNotFound", f'node "{pool.node_name}" does not exist'
    if ctx.conflicts:
        return (
            "False",
            "AddressConflict",
            f"{ctx.blocked} also declared by pool(s) {', '.join(ctx.conflicts)}; "
            "shared addresses are handed to nobody",
        )
    if allocated - nominated(pool) > capacity:  # a held place over a victim's is no over-commit
        return "False", "OverCommitted", f"{allocated} allocated but capacity is {capacity}"
    if capacity == 0:
        reason = "NoCapacity" if pool.count_only else "NoAddresses"
        return "False", reason, "the pool has no usable addresses (set addresses, or capacity)"
    return "True", "Ready", f"{max(0, capacity - allocated)} of {capacity} free"


def exhausted_condition(
    capacity: int, allocated: int, was: Literal["True", "False", "Unknown"] | None
) -> tuple[Literal["True", "False"], str, str]:
    """``(status, reason, message)`` of the pool's Exhausted condition, with the hysteresis
    of :data:`EXHAUSTED_CLEAR_FRACTION`: ``was`` is its status before (None: none yet)."""
    free = max(0, capacity - allocated)
    if capacity == 0:
        return "False", "NoCapacity", "the pool has no usable addresses"
    if free == 0:
        return "True", "NoFreeAddresses", f"all {capacity} addresses are allocated"
    clear_at = min(capacity, max(EXHAUSTED_CLEAR_MIN, math.ceil(capacity * EXHAUSTED_CLEAR_FRACTION)))
    if was == "True" and free < clear_at:
        return "True", "NearlyNoFreeAddresses", f"{free} of {capacity} free (clears at {clear_at} free)"
    return "False", "AddressesFree", "addresses are free (the Ready condition counts them)"


def _condition(
    pool: PoolView,
    kind: str,
    verdict: tuple[Literal["True", "False"], str, str],
    now: datetime.datetime | None,
) -> Condition:
    """The condition ``kind`` with ``verdict``, its lastTransitionTime kept unless its status changed."""
    status, reason, message = verdict
    old = pool.condition(kind)
    if old is not None and (old.status, old.reason, old.message, old.observed_generation) == (
        status,
        reason,
        message,
        pool.generation,
    ):
        return old  # unchanged: no new model (this runs for every status write)
    changed = old is None or old.status != status
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=(now or utc_now()) if changed or old is None else old.last_transition_time,
        observed_generation=pool.generation,
    )


def desired_status(
    pool: PoolView,
    ctx: PoolContext,
    allocations: dict[str, Allocation] | None = None,
    now: datetime.datetime | None = None,
) -> NodeIPPoolStatus:
    """The full status the pool should have, given ``allocations`` (default: current)."""
    allocs = pool.allocations if allocations is None else allocations
    view = pool if allocations is None else with_allocations(pool, allocs)
    capacity = view.capacity(ctx.blocked)
    allocated = view.allocated
    ready = _condition(pool, READY, ready_condition(view, ctx), now)
    was = pool.condition(EXHAUSTED)
    exhausted = _condition(
        pool, EXHAUSTED, exhausted_condition(capacity, allocated, was.status if was else None), now
    )
    others = [c for c in pool.status.conditions if c.type not in (READY, EXHAUSTED)]
    return NodeIPPoolStatus(
        capacity=capacity,
        allocated=allocated,
        retained=sum(1 for a in allocs.values() if a.phase == RETAINED),
        free=max(0, capacity - allocated),
        nominated=sum(1 for a in allocs.values() if a.phase == NOMINATED),
        releasing=sum(1 for a in allocs.values() if a.phase == RELEASING),
        allocations=allocs,
        conditions=[ready, exhausted, *others],
        observed_generation=pool.generation,
    )


def with_allocations(pool: PoolView, allocs: dict[str, Allocation]) -> PoolView:
    """``pool`` as it would be with ``allocs`` as its allocations (a what-if view)."""
    return dataclasses.replace(pool, status=pool.status.model_copy(update={"allocations": allocs}))


def _same(a: NodeIPPoolStatus, b: NodeIPPoolStatus) -> bool:
    def strip(s: NodeIPPoolStatus) -> dict[str, Any]:
        d = s.to_wire()
        for c in d.get("conditions", []):
            c.pop("lastTransitionTime", None)
        return d

    return strip(a) == strip(b)


def refresh(
    pool: PoolView, ctx: PoolContext, now: datetime.datetime | None = None
) -> NodeIPPoolStatus | None:
    """Recompute counts and conditions; None if the status is already right."""
    new = desired_status(pool, ctx, now=now)
    return None if _same(new, pool.status) else new


def network_of(pool: PoolView, ip: str) -> dict[str, Any]:
    """The network facts of address ``ip`` of ``pool`` as a CNI IPAM result without
    interfaces (``types100.Result`` of containernetworking/cni, SPEC.md "IPAM result"):
    ``{"ips": [{"address": "10.0.1.12/24", "gateway": "10.0.1.1"}], "routes": [{"dst":
    "0.0.0.0/0", "gw": "10.0.1.1"}]}``, from the subnet of ``spec.subnets`` that holds it;
    without one, a host route (``/32``, ``/128``) with no gateway and no routes.
    Raises AddressError when ``ip`` is not an address."""
    canon = canonical(ip)
    subnet = subnet_for(pool.subnets, canon)
    if subnet is None:
        return {"ips": [{"address": f"{canon}/{128 if ':' in canon else 32}"}]}
    entry = {"address": subnet.prefixed(canon)}
    if subnet.gateway is not None:
        entry["gateway"] = subnet.gateway
    out: dict[str, Any] = {"ips": [entry]}
    if subnet.routes:
        out["routes"] = [{"dst": dst, **({"gw": gw} if gw else {})} for dst, gw in subnet.routes]
    return out


def network_of_all(pool: PoolView, ips: tuple[str, ...]) -> dict[str, Any]:
    """The network facts of every address of ``ips`` (a dual-stack pod's, primary first) as
    one CNI IPAM result: :func:`network_of`'s ``ips`` entries in the order of ``ips`` and
    the routes of their subnets, IPv4 ones first, each once. One address: exactly
    :func:`network_of`. Raises AddressError when an entry is not an address."""
    if len(ips) == 1:
        return network_of(pool, ips[0])
    parts = [network_of(pool, ip) for ip in ips]
    out: dict[str, Any] = {"ips": [entry for part in parts for entry in part["ips"]]}
    routes: list[dict[str, str]] = []
    for part in sorted(parts, key=lambda p: ":" in p["ips"][0]["address"]):
        routes.extend(r for r in part.get("routes", ()) if r not in routes)
    if routes:
        out["routes"] = routes
    return out


def merge_networks(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One CNI IPAM result for one interface whose addresses come from two pools (a dual-stack
    pod's primary family from one, its second from another): ``first``'s ``ips`` then
    ``second``'s, and the routes of both, IPv4 ones first, each once (as
    :func:`network_of_all` orders them for one pool)."""
    out: dict[str, Any] = {**first, "ips": [*first.get("ips", ()), *second.get("ips", ())]}
    routes: list[dict[str, str]] = []
    for part in sorted((first, second), key=lambda p: ":" in p["ips"][0]["address"]):
        routes.extend(r for r in part.get("routes", ()) if r not in routes)
    if routes:
        out["routes"] = routes
    return out


DEFAULT_ROUTES = ("0.0.0.0/0", "::/0")


def without_default_route(network: dict[str, Any]) -> dict[str, Any]:
    """``network`` (a CNI IPAM result, :func:`network_of_all`) without its default routes
    (``0.0.0.0/0``, ``::/0``): a pod's further interface never carries the default route,
    its first one does (the pool's other routes stay)."""
    routes = [r for r in network.get("routes", ()) if r.get("dst") not in DEFAULT_ROUTES]
    out = {k: v for k, v in network.items() if k != "routes"}
    if routes:
        out["routes"] = routes
    return out


def pool_ref(pool: PoolView) -> dict[str, str]:
    """The involvedObject of an event about a (cluster-scoped) NodeIPPool."""
    return object_ref(KIND, API_VERSION, pool.name, uid=pool.uid)
