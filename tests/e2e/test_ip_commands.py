"""``ipscheduler ip show|list|release`` against a live cluster.

A module of its own: its orphan allocation must be left to the command, and a module-scoped
scheduler of another module's tests (tests/e2e/test_scheduling.py's) would be alive on the
same xdist worker with a GC sweep every 30 s, releasing the orphan first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.e2e.helpers import SCHEDULER, Pools
from tests.kube import Kubectl, pod_manifest, wait_for


def _pod(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", name, "-n", ns))


def test_ip_commands_show_list_and_release_only_what_no_live_pod_holds(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """``ipscheduler ip show|list|release`` as an operator runs them: who holds an address,
    every allocation, and a release refused for a running pod but done for an orphan."""
    scheduler_factory("--gc-interval", "3600")  # the orphan below is left to the command
    pools.create("tools", "node-1", ["10.44.1.10-10.44.1.19"])
    kubectl.create(
        pod_manifest("holder", scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": "node-1"}), ns
    )
    wait_for("holder bound", lambda: _pod(kubectl, ns, "holder")["spec"].get("nodeName"))
    uid = _pod(kubectl, ns, "holder")["metadata"]["uid"]

    def ip(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ipscheduler", "ip", *args, "--kubeconfig", str(kubectl.kubeconfig)],
            capture_output=True,
            text=True,
            check=False,
        )

    shown = ip("show", "10.44.1.10")
    assert shown.returncode == 0, shown.stderr
    fields = dict(line.split(":", 1) for line in shown.stdout.splitlines())
    assert {k: v.strip() for k, v in fields.items() if k in ("Pool", "Node", "Pod", "UID", "Holder")} == {
        "Pool": "tools",
        "Node": "node-1",
        "Pod": f"{ns}/holder",
        "UID": uid,
        "Holder": "running",
    }
    refused = ip("release", "10.44.1.10")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"ip release: refused: 10.44.1.10 is held by running pod {ns}/holder (UID {uid}); "
        "delete the pod to release it\n"
    )
    # An orphan: an allocation whose pod never existed (as a restore from backup leaves).
    ghost = {"ip": "10.44.1.15", "pod": f"{ns}/ghost", "phase": "Bound", "since": "2026-01-01T00:00:00Z"}
    patch = json.dumps({"status": {"allocations": {"uid-ghost": ghost}}})
    kubectl("patch", "nodeippool", "tools", "--subresource=status", "--type=merge", "-p", patch)
    listed = ip("list", "--pool", "tools", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["ip"]: (r["pod"], r["holder"]) for r in json.loads(listed.stdout)}
    assert rows == {"10.44.1.10": (f"{ns}/holder", "running"), "10.44.1.15": (f"{ns}/ghost", "gone")}
    released = ip("release", "10.44.1.15")
    assert released.returncode == 0, released.stderr
    assert (
        released.stdout == f"released 10.44.1.15 of pool tools (Bound, pod {ns}/ghost, UID uid-ghost, gone)\n"
    )
    assert "uid-ghost" not in pools.get("tools")["status"]["allocations"]
    assert ip("show", "10.44.1.15").stderr == "address 10.44.1.15 is not allocated (free in pool tools)\n"
    assert ip("show", "not-an-ip").returncode == 2


def test_ip_release_decides_from_the_live_pod_whatever_the_status_says(
    scheduler_factory: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """A running pod's allocation edited to phase Retained, then its recorded pod
    name edited: ``ip release`` refuses both times (the pod is found by UID, alive). Then the
    allocation is removed by an edit: the scheduler restores it with the pod's release policy
    and identity, so the pod keeps its sticky address."""
    from tests.e2e.helpers import pods_of, statefulset

    scheduler_factory("--gc-interval", "3600")  # nothing but the command and the restore act
    pools.create("iprel", "node-2", ["10.63.1.1-10.63.1.9"])
    kubectl.apply(statefulset("fx", 1, **{"ipscheduler.io/pools": "iprel"}), ns)
    wait_for("fx-0 bound", lambda: _pod(kubectl, ns, "fx-0")["spec"].get("nodeName"), timeout=60)
    pod = _pod(kubectl, ns, "fx-0")
    uid, address = pod["metadata"]["uid"], pod["metadata"]["annotations"]["ipscheduler.io/ip"]

    def edit(allocation: dict[str, Any] | None) -> None:
        patch = json.dumps({"status": {"allocations": {uid: allocation}}})
        kubectl("patch", "nodeippool", "iprel", "--subresource=status", "--type=merge", "-p", patch)

    def release() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "ipscheduler",
                "ip",
                "release",
                address,
                "--kubeconfig",
                str(kubectl.kubeconfig),
            ],
            capture_output=True,
            text=True,
            check=False,
        )

    edit({"phase": "Retained"})
    refused = release()
    assert refused.returncode == 1, refused.stdout
    assert refused.stderr == (
        f"ip release: refused: {address} is held by running pod {ns}/fx-0 (UID {uid}); "
        "delete the pod to release it\n"
    )
    edit({"phase": "Bound", "pod": f"{ns}/someone-else"})
    refused = release()
    assert refused.returncode == 1, refused.stdout
    assert f"is held by running pod {ns}/someone-else (UID {uid})" in refused.stderr
    assert uid in pools.get("iprel")["status"]["allocations"]

    edit(None)  # the allocation removed: restored at once, as the pod's own
    restored = wait_for(
        "the allocation restored",
        lambda: pools.get("iprel")["status"]["allocations"].get(uid),
        timeout=30,
    )
    assert (restored["ip"], restored["pod"], restored["phase"]) == (address, f"{ns}/fx-0", "Bound")
    assert (restored.get("releasePolicy"), restored.get("identity")) == ("StatefulSet", f"{ns}/fx-0")
    kubectl("delete", "pod", "fx-0", "-n", ns, "--wait=true")

    def back() -> str | None:
        for p in pods_of(kubectl, ns, "app=fx"):
            if p["metadata"]["uid"] != uid and p["spec"].get("nodeName"):
                return str(p["metadata"].get("annotations", {}).get("ipscheduler.io/ip"))
        return None

    assert wait_for("fx-0 re-created and bound", back, timeout=60) == address
