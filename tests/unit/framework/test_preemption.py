"""framework/preemption: which candidate node preemption picks, in upstream's order."""

from __future__ import annotations

import datetime

import pytest

from ipscheduler.framework.preemption import (
    Candidate,
    Victim,
    earliest_start_of_highest_priority,
    select_candidate,
)

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def at(seconds: int) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def node(name: str, *victims: tuple[int, int | None], pdb: int = 0) -> Candidate:
    """Candidate ``name`` with victims ``(priority, started seconds after T0 or None)``, in
    decreasing priority as upstream's victim selection orders them."""
    ordered = sorted(victims, key=lambda v: -v[0])
    return Candidate(
        name,
        tuple(Victim(f"{name}-{i}", p, None if s is None else at(s)) for i, (p, s) in enumerate(ordered)),
        pdb,
    )


@pytest.mark.parametrize(
    ("candidates", "picked"),
    [
        ([], None),
        ([node("a", (10, 0))], "a"),
        ([node("a", (1, 0), pdb=1), node("b", (100, 0))], "b"),
        ([node("a", (10, 0)), node("b", (5, 0), (5, 0))], "b"),
        ([node("a", (5, 0), (5, 0)), node("b", (5, 0), (1, 0))], "b"),
        ([node("a", (-5, 0), (-5, 0)), node("b", (-5, 0))], "b"),
        ([node("a", (5, 0), (0, 0)), node("b", (5, 0), (-1, 0), (1, 0))], "a"),
        ([node("a", (5, 10)), node("b", (5, 20))], "b"),
        ([node("a", (5, 20), (5, 5)), node("b", (5, 10), (5, 10))], "b"),
        ([node("a", (5, None)), node("b", (5, 1))], "b"),
        ([node("a", (5, 7)), node("b", (5, 7))], "a"),
    ],
    ids=[
        "none",
        "one",
        "fewest-pdb-violations-first",
        "lowest-highest-priority",
        "smallest-priority-sum",
        "negative-priorities-more-victims-cost-more",
        "more-victims-cost-more-in-the-sum",
        "latest-start",
        "earliest-of-the-highest-priority-counts",
        "not-started-loses",
        "tie-first-given",
    ],
)
def test_select_candidate(candidates: list[Candidate], picked: str | None) -> None:
    got = select_candidate(candidates)
    assert (got.node if got is not None else None) == picked


@pytest.mark.parametrize(
    ("victims", "expected"),
    [
        ((), None),
        (((5, 30), (5, 10), (1, 0)), 10),
        (((5, None), (1, 0)), None),
    ],
    ids=["no-victims", "only-the-highest-priority-counts", "none-started"],
)
def test_earliest_start_of_highest_priority(
    victims: tuple[tuple[int, int | None], ...], expected: int | None
) -> None:
    got = earliest_start_of_highest_priority(node("n", *victims).victims)
    assert got == (None if expected is None else at(expected))
