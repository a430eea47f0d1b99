"""Never one address on two sandboxes, whatever the deletion, on a real kubelet + containerd node.

The API server removes a pod deleted without its grace period (``kubectl delete --force
--grace-period=0``, ``terminationGracePeriodSeconds: 0``) at once; the kubelet tears its
sandbox down (CNI DEL) seconds later, minutes when the kubelet is down. Two layers keep the
address off a second sandbox meanwhile: the scheduler holds it ``Releasing`` (``kubectl get
nip``) until the node has been Ready for ``--release-delay``, and ``ipscheduler-ipam``'s
node-local ledger refuses it to a new sandbox while the old one exists (the kubelet retries).

Every test runs an :class:`~tests.e2e.sandboxes.AddressSampler`: every 100 ms it reads the
address of ``eth0`` in every network namespace on the host that is in the real node's
subnet, and records any address held by two namespaces at once; each test fails on any such
overlap. Each test starts its own schedulers (``scheduler_factory``).
"""

from __future__ import annotations

import ipaddress
import json
import math
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import binaries
import devcluster
import realnode
from tests.e2e.helpers import assert_check_clean, nodeippools_table, pods_of
from tests.e2e.realpods import GRACEFUL, REAL_NODE, busybox_template, wait_running
from tests.e2e.sandboxes import AddressSampler, sampling
from tests.kube import Kubectl, wait_for

IP = "ipscheduler.io/ip"
SLEEP = {"name": "main", "image": binaries.BUSYBOX_IMAGE, "command": ["sleep", "3600"]}
"""busybox ``sleep`` as PID 1 ignores SIGTERM: only its grace period, or a forced deletion, ends it."""

DELETIONS = ("graceful", "grace-0-in-spec", "forced")


def pod(name: str, deletion: str, app: str) -> dict[str, Any]:
    """A pod for the real node, made to be deleted the way ``deletion`` says: ``graceful``
    (ends on SIGTERM, a grace period of 5 s), ``grace-0-in-spec``
    (``terminationGracePeriodSeconds: 0``, a plain delete), ``forced`` (30 s it would ignore
    SIGTERM for; ``kubectl delete --force --grace-period=0``)."""
    template = busybox_template(app)
    spec = template["spec"]
    if deletion == "graceful":
        spec.update(terminationGracePeriodSeconds=5, containers=[GRACEFUL])
    elif deletion == "forced":
        spec.update(terminationGracePeriodSeconds=30, containers=[SLEEP])
    else:
        spec.update(terminationGracePeriodSeconds=0, containers=[SLEEP])
    template["metadata"]["labels"]["deletion"] = deletion
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **template["metadata"]},
        "spec": spec,
    }


def delete(kubectl: Kubectl, ns: str, names: list[str], deletion: str) -> None:
    """Delete ``names`` as users do for ``deletion`` (not waiting)."""
    if not names:
        return
    force = ["--force", "--grace-period=0"] if deletion == "forced" else []
    kubectl.run("delete", "pod", "-n", ns, *names, "--wait=false", *force, check=True)


def no_overlaps(sampler: AddressSampler) -> None:
    assert sampler.error is None, repr(sampler.error)
    assert sampler.overlaps == [], "one address on two sandboxes: " + "; ".join(map(str, sampler.overlaps))


def wait_netns_gone(sampler: AddressSampler, address: str, keep: int = 1, timeout: float = 120) -> None:
    """Wait until at most ``keep`` namespace holds ``address`` (the old sandbox torn down)."""
    wait_for(
        f"{address} held by at most {keep} sandbox",
        lambda: len(sampler.held().get(address, ())) <= keep,
        timeout=timeout,
        interval=0.2,
    )


def ledger_entries(layout: realnode.Layout) -> dict[str, dict[str, Any]]:
    """The node ledger's entries (``ipscheduler-ipam``'s ``dataDir``): address → holder."""
    if not layout.ledger.is_dir():
        return {}
    out = {}
    for f in layout.ledger.iterdir():
        try:
            ipaddress.ip_address(f.name)
        except ValueError:
            continue
        out[f.name] = json.loads(f.read_text())
    return out


@pytest.mark.parametrize("deletion", ["forced", "grace-0-in-spec"])
def test_a_pod_removed_without_its_grace_period_never_shares_its_address_with_the_next(
    deletion: str,
    kubectl: Kubectl,
    scheduler_factory: Any,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """A pool of one address: pod A runs with it; A is deleted without its grace period and
    pod B created at once. The pool shows the address Releasing (``kubectl get nip``), B is
    bound with it only once the node had ``--release-delay`` (15 s), and B's sandbox comes up
    after A's was torn down."""
    scheduler_factory()
    base = ipaddress.ip_network(real_node.subnet)
    address = str(base[100])
    node_pool("one", [address])
    with sampling(real_node.subnet) as sampler:
        kubectl.create(pod("a", deletion, "first"), ns)
        (a,) = wait_running(kubectl, ns, "first", 1)
        assert a["status"]["podIP"] == address
        sampler.wait_samples()
        (a_netns,) = sampler.held()[address]
        deleted = time.monotonic()
        delete(kubectl, ns, ["a"], deletion)
        kubectl.create(pod("b", deletion, "second"), ns)

        def releasing() -> bool:
            row = kubectl.json("get", "nodeippool", "one")["status"]
            return bool(
                row.get("releasing") == 1 and row["allocations"][a["metadata"]["uid"]]["phase"] == "Releasing"
            )

        wait_for("the address Releasing in kubectl get nip", releasing, timeout=15, interval=0.2)
        row = nodeippools_table(kubectl)["one"]
        assert (row["ALLOCATED"], row["FREE"], row["RELEASING"]) == ("1", "0", "1"), row
        (b,) = wait_running(kubectl, ns, "second", 1)
        running_at = time.monotonic() - deleted
        assert b["status"]["podIP"] == address == b["metadata"]["annotations"][IP]
        wait_netns_gone(sampler, address)
        sampler.wait_samples()
    no_overlaps(sampler)
    old, new = (
        sampler.span(address, a_netns),
        [sampler.span(address, n) for n in sampler.holders_of(address) if n != a_netns],
    )
    assert old is not None and len(new) == 1 and new[0] is not None
    print(
        f"{deletion}: B Running with {address} {running_at:.1f}s after A's deletion; A's sandbox "
        f"held it until +{old[1] - deleted:.1f}s, B's from +{new[0][0] - deleted:.1f}s"
    )
    assert new[0][0] > old[1]
    assert_check_clean(kubectl)


def wait_named_running(
    kubectl: Kubectl, ns: str, names: list[str], timeout: float = 300
) -> list[dict[str, Any]]:
    """The pods ``names`` once each is Running and Ready with its pod IP."""
    want = set(names)

    def state() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(kubectl, ns, "app=churn") if p["metadata"]["name"] in want]
        ok = [
            p
            for p in pods
            if p["status"].get("phase") == "Running"
            and p["status"].get("podIP")
            and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
        ]
        return ok if len(ok) == len(want) else None

    return wait_for(f"{len(want)} churn pods Running", state, timeout=timeout, interval=1)


def refusals(kubectl: Kubectl, ns: str) -> int:
    """Sandboxes the node ledger refused (FailedCreatePodSandBox naming it), as events count them."""
    items = kubectl.json("get", "events", "-n", ns, "--field-selector", "reason=FailedCreatePodSandBox")[
        "items"
    ]
    return sum(
        int(e.get("count") or 1) for e in items if "still held by another sandbox" in e.get("message", "")
    )


def churn(
    kubectl: Kubectl,
    ns: str,
    sampler: AddressSampler,
    total: int,
    per_wave: int,
    disrupt: dict[int, Any] | None = None,
) -> None:
    """``total`` pods in waves of ``per_wave`` over a pool of ``per_wave`` addresses: each wave
    is created, then the wave before it deleted at once (a third each graceful, grace 0 in the
    spec, forced, by the pod's index), then waited for Running; ``disrupt[wave]()`` runs right
    after that wave's deletions. Each pod runs with its annotated address; at the end the last
    wave is deleted and every sandbox of the node waited for gone."""
    previous: list[tuple[str, str]] = []
    made = 0
    for wave in range(math.ceil(total / per_wave) + 1):
        names = [(f"c{i:03d}", DELETIONS[i % 3]) for i in range(made, min(total, made + per_wave))]
        made += len(names)
        if names:
            items = [pod(name, deletion, "churn") for name, deletion in names]
            kubectl.create({"apiVersion": "v1", "kind": "List", "items": items}, ns)
        for deletion in DELETIONS:
            delete(kubectl, ns, [n for n, d in previous if d == deletion], deletion)
        if disrupt and wave in disrupt:
            disrupt[wave]()
        if names:
            for p in wait_named_running(kubectl, ns, [n for n, _ in names]):
                assert p["status"]["podIP"] == p["metadata"]["annotations"][IP], p["metadata"]["name"]
        previous = names
    wait_for("every sandbox of the churn torn down", lambda: not sampler.held(), timeout=180, interval=0.5)
    sampler.wait_samples()


def test_a_churn_of_150_pods_with_mixed_deletions_never_puts_one_address_on_two_sandboxes(
    kubectl: Kubectl, scheduler_factory: Any, real_node: realnode.Layout, node_pool: Any, ns: str
) -> None:
    """150 pods in waves of 12 over a pool of 12 addresses, a third each deleted gracefully,
    with grace 0 in the spec, and forced, each wave's deletions as the next wave is created.
    The scheduler runs with ``--release-delay 2s``, shorter than a busy kubelet takes to tear a
    sandbox down, so the node ledger has work to do: it refuses a new sandbox the address its
    old one still holds, and the kubelet retries. No sample ever shows one address in two."""
    scheduler_factory("--release-delay", "2s")
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("churn", [f"{base[110]}-{base[121]}"])
    started = time.monotonic()
    with sampling(real_node.subnet) as sampler:
        churn(kubectl, ns, sampler, total=150, per_wave=12)
    no_overlaps(sampler)
    print(
        f"150 pods churned in {time.monotonic() - started:.0f}s, {sampler.samples} samples "
        f"(longest gap {sampler.longest_gap:.2f}s), {refusals(kubectl, ns)} sandboxes refused by the ledger"
    )
    assert sampler.longest_gap < 1.0, "the sampler fell behind: overlaps could go unseen"
    assert ledger_entries(real_node) == {}, "every sandbox's DEL freed its address on the node"
    assert_check_clean(kubectl)


def test_two_active_schedulers_a_kubelet_restart_and_a_containerd_sigkill_during_churn(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler_factory: Any,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """The churn (48 pods in waves of 8 over 8 addresses) under two active schedulers (no
    Lease: both schedule, both release), with the kubelet restarted after the third wave's
    deletions and containerd SIGKILLed (and started again) after the fifth's."""
    for _ in range(2):
        scheduler_factory("--release-delay", "2s")
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("churn2", [f"{base[130]}-{base[137]}"])

    def restart(component: str, sig: int) -> Any:
        def run() -> None:
            cluster.stop_component(f"{component}@{REAL_NODE}", sig=sig)
            cluster.start_component(f"{component}@{REAL_NODE}")

        return run

    disrupt = {2: restart("kubelet", signal.SIGTERM), 4: restart("containerd", signal.SIGKILL)}
    with sampling(real_node.subnet) as sampler:
        churn(kubectl, ns, sampler, total=48, per_wave=8, disrupt=disrupt)
    no_overlaps(sampler)
    print(f"48 pods under two schedulers: {refusals(kubectl, ns)} sandboxes refused by the ledger")
    assert ledger_entries(real_node) == {}
    assert_check_clean(kubectl)


def test_pods_force_deleted_while_the_kubelet_is_down_never_share_an_address_with_their_successors(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler_factory: Any,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """The kubelet is stopped; the 4 pods holding every address of the pool are force-deleted
    and 4 new pods created. The node is still Ready (its lease has not run out), so after the
    release delay the new pods are bound with the old pods' addresses while the old sandboxes
    still run. The kubelet, started again, starts the new sandboxes before it tears the orphans
    down: the node ledger refuses each new sandbox until its orphan's DEL (the kubelet retries),
    and no sample ever shows one address twice."""
    scheduler_factory()
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("kubelet-down", [f"{base[140]}-{base[143]}"])
    old = [pod(f"old-{i}", "forced", "old") for i in range(4)]
    with sampling(real_node.subnet) as sampler:
        kubectl.create({"apiVersion": "v1", "kind": "List", "items": old}, ns)
        before = {p["metadata"]["name"]: p["status"]["podIP"] for p in wait_running(kubectl, ns, "old", 4)}
        cluster.stop_component(f"kubelet@{REAL_NODE}")
        try:
            delete(kubectl, ns, list(before), "forced")
            new = [pod(f"new-{i}", "forced", "new") for i in range(4)]
            kubectl.create({"apiVersion": "v1", "kind": "List", "items": new}, ns)

            def bound() -> list[dict[str, Any]] | None:
                pods = pods_of(kubectl, ns, "app=new")
                return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

            given = {
                p["metadata"]["annotations"][IP] for p in wait_for("the new pods bound", bound, timeout=90)
            }
            assert given == set(before.values()), "the old pods' addresses, once Releasing ended"
            assert len({n for a in given for n in sampler.held().get(a, ())}) == 4, (
                "the orphans still hold them"
            )
        finally:
            cluster.start_component(f"kubelet@{REAL_NODE}")
        after = wait_running(kubectl, ns, "new", 4, timeout=240)
        assert {p["status"]["podIP"] for p in after} == given
        wait_for("the orphans torn down", lambda: all(len(n) == 1 for n in sampler.held().values()), 120, 0.5)
        sampler.wait_samples()
    no_overlaps(sampler)
    print(f"kubelet down: {refusals(kubectl, ns)} sandboxes refused by the ledger")
    assert_check_clean(kubectl)


def test_after_a_simulated_reboot_every_pod_gets_its_own_address_back_and_nothing_stays_held(
    kubectl: Kubectl,
    cluster: devcluster.Cluster,
    scheduler_factory: Any,
    real_node: realnode.Layout,
    node_pool: Any,
    ns: str,
) -> None:
    """The node "reboots": kubelet and containerd SIGKILLed, every container process killed, the
    pods' network namespaces and the runtime's state gone without a single CNI DEL; the node
    ledger on disk still names the dead sandboxes. Started again, the kubelet re-creates every
    pod's sandbox: each gets its own address back (its stale record replaced), the ledger ends
    up naming exactly the live sandboxes, and once the pods are deleted nothing stays held.
    Last in the module: the node it leaves behind has been through a reboot."""
    scheduler_factory()
    base = ipaddress.ip_network(real_node.subnet)
    node_pool("reboot", [f"{base[150]}-{base[153]}"])
    pods = [pod(f"r-{i}", "graceful", "reboot") for i in range(3)]
    with sampling(real_node.subnet) as sampler:
        kubectl.create({"apiVersion": "v1", "kind": "List", "items": pods}, ns)
        before = {p["metadata"]["uid"]: p["status"]["podIP"] for p in wait_running(kubectl, ns, "reboot", 3)}
        entries = ledger_entries(real_node)
        assert {a: e["podUID"] for a, e in entries.items()} == {ip: uid for uid, ip in before.items()}
        netns = realnode.sandbox_netns(real_node)
        for component in ("kubelet", "containerd"):
            cluster.stop_component(f"{component}@{REAL_NODE}", sig=signal.SIGKILL)
        realnode.power_off(real_node, netns)
        assert not any(Path(e["netns"]).exists() for e in ledger_entries(real_node).values())
        assert len(ledger_entries(real_node)) == 3, "the ledger is on disk: it survives"
        for component in ("containerd", "kubelet"):
            cluster.start_component(f"{component}@{REAL_NODE}")

        def back() -> list[dict[str, Any]] | None:
            up = [
                p
                for p in pods_of(kubectl, ns, "app=reboot")
                if p["status"].get("phase") == "Running"
                and p["status"].get("podIP")
                and p["status"]["containerStatuses"][0].get("ready")
                and p["status"]["containerStatuses"][0]["restartCount"] >= 1
            ]
            return up if len(up) == 3 else None

        after = wait_for("every pod running again in a new sandbox", back, timeout=240, interval=1)
        assert {p["metadata"]["uid"]: p["status"]["podIP"] for p in after} == before
        entries = ledger_entries(real_node)
        assert {a: e["podUID"] for a, e in entries.items()} == {ip: uid for uid, ip in before.items()}
        assert all(Path(e["netns"]).exists() for e in entries.values()), "only live sandboxes recorded"
        assert {a: len(n) for a, n in sampler.held().items()} == dict.fromkeys(before.values(), 1)
        assert_check_clean(kubectl)
        kubectl("delete", "pod", "-n", ns, "-l", "app=reboot", "--wait=true", "--timeout=120s")
        wait_for("every sandbox torn down", lambda: not sampler.held(), timeout=120, interval=0.5)
    no_overlaps(sampler)
    assert ledger_entries(real_node) == {}, "nothing stays held on the node"
    wait_for(
        "nothing stays held in the pool",
        lambda: not kubectl.json("get", "nip", "reboot")["status"].get("allocations"),
        60,
    )
