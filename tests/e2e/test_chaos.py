"""Chaos: churn while schedulers are SIGKILLed and the API server restarts.

A separate 10-node cluster (the API server restart must not disturb other
tests). About 600 pods are created and most deleted again in waves; at
random waves (fixed seed) the leader is SIGKILLed and restarted, five times
in all, and the API server is stopped (SIGTERM) and started once and
SIGKILLed and started once. After each API server restart the test checks
that the scheduler still follows the cluster: the addresses of pods deleted
after the restart are released (within one GC interval plus the watch
backoff) and a pool created after it shows up in status. For the first half
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

import binaries
import devcluster
from tests.e2e.helpers import SCHEDULER, SchedulerProcess, assert_check_clean, install_crd
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
    binaries.ensure_binaries()  # the session fixture already skipped/failed if unavailable
    c = devcluster.Cluster(tmp_path_factory.mktemp("chaos") / "cluster")
    try:
        c.up(nodes=NODES)
        yield c
    finally:
        c.down()


def _live(kubectl: Kubectl, ns: str) -> list[dict[str, Any]]:
    pods = kubectl.json("get", "pods", "-n", ns)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _allocations(kubectl: Kubectl) -> set[str]:
    pools = kubectl.json("get", "nodeippools")["items"]
    return {uid for p in pools for uid in (p.get("status", {}).get("allocations") or {})}


def _after_restart_follows_the_cluster(
    kubectl: Kubectl, ns: str, rng: random.Random, new_pool: str, wave: int
) -> str:
    """Delete a few bound pods and create a pool; both must take effect. Returns the times."""
    bound = [p for p in _live(kubectl, ns) if p["spec"].get("nodeName")]
    victims = rng.sample(bound, min(5, len(bound)))
    uids = {p["metadata"]["uid"] for p in victims}
    kubectl("delete", "pod", "-n", ns, "--wait=false", *(p["metadata"]["name"] for p in victims))
    start = time.monotonic()
    kubectl.apply(
        {
            "apiVersion": "ipscheduler.io/v1alpha1",
            "kind": "NodeIPPool",
            "metadata": {"name": new_pool},
            "spec": {"nodeName": f"node-{1 + wave % NODES}", "addresses": [f"10.21.{wave}.1-10.21.{wave}.3"]},
        }
    )
    wait_for(
        f"{new_pool} seen (status written)",
        lambda: kubectl.json("get", "nodeippool", new_pool).get("status", {}).get("capacity") == 3,
        timeout=30,
    )
    seen = time.monotonic() - start
    wait_for(
        "deleted pods released", lambda: not uids & _allocations(kubectl), timeout=3 + 30 + 15, interval=1
    )
    released = time.monotonic() - start
    return f"new pool in status after {seen:.1f}s, {len(uids)} deletions released after {released:.1f}s"


def test_chaos_churn_kills_and_api_restart(
    chaos_cluster: devcluster.Cluster, cluster: devcluster.Cluster, tmp_path: Path
) -> None:
    kubectl = Kubectl(chaos_cluster.kubeconfig)
    install_crd(kubectl)
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
    api_waves = dict(
        zip(
            rng.sample([w for w in range(2, WAVES) if w not in kill_waves], 2),
            (signal.SIGTERM, signal.SIGKILL),
            strict=True,
        )
    )
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
            if wave in api_waves:
                how = api_waves[wave]
                chaos_cluster.stop_component("kube-apiserver", sig=how)
                time.sleep(5)
                chaos_cluster.start_component("kube-apiserver")
                took = _after_restart_follows_the_cluster(kubectl, ns, rng, f"chaos-new-{wave}", wave)
                events.append(f"wave {wave}: {how.name} kube-apiserver, restarted; {took}")
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
