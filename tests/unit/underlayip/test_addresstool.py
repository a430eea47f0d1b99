"""underlayip/addresstool: the rows of ``ipscheduler ip`` and who may release what."""

from __future__ import annotations

import dataclasses

import pytest

from ipscheduler.underlayip.addresstool import AddressRow, address_rows, render_table, why_not_release
from tests.builders import SINCE, alloc, pod_info, pool

POOL = pool(
    "pool-a",
    "node-a",
    addresses=["10.0.0.1-10.0.0.9"],
    allocations={
        "u-run": alloc("10.0.0.2", pod="ns/run", phase="Bound"),
        "u-wait": alloc("10.0.0.1", pod="ns/wait"),
        "u-gone": alloc("10.0.0.3", pod="ns/gone", phase="Bound"),
        "u-done": alloc("10.0.0.4", pod="ns/done", phase="Bound"),
    },
)
PODS = {
    "u-run": pod_info("run", uid="u-run", node_name="node-a", phase="Running"),
    "u-wait": pod_info("wait", uid="u-wait"),
    "u-done": pod_info("done", uid="u-done", node_name="node-a", phase="Succeeded"),
}


def test_every_allocation_is_a_row_with_who_holds_it() -> None:
    rows = address_rows([POOL], PODS)
    assert [(r.ip, r.pod, r.phase, r.policy, r.holder) for r in rows] == [
        ("10.0.0.1", "ns/wait", "Reserved", "Pod", "pending"),
        ("10.0.0.2", "ns/run", "Bound", "Pod", "running"),
        ("10.0.0.3", "ns/gone", "Bound", "Pod", "gone"),
        ("10.0.0.4", "ns/done", "Bound", "Pod", "ended"),
    ]
    assert rows[0] == AddressRow(
        "10.0.0.1", "pool-a", "node-a", "ns/wait", "u-wait", "Reserved", "Pod", SINCE, "pending"
    )


ROW = AddressRow("10.0.0.2", "pool-a", "node-a", "ns/run", "u-run", "Bound", "Pod", SINCE, "running")


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (ROW, "10.0.0.2 is held by running pod ns/run (UID u-run); delete the pod to release it"),
        (
            dataclasses.replace(ROW, holder="pending", phase="Reserved"),
            "10.0.0.2 is held by pending pod ns/run (UID u-run); delete the pod to release it",
        ),
        (dataclasses.replace(ROW, holder="gone"), None),
        (dataclasses.replace(ROW, holder="ended"), None),
        (dataclasses.replace(ROW, holder="gone", phase="Retained", policy="StatefulSet"), None),
        (
            dataclasses.replace(ROW, ip="", holder="running"),
            "the slot is held by running pod ns/run (UID u-run); delete the pod to release it",
        ),
    ],
    ids=["running", "pending", "orphan", "ended", "retained", "count-only-slot"],
)
def test_only_what_no_live_pod_holds_may_be_released(row: AddressRow, why: str | None) -> None:
    assert why_not_release(row) == why


def test_the_table_has_kubectl_columns() -> None:
    lines = render_table(address_rows([POOL], PODS)).splitlines()
    assert lines[0].split() == ["ADDRESS", "POOL", "NODE", "POD", "UID", "PHASE", "POLICY", "HOLDER", "SINCE"]
    assert lines[1].split() == [
        "10.0.0.1",
        "pool-a",
        "node-a",
        "ns/wait",
        "u-wait",
        "Reserved",
        "Pod",
        "pending",
        SINCE,
    ]
    assert len(lines) == 5
