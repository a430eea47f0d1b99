"""The scheduler tunes the garbage collector once its caches are filled."""

from __future__ import annotations

import gc

import pytest

from ipscheduler.cmd import gctuning


def test_tune_freezes_what_is_tracked_and_raises_the_young_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(t))
    gctuning.tune()
    assert calls == ["freeze", (gctuning.GEN0_THRESHOLD, 10, 10)]
    assert gctuning.GEN0_THRESHOLD > 700


def test_starting_runs_young_collections_only_until_tune(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(gc, "set_threshold", lambda *t: calls.append(t))
    gctuning.hold()
    gctuning.tune()
    young, middle, full = gctuning.GEN0_THRESHOLD, *gctuning.STARTUP_OLDER_THRESHOLDS
    assert calls == [(young, middle, full), "freeze", (young, 10, 10)]
    assert middle >= 100 and full >= 100  # no full collection while the heap grows


def test_the_run_command_holds_the_older_collections_from_its_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from ipscheduler.cmd import cli, flags, logs

    held: list[bool] = []
    monkeypatch.setattr(gctuning, "hold", lambda: held.append(True))
    monkeypatch.setattr(logs, "configure", lambda *a: None)
    monkeypatch.setattr(flags, "run_config", lambda args: (_ for _ in ()).throw(flags.UsageError("x")))
    assert cli.main(["run"]) == flags.EXIT_USAGE
    assert held == [True]
    assert cli.main(["crd"]) == 0  # the other commands keep CPython's collections
    assert held == [True]
