"""underlayip/addresstool: the rows of ``ipscheduler ip`` and ``pools`` and who may release what."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.addresstool import (
    AddressRow,
    PoolRow,
    address_rows,
    carried_by,
    other_family_pools,
    pool_rows,
    pool_total,
    render_pools,
    render_table,
    select,
    why_not_release,
)
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


def test_a_dual_stack_or_further_interfaces_allocation_gives_a_row_per_address() -> None:
    dual = {**alloc("10.0.0.5", pod="ns/dual", phase="Bound"), "ips": ["10.0.0.5", "fd00::5"]}
    net1 = {**alloc("10.1.0.5", pod="ns/dual", phase="Bound"), "interface": "net1"}
    first = pool(
        "pool-a", "node-a", addresses=["10.0.0.1-10.0.0.9", "fd00::1-fd00::9"], allocations={"u-d": dual}
    )
    second = pool("rdma-a", "node-a", addresses=["10.1.0.1-10.1.0.9"], allocations={"u-d": net1})
    pods = {"u-d": pod_info("dual", uid="u-d", node_name="node-a", phase="Running")}
    rows = address_rows([first, second], pods)
    assert [(r.ip, r.pool, r.uid, r.interface) for r in rows] == [
        ("10.0.0.5", "pool-a", "u-d", ""),
        ("fd00::5", "pool-a", "u-d", ""),
        ("10.1.0.5", "rdma-a", "u-d", "net1"),
    ]
    table = render_table(rows).splitlines()
    assert table[3].endswith("interface net1") and not table[1].endswith("net1")


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
            dataclasses.replace(ROW, holder="running", phase="Retained", policy="StatefulSet"),
            "10.0.0.2 is held by running pod ns/run (UID u-run); delete the pod to release it",
        ),
        (
            dataclasses.replace(ROW, ip="", holder="running"),
            "the slot is held by running pod ns/run (UID u-run); delete the pod to release it",
        ),
    ],
    ids=[
        "running",
        "pending",
        "orphan",
        "ended",
        "retained",
        "edited-to-retained-running",
        "count-only-slot",
    ],
)
def test_only_what_no_live_pod_holds_may_be_released(row: AddressRow, why: str | None) -> None:
    assert why_not_release(row) == why


RUNNING = pod_info(
    "fx-0",
    uid="u-live",
    node_name="node-a",
    phase="Running",
    annotations={"ipscheduler.io/ip": "10.0.0.2", "ipscheduler.io/pool": "pool-a"},
)


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        ({"u-live": RUNNING}, "10.0.0.2 is carried by running pod ns/fx-0 (UID u-live)"),
        ({"u-live": dataclasses.replace(RUNNING, phase="Succeeded")}, None),
        ({"u-live": dataclasses.replace(RUNNING, annotations={"ipscheduler.io/ip": "10.0.0.3"})}, None),
        (
            {
                "u-live": dataclasses.replace(
                    RUNNING, annotations={**RUNNING.annotations, "ipscheduler.io/pool": "b"}
                )
            },
            None,
        ),
        ({"u-rec": dataclasses.replace(RUNNING, uid="u-rec")}, None),
        ({}, None),
    ],
    ids=[
        "a-live-pod-carries-it",
        "it-ended",
        "another-address",
        "another-pool",
        "the-recorded-pod",
        "no-pod",
    ],
)
def test_an_address_a_live_pod_carries_is_never_released(pods: dict[str, PodInfo], why: str | None) -> None:
    """The allocation of u-rec was edited (its recorded pod name, or its UID): the live pod
    carrying the address in its own annotations still holds it (an edited allocation must not
    free an address a running pod uses)."""
    got = carried_by("10.0.0.2", "pool-a", "u-rec", pods)
    assert (got is None) if why is None else (got is not None and got.startswith(why))


def test_the_table_has_kubectl_columns() -> None:
    lines = render_table(address_rows([POOL], PODS)).splitlines()
    header = ["ADDRESS", "POOL", "NODE", "POD", "UID", "PHASE", "POLICY", "HOLDER", "SINCE", "NOTE"]
    assert lines[0].split() == header
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


@pytest.mark.parametrize(
    ("filters", "pods"),
    [
        ({}, ["ns/wait", "ns/run", "ns/gone", "ns/done", "other/x"]),
        ({"namespace": "ns"}, ["ns/wait", "ns/run", "ns/gone", "ns/done"]),
        ({"namespace": "other"}, ["other/x"]),
        ({"namespace": "n"}, []),
        ({"namespace": "ns", "phase": "Bound"}, ["ns/run", "ns/gone", "ns/done"]),
        ({"pool": "pool-b"}, ["other/x"]),
        ({"node": "node-a", "namespace": "other"}, []),
    ],
    ids=["all", "namespace", "other-namespace", "namespace-prefix-is-not-it", "and-phase", "pool", "node"],
)
def test_ip_list_narrows_by_pool_node_phase_and_the_pods_namespace(
    filters: dict[str, str], pods: list[str]
) -> None:
    other = pool(
        "pool-b", "node-b", addresses=["10.0.1.1"], allocations={"u-x": alloc("10.0.1.1", "other/x")}
    )
    rows = select(address_rows([POOL, other], PODS), **filters)
    assert [r.pod for r in rows] == pods


def _ready(status: str, reason: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": SINCE}


POOLS = [
    pool(
        "b",
        "node-2",
        status={
            "capacity": 10,
            "allocated": 4,
            "free": 6,
            "retained": 1,
            "releasing": 2,
            "conditions": [_ready("True", "Ready")],
        },
    ),
    pool(
        "a",
        "node-2",
        status={"capacity": 3, "allocated": 3, "free": 0, "conditions": [_ready("False", "AddressConflict")]},
    ),
    pool(
        "c",
        "node-1",
        status={"capacity": 5, "allocated": 0, "free": 5, "conditions": [_ready("True", "Ready")]},
    ),
    pool("new", "node-3"),
]


def test_pool_rows_say_what_the_status_says_and_why_a_pool_is_not_ready() -> None:
    assert pool_rows(POOLS) == [
        PoolRow("c", "node-1", 5, 0, 5, 0, 0, "True", ""),
        PoolRow("a", "node-2", 3, 3, 0, 0, 0, "False", "AddressConflict"),
        PoolRow("b", "node-2", 10, 4, 6, 1, 2, "True", ""),
        PoolRow("new", "node-3", 0, 0, 0, 0, 0, "Unknown", ""),
    ]
    assert pool_total(pool_rows(POOLS)) == {
        "pools": 4,
        "nodes": 3,
        "capacity": 18,
        "allocated": 7,
        "free": 11,
        "retained": 1,
        "releasing": 2,
        "ready": 2,
    }


def test_the_pools_table_has_kubectl_columns_and_a_total_line() -> None:
    lines = render_pools(pool_rows(POOLS)).splitlines()
    assert [line.split() for line in lines] == [
        ["NAME", "NODE", "CAPACITY", "ALLOCATED", "FREE", "RETAINED", "RELEASING", "READY", "REASON"],
        ["c", "node-1", "5", "0", "5", "0", "0", "True"],
        ["a", "node-2", "3", "3", "0", "0", "0", "False", "AddressConflict"],
        ["b", "node-2", "10", "4", "6", "1", "2", "True"],
        ["new", "node-3", "0", "0", "0", "0", "0", "Unknown"],
        ["TOTAL", "3", "nodes", "18", "7", "11", "1", "2", "2/4"],
    ]
    assert lines[0].index("CAPACITY") == lines[-1].index("18")  # aligned columns
    assert render_pools(pool_rows(POOLS[2:3])).splitlines()[-1].split()[:3] == ["TOTAL", "1", "node"]


@pytest.mark.parametrize(
    ("namespace", "defaults", "note"),
    [
        pytest.param("ns", {}, "", id="allowed"),
        pytest.param(
            "other",
            {},
            "may not use the pool: NodeIPPool pool-a is reserved for namespaces ns (spec.namespaces), "
            "not other",
            id="reserved-for-another-namespace",
        ),
        pytest.param(
            "ns",
            {"ns": "pool-b"},
            "may not use the pool: namespace ns annotation ipscheduler.io/default-pools=pool-b "
            "does not name NodeIPPool pool-a",
            id="namespace-default-names-another-pool",
        ),
    ],
)
def test_ip_list_notes_a_running_holder_that_may_not_use_its_pool(
    namespace: str, defaults: dict[str, str], note: str
) -> None:
    """ip list agrees with the tenancy rules: an allocation (a status edit) of a running pod
    that may not use the pool says why; the rest of the row is unchanged."""
    reserved = pool(
        "pool-a",
        "node-a",
        addresses=["10.0.0.1-10.0.0.4"],
        namespaces=["ns"],
        allocations={
            "u1": {
                "ip": "10.0.0.1",
                "pod": f"{namespace}/a",
                "phase": "Bound",
                "since": "2024-01-01T00:00:00Z",
            }
        },
    )
    running = {"u1": pod_info("a", uid="u1", namespace=namespace, node_name="node-a", phase="Running")}
    (row,) = address_rows([reserved], running, defaults)
    assert (row.holder, row.note) == ("running", note)
    assert render_table([row]).splitlines()[1].endswith(note or row.since)


def test_a_releasing_row_says_since_when_it_waits_for_its_node() -> None:
    """``ip list --phase Releasing``: the address of a force-deleted pod, its pod gone, waiting
    for its node; an operator may still release it (its pod is gone)."""
    releasing = {
        **alloc("10.0.0.5", pod="ns/forced", phase="Releasing"),
        "releasingSince": "2024-01-01T00:05:00Z",
    }
    p = pool("pool-a", "node-a", addresses=["10.0.0.1-10.0.0.9"], allocations={"u-f": releasing})
    (row,) = select(address_rows([p], {}), phase="Releasing")
    assert (row.ip, row.holder) == ("10.0.0.5", "gone")
    assert row.note == "pod gone at 2024-01-01T00:05:00Z; waiting for node node-a to let the address go"
    assert why_not_release(row) is None


@pytest.mark.parametrize(
    ("released", "interface", "others"),
    [
        pytest.param("v4", None, ["v6"], id="the-first-half-takes-the-eth0-half"),
        pytest.param("v6", "eth0", ["v4"], id="the-eth0-half-takes-the-first-half"),
        pytest.param("rdma", "net1", [], id="a-further-interface-alone"),
    ],
)
def test_releasing_one_family_of_a_two_pool_dual_stack_pod_releases_the_other(
    released: str, interface: str | None, others: list[str]
) -> None:
    """Pod u1 holds 10.0.0.1 in v4 (first interface), fd00::1 in v6 (its second family:
    eth0) and 10.1.0.1 in rdma (net1): ``ip release`` of one half of the first interface
    releases the other half too, never a further interface's."""
    pools = [
        pool("v4", addresses=["10.0.0.0/28"], allocations={"u1": alloc("10.0.0.1", "ns/a")}),
        pool(
            "v6",
            addresses=["fd00::/124"],
            allocations={"u1": {**alloc("fd00::1", "ns/a"), "interface": "eth0"}},
        ),
        pool(
            "rdma",
            addresses=["10.1.0.0/28"],
            allocations={"u1": {**alloc("10.1.0.1", "ns/a"), "interface": "net1"}},
        ),
    ]
    assert other_family_pools(pools, released, "u1", interface) == others
