"""What the bench does to the API server and reads from /proc: namespaces, the nodes'
extended resource and pools, LIST+WATCH, the API server's request counts, processes' CPU and
memory, percentiles.

The product's names come from the product: the extended resource
(:data:`ipscheduler.underlayip.publisher.RESOURCE`) and the NodeIPPool resource
(:data:`ipscheduler.underlayip.models.POOLS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

import devcluster
from ipscheduler.kube.informer import RawWatch
from ipscheduler.underlayip.models import POOLS
from ipscheduler.underlayip.publisher import RESOURCE


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
    """Create namespace ``ns`` and wait until its ``default`` ServiceAccount exists."""
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


def control_plane_cpu(cluster: devcluster.Cluster) -> float:
    """CPU seconds used so far by kube-apiserver, etcd, kube-controller-manager and kwok."""
    total = 0.0
    for info in cluster.state.get("pids", {}).values():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += proc_usage(int(info["pid"]))[1]
    return total


def pool_body(
    name: str, node: str, first: str, last: str, subnets: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A NodeIPPool ``name`` of ``node`` holding the addresses ``first``-``last`` (and
    ``subnets``: the CNI's gateway and routes, for a real node)."""
    spec: dict[str, Any] = {"nodeName": node, "addresses": [f"{first}-{last}"]}
    if subnets is not None:
        spec["subnets"] = subnets
    return {"apiVersion": POOLS.api_version, "kind": POOLS.kind, "metadata": {"name": name}, "spec": spec}


async def create_pool(api: client.ApiClient, body: dict[str, Any], exist_ok: bool = False) -> None:
    """Create the NodeIPPool ``body``; ``exist_ok``: one of that name already there is fine.
    Raises the API's error otherwise."""
    try:
        await client.CustomObjectsApi(api).create_cluster_custom_object(
            POOLS.group, POOLS.version, POOLS.plural, body
        )
    except client.exceptions.ApiException as e:
        if not (exist_ok and e.status == 409):
            raise


def bench_pool(node: str) -> str:
    """The name of the bench's own NodeIPPool of ``node`` (:func:`prepare`)."""
    return f"bench-{node}"


async def prepare(api: client.ApiClient, nodes: list[str], capacity: int) -> None:
    """The capacity as extended resource (:data:`RESOURCE`) on every node, and one NodeIPPool
    :func:`bench_pool` per node with its :func:`node_range`."""
    core = client.CoreV1Api(api)
    sem = asyncio.Semaphore(50)

    async def one(i: int, node: str) -> None:
        async with sem:
            res = {RESOURCE: str(capacity)}
            await core.patch_node_status(node, {"status": {"capacity": res, "allocatable": res}})
            await create_pool(api, pool_body(bench_pool(node), node, *node_range(i, capacity)), exist_ok=True)

    await asyncio.gather(*(one(i, n) for i, n in enumerate(nodes)))


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
