"""Preemption's choice among candidate nodes (pure, no I/O).

After kube-scheduler's ``pkg/scheduler/framework/preemption/preemption.go``
(``SelectCandidate``, ``pickOneNodeForPreemption``) and ``pkg/scheduler/util/utils.go``
(``GetEarliestPodStartTime``): once PostFilter found, on each candidate node, the victims
whose eviction lets the preemptor pass every filter, one node is picked by, in order:

1. the fewest PodDisruptionBudget violations;
2. the lowest priority of its highest-priority victim;
3. the smallest sum of the victims' priorities (each shifted by ``2**31`` so that more
   victims of a negative priority never look cheaper);
4. the fewest victims;
5. the latest start time of its highest-priority victims (the earliest of them counts);
6. the first candidate in the given order.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PRIORITY_SHIFT = 2**31
"""Added to every victim's priority before they are summed (upstream ``math.MaxInt32+1``)."""


@dataclass(frozen=True)
class Victim:
    """A pod preemption would evict: its ``uid``, ``priority`` and ``start_time`` (UTC;
    None when the pod has not started)."""

    uid: str
    priority: int
    start_time: datetime.datetime | None = None


@dataclass(frozen=True)
class Candidate:
    """A node where the preemptor fits once ``victims`` (ordered by decreasing priority, as
    upstream's victim selection leaves them) are gone, violating ``pdb_violations``
    PodDisruptionBudgets."""

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int = 0


def earliest_start_of_highest_priority(victims: Sequence[Victim]) -> datetime.datetime | None:
    """The earliest start time among the victims of the highest priority (upstream
    ``GetEarliestPodStartTime``); None without victims or when none of them started."""
    if not victims:
        return None
    top = max(v.priority for v in victims)
    starts = [v.start_time for v in victims if v.priority == top and v.start_time is not None]
    return min(starts) if starts else None


def _latest_start(candidate: Candidate) -> float:
    start = earliest_start_of_highest_priority(candidate.victims)
    return start.timestamp() if start is not None else float("-inf")


SCORES: tuple[Callable[[Candidate], float], ...] = (
    lambda c: -c.pdb_violations,
    lambda c: -c.victims[0].priority if c.victims else 0,
    lambda c: -sum(v.priority + PRIORITY_SHIFT for v in c.victims),
    lambda c: -len(c.victims),
    _latest_start,
)
"""The criteria of the module doc, each a score where higher is better."""


def select_candidate(candidates: Sequence[Candidate]) -> Candidate | None:
    """The candidate preemption nominates (module doc), or None when there is none. Each
    criterion keeps the candidates of its best score; the first left wins."""
    left = list(candidates)
    for score in SCORES:
        if len(left) <= 1:
            break
        best = max(score(c) for c in left)
        left = [c for c in left if score(c) == best]
    return left[0] if left else None
