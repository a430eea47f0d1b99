"""Guarantees, second round, as an SRE and a user with write rights would try them.

- A pending pod deleted while the pending-pod watch was away (the scheduler stopped, every
  watch cut, etcd compacted with the watch cache off: the watch can only resume by a
  re-LIST after 410 Gone) leaves the queue; it is never reserved nor bound.
- A status PUT that drops a running pod's allocation never frees its address: a pod pinned
  to that node right after gets another one, and the allocation is restored at once.
- ``ipscheduler check`` reports two running pods that share an address.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.error
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import binaries
import devcluster
from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    events_for,
    install_crd,
    ipscheduler_check,
)
from tests.kube import Kubectl, create_namespace, pod_manifest, wait_for

Factory = Callable[..., SchedulerProcess]


def _pinned(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return pod_manifest(name, scheduler=SCHEDULER, nodeSelector={"kubernetes.io/hostname": node}, **spec)


def _bound(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    def get() -> dict[str, Any] | None:
        pod = kubectl.json("get", "pod", name, "-n", ns)
        return pod if pod["spec"].get("nodeName") else None

    return wait_for(f"{name} bound", get, timeout=60)


# --------------------------------------------------------------------------- the 410 re-LIST path


@pytest.fixture(scope="module")
def nocache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devcluster.Cluster]:
    """A cluster of its own whose kube-apiserver serves watches from etcd (no watch cache),
    so a watch resumed from a compacted resourceVersion gets 410 Gone."""
    binaries.ensure_binaries()  # the session fixture already skipped/failed if unavailable
    c = devcluster.Cluster(
        tmp_path_factory.mktemp("nocache") / "cluster", apiserver_args=("--watch-cache=false",)
    )
    try:
        c.up(nodes=1)
        yield c
    finally:
        c.down()


def _watch_gone(cluster: devcluster.Cluster, resource_version: str) -> bool:
    """A pod watch from ``resource_version`` is refused with 410 Gone (as an HTTP status or
    as the stream's ERROR event)."""
    try:
        raw = cluster.api.request(
            "GET", f"/api/v1/pods?watch=1&resourceVersion={resource_version}&timeoutSeconds=2"
        )
    except urllib.error.HTTPError as e:
        return e.code == 410
    text = raw if isinstance(raw, str) else json.dumps(raw)
    return '"code":410' in text.replace(" ", "")


def test_a_pending_pod_deleted_while_the_watch_was_away_leaves_the_queue(
    nocache_cluster: devcluster.Cluster, tmp_path: Path
) -> None:
    kubectl = Kubectl(nocache_cluster.kubeconfig)
    install_crd(kubectl)
    kubectl.apply(
        {
            "apiVersion": "ipscheduler.io/v1alpha1",
            "kind": "NodeIPPool",
            "metadata": {"name": "stale-1"},
            "spec": {"nodeName": "node-1", "addresses": ["10.40.0.1-10.40.0.8"]},
        }
    )
    ns = create_namespace(kubectl, "stale")
    # No GC sweep during the test: what drops the pod is the re-LIST.
    sched = SchedulerProcess(nocache_cluster.kubeconfig, tmp_path / "scheduler.log", "--gc-interval", "3600")
    sched.start()
    try:
        # Unschedulable until node-1 gets the label: both wait in the queue.
        for name in ("g0", "g1"):
            kubectl.create(pod_manifest(name, scheduler=SCHEDULER, nodeSelector={"stale": "yes"}), ns)
        for name in ("g0", "g1"):
            wait_for(f"{name} unschedulable", lambda n=name: sched.logged(f"unable to schedule {ns}/{n}"))
        g0_uid = kubectl.json("get", "pod", "g0", "-n", ns)["metadata"]["uid"]
        rv_before = nocache_cluster.api.request("GET", f"/api/v1/namespaces/{ns}/pods")["metadata"][
            "resourceVersion"
        ]

        assert sched.proc is not None
        sched.proc.send_signal(signal.SIGSTOP)
        try:
            # Every watch of the frozen process ends (as past the API server's 300 s watch
            # timeout); g0 goes meanwhile and etcd forgets that it did.
            nocache_cluster.stop_component("kube-apiserver")
            nocache_cluster.start_component("kube-apiserver")
            kubectl("delete", "pod", "g0", "-n", ns, "--wait=true", "--timeout=30s")
            nocache_cluster.compact_etcd()
            assert _watch_gone(nocache_cluster, rv_before), "a watch from before the deletion must re-LIST"
        finally:
            sched.proc.send_signal(signal.SIGCONT)
        resumed = time.monotonic()
        wait_for(
            "g0 dropped", lambda: sched.logged(f"pod {ns}/g0 (UID {g0_uid}) no longer exists"), timeout=60
        )
        took = time.monotonic() - resumed
        assert sched.metric("ipscheduler_pending_pods_gone_total", 'found_by="relist"') == 1

        kubectl("label", "node", "node-1", "stale=yes")
        try:
            g1 = _bound(kubectl, ns, "g1")
            assert g1["metadata"]["annotations"]["ipscheduler.io/ip"].startswith("10.40.0.")
            time.sleep(2)  # time enough for a ghost to be tried once more, if there were one
            log = sched.log_path.read_text()
            assert f"binding {ns}/g0" not in log and f"bound {ns}/g0" not in log
            allocations = kubectl.json("get", "nodeippool", "stale-1")["status"].get("allocations") or {}
            assert g0_uid not in allocations
            assert sched.metric("ipscheduler_bind_failures_total") == 0
        finally:
            kubectl("label", "node", "node-1", "stale-")
        print(f"\ngone pod dropped {took:.2f}s after the scheduler resumed")
    finally:
        sched.stop()
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)


# --------------------------------------------------------------------------- status edits


def _put_status(kubectl: Kubectl, pool: str, edit: Callable[[dict[str, Any]], None]) -> float:
    """A user's status PUT (``kubectl replace --subresource=status``), retried on a conflict
    with the scheduler's own writes. Returns ``time.monotonic()`` when it landed."""
    for _ in range(20):
        body = kubectl.json("get", "nodeippool", pool)
        edit(body["status"])
        done = kubectl.run("replace", "--subresource=status", "-f", "-", stdin=json.dumps(body), check=False)
        if done.returncode == 0:
            return time.monotonic()
        assert "the object has been modified" in done.stderr, done.stderr
    raise AssertionError("status PUT kept conflicting")


def test_a_status_put_dropping_a_running_pods_allocation_never_frees_its_address(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("tamper", "node-1", ["10.41.0.1-10.41.0.4"])
    kubectl.create(_pinned("t1", "node-1"), ns)
    kubectl.create(_pinned("t2", "node-1"), ns)
    t2 = _bound(kubectl, ns, "t2")
    _bound(kubectl, ns, "t1")
    uid, ip = t2["metadata"]["uid"], t2["metadata"]["annotations"]["ipscheduler.io/ip"]
    # Recorded (PreBind waited for the write); its Bound mark may still wait for the pool's
    # next write, which the restore below is.
    assert uid in pools.get("tamper")["status"]["allocations"]

    edited = _put_status(kubectl, "tamper", lambda status: status["allocations"].pop(uid))
    kubectl.create(_pinned("pb1", "node-1"), ns)  # at once: the address must not look free
    pb1 = _bound(kubectl, ns, "pb1")
    assert pb1["metadata"]["annotations"]["ipscheduler.io/ip"] != ip

    def restored() -> bool:
        got = pools.get("tamper")["status"]["allocations"].get(uid)
        return got is not None and got["ip"] == ip

    wait_for("t2's allocation restored", restored, timeout=30, interval=0.1)
    took = time.monotonic() - edited
    warnings = events_for(kubectl, ns, "t2", "AllocationRestored")
    assert warnings and warnings[0]["type"] == "Warning" and "was edited" in warnings[0]["message"]
    pool_events = kubectl.json(
        "get", "events", "-A", "--field-selector", "involvedObject.kind=NodeIPPool,involvedObject.name=tamper"
    )["items"]
    assert any(e["reason"] == "AllocationRestored" for e in pool_events)
    assert scheduler.metric("ipscheduler_allocations_restored_total") >= 1
    assert_check_clean(kubectl)
    print(f"\nallocation restored {took:.2f}s after the status PUT")


def test_an_edit_giving_a_running_pods_address_to_another_uid_never_makes_a_third_holder(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("tamper2", "node-2", ["10.42.0.1-10.42.0.3"])
    scheduler_factory("--gc-interval", "5")
    kubectl.create(_pinned("t2", "node-2"), ns)
    t2 = _bound(kubectl, ns, "t2")
    uid, ip = t2["metadata"]["uid"], t2["metadata"]["annotations"]["ipscheduler.io/ip"]
    intruder = "00000000-0000-0000-0000-0000000000aa"

    def swap(status: dict[str, Any]) -> None:
        mine = status["allocations"].pop(uid)
        status["allocations"][intruder] = {**mine, "pod": f"{ns}/intruder"}

    _put_status(kubectl, "tamper2", swap)
    for name in ("n1", "n2"):
        kubectl.create(_pinned(name, "node-2"), ns)
    got = {_bound(kubectl, ns, n)["metadata"]["annotations"]["ipscheduler.io/ip"] for n in ("n1", "n2")}
    assert ip not in got and len(got) == 2, "t2's address went to a third pod"
    wait_for("AddressConflict on t2", lambda: events_for(kubectl, ns, "t2", "AddressConflict"), timeout=30)
    # The forged allocation's pod never existed: the GC releases it, then t2's is recorded again.
    assert_check_clean(kubectl, timeout=60)
    assert pools.get("tamper2")["status"]["allocations"][uid]["ip"] == ip


# --------------------------------------------------------------------------- ipscheduler check


def test_check_reports_two_running_pods_sharing_an_address(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("shared", "node-3", ["10.43.0.1-10.43.0.4"])
    kubectl.create(_pinned("first", "node-3"), ns)
    first = _bound(kubectl, ns, "first")
    ip = first["metadata"]["annotations"]["ipscheduler.io/ip"]
    # Created already bound by someone with write rights, carrying first's address.
    copy = pod_manifest("copy", scheduler=SCHEDULER, nodeName="node-3")
    copy["metadata"]["annotations"] = {"ipscheduler.io/pool": "shared", "ipscheduler.io/ip": ip}
    kubectl.create(copy, ns)
    wait_for(
        "AddressConflict on copy", lambda: events_for(kubectl, ns, "copy", "AddressConflict"), timeout=30
    )
    result = ipscheduler_check(kubectl.kubeconfig)
    assert result.returncode == 1
    line = f"address {ip} used by 2 running pods: {ns}/copy"
    assert line in result.stdout and f"{ns}/first" in result.stdout, result.stdout
    kubectl("delete", "pod", "copy", "-n", ns, "--wait=true", "--timeout=60s")
    assert_check_clean(kubectl)
