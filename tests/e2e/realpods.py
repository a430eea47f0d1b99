"""Pods on a real node (``hack/realnode.py``): busybox workloads that tolerate the real node's
taint and select it, and waiting for them to run, as the real-node tests use them. The real
node itself is the ``real_node`` fixture (``tests/e2e/conftest.py``)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
from pathlib import Path
from typing import Any

import binaries
import realnode
from tests.e2e.helpers import SCHEDULER, pods_of
from tests.kube import Kubectl, wait_for

REAL_NODE = "real-node-1"
"""The real node the ``real_node`` fixture starts for a module."""


def ipv6_subnet(layout: realnode.Layout) -> ipaddress.IPv6Network:
    """The IPv6 subnet of real node ``layout`` beside its ``10.88.<index>.0/24``:
    ``fd00:88:<index>::/64``, gateway ``fd00:88:<index>::1``, which the ``bridge`` plugin
    (``isGateway``) puts on the node's bridge with the first pod that has an IPv6 address."""
    return ipaddress.IPv6Network(f"fd00:88:{layout.index}::/64")


def busybox_template(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name}, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {realnode.LABEL: "true"},
            "tolerations": [realnode.TOLERATION],
            "containers": [
                {"name": "main", "image": binaries.BUSYBOX_IMAGE, "command": ["sleep", "3600"]},
            ],
        },
    }


GRACEFUL = {
    "name": "main",
    "image": binaries.BUSYBOX_IMAGE,
    "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
}
"""A container that ends on SIGTERM, as a well-behaved workload does (busybox ``sleep`` as PID 1
ignores it, so only a grace period of 0 ends it quickly)."""


def host_ifindexes() -> set[int]:
    """The interface indexes of the host's network namespace (a pod's veth peer among them)."""
    found = set()
    for d in Path("/sys/class/net").iterdir():
        with contextlib.suppress(OSError, ValueError):  # an interface going away meanwhile
            found.add(int((d / "ifindex").read_text()))
    return found


def busybox_deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": busybox_template(name),
        },
    }


def running(kubectl: Kubectl, ns: str, app: str, count: int) -> list[dict[str, Any]] | None:
    """The ``count`` pods of ``app`` once all are Running and Ready with a pod IP, else None."""
    pods = [p for p in pods_of(kubectl, ns, f"app={app}") if not p["metadata"].get("deletionTimestamp")]
    ready = [
        p
        for p in pods
        if p["status"].get("phase") == "Running"
        and p["status"].get("podIP")
        and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
    ]
    return ready if len(ready) == count and len(pods) == count else None


def wait_running(
    kubectl: Kubectl, ns: str, app: str, count: int, timeout: float = 120
) -> list[dict[str, Any]]:
    def state() -> list[dict[str, Any]] | None:
        return running(kubectl, ns, app, count)

    try:
        return wait_for(f"{count} pod(s) of {app} Running", state, timeout=timeout, interval=1)
    except AssertionError:
        pods = pods_of(kubectl, ns, f"app={app}")
        events = kubectl("get", "events", "-n", ns)
        raise AssertionError(
            f"pods: {json.dumps([p['status'] for p in pods])[:3000]}\nevents:\n{events}"
        ) from None


def exec_in(kubectl: Kubectl, ns: str, pod: str, *cmd: str) -> str:
    return kubectl("exec", "-n", ns, pod, "--", *cmd)


def global_addresses(ip_o_addr: str) -> list[str]:
    """The addresses, each with its prefix length, of ``ip -o addr`` output (as ``exec_in`` a
    pod gives it), sorted, link-local ones (IPv6's ``fe80::/64``) left out."""
    found = []
    for line in ip_o_addr.splitlines():
        words = line.split()
        for family in ("inet", "inet6"):
            if family in words:
                address = words[words.index(family) + 1]
                if not ipaddress.ip_interface(address).ip.is_link_local:
                    found.append(address)
    return sorted(found)
