"""An upgrade as a user does one: pods the previous release placed keep their addresses
under the new one, which then releases, retains and hands out addresses as before.

The previous release is :data:`PREVIOUS_RELEASE` of this repository's history: its
``operator/`` (``git archive``) runs as the harness runs the scheduler (same venv, same
flags) with ``PYTHONPATH`` pointing at it, after its own NodeIPPool CRD. Then, as
docs/install.md says: stop it, apply the CRD of crds/, start the new scheduler."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helpers import (
    ROOT,
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    install_crd,
    nodeippools_table,
    pods_of,
    statefulset,
)
from tests.kube import Kubectl, pod_manifest, wait_for

PREVIOUS_RELEASE = "eda46a53eb2a1103e1e5ca1341b03cc144a2d450"
# The previous release's commit: the last one before dual-stack pods changed the NodeIPPool
# CRD (allocation `ips`, `allocated` counting addresses) and added `ipscheduler.io/ips`.
# Move it to the release before the next CRD change when there is one.

CRD_NAME = "nodeippools.ipscheduler.io"
CRD_PATH = "crds/nodeippools.ipscheduler.io.yaml"
ADDRESS_POOL, SLOT_POOL = "upgrade-addresses", "upgrade-slots"
POOLS = [ADDRESS_POOL, SLOT_POOL]
ADDRESSES = ipaddress.ip_network("10.62.1.0/28")
KEPT_FIELDS = ("ip", "phase", "pod", "releasePolicy", "identity")
"""What an allocation of a single-stack pod must keep across the upgrade."""
COLUMNS = ("Capacity", "Allocated", "Free", "Retained", "Releasing")
"""The columns of ``kubectl get nip`` that count."""
HOLD = "example.com/upgrade-hold"
"""A scheduling gate: the sticky pod's successor waits with it while its address is Retained."""


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60, check=False)


def previous_release(into: Path) -> Path:
    """Extract the previous release's ``operator/`` into ``into``; returns that folder."""
    if git("cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}").returncode != 0:
        pytest.fail(
            f"the upgrade test needs the repository's history: commit {PREVIOUS_RELEASE} (the previous "
            "release) is not in this clone (a shallow one? `git fetch --unshallow`)"
        )
    archive = git("archive", "--format=tar", PREVIOUS_RELEASE, "operator")
    assert archive.returncode == 0, archive.stderr.decode()
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, timeout=60, check=True)
    return into / "operator"


def crd_has_ips(kubectl: Kubectl) -> bool:
    """Whether the NodeIPPool CRD the cluster has declares ``status.allocations.*.ips``."""
    crd = kubectl.json("get", "crd", CRD_NAME)
    (version,) = crd["spec"]["versions"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    allocation = status["properties"]["allocations"]["additionalProperties"]
    return "ips" in allocation["properties"]


def apply_previous_crd(kubectl: Kubectl) -> None:
    text = git("show", f"{PREVIOUS_RELEASE}:{CRD_PATH}")
    assert text.returncode == 0, text.stderr.decode()
    assert yaml.safe_load(text.stdout)["metadata"]["name"] == CRD_NAME
    kubectl.apply(text.stdout.decode())
    assert not crd_has_ips(kubectl), "the previous release's CRD has no allocation ips"


@pytest.fixture
def current_crd_restored(kubectl: Kubectl, crd: None) -> Iterator[None]:
    """Whatever happens, the cluster ends with the CRDs of crds/ (as the ``crd`` fixture
    installed them for the tests that share the cluster)."""
    try:
        yield
    finally:
        install_crd(kubectl)
        assert crd_has_ips(kubectl)


@pytest.fixture
def old_scheduler(
    kubectl: Kubectl,
    current_crd_restored: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., SchedulerProcess]]:
    """``start(*flags)``: the previous release's scheduler, as the harness starts one but
    with ``PYTHONPATH`` at its extracted ``operator/``; stopped at the end whatever happens
    (its log tail printed if the test failed)."""
    operator = previous_release(tmp_path / "previous")
    env = {"PYTHONPATH": str(operator)}
    probe = subprocess.run(
        [sys.executable, "-c", "import ipscheduler; print(ipscheduler.__file__)"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert Path(probe.stdout.strip()).is_relative_to(operator), f"not the previous release: {probe.stdout}"
    procs: list[SchedulerProcess] = []

    def start(*flags: str) -> SchedulerProcess:
        proc = SchedulerProcess(kubectl.kubeconfig, tmp_path / "previous-scheduler.log", *flags)
        procs.append(proc)
        with monkeypatch.context() as m:  # SchedulerProcess hands its process os.environ
            m.setenv("PYTHONPATH", env["PYTHONPATH"])
            return proc.start()

    yield start
    for proc in procs:
        proc.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for proc in procs:
            print(f"--- {proc.log_path.name} (last 60 lines) ---\n{proc.log_tail(60)}")


def wait_processed(pools: Pools, name: str) -> None:
    """Until the scheduler has written the pool's status for its current generation."""

    def processed() -> bool:
        obj = pools.get(name)
        status = obj.get("status") or {}
        return bool(status.get("observedGeneration") == obj["metadata"].get("generation"))

    wait_for(f"NodeIPPool {name} processed", processed, timeout=30, interval=0.2)


def allocations(pools: Pools) -> dict[str, dict[str, Any]]:
    """Pod UID → allocation, over both pools (each with its pool's name under ``_pool``)."""
    out: dict[str, dict[str, Any]] = {}
    for name in POOLS:
        for uid, a in ((pools.get(name).get("status") or {}).get("allocations") or {}).items():
            out[uid] = {**a, "_pool": name}
    return out


def table(kubectl: Kubectl) -> dict[str, dict[str, str]]:
    """``kubectl get nip`` for our pools: name → the counting columns."""
    rows = nodeippools_table(kubectl)
    return {name: {c: rows[name][c.upper()] for c in COLUMNS} for name in POOLS}


def bound(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any] | None:
    """Pod ``name`` once bound (for an address pool, with its address), not being deleted."""
    res = kubectl.run("get", "pod", name, "-n", ns, "-o", "json", check=False)
    if res.returncode != 0:
        return None
    pod = json.loads(res.stdout)
    if not pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return None
    ann = pod["metadata"].get("annotations") or {}
    if ann.get("ipscheduler.io/pools") == ADDRESS_POOL and not ann.get("ipscheduler.io/ip"):
        return None
    return dict(pod)


def in_pool(pool: str, **annotations: str) -> dict[str, str]:
    return {"ipscheduler.io/pools": pool, **annotations}


def bare_pod(name: str, pool: str, **annotations: str) -> dict[str, Any]:
    body = pod_manifest(name, SCHEDULER, terminationGracePeriodSeconds=0)
    body["metadata"]["annotations"] = in_pool(pool, **annotations)
    return body


def warnings(kubectl: Kubectl, ns: str) -> list[str]:
    """``reason: message (pod)`` of every Warning event in ``ns``."""
    items = kubectl.json("get", "events", "-n", ns, "--field-selector", "type=Warning")["items"]
    return [f"{e.get('reason')}: {e.get('message')} ({e['involvedObject'].get('name')})" for e in items]


def test_pods_placed_by_the_previous_release_keep_their_addresses_and_are_released_by_the_new_one(
    old_scheduler: Callable[..., SchedulerProcess],
    scheduler_factory: Callable[..., SchedulerProcess],
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
) -> None:
    # The previous release, its CRD first. Bound marks written at once (the default lets
    # them wait up to 5 min for a write to ride along): the state of pods placed long ago.
    apply_previous_crd(kubectl)
    old = old_scheduler("--bound-mark-delay", "0s", "--gc-interval", "1s")
    pools.create(ADDRESS_POOL, "node-1", [f"{ADDRESSES[10]}-{ADDRESSES[14]}"])
    pools.create(SLOT_POOL, "node-2", capacity=4)
    for name in POOLS:
        wait_processed(pools, name)
    for name in ("plain-0", "plain-1"):
        kubectl.create(bare_pod(name, ADDRESS_POOL), ns)
    for name in ("slot-0", "slot-1"):
        kubectl.create(bare_pod(name, SLOT_POOL), ns)
    sticky = statefulset(
        "sticky", 1, **in_pool(ADDRESS_POOL, **{"ipscheduler.io/release-policy": "StatefulSet"})
    )
    sticky["spec"]["updateStrategy"] = {"type": "OnDelete"}  # a template change waits for a deletion
    kubectl.apply(sticky, ns)
    names = ["plain-0", "plain-1", "slot-0", "slot-1", "sticky-0"]
    placed = {n: wait_for(f"{n} bound", functools.partial(bound, kubectl, ns, n), timeout=60) for n in names}

    def all_bound_marked() -> dict[str, dict[str, Any]] | None:
        now = allocations(pools)
        return now if len(now) == 5 and {a["phase"] for a in now.values()} == {"Bound"} else None

    before = wait_for("5 allocations Bound", all_bound_marked, timeout=60)
    annotations = {n: p["metadata"].get("annotations") or {} for n, p in placed.items()}
    uids = {n: p["metadata"]["uid"] for n, p in placed.items()}
    assert sorted(before) == sorted(uids.values())
    sticky_before = before[uids["sticky-0"]]
    assert (sticky_before["releasePolicy"], sticky_before["identity"]) == ("StatefulSet", f"{ns}/sticky-0")
    for n in ("plain-0", "plain-1", "sticky-0"):
        assert ipaddress.ip_address(annotations[n]["ipscheduler.io/ip"]) in ADDRESSES
    counts = table(kubectl)
    assert counts[ADDRESS_POOL] == {
        "Capacity": "5",
        "Allocated": "3",
        "Free": "2",
        "Retained": "0",
        "Releasing": "0",
    }
    assert counts[SLOT_POOL] == {
        "Capacity": "4",
        "Allocated": "2",
        "Free": "2",
        "Retained": "0",
        "Releasing": "0",
    }

    # The upgrade: stop the previous release, apply the new CRD, start the new release.
    old.stop()
    install_crd(kubectl)
    assert crd_has_ips(kubectl)
    new = scheduler_factory("--gc-interval", "1s")  # its sweeps run during the checks below
    nothing_to_repair = (
        "start-up reconcile: {'released': 0, 'marked_bound': 0, 'adopted': 0, 'adopt_conflicts': 0}"
    )
    assert new.logged(nothing_to_repair), new.log_tail()

    # Nothing moved: annotations, allocations, counts; no complaint; `ipscheduler check` clean.
    assert_check_clean(kubectl)
    after = allocations(pools)
    assert sorted(after) == sorted(before), "the same pods hold allocations"
    for uid, a in after.items():
        assert {k: a.get(k) for k in KEPT_FIELDS} == {k: before[uid].get(k) for k in KEPT_FIELDS}, a["pod"]
        assert "ips" not in a, a
    assert after == before, "single-stack allocations: nothing for the new release to rewrite"
    for n in names:
        pod = kubectl.json("get", "pod", n, "-n", ns)
        assert pod["metadata"]["uid"] == uids[n]
        assert (pod["metadata"].get("annotations") or {}) == annotations[n], n
    assert table(kubectl) == counts
    assert warnings(kubectl, ns) == []
    assert new.metric("ipscheduler_pool_status_writes_total") == 0, "the new release rewrote no pool"

    # A plain pod deleted: its address goes back to its pool.
    kubectl("delete", "pod", "plain-0", "-n", ns, "--wait=true")
    wait_for("plain-0's allocation released", lambda: uids["plain-0"] not in allocations(pools), timeout=60)
    wait_for("Free 3", lambda: table(kubectl)[ADDRESS_POOL]["Free"] == "3", timeout=30)

    # The sticky pod deleted: its address is Retained, and the next sticky-0 gets it back
    # (on the same node). The successor waits behind a scheduling gate meanwhile.
    gate = {"spec": {"template": {"spec": {"schedulingGates": [{"name": HOLD}]}}}}
    kubectl("patch", "statefulset", "sticky", "-n", ns, "--type=merge", "-p", json.dumps(gate))
    kubectl("delete", "pod", "sticky-0", "-n", ns, "--wait=true")

    def retained() -> dict[str, Any] | None:
        a = allocations(pools).get(uids["sticky-0"])
        return a if a is not None and a["phase"] == "Retained" else None

    kept = wait_for("sticky-0's address Retained", retained, timeout=60)
    assert {k: kept.get(k) for k in ("ip", "identity", "releasePolicy")} == {
        k: sticky_before.get(k) for k in ("ip", "identity", "releasePolicy")
    }
    successor = wait_for(
        "the next sticky-0 created",
        lambda: next(
            (p for p in pods_of(kubectl, ns, "app=sticky") if p["metadata"]["uid"] != uids["sticky-0"]), None
        ),
        timeout=60,
    )
    assert table(kubectl)[ADDRESS_POOL] == {
        "Capacity": "5",
        "Allocated": "2",
        "Free": "3",
        "Retained": "1",
        "Releasing": "0",
    }
    kubectl(
        "patch",
        "pod",
        "sticky-0",
        "-n",
        ns,
        "--type=json",
        "-p",
        json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]),
    )
    back = wait_for("the next sticky-0 bound", lambda: bound(kubectl, ns, "sticky-0"), timeout=60)
    assert back["metadata"]["uid"] == successor["metadata"]["uid"]
    assert back["spec"]["nodeName"] == placed["sticky-0"]["spec"]["nodeName"]
    assert (
        back["metadata"]["annotations"]["ipscheduler.io/ip"] == annotations["sticky-0"]["ipscheduler.io/ip"]
    )
    now = allocations(pools)
    assert uids["sticky-0"] not in now
    assert now[back["metadata"]["uid"]]["identity"] == f"{ns}/sticky-0"

    # A new dual-stack pod in the upgraded pool (IPv4 only): PreferDualStack falls back to IPv4.
    dual = bare_pod("dual", ADDRESS_POOL, **{"ipscheduler.io/ip-family-policy": "PreferDualStack"})
    kubectl.create(dual, ns)
    got = wait_for("dual bound", lambda: bound(kubectl, ns, "dual"), timeout=60)
    ann = got["metadata"]["annotations"]
    ip = ipaddress.ip_address(ann["ipscheduler.io/ip"])
    assert ip.version == 4 and ip in ADDRESSES
    assert ann["ipscheduler.io/ips"] == ann["ipscheduler.io/ip"]
    allocation = allocations(pools)[got["metadata"]["uid"]]
    assert allocation["ip"] == str(ip) and not allocation.get("ips")
    assert table(kubectl)[ADDRESS_POOL]["Free"] == "2"
    assert warnings(kubectl, ns) == []
    assert_check_clean(kubectl)
    assert new.metric("ipscheduler_pool_status_writes_total") > 0, "the metric read 0 above counts writes"
