#!/usr/bin/env python3
"""Benchmark: ip-scheduler against kube-scheduler, same workload, same run.

On a dev cluster (hack/devcluster.py) with N kwok nodes, every phase measures
until all its pods are bound, each scheduler on its own process:

- ``ip-scheduler``: NodeIPPools of C addresses per node;
- ``kube-scheduler (qps 50)``: the same Kubernetes release with its shipped
  client QPS/burst (50/100), the capacity as extended resource
  ``ipscheduler.io/underlay-ip: C`` on every node and a request of 1 per pod;
- ``kube-scheduler (qps 1000)``: the same with ``qps: 1000, burst: 2000``;
- ``kube-scheduler + ip-scheduler extender``: kube-scheduler (qps 1000) calling
  ``ipscheduler extender`` for filter, prioritize, bind and preempt (the configuration of
  ``deploy/extender/``); pods request the extended resource as for kube-scheduler, and get
  an address from the node's pool as with ip-scheduler (RSS and CPU: the extender's).

Phases (``--phases``, all but ``running`` by default, in this order):

- ``ours``, ``kube50``, ``kube1000``, ``extender`` (arrival): the scheduler runs, then P pods
  are created (all at once, or at a steady R pods/s);
- ``restart``: ip-scheduler started with N pools and one Pending pod: process
  start → that pod bound;
- ``backlog-ours``, ``backlog-kube50``, ``backlog-kube1000``: B pods
  (``BACKLOG_PODS`` per preset, ``--backlog-pods``) are created and pending
  first, then a fresh scheduler process starts, as after a failover, a rollout
  or a scale-up faster than binding: time from process start to the first bind,
  and the drain rate (pods/s from process start to the last bind);
- ``contended-ours``, ``contended-kube50``, ``contended-kube1000``: the backlog phases
  again, while a client LISTs every pod of the cluster every ``CONTEND_INTERVAL`` s (as a
  dashboard or ``kubectl get pods -A -w`` does); the summary line gives each scheduler's
  drain under contention as a share of its drain without (:func:`contention_summary`);
  the contending LISTs are left out of the requests per pod;
- ``failover``: two ip-scheduler replicas with leader election over a backlog of
  B pods, the leader SIGKILLed when half are bound: the standby's lease
  takeover, first bind after the kill, and drain rate;
- ``running`` (not in the default list: it needs root, and builds or fetches the node
  binaries the first time): pods that really run, on one real node (containerd, runc and
  a kubelet on this machine, ``devcluster.Cluster.start_real_node``) started for the phase
  and torn down after it. ``--running-pods`` N busybox pods created at once, with
  ip-scheduler (a NodeIPPool of N addresses, ``ipscheduler-ipam`` as the CNI IPAM), then
  with kube-scheduler (qps 1000) and the reference ``host-local`` IPAM on the same bridge:
  create → Running (p50/p99, until all Running, pods/s, the node's CPU per pod), then all
  deleted at once, every third forced (``--running-forced-every``): deletion → address
  released (ours: the allocation gone from the pool's status; host-local: its reservation
  file gone), graceful and forced apart, → pod object gone, → CNI DEL (the pod's veth off
  the bridge), and the pool status writes per deleted pod. Its own table
  (:func:`running_table`), ``running`` in the JSON. Without root it is skipped, saying why
  (:func:`running_phases`).

Reported per phase: throughput (pods/s from the first create, or the
scheduler's start for a backlog, to the last bind), create→bound latency
p50/p90/p99 (ms, from watch events timestamped in this client), API server
requests per bound pod (``apiserver_request_total`` delta over the phase, all
clients, so every phase carries the same background), the scheduler's peak
RSS (MB) and CPU seconds, and correctness (no node over C; our addresses
unique and inside the node's pool). Output: a Markdown table on stdout, a JSON
file and, when matplotlib is installed, a PNG of bound pods over time.

    make bench                                               # --preset small
    .venv/bin/python hack/bench.py --preset small            # 100 nodes x 20, 1000 pods
    .venv/bin/python hack/bench.py --preset small --rate 50  # steady arrival, 50 pods/s
    .venv/bin/python hack/bench.py --preset large            # 1000 nodes x 20, 10000 pods, backlog 5000
    .venv/bin/python hack/bench.py --preset xlarge           # 5000 nodes x 20, 20000 pods, backlog 20000
                                                             # (kwok leases 240 s: NODE_LEASE_SECONDS)
    sudo .venv/bin/python hack/bench.py --preset tiny --phases running   # one real node, 50 pods
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

from kubernetes_asyncio import client, config  # noqa: E402

import binaries  # noqa: E402
import devcluster  # noqa: E402
import realnode  # noqa: E402
from ipscheduler.kube.informer import RawWatch  # noqa: E402

UNDERLAY = "ipscheduler.io/underlay-ip"
ANNOTATION_IP = "ipscheduler.io/ip"
PRESETS = {
    "tiny": (10, 10, 80),
    "small": (100, 20, 1000),
    "large": (1000, 20, 10000),
    "xlarge": (5000, 20, 20000),
}
"""preset → (nodes, addresses per node, pods)."""
BACKLOG_PODS = {"tiny": 80, "small": 1000, "large": 5000, "xlarge": 20000}
"""preset → pods pending before a backlog or failover phase starts its scheduler."""
PHASES = (
    "ours",
    "restart",
    "kube50",
    "kube1000",
    "extender",
    "gang",
    "backlog-ours",
    "backlog-kube50",
    "backlog-kube1000",
    "contended-ours",
    "contended-kube50",
    "contended-kube1000",
    "failover",
    "running",
)
"""Every phase, in the order they run."""
DEFAULT_PHASES = tuple(p for p in PHASES if p != "running")
"""The phases run without ``--phases``: all but ``running`` (root, a real node)."""
CONTEND_INTERVAL = 0.5
"""Seconds between the contending client's LISTs of every pod (the contended phases)."""
GANG_SIZE = 10
"""Pods per PodGroup in the gang phase (its ``minMember``)."""
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
NODE_LEASE_SECONDS = {"xlarge": 240}
"""preset → kwok node lease duration (default 40 s, the kubelet's). kwok renews each lease
every quarter of it: 5000 nodes at 40 s are 500 lease PUTs/s, more than a 2-core API server
serves beside the phases; at 240 s, 83/s. The same cluster serves every phase, so all
phases have the same background."""
RESTART_SETTLE_S = 30.0
"""Seconds the restart phase waits before starting the scheduler (see :func:`run_phases`)."""
REAL_NODE = "real-node-1"
"""The running phase's real node (its name in the bench's cluster; its host index is free)."""
FORCED_EVERY = 3
"""The running phase force-deletes every third pod (``--running-forced-every``): the address
of a pod removed without its node confirming the teardown waits ``Releasing``."""
RUNNING_PODS = 50
"""Default pods of the running phase (``--running-pods``): see :func:`running_phases`."""
MAX_RUNNING_PODS = 110
"""The kubelet's default ``maxPods``: more would stay Pending (kube-scheduler) or be rejected."""
CONFLIST = "10-underlay.conflist"
"""The real node's CNI configuration file in ``layout.netd`` (:func:`realnode.write_files`)."""


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` in [0, 1] of ``values`` (NaN when empty)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def proc_usage(pid: int) -> tuple[float, float]:
    """(peak RSS in MB, user+system CPU seconds) of a live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"VmHWM:\s+(\d+) kB", status)
    hwm = int(m.group(1)) / 1024 if m else float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return hwm, (int(fields[11]) + int(fields[12])) / ticks


def node_range(index: int, capacity: int) -> tuple[str, str]:
    """The address range of node ``index`` (0-based): ``capacity`` addresses in 10.100.0.0/14."""
    base = ipaddress.IPv4Address("10.100.0.0") + index * 256
    return str(base + 1), str(base + capacity)


@dataclass
class Phase:
    """One measured phase: pods created by this client, bindings seen by its watch."""

    name: str
    scheduler_name: str
    extended: bool
    capacity: int
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    placement: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    group_size: int = 0
    """Pods per PodGroup (``minMember``); 0: no groups. Pod ``p<i>`` is in group ``g<i // size>``."""


async def apiserver_requests(api: client.ApiClient) -> dict[str, float]:
    """``apiserver_request_total`` summed per "VERB resource[/subresource]"."""
    resp = await api.call_api("/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False)
    raw = resp[0] if isinstance(resp, tuple) else resp
    text = (await raw.read()).decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, value = line[len("apiserver_request_total{") :].rsplit("} ", 1)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
        if labels.get("subresource"):
            key += f"/{labels['subresource']}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def per_pod_requests(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """Requests per bound pod by verb and resource, the busiest first (those >= 0.05)."""
    rows = {k: (after[k] - before.get(k, 0.0)) / max(pods, 1) for k in after}
    return {k: round(v, 2) for k, v in sorted(rows.items(), key=lambda kv: -kv[1]) if v >= 0.05}


async def new_namespace(core: client.CoreV1Api, ns: str) -> None:
    await core.create_namespace({"metadata": {"name": ns}})
    while True:  # the ServiceAccount admission plugin needs "default"
        try:
            await core.read_namespaced_service_account("default", ns)
            return
        except client.exceptions.ApiException:
            await asyncio.sleep(0.2)


async def delete_namespace(core: client.CoreV1Api, ns: str) -> None:
    """Delete ``ns`` and wait until it is gone. Its pods go first, in one DeleteCollection
    with grace period 0 (the namespace controller deleting 10 000 pods one by one took
    about five minutes between two phases of the large preset). That request may outlive
    the API server's request timeout with 10 000 pods: the deletion goes on, the
    namespace's deletion finishes whatever is left, so its failure is not the phase's."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(core.delete_collection_namespaced_pod(ns, grace_period_seconds=0), 90)
    await core.delete_namespace(ns)
    while True:  # wait for the namespace (and its pods, so their addresses) to be gone
        try:
            await core.read_namespace(ns)
            await asyncio.sleep(1)
        except client.exceptions.ApiException:
            return


def pod_body(name: str, scheduler_name: str, extended: bool, group: str = "") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    if extended:
        container["resources"] = {"requests": {UNDERLAY: "1"}, "limits": {UNDERLAY: "1"}}
    return {
        "metadata": {"name": name, **({"labels": {POD_GROUP_LABEL: group}} if group else {})},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        },
    }


async def watch_bindings(
    core: client.CoreV1Api, ns: str, phase: Phase, want: int, done: asyncio.Event
) -> None:
    """Record the first time each pod of ``ns`` is seen with a nodeName.

    Raw dicts, no model deserialization: a watcher that falls behind is
    closed by the API server ("Forcing pods watcher close due to
    unresponsiveness"); then the watch resumes from the last resourceVersion
    (or re-lists after 410 Gone).
    """
    rv = ""
    while True:
        if not rv:
            listed = await core.list_namespaced_pod(ns, _preload_content=False)
            body = json.loads(await listed.read())
            rv = body["metadata"]["resourceVersion"]
            for obj in body["items"]:
                if _seen_bound(obj, phase) and len(phase.bound) >= want:
                    done.set()
                    return
        w = RawWatch()
        try:
            async with w.stream(
                core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=3600
            ) as stream:
                async for ev in stream:
                    obj = ev["raw_object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if _seen_bound(obj, phase) and len(phase.bound) >= want:
                        done.set()
                        return
        except client.exceptions.ApiException as e:
            if e.status != 410:
                raise
            rv = ""


def _seen_bound(obj: dict[str, Any], phase: Phase) -> bool:
    """Record ``obj``'s binding if it is bound and new; True if it was recorded."""
    pname = obj["metadata"]["name"]
    node = obj["spec"].get("nodeName")
    if not node or pname in phase.bound:
        return False
    phase.bound[pname] = time.monotonic()
    annotations = obj["metadata"].get("annotations") or {}
    phase.placement[pname] = (node, annotations.get(ANNOTATION_IP))
    return True


def control_plane_cpu(cluster: devcluster.Cluster) -> float:
    """CPU seconds used so far by kube-apiserver, etcd, kube-controller-manager and kwok."""
    total = 0.0
    for info in cluster.state.get("pids", {}).values():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += proc_usage(int(info["pid"]))[1]
    return total


async def create_pods(
    core: client.CoreV1Api, ns: str, phase: Phase, pods: int, rate: float | None, start: float
) -> None:
    """Create ``pods`` pods of ``phase`` in ``ns``: all at once (50 in flight), or at ``rate``
    pods/s from ``start``."""
    sem = asyncio.Semaphore(50)

    async def create(i: int) -> None:
        group = f"g{i // phase.group_size}" if phase.group_size else ""
        async with sem:
            phase.created[f"p{i}"] = time.monotonic()
            await core.create_namespaced_pod(
                ns, pod_body(f"p{i}", phase.scheduler_name, phase.extended, group), _preload_content=False
            )

    if rate:
        tasks = []
        for i in range(pods):
            tasks.append(asyncio.create_task(create(i)))
            await asyncio.sleep(max(0.0, start + (i + 1) / rate - time.monotonic()))
        await asyncio.gather(*tasks)
    else:
        await asyncio.gather(*(create(i) for i in range(pods)))


async def create_podgroups(api: client.ApiClient, ns: str, groups: int, size: int) -> None:
    """PodGroups ``g0``..``g<groups-1>`` in ``ns``, each with ``minMember`` ``size``."""
    custom = client.CustomObjectsApi(api)
    sem = asyncio.Semaphore(50)

    async def one(i: int) -> None:
        body = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": f"g{i}"},
            "spec": {"minMember": size},
        }
        async with sem:
            await custom.create_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", ns, "podgroups", body
            )

    await asyncio.gather(*(one(i) for i in range(groups)))


async def run_phase(
    phase: Phase,
    api: client.ApiClient,
    pods: int,
    rate: float | None,
    sched: SchedulerProcess,
    index: int,
    cluster: devcluster.Cluster,
    backlog: bool = False,
    profile: str | None = None,
    contended: bool = False,
) -> dict[str, Any]:
    """Measure ``sched`` placing ``pods`` pods of ``phase`` until all are bound (or a timeout).

    ``contended`` (with ``backlog``): a client LISTs every pod of the cluster every
    :data:`CONTEND_INTERVAL` s while the scheduler drains (:func:`contend`); its LISTs are
    not counted in the requests per pod, and the row says how many it made.

    Arrival (``backlog`` False): ``sched`` runs first (started and waited for if it is
    not running yet), then the pods are created. Backlog: every pod is created
    and pending first, then ``sched`` is started as a fresh process, as after a failover
    or a rollout; the phase then also reports the time from process start to the first
    bind and the drain rate (pods bound / seconds from process start to the last bind).
    ``profile``: a py-spy profile of ``sched`` over the phase into that file.
    """
    core = client.CoreV1Api(api)
    ns = f"bench-{index}"
    if not backlog and sched.pid is None:
        await sched.start()
    await new_namespace(core, ns)
    if phase.group_size:
        await create_podgroups(api, ns, -(-pods // phase.group_size), phase.group_size)
    done = asyncio.Event()
    watch_task = asyncio.create_task(watch_bindings(core, ns, phase, pods, done))
    await asyncio.sleep(0.5)
    if backlog:
        await create_pods(core, ns, phase, pods, None, time.monotonic())
    requests_before = await apiserver_requests(api)  # a backlog's creates are not counted
    cp_before = control_plane_cpu(cluster)
    if backlog:
        pid = await sched.start(wait_ready=False)
        cpu_before = 0.0  # a fresh process: its start-up counts
        start = sched.started_at
    else:
        assert sched.pid is not None
        pid = sched.pid
        cpu_before = proc_usage(pid)[1]
        start = time.monotonic()
        await create_pods(core, ns, phase, pods, rate, start)
    profiler = await start_profiler(profile, pid)
    lists = [0]
    contender = asyncio.create_task(contend(core, done, lists)) if contended else None
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), timeout=max(300, pods / 5))
    if contender is not None:
        contender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await contender
    if watch_task.done() and watch_task.exception():
        print(f"bench: watch failed: {watch_task.exception()!r}", file=sys.stderr)
    watch_task.cancel()
    await stop_profiler(profiler, profile)
    requests_after = await apiserver_requests(api)
    if contended:
        requests_after["LIST pods"] = requests_after.get("LIST pods", 0.0) - lists[0]
    result = measure(phase, pods, start, pid, cpu_before, requests_after, requests_before)
    result["control_plane_cpu_s"] = round(control_plane_cpu(cluster) - cp_before, 2)
    if backlog:
        result["phase"] = f"backlog: {phase.name}"
        result["first_bind_s"] = round(min(phase.bound.values(), default=float("nan")) - start, 2)
        result["drain_pods_per_s"] = result["throughput_pods_per_s"]
    if contended:
        result["phase"] = f"contended: {phase.name}"
        result["contending_lists"] = lists[0]
    await delete_namespace(core, ns)
    return result


async def contend(core: client.CoreV1Api, done: asyncio.Event, lists: list[int]) -> None:
    """LIST every pod of the cluster every :data:`CONTEND_INTERVAL` s until ``done``, counting
    the LISTs in ``lists[0]`` (a failed LIST is retried at the next tick).

    Each body is read to its end, as a dashboard reads it (not decoded: the bench shares the
    machine), and the connection goes back to the pool: an unread body of 5000 pods kept its
    connection, and once the pool's were all taken the bench's own requests waited forever.
    """
    while not done.is_set():
        started = time.monotonic()
        with contextlib.suppress(Exception):
            response = await core.list_pod_for_all_namespaces(_preload_content=False)
            try:
                await response.read()
            finally:
                response.release()
            lists[0] += 1
        await asyncio.sleep(max(0.0, CONTEND_INTERVAL - (time.monotonic() - started)))


def contention_summary(results: list[dict[str, Any]]) -> list[str]:
    """For each scheduler with a ``backlog: X`` and a ``contended: X`` row, its drain under
    contention as a share of its drain without, e.g. ``contended: ip-scheduler drains at
    91 % of its uncontended rate (52.0 against 57.1 pods/s, 120 LISTs)``."""
    drains = {r["phase"]: r for r in results if "drain_pods_per_s" in r}
    out = []
    for name, row in drains.items():
        if not name.startswith("contended: "):
            continue
        label = name.removeprefix("contended: ")
        base = drains.get(f"backlog: {label}")
        if base is None or not base["drain_pods_per_s"]:
            continue
        share = 100 * row["drain_pods_per_s"] / base["drain_pods_per_s"]
        out.append(
            f"contended: {label} drains at {share:.0f} % of its uncontended rate "
            f"({row['drain_pods_per_s']} against {base['drain_pods_per_s']} pods/s, "
            f"{row.get('contending_lists', 0)} LISTs)"
        )
    return out


def measure(
    phase: Phase,
    pods: int,
    start: float,
    pid: int,
    cpu_before: float,
    requests_after: dict[str, float],
    requests_before: dict[str, float],
) -> dict[str, Any]:
    """The result row of ``phase``: throughput from ``start`` to the last bind, latency from
    each pod's create to its bind, requests, the scheduler's (``pid``) peak RSS and CPU,
    and correctness."""
    end = max(phase.bound.values(), default=time.monotonic())
    rss, cpu_after = proc_usage(pid)
    latencies = [(phase.bound[p] - phase.created[p]) * 1000 for p in phase.bound if p in phase.created]
    per_node: dict[str, int] = {}
    for node, _ in phase.placement.values():
        per_node[node] = per_node.get(node, 0) + 1
    ips = [(node, ip) for node, ip in phase.placement.values() if ip]
    return {
        "phase": phase.name,
        "pods": pods,
        "bound": len(phase.bound),
        "seconds": round(end - start, 2),
        "throughput_pods_per_s": round(len(phase.bound) / max(end - start, 1e-9), 1),
        "latency_ms": {
            q: round(percentile(latencies, v), 1) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        },
        "api_requests_per_bound_pod": round(
            (sum(requests_after.values()) - sum(requests_before.values())) / max(len(phase.bound), 1), 2
        ),
        "api_requests_per_bound_pod_by_kind": per_pod_requests(
            requests_before, requests_after, len(phase.bound)
        ),
        "scheduler_peak_rss_mb": round(rss, 1),
        "scheduler_cpu_s": round(cpu_after - cpu_before, 2),
        "max_pods_per_node": max(per_node.values(), default=0),
        "over_capacity_nodes": sum(1 for n in per_node.values() if n > phase.capacity),
        "addresses": len(ips),
        "addresses_unique": len({ip for _, ip in ips}) == len(ips),
        "addresses_in_node_pool": all(ip_in_node_pool(node, ip, phase.capacity) for node, ip in ips),
        "bound_over_time": sorted(round(t - start, 3) for t in phase.bound.values()),
        "groups_partial": _partial_groups(phase),
    }


def _partial_groups(phase: Phase) -> int:
    """Groups of a gang phase with some but not all of their pods bound (0 without groups)."""
    if not phase.group_size:
        return 0
    counts: dict[int, int] = {}
    for name in phase.bound:
        g = int(name[1:]) // phase.group_size
        counts[g] = counts.get(g, 0) + 1
    return sum(1 for n in counts.values() if n != phase.group_size)


def ip_in_node_pool(node: str, ip: str, capacity: int) -> bool:
    """Is ``ip`` inside the bench pool of ``node`` (``node-<i>``)?"""
    m = re.fullmatch(r"node-(\d+)", node)
    if not m:
        return False
    first, last = node_range(int(m.group(1)) - 1, capacity)
    try:
        addr = ipaddress.IPv4Address(ip)
    except ValueError:
        return False
    return ipaddress.IPv4Address(first) <= addr <= ipaddress.IPv4Address(last)


async def prepare(api: client.ApiClient, nodes: list[str], capacity: int) -> None:
    """Extended resource on every node, one NodeIPPool per node."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    sem = asyncio.Semaphore(50)

    async def one(i: int, node: str) -> None:
        async with sem:
            res = {UNDERLAY: str(capacity)}
            await core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res}})
            first, last = node_range(i, capacity)
            body = {
                "apiVersion": "ipscheduler.io/v1alpha1",
                "kind": "NodeIPPool",
                "metadata": {"name": f"bench-{node}"},
                "spec": {"nodeName": node, "addresses": [f"{first}-{last}"]},
            }
            try:
                await custom.create_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", body)
            except client.exceptions.ApiException as e:
                if e.status != 409:
                    raise

    await asyncio.gather(*(one(i, n) for i, n in enumerate(nodes)))


class SchedulerProcess:
    """A scheduler under test as a child process: :meth:`start`, :attr:`pid`, :meth:`stop`."""

    def __init__(self) -> None:
        self.started_at = 0.0
        """``time.monotonic()`` when the process was started."""
        self.pid: int | None = None
        """The running process, None before :meth:`start` and after :meth:`stop`."""

    async def start(self, wait_ready: bool = True) -> int:
        """Start the process (``wait_ready``: return once it schedules); its pid."""
        raise NotImplementedError

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s; waits for the exit."""
        raise NotImplementedError


class Ours(SchedulerProcess):
    """``python -m ipscheduler run`` as a child process, logging to a file."""

    def __init__(
        self, python: str, kubeconfig: str, log_path: Path, extra: list[str], command: str = "run"
    ) -> None:
        super().__init__()
        self.cmd = [
            python,
            "-m",
            "ipscheduler",
            command,
            "--kubeconfig",
            kubeconfig,
            "--health-addr",
            "",
            "--secure-port",
            "0",  # several schedulers at once: none on 10259
            "--leader-elect=false",  # the failover phase's --leader-elect (later) wins
            *extra,
        ]
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None
        self._offset = 0

    async def start(self, wait_ready: bool = True) -> int:
        """Start; ``wait_ready``: wait for the start-up reconcile's log line (120 s at most)."""
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.started_at = time.monotonic()
            self.proc = await asyncio.create_subprocess_exec(*self.cmd, stdout=fd, stderr=subprocess.STDOUT)
        finally:
            os.close(fd)
        self.pid = self.proc.pid
        if wait_ready:
            deadline = time.monotonic() + 120
            while b"start-up reconcile" not in self.log():
                if time.monotonic() > deadline or self.proc.returncode is not None:
                    raise SystemExit(f"bench: ip-scheduler did not start; see {self.log_path}")
                await asyncio.sleep(0.2)
        return self.proc.pid

    def log(self) -> bytes:
        """What this process logged since its last start."""
        with open(self.log_path, "rb") as fh:
            fh.seek(self._offset)
            return fh.read()

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.pid = None

    async def kill(self) -> None:
        """SIGKILL (a crashed node or container), waiting for the exit."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.pid = None


class KubeScheduler(SchedulerProcess):
    """The real kube-scheduler of the dev cluster's release, client QPS/burst as given."""

    def __init__(self, cluster: devcluster.Cluster, qps: int, burst: int) -> None:
        super().__init__()
        self.cluster, self.qps, self.burst = cluster, qps, burst
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, wait_ready: bool = True) -> int:
        """Start; ``wait_ready``: give it 5 s to list and watch."""
        self.started_at = time.monotonic()
        self.proc = await asyncio.to_thread(
            self.cluster.start_kube_scheduler, f"kube-scheduler-{self.qps}", self.qps, self.burst
        )
        self.pid = self.proc.pid
        if wait_ready:
            await asyncio.sleep(5)
        return self.proc.pid

    async def stop(self) -> None:
        await stop_popen(self.proc)
        self.pid = None


async def stop_popen(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM ``proc`` if it runs, SIGKILL after 30 s; waits for the exit."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)


class KubeWithExtender(SchedulerProcess):
    """kube-scheduler (qps 1000) whose configuration calls ``ipscheduler extender`` (the
    extender's process is the one measured: :attr:`pid`)."""

    def __init__(self, cluster: devcluster.Cluster, extender: Ours, port: int) -> None:
        super().__init__()
        self.cluster, self.extender, self.port = cluster, extender, port
        self.kube: subprocess.Popen[bytes] | None = None

    async def start(self, wait_ready: bool = True) -> int:
        """The extender (until it serves), then kube-scheduler (given 5 s to list and watch)."""
        pid = await self.extender.start(wait_ready=True)
        self.started_at = self.extender.started_at
        deadline = time.monotonic() + 60
        while b"serving the extender verbs" not in self.extender.log() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        extenders = [
            {
                "urlPrefix": f"http://127.0.0.1:{self.port}",
                "filterVerb": "filter",
                "prioritizeVerb": "prioritize",
                "bindVerb": "bind",
                "preemptVerb": "preempt",
                "weight": 1,
                "nodeCacheCapable": True,
                "managedResources": [{"name": UNDERLAY, "ignoredByScheduler": False}],
                "httpTimeout": "5s",
            }
        ]
        self.kube = await asyncio.to_thread(
            self.cluster.start_kube_scheduler,
            "kube-scheduler-extender",
            1000,
            2000,
            "default-scheduler",
            extenders,
        )
        if wait_ready:
            await asyncio.sleep(5)
        self.pid = pid
        return pid

    async def stop(self) -> None:
        await stop_popen(self.kube)
        await self.extender.stop()
        self.pid = None


async def failover(
    api: client.ApiClient,
    pods: int,
    index: int,
    cluster: devcluster.Cluster,
    replicas: tuple[Ours, Ours],
    capacity: int,
) -> dict[str, Any]:
    """Two ip-scheduler replicas with leader election over a backlog of ``pods``; the leader
    is SIGKILLed once half of them are bound.

    Reports, beside the usual columns (over all pods; RSS and CPU of the standby), the
    seconds from the kill to the standby holding the lease (its log says so; polled every
    0.1 s) and to its first bind, and its drain rate (pods bound after it took the lease,
    per second until the last bind).
    """
    core = client.CoreV1Api(api)
    ns = f"bench-{index}"
    await new_namespace(core, ns)
    phase = Phase("failover: ip-scheduler", "ip-scheduler", extended=False, capacity=capacity)
    done = asyncio.Event()
    watch_task = asyncio.create_task(watch_bindings(core, ns, phase, pods, done))
    await asyncio.sleep(0.5)
    await create_pods(core, ns, phase, pods, None, time.monotonic())
    requests_before = await apiserver_requests(api)
    cp_before = control_plane_cpu(cluster)
    try:
        for r in replicas:
            await r.start(wait_ready=False)
        start = replicas[0].started_at
        deadline = time.monotonic() + max(300, pods / 5)
        # Polled: the bindings watch and the replicas' log files are the sources.
        while len(phase.bound) < pods // 2 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        leader = next((r for r in replicas if b"acquired lease" in r.log()), replicas[0])
        standby = replicas[1] if leader is replicas[0] else replicas[0]
        bound_at_kill = len(phase.bound)
        killed_at = time.monotonic()
        await leader.kill()
        while b"acquired lease" not in standby.log() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        acquired_at = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=max(0.0, deadline - time.monotonic()))
        watch_task.cancel()
        assert standby.pid is not None
        result = measure(phase, pods, start, standby.pid, 0.0, await apiserver_requests(api), requests_before)
        result["control_plane_cpu_s"] = round(control_plane_cpu(cluster) - cp_before, 2)
    finally:
        for r in replicas:
            await r.stop()
    after = sorted(t for t in phase.bound.values() if t > acquired_at)
    result.update(
        bound_at_kill=bound_at_kill,
        lease_takeover_s=round(acquired_at - killed_at, 2),
        first_bind_s=round(after[0] - killed_at, 2) if after else float("nan"),
        drain_pods_per_s=round(len(after) / max(after[-1] - acquired_at, 1e-9), 1) if after else 0.0,
        standby_bound=len(after),
    )
    await delete_namespace(core, ns)
    return result


@dataclass
class RunningPhase:
    """Pods on the real node, as this client's watches see them (``time.monotonic()``)."""

    name: str
    scheduler_name: str
    released_means: str
    created: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    """First time the pod was seen with phase Running and a podIP."""
    pod_ip: dict[str, str] = field(default_factory=dict)
    annotated_ip: dict[str, str | None] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)
    state: dict[str, str] = field(default_factory=dict)
    """The last phase (and a waiting container's reason) seen, to say why a pod did not run."""
    delete_requested: dict[str, float] = field(default_factory=dict)
    released: dict[str, float] = field(default_factory=dict)
    """The pod's address seen free again in its IPAM's own record."""
    gone: dict[str, float] = field(default_factory=dict)
    """The pod object's DELETED event."""

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name, now = meta["name"], time.monotonic()
        self.uids[name] = meta["uid"]
        if kind == "DELETED":
            self.gone.setdefault(name, now)
            return
        status = obj.get("status") or {}
        waiting = [
            str((c.get("state") or {}).get("waiting", {}).get("reason", ""))
            for c in status.get("containerStatuses") or []
        ]
        self.state[name] = " ".join([str(status.get("phase", "?")), *filter(None, waiting)])
        if status.get("phase") == "Running" and status.get("podIP") and name not in self.running:
            self.running[name] = now
            self.pod_ip[name] = status["podIP"]
            self.annotated_ip[name] = (meta.get("annotations") or {}).get(ANNOTATION_IP)


async def watch_raw(
    list_func: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    handle: Callable[[str, dict[str, Any]], None],
    **kwargs: Any,
) -> None:
    """LIST then WATCH ``list_func(*args, **kwargs)`` until cancelled, calling ``handle(type,
    obj)`` for every listed object (type ``LISTED``) and every event, as raw dicts; resumes a
    closed watch from its last resourceVersion, re-lists after 410 Gone."""
    rv = ""
    while True:
        if not rv:
            listed = await list_func(*args, _preload_content=False, **kwargs)
            body = json.loads(await listed.read())
            rv = body["metadata"]["resourceVersion"]
            for obj in body["items"]:
                handle("LISTED", obj)
        w = RawWatch("object")
        try:
            async with w.stream(
                list_func, *args, resource_version=rv, timeout_seconds=3600, **kwargs
            ) as stream:
                async for ev in stream:
                    obj = ev["raw_object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    handle(ev["type"], obj)
        except client.exceptions.ApiException as e:
            if e.status != 410:
                raise
            rv = ""


async def wait_until(check: Callable[[], bool], seconds: float, *watches: asyncio.Task[None]) -> bool:
    """Poll ``check`` every 50 ms until true (True), ``seconds`` passed or a watch died (False).
    The times measured are the watches' own; the polling only decides when to go on."""
    deadline = time.monotonic() + seconds
    while not check():
        for w in watches:
            if w.done():
                print(
                    f"bench: watch ended: {w.exception() if not w.cancelled() else 'cancelled'!r}",
                    file=sys.stderr,
                )
                return False
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def busybox_pod(name: str, scheduler_name: str) -> dict[str, Any]:
    """A busybox pod for the real node that ends on SIGTERM (a shell trapping it, a grace period
    of 10 s, as a well-behaved workload: the kubelet stops it, tears its sandbox down and
    reports it terminal before the pod object goes), its label as nodeSelector, its taint
    tolerated (its images are imported, never pulled)."""
    command = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
    return {
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 10,
            "nodeSelector": {realnode.LABEL: "true"},
            "tolerations": [realnode.TOLERATION],
            "containers": [{"name": "main", "image": binaries.BUSYBOX_IMAGE, "command": command}],
        },
    }


def node_cpu(cluster: devcluster.Cluster, layout: realnode.Layout) -> float:
    """CPU seconds so far of the real node's kubelet and containerd, with the children they
    waited for (the CNI plugins, runc shims' ``start``), and of its live runc shims with theirs
    (runc). An exited shim's time is lost, so this counts pod start-up, not teardown."""
    pids = [
        int(cluster.state["pids"][f"{c}@{layout.name}"]["pid"])
        for c in ("kubelet", "containerd")
        if f"{c}@{layout.name}" in cluster.state["pids"]
    ]
    needle = str(layout.socket).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and needle in cmdline:
                    pids.append(int(proc.name))
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks  # utime stime cutime cstime
    return total


def loaded_ipam(layout: realnode.Layout) -> str | None:
    """The IPAM type of the CNI network containerd has loaded for the node (``crictl info``)."""
    with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
        proc = subprocess.run(
            [*realnode.crictl(layout), "--timeout", "5s", "info"],
            capture_output=True,
            text=True,
            check=False,
            timeout=15,
        )
        for net in (json.loads(proc.stdout).get("cniconfig") or {}).get("Networks") or []:
            cfg = net.get("Config") or {}
            if cfg.get("Name") == realnode.NETWORK_NAME:
                return str(cfg["Plugins"][0]["Network"]["ipam"]["type"])
    return None


def write_conflist(layout: realnode.Layout, text: str) -> None:
    """Replace the node's CNI configuration file with ``text`` so that containerd reloads it.

    containerd reloads on a write, a rename or a removal in ``netd``, not on a create (which a
    file renamed into it is): the new file is renamed in, so it is whole at every moment, then
    written over with the same bytes."""
    tmp = layout.root / f".{CONFLIST}.tmp"
    tmp.write_text(text)
    path = layout.netd / CONFLIST
    os.replace(tmp, path)
    with open(path, "r+") as fh:  # a write event, the content unchanged
        fh.write(text)


async def set_conflist(layout: realnode.Layout, text: str, ipam: str, within: float = 30) -> None:
    """:func:`write_conflist`, then wait (``within`` s) until containerd has loaded ``ipam``."""
    await asyncio.to_thread(write_conflist, layout, text)
    deadline = time.monotonic() + within
    while await asyncio.to_thread(loaded_ipam, layout) != ipam:
        if time.monotonic() > deadline:
            raise RuntimeError(f"containerd of {layout.name} did not load the {ipam} CNI configuration")
        await asyncio.sleep(0.5)


def host_local_conflist(ipscheduler_conflist: str, layout: realnode.Layout, first: str, last: str) -> str:
    """The node's network with the reference ``host-local`` IPAM instead of ``ipscheduler-ipam``:
    the same ``bridge`` plugin and settings, addresses ``first``-``last`` of the node's subnet,
    its reservations under the node's root."""
    conf = json.loads(ipscheduler_conflist)
    bridge = conf["plugins"][0]
    bridge.pop("capabilities", None)
    bridge["ipam"] = {
        "type": "host-local",
        "ranges": [
            [{"subnet": layout.subnet, "rangeStart": first, "rangeEnd": last, "gateway": layout.node_ip}]
        ],
        "dataDir": str(host_local_dir(layout)),
    }
    return json.dumps(conf, indent=2) + "\n"


def host_local_dir(layout: realnode.Layout) -> Path:
    """host-local's ``dataDir`` for the node; it keeps one file per reserved address in
    ``<dataDir>/<network name>/``."""
    return layout.root / "host-local"


async def track_pool_releases(api: client.ApiClient, pool: str, phase: RunningPhase) -> None:
    """Mark a deleted pod released when its UID is no longer in ``pool``'s ``status.allocations``."""
    custom = client.CustomObjectsApi(api)

    def handle(kind: str, obj: dict[str, Any]) -> None:
        allocations = (obj.get("status") or {}).get("allocations") or {}
        now = time.monotonic()
        for name in phase.delete_requested:
            uid = phase.uids.get(name)
            if name not in phase.released and uid and uid not in allocations:
                phase.released[name] = now

    await watch_raw(
        custom.list_cluster_custom_object,
        ("ipscheduler.io", "v1alpha1", "nodeippools"),
        handle,
        field_selector=f"metadata.name={pool}",
    )


async def track_host_local_releases(data_dir: Path, phase: RunningPhase) -> None:
    """Mark a deleted pod released when host-local's file for its address is gone (every 20 ms)."""
    while True:
        if phase.delete_requested:
            try:
                present = set(os.listdir(data_dir))
            except FileNotFoundError:
                present = set()
            now = time.monotonic()
            for name in list(phase.delete_requested):
                ip = phase.pod_ip.get(name)
                if name not in phase.released and ip and ip not in present:
                    phase.released[name] = now
        await asyncio.sleep(0.02)


def bridge_ports(layout: realnode.Layout) -> set[str]:
    """The host ends of the veths on the node's bridge: one per pod sandbox with a network."""
    try:
        return set(os.listdir(f"/sys/class/net/{layout.bridge}/brif"))
    except FileNotFoundError:
        return set()


async def track_veths(layout: realnode.Layout, veths: set[str], gone: dict[str, float]) -> None:
    """Record when each of ``veths`` leaves the node's bridge (every 20 ms): the bridge plugin's
    CNI DEL removed the pod's interface, after its IPAM's DEL, so the address is off the wire."""
    while True:
        now = time.monotonic()
        for v in veths - bridge_ports(layout) - gone.keys():
            gone[v] = now
        await asyncio.sleep(0.02)


async def measure_running(
    api: client.ApiClient,
    cluster: devcluster.Cluster,
    layout: realnode.Layout,
    phase: RunningPhase,
    pods: int,
    index: int,
    addresses: tuple[str, str],
    track_releases: Callable[[RunningPhase], Coroutine[Any, Any, None]],
    forced_every: int = FORCED_EVERY,
) -> dict[str, Any]:
    """Create ``pods`` busybox pods of ``phase`` at once (50 requests in flight), wait until all
    are Running, delete them all at once (every ``forced_every``-th, from the last, forced:
    ``gracePeriodSeconds: 0``, as ``kubectl delete --force --grace-period=0``; 0: none), wait
    until every address is released and every pod object gone; the result row, the graceful
    and the forced deletions' times apart, and the API requests per pod of the deletions
    (``apiserver_request_total``, from the first deletion to the last release).
    ``addresses``: the first and last address pods may get."""
    core = client.CoreV1Api(api)
    ns = f"bench-running-{index}"
    await new_namespace(core, ns)
    watches = [
        asyncio.create_task(watch_raw(core.list_namespaced_pod, (ns,), phase.on_pod)),
        asyncio.create_task(track_releases(phase)),
    ]
    sem = asyncio.Semaphore(50)
    try:
        await asyncio.sleep(0.5)
        names = [f"p{i}" for i in range(pods)]

        async def create(name: str) -> None:
            async with sem:
                phase.created[name] = time.monotonic()
                await core.create_namespaced_pod(
                    ns, busybox_pod(name, phase.scheduler_name), _preload_content=False
                )

        forced = {n for i, n in enumerate(names) if forced_every and (i + 1) % forced_every == 0}

        async def delete(name: str) -> None:
            async with sem:
                phase.delete_requested[name] = time.monotonic()
                grace = 0 if name in forced else None
                await core.delete_namespaced_pod(name, ns, grace_period_seconds=grace, _preload_content=False)

        cpu_before = node_cpu(cluster, layout)
        start = time.monotonic()
        await asyncio.gather(*(create(n) for n in names))
        await wait_until(lambda: len(phase.running) >= pods, max(180.0, 3.0 * pods), *watches)
        cpu_create = node_cpu(cluster, layout) - cpu_before
        end_running = max(phase.running.values(), default=time.monotonic())
        await asyncio.sleep(1)  # the last status writes settle before the deletions start
        veths = bridge_ports(layout)
        veth_gone: dict[str, float] = {}
        watches.append(asyncio.create_task(track_veths(layout, veths, veth_gone)))
        requests_before = await apiserver_requests(api)
        delete_start = time.monotonic()
        await asyncio.gather(*(delete(n) for n in names))
        await wait_until(
            lambda: (
                len(phase.gone) >= pods
                and phase.running.keys() <= phase.released.keys()
                and len(veth_gone) >= len(veths)
            ),
            max(180.0, 2.0 * pods),
            *watches,
        )
        deletion_requests = per_pod_requests(requests_before, await apiserver_requests(api), pods)
    finally:
        for w in watches:
            w.cancel()
    await delete_namespace(core, ns)

    def pct(values: list[float]) -> dict[str, float]:
        return {q: round(percentile(values, v), 2) for q, v in (("p50", 0.5), ("p99", 0.99))}

    up = [phase.running[n] - phase.created[n] for n in phase.running if n in phase.created]
    released = [phase.released[n] - phase.delete_requested[n] for n in phase.released if n not in forced]
    released_forced = [phase.released[n] - phase.delete_requested[n] for n in phase.released if n in forced]
    gone = [phase.gone[n] - phase.delete_requested[n] for n in phase.gone if n in phase.delete_requested]
    torn_down = [t - delete_start for t in veth_gone.values()]
    first, last = (ipaddress.IPv4Address(a) for a in addresses)
    ips = list(phase.pod_ip.values())
    mismatches = sum(1 for n, ip in phase.pod_ip.items() if phase.annotated_ip.get(n) != ip)
    row: dict[str, Any] = {
        "phase": phase.name,
        "pods": pods,
        "running": len(phase.running),
        "create_to_running_s": pct(up),
        "all_running_s": round(end_running - start, 2),
        "running_pods_per_s": round(len(phase.running) / max(end_running - start, 1e-9), 1),
        "node_cpu_ms_per_pod": round(1000 * cpu_create / max(len(phase.running), 1), 1),
        "released": len(phase.released),
        "released_means": phase.released_means,
        "delete_to_released_s": pct(released),
        "forced": len(forced),
        "forced_delete_to_released_s": pct(released_forced),
        "deletion_requests_per_pod": deletion_requests,
        "pool_writes_per_deleted_pod": round(
            sum(v for k, v in deletion_requests.items() if k.endswith("nodeippools/status")), 2
        ),
        "all_released_s": round(max(phase.released.values(), default=delete_start) - delete_start, 2),
        "gone": len(phase.gone),
        "delete_to_gone_s": pct(gone),
        "all_gone_s": round(max(phase.gone.values(), default=delete_start) - delete_start, 2),
        "veths": len(veths),
        "veths_gone": len(veth_gone),
        "delete_to_cni_del_s": pct(torn_down),
        "all_cni_del_s": round(max(torn_down, default=0.0), 2),
        "addresses_unique": len(set(ips)) == len(ips),
        "addresses_in_range": all(first <= ipaddress.IPv4Address(ip) <= last for ip in ips),
        "not_running": {n: phase.state.get(n, "never seen") for n in names if n not in phase.running},
    }
    if phase.scheduler_name == "ip-scheduler":
        row["pod_ip_not_reserved"] = mismatches
    row["correct"] = bool(
        row["running"] == pods
        and row["released"] == pods
        and row["gone"] == pods
        and row["veths_gone"] == row["veths"] == pods
        and row["addresses_unique"]
        and row["addresses_in_range"]
        and not row.get("pod_ip_not_reserved")
    )
    return row


async def running_phases(
    api: client.ApiClient,
    cluster: devcluster.Cluster,
    pods: int,
    ours: Callable[[], Ours],
    forced_every: int = FORCED_EVERY,
) -> tuple[list[dict[str, Any]], str]:
    """The ``running`` phase: pods that really run, with each IPAM, on one real node.

    Starts real node :data:`REAL_NODE` (containerd + runc + kubelet on this machine, the
    reference ``bridge`` CNI plugin on its own bridge and subnet), then measures, each time
    with ``pods`` busybox pods (:func:`busybox_pod`: ending on SIGTERM, the real-node label as
    nodeSelector, its taint tolerated) created at once and later deleted at once:

    1. ip-scheduler (``ours()``), a NodeIPPool of ``pods`` addresses of the node's subnet
       (gateway the node's bridge, as ``examples/realnode.yaml``), ``ipscheduler-ipam`` as
       the CNI IPAM: create → Running (phase Running with a podIP in this client's watch),
       the podIP checked against the reserved address (annotation ``ipscheduler.io/ip``);
       deletion request → the pod's allocation (by UID) gone from the pool's
       ``status.allocations``: released;
    2. kube-scheduler (qps 1000) with the reference ``host-local`` IPAM over the same
       address range and bridge (the conflist rewritten, containerd's reload awaited through
       ``crictl info``): create → Running; deletion request → host-local's file for the
       address gone (CNI DEL): released. The ipscheduler conflist is put back afterwards.

    For both, deletion → pod object gone too, and the CPU the node spent per pod on the
    way to Running (kubelet, containerd, CNI plugins, shims and runc: :func:`node_cpu`).
    The node is stopped and torn down (bridge, cgroups, mounts, network namespaces) and its
    Node deleted at the end, whatever happened.

    The default :data:`RUNNING_PODS` (50) is what one real node on a 2-core machine takes well.
    Start-up is CPU-bound: a pod costs the node 0.16-0.23 CPU-seconds to get Running (the
    pause sandbox and the container through runc, a shim, two CNI plugins; measured by
    :func:`node_cpu`), beside the API server's, the scheduler's and the kubelet's status
    writes on the same two cores. The rate to Running stayed flat at 3.3-4.9 pods/s for
    30, 50 and 100 pods (all 100 Running after 26 s), so N only lengthens the queue:
    create → Running p50 is about N / (2 x rate), 8 s at 30, 9-12 s at 50, 22-25 s at 100.
    50 gives a p99 of 50 samples in about a minute for the whole phase without keeping the
    host saturated for long; 100 works too. The kubelet's ``maxPods`` (110) is the hard
    limit (:data:`MAX_RUNNING_PODS`).

    Deletion: the pods end on SIGTERM within their grace period, so the kubelet stops them,
    runs CNI DEL and reports them terminal before the API server removes the pod object;
    ip-scheduler releases on that terminal report, after CNI DEL, and host-local at CNI DEL.
    "→ CNI DEL" (the pod's veth leaving the bridge, timed from the first deletion request)
    shows that moment for both. Every ``forced_every``-th pod is force-deleted (grace period
    0): the API server removes it at once, without the kubelet; ip-scheduler holds its
    address Releasing until the node has been Ready for ``--release-delay`` (docs/cni.md,
    "Deletions the kubelet does not confirm"), host-local frees it at CNI DEL. Their times are
    reported apart ("→ released, forced").

    Returns the two rows, and "" or why the phase was skipped (not root, no cgroups, ...).
    """
    missing = realnode.prerequisites()
    if missing:
        reason = f"running: skipped, a real node needs {', '.join(missing)}"
        print(f"bench: {reason}", file=sys.stderr)
        return [], reason
    try:
        layout = await asyncio.to_thread(cluster.start_real_node, REAL_NODE)
    except binaries.DevclusterError as e:
        reason = f"running: the real node did not start: {e}"
        print(f"bench: {reason}", file=sys.stderr)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(cluster.stop_real_node, REAL_NODE, True)
        return [{"phase": "running", "pods": pods, "error": str(e), "correct": False}], reason
    conf_path = layout.netd / CONFLIST
    original = conf_path.read_text()
    subnet = ipaddress.ip_network(layout.subnet)
    addresses = (str(subnet[10]), str(subnet[10 + pods - 1]))
    rows: list[dict[str, Any]] = []
    custom = client.CustomObjectsApi(api)
    pool = f"bench-{REAL_NODE}"
    try:
        body = {
            "apiVersion": "ipscheduler.io/v1alpha1",
            "kind": "NodeIPPool",
            "metadata": {"name": pool},
            "spec": {
                "nodeName": layout.name,
                "addresses": [f"{addresses[0]}-{addresses[1]}"],
                "subnets": [
                    {"cidr": layout.subnet, "gateway": layout.node_ip, "routes": [{"dst": "0.0.0.0/0"}]}
                ],
            },
        }
        await custom.create_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", body)
        sched = ours()
        try:
            await sched.start()
            phase = RunningPhase(
                "ip-scheduler + ipscheduler-ipam", "ip-scheduler", "allocation gone from the pool status"
            )
            rows.append(
                await measure_running(
                    api,
                    cluster,
                    layout,
                    phase,
                    pods,
                    0,
                    addresses,
                    lambda p: track_pool_releases(api, pool, p),
                    forced_every,
                )
            )
            # The pool's finalizer is ip-scheduler's to remove: delete the pool while it runs.
            await custom.delete_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", pool)
            for _ in range(100):
                try:
                    await custom.get_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", pool)
                except client.exceptions.ApiException:
                    break
                await asyncio.sleep(0.1)
        finally:
            await sched.stop()
        await set_conflist(layout, host_local_conflist(original, layout, *addresses), "host-local")
        kube = KubeScheduler(cluster, 1000, 2000)
        try:
            await kube.start()
            phase = RunningPhase(
                "kube-scheduler (qps 1000) + host-local",
                "default-scheduler",
                "host-local's address file gone (CNI DEL)",
            )
            data_dir = host_local_dir(layout) / realnode.NETWORK_NAME
            rows.append(
                await measure_running(
                    api,
                    cluster,
                    layout,
                    phase,
                    pods,
                    1,
                    addresses,
                    lambda p: track_host_local_releases(data_dir, p),
                    forced_every,
                )
            )
        finally:
            await kube.stop()
    finally:
        try:
            if conf_path.exists() and conf_path.read_text() != original:
                await set_conflist(layout, original, "ipscheduler-ipam")
        finally:
            await asyncio.to_thread(cluster.stop_real_node, REAL_NODE, True)
    return rows, ""


def running_table(rows: list[dict[str, Any]]) -> str:
    """The running phase's Markdown table: seconds, "p50 / p99" per pod; → Running from the
    pod's create, the rest from its deletion request (→ CNI DEL: from the first one)."""
    head = (
        "| on a real node | running | s → Running | all Running s | pods/s | node CPU ms/pod "
        "| released | s → released | s → released, forced | all released s | s → pod gone "
        "| s → CNI DEL | pool writes/pod | correct |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['phase']}: {r['error']} |" + " |" * 12 + " NO |")
            continue

        def p(key: str, r: dict[str, Any] = r) -> str:
            return f"{r[key]['p50']} / {r[key]['p99']}"

        lines.append(
            f"| {r['phase']} | {r['running']}/{r['pods']} | {p('create_to_running_s')} "
            f"| {r['all_running_s']} | {r['running_pods_per_s']} | {r['node_cpu_ms_per_pod']} "
            f"| {r['released']}/{r['pods']} | {p('delete_to_released_s')} "
            f"| {p('forced_delete_to_released_s') if r.get('forced') else '-'} | {r['all_released_s']} "
            f"| {p('delete_to_gone_s')} | {p('delete_to_cni_del_s')} "
            f"| {r.get('pool_writes_per_deleted_pod', '-')} "
            f"| {'yes' if r['correct'] else 'NO'} |"
        )
    lines.append("")
    for r in rows:
        if "released_means" in r:
            lines.append(f"- {r['phase']}: released = {r['released_means']}")
        if r.get("pod_ip_not_reserved"):
            lines.append(
                f"- {r['phase']}: {r['pod_ip_not_reserved']} pod(s) whose podIP is not the reserved address"
            )
        for name, state in (r.get("not_running") or {}).items():
            lines.append(f"- {r['phase']}: pod {name} never Running (last seen: {state})")
        if "veths" in r and r["veths_gone"] < r["veths"]:
            lines.append(
                f"- {r['phase']}: {r['veths'] - r['veths_gone']} pod interface(s) never left the bridge"
            )
    return "\n".join(lines)


async def run_all(
    args: argparse.Namespace, cluster: devcluster.Cluster, shape: tuple[int, int, int], backlog: int
) -> Any:
    """Every phase of ``args.phases`` in order; the results and the restart figure."""
    n_nodes, capacity, pods = shape
    conf = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=conf)
    conf.connection_pool_maxsize = 100
    nodes = [f"node-{i}" for i in range(1, n_nodes + 1)]
    results: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    log_dir = cluster.root / "logs"

    def ours(name: str = "ip-scheduler", *more: str) -> Ours:
        return Ours(
            args.python, str(cluster.kubeconfig), log_dir / f"{name}.log", [*args.scheduler_arg, *more]
        )

    kube = [("kube-scheduler (qps 50)", 50, 100), ("kube-scheduler (qps 1000)", 1000, 2000)]
    async with client.ApiClient(conf) as api:
        await prepare(api, nodes, capacity)

        async def phase(
            key: str, sched: SchedulerProcess, label: str, n: int, is_backlog: bool, contended: bool = False
        ) -> None:
            if key not in args.phases:
                return
            extended = isinstance(sched, (KubeScheduler, KubeWithExtender))
            p = Phase(label, "default-scheduler" if extended else "ip-scheduler", extended, capacity)
            try:
                rate = None if is_backlog else args.rate
                profile = args.profile if key == args.profile_phase else None
                results.append(
                    await run_phase(
                        p, api, n, rate, sched, len(results), cluster, is_backlog, profile, contended
                    )
                )
            finally:
                await sched.stop()

        await phase("ours", ours(), "ip-scheduler", pods, False)
        if "restart" in args.phases:
            # Restart with N pools and one pending pod: process start → that pod bound, once
            # the API server has worked off the setup's writes (one per node and per pool) or
            # the previous phase's deletions, as a scheduler restarts on a cluster at rest.
            await asyncio.sleep(RESTART_SETTLE_S)
            sched = ours()
            try:
                restart = await run_phase(
                    Phase("restart", "ip-scheduler", False, capacity), api, 1, None, sched, 99, cluster, True
                )
            finally:
                await sched.stop()
            extra["restart_to_first_bind_s"] = restart["first_bind_s"]
        for label, qps, burst in kube:
            await phase(f"kube{qps}", KubeScheduler(cluster, qps, burst), label, pods, False)
        port = devcluster.free_port()
        extender = Ours(
            args.python,
            str(cluster.kubeconfig),
            log_dir / "ip-scheduler-extender.log",
            [*args.scheduler_arg, "--listen", f"127.0.0.1:{port}"],
            command="extender",
        )
        await phase(
            "extender",
            KubeWithExtender(cluster, extender, port),
            "kube-scheduler + ip-scheduler extender",
            pods,
            False,
        )
        if "gang" in args.phases:  # every pod in a PodGroup of GANG_SIZE (Coscheduling, Permit)
            gang = Phase(
                f"gang of {GANG_SIZE}: ip-scheduler", "ip-scheduler", False, capacity, group_size=GANG_SIZE
            )
            sched = ours()
            try:
                results.append(await run_phase(gang, api, pods, args.rate, sched, len(results), cluster))
            finally:
                await sched.stop()
        await phase("backlog-ours", ours(), "ip-scheduler", backlog, True)
        for label, qps, burst in kube:
            await phase(f"backlog-kube{qps}", KubeScheduler(cluster, qps, burst), label, backlog, True)
        await phase("contended-ours", ours(), "ip-scheduler", backlog, True, contended=True)
        for label, qps, burst in kube:
            await phase(
                f"contended-kube{qps}", KubeScheduler(cluster, qps, burst), label, backlog, True, True
            )
        if "failover" in args.phases:
            lease = ["--leader-elect", "--leader-elect-resource-namespace", "default"]
            lease += ["--leader-elect-resource-name", "bench-failover"]
            pair = (ours("ip-scheduler-a", *lease), ours("ip-scheduler-b", *lease))
            results.append(await failover(api, backlog, len(results), cluster, pair, capacity))
        if "running" in args.phases:
            try:
                rows, skipped = await running_phases(
                    api,
                    cluster,
                    args.running_pods,
                    lambda: ours("ip-scheduler-running"),
                    args.running_forced_every,
                )
            except Exception as e:  # the other phases' results are still worth printing
                traceback.print_exc()
                rows, skipped = [{"phase": "running", "pods": args.running_pods, "error": repr(e)}], ""
                rows[0]["correct"] = False
            extra["running"] = rows
            if skipped:
                extra["running_skipped"] = skipped
    return results, extra


async def start_profiler(path: str | None, pid: int) -> asyncio.subprocess.Process | None:
    """py-spy sampling ``pid`` into ``path`` (collapsed stacks) for the phase, if asked for."""
    if not path:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return await asyncio.create_subprocess_exec(
        str(spy),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--output",
        path,
        "--rate",
        "200",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def stop_profiler(proc: asyncio.subprocess.Process | None, path: str | None) -> None:
    if proc is None:
        return
    proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
    await proc.wait()
    print(f"profile: {path}", file=sys.stderr)


def correct(r: dict[str, Any]) -> bool:
    ok = r["over_capacity_nodes"] == 0 and r["bound"] == r["pods"] and not r.get("groups_partial")
    if "ip-scheduler" in r["phase"]:
        ok = ok and r["addresses_unique"] and r["addresses_in_node_pool"] and r["addresses"] == r["bound"]
    return bool(ok)


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| scheduler | bound | pods/s | first bind s | drain pods/s | p50 ms | p90 ms | p99 ms | API req/pod "
        "| peak RSS MB | CPU s | CPU ms/pod | control plane CPU s | max pods/node | correct |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat = r["latency_ms"]
        lines.append(
            f"| {r['phase']} | {r['bound']}/{r['pods']} | {r['throughput_pods_per_s']} "
            f"| {r.get('first_bind_s', '')} | {r.get('drain_pods_per_s', '')} "
            f"| {lat['p50']} | {lat['p90']} | {lat['p99']} | {r['api_requests_per_bound_pod']} "
            f"| {r['scheduler_peak_rss_mb']} | {r['scheduler_cpu_s']} "
            f"| {round(1000 * r['scheduler_cpu_s'] / max(r['bound'], 1), 2)} "
            f"| {r.get('control_plane_cpu_s', '')} "
            f"| {r['max_pods_per_node']} "
            f"| {'yes' if correct(r) else 'NO'} |"
        )
    lines.append("\nAPI requests per bound pod, by verb and resource:\n")
    for r in results:
        kinds = ", ".join(f"{k} {v}" for k, v in r.get("api_requests_per_bound_pod_by_kind", {}).items())
        lines.append(f"- {r['phase']}: {kinds}")
    for r in results:
        if "lease_takeover_s" in r:
            lines.append(
                f"\n{r['phase']}: leader SIGKILLed with {r['bound_at_kill']}/{r['pods']} bound; the standby "
                f"held the lease {r['lease_takeover_s']} s later, bound its first pod {r['first_bind_s']} s "
                f"after the kill and the remaining {r['standby_bound']} at {r['drain_pods_per_s']} pods/s"
            )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> bool:
    """PNG of bound pods over time per scheduler; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in results:
        times = r["bound_over_time"]
        ax.plot(times, range(1, len(times) + 1), label=r["phase"])
    ax.set_xlabel("seconds since first create")
    ax.set_ylabel("pods bound")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--nodes", type=int, help="override the preset's node count")
    p.add_argument("--capacity", type=int, help="override the preset's addresses per node")
    p.add_argument("--pods", type=int, help="override the preset's pod count")
    p.add_argument("--rate", type=float, help="steady arrival in pods/s (default: all at once)")
    p.add_argument("--dir", default=".bench/cluster", help="dev cluster folder")
    p.add_argument("--python", default=sys.executable, help="interpreter that has ipscheduler installed")
    p.add_argument("--output", default="bench-results/bench.json", help="JSON result (PNG beside it)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running")
    p.add_argument(
        "--phases",
        type=lambda v: set(v.split(",")),
        default=set(DEFAULT_PHASES),
        help=f"comma-separated subset of {','.join(PHASES)} (default: all but running, which needs root)",
    )
    p.add_argument(
        "--running-pods",
        type=int,
        default=RUNNING_PODS,
        help=f"pods of the running phase, on one real node (default {RUNNING_PODS}, "
        f"at most {MAX_RUNNING_PODS})",
    )
    p.add_argument(
        "--running-forced-every",
        type=int,
        default=FORCED_EVERY,
        metavar="N",
        help=f"force-delete every N-th pod of the running phase (default {FORCED_EVERY}: a third; 0: none)",
    )
    p.add_argument(
        "--backlog-pods",
        type=int,
        help="pods pending before a backlog or failover phase (default: per preset)",
    )
    p.add_argument(
        "--profile",
        help="py-spy profile (collapsed stacks, flamegraph.pl input) of ip-scheduler during one phase "
        "(needs the 'profile' extra: pip install -e '.[profile]')",
    )
    p.add_argument(
        "--profile-phase", default="ours", help="the phase --profile records (ours or backlog-ours)"
    )
    p.add_argument(
        "--scheduler-arg", action="append", default=[], help="extra argument for ipscheduler run (repeatable)"
    )
    args = p.parse_args()
    if unknown := args.phases - set(PHASES):
        p.error(f"unknown phase(s) {','.join(sorted(unknown))}; phases: {','.join(PHASES)}")
    if not 1 <= args.running_pods <= MAX_RUNNING_PODS:
        p.error(f"--running-pods must be within 1..{MAX_RUNNING_PODS} (the kubelet's maxPods)")
    if args.profile and not Path(sys.executable).with_name("py-spy").exists():
        p.error(f"--profile needs py-spy beside {sys.executable}: pip install -e '.[profile]'")
    n, c, pods = PRESETS[args.preset]
    shape = (args.nodes or n, args.capacity or c, args.pods or pods)
    backlog = args.backlog_pods or BACKLOG_PODS[args.preset]
    arrival = f"steady {args.rate}/s" if args.rate else "all at once"
    print(
        f"# bench: {shape[0]} nodes x {shape[1]} addresses, {shape[2]} pods, {arrival}; "
        f"backlog {backlog} pods"
        + (f"; running: {args.running_pods} pods on one real node" if "running" in args.phases else ""),
        file=sys.stderr,
    )
    cluster = devcluster.Cluster(
        Path(args.dir), NODE_LEASE_SECONDS.get(args.preset, devcluster.NODE_LEASE_SECONDS)
    )
    try:
        cluster.up(nodes=shape[0])
        kc = str(cluster.kubeconfig)
        subprocess.run(["kubectl", "--kubeconfig", kc, "apply", "-f", str(ROOT / "crds")], check=True)
        subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kc,
                "wait",
                "--for=condition=Established",
                "crd/nodeippools.ipscheduler.io",
                "crd/podgroups.scheduling.x-k8s.io",
            ],
            check=True,
        )
        results, extra = asyncio.run(run_all(args, cluster, shape, backlog))
    finally:
        if not args.keep:
            cluster.down()
    if results:
        print(table(results))
    if extra.get("running"):
        print(
            f"\nPods that run, on one real node ({args.running_pods} pods created, then deleted, at once):\n"
        )
        print(running_table(extra["running"]))
    if "running_skipped" in extra:
        print(f"\n{extra['running_skipped']}")
    if "restart_to_first_bind_s" in extra:
        print(
            f"\nip-scheduler restart → first bind with {shape[0]} pools: {extra['restart_to_first_bind_s']} s"
        )
    for line in contention_summary(results):
        print(line)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "preset": args.preset,
        "nodes": shape[0],
        "capacity": shape[1],
        "pods": shape[2],
        "rate": args.rate,
        "backlog_pods": backlog,
        "running_pods": args.running_pods if "running" in args.phases else None,
        "kubernetes": binaries.K8S_VERSION,
        "results": results,
        **extra,
    }
    out.write_text(json.dumps(doc, indent=2))
    print(f"JSON: {out}", file=sys.stderr)
    if results and plot(results, out.with_suffix(".png")):
        print(f"PNG: {out.with_suffix('.png')}", file=sys.stderr)
    ok = all(correct(r) for r in results) and all(r["correct"] for r in extra.get("running", []))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
