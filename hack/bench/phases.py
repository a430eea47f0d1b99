"""The phases on kwok nodes, each measured to one result row: arrival (``ours``, ``kube50``,
``kube1000``, ``extender``, ``gang``), ``restart``, ``backlog-*``, ``contended-*`` and
``failover``, then the dual-stack and interface phases (:mod:`.multi`, :func:`multi_phase`);
:func:`run_all` runs those asked for in order, with the ``running`` phase (:mod:`.running`)
and the ``running-interfaces-*`` phases (:mod:`.multus`) last.

A phase's pods are pause pods for ip-scheduler (:data:`.drivers.OURS`) or for kube-scheduler,
requesting one address as the extended resource
(:data:`ipscheduler.underlayip.publisher.RESOURCE`); the gang phase's are in PodGroups
(:mod:`ipscheduler.coscheduling.models`); the address a pod got is read from its
:data:`ipscheduler.underlayip.models.ANNOTATION_IP` (and, for :mod:`.multi`'s phases, its other
address annotations, :func:`.multi.kept`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client, config

import binaries
import devcluster
from ipscheduler.coscheduling import models as podgroups
from ipscheduler.underlayip.models import ANNOTATION_IP
from ipscheduler.underlayip.publisher import RESOURCE

from . import multi, multus
from .cluster import (
    apiserver_requests,
    bench_pool,
    control_plane_cpu,
    delete_namespace,
    new_namespace,
    node_range,
    per_pod_requests,
    percentile,
    prepare,
    proc_usage,
    watch_raw,
)
from .drivers import (
    KUBE_SCHEDULER_NAME,
    OURS,
    KubeScheduler,
    KubeWithExtender,
    Ours,
    SchedulerProcess,
    start_profiler,
    stop_profiler,
)
from .running import running_phases

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
    *multi.MULTI_PHASES,
    "running",
    *multus.MULTUS_PHASES,
)
"""Every phase, in the order they run."""
DEFAULT_PHASES = tuple(
    p for p in PHASES if p != "running" and p not in multi.MULTI_PHASES and p not in multus.MULTUS_PHASES
)
"""The phases run without ``--phases``: all but ``running`` and those of :mod:`.multus` (root, a
real node) and those of :mod:`.multi` (asked for by name: see :data:`.multi.MULTI_PHASES`)."""
CONTEND_INTERVAL = 0.5
"""Seconds between the contending client's LISTs of every pod (the contended phases)."""
GANG_SIZE = 10
"""Pods per PodGroup in the gang phase (its ``minMember``)."""
RESTART_SETTLE_S = 30.0
"""Seconds the restart phase waits before starting the scheduler (see :func:`run_all`)."""


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
    pod_annotations: dict[str, str] = field(default_factory=dict)
    """Annotations every pod of the phase carries (:func:`.multi.pod_annotations`)."""
    keep_annotations: bool = False
    """Keep the address annotations each pod was bound with in :attr:`annotations`."""
    annotations: dict[str, dict[str, str]] = field(default_factory=dict)
    """By pod, the address annotations it was bound with (:func:`.multi.kept`), for the checks
    of :mod:`.multi` (with :attr:`keep_annotations`)."""


def pod_body(
    name: str,
    scheduler_name: str,
    extended: bool,
    group: str = "",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pause pod ``name`` for ``scheduler_name``; ``extended``: requesting one address as the
    extended resource (kube-scheduler's way); ``group``: in that PodGroup; ``annotations``:
    carrying those."""
    container: dict[str, Any] = {"name": "c", "image": binaries.PAUSE_IMAGE}
    if extended:
        container["resources"] = {"requests": {RESOURCE: "1"}, "limits": {RESOURCE: "1"}}
    return {
        "metadata": {
            "name": name,
            **({"labels": {podgroups.POD_GROUP_LABEL: group}} if group else {}),
            **({"annotations": dict(annotations)} if annotations else {}),
        },
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        },
    }


async def watch_bindings(
    core: client.CoreV1Api, ns: str, phase: Phase, want: int, done: asyncio.Event
) -> None:
    """Record the first time each pod of ``ns`` is seen with a nodeName (:func:`_seen_bound`)
    and set ``done`` once ``want`` are; until cancelled.

    Raw dicts, no model deserialization (:func:`.cluster.watch_raw`): a watcher that falls
    behind is closed by the API server ("Forcing pods watcher close due to unresponsiveness"),
    then the watch resumes from the last resourceVersion (or re-lists after 410 Gone).
    """

    def handle(_: str, obj: dict[str, Any]) -> None:
        if _seen_bound(obj, phase) and len(phase.bound) >= want:
            done.set()

    await watch_raw(core.list_namespaced_pod, (ns,), handle)


def _seen_bound(obj: dict[str, Any], phase: Phase) -> bool:
    """Record ``obj``'s binding if it is bound and new; True if it was recorded."""
    pname = obj["metadata"]["name"]
    node = obj["spec"].get("nodeName")
    if not node or pname in phase.bound:
        return False
    phase.bound[pname] = time.monotonic()
    annotations = obj["metadata"].get("annotations") or {}
    phase.placement[pname] = (node, annotations.get(ANNOTATION_IP))
    if phase.keep_annotations:
        phase.annotations[pname] = multi.kept(annotations)
    return True


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
            body = pod_body(f"p{i}", phase.scheduler_name, phase.extended, group, phase.pod_annotations)
            await core.create_namespaced_pod(ns, body, _preload_content=False)

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
            "apiVersion": podgroups.API_VERSION,
            "kind": podgroups.KIND,
            "metadata": {"name": f"g{i}"},
            "spec": {"minMember": size},
        }
        async with sem:
            await custom.create_namespaced_custom_object(
                podgroups.GROUP, podgroups.VERSION, ns, podgroups.PLURAL, body
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
    phase = Phase("failover: ip-scheduler", OURS, extended=False, capacity=capacity)
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


async def multi_phase(
    key: str,
    api: client.ApiClient,
    nodes: list[str],
    pods: int,
    rate: float | None,
    sched: Ours,
    index: int,
    cluster: devcluster.Cluster,
) -> dict[str, Any]:
    """The phase ``key`` of :mod:`.multi`: its pools created, ``sched`` started and the pools
    settled, then :func:`run_phase` (``pods`` created at once, or at ``rate``), the row checked
    by :func:`.multi.check`; its pools deleted before ``sched`` stops."""
    plan = multi.plan(key, nodes, pods)
    count = await multi.create_pools(api, plan)
    try:
        await sched.start()
        settled = await multi.wait_settled(api, plan, count)
        phase = Phase(
            f"{key}: ip-scheduler",
            OURS,
            extended=False,
            capacity=max(plan.rooms),
            pod_annotations=multi.pod_annotations(plan),
            keep_annotations=True,
        )
        row = await run_phase(phase, api, pods, rate, sched, index, cluster)
        placed = {pod: (node, phase.annotations.get(pod, {})) for pod, (node, _) in phase.placement.items()}
        row.update(multi.check(plan, placed))
        by_kind = row["api_requests_per_bound_pod_by_kind"]
        row.update(
            pools=count,
            pools_settled=settled,
            pool_status_writes_per_bound_pod=by_kind.get("PUT nodeippools/status", 0.0),
        )
        await multi.delete_pools(api, plan)
    finally:
        await sched.stop()
    return row


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
            p = Phase(label, KUBE_SCHEDULER_NAME if extended else OURS, extended, capacity)
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
                    Phase("restart", OURS, False, capacity), api, 1, None, sched, 99, cluster, True
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
            gang = Phase(f"gang of {GANG_SIZE}: ip-scheduler", OURS, False, capacity, group_size=GANG_SIZE)
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
        if asked := [k for k in multi.MULTI_PHASES if k in args.phases]:
            async with multi.withhold_bench_pools(api, [bench_pool(n) for n in nodes]):
                for key in asked:
                    results.append(
                        await multi_phase(key, api, nodes, pods, args.rate, ours(), len(results), cluster)
                    )
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
        if asked := [k for k in multus.MULTUS_PHASES if k in args.phases]:
            try:
                rows, skipped = await multus.multus_phases(
                    api, cluster, asked, args.running_interface_pods, lambda: ours("ip-scheduler-multus")
                )
            except Exception as e:
                traceback.print_exc()
                rows, skipped = [{"phase": ",".join(asked), "error": repr(e), "correct": False}], ""
            extra["running_interfaces"] = rows
            if skipped:
                extra["running_interfaces_skipped"] = skipped
    return results, extra
