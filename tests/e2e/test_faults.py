"""Faults as an SRE causes them, and what the scheduler promises after each.

Each test breaks something real (the API server SIGKILLed or stopped, a
replica whose ServiceAccount may not bind, a pool deleted milliseconds after
its creation, a pod created already bound, connections cut by a proxy), then
looks at what happens *after* the fault: deletions release, new pools and
nodes are used, edits take effect, ``/healthz`` tells the truth, and
``ipscheduler check`` is clean. Measured times are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client, config

from tests.builders import bound_pods
from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    deployment,
    events_for,
    member,
    podgroup,
    pods_of,
    token_kubeconfig,
)
from tests.faultproxy import FaultProxy, kubeconfig_via
from tests.kube import Kubectl, pod_manifest, wait_for

Factory = Callable[..., SchedulerProcess]
GC = 5.0
WATCH_TIMEOUT = 4.0
FAST = ("--gc-interval", str(GC), "--reserved-ttl", "10", "--watch-timeout", str(WATCH_TIMEOUT))
BACKOFF_MAX = 30.0  # informer relist backoff cap (ipscheduler.kube.informer.BACKOFF_MAX)


def _pinned(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return pod_manifest(
        name,
        scheduler=SCHEDULER,
        nodeSelector={"kubernetes.io/hostname": node},
        terminationGracePeriodSeconds=0,
        **spec,
    )


def _pod(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return dict(kubectl.json("get", "pod", name, "-n", ns))


def _taints(kubectl: Kubectl, node: str) -> list[dict[str, Any]]:
    return list(kubectl.json("get", "node", node).get("spec", {}).get("taints") or [])


def _wait_bound(kubectl: Kubectl, ns: str, name: str, timeout: float = 60) -> dict[str, Any]:
    return wait_for(
        f"{name} bound", lambda: (p := _pod(kubectl, ns, name))["spec"].get("nodeName") and p, timeout=timeout
    )


def _allocations(pools: Pools, name: str) -> dict[str, Any]:
    return dict(pools.get(name).get("status", {}).get("allocations") or {})


def _timed(what: str, fn: Callable[[], Any], timeout: float) -> float:
    started = time.monotonic()
    wait_for(what, fn, timeout=timeout, interval=0.25)
    took = time.monotonic() - started
    print(f"{what}: {took:.1f}s")
    return took


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_after_an_api_server_restart_everything_takes_effect(
    how: int, scheduler_factory: Factory, cluster: Any, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """The informers used to end for good on a stream cut mid-chunk: deletions were never
    released, new pools and nodes never seen, and /healthz stayed 200."""
    tag = "k" if how == signal.SIGKILL else "t"
    first = f"restart-{tag}-1"
    pools.create(first, "node-1", [f"10.90.{how}.1-10.90.{how}.6"])
    sched = scheduler_factory(*FAST)
    for i in range(3):
        kubectl.create(_pinned(f"before-{i}", "node-1"), ns)
    wait_for("3 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 3)
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, ns)}
    wait_for("3 allocations", lambda: len(_allocations(pools, first)) == 3)

    stopped = time.monotonic()
    cluster.stop_component("kube-apiserver", sig=how)
    try:
        _timed(
            "/healthz fails while the watches are down",
            lambda: (r := sched.probe("/healthz"))[0] == 503 and "watch down for" in r[1],
            timeout=WATCH_TIMEOUT + 20,
        )
        assert time.monotonic() - stopped >= WATCH_TIMEOUT - 0.5, "reported before the watch timeout"
    finally:
        cluster.start_component("kube-apiserver")
    _timed("/healthz recovers", lambda: sched.probe("/healthz")[0] == 200, timeout=BACKOFF_MAX + 15)

    # Deletions after the restart release their addresses (one GC interval + the watch backoff).
    kubectl("delete", "pod", "-n", ns, "before-0", "before-1", "--wait=false")
    _timed(
        "addresses of deleted pods released",
        lambda: not ({uids["before-0"], uids["before-1"]} & _allocations(pools, first).keys()),
        timeout=GC + BACKOFF_MAX + 10,
    )
    # A new pool is used at once.
    second = f"restart-{tag}-2"
    pools.create(second, "node-2", [f"10.91.{how}.1-10.91.{how}.3"])
    kubectl.create(_pinned("new-pool", "node-2"), ns)
    _timed("new pool used", lambda: _pod(kubectl, ns, "new-pool")["spec"].get("nodeName"), timeout=30)
    assert _pod(kubectl, ns, "new-pool")["metadata"]["annotations"]["ipscheduler.io/ip"] == f"10.91.{how}.1"
    # A new node (and its pool) is used.
    (node,) = cluster.add_nodes(1)
    try:
        pools.create(f"restart-{tag}-3", node, [f"10.92.{how}.1-10.92.{how}.3"])
        kubectl.create(_pinned("new-node", node), ns)
        # The node carries node.kubernetes.io/not-ready (TaintNodesByCondition admission) until
        # kube-controller-manager's node lifecycle controller removes it; after the API server
        # restart its own informers may still be in client-go's backoff (up to 30 s). That wait
        # belongs to the cluster, not to us: time the scheduler from the moment the taint is gone.
        _timed("the not-ready taint removed", lambda: not _taints(kubectl, node), timeout=120)
        _timed(
            "new node used (after its not-ready taint went)",
            lambda: _pod(kubectl, ns, "new-node")["spec"].get("nodeName") == node,
            30,
        )
        # A pool edit takes effect: capacity 1 leaves a new pod pending, capacity 3 lets it in.
        pools.create(f"restart-{tag}-3", node, [f"10.92.{how}.1-10.92.{how}.3"], capacity=1)
        wait_for("capacity 1 in status", lambda: pools.get(f"restart-{tag}-3")["status"]["capacity"] == 1)
        kubectl.create(_pinned("after-edit", node), ns)
        wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "after-edit", "FailedScheduling"))
        pools.create(f"restart-{tag}-3", node, [f"10.92.{how}.1-10.92.{how}.3"], capacity=3)
        _timed("pool edit used", lambda: _pod(kubectl, ns, "after-edit")["spec"].get("nodeName"), timeout=30)
        assert_check_clean(kubectl)
        kubectl("delete", "pod", "-n", ns, "new-node", "after-edit", "--wait=true")
    finally:
        kubectl("delete", "node", node, "--wait=false")
    assert sched.proc is not None and sched.proc.poll() is None


def _no_binding_kubeconfig(kubectl: Kubectl, path: Path) -> Path:
    """A kubeconfig for a ServiceAccount with the scheduler's ClusterRole minus pods/binding."""
    role = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "02-clusterrole.yaml").read_text())
    role["metadata"] = {"name": "ip-scheduler-no-binding"}
    role["rules"] = [r for r in role["rules"] if "pods/binding" not in r.get("resources", [])]
    kubectl.apply(role)
    kubectl.run("create", "serviceaccount", "no-binding", "-n", "default", check=False)
    kubectl.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "ip-scheduler-no-binding"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role["metadata"]["name"],
            },
            "subjects": [{"kind": "ServiceAccount", "name": "no-binding", "namespace": "default"}],
        }
    )
    return token_kubeconfig(kubectl, "no-binding", "default", path)


def test_two_active_replicas_one_failing_every_bind_leave_each_pod_its_own_allocation(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str, tmp_path: Path
) -> None:
    """Replica B may not create pods/binding (403 on every bind): its failure handling must
    never release what replica A bound a pod with, and it must never bind with A's allocation."""
    for i in (1, 2, 3):
        pools.create(f"twin-{i}", f"node-{i}", [f"10.80.{i}.1-10.80.{i}.12"])
    nobind = _no_binding_kubeconfig(kubectl, tmp_path / "no-binding.kubeconfig")
    args = (
        "--no-leader-elect",
        "--reserved-ttl",
        "10",
        "--gc-interval",
        "600",
    )  # no GC to paper over
    binding = scheduler_factory(*args)
    failing = SchedulerProcess(nobind, tmp_path / "no-binding.log", *args)
    failing.start()
    try:
        kubectl.apply(deployment("twins", 30), ns)
        wait_for("30 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 30, timeout=120)
        log = failing.log_path.read_text()
        assert "forbidden" in log.lower(), "replica B never tried to bind: the test proves nothing"
        allocs: dict[str, Any] = {}

        def all_marked_bound() -> bool:
            allocs.clear()
            for i in (1, 2, 3):
                allocs.update(_allocations(pools, f"twin-{i}"))
            return len(allocs) == 30 and all(a["phase"] == "Bound" for a in allocs.values())

        # PostBind's mark rides along with its pool's next write (the last ones wait for the
        # GC sweep, which this test keeps away): replica A writes what it still holds when it
        # stops. Replica B keeps failing meanwhile.
        binding.stop()
        wait_for("30 allocations, all Bound", all_marked_bound, timeout=30)
        for p in bound_pods(pods_of(kubectl, ns)):
            mine = allocs.get(p["metadata"]["uid"])
            assert mine is not None, f"{p['metadata']['name']} is bound without an allocation"
            assert mine["ip"] == p["metadata"]["annotations"]["ipscheduler.io/ip"]
        ips = [a["ip"] for a in allocs.values()]
        assert len(ips) == len(set(ips)) == 30
        assert_check_clean(kubectl)
    finally:
        failing.stop()
        kubectl.run("delete", "clusterrolebinding", "ip-scheduler-no-binding", check=False)
        kubectl.run("delete", "clusterrole", "ip-scheduler-no-binding", check=False)


async def _blink(kubeconfig: Path, ns: str, k: int, node: str, delay: float) -> None:
    """Create pool ``blink-<k>`` and a pod pinned to its node, delete the pool ``delay`` s
    later: a script (or a GitOps tool) replacing a pool races the scheduler."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        body = {
            "apiVersion": "ipscheduler.io/v1alpha1",
            "kind": "NodeIPPool",
            "metadata": {"name": f"blink-{k}"},
            "spec": {"nodeName": node, "addresses": [f"10.84.{k}.1/32"]},
        }
        await custom.create_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", body)
        await core.create_namespaced_pod(ns, _pinned(f"blink-pod-{k}", node))
        await asyncio.sleep(delay)
        await custom.delete_cluster_custom_object("ipscheduler.io", "v1alpha1", "nodeippools", f"blink-{k}")


def test_a_pool_deleted_milliseconds_after_its_creation_never_vanishes_under_a_pod(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """The finalizer used to be added by the debounced status task, after the first
    reservations: a pool deleted ~50 ms after its creation vanished under pods just bound
    into it. Delays from 0 to 150 ms cover both outcomes: the pool is gone before anything
    is reserved in it, or it waits (Terminating) for the pod bound into it."""
    scheduler_factory(*FAST)
    attempts = 16
    names = [f"blink-{k}" for k in range(attempts)]
    pools.names.extend(names)  # cleanup, should one stay
    for k in range(attempts):
        asyncio.run(_blink(kubectl.kubeconfig, ns, k, "node-3", delay=k * 0.01))
        time.sleep(0.2)
    time.sleep(3)
    won = bound_pods(pods_of(kubectl, ns))
    for p in won:
        pool = p["metadata"]["annotations"]["ipscheduler.io/pool"]
        got = kubectl.run("get", "nodeippool", pool, "-o", "json", check=False)
        assert got.returncode == 0, f"{p['metadata']['name']} is bound into {pool}, which vanished"
        assert "ipscheduler.io/allocations" in json.loads(got.stdout)["metadata"]["finalizers"]
    print(f"{len(won)} of {attempts} pods were bound into their pool before its deletion")
    kubectl("delete", "pod", "-n", ns, "--all", "--wait=true")
    for name in names:
        kubectl("wait", "--for=delete", f"nodeippool/{name}", "--timeout=30s")
    assert_check_clean(kubectl)


def test_a_pod_created_bound_is_adopted_at_once_and_its_address_is_never_handed_out(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("prebound", "node-1", ["10.83.1.1-10.83.1.4"])
    scheduler_factory("--gc-interval", "600")  # the GC does not do it
    restored = pod_manifest(
        "restored", scheduler=SCHEDULER, nodeName="node-1", terminationGracePeriodSeconds=0
    )
    restored["metadata"]["annotations"] = {
        "ipscheduler.io/pool": "prebound",
        "ipscheduler.io/ip": "10.83.1.1",
    }
    kubectl.create(restored, ns)
    kubectl.create(_pinned("next", "node-1"), ns)  # at once
    nxt = _wait_bound(kubectl, ns, "next")
    assert nxt["metadata"]["annotations"]["ipscheduler.io/ip"] != "10.83.1.1"
    uid = _pod(kubectl, ns, "restored")["metadata"]["uid"]
    _timed("pre-bound pod adopted", lambda: uid in _allocations(pools, "prebound"), timeout=15)
    assert _allocations(pools, "prebound")[uid]["ip"] == "10.83.1.1"
    assert_check_clean(kubectl)

    # A second restored pod claims an address already held: AddressConflict on both pods.
    clash = pod_manifest("clash", scheduler=SCHEDULER, nodeName="node-1", terminationGracePeriodSeconds=0)
    clash["metadata"]["annotations"] = {"ipscheduler.io/pool": "prebound", "ipscheduler.io/ip": "10.83.1.1"}
    kubectl.create(clash, ns)
    ev = wait_for("AddressConflict on clash", lambda: events_for(kubectl, ns, "clash", "AddressConflict"))
    assert "already held by pod" in ev[0]["message"] and f"{ns}/restored" in ev[0]["message"]
    ev = wait_for(
        "AddressConflict on restored", lambda: events_for(kubectl, ns, "restored", "AddressConflict")
    )
    assert f"{ns}/clash" in ev[0]["message"]
    kubectl("delete", "pod", "clash", "-n", ns, "--wait=true")
    assert_check_clean(kubectl)


def test_a_pod_created_bound_with_a_further_interface_gets_both_allocations_and_frees_them(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Restored bound with net1 in a second pool (``ipscheduler.io/interfaces``): the
    bound-pods watch adopts both interfaces at once (net1's recorded with the interface);
    net1's address is never handed out; deleting the pod releases both."""
    subnet = {"cidr": "10.83.3.0/24", "gateway": "10.83.3.254", "routes": [{"dst": "0.0.0.0/0"}]}
    pools.create("mh-first", "node-1", ["10.83.2.1-10.83.2.4"])
    pools.create("mh-net1", "node-1", ["10.83.3.1-10.83.3.4"], subnets=[subnet])
    scheduler_factory("--gc-interval", "600")  # the GC does not do it
    restored = pod_manifest(
        "restored-mh", scheduler=SCHEDULER, nodeName="node-1", terminationGracePeriodSeconds=0
    )
    net1 = {
        "pool": "mh-net1",
        "ips": ["10.83.3.1"],
        "network": {"ips": [{"address": "10.83.3.1/24", "gateway": "10.83.3.254"}]},
    }
    restored["metadata"]["annotations"] = {
        "ipscheduler.io/pool": "mh-first",
        "ipscheduler.io/ip": "10.83.2.1",
        "ipscheduler.io/interfaces": json.dumps({"net1": net1}),
    }
    kubectl.create(restored, ns)
    uid = _pod(kubectl, ns, "restored-mh")["metadata"]["uid"]
    _timed(
        "both interfaces adopted",
        lambda: uid in _allocations(pools, "mh-first") and uid in _allocations(pools, "mh-net1"),
        timeout=15,
    )
    first, further = _allocations(pools, "mh-first")[uid], _allocations(pools, "mh-net1")[uid]
    assert (first["ip"], first.get("interface")) == ("10.83.2.1", None)
    assert (further["ip"], further["interface"], further["phase"]) == ("10.83.3.1", "net1", "Bound")
    assert not events_for(kubectl, ns, "restored-mh", "NetworkMismatch")
    assert_check_clean(kubectl)

    nxt = _pinned("next-mh", "node-1")
    nxt["metadata"]["annotations"] = {
        "ipscheduler.io/pools": "mh-first",
        "ipscheduler.io/interface-pools": json.dumps({"net1": "mh-net1"}),
    }
    kubectl.create(nxt, ns)
    got = json.loads(
        _wait_bound(kubectl, ns, "next-mh")["metadata"]["annotations"]["ipscheduler.io/interfaces"]
    )
    assert got["net1"]["ips"] != ["10.83.3.1"]

    kubectl("delete", "pod", "restored-mh", "-n", ns, "--wait=true")
    _timed(
        "both interfaces released",
        lambda: uid not in _allocations(pools, "mh-first") and uid not in _allocations(pools, "mh-net1"),
        timeout=30,
    )
    kubectl("delete", "pod", "next-mh", "-n", ns, "--wait=true")
    assert_check_clean(kubectl)


@pytest.fixture
def proxy(cluster: Any, tmp_path: Path) -> Iterator[tuple[FaultProxy, Path]]:
    """A fault-injecting TCP proxy in front of the API server and a kubeconfig through it."""
    server = yaml.safe_load(Path(cluster.kubeconfig).read_text())["clusters"][0]["cluster"]["server"]
    port = int(server.rsplit(":", 1)[1])
    with FaultProxy("127.0.0.1", port) as p:
        yield p, kubeconfig_via(Path(cluster.kubeconfig), tmp_path / "via-proxy.kubeconfig", p.port)


def test_connections_cut_mid_write_settle_every_reservation(
    proxy: tuple[FaultProxy, Path], kubectl: Kubectl, pools: Pools, ns: str, tmp_path: Path
) -> None:
    """Every response, pool status PUTs and watches included, is cut after a few KiB for a
    while, then connections are reset and refused: no binding cycle may hang on a write that
    never settles (two bind slots only), and every pod ends bound with its own address."""
    fp, via = proxy
    for i in (1, 2, 3):
        pools.create(f"cut-{i}", f"node-{i}", [f"10.85.{i}.1-10.85.{i}.20"])
    sched = SchedulerProcess(via, tmp_path / "scheduler.log", *FAST, "--bind-concurrency", "2").start()
    try:
        # The faults start once kopf watches the pending pods: its one-time API discovery at
        # start (after the start-up reconcile's log line) is not retried when a response is cut
        # mid-body, and the process exits (one clean-clone CI run); a pod it refuses shows that
        # discovery is over.
        canary = pod_manifest("canary", scheduler=SCHEDULER, terminationGracePeriodSeconds=0)
        canary["metadata"]["annotations"] = {"ipscheduler.io/pools": "no-such-pool"}
        kubectl.create(canary, ns)
        wait_for(
            "kopf watching: the canary refused", lambda: events_for(kubectl, ns, "canary", "FailedScheduling")
        )
        kubectl("delete", "pod", "canary", "-n", ns, "--wait=true")
        fp.cut_after(3000)
        kubectl.apply(deployment("cut", 30), ns)
        time.sleep(8)
        fp.cut_after(None)
        for _ in range(3):
            fp.cut_all()
            time.sleep(0.5)
        fp.refuse(True)
        time.sleep(2)
        fp.refuse(False)
        try:
            wait_for("30 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 30, timeout=150, interval=1)
        except AssertionError as e:  # what the scheduler was doing, for a run that cannot be repeated
            pending = {
                p["metadata"]["name"]: [
                    (c.get("reason"), c.get("message")) for c in p["status"].get("conditions", [])
                ]
                for p in pods_of(kubectl, ns)
                if not p["spec"].get("nodeName")
            }
            metrics = sched.probe("/metrics")[1].splitlines()
            queues = [m for m in metrics if m.startswith(("scheduler_pending_pods{", "scheduler_goroutines"))]
            raise AssertionError(
                f"{e}\npending: {pending}\nqueues: {queues}\nscheduler log:\n{sched.log_tail(120)}"
            ) from e
        ips = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in bound_pods(pods_of(kubectl, ns))]
        assert len(set(ips)) == 30
        assert_check_clean(kubectl, timeout=60)
        assert sched.proc is not None and sched.proc.poll() is None
        print(f"proxy accepted {fp.accepted} connections")
    finally:
        sched.stop()


def test_a_gang_held_at_permit_across_a_sigkill_holds_one_address_per_pod(
    scheduler_factory: Factory, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """Three of a PodGroup's 4 members wait at Permit with addresses on node-1, the
    scheduler is SIGKILLed, node-1 cordoned and the scheduler started again: it places them
    on node-2. The dead process's reservations go within --reserved-ttl plus a sweep, not at
    the new process's Permit timeout (60 s here); each pod then holds one address; the
    fourth member lets the group bind whole."""
    ttl = 6.0
    args = ("--gc-interval", "2", "--reserved-ttl", str(int(ttl)))
    names = ["crash-node-1", "crash-node-2"]
    pools.create(names[0], "node-1", ["10.64.1.1-10.64.1.4"])
    pools.create(names[1], "node-2", ["10.64.2.1-10.64.2.4"])
    first = scheduler_factory(*args)
    kubectl.apply(podgroup("crash", 4, timeout=60), ns)
    prefer = {"ipscheduler.io/pools": ",".join(names)}  # node-1's pool first
    for i in range(4):
        gates = [{"name": "example.com/hold"}] if i == 3 else []  # the fourth waits, gated
        body = member("crash", f"crash-{i}", schedulingGates=gates)
        body["metadata"]["annotations"] = prefer
        kubectl.apply(body, ns)
    keys = {f"{ns}/crash-{i}" for i in range(3)}

    def reservations() -> dict[str, list[str]]:
        """Pod → the reservedBy of each of its allocations, over both pools."""
        out: dict[str, list[str]] = {}
        for name in names:
            for a in _allocations(pools, name).values():
                out.setdefault(a["pod"], []).append(a.get("reservedBy", ""))
        return out

    dead = wait_for("3 reserved, waiting at Permit", lambda: (r := reservations()).keys() == keys and r)
    dead_identity = {by.rpartition("/")[0] for held in dead.values() for by in held}
    assert {a["pod"] for a in _allocations(pools, names[0]).values()} == keys, "all on node-1"
    first.kill()
    killed = time.monotonic()
    kubectl("cordon", "node-1")
    try:
        scheduler_factory(*args)

        def one_each_by_the_new_process() -> bool:
            now = reservations()
            return now.keys() == keys and all(
                len(held) == 1 and held[0].rpartition("/")[0] not in dead_identity for held in now.values()
            )

        wait_for("one reservation per pod, the new process's", one_each_by_the_new_process, timeout=ttl + 15)
        took = time.monotonic() - killed
        print(
            f"the dead process's reservations gone {took:.1f}s after its SIGKILL (--reserved-ttl {ttl:.0f})"
        )
        assert {a["pod"] for a in _allocations(pools, names[1]).values()} == keys, "all on node-2 now"
        for _ in range(6):  # still waiting at Permit, one address each
            time.sleep(0.5)
            assert all(len(held) == 1 for held in reservations().values()), reservations()
    finally:
        kubectl("uncordon", "node-1")
    kubectl(
        "patch",
        "pod",
        "crash-3",
        "-n",
        ns,
        "--type=json",
        "-p",
        '[{"op":"remove","path":"/spec/schedulingGates"}]',
    )
    wait_for(
        "all 4 bound",
        lambda: all(_pod(kubectl, ns, f"crash-{i}")["spec"].get("nodeName") for i in range(4)),
        timeout=30,
    )
    assert sorted(len(h) for h in reservations().values()) == [1, 1, 1, 1]
    assert_check_clean(kubectl)
