"""hack/bench.py's running phase, the parts that need no real node: its CNI configuration swap,
its pod bookkeeping, its table, and its skip without root."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

import bench
import realnode


def layout(tmp_path: Path, index: int = 7) -> realnode.Layout:
    return realnode.Layout(
        name="real-node-1",
        index=index,
        root=tmp_path,
        bindir=tmp_path / "bin",
        cni_bin=(),
        pki=tmp_path / "pki",
        ports={},
    )


def test_the_host_local_network_is_the_same_bridge_with_host_local_over_the_layouts_subnet(
    tmp_path: Path,
) -> None:
    node = layout(tmp_path)
    ours = json.dumps(realnode.conflist(node, tmp_path / "ipam.kubeconfig"))
    conf = json.loads(bench.host_local_conflist(ours, node, "10.88.7.10", "10.88.7.59"))
    (plugin,) = conf["plugins"]
    assert conf["name"] == realnode.NETWORK_NAME
    assert (plugin["type"], plugin["bridge"], plugin["isGateway"], plugin["ipMasq"]) == (
        "bridge",
        "ipsbr7",
        True,
        False,
    )
    assert "capabilities" not in plugin
    assert plugin["ipam"] == {
        "type": "host-local",
        "ranges": [
            [
                {
                    "subnet": "10.88.7.0/24",
                    "rangeStart": "10.88.7.10",
                    "rangeEnd": "10.88.7.59",
                    "gateway": "10.88.7.1",
                }
            ]
        ],
        "dataDir": str(tmp_path / "host-local"),
    }


def test_write_conflist_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    node = layout(tmp_path)
    node.netd.mkdir()
    (node.netd / bench.CONFLIST).write_text('{"old": "and longer than the new one"}\n')
    bench.write_conflist(node, '{"new": 1}\n')
    assert [p.name for p in node.netd.iterdir()] == [bench.CONFLIST]
    assert (node.netd / bench.CONFLIST).read_text() == '{"new": 1}\n'
    assert not list(tmp_path.glob(".*.tmp"))


def pod(name: str, phase: str, ip: str = "", annotated: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {bench.ANNOTATION_IP: annotated} if annotated else {},
        },
        "status": {
            "phase": phase,
            **({"podIP": ip} if ip else {}),
            "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]
            if phase == "Pending"
            else [],
        },
    }


def test_a_pod_counts_as_running_once_it_has_a_pod_ip_and_as_gone_on_deleted() -> None:
    phase = bench.RunningPhase("ours", "ip-scheduler", "allocation gone")
    phase.on_pod("ADDED", pod("p0", "Pending"))
    phase.on_pod("MODIFIED", pod("p0", "Running"))  # Running without a podIP yet
    assert phase.running == {}
    assert phase.state["p0"] == "Running"
    phase.on_pod("MODIFIED", pod("p0", "Running", "10.88.7.10", "10.88.7.10"))
    first = phase.running["p0"]
    phase.on_pod("MODIFIED", pod("p0", "Running", "10.88.7.10", "10.88.7.10"))
    assert phase.running == {"p0": first}
    assert (phase.pod_ip["p0"], phase.annotated_ip["p0"], phase.uids["p0"]) == (
        "10.88.7.10",
        "10.88.7.10",
        "uid-p0",
    )
    phase.on_pod("ADDED", pod("p1", "Pending"))
    assert phase.state["p1"] == "Pending ContainerCreating"
    phase.on_pod("DELETED", pod("p0", "Running", "10.88.7.10"))
    assert list(phase.gone) == ["p0"]


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
    text = bench.running_table([row, {"phase": "running", "pods": 3, "error": "boom", "correct": False}])
    lines = text.splitlines()
    assert lines[2].startswith("| ip-scheduler + ipscheduler-ipam | 2/3 | 1.0 / 2.0 | 2.1 |")
    assert lines[2].endswith("| NO |")
    assert lines[2].count("|") == lines[0].count("|") == lines[3].count("|")
    assert "pod p2 never Running (last seen: Pending ContainerCreating)" in text
    assert "1 pod(s) whose podIP is not the reserved address" in text
    assert "| 1.0 / 2.0 | - | 2.0 |" in lines[2], "no forced deletion: no forced column"
    forced = bench.running_table(
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


def test_without_root_the_running_phase_is_skipped_saying_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        realnode, "prerequisites", lambda: ["root (containerd, runc and the kubelet run as root)"]
    )
    rows, reason = asyncio.run(bench.running_phases(cast(Any, None), cast(Any, None), 5, cast(Any, None)))
    assert rows == []
    assert reason == "running: skipped, a real node needs root (containerd, runc and the kubelet run as root)"
    assert reason in capsys.readouterr().err


def test_the_running_phase_is_not_in_the_default_phases() -> None:
    assert "running" in bench.PHASES
    assert "running" not in bench.DEFAULT_PHASES
    assert set(bench.DEFAULT_PHASES) == set(bench.PHASES) - {"running"}


def test_the_contended_phases_run_by_default_after_the_backlogs() -> None:
    order = list(bench.PHASES)
    assert {"contended-ours", "contended-kube50", "contended-kube1000"} <= set(bench.DEFAULT_PHASES)
    assert order.index("backlog-kube1000") < order.index("contended-ours") < order.index("failover")


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
    assert bench.contention_summary(rows) == want


class _Body:
    def __init__(self) -> None:
        self.read_through = self.released = False

    async def read(self) -> bytes:
        self.read_through = True
        return b'{"items": []}'

    def release(self) -> None:
        self.released = True


async def test_the_contending_client_reads_each_list_and_gives_its_connection_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unread LIST body keeps its pooled connection: with big bodies the pool ran out and
    the large preset's contended phase never ended."""
    monkeypatch.setattr(bench, "CONTEND_INTERVAL", 0.0)
    done = asyncio.Event()
    bodies: list[_Body] = []

    class Core:
        async def list_pod_for_all_namespaces(self, _preload_content: bool) -> _Body:
            assert _preload_content is False
            bodies.append(_Body())
            if len(bodies) == 3:
                done.set()
            return bodies[-1]

    lists = [0]
    await asyncio.wait_for(bench.contend(cast(Any, Core()), done, lists), timeout=5)
    assert lists == [3]
    assert all(b.read_through and b.released for b in bodies)


@pytest.mark.parametrize(
    "collection_fails", [False, True], ids=["pods-deleted-at-once", "collection-timed-out"]
)
async def test_a_phase_namespace_goes_with_its_pods_deleted_at_once(
    monkeypatch: pytest.MonkeyPatch, collection_fails: bool
) -> None:
    from kubernetes_asyncio import client

    calls: list[str] = []

    class Core:
        async def delete_collection_namespaced_pod(self, ns: str, grace_period_seconds: int) -> None:
            calls.append(f"delete pods in {ns} grace {grace_period_seconds}")
            if collection_fails:
                raise TimeoutError

        async def delete_namespace(self, ns: str) -> None:
            calls.append(f"delete namespace {ns}")

        async def read_namespace(self, ns: str) -> None:
            calls.append("read")
            if calls.count("read") == 2:
                raise client.exceptions.ApiException(status=404)

    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr(bench.asyncio, "sleep", no_sleep)
    await bench.delete_namespace(cast(Any, Core()), "bench-3")
    assert calls == ["delete pods in bench-3 grace 0", "delete namespace bench-3", "read", "read"]
