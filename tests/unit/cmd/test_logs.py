"""-v and --logging-format: what a line looks like."""

from __future__ import annotations

import io
import json
import logging
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
def test_json_lines_carry_klog_keys_and_fields() -> None:
    lines = [json.loads(line) for line in emit(2, "json")]
    assert [(r["v"], r["level"], r["msg"]) for r in lines] == [
        (2, "info", "bound ns/p to node-1"),
        (0, "warning", "a warning"),
    ]
    first = lines[0]
    assert (first["pod"], first["node"], first["ip"], first["logger"]) == (
        "ns/p",
        "node-1",
        "10.0.0.5",
        "ipscheduler.test",
    )
    assert isinstance(first["ts"], float) and "message" not in first and "levelname" not in first


@pytest.mark.usefixtures("restore_root")
def test_json_errors_carry_the_exception_in_err() -> None:
    out = io.StringIO()
    logs.configure(0, "json", out)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("it failed")
    record = json.loads(out.getvalue())
    assert record["level"] == "error" and "RuntimeError: boom" in record["err"]


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
