"""Chaos: churn while schedulers are SIGKILLed and the API server restarts.

A separate 10-node cluster (the API server restart must not disturb other
tests). About 600 pods are created and most deleted again in waves; at
random waves (fixed seed) the leader is SIGKILLed and restarted, five times
in all, and the API server is stopped and started once. For the first half
two replicas run with leader election, for the second half one without.
At the end every pod that fits is bound and ``ipscheduler check`` is clean:
no address held twice, allocations equal bound pods.
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import devcluster
from tests.e2e.conftest import CRD, SCHEDULER, SchedulerProcess, assert_check_clean
from tests.kube import Kubectl, create_namespace, pod_manifest, wait_for

pytestmark = pytest.mark.slow

NODES = 10
ADDRESSES_PER_NODE = 20  # capacity 200
WAVES = 10
CREATE_PER_WAVE = 60  # 600 pods created in all
FINAL_POPULATION = 150  # < capacity: every pod must end up bound
LEASE = (
    "--leader-elect-lease-duration",
    "4",
    "--leader-elect-renew-deadline",
    "3",
    "--leader-elect-retry-period",
    "1",
)


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devcluster.Cluster]:
    devcluster.ensure_binaries()  # the session fixture already skipped/failed if unavailable
    c = devcluster.Cluster(tmp_path_factory.mktemp("chaos") / "cluster")
    try:
        c.up(nodes=NODES)
        yield c
    finally:
        c.down()


def _live(kubectl: Kubectl, ns: str) -> list[dict[str, Any]]:
    pods = kubectl.json("get", "pods", "-n", ns)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def test_chaos_churn_kills_and_api_restart(
    chaos_cluster: devcluster.Cluster, cluster: devcluster.Cluster, tmp_path: Path
) -> None:
    kubectl = Kubectl(chaos_cluster.kubeconfig)
    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for=condition=Established", "crd/nodeippools.ipscheduler.io", "--timeout=60s")
    for i in range(1, NODES + 1):
        kubectl.apply(
            {
                "apiVersion": "ipscheduler.io/v1alpha1",
                "kind": "NodeIPPool",
                "metadata": {"name": f"chaos-{i}"},
                "spec": {
                    "nodeName": f"node-{i}",
                    "addresses": [f"10.20.{i}.1-10.20.{i}.{ADDRESSES_PER_NODE}"],
                },
            }
        )
    ns = create_namespace(kubectl, "chaos")
    rng = random.Random(20261122)
    kill_waves = set(rng.sample(range(1, WAVES), 5))
    api_wave = rng.choice([w for w in range(2, WAVES) if w not in kill_waves])
    logs = iter(tmp_path / f"scheduler-{n}.log" for n in range(100))
    common = ("--gc-interval", "3", "--reserved-ttl", "5")
    elect = ("--leader-elect", "--leader-elect-namespace", "default", *LEASE)

    def start(*extra: str, wait: str = "start-up reconcile") -> SchedulerProcess:
        return SchedulerProcess(chaos_cluster.kubeconfig, next(logs), *common, *extra).start(wait=wait)

    replicas = [start(*elect), start(*elect, wait="waiting for lease")]
    created = 0
    events: list[str] = []
    try:
        for wave in range(1, WAVES + 1):
            half = wave > WAVES // 2
            if half and len(replicas) == 2:  # second half: one replica, no election
                for r in replicas:
                    r.stop()
                replicas = [start("--no-leader-elect")]
                events.append(f"wave {wave}: switched to one replica without leader election")
            batch = [
                pod_manifest(f"c{created + k}", scheduler=SCHEDULER, terminationGracePeriodSeconds=0)
                for k in range(CREATE_PER_WAVE)
            ]
            created += CREATE_PER_WAVE
            kubectl(
                "create",
                "-n",
                ns,
                "-f",
                "-",
                stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": batch}),
            )
            live = _live(kubectl, ns)
            excess = len(live) - (FINAL_POPULATION if wave == WAVES else rng.randint(100, 190))
            if excess > 0:
                victims = [p["metadata"]["name"] for p in rng.sample(live, excess)]
                kubectl("delete", "pod", "-n", ns, "--wait=false", *victims)
            if wave in kill_waves:
                leader = next(
                    (r for r in replicas if r.probe("/readyz")[1].startswith("ok: leader")), replicas[0]
                )
                leader.kill(signal.SIGKILL)
                replicas.remove(leader)
                replicas.append(start(*(elect if not half else ("--no-leader-elect",)), wait=""))
                events.append(f"wave {wave}: SIGKILLed the leader and started a replacement")
            if wave == api_wave:
                chaos_cluster.stop_component("kube-apiserver")
                time.sleep(5)
                chaos_cluster.start_component("kube-apiserver")
                events.append(f"wave {wave}: restarted kube-apiserver")
            time.sleep(rng.uniform(1.0, 3.0))
        print("\n".join(events))
        assert created == WAVES * CREATE_PER_WAVE

        def all_bound() -> bool:
            live = _live(kubectl, ns)
            return len(live) == FINAL_POPULATION and all(p["spec"].get("nodeName") for p in live)

        wait_for("every remaining pod bound", all_bound, timeout=180, interval=2)
        live = _live(kubectl, ns)
        ips = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in live]
        assert len(set(ips)) == FINAL_POPULATION, "an address is held twice"
        assert_check_clean(kubectl, timeout=60)
        allocated = sum(p["status"].get("allocated", 0) for p in kubectl.json("get", "nodeippools")["items"])
        assert allocated == FINAL_POPULATION
        assert all(r.proc is not None and r.proc.poll() is None for r in replicas)
    finally:
        for r in replicas:
            r.stop()
