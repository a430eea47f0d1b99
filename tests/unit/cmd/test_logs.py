"""-v and --logging-format: what a line looks like."""

from __future__ import annotations

import inspect
import io
import json
import logging
import time
from collections.abc import Iterator

import pytest

from ipscheduler.cmd import logs
from ipscheduler.framework import klog


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in logs.QUIET_LOGGERS}
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for name, lvl in quiet.items():
        logging.getLogger(name).setLevel(lvl)


def emit(v: int, fmt: logs.LogFormat) -> list[str]:
    out = io.StringIO()
    logs.configure(v, fmt, out)
    log = logging.getLogger("ipscheduler.test")
    log.log(
        klog.V2, "bound %s to %s", "ns/p", "node-1", extra=klog.kv(pod="ns/p", node="node-1", ip="10.0.0.5")
    )
    log.log(klog.V3, "attempting %s", "ns/p")
    log.debug("debug detail")
    log.warning("a warning")
    return out.getvalue().splitlines()


@pytest.mark.usefixtures("restore_root")
def test_json_lines_are_component_base_records() -> None:
    before = time.time() * 1000
    raw = emit(2, "json")
    after = time.time() * 1000
    lines = [json.loads(line) for line in raw]
    assert [(r["v"], r["msg"]) for r in lines] == [(2, "bound ns/p to node-1"), (0, "a warning")]
    first = lines[0]
    # zap's key order and its compact separators; no level key, as kube-scheduler's JSON
    assert list(first) == ["ts", "logger", "caller", "msg", "v", "pod", "node", "ip"]
    assert raw[0].startswith('{"ts":') and ", " not in raw[0].split('"msg"')[0]
    assert (first["pod"], first["node"], first["ip"], first["logger"]) == (
        "ns/p",
        "node-1",
        "10.0.0.5",
        "ipscheduler.test",
    )
    assert isinstance(first["ts"], float) and before <= first["ts"] <= after, "milliseconds"
    assert all("level" not in r and "message" not in r and "levelname" not in r for r in lines)


@pytest.mark.usefixtures("restore_root")
def test_json_caller_is_the_directory_file_and_line_of_the_call() -> None:
    out = io.StringIO()
    logs.configure(0, "json", out)
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    logging.getLogger("x").warning("here")
    assert json.loads(out.getvalue())["caller"] == f"cmd/test_logs.py:{line}"


@pytest.mark.parametrize(
    ("path", "caller"),
    [
        ("/site/ipscheduler/scheduler/scheduler.py", "scheduler/scheduler.py:412"),
        ("/site/ipscheduler/__main__.py", "ipscheduler/__main__.py:412"),
        ("/site/kopf/_core/engines/peering.py", "engines/peering.py:412"),
        ("scheduler.py", "scheduler.py:412"),
    ],
)
def test_short_caller_is_zaps_trimmed_path(path: str, caller: str) -> None:
    assert logs.short_caller(path, 412) == caller


@pytest.mark.usefixtures("restore_root")
def test_json_errors_have_no_v_and_carry_the_exception_in_err() -> None:
    out = io.StringIO()
    logs.configure(0, "json", out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("it failed")
        logging.getLogger("x").warning("it was retried", exc_info=True)
    logging.getLogger("x").error("no exception")
    failed, retried, plain = (json.loads(line) for line in out.getvalue().splitlines())
    assert "v" not in failed and failed["err"] == "RuntimeError: boom"
    assert failed["errVerbose"].startswith("Traceback") and "RuntimeError: boom" in failed["errVerbose"]
    assert list(failed)[-2:] == ["err", "errVerbose"]
    assert (retried["v"], retried["err"]) == (0, "RuntimeError: boom"), "klog's InfoS with an err"
    assert "v" not in plain and "err" not in plain and plain["msg"] == "no exception"


@pytest.mark.usefixtures("restore_root")
@pytest.mark.parametrize(
    ("v", "messages"),
    [
        (0, ["a warning"]),
        (2, ["bound ns/p to node-1", "a warning"]),
        (3, ["bound ns/p to node-1", "attempting ns/p", "a warning"]),
        (4, ["bound ns/p to node-1", "attempting ns/p", "debug detail", "a warning"]),
    ],
    ids=["v0", "v2", "v3", "v4"],
)
def test_text_lines_by_verbosity(v: int, messages: list[str]) -> None:
    lines = emit(v, "text")
    assert [line.split(": ", 1)[1] for line in lines] == messages
    assert all(" ipscheduler.test: " in line for line in lines)
    if v >= 2:
        assert " INFO ipscheduler.test: bound" in lines[0]


@pytest.mark.usefixtures("restore_root")
@pytest.mark.parametrize(
    ("v", "kopf_level"), [(0, logging.WARNING), (4, logging.NOTSET)], ids=["quiet", "debug"]
)
def test_kopf_is_quiet_below_debug(v: int, kopf_level: int) -> None:
    logs.configure(v, "text", io.StringIO())
    assert logging.getLogger("kopf").level == kopf_level


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown logging format 'xml'"):
        logs.formatter("xml")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (RuntimeError("boom"), "RuntimeError: boom"),
        (TimeoutError(), "TimeoutError"),
        (ValueError("(409)\nReason: Conflict"), "ValueError: (409)\nReason: Conflict"),
    ],
    ids=["message", "none", "several lines"],
)
def test_err_is_the_type_and_the_whole_message(exc: BaseException, text: str) -> None:
    assert logs.error_text(exc) == text
