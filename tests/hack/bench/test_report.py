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


def interfaces_row(**over: Any) -> dict[str, Any]:
    row = {
        "phase": "ip-scheduler + Multus + ipscheduler-ipam, 1 + 16 interfaces",
        "interfaces": 17,
        "pods": 3,
        "running": 2,
        "create_to_running_s": {"p50": 4.5, "p99": 6.25},
        "all_running_s": 6.3,
        "running_pods_per_s": 0.32,
        "running_interfaces_per_s": 5.4,
        "node_cpu_ms_per_pod": 1500.0,
        "pool_writes_per_pod": 9.5,
        "api_requests_per_pod": 99.0,
        "all_gone_s": 3.1,
        "released": False,
        "problems": {"p0": ["net3 has [], not one address of 10.113.1.0/24"]},
        "not_running": {"p2": "Pending"},
        "correct": False,
    }
    return {**row, **over}


def test_the_interfaces_table_has_a_row_per_phase_and_says_what_went_wrong() -> None:
    text = report.interfaces_table(
        [interfaces_row(), {"phase": "running-interfaces-1", "pods": 3, "error": "boom", "correct": False}]
    )
    lines = text.splitlines()
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|") == lines[3].count("|") == 13
    assert lines[2] == (
        "| ip-scheduler + Multus + ipscheduler-ipam, 1 + 16 interfaces | 17 | 2/3 | 4.5 / 6.25 | 6.3 "
        "| 0.32 | 5.4 | 1500.0 | 9.5 | 99.0 | 3.1 | NO |"
    )
    assert lines[3].startswith("| running-interfaces-1: boom |") and lines[3].endswith(" NO |")
    assert lines[5:] == [
        "- ip-scheduler + Multus + ipscheduler-ipam, 1 + 16 interfaces: pod p2 never Running "
        "(last seen: Pending)",
        "- ip-scheduler + Multus + ipscheduler-ipam, 1 + 16 interfaces: pod p0: "
        "net3 has [], not one address of 10.113.1.0/24",
        "- ip-scheduler + Multus + ipscheduler-ipam, 1 + 16 interfaces: allocations left in its pools "
        "after the pods went",
    ]


def test_the_summary_shows_the_interfaces_table_and_a_failed_row_fails_the_run() -> None:
    good = interfaces_row(running=3, released=True, problems={}, not_running={}, correct=True)
    text = report.summary([], {"running_interfaces": [good]}, 1, 50)
    assert "Pods with further interfaces that run, on one real node with Multus:" in text
    assert "| 17 | 3/3 |" in text
    assert report.all_correct({"results": [], "running_interfaces": [good]})
    assert not report.all_correct({"results": [], "running_interfaces": [good, interfaces_row()]})
    skipped = report.summary([], {"running_interfaces_skipped": "running-interfaces-1: skipped"}, 1, 50)
    assert skipped.strip() == "running-interfaces-1: skipped"
