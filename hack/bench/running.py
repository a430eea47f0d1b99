"""The ``running`` phase: pods that really run, on one real node started for the phase
(containerd, runc and a kubelet on this machine, ``devcluster.Cluster.start_real_node``), with
ip-scheduler and ``ipscheduler-ipam`` and then with kube-scheduler and the reference
``host-local`` IPAM: create → Running, deletion → address released, → pod gone, → CNI DEL
(:func:`running_phases`; its table is :func:`.report.running_table`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

import binaries
import devcluster
import realnode
from ipscheduler.underlayip.models import ANNOTATION_IP, POOLS

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
from .drivers import KUBE_SCHEDULER_NAME, OURS, KubeScheduler, Ours

REAL_NODE = "real-node-1"
"""The running phase's real node (its name in the bench's cluster; its host index is free)."""
FORCED_EVERY = 3
"""The running phase force-deletes every third pod (``--running-forced-every``): the address
of a pod removed without its node confirming the teardown waits ``Releasing``."""
RUNNING_PODS = 50
"""Default pods of the running phase (``--running-pods``): see :func:`running_phases`."""
MAX_RUNNING_PODS = 110
"""The kubelet's default ``maxPods``: more would stay Pending (kube-scheduler) or be rejected."""


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
        """Record what the event ``kind`` (``LISTED``, ``ADDED``, ``MODIFIED``, ``DELETED``) of
        pod ``obj`` (a raw dict) shows: its UID, state, first time Running, deletion."""
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
    tmp = layout.root / f".{realnode.CONFLIST}.tmp"
    tmp.write_text(text)
    path = layout.netd / realnode.CONFLIST
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
        (POOLS.group, POOLS.version, POOLS.plural),
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
            sum(v for k, v in deletion_requests.items() if k.endswith(f"{POOLS.plural}/status")), 2
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
    if phase.scheduler_name == OURS:
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
    conf_path = layout.netd / realnode.CONFLIST
    original = conf_path.read_text()
    subnet = ipaddress.ip_network(layout.subnet)
    addresses = (str(subnet[10]), str(subnet[10 + pods - 1]))
    rows: list[dict[str, Any]] = []
    custom = client.CustomObjectsApi(api)
    pool = f"bench-{REAL_NODE}"

    async def measure(
        phase: RunningPhase, index: int, track: Callable[[RunningPhase], Coroutine[Any, Any, None]]
    ) -> dict[str, Any]:
        return await measure_running(api, cluster, layout, phase, pods, index, addresses, track, forced_every)

    try:
        subnets = [{"cidr": layout.subnet, "gateway": layout.node_ip, "routes": [{"dst": "0.0.0.0/0"}]}]
        await create_pool(api, pool_body(pool, layout.name, *addresses, subnets))
        sched = ours()
        try:
            await sched.start()
            phase = RunningPhase(
                "ip-scheduler + ipscheduler-ipam", OURS, "allocation gone from the pool status"
            )
            rows.append(await measure(phase, 0, lambda p: track_pool_releases(api, pool, p)))
            # The pool's finalizer is ip-scheduler's to remove: delete the pool while it runs.
            await custom.delete_cluster_custom_object(POOLS.group, POOLS.version, POOLS.plural, pool)
            for _ in range(100):
                try:
                    await custom.get_cluster_custom_object(POOLS.group, POOLS.version, POOLS.plural, pool)
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
                KUBE_SCHEDULER_NAME,
                "host-local's address file gone (CNI DEL)",
            )
            data_dir = host_local_dir(layout) / realnode.NETWORK_NAME
            rows.append(await measure(phase, 1, lambda p: track_host_local_releases(data_dir, p)))
        finally:
            await kube.stop()
    finally:
        try:
            if conf_path.exists() and conf_path.read_text() != original:
                await set_conflist(layout, original, "ipscheduler-ipam")
        finally:
            await asyncio.to_thread(cluster.stop_real_node, REAL_NODE, True)
    return rows, ""
