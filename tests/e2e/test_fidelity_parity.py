"""Differential tests of preemption and volumes: ip-scheduler decides as the real
kube-scheduler does where scheduler mode must not be the lesser product.

Two mirrored worlds of three nodes (4 CPUs, two underlay addresses each): world ``a`` is
scheduled by kube-scheduler (same release) with the addresses as the extended resource
``ipscheduler.io/underlay-ip``, world ``b`` by ip-scheduler with a NodeIPPool of two
addresses per node. Each case fills every node of both worlds with the same victims (bare
pods pinned to their node, of PriorityClasses 100..300), adds the same
PodDisruptionBudgets, then creates the same preemptor(s) in both worlds. Both schedulers
must evict the same victims (by name) and bind each preemptor to the same node index, or
leave it Pending with nothing evicted; and both must match what kube-scheduler's rules
give for the case (written in the table). A disagreement prints the case.

Volumes: in the same worlds, pods with a claim of a ``WaitForFirstConsumer`` class, over
local PersistentVolumes (static, no provisioner) or over a provisioner that honours
``volume.kubernetes.io/selected-node`` (the test plays it: it creates the local volume on
the selected node), must land on the same node index in both worlds, or stay Pending in
both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.helpers import SCHEDULER, SchedulerProcess
from tests.kube import Kubectl, create_namespace, wait_for

UNDERLAY = "ipscheduler.io/underlay-ip"
WORLDS = ("a", "b")
NODES_PER_WORLD = 3
CLASSES = {"p100": 100, "p150": 150, "p200": 200, "p250": 250, "p300": 300, "p1000": 1000}
NEVER = "p1000-never"


@dataclass(frozen=True)
class Victim:
    name: str
    node: int
    priority: str
    cpu: str = "100m"
    app: str = "victim"


@dataclass(frozen=True)
class Case:
    """Victims, PodDisruptionBudgets (``app`` → minAvailable), preemptors created one after
    the other (name, PriorityClass, cpu), and what kube-scheduler's rules give: per
    preemptor its node index (None: Pending), and the victims evicted in all."""

    victims: tuple[Victim, ...]
    preemptors: tuple[tuple[str, str, str], ...]
    want_nodes: tuple[int | None, ...]
    want_evicted: frozenset[str]
    budgets: dict[str, int] = field(default_factory=dict)


def _pairs(*specs: tuple[int, str, str]) -> tuple[Victim, ...]:
    """Two victims per ``(node, priority, cpu)``, named ``v<node><a|b>``."""
    return tuple(Victim(f"v{n}{s}", n, p, cpu) for n, p, cpu in specs for s in "ab")


CASES = {
    "single victim": Case(
        victims=(
            *_pairs((0, "p200", "100m"), (2, "p200", "100m")),
            Victim("v1a", 1, "p100"),
            Victim("v1b", 1, "p200"),
        ),
        preemptors=(("high", "p1000", "100m"),),
        want_nodes=(1,),
        want_evicted=frozenset({"v1a"}),
    ),
    "several victims": Case(
        victims=_pairs((0, "p200", "1500m"), (1, "p100", "1500m"), (2, "p200", "1500m")),
        preemptors=(("high", "p1000", "3"),),
        want_nodes=(1,),
        want_evicted=frozenset({"v1a", "v1b"}),
    ),
    "a PDB-protected victim": Case(
        victims=(
            Victim("v0a", 0, "p100", app="guarded"),
            Victim("v0b", 0, "p100", app="guarded"),
            Victim("v1a", 1, "p200"),
            Victim("v1b", 1, "p250"),
            *_pairs((2, "p300", "100m")),
        ),
        budgets={"guarded": 2},
        preemptors=(("high", "p1000", "100m"),),
        want_nodes=(1,),
        want_evicted=frozenset({"v1a"}),
    ),
    "preemptionPolicy Never": Case(
        victims=_pairs((0, "p200", "100m"), (1, "p100", "100m"), (2, "p200", "100m")),
        preemptors=(("high", NEVER, "100m"),),
        want_nodes=(None,),
        want_evicted=frozenset(),
    ),
    "victims on several nodes": Case(
        victims=(
            *_pairs((0, "p200", "100m")),
            Victim("v1a", 1, "p100"),
            Victim("v1b", 1, "p300"),
            Victim("v2a", 2, "p150"),
            Victim("v2b", 2, "p200"),
        ),
        preemptors=(("high-1", "p1000", "100m"), ("high-2", "p1000", "100m")),
        want_nodes=(1, 2),
        want_evicted=frozenset({"v1a", "v2a"}),
    ),
}


@pytest.fixture(scope="module")
def worlds(
    cluster: Any, kubectl: Kubectl, crd: None, scheduler: SchedulerProcess
) -> Iterator[dict[str, Any]]:
    """The two worlds' nodes (labels ``pre-world``, ``pre-index``), world b's pools, the
    PriorityClasses, a namespace and kube-scheduler; all removed afterwards."""
    names = cluster.add_nodes(len(WORLDS) * NODES_PER_WORLD)
    world = {w: names[i * NODES_PER_WORLD : (i + 1) * NODES_PER_WORLD] for i, w in enumerate(WORLDS)}
    ns = create_namespace(kubectl, "fidelity-preemption")
    classes = [*CLASSES, NEVER]
    for name, value in {**CLASSES, NEVER: 1000}.items():
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"{ns}-{name}"},
            "value": value,
        }
        if name == NEVER:
            body["preemptionPolicy"] = "Never"
        kubectl.apply(body)
    pools = []
    kube = cluster.start_kube_scheduler("kube-scheduler-fidelity-preemption")
    try:
        for w, nodes in world.items():
            for i, node in enumerate(nodes):
                kubectl("label", "node", node, f"pre-world={w}", f"pre-index={i}", "--overwrite")
                res = {"cpu": "4", "memory": "8Gi", "pods": "110", **({UNDERLAY: "2"} if w == "a" else {})}
                patch = json.dumps({"status": {"capacity": res, "allocatable": res}})
                kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", patch)
                if w == "b":
                    pools.append(f"pre-{i}")
                    kubectl.apply(
                        {
                            "apiVersion": "ipscheduler.io/v1alpha1",
                            "kind": "NodeIPPool",
                            "metadata": {"name": f"pre-{i}"},
                            "spec": {"nodeName": node, "addresses": [f"10.70.{i}.1-10.70.{i}.2"]},
                        }
                    )
        yield {"ns": ns, "world": world}
    finally:
        kube.terminate()
        kube.wait(timeout=20)
        kubectl.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
        for name in pools:
            kubectl.run("delete", "nodeippool", name, "--wait=true", "--timeout=30s", check=False)
        kubectl.run("delete", "priorityclass", *(f"{ns}-{c}" for c in classes), check=False)
        kubectl.run("delete", "node", *names, check=False)


def _pod(
    ns: str,
    w: str,
    name: str,
    priority: str,
    cpu: str,
    labels: dict[str, str],
    claim: str = "",
    **select: str,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": "64Mi"}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "priorityClassName": f"{ns}-{priority}",
        "nodeSelector": {"pre-world": w, **select},
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": requests}}
        ],
    }
    if claim:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"{claim}-{w}"}}]
    if w == "a":
        requests[UNDERLAY] = "1"
        spec["containers"][0]["resources"]["limits"] = {UNDERLAY: "1"}
    else:
        spec["schedulerName"] = SCHEDULER
    meta = {"name": f"{name}-{w}", "labels": {**labels, "pre-world": w}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pods(kubectl: Kubectl, ns: str, selector: str) -> dict[str, dict[str, Any]]:
    items = kubectl.json("get", "pods", "-n", ns, "-l", selector)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def _node_index(kubectl: Kubectl, pod: dict[str, Any]) -> int | None:
    node = pod["spec"].get("nodeName")
    return int(kubectl.json("get", "node", node)["metadata"]["labels"]["pre-index"]) if node else None


def _failed_with_preemption(kubectl: Kubectl, ns: str, name: str) -> bool:
    events = kubectl.json(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name},reason=FailedScheduling"
    )["items"]
    return any("preemption: " in e.get("message", "") for e in events)


def _run(kubectl: Kubectl, ns: str, case: Case) -> dict[str, tuple[tuple[int | None, ...], frozenset[str]]]:
    """Play ``case`` in both worlds: per world, the preemptors' node indexes and the victims evicted."""
    for w in WORLDS:
        for v in case.victims:
            kubectl.create(
                _pod(
                    ns,
                    w,
                    v.name,
                    v.priority,
                    v.cpu,
                    {"role": "victim", "app": v.app},
                    **{"pre-index": str(v.node)},
                ),
                ns,
            )
    every = {f"{v.name}-{w}" for v in case.victims for w in WORLDS}
    wait_for(
        "every victim bound",
        lambda: (
            all(p["spec"].get("nodeName") for p in _pods(kubectl, ns, "role=victim").values())
            and set(_pods(kubectl, ns, "role=victim")) == every
        ),
        timeout=60,
    )
    for app, min_available in case.budgets.items():
        for w in WORLDS:
            kubectl.apply(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": f"{app}-{w}"},
                    "spec": {
                        "minAvailable": min_available,
                        "selector": {"matchLabels": {"app": app, "pre-world": w}},
                    },
                },
                ns,
            )
            wait_for(
                f"PDB {app}-{w} observed",
                lambda a=app, w=w, n=min_available: (
                    kubectl.json("get", "pdb", f"{a}-{w}", "-n", ns).get("status", {}).get("currentHealthy")
                    == n
                ),
                timeout=60,
            )
    nodes: dict[str, list[int | None]] = {w: [] for w in WORLDS}
    for name, priority, cpu in case.preemptors:
        for w in WORLDS:
            kubectl.create(_pod(ns, w, name, priority, cpu, {"role": "preemptor"}), ns)

        def decided(name: str = name) -> dict[str, int | None] | None:
            out: dict[str, int | None] = {}
            for w in WORLDS:
                pod = kubectl.json("get", "pod", f"{name}-{w}", "-n", ns)
                if pod["spec"].get("nodeName"):
                    out[w] = _node_index(kubectl, pod)
                elif NEVER in pod["spec"].get("priorityClassName", "") and _failed_with_preemption(
                    kubectl, ns, f"{name}-{w}"
                ):
                    out[w] = None
                else:
                    return None
            return out

        got = wait_for(f"{name} decided in both worlds", decided, timeout=90, interval=0.5)
        for w in WORLDS:
            nodes[w].append(got[w])
    left = set(_pods(kubectl, ns, "role=victim"))
    return {
        w: (tuple(nodes[w]), frozenset(v.name for v in case.victims if f"{v.name}-{w}" not in left))
        for w in WORLDS
    }


@pytest.mark.parametrize("name", list(CASES))
def test_same_preemptions_as_kube_scheduler(kubectl: Kubectl, worlds: dict[str, Any], name: str) -> None:
    case, ns = CASES[name], worlds["ns"]
    try:
        got = _run(kubectl, ns, case)
    finally:
        kubectl.run("delete", "pdb", "--all", "-n", ns, "--wait=true", check=False)
        kubectl("delete", "pods", "--all", "-n", ns, "--wait=true", "--timeout=120s")
        wait_for(
            "world b's pools empty",
            lambda: all(
                not (kubectl.json("get", "nodeippool", f"pre-{i}").get("status") or {}).get("allocations")
                for i in range(NODES_PER_WORLD)
            ),
            timeout=60,
        )
    want = (case.want_nodes, case.want_evicted)
    report = json.dumps(
        {
            "case": name,
            "kube-scheduler": _show(got["a"]),
            "ip-scheduler": _show(got["b"]),
            "rules": _show(want),
        }
    )
    assert got["a"] == got["b"] == want, report


def _show(outcome: tuple[tuple[int | None, ...], frozenset[str]]) -> dict[str, Any]:
    return {"nodes": list(outcome[0]), "evicted": sorted(outcome[1])}


# --------------------------------------------------------------------------- volumes
STATIC = "static"
PROVISIONED = "provisioned"
PROVISIONER = "example.com/ipscheduler-e2e"


@dataclass(frozen=True)
class VolumeCase:
    """Local volumes (node index, size) made in both worlds, the class the claim asks for,
    the claim's size, and where kube-scheduler's rules put the pod (None: Pending)."""

    volumes: tuple[tuple[int, str], ...]
    klass: str
    size: str
    want: int | None


VOLUME_CASES = {
    "the only fitting static volume": VolumeCase(((1, "1Gi"), (2, "512Mi")), STATIC, "1Gi", 1),
    "no static volume big enough": VolumeCase(((0, "1Gi"),), STATIC, "5Gi", None),
    "provisioned where the class allows": VolumeCase((), PROVISIONED, "1Gi", 2),
}


def _local_pv(
    name: str, node: str, size: str, klass: str, claim: tuple[str, str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": klass,
        "persistentVolumeReclaimPolicy": "Delete",
        "local": {"path": f"/mnt/{name}"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]
                    }
                ]
            }
        },
    }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1], "uid": claim[2]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def classes(kubectl: Kubectl, worlds: dict[str, Any]) -> Iterator[dict[str, str]]:
    """The two WaitForFirstConsumer classes: without a provisioner, and with one whose
    allowedTopologies admit only node index 2 (label ``pre-index``)."""
    ns = worlds["ns"]
    names = {STATIC: f"{ns}-static", PROVISIONED: f"{ns}-provisioned"}
    kubectl.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": names[STATIC]},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
    )
    kubectl.apply(
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": names[PROVISIONED]},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": "pre-index", "values": ["2"]}]}],
        }
    )
    yield names
    kubectl.run("delete", "storageclass", *names.values(), "--ignore-not-found", check=False)


def _provision(kubectl: Kubectl, ns: str, klass: str, made: list[str]) -> None:
    """Play the provisioner once: a local volume on the selected node for each claim of
    ``klass`` that has one and no volume yet (what an external provisioner does)."""
    for claim in kubectl.json("get", "pvc", "-n", ns)["items"]:
        meta, spec = claim["metadata"], claim["spec"]
        node = (meta.get("annotations") or {}).get("volume.kubernetes.io/selected-node")
        name = f"pv-{meta['uid']}"
        if spec.get("storageClassName") != klass or not node or spec.get("volumeName") or name in made:
            continue
        size = spec["resources"]["requests"]["storage"]
        kubectl.apply(_local_pv(name, node, size, klass, (ns, meta["name"], meta["uid"])))
        made.append(name)


def _failed(kubectl: Kubectl, ns: str, name: str) -> bool:
    events = kubectl.json(
        "get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name},reason=FailedScheduling"
    )["items"]
    return bool(events)


@pytest.mark.parametrize("name", list(VOLUME_CASES))
def test_same_volume_decisions_as_kube_scheduler(
    kubectl: Kubectl, worlds: dict[str, Any], classes: dict[str, str], name: str
) -> None:
    case, ns = VOLUME_CASES[name], worlds["ns"]
    klass = classes[case.klass]
    volumes: list[str] = []
    try:
        for w in WORLDS:
            for i, size in case.volumes:
                pv = f"{ns}-{w}-{i}-{size.lower()}"
                kubectl.apply(_local_pv(pv, worlds["world"][w][i], size, klass))
                volumes.append(pv)
            kubectl.apply(
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": {"name": f"data-{w}"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": klass,
                        "resources": {"requests": {"storage": case.size}},
                    },
                },
                ns,
            )
            kubectl.create(_pod(ns, w, "app", "p100", "100m", {"role": "app"}, claim="data"), ns)

        def decided() -> dict[str, int | None] | None:
            if case.klass == PROVISIONED:
                _provision(kubectl, ns, klass, volumes)
            out: dict[str, int | None] = {}
            for w in WORLDS:
                pod = kubectl.json("get", "pod", f"app-{w}", "-n", ns)
                if pod["spec"].get("nodeName"):
                    out[w] = _node_index(kubectl, pod)
                elif case.want is None and _failed(kubectl, ns, f"app-{w}"):
                    out[w] = None
                else:
                    return None
            return out

        got = wait_for(f"{name}: decided in both worlds", decided, timeout=90, interval=0.5)
    finally:
        kubectl("delete", "pods", "--all", "-n", ns, "--wait=true", "--timeout=120s")
        kubectl.run("delete", "pvc", "--all", "-n", ns, "--wait=true", "--timeout=60s", check=False)
        kubectl.run("delete", "pv", *volumes, "--ignore-not-found", "--wait=false", check=False)
    report = json.dumps(
        {"case": name, "kube-scheduler": got["a"], "ip-scheduler": got["b"], "rules": case.want}
    )
    assert got["a"] == got["b"] == case.want, report
