"""Address allocation over NodeIPPool objects: the moves, pure functions, no I/O.

Every move takes a :class:`~ipscheduler.underlayip.pool.PoolView` (one pool at one
resourceVersion) and its :class:`~ipscheduler.underlayip.pool.PoolContext`, and returns
the *new status* to write with compare-and-swap, or ``None`` when nothing changes. The
pool writer (:class:`ipscheduler.underlayip.writer.PoolWriter`) does the writing and
retries on 409 by re-reading and calling the same function again, so the allocation
truth is always the pool status in the API server. What a pool is, and the status it
should have, is in :mod:`ipscheduler.underlayip.pool`.

Size: every move on a pool's allocations (reserve with its take-back, takeover and
families, unreserve, retain, settle, nominate, mark Bound, release, adopt) and the counts
they decide by, in one pure module, so that each move is written against the same picks and
tested beside the others.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, NamedTuple

from ipscheduler.underlayip.addresses import AddressError, AddressSet, canonical
from ipscheduler.underlayip.models import (
    BOUND,
    MAX_ALLOCATION_IPS,
    NEVER,
    NOMINATED,
    RELEASING,
    RESERVED,
    RETAINED,
    STATEFULSET,
    Allocation,
    NodeIPPoolStatus,
)
from ipscheduler.underlayip.pool import (
    PoolContext,
    PoolView,
    age,
    desired_status,
    unrecorded,
    utc_now,
    with_allocations,
)
from ipscheduler.underlayip.retention import Retention, takes_back
from ipscheduler.underlayip.teardown import on_an_interface


def pick(pool: PoolView, ctx: PoolContext, uid: str) -> tuple[bool, str | None]:
    """Which address ``uid`` would get from ``pool``: ``(possible, ip)``.

    A pod that already holds an allocation keeps it. Otherwise the lowest
    free address (count-only pools: a slot with ip None). ``possible`` is
    False when the pool is full, invalid, or being deleted.
    """
    existing = pool.allocations.get(uid)
    if existing is not None:
        return True, existing.ip
    return _pick_new(pool, ctx)


def _free(pool: PoolView, ctx: PoolContext) -> int:
    """``pool.free()`` less the places running pods take without an allocation."""
    free = pool.free(ctx.blocked)
    return free - unrecorded(pool, ctx) if free > 0 and ctx.pod_holders else free


def _pick_new(pool: PoolView, ctx: PoolContext) -> tuple[bool, str | None]:
    if pool.spec_error or pool.deleting or _free(pool, ctx) <= 0:
        return False, None
    if pool.addresses is None:
        return True, None
    ip = _first_pickable(pool, ctx, pool.addresses, _taken(pool))
    return (ip is not None), ip


def _taken(pool: PoolView) -> set[str]:
    return {ip for a in pool.allocations.values() for ip in a.addresses}


def _first_pickable(pool: PoolView, ctx: PoolContext, among: AddressSet, taken: set[str]) -> str | None:
    """The lowest address of ``among`` (addresses of ``pool``) neither ``taken`` (grown in
    place with what it skips) nor blocked, nor held by an allocation of another pool or by a
    running pod's annotation."""
    while True:
        ip = among.first_free(taken, ctx.blocked)
        if ip is None or (ctx.held_by.get(ip, pool.name) == pool.name and not ctx.pod_held.get(ip)):
            return ip
        taken.add(ip)


def pick_families(pool: PoolView, ctx: PoolContext, versions: tuple[int, ...]) -> tuple[str, ...] | None:
    """One new address of each IP version of ``versions`` (4, 6; in that order: the first is
    the primary) from ``pool``, the lowest free of each family, or None when the pool cannot
    give them all (full, not that many places free, no free address of a family, invalid,
    being deleted, count-only)."""
    if pool.spec_error or pool.deleting or pool.addresses is None or _free(pool, ctx) < len(versions):
        return None
    taken = _taken(pool)
    picked: list[str] = []
    for version in versions:
        ip = _first_pickable(pool, ctx, pool.addresses.of_version(version), taken)
        if ip is None:
            return None
        picked.append(ip)
    return tuple(picked)


def family_free(pool: PoolView, ctx: PoolContext) -> dict[int, int]:
    """IP version → addresses of that family ``pool`` could still give (neither allocated,
    blocked, held by another pool's allocation nor by a running pod), before its capacity
    cap (:func:`pods_like` applies it); empty for a count-only, invalid or deleted pool.
    Costs one pass over the allocations and the holds: asked for pods that name families."""
    if pool.spec_error or pool.deleting or pool.addresses is None:
        return {}
    taken = _taken(pool)
    taken.update(ip for ip, holder in ctx.held_by.items() if holder != pool.name)
    taken.update(ip for ip, uids in ctx.pod_held.items() if uids)
    return {
        v: pool.addresses.of_version(v).count_free(taken, ctx.blocked)
        for v in sorted(pool.addresses.versions)
    }


def pods_like(avail: int, free_by_version: Mapping[int, int], versions: tuple[int, ...]) -> int:
    """How many pods that each need one address of every version of ``versions`` a pool can
    take, given its ``avail`` places (:func:`available`) and its ``free_by_version``
    (:func:`family_free`). ``versions`` empty: any one address each, ``avail``."""
    if not versions:
        return avail
    n = avail // len(versions)
    for version in versions:
        n = min(n, free_by_version.get(version, 0))
    return max(0, n)


def available(pool: PoolView, ctx: PoolContext) -> int:
    """How many more pods ``pool`` can take now: its free count (less the places of running
    pods no allocation records), or 0 when not even one address can be picked (full,
    invalid, being deleted, or every free address held by an allocation of another pool
    or by a running pod)."""
    possible, _ = _pick_new(pool, ctx)
    return max(0, _free(pool, ctx)) if possible else 0


def available_to(pool: PoolView, ctx: PoolContext, uid: str) -> int:
    """How many pods like pod ``uid``, which holds an allocation in ``pool``, the pool can
    take: its own allocation counts as free for it (``free + 1``); a nominated place
    (preemption's, phase Nominated) is the pod's once a victim's allocation is released,
    so while the pool is still one over its capacity it counts 0."""
    a = pool.allocations.get(uid)
    if a is None:
        return available(pool, ctx)
    if a.phase == NOMINATED:
        return max(0, pool.capacity(ctx.blocked) - pool.allocated + 1)
    return pool.free(ctx.blocked) + a.places


def abandoned(
    allocation: Allocation,
    owner: str,
    now: datetime.datetime,
    takeover_after: float | None,
    takeover_before: datetime.datetime | None = None,
) -> bool:
    """May scheduling cycle ``owner`` (``<replica identity>/<cycle token>``) take over
    ``allocation``, another cycle's reservation for the same pod?

    Only a ``Reserved`` allocation, and only when the cycle that made it is over:

    - it is older than ``takeover_after`` seconds (:func:`age`: a ``since`` in the future
      counts as now), longer than any bind takes: that cycle died between Reserve and Bind;
    - or another replica (``reservedBy``'s identity differs from ``owner``'s) made it
      before ``takeover_before``: the moment this replica took the scheduler's Lease. The
      replica that held the Lease before stopped scheduling at its renew deadline, at least
      lease duration minus renew deadline earlier (kube-scheduler's leader election, as
      ``k8s.io/client-go/tools/leaderelection``). Its clock stamped ``since``: if it ran
      ahead, its last reservations wait for ``takeover_after`` instead.

    A takeover keeps the address with the same pod UID, so even a Binding of the old cycle
    that lands late finds the pod's address recorded.
    """
    if allocation.phase != RESERVED:
        return False
    if takeover_after is not None and age(allocation.since, now) > takeover_after:
        return True
    if takeover_before is None or not allocation.reserved_by:
        return False
    since = allocation.since if allocation.since.tzinfo else allocation.since.replace(tzinfo=datetime.UTC)
    return replica_of(allocation.reserved_by) != replica_of(owner) and since < takeover_before


def replica_of(reserved_by: str | None) -> str:
    """The replica identity of a ``reservedBy`` (``<replica identity>/<cycle token>``; "" for none)."""
    return (reserved_by or "").rpartition("/")[0]


def retained_for(
    pool: PoolView, identity: str, owner_uid: str = "", interface: str | None = None
) -> tuple[str, Allocation] | None:
    """The Retained allocation of ``pool`` kept for pod identity ``identity``
    (``namespace/name``) and, for policy StatefulSet, the StatefulSet of UID ``owner_uid``:
    ``(the UID of the pod that ended, the allocation)``, None when there is none. A
    StatefulSet recreated under the same name (another UID) does not match; an allocation
    kept with policy Never matches any pod of that name; only one kept for the same
    ``interface`` (None: the pod's first). A lookup in the view's
    :attr:`~ipscheduler.underlayip.pool.PoolView.retained` (every reservation asks)."""
    for uid, a in pool.retained.get(identity, ()):
        if a.interface == interface and takes_back(a, owner_uid):
            return uid, a
    return None


def to_take_back(
    pool: PoolView, uid: str, pod_key: str, retention: Retention | None, interface: str | None = None
) -> tuple[str, Allocation] | None:
    """The Retained allocation :func:`reserve` gives pod ``uid`` (``namespace/name``
    ``pod_key``) back instead of a new address: ``(the UID it is recorded under, the
    allocation)``, or None. Its own (a Retained allocation under its UID), else, when it
    holds none here, its identity's (:func:`retained_for`; the identity is the pod's name
    whatever its policy, so a pod of policy Pod takes back what was kept with Never for its
    name, as PreFilter restricts it to that node)."""
    existing = pool.allocations.get(uid)
    if existing is not None:
        return (uid, existing) if existing.phase == RETAINED and existing.interface == interface else None
    identity = (retention.identity if retention is not None else "") or pod_key
    owner_uid = retention.owner_uid if retention is not None else ""
    return retained_for(pool, identity, owner_uid, interface)


def identity_held(
    pool: PoolView, uid: str, pod_key: str, retention: Retention | None, interface: str | None = None
) -> tuple[str, Allocation] | None:
    """The allocation ``pool`` records for the identity of pod ``uid`` (``retention``: a
    sticky one, StatefulSet or Never) under another pod's UID and not Retained: the
    identity's address, still the previous pod's (its release on its way), or already taken
    back by another pod of the identity that is gone since. ``(that UID, the allocation)``,
    or None (only one for the same ``interface``: None, the pod's first). A new address must
    not be given meanwhile: the identity would hold two."""
    if retention is None or not retention.sticky:
        return None
    identity = retention.identity or pod_key
    for other, a in pool.allocations.items():
        if (
            other != uid
            and a.identity == identity
            and a.interface == interface
            and a.phase != RETAINED
            and takes_back(a, retention.owner_uid)
        ):
            return other, a
    return None


def _kept(retention: Retention | None) -> dict[str, Any]:
    """The allocation fields that record ``retention`` (None or policy Pod: none)."""
    if retention is None or not retention.sticky:
        return {"release_policy": None, "identity": None, "owner_uid": None}
    return {
        "release_policy": retention.policy,
        "identity": retention.identity,
        "owner_uid": retention.owner_uid or None,
    }


class Reservation(NamedTuple):
    """What :func:`reserve` decided for one pod in one pool.

    ``status``: the pool's new status to write (None: nothing to write, the pod's
    allocation there is this cycle's already); ``ip``: the address given (None for a
    count-only slot); ``taken_back``: it is the pod identity's Retained address
    (:func:`to_take_back`), which Unreserve retains again instead of releasing."""

    status: NodeIPPoolStatus | None
    ip: str | None
    taken_back: bool = False
    ips: tuple[str, ...] = ()
    """Every address given, primary first (``ip`` is the first; empty for a slot)."""


def _pick_for(
    pool: PoolView, ctx: PoolContext, versions: tuple[int, ...], fallback: bool
) -> tuple[bool, tuple[str, ...]]:
    """``(possible, addresses)`` a new allocation of ``pool`` would get: one address of each
    version of ``versions`` (none: any one address, or a slot in a count-only pool); with
    ``fallback`` (PreferDualStack), when the pool cannot give them all, one address of the
    first version it can give."""
    if not versions:
        possible, ip = _pick_new(pool, ctx)
        return possible, ((ip,) if ip else ())
    picked = pick_families(pool, ctx, versions)
    if picked is None and fallback:
        for version in versions:
            if (picked := pick_families(pool, ctx, (version,))) is not None:
                break
    return picked is not None, picked or ()


def _addressed(ips: tuple[str, ...]) -> dict[str, Any]:
    """The allocation fields recording addresses ``ips``: ``ip`` the first, ``ips`` all of
    them when more than one."""
    return {"ip": ips[0] if ips else None, "ips": list(ips) if len(ips) > 1 else None}


def reserve(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    pod_key: str,
    now: datetime.datetime | None = None,
    owner: str | None = None,
    takeover_after: float | None = None,
    takeover_before: datetime.datetime | None = None,
    retention: Retention | None = None,
    versions: tuple[int, ...] = (),
    fallback: bool = False,
    interface: str | None = None,
) -> Reservation:
    """Reserve an address for pod ``uid`` (``namespace/name``) on behalf of the scheduling
    cycle ``owner`` (``<replica identity>/<cycle token>``, stored as ``reservedBy``).

    Returns a :class:`Reservation`. When the pod already holds an allocation here:

    - made by this very cycle (``reservedBy == owner``: our earlier write landed,
      e.g. a retry after a timeout): status None, nothing to write;
    - abandoned (:func:`abandoned`: ``Reserved`` by another cycle for longer than
      ``takeover_after`` seconds, or by another replica before ``takeover_before``):
      taken over, same address, ``reservedBy`` and ``since`` renewed;
    - otherwise (another cycle's reservation in flight, or Bound): raises
      :class:`ReservedElsewhere`: it is never adopted as this cycle's own.

    ``retention`` (the pod's release policy, :func:`ipscheduler.underlayip.retention.retention_of`)
    is recorded on a new allocation. A Retained allocation of the pod or its identity
    (:func:`to_take_back`) is taken back instead of a new address: keyed by ``uid`` from
    now on, phase Reserved, the same address.

    ``versions`` (IP versions 4, 6, primary first; empty: any one address): a new allocation
    gets one address of each (a dual-stack pod), or with ``fallback`` (PreferDualStack) one of
    the first version the pool can give when it cannot give them all (:func:`_pick_for`). An
    allocation taken back, taken over or already this cycle's keeps the addresses it has.
    ``interface``: the pod's further interface the allocation is for (None: its first); the
    pod's allocation of another interface in this pool leaves no room for this one
    (:class:`PoolFull`: a pod holds one allocation per pool).

    ``owner`` None keeps the pre-ownership behaviour (any held allocation is
    returned as is); only tests use it. Raises :class:`PoolFull` when there is
    nothing to give.
    """
    now = now or utc_now()
    existing = pool.allocations.get(uid)
    if existing is not None and existing.interface != interface and existing.phase != NOMINATED:
        raise PoolFull(pool.name)
    found = to_take_back(pool, uid, pod_key, retention, interface)
    if found is not None:
        old_uid, kept = found
        status = _reclaim(pool, ctx, old_uid, uid, kept, pod_key, now, owner, retention)
        return Reservation(status, kept.ip, taken_back=True, ips=kept.addresses)
    if existing is not None and existing.phase == NOMINATED:
        # The place preemption held for the pod becomes its reservation: picked as if the
        # pool had room for one more (the held place), never beyond the pool's capacity.
        allocs = {k: v for k, v in pool.allocations.items() if k != uid}
        possible, ips = _pick_for(with_allocations(pool, allocs), ctx, versions, fallback)
        if not possible:
            raise PoolFull(pool.name)
        allocs[uid] = Allocation(
            pod=pod_key,
            phase=RESERVED,
            since=now,
            reserved_by=owner,
            interface=interface,
            **_addressed(ips),
            **_kept(retention),
        )
        return Reservation(desired_status(pool, ctx, allocs, now), allocs[uid].ip, ips=ips)
    if existing is not None:
        if owner is None or existing.reserved_by == owner:
            return Reservation(None, existing.ip, ips=existing.addresses)
        if abandoned(existing, owner, now, takeover_after, takeover_before):
            allocs = dict(pool.allocations)
            allocs[uid] = existing.model_copy(update={"reserved_by": owner, "since": now})
            return Reservation(desired_status(pool, ctx, allocs, now), existing.ip, ips=existing.addresses)
        raise ReservedElsewhere(pool.name, existing)
    if (held := identity_held(pool, uid, pod_key, retention, interface)) is not None:
        raise IdentityHeld(pool.name, *held)
    possible, ips = _pick_for(pool, ctx, versions, fallback)
    if not possible:
        raise PoolFull(pool.name)
    allocs = dict(pool.allocations)
    allocs[uid] = Allocation(
        pod=pod_key,
        phase=RESERVED,
        since=now,
        reserved_by=owner,
        interface=interface,
        **_addressed(ips),
        **_kept(retention),
    )
    return Reservation(desired_status(pool, ctx, allocs, now), allocs[uid].ip, ips=ips)


def _reclaim(
    pool: PoolView,
    ctx: PoolContext,
    old_uid: str,
    uid: str,
    kept: Allocation,
    pod_key: str,
    now: datetime.datetime,
    owner: str | None,
    retention: Retention | None,
) -> NodeIPPoolStatus:
    """Give Retained allocation ``kept`` (under ``old_uid``) to pod ``uid``: Reserved by
    cycle ``owner``, same address, the new pod's policy recorded."""
    allocs = {k: v for k, v in pool.allocations.items() if k != old_uid}
    allocs[uid] = kept.model_copy(
        update={
            "pod": pod_key,
            "phase": RESERVED,
            "since": now,
            "reserved_by": owner,
            "retained_since": None,
            **(_kept(retention) if retention is not None else {}),
        }
    )
    return desired_status(pool, ctx, allocs, now)


def unreserve(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    owner: str,
    keep: bool = False,
    now: datetime.datetime | None = None,
) -> NodeIPPoolStatus | None:
    """Undo cycle ``owner``'s reservation for pod ``uid`` (Unreserve). Only an allocation
    whose ``reservedBy`` is that cycle's is touched. ``keep``: the cycle had taken back a
    Retained address (the pod's identity keeps it): it becomes Retained again, under
    ``uid``, instead of going back to the pool. None when there is nothing to undo."""
    a = pool.allocations.get(uid)
    if a is None or a.reserved_by != owner:
        return None
    if keep and a.identity and a.release_policy in (STATEFULSET, NEVER):
        allocs = dict(pool.allocations)
        allocs[uid] = a.model_copy(update={"phase": RETAINED, "retained_since": now or utc_now()})
        return desired_status(pool, ctx, allocs, now)
    return release(pool, ctx, uid, owner=owner)


def retain(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    now: datetime.datetime | None = None,
    confirmed: bool = True,
) -> NodeIPPoolStatus | None:
    """Pod ``uid`` ended. ``confirmed`` (:func:`~ipscheduler.underlayip.teardown.confirmed`:
    the kubelet ended it, or no sandbox of its node can hold the address): keep its allocation
    for its identity (phase Retained) when its policy says so (StatefulSet or Never, with an
    identity), else remove it (as :func:`release`). Not ``confirmed``: an allocation an
    interface may hold (:func:`~ipscheduler.underlayip.teardown.on_an_interface`) becomes
    Releasing (``releasingSince`` = ``now``, its ``reservedBy`` dropped: the cycle is over),
    still taken until :func:`settle`; any other goes as when confirmed. None when it holds
    nothing here, or is Retained or Releasing already."""
    a = pool.allocations.get(uid)
    if a is None or a.phase in (RETAINED, RELEASING):
        return None
    now = now or utc_now()
    if not confirmed and on_an_interface(a):
        allocs = dict(pool.allocations)
        allocs[uid] = a.model_copy(update={"phase": RELEASING, "releasing_since": now, "reserved_by": None})
        return desired_status(pool, ctx, allocs, now)
    return _let_go(pool, ctx, uid, a, now)


def settle(
    pool: PoolView, ctx: PoolContext, uid: str, now: datetime.datetime | None = None
) -> NodeIPPoolStatus | None:
    """Pod ``uid``'s Releasing allocation may go (its node let the address go, or
    ``--release-delay`` passed with the node Ready: :func:`~ipscheduler.underlayip.teardown.
    release_at`): Retained by its policy, else removed. None when it holds no Releasing
    allocation here."""
    a = pool.allocations.get(uid)
    if a is None or a.phase != RELEASING:
        return None
    return _let_go(pool, ctx, uid, a, now or utc_now())


def _let_go(
    pool: PoolView, ctx: PoolContext, uid: str, a: Allocation, now: datetime.datetime
) -> NodeIPPoolStatus | None:
    """Allocation ``a`` of pod ``uid``, whose pod is gone and whose address no sandbox holds:
    Retained for its identity (policies StatefulSet and Never), else removed."""
    if a.release_policy in (STATEFULSET, NEVER) and a.identity:
        allocs = dict(pool.allocations)
        allocs[uid] = a.model_copy(update={"phase": RETAINED, "retained_since": now, "releasing_since": None})
        return desired_status(pool, ctx, allocs, now)
    return release(pool, ctx, uid)


def nominate(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    pod_key: str,
    now: datetime.datetime | None = None,
    interface: str | None = None,
) -> NodeIPPoolStatus | None:
    """Keep the nominated place in ``pool`` for pod ``uid`` (``namespace/name``), which preemption
    nominated to the pool's node: a Nominated allocation without an address, counted as
    taken by every other pod while the victims terminate (it may take the pool one over
    its capacity until a victim's allocation is released: that is not an over-commit). The
    pod's :func:`reserve` here turns it into its reservation. ``interface``: the pod's
    further interface the place is for (None: its first). None when the pod holds an
    allocation here already, or the pool hands out nothing (invalid, being deleted)."""
    if uid in pool.allocations or pool.spec_error or pool.deleting:
        return None
    allocs = dict(pool.allocations)
    allocs[uid] = Allocation(
        ip=None, pod=pod_key, phase=NOMINATED, since=now or utc_now(), interface=interface
    )
    return desired_status(pool, ctx, allocs, now)


def drop_nomination(pool: PoolView, ctx: PoolContext, uid: str) -> NodeIPPoolStatus | None:
    """Remove pod ``uid``'s Nominated place in ``pool`` (it bound elsewhere, was nominated
    elsewhere, or is gone); None when it holds none here (any other phase is left alone)."""
    a = pool.allocations.get(uid)
    if a is None or a.phase != NOMINATED:
        return None
    return release(pool, ctx, uid, expect=a)


def mark_bound(pool: PoolView, ctx: PoolContext, uid: str) -> NodeIPPoolStatus | None:
    """Set ``uid``'s allocation to phase Bound; None if absent or already Bound."""
    a = pool.allocations.get(uid)
    if a is None or a.phase == BOUND:
        return None
    allocs = dict(pool.allocations)
    allocs[uid] = a.model_copy(update={"phase": BOUND})
    return desired_status(pool, ctx, allocs)


def mark_bound_key(uid: str) -> tuple[str, str]:
    """The key pod ``uid``'s deferred Bound mark is queued under
    (:meth:`~ipscheduler.underlayip.writer.PoolWriter.defer`): one deferred mark per pod."""
    return ("mark_bound", uid)


def release(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    owner: str | None = None,
    expect: Allocation | None = None,
) -> NodeIPPoolStatus | None:
    """Remove ``uid``'s allocation; None if it holds nothing here (or not what is asked).

    ``owner``: only an allocation whose ``reservedBy`` is this cycle's (Unreserve
    never removes another cycle's reservation). ``expect``: only if the allocation
    is still exactly this one (the GC releases what it planned on, not a takeover
    that happened since).
    """
    a = pool.allocations.get(uid)
    if a is None or (owner is not None and a.reserved_by != owner) or (expect is not None and a != expect):
        return None
    allocs = {k: v for k, v in pool.allocations.items() if k != uid}
    return desired_status(pool, ctx, allocs)


def adopt(
    pool: PoolView,
    ctx: PoolContext,
    uid: str,
    pod_key: str,
    ip: str | None,
    now: datetime.datetime | None = None,
    retention: Retention | None = None,
    more: tuple[str, ...] = (),
    interface: str | None = None,
) -> NodeIPPoolStatus | None:
    """Record a Bound allocation for a pod bound earlier with ``ip`` and ``more`` (a dual-stack
    pod's other addresses, from its ``ipscheduler.io/ips``, or those of a further interface's
    entry) (start-up adoption), for its ``interface`` (None: its first; else a further one,
    from its ``ipscheduler.io/interfaces``), with the pod's release policy and identity
    (``retention``, from its own annotations and owner:
    :func:`~ipscheduler.underlayip.retention.retention_of`), so a sticky pod whose
    allocation was lost keeps its address through its next re-creation.

    Returns None when already recorded (for the same interface). Raises
    :class:`AdoptConflict` when an address is held by another pod or is not in the pool, or
    when the pool records the pod's allocation of another interface (a pod holds one
    allocation per pool); nothing is recorded then: all or none.
    """
    existing = pool.allocations.get(uid)
    if existing is not None:
        if existing.interface == interface:
            return None
        raise AdoptConflict(
            f"pool {pool.name} already records the pod's allocation of "
            f"{_interface_name(existing.interface)}, not of {_interface_name(interface)} "
            "(a pod holds one allocation per pool)"
        )
    ips: tuple[str, ...] = ()
    if ip is not None:
        ips = tuple(dict.fromkeys(_adoptable(pool, text) for text in (ip, *more)))  # each once
    if len(ips) > MAX_ALLOCATION_IPS:
        raise AdoptConflict(f"{len(ips)} addresses: an allocation holds at most {MAX_ALLOCATION_IPS}")
    allocs = dict(pool.allocations)
    allocs[uid] = Allocation(
        pod=pod_key,
        phase=BOUND,
        since=now or utc_now(),
        interface=interface,
        **_addressed(ips),
        **_kept(retention),
    )
    return desired_status(pool, ctx, allocs, now)


def _interface_name(interface: str | None) -> str:
    """How a message names ``interface`` (None: the pod's first)."""
    return "its first interface" if interface is None else f"interface {interface}"


def _adoptable(pool: PoolView, text: str) -> str:
    """Address ``text`` canonical, once it is known free in ``pool`` and inside it. Raises
    :class:`AdoptConflict` otherwise."""
    try:
        ip = canonical(text)
    except AddressError as e:
        raise AdoptConflict(f"annotation address {text!r} is not an IP") from e
    holder = pool.holder_of(ip)
    if holder is not None:
        holder_pod = pool.allocations[holder].pod
        raise AdoptConflict(
            f"address {ip} of pool {pool.name} is already held by pod {holder_pod} (UID {holder})",
            holder_uid=holder,
            holder_pod=holder_pod,
        )
    if pool.addresses is None or ip not in pool.addresses:
        raise AdoptConflict(f"address {ip} is not in pool {pool.name}")
    return ip


class PoolFull(Exception):
    """The pool has no address left for this pod (raised by :func:`reserve`)."""


class ReservedElsewhere(Exception):
    """The pod's allocation in ``pool`` belongs to another scheduling cycle (raised by
    :func:`reserve`): that cycle binds or releases it; this one must not use it."""

    def __init__(self, pool: str, allocation: Allocation) -> None:
        by = allocation.reserved_by or "an earlier cycle"
        super().__init__(f"NodeIPPool {pool} holds a {allocation.phase} allocation of the pod made by {by}")
        self.pool = pool
        self.allocation = allocation


class IdentityHeld(Exception):
    """The pool still records the address of the pod's identity for another pod (raised by
    :func:`reserve`, :func:`identity_held`): the pod waits (an Error: retried after backoff)
    until that allocation is Retained, then takes it back, never a second address."""

    def __init__(self, pool: str, uid: str, allocation: Allocation) -> None:
        super().__init__(
            f"NodeIPPool {pool} still records the address {allocation.ip or '(slot)'} of the pod's identity "
            f"for pod {allocation.pod} (UID {uid}, {allocation.phase}): waiting for it to be retained"
        )
        self.pool = pool
        self.allocation = allocation


class AdoptConflict(Exception):
    """An existing pod's annotated address cannot be recorded (raised by :func:`adopt`).

    ``holder_uid``/``holder_pod``: the pod that holds the address, when that is the reason.
    """

    def __init__(self, message: str, holder_uid: str = "", holder_pod: str = "") -> None:
        super().__init__(message)
        self.holder_uid = holder_uid
        self.holder_pod = holder_pod
