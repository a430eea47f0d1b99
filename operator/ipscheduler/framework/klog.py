"""Verbosity levels and structured fields as kube-scheduler logs them (klog).

klog's ``V(n)`` levels map onto :mod:`logging` levels just below INFO: ``V(n)`` is
``logging.INFO - n``, so ``-v=N`` shows every message of level ``V(N)`` or lower and the
root logger's level is ``INFO - N`` (``-v=0``: INFO, the default). From ``-v=4`` (klog's
"debug" verbosity) ``logging.DEBUG`` messages are shown too. What upstream logs at which
level (``pkg/scheduler/schedule_one.go``): a successful bind and an unschedulable attempt
at ``V(2)``, "attempting to schedule" at ``V(3)``, errors always.

Key/value fields (klog's ``"pod", klog.KObj(pod), "node", name``) ride in ``extra``:
``log.log(V2, "bound %s to %s", key, node, extra=kv(pod=key, node=node))``; the JSON log
format (``--logging-format=json``) prints them as fields, the text format only the message.
"""

from __future__ import annotations

import logging
from typing import Any

V1 = logging.INFO - 1
V2 = logging.INFO - 2
V3 = logging.INFO - 3
V4 = logging.INFO - 4
V5 = logging.INFO - 5

DEBUG_FROM = 4
"""``-v`` from which ``logging.DEBUG`` messages are shown as well."""

FIELDS = ("pod", "node", "pool", "uid", "ip")
"""The structured fields the scheduler attaches (klog's names: pod as ``namespace/name``)."""


def level_for(verbosity: int) -> int:
    """The root logger level for ``-v=verbosity`` (>= 0): ``INFO - v``, or ``DEBUG`` from
    ``-v=4``. Raises ValueError for a negative verbosity."""
    if verbosity < 0:
        raise ValueError(f"verbosity must be >= 0, got {verbosity}")
    return logging.DEBUG if verbosity >= DEBUG_FROM else logging.INFO - verbosity


def verbosity_of(levelno: int) -> int:
    """The klog ``V`` of a record's level: ``n`` for ``V(n)`` levels, 0 for INFO and above,
    :data:`DEBUG_FROM` for DEBUG."""
    if levelno >= logging.INFO:
        return 0
    if levelno > logging.DEBUG:
        return logging.INFO - levelno
    return DEBUG_FROM


def kv(**fields: Any) -> dict[str, Any]:
    """``extra`` for a log call: the given fields with a value (None dropped), as strings."""
    return {k: str(v) for k, v in fields.items() if v is not None}


for _n in range(1, DEBUG_FROM):
    logging.addLevelName(logging.INFO - _n, "INFO")
