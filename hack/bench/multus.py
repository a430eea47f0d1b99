"""The ``running-interfaces-1`` and ``running-interfaces-16`` phases: pods with 1 and then 16
further underlay interfaces that really run, on one real node whose CNI is Multus' thin plugin
(whereabouts#313's shape on the node: create → Running, every interface's CNI ADD included;
:func:`multus_phases`; its table is :func:`.report.interfaces_table`).

The node (:data:`NODE`, :meth:`devcluster.Cluster.start_real_node` with ``multus=True``) runs
Multus with the node's own conflist as its cluster network (eth0: the reference ``bridge`` on
``ipsbr<i>`` with ``ipscheduler-ipam``). For a phase of N further interfaces, in a namespace
of its own, as ``tests/e2e/test_multus.py`` makes one further interface:

- N NetworkAttachmentDefinitions ``net1``..``netN`` (:func:`nad_body`): each a bridge of its
  own on the node (:func:`bridge_name`) with ``ipscheduler-ipam`` as IPAM (the settings of the
  node's first network);
- N + 1 NodeIPPools of the node (:func:`pool_bodies`): ``<tag>-eth0`` on the node's subnet,
  ``<tag>-net<k>`` on :func:`interface_subnet` (gateway ``.1`` on that bridge, no route: a
  further interface never carries the default route), each holding exactly the phase's pods;
- the pods (:func:`multus_pod`): busybox on the node, their first pool in
  ``ipscheduler.io/pools``, and one Multus element per further interface naming its NAD, its
  interface name and its pool (``ipscheduler.io/pools``).

The pods are created at once while ip-scheduler runs; each is Running once its sandbox had
all N + 1 CNI ADDs through Multus (each one ``ipscheduler-ipam`` verifying the interface's
reserved address against the API). A Running pod is checked (:func:`pod_problems`): its podIP
the reserved ``ipscheduler.io/ip``, one ``ipscheduler.io/interfaces`` entry per further
interface from its pool's subnet, and Multus' ``network-status`` listing eth0 and every
further interface with those addresses. Then the pods are deleted at once (gracefully) and
the phase waits until every pod is gone and every allocation released. Everything the phase
made goes afterwards: pods, pools, NADs, namespace, bridges; the node and the NAD CRD (if the
phase installed it) at the end of both phases.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

import binaries
import devcluster
import realnode
from ipscheduler.underlayip.models import ANNOTATION_INTERFACES, ANNOTATION_IP, POOLS

from .cluster import (
    apiserver_requests,
    create_pool,
    delete_namespace,
    new_namespace,
    per_pod_requests,
    percentile,
    pool_body,
    wait_until,
    watch_raw,
)
from .drivers import OURS, Ours
from .running import MAX_RUNNING_PODS, busybox_pod, node_cpu

MULTUS_PHASES = ("running-interfaces-1", "running-interfaces-16")
"""The phases of this module, in the order they run."""
INTERFACES = {"running-interfaces-1": 1, "running-interfaces-16": 16}
"""Further interfaces per pod of each phase (16: whereabouts#313's pods)."""
TAGS = {"running-interfaces-1": "rif1", "running-interfaces-16": "rif16"}
"""The prefix of each phase's pool names."""
NODE = "real-node-multus"
"""The phases' real node, with Multus as its CNI."""
INTERFACE_PODS = 16
"""Default pods of each phase (``--running-interface-pods``): 16 x 17 interfaces take a few
minutes on a 2-core machine."""
MAX_INTERFACE_PODS = MAX_RUNNING_PODS
"""The kubelet's ``maxPods``; a pool's /24 from ``.10`` holds more."""
NAD_GROUP, NAD_VERSION, NAD_PLURAL = "k8s.cni.cncf.io", "v1", "network-attachment-definitions"
NAD_CRD = (
    Path(__file__).resolve().parents[2]
    / "testdata/multus/network-attachment-definitions.k8s.cni.cncf.io.yaml"
)
NAD_CRD_NAME = f"{NAD_PLURAL}.{NAD_GROUP}"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
POOLS_ANNOTATION = "ipscheduler.io/pools"
PHASE_LABEL = "bench.ipscheduler.io/phase"
"""Label on a phase's pools (its tag)."""
FIRST_ADDRESS = 10
"""Every pool's first address: ``.10`` of its /24."""


def interface_subnet(index: int, k: int) -> ipaddress.IPv4Network:
    """Interface ``net<k>``'s subnet on real node ``index``: ``10.<110+k>.<index>.0/24`` (the
    index is unique on the host; ``10.88``/``10.89`` are the nodes' and the e2e tests')."""
    return ipaddress.IPv4Network(f"10.{110 + k}.{index}.0/24")


def bridge_name(node_bridge: str, k: int) -> str:
    """The bridge of ``net<k>`` on the node: the node's bridge name and ``n<k>`` (``ipsbr3n16``)."""
    return f"{node_bridge}n{k}"


def pool_name(tag: str, k: int) -> str:
    """The phase's pool for interface ``k`` (0: eth0)."""
    return f"{tag}-eth0" if k == 0 else f"{tag}-net{k}"


def nad_body(k: int, bridge: str, ipam: Mapping[str, Any]) -> dict[str, Any]:
    """NetworkAttachmentDefinition ``net<k>``: the reference ``bridge`` on ``bridge`` (the
    gateway on it, no masquerade) with ``ipam`` (``ipscheduler-ipam``'s settings)."""
    config = {
        "cniVersion": "1.1.0",
        "name": f"net{k}",
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "ipam": dict(ipam)}
        ],
    }
    return {
        "apiVersion": f"{NAD_GROUP}/{NAD_VERSION}",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": f"net{k}"},
        "spec": {"config": json.dumps(config)},
    }


def pool_bodies(
    tag: str, node: str, index: int, node_subnet: str, node_ip: str, interfaces: int, pods: int
) -> list[dict[str, Any]]:
    """The phase's pools, eth0's first: ``pods`` addresses from ``.10`` of the node's subnet
    (gateway ``node_ip``, the default route), then one per interface of ``pods`` from ``.10``
    of :func:`interface_subnet` (gateway ``.1``, no route), each labelled with ``tag``."""
    nets = [ipaddress.IPv4Network(node_subnet)] + [
        interface_subnet(index, k) for k in range(1, interfaces + 1)
    ]
    out = []
    for k, net in enumerate(nets):
        gateway = node_ip if k == 0 else str(net[1])
        subnet: dict[str, Any] = {"cidr": str(net), "gateway": gateway}
        if k == 0:
            subnet["routes"] = [{"dst": "0.0.0.0/0"}]
        body = pool_body(
            pool_name(tag, k), node, str(net[FIRST_ADDRESS]), str(net[FIRST_ADDRESS + pods - 1]), [subnet]
        )
        body["metadata"]["labels"] = {PHASE_LABEL: tag}
        out.append(body)
    return out


def multus_pod(name: str, tag: str, interfaces: int, node: str) -> dict[str, Any]:
    """A busybox pod (:func:`.running.busybox_pod`) on ``node``: eth0 from the phase's first
    pool, ``net1``..``net<interfaces>`` each through its Multus element naming its NAD and pool."""
    pod = busybox_pod(name, OURS)
    elements = [
        {"name": f"net{k}", "interface": f"net{k}", POOLS_ANNOTATION: pool_name(tag, k)}
        for k in range(1, interfaces + 1)
    ]
    pod["metadata"]["annotations"] = {POOLS_ANNOTATION: pool_name(tag, 0), NETWORKS: json.dumps(elements)}
    pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] = node
    return pod


def pod_problems(
    obj: Mapping[str, Any], interfaces: int, subnets: Mapping[str, ipaddress.IPv4Network]
) -> list[str]:
    """What is wrong with Running pod ``obj`` (a raw dict; empty: nothing): its podIP not
    ``ipscheduler.io/ip``; not exactly one ``ipscheduler.io/interfaces`` entry (of one address,
    inside ``subnets[<interface>]``) per further interface ``net1``..``net<interfaces>``; Multus'
    ``network-status`` not listing eth0 (the podIP, default) and each further interface with
    the entry's address."""
    annotations = obj["metadata"].get("annotations") or {}
    pod_ip = (obj.get("status") or {}).get("podIP")
    problems = []
    if annotations.get(ANNOTATION_IP) != pod_ip:
        problems.append(f"podIP {pod_ip} is not {ANNOTATION_IP} {annotations.get(ANNOTATION_IP)}")
    try:
        entries = json.loads(annotations.get(ANNOTATION_INTERFACES) or "{}")
        status = {s["interface"]: s for s in json.loads(annotations.get(NETWORK_STATUS) or "[]")}
    except (ValueError, TypeError, KeyError) as e:
        return [*problems, f"unreadable annotations: {e}"]
    want = {f"net{k}" for k in range(1, interfaces + 1)}
    if set(entries) != want:
        problems.append(f"{ANNOTATION_INTERFACES} has {sorted(entries)}")
    if set(status) != want | {"eth0"}:
        problems.append(f"network-status has {sorted(status)}")
    eth0 = status.get("eth0") or {}
    if eth0 and (eth0.get("ips") != [pod_ip] or not eth0.get("default")):
        problems.append(f"network-status eth0 is {eth0}")
    for name in sorted(want & set(entries)):
        ips = entries[name].get("ips") or []
        if len(ips) != 1 or ipaddress.ip_address(ips[0]) not in subnets[name]:
            problems.append(f"{name} has {ips}, not one address of {subnets[name]}")
        elif name in status and status[name].get("ips") != ips:
            problems.append(f"network-status {name} has {status[name].get('ips')}, not {ips}")
    return problems


def addresses(obj: Mapping[str, Any]) -> list[str]:
    """Every address of Running pod ``obj``: its podIP and each further interface's."""
    annotations = obj["metadata"].get("annotations") or {}
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        entries = json.loads(annotations.get(ANNOTATION_INTERFACES) or "{}")
        return [str((obj.get("status") or {}).get("podIP"))] + [
            ip for e in entries.values() for ip in e.get("ips") or []
        ]
    return []


@dataclass
class InterfacesPhase:
    """One phase's pods as this client's watch sees them (``time.monotonic()``)."""

    name: str
    interfaces: int
    subnets: dict[str, ipaddress.IPv4Network]
    created: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    addresses: dict[str, list[str]] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        """Record what the event ``kind`` of pod ``obj`` shows: first time Running with a podIP
        (then its check and addresses), its last phase, its deletion."""
        name, now = obj["metadata"]["name"], time.monotonic()
        if kind == "DELETED":
            self.gone.setdefault(name, now)
            return
        status = obj.get("status") or {}
        self.state[name] = str(status.get("phase", "?"))
        if status.get("phase") == "Running" and status.get("podIP") and name not in self.running:
            self.running[name] = now
            self.problems[name] = pod_problems(obj, self.interfaces, self.subnets)
            self.addresses[name] = addresses(obj)


def interfaces_row(
    phase: InterfacesPhase,
    pods: int,
    start: float,
    cpu_s: float,
    requests: Mapping[str, float],
    released: bool,
    delete_start: float,
) -> dict[str, Any]:
    """The phase's result row: create → Running p50/p99 (s), all Running (s from the first
    create), pods/s, node CPU ms per pod (``cpu_s`` over the Running pods), pool status writes
    and API requests per pod (``requests``: :func:`.cluster.per_pod_requests` up to all
    Running), deletion → all gone (s), and whether every pod ran, checked, with distinct
    addresses, and all went with every allocation ``released``."""
    up = [phase.running[n] - phase.created[n] for n in phase.running if n in phase.created]
    end = max(phase.running.values(), default=start)
    ips = [ip for a in phase.addresses.values() for ip in a]
    bad = {n: p for n, p in phase.problems.items() if p}
    row: dict[str, Any] = {
        "phase": phase.name,
        "interfaces": phase.interfaces + 1,
        "pods": pods,
        "running": len(phase.running),
        "create_to_running_s": {q: round(percentile(up, v), 2) for q, v in (("p50", 0.5), ("p99", 0.99))},
        "all_running_s": round(end - start, 2),
        "running_pods_per_s": round(len(phase.running) / max(end - start, 1e-9), 2),
        "running_interfaces_per_s": round(
            len(phase.running) * (phase.interfaces + 1) / max(end - start, 1e-9), 1
        ),
        "node_cpu_ms_per_pod": round(1000 * cpu_s / max(len(phase.running), 1), 1),
        "pool_writes_per_pod": round(
            sum(v for k, v in requests.items() if k.endswith(f"{POOLS.plural}/status")), 2
        ),
        "api_requests_per_pod": round(sum(requests.values()), 2),
        "requests_per_pod": dict(requests),
        "addresses": len(ips),
        "addresses_unique": len(set(ips)) == len(ips),
        "gone": len(phase.gone),
        "all_gone_s": round(max(phase.gone.values(), default=delete_start) - delete_start, 2),
        "released": released,
        "problems": bad,
        "not_running": {n: phase.state.get(n, "never seen") for n in phase.created if n not in phase.running},
    }
    row["correct"] = bool(
        row["running"] == pods
        and row["addresses"] == pods * (phase.interfaces + 1)
        and row["addresses_unique"]
        and not bad
        and row["gone"] == pods
        and released
    )
    return row


def kubectl(cluster: devcluster.Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def install_nad_crd(cluster: devcluster.Cluster) -> bool:
    """Install the NetworkAttachmentDefinition CRD (Multus v4.2.3's) unless there, wait until
    Established; True when this installed it."""
    if kubectl(cluster, "get", "crd", NAD_CRD_NAME).returncode == 0:
        return False
    for args in (
        ("apply", "-f", str(NAD_CRD)),
        ("wait", "--for=condition=Established", f"crd/{NAD_CRD_NAME}"),
    ):
        proc = kubectl(cluster, *args)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return True


async def pools_released(custom: client.CustomObjectsApi, tag: str) -> bool:
    """Is no allocation left in the phase's pools?"""
    listed = await custom.list_cluster_custom_object(
        POOLS.group, POOLS.version, POOLS.plural, label_selector=f"{PHASE_LABEL}={tag}"
    )
    return all(not (p.get("status") or {}).get("allocations") for p in listed["items"])


async def delete_pools(custom: client.CustomObjectsApi, tag: str, within: float = 60) -> None:
    """Delete the phase's pools and wait (``within`` s) until they are gone (ip-scheduler,
    running, removes its finalizer)."""
    selector = f"{PHASE_LABEL}={tag}"
    with contextlib.suppress(client.exceptions.ApiException):
        await custom.delete_collection_cluster_custom_object(
            POOLS.group, POOLS.version, POOLS.plural, label_selector=selector
        )
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        listed = await custom.list_cluster_custom_object(
            POOLS.group, POOLS.version, POOLS.plural, label_selector=selector
        )
        if not listed["items"]:
            return
        await asyncio.sleep(0.2)


def delete_bridges(layout: realnode.Layout, interfaces: int) -> None:
    """Delete the NADs' bridges ``net1``..``net<interfaces>`` left on the host."""
    for k in range(1, interfaces + 1):
        subprocess.run(["ip", "link", "del", bridge_name(layout.bridge, k)], capture_output=True, check=False)


async def measure(
    api: client.ApiClient,
    cluster: devcluster.Cluster,
    layout: realnode.Layout,
    key: str,
    pods: int,
    index: int,
) -> dict[str, Any]:
    """One phase (:data:`INTERFACES` of ``key``): make its NADs and pools, create ``pods`` pods
    at once (50 requests in flight), wait until all are Running, delete them at once, wait
    until all are gone and released; remove what it made whatever happened; the row."""
    n, tag = INTERFACES[key], TAGS[key]
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-{key}-{index}"
    subnets = {f"net{k}": interface_subnet(layout.index, k) for k in range(1, n + 1)}
    phase = InterfacesPhase(f"ip-scheduler + Multus + ipscheduler-ipam, 1 + {n} interfaces", n, subnets)
    ipam = json.loads((layout.netd / realnode.CONFLIST).read_text())["plugins"][0]["ipam"]
    await new_namespace(core, ns)
    watches: list[asyncio.Task[None]] = []
    try:
        for k in range(1, n + 1):
            body = nad_body(k, bridge_name(layout.bridge, k), ipam)
            await custom.create_namespaced_custom_object(NAD_GROUP, NAD_VERSION, ns, NAD_PLURAL, body)
        for body in pool_bodies(tag, layout.name, layout.index, layout.subnet, layout.node_ip, n, pods):
            await create_pool(api, body)
        await asyncio.sleep(2)  # the pools get the scheduler's finalizer and status
        watches.append(asyncio.create_task(watch_raw(core.list_namespaced_pod, (ns,), phase.on_pod)))
        await asyncio.sleep(0.5)
        sem = asyncio.Semaphore(50)

        async def create(name: str) -> None:
            async with sem:
                phase.created[name] = time.monotonic()
                await core.create_namespaced_pod(
                    ns, multus_pod(name, tag, n, layout.name), _preload_content=False
                )

        names = [f"p{i}" for i in range(pods)]
        requests_before = await apiserver_requests(api)
        cpu_before = node_cpu(cluster, layout)
        start = time.monotonic()
        await asyncio.gather(*(create(p) for p in names))
        await wait_until(lambda: len(phase.running) >= pods, max(300.0, 20.0 * pods), *watches)
        cpu_s = node_cpu(cluster, layout) - cpu_before
        requests = per_pod_requests(requests_before, await apiserver_requests(api), len(phase.running))
        await asyncio.sleep(1)
        delete_start = time.monotonic()
        await asyncio.gather(*(core.delete_namespaced_pod(p, ns, _preload_content=False) for p in names))
        await wait_until(lambda: len(phase.gone) >= pods, max(180.0, 5.0 * pods), *watches)
        released = False
        for _ in range(120):  # 60 s
            if released := await pools_released(custom, tag):
                break
            await asyncio.sleep(0.5)
        return interfaces_row(phase, pods, start, cpu_s, requests, released, delete_start)
    finally:
        for w in watches:
            w.cancel()
        with contextlib.suppress(Exception):
            await delete_namespace(core, ns)  # pods (forced if still there) and NADs
        with contextlib.suppress(Exception):
            await delete_pools(custom, tag)


async def multus_phases(
    api: client.ApiClient, cluster: devcluster.Cluster, keys: list[str], pods: int, ours: Callable[[], Ours]
) -> tuple[list[dict[str, Any]], str]:
    """The phases ``keys`` (of :data:`MULTUS_PHASES`, in order), ``pods`` pods each, on one
    real node with Multus started for them, ip-scheduler (``ours()``) running throughout.

    Installs the NAD CRD if missing, starts :data:`NODE`, runs :func:`measure` per phase; at
    the end stops the scheduler, stops and tears down the node (its Node deleted), removes the
    NADs' bridges and the CRD if it installed it, whatever happened. Returns the rows, and ""
    or why the phases were skipped (not root, ...)."""
    missing = realnode.prerequisites()
    if missing:
        reason = f"{','.join(keys)}: skipped, a real node needs {', '.join(missing)}"
        print(f"bench: {reason}", file=sys.stderr)
        return [], reason
    installed = await asyncio.to_thread(install_nad_crd, cluster)
    rows: list[dict[str, Any]] = []
    layout: realnode.Layout | None = None
    try:
        try:
            layout = await asyncio.to_thread(cluster.start_real_node, NODE, 180, True)
        except binaries.DevclusterError as e:
            reason = f"{','.join(keys)}: the Multus real node did not start: {e}"
            print(f"bench: {reason}", file=sys.stderr)
            return [{"phase": k, "pods": pods, "error": str(e), "correct": False} for k in keys], reason
        sched = ours()
        try:
            await sched.start()
            for i, key in enumerate(keys):
                try:
                    rows.append(await measure(api, cluster, layout, key, pods, i))
                except Exception as e:  # the next phase and the teardown still run
                    print(f"bench: {key}: {e!r}", file=sys.stderr)
                    rows.append({"phase": key, "pods": pods, "error": repr(e), "correct": False})
        finally:
            await sched.stop()
    finally:
        await asyncio.to_thread(cluster.stop_real_node, NODE, True)
        if layout is not None:
            await asyncio.to_thread(delete_bridges, layout, max(INTERFACES.values()))
        if installed:
            await asyncio.to_thread(kubectl, cluster, "delete", "crd", NAD_CRD_NAME, "--ignore-not-found")
    return rows, ""
