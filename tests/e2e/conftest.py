"""E2E fixtures: the CRD, the scheduler as a real process, NodeIPPools (the helpers they use:
helpers.py)."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import devcluster
from tests.builders import free_port
from tests.e2e.helpers import (
    KUBE,
    OURS,
    RELEASED_ANNOTATION,
    RESOURCE,
    ROOT,
    Pools,
    SchedulerProcess,
    install_crd,
    published,
)
from tests.kube import Kubectl, create_namespace, wait_for


@pytest.fixture(scope="session")
def crd(kubectl: Kubectl) -> None:
    install_crd(kubectl)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """Keep each phase's report on the item (``item.rep_call``) for fixtures' teardown."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


@pytest.fixture
def scheduler_factory(
    kubectl: Kubectl, crd: None, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """Start schedulers on demand; all are stopped at the end of the test (a failed test
    prints each one's log tail, which CI's report shows as captured teardown output)."""
    procs: list[SchedulerProcess] = []

    def start(*extra: str, wait: str = "start-up reconcile") -> SchedulerProcess:
        log = tmp_path / f"scheduler-{len(procs)}.log"
        p = SchedulerProcess(kubectl.kubeconfig, log, *extra).start(wait=wait)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()
    if _failed(request):
        for p in procs:
            print(f"--- {p.log_path.name} (last 60 lines) ---\n{p.log_tail(60)}")


@pytest.fixture(scope="module")
def scheduler(
    kubectl: Kubectl, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    """One scheduler for a whole test module."""
    p = SchedulerProcess(kubectl.kubeconfig, tmp_path_factory.mktemp("scheduler") / "scheduler.log").start()
    yield p
    p.stop()


@pytest.fixture
def pools(kubectl: Kubectl, crd: None) -> Iterator[Pools]:
    p = Pools(kubectl)
    yield p
    p.cleanup()


@pytest.fixture
def ns(kubectl: Kubectl, pools: Pools, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace deleted (and waited for) *before* the test's pools go away."""
    name = create_namespace(kubectl, request.node.name)
    yield name
    kubectl.run("delete", "namespace", name, "--wait=true", "--timeout=90s", check=False)


@pytest.fixture(scope="module")
def extender_port() -> int:
    return free_port()


@pytest.fixture
def extender(kubectl: Kubectl, crd: None, tmp_path: Path, extender_port: int) -> Iterator[SchedulerProcess]:
    """``ipscheduler extender`` (its own schedulerName for scheduler mode beside it); the
    nodes' extended resource and its stamp are removed afterwards."""
    proc = SchedulerProcess(
        kubectl.kubeconfig,
        tmp_path / "extender.log",
        "--listen",
        f"127.0.0.1:{extender_port}",
        "--scheduler-name",
        OURS,
        "--gc-interval",
        "5s",
        command="extender",
    ).start()
    wait_for("the extender verbs served", lambda: proc.logged("serving the extender verbs"), timeout=30)
    yield proc
    proc.stop()
    for node, value in published(kubectl).items():
        if value is None and not node_annotated(kubectl, node):
            continue
        patch = json.dumps(
            {
                "metadata": {"annotations": {RELEASED_ANNOTATION: None}},
                "status": {"capacity": {RESOURCE: None}, "allocatable": {RESOURCE: None}},
            }
        )
        kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", patch)


@pytest.fixture
def kube_scheduler(
    cluster: devcluster.Cluster, extender: SchedulerProcess, extender_port: int
) -> Iterator[None]:
    """The real kube-scheduler with the extender entry deploy/extender/ ships, its urlPrefix
    (the in-cluster Service) pointed at this test's extender on 127.0.0.1."""
    config = yaml.safe_load((ROOT / "deploy" / "extender" / "kube-scheduler-config.yaml").read_text())
    (entry,) = config["extenders"]
    proc = cluster.start_kube_scheduler(
        "kube-scheduler-extender",
        scheduler_name=KUBE,
        extenders=[{**entry, "urlPrefix": f"http://127.0.0.1:{extender_port}"}],
    )
    yield
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def node_annotated(kubectl: Kubectl, node: str) -> bool:
    return RELEASED_ANNOTATION in (kubectl.json("get", "node", node)["metadata"].get("annotations") or {})
