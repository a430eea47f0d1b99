"""framework/backoff: the jittered, capped exponential backoff of re-lists and restarts."""

from __future__ import annotations

import pytest

from ipscheduler.framework.backoff import Backoff


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
