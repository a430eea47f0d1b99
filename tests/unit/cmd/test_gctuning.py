"""The scheduler tunes the garbage collector once its caches are filled."""

from __future__ import annotations

import gc

import pytest

from ipscheduler.cmd import gctuning


def test_tune_freezes_what_is_tracked_and_raises_the_young_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "get_threshold", lambda: (700, 10, 10))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(t))
    gctuning.tune()
    assert calls == ["freeze", (gctuning.GEN0_THRESHOLD, 10, 10)]
    assert gctuning.GEN0_THRESHOLD > 700
