"""``-v=N`` and ``--logging-format=text|json``: the process's logging, set up once by ``run``.

Levels follow klog (:mod:`ipscheduler.framework.klog`). ``text`` is one line per
record, ``<time> <LEVEL> <logger>: <message>``. ``json`` is one JSON object per line,
compact, with kube-scheduler's ``--logging-format=json`` keys and values: component-base
``logs/json/json.go`` (``NewJSONLogger``) is zap with the encoder keys ``ts``
(``epochMillisTimeEncoder``: milliseconds since the epoch, a float), ``logger``,
``caller`` (``ShortCallerEncoder``), ``msg`` and no level key, wrapped by zapr with
``LogInfoLevel("v")`` and ``ErrorKey("err")``. A record is, in zap's order::

    {"ts": <ms>, "logger": <name>, "caller": "<dir>/<file>.py:<line>", "msg": <message>,
     "v": <verbosity>, <pod, node, pool, uid, ip where a call attached them>,
     "err": <exception>, "errVerbose": <traceback>}

- ``v`` is the klog verbosity of an info record (``V(n)`` → n, INFO → 0, DEBUG → 4). A
  WARNING has ``"v": 0`` too: klog hands a ``Warning`` to its logr backend as ``Info``
  (klog ``klog.go``, ``output``: only ``severity.ErrorLog`` goes to ``logger.Error``).
  ERROR and CRITICAL records have no ``v``: zapr's ``Error`` writes none (``zapr.go``,
  ``handleFields`` with ``noLevel``; klog's ``test/zapr.go`` lists ``klog.Error`` and
  ``ErrorS`` as ``{"caller":…,"msg":…,"err":…}``). There is no ``level`` key, as in
  kube-scheduler's JSON: an error is the record without ``v``.
- ``err`` is the exception of a record logged with one (``log.exception``,
  ``exc_info=``), its type name and message, ``"RuntimeError: boom"``, as zap's
  ``NamedError`` writes ``err.Error()``; its traceback goes in ``errVerbose``, zap's key
  for an error's verbose form (``zapcore/error.go``, ``encodeError``: ``<key>Verbose``
  when ``%+v`` differs, as a ``pkg/errors`` stack does). An error logged without an exception has no ``err``
  (klog's ``Error(nil, …)``).
- ``caller`` is zap's ``ShortCallerEncoder`` (``EntryCaller.TrimmedPath``): the last
  directory and the file name of the calling source file, and its line:
  ``scheduler/scheduler.py:412``, ``cmd/serving.py:88``. Every module of the package is
  one package deep, so this is also its path relative to the ``ipscheduler`` package
  (the two top-level modules read ``ipscheduler/__main__.py``); unlike a package-relative
  path it needs no root and names third-party callers as briefly
  (``engines/peering.py:…`` for kopf) instead of by their site-packages path.
- The structured fields stay our strings (``pod`` as ``namespace/name``; klog's
  ``KObj`` is ``{"name", "namespace"}`` in upstream's JSON).

The formatter is python-json-logger's.
"""

from __future__ import annotations

import json
import logging
import os
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
    """python-json-logger's formatter writing component-base's JSON record (the module
    doc): ``ts`` in milliseconds, ``logger``, ``caller``, ``msg``, ``v`` on all but
    errors, the call's fields, ``err``/``errVerbose`` for an exception."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        log_data["ts"] = record.created * 1000.0
        log_data["logger"] = record.name
        log_data["caller"] = short_caller(record.pathname, record.lineno)
        log_data["msg"] = record.getMessage()
        if record.levelno < logging.ERROR:
            log_data["v"] = klog.verbosity_of(record.levelno)
        traceback_text = message_dict.pop("exc_info", None)
        super().add_fields(log_data, record, message_dict)
        log_data.pop("message", None)  # the base class's name for it; klog says msg
        if record.exc_info and record.exc_info[1] is not None:
            log_data["err"] = error_text(record.exc_info[1])
            log_data["errVerbose"] = traceback_text or self.formatException(record.exc_info)


def short_caller(pathname: str, lineno: int) -> str:
    """zap's ``ShortCallerEncoder`` (``zapcore/entry.go``, ``EntryCaller.TrimmedPath``) for a
    Python source file: ``"<last directory>/<file>:<line>"``, e.g.
    ``short_caller("/x/ipscheduler/scheduler/scheduler.py", 412)`` →
    ``"scheduler/scheduler.py:412"``; a path without a directory stays whole."""
    parts = pathname.replace(os.sep, "/").rsplit("/", 2)
    return f"{'/'.join(parts[-2:])}:{lineno}"


def error_text(exc: BaseException) -> str:
    """An exception the way Go's ``err.Error()`` reads, its type name and message:
    ``"RuntimeError: boom"``, the type name alone for an empty message. A message of
    several lines (kubernetes-asyncio's ``ApiException``) is kept whole."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``--logging-format``. Raises ValueError for an unknown format."""
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    if fmt == "json":
        # Only our own keys: the record's attributes (message, levelname...) are dropped
        # and the ``extra`` fields a call passes are added by the base class.
        return KlogJsonFormatter(
            json_ensure_ascii=False,
            json_serializer=_compact_dumps,
            reserved_attrs=[*_RECORD_ATTRS, "message"],
        )
    raise ValueError(f"unknown logging format {fmt!r} (one of {', '.join(FORMATS)})")


def _compact_dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` without spaces after separators, as zap's JSON encoder writes."""
    return json.dumps(obj, separators=(",", ":"), **kwargs)


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
