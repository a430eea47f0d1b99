"""Test helpers that act as a user would: kubectl against the dev cluster."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class Kubectl:
    """Runs ``kubectl --kubeconfig K`` and parses JSON output."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=process_timeout(args),
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}"
            )
        return proc

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        return self.run(*args, stdin=stdin).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))

    def apply(self, manifest: str | dict[str, Any], namespace: str | None = None) -> str:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        return self("apply", *ns, "-f", "-", stdin=text)

    def create(self, manifest: dict[str, Any], namespace: str | None = None) -> str:
        ns = ["-n", namespace] if namespace else []
        return self("create", *ns, "-f", "-", stdin=json.dumps(manifest))


def timeout_scale() -> float:
    """The factor every wait of the tests (:func:`wait_for`, a kubectl process) is stretched by:
    ``$IPSCHEDULER_TEST_TIMEOUT_SCALE`` if set, else 2 in a run of several pytest-xdist
    workers (``$PYTEST_XDIST_WORKER_COUNT`` > 1: their dev clusters share the machine's
    cores), else 1. A longer wait costs time only when the awaited thing never happens."""
    if scale := os.environ.get("IPSCHEDULER_TEST_TIMEOUT_SCALE"):
        return float(scale)
    return 2.0 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1 else 1.0


def process_timeout(args: tuple[str, ...] | list[str], default: float = 60) -> float:
    """How long a kubectl process may run: its own ``--timeout=<N>s`` (a ``--wait``) plus 30 s,
    so kubectl answers before the process is killed; ``default`` without one; either stretched
    by :func:`timeout_scale`."""
    limit = default
    for arg in args:
        if m := re.fullmatch(r"--timeout=(\d+)s", arg):
            limit = max(default, int(m.group(1)) + 30)
    return limit * timeout_scale()


def create_namespace(kubectl: Kubectl, test_name: str) -> str:
    """Create a uniquely named namespace for a test and wait until pods can be created in it."""
    base = re.sub(r"[^a-z0-9-]", "-", test_name.lower())[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    # The ServiceAccount admission plugin rejects pods until the controller-manager made "default".
    wait_for(
        "default ServiceAccount",
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        timeout=30,
    )
    return name


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60, interval: float = 0.5) -> T:
    """Poll ``fn`` until it returns something truthy, for up to ``timeout`` seconds stretched by
    :func:`timeout_scale`; raise AssertionError naming ``what`` on timeout."""
    timeout *= timeout_scale()
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def pod_manifest(name: str, scheduler: str | None = None, **spec: Any) -> dict[str, Any]:
    """A minimal pod running a pause image (kwok never pulls it)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    return body
