"""E2E fixtures: the CRD, the scheduler as a real process, NodeIPPools (the helpers they use:
helpers.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import binaries
import devcluster
import realnode
from tests.builders import free_port
from tests.e2e.helpers import (
    Pools,
    SchedulerProcess,
    install_crd,
    running_extender,
    running_kube_scheduler,
)
from tests.e2e.realpods import REAL_NODE, ipv6_subnet
from tests.kube import Kubectl, create_namespace


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


@pytest.fixture(autouse=True)
def _module_scheduler_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """A failed test that used the module's ``scheduler`` prints what that scheduler logged
    during the test (its last 80 lines), which CI's report shows as captured output."""
    if "scheduler" not in request.fixturenames:
        yield
        return
    proc: SchedulerProcess = request.getfixturevalue("scheduler")
    start = proc.log_path.stat().st_size if proc.log_path.exists() else 0
    yield
    if _failed(request):
        with open(proc.log_path, "rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines(True)
        print(f"--- module scheduler log during the test (last 80 of {len(lines)} lines) ---")
        print("".join(lines[-80:]))


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


@pytest.fixture(scope="module")
def real_node(cluster: devcluster.Cluster) -> Iterator[realnode.Layout]:
    """Real node ``real-node-1`` for this module (stopped, torn down and deleted afterwards)."""
    try:
        try:
            layout = cluster.start_real_node(REAL_NODE)
        except binaries.DevclusterError as e:
            if os.environ.get("CI") == "true":
                pytest.fail(f"a real node could not start in CI: {e}")
            pytest.skip(f"a real node could not start: {e}")
        yield layout
    finally:
        cluster.stop_real_node(REAL_NODE, delete_node=True)


@pytest.fixture
def node_pool(real_node: realnode.Layout, pools: Pools) -> Any:
    """``node_pool(name, addresses)``: a NodeIPPool for the real node with its subnet's facts
    (with an IPv6 range among ``addresses``, its IPv6 subnet's too: ``realpods.ipv6_subnet``)."""

    def create(name: str, addresses: list[str]) -> None:
        subnets = [{"cidr": real_node.subnet, "gateway": real_node.node_ip, "routes": [{"dst": "0.0.0.0/0"}]}]
        if any(":" in a for a in addresses):
            v6 = ipv6_subnet(real_node)
            subnets.append({"cidr": str(v6), "gateway": str(v6[1]), "routes": [{"dst": "::/0"}]})
        pools.create(name, real_node.name, addresses, subnets=subnets)

    return create


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
    """``ipscheduler extender`` as deploy/extender runs it (HTTPS, self-signed)."""
    with running_extender(kubectl, tmp_path / "extender.log", extender_port) as proc:
        yield proc


@pytest.fixture
def kube_scheduler(
    cluster: devcluster.Cluster, extender: SchedulerProcess, extender_port: int
) -> Iterator[None]:
    """kube-scheduler calling ``extender`` with deploy/extender's entry as shipped
    (``enableHTTPS``, ``tlsConfig.insecure``)."""
    with running_kube_scheduler(cluster, extender_port, "kube-scheduler-extender"):
        yield
