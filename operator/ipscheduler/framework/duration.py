"""Durations written as Go writes them (``time.ParseDuration``, ``src/time/format.go``):
``300ms``, ``1.5h``, ``1m30s``, ``0``; units ``ns``, ``us`` (or ``µs``), ``ms``, ``s``,
``m``, ``h``. Kubernetes annotations and flags use this syntax."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str, *, bare_seconds: bool = False) -> float:
    """Seconds in ``text``, a Go duration (e.g. ``5m``, ``1m30s``, ``0``). With
    ``bare_seconds``, a plain number (``300``, ``2.5``) means seconds too. A sign is not
    accepted (no duration here may be negative).

    Raises ValueError, naming the text, when it is not a duration.
    """
    s = text.strip()
    if s in ("0", "+0"):
        return 0.0
    if bare_seconds and re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", s):
        return float(s)
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise ValueError(f"invalid duration {text!r} (a number with a unit: 30s, 5m, 1h30m)")
    return total


def format_duration(seconds: float) -> str:
    """``seconds`` as Go prints a ``time.Duration`` (``1m30s``, ``15s``, ``500ms``, ``0s``),
    for whole milliseconds. Raises ValueError for a negative duration."""
    if seconds < 0:
        raise ValueError(f"negative duration {seconds}")
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = rest / 1000
    text = f"{secs:g}s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text
