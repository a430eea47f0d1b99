"""parse_duration: Go's time.ParseDuration syntax (src/time/format.go)."""

from __future__ import annotations

import pytest

from ipscheduler.framework.duration import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("5m", 300.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        ("2h45m", 9900.0),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("1ns", 1e-9),
        (".5s", 0.5),
        ("  15s ", 15.0),
        ("0s", 0.0),
    ],
    ids=[
        "zero",
        "minutes",
        "compound",
        "fraction",
        "millis",
        "hours-minutes",
        "micros",
        "micro-sign",
        "nanos",
        "leading-dot",
        "whitespace",
        "zero-seconds",
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    ["", "5", "5x", "m", "-5m", "5m-", "1d", "5 m", "abc", "1h 30m"],
    ids=[
        "empty",
        "bare-number",
        "bad-unit",
        "no-number",
        "negative",
        "trailing",
        "days",
        "space-in",
        "garbage",
        "space-between",
    ],
)
def test_not_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("300", 300.0), ("2.5", 2.5), ("15s", 15.0)])
def test_bare_numbers_are_seconds_when_asked(text: str, seconds: float) -> None:
    assert parse_duration(text, bare_seconds=True) == seconds


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (15, "15s"), (90, "1m30s"), (60, "1m0s"), (3600, "1h0m0s"), (1.5, "1.5s")],
    ids=["zero", "ms", "seconds", "compound", "minute", "hour", "fraction"],
)
def test_format_duration_as_go_and_back(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds
