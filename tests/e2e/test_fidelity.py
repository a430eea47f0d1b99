"""Differential test: ip-scheduler decides as the real kube-scheduler does.

Two mirrored worlds of nodes in one cluster: world ``a`` is scheduled by
kube-scheduler (same release) with the underlay capacity as the extended
resource ``ipscheduler.io/underlay-ip``; world ``b`` by ip-scheduler with a
NodeIPPool of the same size per node. Node ``i`` of both worlds has the same
labels, taints and allocatable (zone values carry the world as a prefix so
that topology domains never mix). A seeded generator makes pods (requests,
selectors, node affinity incl. Gt/Lt, tolerations, host ports, pod
(anti-)affinity, topology spread) and keeps those for which our own filters
find exactly one feasible node or none; each is created in both worlds and
both schedulers must pick node ``i`` of their world, or both leave it
Pending. A disagreement prints the case as JSON so it can become a fixed
regression test.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ipscheduler.cmd.explain import caches_from, evaluate
from ipscheduler.cmd.profiles import build_profile
from ipscheduler.cmd.wiring import BOUND_PODS_SELECTOR
from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.plugin import UnderlayIPDeps
from tests.e2e.helpers import SCHEDULER, SchedulerProcess
from tests.kube import Kubectl, create_namespace, wait_for

SEED = 5
K = 4  # nodes per world
CASES = 240  # executed cases (kept after shaping)
RESET_EVERY = 6  # delete all case pods, so that nodes do not simply fill up
UNDERLAY = "ipscheduler.io/underlay-ip"
APPS = ("web", "db", "cache")


def _node_props(rng: random.Random) -> list[dict[str, Any]]:
    props = []
    for i in range(K):
        props.append(
            {
                "disk": rng.choice(["ssd", "hdd"]),
                "tier": str(rng.randint(1, 5)),
                "zone": f"z{i % 2}",
                "taint": f"dedicated=t{i}:NoSchedule" if rng.random() < 0.25 else None,
                "cpu": rng.choice(["2", "4"]),
                "memory": rng.choice(["4Gi", "8Gi"]),
                "underlay": rng.choice([2, 3, 5]),
            }
        )
    return props


@pytest.fixture(scope="module")
def worlds(
    cluster: Any, kubectl: Kubectl, crd: None, scheduler: SchedulerProcess
) -> Iterator[dict[str, Any]]:
    rng = random.Random(SEED)
    props = _node_props(rng)
    names = cluster.add_nodes(2 * K)
    world = {"a": names[:K], "b": names[K:]}
    pools = []
    ns = create_namespace(kubectl, "fidelity")
    kube = cluster.start_kube_scheduler("kube-scheduler-fidelity")
    try:
        for w, nodes in world.items():
            for i, (node, p) in enumerate(zip(nodes, props, strict=True)):
                kubectl(
                    "label",
                    "node",
                    node,
                    f"diff-world={w}",
                    f"diff-index={i}",
                    f"disk={p['disk']}",
                    f"tier={p['tier']}",
                    f"topology.kubernetes.io/zone={w}-{p['zone']}",
                    "--overwrite",
                )
                if p["taint"]:
                    kubectl("taint", "node", node, p["taint"])
                res = {"cpu": p["cpu"], "memory": p["memory"], "pods": "110"}
                if w == "a":
                    res[UNDERLAY] = str(p["underlay"])
                patch = json.dumps({"status": {"capacity": res, "allocatable": res}})
                kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", patch)
                if w == "b":
                    name = f"fid-{i}"
                    kubectl.apply(
                        {
                            "apiVersion": "ipscheduler.io/v1alpha1",
                            "kind": "NodeIPPool",
                            "metadata": {"name": name},
                            "spec": {
                                "nodeName": node,
                                "addresses": [f"10.60.{i}.1-10.60.{i}.{p['underlay']}"],
                            },
                        }
                    )
                    pools.append(name)
        yield {"ns": ns, "world": world, "props": props, "rng": rng}
    finally:
        kube.terminate()
        kube.wait(timeout=20)
        kubectl.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
        for name in pools:
            kubectl.run("delete", "nodeippool", name, "--wait=true", "--timeout=30s", check=False)
        kubectl.run("delete", "node", *names, check=False)


def _case(rng: random.Random, n: int) -> dict[str, Any]:
    """A generated pod spec (world-neutral) and labels."""
    app = rng.choice(APPS)
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "nodeSelector": {}}
    container: dict[str, Any] = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {
            "requests": {
                "cpu": rng.choice(["100m", "250m", "500m", "1500m"]),
                "memory": rng.choice(["128Mi", "1Gi", "2Gi"]),
            }
        },
    }
    if rng.random() < 0.25:
        container["ports"] = [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]
    spec["containers"] = [container]
    if rng.random() < 0.3:
        spec["nodeSelector"]["disk"] = rng.choice(["ssd", "hdd"])
    affinity: dict[str, Any] = {}
    if rng.random() < 0.35:
        op = rng.choice(["Gt", "Lt", "In", "NotIn"])
        values = [str(rng.randint(1, 5))] if op in ("Gt", "Lt") else rng.sample(["1", "2", "3", "4", "5"], 2)
        affinity["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "tier", "operator": op, "values": values}]}
                ]
            }
        }
    if rng.random() < 0.3:
        key = rng.choice(["kubernetes.io/hostname", "topology.kubernetes.io/zone"])
        term = {"labelSelector": {"matchLabels": {"app": rng.choice(APPS)}}, "topologyKey": key}
        kind = rng.choice(["podAntiAffinity", "podAffinity"])
        affinity[kind] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.4:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": f"t{rng.randrange(K)}", "effect": "NoSchedule"}
        ]
    if rng.random() < 0.25:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
    return {"name": f"case-{n}", "labels": {"app": app}, "spec": spec}


def _pod_for(case: dict[str, Any], w: str) -> dict[str, Any]:
    spec = copy.deepcopy(case["spec"])
    spec["nodeSelector"]["diff-world"] = w
    # Every pod label selector sees only its own world's pods (they share one namespace).
    terms = [
        t
        for kind in ("podAffinity", "podAntiAffinity")
        for t in spec.get("affinity", {})
        .get(kind, {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", [])
    ]
    for holder in [*terms, *spec.get("topologySpreadConstraints", [])]:
        holder["labelSelector"]["matchLabels"]["diff-world"] = w
    if w == "a":
        spec["schedulerName"] = "default-scheduler"
        res = spec["containers"][0]["resources"]
        res["requests"][UNDERLAY] = "1"
        res["limits"] = {UNDERLAY: "1"}
    else:
        spec["schedulerName"] = SCHEDULER
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{case['name']}-{w}", "labels": {**case["labels"], "diff-world": w}},
        "spec": spec,
    }


Snapshot = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]


def _snapshot(kubectl: Kubectl) -> Snapshot:
    """What our filters read, LISTed live: the nodes, the bound pods, the NodeIPPools."""
    return (
        kubectl.json("get", "nodes")["items"],
        kubectl.json("get", "pods", "-A", "--field-selector", BOUND_PODS_SELECTOR)["items"],
        kubectl.json("get", "nodeippools")["items"],
    )


def _ours_feasible(snapshot: Snapshot, pod: dict[str, Any], ns: str) -> list[str]:
    """Nodes our filters accept for the world-b pod, over ``snapshot``."""
    cache = caches_from(*snapshot)
    profile = build_profile(UnderlayIPDeps(cache, None))  # type: ignore[arg-type]  # filters need no API
    body = {**pod, "metadata": {**pod["metadata"], "uid": "shaping", "namespace": ns}}
    verdicts, _ = evaluate(profile, PodInfo.from_obj(body), cache.node_cache.snapshot())
    return [v.node for v in verdicts if v.feasible]


def _decision(kubectl: Kubectl, ns: str, name: str) -> str | None:
    """diff-index of the node the pod is bound to, "pending" after FailedScheduling, None if undecided."""
    pod = kubectl.json("get", "pod", name, "-n", ns)
    node = pod["spec"].get("nodeName")
    if node:
        return str(kubectl.json("get", "node", node)["metadata"]["labels"]["diff-index"])
    events = kubectl.json(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name},reason=FailedScheduling"
    )["items"]
    return "pending" if events else None


def test_same_decisions_as_kube_scheduler(kubectl: Kubectl, worlds: dict[str, Any]) -> None:
    ns, rng = worlds["ns"], worlds["rng"]
    index_of = {node: i for w in worlds["world"].values() for i, node in enumerate(w)}
    disagreements: list[str] = []
    executed = attempts = 0
    counts = {"bound": 0, "pending": 0}
    snapshot: Snapshot | None = None  # LISTed again only once a case changed the cluster
    while executed < CASES and attempts < CASES * 20:
        attempts += 1
        case = _case(rng, attempts)
        if snapshot is None:
            snapshot = _snapshot(kubectl)
        feasible = _ours_feasible(snapshot, _pod_for(case, "b"), ns)
        if len(feasible) > 1:
            continue
        executed += 1
        snapshot = None
        for w in ("a", "b"):
            kubectl.create(_pod_for(case, w), ns)
        decided = wait_for(
            f"decisions for {case['name']}",
            lambda c=case: (
                (d := (_decision(kubectl, ns, f"{c['name']}-a"), _decision(kubectl, ns, f"{c['name']}-b")))
                and None not in d
                and d
            ),
            timeout=30,
            interval=0.2,
        )
        expected = str(index_of[feasible[0]]) if feasible else "pending"
        counts["pending" if decided[1] == "pending" else "bound"] += 1
        if decided[0] != decided[1] or decided[1] != expected:
            disagreements.append(
                json.dumps(
                    {
                        "case": case,
                        "kube-scheduler": decided[0],
                        "ip-scheduler": decided[1],
                        "our-filters-expected": expected,
                        "nodes": worlds["props"],
                    }
                )
            )
        if "pending" in decided:
            # A Pending pod holds nothing, but each scheduler retries it on its own clock
            # (backoff, queueing hints), e.g. once a pod it has affinity to lands; bound in
            # one world and not yet in the other, it would make the worlds diverge.
            kubectl("delete", "pods", "-n", ns, f"{case['name']}-a", f"{case['name']}-b", "--wait=true")
        if executed % RESET_EVERY == 0:
            kubectl("delete", "pods", "--all", "-n", ns, "--wait=true", "--timeout=120s")
            time.sleep(1)
    print(f"{executed} cases from {attempts} generated; {counts}; {len(disagreements)} disagreement(s)")
    assert not disagreements, "\n".join(disagreements[:10])
    assert executed >= CASES // 2, f"only {executed} usable cases from {attempts} attempts"
    assert counts["bound"] >= CASES // 5 and counts["pending"] > 0, counts
