"""Shared fixtures: a real dev cluster per test session, a namespace per test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube import Kubectl, create_namespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

import binaries  # noqa: E402
import devcluster  # noqa: E402

SLOWEST_FIRST = (
    "test_install.py",
    "test_teardown.py",
    "test_fidelity.py",
    "test_sticky.py",
    "test_faults.py",
    "test_reliability.py",
    "test_properties.py",
    "test_extender.py",
    "test_scheduling.py",
    "test_chaos.py",
    "test_backlog.py",
    "test_realnode.py",
    "test_deploy.py",
    "test_cni.py",
)
"""The end-to-end modules that take longest, longest first (as measured in a parallel run);
they run before all other tests. ``make test`` hands whole files to its parallel workers in
collection order (pytest-xdist's ``--dist loadfile --no-loadscope-reorder``), so the longest
start at once and the short files fill the workers up at the end."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e is marked ``e2e``; the files of :data:`SLOWEST_FIRST` are
    moved to the front in that order (the others keep theirs)."""
    for item in items:
        if "/tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.path.name, len(rank)) if item.path.parent.name == "e2e" else len(rank)
    )


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[devcluster.Cluster]:
    """A real control plane (etcd, kube-apiserver, controller-manager, kwok), 3 nodes.

    Locally, a missing toolchain skips e2e tests with the reason; with
    CI=true it fails them.
    """
    try:
        binaries.ensure_binaries()
    except binaries.DevclusterError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"control-plane binaries unavailable in CI: {e}")
        pytest.skip(f"control-plane binaries unavailable: {e}")
    c = devcluster.Cluster(tmp_path_factory.mktemp("devcluster") / "cluster")
    try:
        c.up(nodes=3)
        yield c
    finally:
        c.down()


@pytest.fixture(scope="session")
def kubectl(cluster: devcluster.Cluster) -> Kubectl:
    return Kubectl(cluster.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (deleted afterwards, without waiting)."""
    name = create_namespace(kubectl, request.node.name)
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)
