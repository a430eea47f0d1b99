"""What to repair in pool allocations, given pools and pods: pure planning, no I/O.

Used by the start-up reconcile (with a live LIST of pods) and by the periodic
garbage-collection sweep (with the pod index, each release then confirmed by a
live read of the pod). Everything is keyed by pod UID, never by name
(whereabouts#176: a new pod reusing a name must never lose its address).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ipscheduler.allocator import PoolView, age
from ipscheduler.models import Allocation
from ipscheduler.objects import ANNOTATION_IP, ANNOTATION_POOL, PodInfo

Action = Literal["release", "mark_bound", "adopt"]


@dataclass(frozen=True)
class Repair:
    """One repair: ``action`` on pod ``uid`` (``pod`` = namespace/name) in ``pool``.

    ``allocation``: the allocation planned on (releases apply only while it is
    still exactly that one)."""

    action: Action
    pool: str
    uid: str
    pod: str
    reason: str
    ip: str | None = None
    node: str = ""
    allocation: Allocation | None = None


def plan(
    pools: Iterable[PoolView],
    pods: Mapping[str, PodInfo],
    now: datetime.datetime,
    reserved_ttl: float = 60.0,
) -> list[Repair]:
    """Repairs that make allocations match pods.

    ``pods`` maps UID → pod for the pods of our scheduler (any phase).

    - release: the pod is gone or terminal; or the allocation stayed Reserved
      longer than ``reserved_ttl`` seconds while the pod is bound to another
      node (a lost race), or bound here without our annotation, or still not
      bound at all (the cycle that reserved it died between Reserve and Bind);
    - mark_bound: Reserved, and the pod is bound to the pool's node with our
      pool annotation (a crash between bind and PostBind);
    - adopt: a bound, live pod carries our annotations but no pool has an
      allocation for it (its allocation was lost).

    Reserved allocations of pods still pending are kept for ``reserved_ttl``
    seconds: the cycle that made them is binding the pod. Ages are measured
    with :func:`ipscheduler.allocator.age`: a ``since`` in the future (a
    replica whose clock runs ahead) counts as now, so clock skew can delay a
    release, never hasten one beyond the skew of the clock that stamped it.
    """
    out: list[Repair] = []
    held: set[str] = set()
    for pool in pools:
        for uid, a in pool.allocations.items():
            held.add(uid)
            pod = pods.get(uid)
            if pod is None:
                out.append(
                    Repair("release", pool.name, uid, a.pod, "pod no longer exists", a.ip, allocation=a)
                )
                continue
            if pod.terminal:
                out.append(
                    Repair("release", pool.name, uid, a.pod, f"pod is {pod.phase}", a.ip, allocation=a)
                )
                continue
            if a.phase != "Reserved":
                continue
            ours = (
                pod.bound
                and pod.node_name == pool.node_name
                and pod.annotations.get(ANNOTATION_POOL) == pool.name
            )
            if ours:
                out.append(
                    Repair("mark_bound", pool.name, uid, a.pod, "pod is bound with this address", a.ip)
                )
            elif age(a.since, now) > reserved_ttl:
                where = f"pod is bound to {pod.node_name}" if pod.bound else "pod is still not bound"
                out.append(
                    Repair(
                        "release",
                        pool.name,
                        uid,
                        a.pod,
                        f"Reserved for more than {reserved_ttl:.0f}s but {where}",
                        a.ip,
                        allocation=a,
                    )
                )
    for uid, pod in pods.items():
        pool_name = pod.annotations.get(ANNOTATION_POOL)
        if uid in held or not pool_name or not pod.bound or pod.terminal or pod.deleting:
            continue
        out.append(
            Repair(
                "adopt",
                pool_name,
                uid,
                pod.key,
                "bound pod has no allocation",
                pod.annotations.get(ANNOTATION_IP),
                node=pod.node_name,
            )
        )
    return out
