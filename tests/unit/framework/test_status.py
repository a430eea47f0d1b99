"""framework/status: what a plugin call returns — its code, reasons and plugin, and what the
framework asks of it (success, rejected, the message)."""

from __future__ import annotations

import pytest

from ipscheduler.framework.status import Code, Status


@pytest.mark.parametrize(
    ("status", "code", "reasons", "plugin", "success", "rejected"),
    [
        (Status(), Code.SUCCESS, (), "", True, False),
        (Status.success(), Code.SUCCESS, (), "", True, False),
        (Status.unschedulable("a", "b", plugin="P"), Code.UNSCHEDULABLE, ("a", "b"), "P", False, True),
        (Status.unresolvable("a", plugin="P"), Code.UNSCHEDULABLE_AND_UNRESOLVABLE, ("a",), "P", False, True),
        (Status.error("boom", plugin="P"), Code.ERROR, ("boom",), "P", False, False),
        (Status.skip(), Code.SKIP, (), "", False, False),
        (Status.wait(plugin="Coscheduling"), Code.WAIT, (), "Coscheduling", False, False),
    ],
    ids=["default", "success", "unschedulable", "unresolvable", "error", "skip", "wait"],
)
def test_each_kind_of_status(
    status: Status, code: Code, reasons: tuple[str, ...], plugin: str, success: bool, rejected: bool
) -> None:
    assert (status.code, status.reasons, status.plugin) == (code, reasons, plugin)
    assert status.is_success() is success
    assert status.is_rejected() is rejected


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (Status.success(), ""),
        (
            Status.unschedulable("node(s) had untolerated taint {a: b}"),
            "node(s) had untolerated taint {a: b}",
        ),
        (Status.unschedulable("b", "a"), "b, a"),
    ],
    ids=["none", "one-reason", "reasons-joined-in-order"],
)
def test_the_message_joins_the_reasons(status: Status, message: str) -> None:
    assert status.message == message


def test_statuses_compare_by_value_and_are_frozen() -> None:
    assert Status.unschedulable("a", plugin="P") == Status(Code.UNSCHEDULABLE, ("a",), "P")
    assert Status.unschedulable("a", plugin="P") != Status.unresolvable("a", plugin="P")
    assert Status.success() is Status.success()
    with pytest.raises(AttributeError):
        Status().code = Code.ERROR  # type: ignore[misc]


def test_the_codes_are_upstreams_names() -> None:
    assert [c.value for c in Code] == [
        "Success",
        "Error",
        "Unschedulable",
        "UnschedulableAndUnresolvable",
        "Wait",
        "Skip",
    ]
