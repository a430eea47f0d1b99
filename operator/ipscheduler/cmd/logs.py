"""``-v=N`` and ``--logging-format=text|json``: the process's logging, set up once by ``run``.

Levels follow klog (:mod:`ipscheduler.framework.klog`). ``text`` is one line per
record, ``<time> <LEVEL> <logger>: <message>``; ``json`` is one JSON object per line as
kube-scheduler's ``--logging-format=json`` writes (component-base ``logs/json``): ``ts``
(seconds since the epoch, float), ``v`` (the klog verbosity of the record), ``level``,
``logger``, ``msg``, the structured fields of :data:`~ipscheduler.framework.klog.FIELDS`
a call attached (pod, node, pool, uid, ip) and, on errors, ``err`` (the exception, one
string). The formatter is python-json-logger's.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

from pythonjsonlogger.json import JsonFormatter

from ipscheduler.framework import klog

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

QUIET_LOGGERS = {"kopf": klog.DEBUG_FROM, "aiohttp": 10, "asyncio": klog.DEBUG_FROM}
"""Third-party loggers held at WARNING below this ``-v`` (kopf's per-object chatter)."""


class KlogJsonFormatter(JsonFormatter):
    """python-json-logger's formatter with klog's field names (``ts``, ``v``, ``msg``)."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["ts"] = record.created
        log_data["v"] = klog.verbosity_of(record.levelno)
        log_data["level"] = "info" if record.levelno <= logging.INFO else record.levelname.lower()
        log_data["logger"] = record.name
        log_data["msg"] = record.getMessage()
        super().add_fields(log_data, record, message_dict)
        log_data.pop("message", None)  # the base class's name for it; klog says msg
        if record.exc_info:
            log_data["err"] = log_data.pop("exc_info", None) or self.formatException(record.exc_info)


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``--logging-format``. Raises ValueError for an unknown format."""
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    if fmt == "json":
        # Only our own keys: the record's attributes (message, levelname...) are dropped
        # and the ``extra`` fields a call passes are added by the base class.
        return KlogJsonFormatter(json_ensure_ascii=False, reserved_attrs=[*_RECORD_ATTRS, "message"])
    raise ValueError(f"unknown logging format {fmt!r} (one of {', '.join(FORMATS)})")


_RECORD_ATTRS = tuple(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


def configure(verbosity: int, fmt: LogFormat, stream: Any = None) -> None:
    """Log to ``stream`` (default stderr) at ``-v=verbosity`` in ``fmt``, replacing any
    handler the root logger had. Raises ValueError for a negative verbosity or an unknown
    format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(klog.level_for(verbosity))
    for name, louder_from in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(logging.NOTSET if verbosity >= louder_from else logging.WARNING)
