"""hack/bench/report.py: the running phase's table and the contention summary."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report


def test_the_running_table_has_a_row_per_scheduler_and_says_what_went_wrong() -> None:
    pct = {"p50": 1.0, "p99": 2.0}
    row = {
        "phase": "ip-scheduler + ipscheduler-ipam",
        "pods": 3,
        "running": 2,
        "create_to_running_s": pct,
        "all_running_s": 2.1,
        "running_pods_per_s": 1.0,
        "node_cpu_ms_per_pod": 200.0,
        "released": 2,
        "released_means": "allocation gone from the pool status",
        "delete_to_released_s": pct,
        "all_released_s": 2.0,
        "delete_to_gone_s": pct,
        "delete_to_cni_del_s": pct,
        "veths": 2,
        "veths_gone": 2,
        "pod_ip_not_reserved": 1,
        "not_running": {"p2": "Pending ContainerCreating"},
        "correct": False,
    }
    text = report.running_table([row, {"phase": "running", "pods": 3, "error": "boom", "correct": False}])
    lines = text.splitlines()
    assert lines[2].startswith("| ip-scheduler + ipscheduler-ipam | 2/3 | 1.0 / 2.0 | 2.1 |")
    assert lines[2].endswith("| NO |")
    assert lines[2].count("|") == lines[0].count("|") == lines[3].count("|")
    assert "pod p2 never Running (last seen: Pending ContainerCreating)" in text
    assert "1 pod(s) whose podIP is not the reserved address" in text
    assert "| 1.0 / 2.0 | - | 2.0 |" in lines[2], "no forced deletion: no forced column"
    forced = report.running_table(
        [
            {
                **row,
                "forced": 1,
                "forced_delete_to_released_s": {"p50": 15.2, "p99": 16.0},
                "pool_writes_per_deleted_pod": 1.4,
            }
        ]
    ).splitlines()[2]
    assert "| 1.0 / 2.0 | 15.2 / 16.0 | 2.0 |" in forced and "| 1.4 | NO |" in forced


@pytest.mark.parametrize(
    ("rows", "want"),
    [
        pytest.param(
            [
                {"phase": "backlog: ip-scheduler", "drain_pods_per_s": 60.0},
                {"phase": "contended: ip-scheduler", "drain_pods_per_s": 45.0, "contending_lists": 120},
                {"phase": "backlog: kube-scheduler (qps 1000)", "drain_pods_per_s": 200.0},
                {
                    "phase": "contended: kube-scheduler (qps 1000)",
                    "drain_pods_per_s": 190.0,
                    "contending_lists": 9,
                },
            ],
            [
                "contended: ip-scheduler drains at 75 % of its uncontended rate "
                "(45.0 against 60.0 pods/s, 120 LISTs)",
                "contended: kube-scheduler (qps 1000) drains at 95 % of its uncontended rate "
                "(190.0 against 200.0 pods/s, 9 LISTs)",
            ],
            id="both schedulers",
        ),
        pytest.param(
            [{"phase": "contended: ip-scheduler", "drain_pods_per_s": 45.0}],
            [],
            id="no uncontended row to compare",
        ),
    ],
)
def test_contention_summary(rows: list[dict[str, Any]], want: list[str]) -> None:
    assert report.contention_summary(rows) == want


def _multi_row(**change: Any) -> dict[str, Any]:
    row = {
        "phase": "interfaces-16: ip-scheduler",
        "pods": 2,
        "bound": 2,
        "pools": 34,
        "addresses_per_pod": 17,
        "throughput_pods_per_s": 10.0,
        "latency_ms": {"p50": 100.0, "p90": 150.0, "p99": 200.0},
        "scheduler_cpu_s": 0.05,
        "pool_status_writes_per_bound_pod": 9.5,
        "api_requests_per_bound_pod": 14.0,
        "address_total": 34,
        "addresses": 2,
        "addresses_unique": True,
        "addresses_in_node_pool": True,
        "over_capacity_nodes": 0,
        "address_problems": [],
        "pools_settled": True,
    }
    return {**row, **change}


def test_the_several_addresses_table_has_a_row_per_such_phase_and_says_what_went_wrong() -> None:
    assert report.multi_table([{"phase": "ip-scheduler", "latency_ms": {}}]) == ""
    bad = _multi_row(
        phase="dualstack-dual: ip-scheduler",
        addresses=1,
        addresses_unique=False,
        address_problems=["p1: 10.132.0.1 given twice"],
        pools_settled=False,
    )
    lines = report.multi_table([_multi_row(), bad]).splitlines()
    assert lines[2] == (
        "| interfaces-16: ip-scheduler | 2/2 | 34 | 17 | 10.0 | 100.0 | 200.0 | 25.0 | 9.5 | 14.0 "
        "| 34 (distinct) | yes |"
    )
    assert lines[3].endswith("| 34 (NOT distinct) | NO |")
    assert lines[0].count("|") == lines[2].count("|") == lines[3].count("|")
    assert lines[4:] == [
        "- dualstack-dual: ip-scheduler: p1: 10.132.0.1 given twice",
        "- dualstack-dual: ip-scheduler: its pools had not settled when its pods were created",
    ]
