"""What to repair in pool allocations, given pools and pods: pure planning, no I/O.

Used by the start-up reconcile (with a live LIST of pods) and by the periodic
garbage-collection sweep (with the pod index, each release then confirmed by a
live read of the pod). Everything is keyed by pod UID, never by name
(whereabouts#176: a new pod reusing a name must never lose its address).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.interfaces import bound_interfaces, bound_pools
from ipscheduler.underlayip.models import (
    ANNOTATION_INTERFACES,
    ANNOTATION_IP,
    ANNOTATION_NETWORK,
    ANNOTATION_POOL,
    NOMINATED,
    RELEASING,
    RESERVED,
    RETAINED,
    STATEFULSET,
    Allocation,
)
from ipscheduler.underlayip.pool import PoolView, age
from ipscheduler.underlayip.retention import StatefulSetFacts, retained_release_reason, statefulset_of
from ipscheduler.underlayip.teardown import (
    DEFAULT_RELEASE_DELAY,
    NodeState,
    confirmed,
    on_an_interface,
    release_at,
)

Action = Literal["release", "mark_bound", "adopt", "retain", "await_teardown", "settle"]

NOMINATED_TTL = 300.0
"""Seconds a Nominated place is held at most (preemption's victims have that long to
terminate: kube's default grace period is 30 s); then the GC releases it."""


@dataclass(frozen=True)
class Repair:
    """One repair: ``action`` on pod ``uid`` (``pod`` = namespace/name) in ``pool``.

    ``allocation``: the allocation planned on (releases apply only while it is
    still exactly that one).

    An adopt of a further interface names it (``interface``; None: the pod's first) and
    carries its addresses (``ip`` the first, ``more`` the others) and ``network`` (its
    entry's, as JSON); ``problem``: why its ``ipscheduler.io/interfaces`` entry cannot be
    read (the adopt then records nothing and says why)."""

    action: Action
    pool: str
    uid: str
    pod: str
    reason: str
    ip: str | None = None
    node: str = ""
    allocation: Allocation | None = None
    network: str | None = None  # adopt: the pod's ipscheduler.io/network, if any
    subject: PodInfo | None = None
    """adopt: the pod itself, for the tenancy rules
    (:func:`~ipscheduler.underlayip.selection.tenancy_problem`)."""
    interface: str | None = None
    more: tuple[str, ...] = ()
    problem: str = ""


def plan(
    pools: Iterable[PoolView],
    pods: Mapping[str, PodInfo],
    now: datetime.datetime,
    reserved_ttl: float = 60.0,
    first_seen: Mapping[tuple[str, datetime.datetime], datetime.datetime] | None = None,
    statefulsets: Mapping[tuple[str, str], StatefulSetFacts | None] | None = None,
    nominated_ttl: float = NOMINATED_TTL,
    nodes: Mapping[str, NodeState] | None = None,
    release_delay: float = DEFAULT_RELEASE_DELAY,
) -> list[Repair]:
    """Repairs that make allocations match pods.

    ``pods`` maps UID → pod for the pods of our scheduler (any phase). ``nodes``: the nodes
    that exist, by name (:mod:`~ipscheduler.underlayip.teardown`); None: no node facts, every
    node lets a gone pod's address go at once (as a deleted one does).

    - release: the pod is gone or terminal; or the allocation stayed Reserved
      longer than ``reserved_ttl`` seconds while the pod is bound to another
      node (a lost race), or bound here without our annotation, or still not
      bound at all (the cycle that reserved it died between Reserve and Bind);
    - mark_bound: Reserved, and the pod is bound to the pool's node with our
      pool annotation (a crash between bind and PostBind);
    - await_teardown, instead of release or retain: the pod is gone from the API server (not
      seen terminal) and the allocation holds an address its node has not confirmed let go
      (:func:`~ipscheduler.underlayip.teardown.confirmed`): it becomes Releasing;
    - settle: a Releasing allocation whose time came (:func:`~ipscheduler.underlayip.teardown.
      release_at`, ``release_delay`` seconds with its node Ready; at once when the node is
      gone): Retained or released by its policy;
    - release, too: a Bound allocation older than ``reserved_ttl`` of a pod that
      is not bound (pods are never unbound, so the record is bogus; it would
      keep the pod from ever being scheduled);
    - adopt: a bound, live pod carries our annotations but no pool has an
      allocation for it (its allocation was lost); and for each entry of its
      ``ipscheduler.io/interfaces`` whose interface no pool records for it (one adopt per
      entry, in the entry's pool: :func:`interface_adoptions`);
    - retain, instead of release: the pod of an allocation kept for its identity (release
      policy StatefulSet or Never) is gone or ended: the allocation becomes Retained;
    - release of a Retained allocation only by the rules of its policy
      (:func:`~ipscheduler.underlayip.retention.retained_release_reason`), with
      ``statefulsets``: ``(namespace, name)`` → the StatefulSet as the API server has it now
      (None: it does not exist); a StatefulSet missing from the map, or no map, keeps it.

    Reserved allocations of pods still pending are kept for ``reserved_ttl``
    seconds: the cycle that made them is binding the pod.

    A nominated place (preemption's, phase Nominated) goes when its pod is gone, terminal or bound (its
    Reserve took the place where it was held, so one left is elsewhere), after
    ``reserved_ttl`` once the pod is no longer nominated to the pool's node, and after
    ``nominated_ttl`` in any case.

    Clock skew: ages are measured with :func:`ipscheduler.underlayip.pool.age`, so a
    ``since`` in the future (stamped by a replica whose clock runs ahead)
    counts as now. ``first_seen`` maps ``(uid, since)`` of such allocations to
    when this process first saw them (:class:`SkewClock` keeps it), and the
    age runs from there: a clock ahead by any amount delays a release by at
    most one sweep. A clock *behind* by S makes that replica's reservations
    look S seconds older: ``reserved_ttl`` must exceed the clock skew between
    replicas plus the longest bind (the default 60 s against NTP-synced
    clocks and binds of well under a second).
    """

    def age_of(uid: str, a: Allocation) -> float:
        since = a.since if a.since.tzinfo else a.since.replace(tzinfo=datetime.UTC)
        if first_seen is not None:
            since = min(since, first_seen.get((uid, since), since))
        return age(since, now)

    def node_of(pool: PoolView) -> NodeState | None:
        return None if nodes is None else nodes.get(pool.node_name)

    out: list[Repair] = []
    held: set[str] = set()
    held_on: set[tuple[str, str]] = set()  # (uid, interface): the further interfaces' allocations
    for pool in pools:
        for uid, a in pool.allocations.items():
            if a.interface is None:  # a further interface's allocation is not the first one's
                held.add(uid)
            else:
                held_on.add((uid, a.interface))
            if a.phase == RELEASING:
                when = release_at(a.releasing_since or a.since, node_of(pool), release_delay)
                if when is not None and when <= now:
                    why_settle = _settle_reason(pool, node_of(pool), release_delay)
                    out.append(Repair("settle", pool.name, uid, a.pod, why_settle, a.ip, allocation=a))
                continue
            if a.phase == RETAINED:
                why = _retained_reason(a, statefulsets)
                if why is not None:
                    out.append(Repair("release", pool.name, uid, a.pod, why, a.ip, allocation=a))
                continue
            if a.phase == NOMINATED:
                why = _nomination_over(pool, pods.get(uid), age_of(uid, a), reserved_ttl, nominated_ttl)
                if why is not None:
                    out.append(Repair("release", pool.name, uid, a.pod, why, a.ip, allocation=a))
                continue
            why = _release_reason(pool, a, pods.get(uid), age_of(uid, a), reserved_ttl)
            if why is not None:
                pod = pods.get(uid)
                gone = pod is None or pod.terminal
                action: Action = (
                    "retain" if gone and a.identity and a.release_policy in KEEPING else "release"
                )
                if pod is None and on_an_interface(a) and not confirmed(False, node_of(pool)):
                    action = "await_teardown"
                out.append(Repair(action, pool.name, uid, a.pod, why, a.ip, allocation=a))
                continue
            pod = pods.get(uid)
            if pod is not None and a.phase == RESERVED and bound_with(pod, pool):
                out.append(
                    Repair(
                        "mark_bound",
                        pool.name,
                        uid,
                        a.pod,
                        "pod is bound with this address",
                        a.ip,
                        allocation=a,
                    )
                )
    further = {uid for uid, _ in held_on}
    for uid, pod in pods.items():
        if not pod.bound or pod.terminal or pod.deleting:
            continue
        pool_name = pod.annotations.get(ANNOTATION_POOL)
        if uid not in held and pool_name:
            out.append(
                Repair(
                    "adopt",
                    pool_name,
                    uid,
                    pod.key,
                    "bound pod has no allocation",
                    pod.annotations.get(ANNOTATION_IP),
                    node=pod.node_name,
                    network=pod.annotations.get(ANNOTATION_NETWORK),
                    subject=pod,
                )
            )
        if ANNOTATION_INTERFACES in pod.annotations:
            out.extend(interface_adoptions(pod, held_on, uid in further))
    return out


def interface_adoptions(pod: PodInfo, held_on: set[tuple[str, str]], holds_any: bool) -> list[Repair]:
    """The adopts of bound pod ``pod``'s further interfaces (:func:`plan`): one per entry of
    its ``ipscheduler.io/interfaces`` whose interface no allocation records for it
    (``held_on``: ``(uid, interface)`` of every further interface's allocation), in the
    entry's pool, with its addresses and network. An entry that cannot be read is an adopt
    with its ``problem`` (none for an interface that is recorded); an annotation that cannot
    be read at all, one only when the pod holds no further interface's allocation
    (``holds_any``)."""
    out: list[Repair] = []
    for entry in bound_interfaces(pod.annotations):
        if (pod.uid, entry.interface) in held_on or (not entry.interface and holds_any):
            continue
        out.append(
            Repair(
                "adopt",
                entry.pool,
                pod.uid,
                pod.key,
                f"bound pod has no allocation for interface {entry.interface or '(unreadable)'}",
                entry.ips[0] if entry.ips else None,
                node=pod.node_name,
                network=None if entry.network is None else json.dumps(entry.network, separators=(",", ":")),
                subject=pod,
                interface=entry.interface,
                more=entry.ips[1:],
                problem=entry.problem,
            )
        )
    return out


KEEPING = ("StatefulSet", "Never")
"""The release policies whose allocations outlive their pod."""


def _retained_reason(
    a: Allocation, statefulsets: Mapping[tuple[str, str], StatefulSetFacts | None] | None
) -> str | None:
    """Why Retained allocation ``a`` goes now, or None (see :func:`plan`)."""
    facts: StatefulSetFacts | None = None
    if a.release_policy == STATEFULSET:
        parsed = statefulset_of(a.identity or "")
        key = (parsed[0], parsed[1]) if parsed else None
        if key is not None:
            if statefulsets is None or key not in statefulsets:
                return None  # not known: kept until a sweep knows
            facts = statefulsets[key]
    return retained_release_reason(a.release_policy, a.identity or "", a.owner_uid or "", facts)


def retained_statefulsets(pools: Iterable[PoolView]) -> set[tuple[str, str]]:
    """The ``(namespace, name)`` of every StatefulSet a Retained allocation of ``pools``
    belongs to: what :func:`plan` needs to know."""
    out: set[tuple[str, str]] = set()
    for pool in pools:
        for a in pool.allocations.values():
            if a.phase == RETAINED and a.release_policy == STATEFULSET:
                parsed = statefulset_of(a.identity or "")
                if parsed is not None:
                    out.add((parsed[0], parsed[1]))
    return out


def bound_with(pod: PodInfo, pool: PoolView) -> bool:
    """Is ``pod`` bound to ``pool``'s node with ``pool``: its ``ipscheduler.io/pool``
    annotation, or an entry of its ``ipscheduler.io/interfaces`` (a further interface),
    names the pool, or, for a count-only pool (whose Binding writes no annotation), the pod
    carries none (absent or "")."""
    if not pod.bound or pod.node_name != pool.node_name:
        return False
    named = pod.annotations.get(ANNOTATION_POOL) or ""
    return pool.name in bound_pools(pod.annotations) or (not named and pool.addresses is None)


def _settle_reason(pool: PoolView, node: NodeState | None, release_delay: float) -> str:
    """Why a Releasing allocation of ``pool`` may go now (see :func:`plan`)."""
    if node is None:
        return f"node {pool.node_name} no longer exists"
    if node.simulated:
        return f"node {pool.node_name} is simulated (no sandbox holds the address)"
    return f"node {pool.node_name} Ready for {release_delay:.0f}s since the pod was seen gone"


def _nomination_over(
    pool: PoolView, pod: PodInfo | None, age_s: float, reserved_ttl: float, nominated_ttl: float
) -> str | None:
    """Why a Nominated place (``age_s`` seconds old) of ``pod`` in ``pool`` goes, or None."""
    if pod is None:
        return "pod no longer exists"
    if pod.terminal:
        return f"pod is {pod.phase}"
    if pod.bound:
        return f"pod is bound to {pod.node_name}: its nomination is over"
    if age_s > nominated_ttl:
        return f"Nominated for more than {nominated_ttl:.0f}s"
    if age_s > reserved_ttl and pod.nominated_node_name != pool.node_name:
        where = f"to {pod.nominated_node_name}" if pod.nominated_node_name else "anywhere"
        return f"pod is no longer nominated to {pool.node_name} but {where}"
    return None


def _release_reason(
    pool: PoolView, a: Allocation, pod: PodInfo | None, age_s: float, reserved_ttl: float
) -> str | None:
    """Why allocation ``a`` (``age_s`` seconds old) of ``pod`` in ``pool`` goes, or None."""
    if pod is None:
        return "pod no longer exists"
    if pod.terminal:
        return f"pod is {pod.phase}"
    if age_s <= reserved_ttl:
        return None
    if a.phase != RESERVED:
        # Pods are never unbound: a Bound record of a pod that is pending in a LIST taken
        # after the pools' is bogus (an edited or restored status).
        return None if pod.bound else "Bound allocation of a pod that is not bound"
    if bound_with(pod, pool):
        return None  # marked Bound instead
    where = f"pod is bound to {pod.node_name}" if pod.bound else "pod is still not bound"
    return f"Reserved for more than {reserved_ttl:.0f}s but {where}"


class SkewClock:
    """When each allocation whose ``since`` lies in the future was first seen (see
    :func:`plan`): ``(uid, since)`` → that moment. Feed it every planning's pools."""

    def __init__(self) -> None:
        self.first_seen: dict[tuple[str, datetime.datetime], datetime.datetime] = {}

    def observe(self, pools: Iterable[PoolView], now: datetime.datetime) -> None:
        """Record allocations stamped in the future; forget those no longer present."""
        seen: dict[tuple[str, datetime.datetime], datetime.datetime] = {}
        for pool in pools:
            for uid, a in pool.allocations.items():
                since = a.since if a.since.tzinfo else a.since.replace(tzinfo=datetime.UTC)
                if since > now or (uid, since) in self.first_seen:
                    seen[(uid, since)] = self.first_seen.get((uid, since), now)
        self.first_seen = seen
