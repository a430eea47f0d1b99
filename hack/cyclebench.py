#!/usr/bin/env python3
"""The scheduling cycle alone, without a cluster: CPU per cycle of the default profile.

Builds the cache the way the informers fill it (N nodes shaped like the benchmark's kwok
nodes, one NodeIPPool of C addresses each, B bound pods spread over them), then runs
PreFilter/Filter (``percentageOfNodesToScore``'s slice) and PreScore/Score for one pod of
the benchmark's shape, K times. Prints process CPU ms per cycle; ``--profile FILE``
writes a cProfile of the same cycles (``python -m pstats FILE``). This is what the
bench's py-spy profile (``python -m hack.bench --profile``) calls the scheduling cycle; the
end-to-end figures come from that benchmark only.

    .venv/bin/python hack/cyclebench.py --nodes 1000 --bound 5000
    .venv/bin/python hack/cyclebench.py --nodes 5000 --profile cycle.prof
"""

from __future__ import annotations

import argparse
import cProfile
import ipaddress
import time
from typing import Any

from ipscheduler.backend.cache import Cache
from ipscheduler.cmd.profiles import build_profile
from ipscheduler.framework.interface import CycleState
from ipscheduler.framework.runtime import Framework
from ipscheduler.framework.types import NodeInfo, PodInfo, Snapshot
from ipscheduler.underlayip.cache import PoolCache
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from ipscheduler.underlayip.pool import PoolView

KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}


def pod_body(name: str, node: str = "") -> dict[str, Any]:
    """A pod shaped like the benchmark's: tolerates kwok's taint, requests 10m cpu, 16Mi."""
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": "ip-scheduler",
            "nodeName": node,
            "tolerations": [{"key": KWOK_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
            ],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def world(nodes: int, capacity: int, bound: int) -> tuple[Framework, Snapshot]:
    """The default profile over ``nodes`` nodes with a pool of ``capacity`` addresses each
    and ``bound`` pods placed round-robin; returns the profile and the cache's snapshot."""
    fw, cache = world_and_cache(nodes, capacity, bound)
    return fw, cache.snapshot()


def world_and_cache(nodes: int, capacity: int, bound: int) -> tuple[Framework, Cache]:
    """:func:`world`, returning the node cache instead of its snapshot."""
    cache = Cache()
    pools: dict[str, list[PoolView]] = {}
    for i in range(nodes):
        name = f"node-{i}"
        cache.add_node(
            NodeInfo.from_obj(
                {
                    "metadata": {"name": name, "uid": f"n{i}", "labels": {"kubernetes.io/hostname": name}},
                    "spec": {"taints": [KWOK_TAINT]},
                    "status": {
                        "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
        )
        first = ipaddress.IPv4Address("10.0.0.0") + (i << 8)
        pool = {
            "metadata": {"name": f"pool-{i}", "uid": f"p{i}", "resourceVersion": "1"},
            "spec": {"nodeName": name, "addresses": [f"{first + 1}-{first + capacity}"]},
            "status": {"allocations": {}},
        }
        pools[f"pool-{i}"] = [PoolView.from_obj(pool)]
    for j in range(bound):
        cache.add_pod(PodInfo.from_obj(pod_body(f"bound-{j}", f"node-{j % nodes}")).lean())
    cache.ready.set()
    pool_cache = PoolCache(cache)
    pool_cache.attach(pools)
    return build_profile(UnderlayIPDeps(pool_cache, None)), cache  # type: ignore[arg-type]


def cycle(fw: Framework, pod: PodInfo, snapshot: Snapshot) -> int:
    """One scheduling cycle up to the totals; returns the number of feasible nodes."""
    state = CycleState()
    feasible, _ = fw.find_feasible(state, pod, snapshot)
    fw.score_totals(state, pod, feasible)
    return len(feasible)


def placing_cycles(fw: Framework, cache: Cache, cycles: int) -> list[str]:
    """``cycles`` cycles of pods of one shape, each assumed on its best node as the scheduler
    does (so that node is rebuilt in the next snapshot); returns the nodes chosen."""
    chosen: list[str] = []
    for i in range(cycles):
        pod = PodInfo.from_obj(pod_body(f"incoming-{i}"))
        snapshot = cache.snapshot()
        state = CycleState()
        feasible, _ = fw.find_feasible(state, pod, snapshot)
        totals = fw.score_totals(state, pod, feasible)
        best = max(feasible, key=lambda n: totals[n.name]).name
        cache.assume_pod(PodInfo.from_obj(pod_body(f"incoming-{i}", best)).lean())
        chosen.append(best)
    return chosen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--capacity", type=int, default=20, help="addresses per node")
    p.add_argument("--bound", type=int, default=0, help="pods already bound, spread over the nodes")
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--profile", help="write a cProfile of the cycles to this file")
    p.add_argument(
        "--place",
        action="store_true",
        help="place each cycle's pod on its best node (a new pod each time, one node rebuilt per "
        "cycle, as in the scheduler) instead of scoring one pod on an unchanged snapshot",
    )
    args = p.parse_args()
    if args.place:
        fw, cache = world_and_cache(args.nodes, args.capacity, args.bound)
        placing_cycles(fw, cache, 1)
        started = time.process_time()
        placing_cycles(fw, cache, args.cycles)
        ms = (time.process_time() - started) / args.cycles * 1000
        print(f"{args.nodes} nodes, {args.bound} bound pods, placing: {ms:.2f} CPU ms/cycle")
        return 0
    fw, snapshot = world(args.nodes, args.capacity, args.bound)
    pod = PodInfo.from_obj(pod_body("incoming"))
    feasible = cycle(fw, pod, snapshot)
    started = time.process_time()
    for _ in range(args.cycles):
        cycle(fw, pod, snapshot)
    ms = (time.process_time() - started) / args.cycles * 1000
    print(f"{args.nodes} nodes, {args.bound} bound pods: {feasible} feasible nodes, {ms:.2f} CPU ms/cycle")
    if args.profile:
        cProfile.runctx(
            "for _ in range(n): cycle(fw, pod, snapshot)",
            globals(),
            {"n": args.cycles, "fw": fw, "pod": pod, "snapshot": snapshot},
            args.profile,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
