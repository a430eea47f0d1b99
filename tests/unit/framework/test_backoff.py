"""framework/backoff: the jittered, capped exponential backoff of re-lists and restarts."""

from __future__ import annotations

import pytest

from ipscheduler.framework.backoff import Backoff, exponential


@pytest.mark.parametrize(
    ("jitter", "waits"),
    [
        pytest.param(1.0, [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0], id="upper-bound-doubles-to-the-cap"),
        pytest.param(0.5, [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0], id="lower-bound-is-half"),
    ],
)
def test_waits_double_to_the_cap_within_the_jitter(
    monkeypatch: pytest.MonkeyPatch, jitter: float, waits: list[float]
) -> None:
    """Each wait is drawn in [delay/2, delay]; here the draw is pinned to one end."""
    monkeypatch.setattr(
        "ipscheduler.framework.backoff.random.uniform", lambda a, b: a + (b - a) * (2 * jitter - 1)
    )
    backoff = Backoff(1.0, 30.0)
    assert [backoff.next() for _ in waits] == waits


def test_reset_starts_again_from_the_initial_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ipscheduler.framework.backoff.random.uniform", lambda a, b: b)
    backoff = Backoff(0.5, 4.0)
    assert [backoff.next() for _ in range(3)] == [0.5, 1.0, 2.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_every_wait_lies_in_its_jitter_window() -> None:
    backoff = Backoff(1.0, 8.0)
    for delay in (1.0, 2.0, 4.0, 8.0, 8.0):
        assert delay / 2 <= backoff.next() <= delay


@pytest.mark.parametrize(
    ("initial", "cap", "attempt", "factor", "want"),
    [
        pytest.param(1.0, 30.0, 0, 2.0, 1.0, id="first-retry-waits-the-initial-delay"),
        pytest.param(1.0, 30.0, 3, 2.0, 8.0, id="doubles-per-attempt"),
        pytest.param(1.0, 30.0, 5, 2.0, 30.0, id="capped"),
        pytest.param(1.0, 30.0, 10_000, 2.0, 30.0, id="huge-attempt-stays-at-the-cap"),
        pytest.param(0.5, 10.0, 2, 3.0, 4.5, id="other-factor"),
        pytest.param(1.0, 30.0, -1, 2.0, 1.0, id="negative-attempt-is-the-first"),
        pytest.param(0.0, 30.0, 4, 2.0, 0.0, id="no-initial-delay-no-wait"),
    ],
)
def test_exponential(initial: float, cap: float, attempt: int, factor: float, want: float) -> None:
    assert exponential(initial, cap, attempt, factor) == want


@pytest.mark.parametrize(
    ("jitter", "window"),
    [
        pytest.param(0.0, (4.0, 4.0), id="none"),
        pytest.param(0.5, (2.0, 4.0), id="half"),
        pytest.param(1.0, (0.0, 4.0), id="full"),
    ],
)
def test_the_jitter_sets_the_window_of_the_wait(
    monkeypatch: pytest.MonkeyPatch, jitter: float, window: tuple[float, float]
) -> None:
    drawn: list[tuple[float, float]] = []
    monkeypatch.setattr(
        "ipscheduler.framework.backoff.random.uniform", lambda a, b: drawn.append((a, b)) or b
    )
    backoff = Backoff(1.0, 4.0, jitter=jitter)
    waits = [backoff.next() for _ in range(3)]
    assert waits[-1] == 4.0 and backoff.attempts == 3
    assert drawn[-1:] == ([] if jitter == 0 else [window])
