"""klog verbosity levels on top of logging."""

from __future__ import annotations

import logging

import pytest

from ipscheduler.framework import klog


@pytest.mark.parametrize(
    ("v", "level"),
    [(0, logging.INFO), (1, klog.V1), (2, klog.V2), (3, klog.V3), (4, logging.DEBUG), (9, logging.DEBUG)],
    ids=["0", "1", "2", "3", "4-debug", "9-debug"],
)
def test_level_for(v: int, level: int) -> None:
    assert klog.level_for(v) == level


@pytest.mark.parametrize(
    ("shown_at", "record_level", "shown"),
    [
        (0, klog.V2, False),
        (2, klog.V2, True),
        (2, klog.V3, False),
        (0, logging.WARNING, True),
        (3, logging.DEBUG, False),
        (4, logging.DEBUG, True),
    ],
    ids=["v2-hidden-at-0", "v2-at-2", "v3-hidden-at-2", "warning-always", "debug-hidden-at-3", "debug-at-4"],
)
def test_a_record_shows_from_its_verbosity(shown_at: int, record_level: int, shown: bool) -> None:
    assert (record_level >= klog.level_for(shown_at)) is shown


@pytest.mark.parametrize(
    ("levelno", "v"),
    [(logging.ERROR, 0), (logging.INFO, 0), (klog.V2, 2), (klog.V5, 5), (logging.DEBUG, klog.DEBUG_FROM)],
    ids=["error", "info", "v2", "v5", "debug"],
)
def test_verbosity_of(levelno: int, v: int) -> None:
    assert klog.verbosity_of(levelno) == v


def test_negative_verbosity_is_refused() -> None:
    with pytest.raises(ValueError, match="verbosity must be >= 0"):
        klog.level_for(-1)


def test_kv_drops_none_and_stringifies() -> None:
    assert klog.kv(pod="ns/p", node=None, ip=None, uid=7) == {"pod": "ns/p", "uid": "7"}


def test_v_levels_print_as_info() -> None:
    assert logging.getLevelName(klog.V2) == "INFO"
