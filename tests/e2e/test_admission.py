"""Only the scheduler hands out addresses, at the API server: deploy/13-admission-policies.yaml
(ValidatingAdmissionPolicies, CEL, no webhook) tried as users would, each refusal read from
the API's answer, each allowed path taken for real.

Identities: the dev cluster's admin impersonates ``tenant`` (ClusterRole ``edit`` in the
test's namespace, as a team gets it), ``pool-editor`` (may update nodeippools/status by RBAC
alone) and ``migrator`` (``edit`` plus the adopter role); ``ip release`` and ``check`` run
with the token of a ServiceAccount bound to the releaser role. The scheduler is the module's
(admin credentials: system:masters passes every authorizer check, as the ServiceAccount
holding the ``allocate`` verb does in tests/e2e/test_deploy.py).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    ipscheduler_check,
    token_kubeconfig,
)
from tests.kube import Kubectl, pod_manifest, wait_for

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "deploy" / "13-admission-policies.yaml"
ROLES = REPO / "deploy" / "14-address-roles.yaml"
RELEASER_SA = "ip-releaser"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.fixture
def policies(kubectl: Kubectl, crd: None, ns: str) -> Iterator[None]:
    """The policies and roles of deploy/, the test identities' bindings; all removed after."""
    made: list[tuple[str, ...]] = []

    def make(*args: str) -> None:
        kubectl(*args)

    for doc in _docs(POLICIES) + _docs(ROLES):
        kubectl.apply(doc)
        made.append((doc["kind"].lower(), doc["metadata"]["name"]))
    make(
        "create",
        "rolebinding",
        "tenant-edit",
        "--clusterrole=edit",
        "--user=tenant",
        "--user=migrator",
        "-n",
        ns,
    )
    make(
        "create",
        "clusterrole",
        "pool-status-editor",
        "--verb=update",
        "--resource=nodeippools.ipscheduler.io/status",
    )
    made.append(("clusterrole", "pool-status-editor"))
    make(
        "create",
        "clusterrolebinding",
        "pool-status-editor",
        "--clusterrole=pool-status-editor",
        "--user=pool-editor",
    )
    made.append(("clusterrolebinding", "pool-status-editor"))
    make(
        "create",
        "clusterrolebinding",
        "migrator-adopts",
        "--clusterrole=ip-scheduler-address-adopter",
        "--user=migrator",
    )
    made.append(("clusterrolebinding", "migrator-adopts"))
    make("create", "serviceaccount", RELEASER_SA, "-n", ns)
    make(
        "create",
        "clusterrolebinding",
        f"{ns}-releaser",
        "--clusterrole=ip-scheduler-ip-releaser",
        f"--serviceaccount={ns}:{RELEASER_SA}",
    )
    made.append(("clusterrolebinding", f"{ns}-releaser"))
    # The policies are enforced once the API server's policy informer has them: wait until a
    # refused write is refused.
    probe = pod_manifest("probe", scheduler=SCHEDULER)
    probe["metadata"]["annotations"] = {"ipscheduler.io/ip": "10.0.0.1"}
    wait_for(
        "policies enforced",
        lambda: (
            "ValidatingAdmissionPolicy"
            in _as(kubectl, "tenant", ns, "create", probe, "--dry-run=server").stderr
        ),
        timeout=30,
    )
    try:
        yield
    finally:
        kubectl.run("delete", "pod", "--all", "-n", ns, "--wait=true", check=False)
        for kind, name in reversed(made):
            kubectl.run("delete", kind, name, "--ignore-not-found", check=False)


def _as(
    kubectl: Kubectl, user: str, ns: str | None, verb: str, doc: dict[str, Any], *extra: str
) -> subprocess.CompletedProcess[str]:
    """``kubectl <verb> -f -`` of ``doc`` impersonating ``user``: the completed process."""
    where = ("-n", ns) if ns else ()
    # --validate=false: kubectl's client-side schema check lists CRDs, which these users may not.
    args = (verb, "-f", "-", "--as", user, "--validate=false", *where, *extra)
    return kubectl.run(*args, check=False, stdin=json.dumps(doc))


def _bound(kubectl: Kubectl, ns: str, name: str) -> dict[str, Any]:
    return wait_for(
        f"{name} bound",
        lambda: (p := kubectl.json("get", "pod", name, "-n", ns))["spec"].get("nodeName") and p,
    )


def _ip_release(address: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """``ipscheduler ip release ADDRESS`` as the user of ``kubeconfig``."""
    return subprocess.run(
        [sys.executable, "-m", "ipscheduler", "ip", "release", address, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _refusal(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    print(result.stderr.strip())
    return result.stderr


def test_only_the_scheduler_writes_addresses_each_refusal_and_each_allowed_path(
    kubectl: Kubectl, scheduler: SchedulerProcess, pools: Pools, ns: str, policies: None, tmp_path: Path
) -> None:
    pools.create("adm", "node-2", ["10.87.2.1-10.87.2.4"])

    # Allowed: a tenant's pod scheduled as usual; the scheduler's Binding carries the address.
    kubectl.create(pod_manifest("web", scheduler=SCHEDULER, terminationGracePeriodSeconds=0), ns)
    web = _bound(kubectl, ns, "web")
    assert web["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.87.2.1"

    # Refused: a tenant creating a pod that names its own address.
    forged = pod_manifest("forged", scheduler=SCHEDULER, terminationGracePeriodSeconds=0)
    forged["metadata"]["annotations"] = {"ipscheduler.io/ip": "10.87.2.2", "ipscheduler.io/pool": "adm"}
    err = _refusal(_as(kubectl, "tenant", ns, "create", forged))
    assert "ValidatingAdmissionPolicy 'ip-scheduler-pod-addresses'" in err
    assert (
        "annotation(s) ipscheduler.io/ip, ipscheduler.io/pool of a pod are written by ip-scheduler only"
        in err
    )
    assert "tenant may not create a pod or Binding with them" in err

    # Refused: a tenant changing, or removing, the address of a running pod.
    changed = kubectl.run(
        "annotate",
        "pod",
        "web",
        "ipscheduler.io/ip=10.87.2.3",
        "--overwrite",
        "-n",
        ns,
        "--as",
        "tenant",
        check=False,
    )
    assert "tenant may not set, change or remove them" in _refusal(changed)
    removed = kubectl.run(
        "annotate", "pod", "web", "ipscheduler.io/ip-", "-n", ns, "--as", "tenant", check=False
    )
    assert "annotation(s) ipscheduler.io/ip of a pod" in _refusal(removed)
    dual = kubectl.run(
        "annotate",
        "pod",
        "web",
        "ipscheduler.io/ips=10.87.2.1,fd00::1",
        "-n",
        ns,
        "--as",
        "tenant",
        check=False,
    )
    assert "annotation(s) ipscheduler.io/ips of a pod" in _refusal(dual)
    # Allowed: any other change of the pod.
    kubectl("label", "pod", "web", "tier=front", "-n", ns, "--as", "tenant")

    # Refused: a Binding with the annotations, through both binding paths, by a user who may
    # create Bindings but is not the scheduler.
    pending = pod_manifest("pending", scheduler="nobody", terminationGracePeriodSeconds=0)
    kubectl.create(pending, ns)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "pending", "annotations": {"ipscheduler.io/ip": "10.87.2.4"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-2"},
    }
    kubectl("create", "clusterrole", f"{ns}-binder", "--verb=create", "--resource=bindings,pods/binding")
    kubectl("create", "clusterrolebinding", f"{ns}-binder", f"--clusterrole={ns}-binder", "--user=tenant")
    try:
        err = _refusal(_as(kubectl, "tenant", ns, "create", binding))
        assert "ValidatingAdmissionPolicy 'ip-scheduler-pod-addresses'" in err
        assert "annotation(s) ipscheduler.io/ip" in err
        raw = f"/api/v1/namespaces/{ns}/pods/pending/binding"
        sub = kubectl.run(
            "create", "--raw", raw, "-f", "-", "--as", "tenant", check=False, stdin=json.dumps(binding)
        )
        assert "ValidatingAdmissionPolicy 'ip-scheduler-pod-addresses'" in _refusal(sub)
        assert kubectl.json("get", "pod", "pending", "-n", ns)["spec"].get("nodeName") is None
    finally:
        kubectl.run("delete", "clusterrolebinding,clusterrole", f"{ns}-binder", check=False)

    # Refused: a status write by a user whom RBAC lets update it, adding an allocation.
    pool = pools.get("adm")
    since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pool["status"]["allocations"]["forged-uid"] = {
        "ip": "10.87.2.4",
        "pod": f"{ns}/forged",
        "phase": "Bound",
        "since": since,
    }
    err = _refusal(_as(kubectl, "pool-editor", None, "replace", pool, "--subresource=status"))
    assert "ValidatingAdmissionPolicy 'ip-scheduler-pool-status'" in err
    assert (
        "the status of NodeIPPool adm is written by ip-scheduler only: pool-editor may not add or change"
        in err
    )
    assert "forged-uid" in err
    # Refused: the same user removing an allocation (no verb release).
    pool = pools.get("adm")
    pool["status"]["allocations"].pop(web["metadata"]["uid"])
    err = _refusal(_as(kubectl, "pool-editor", None, "replace", pool, "--subresource=status"))
    assert (
        "pool-editor may not release allocations: it needs verb release on nodeippools.ipscheduler.io" in err
    )

    # Allowed: `ip release` by a ServiceAccount bound to the releaser role, of an address no
    # live pod holds (kept with release policy Never for a pod that is gone).
    pool = pools.get("adm")
    pool["status"]["allocations"]["gone-uid"] = {
        "ip": "10.87.2.4",
        "pod": f"{ns}/gone-0",
        "phase": "Retained",
        "since": since,
        "retainedSince": since,
        "releasePolicy": "Never",
        "identity": f"{ns}/gone-0",
    }
    kubectl("replace", "--subresource=status", "-f", "-", stdin=json.dumps(pool))  # admin: allowed
    kc = token_kubeconfig(kubectl, RELEASER_SA, ns, tmp_path / "releaser.kubeconfig")
    release = _ip_release("10.87.2.4", kc)
    assert release.returncode == 0, release.stdout + release.stderr
    assert "gone-uid" not in (pools.get("adm")["status"].get("allocations") or {})
    # The releaser's `ip release` of a running pod's address is ip release's own refusal.
    refused = _ip_release("10.87.2.1", kc)
    assert refused.returncode != 0 and "is held by running pod" in refused.stdout + refused.stderr
    # Allowed: check, read-only, with the releaser's token.
    check = ipscheduler_check(kc)
    assert check.returncode == 0, check.stdout + check.stderr

    # Allowed: a migration by a user granted adopt; the scheduler adopts the pod.
    migrated = pod_manifest(
        "migrated", scheduler=SCHEDULER, nodeName="node-2", terminationGracePeriodSeconds=0
    )
    migrated["metadata"]["annotations"] = {"ipscheduler.io/ip": "10.87.2.3", "ipscheduler.io/pool": "adm"}
    made = _as(kubectl, "migrator", ns, "create", migrated)
    assert made.returncode == 0, made.stderr
    uid = kubectl.json("get", "pod", "migrated", "-n", ns)["metadata"]["uid"]
    wait_for("migrated pod adopted", lambda: uid in (pools.get("adm")["status"].get("allocations") or {}))

    # Scheduling is unaffected: another pod gets the next free address.
    kubectl.create(pod_manifest("next", scheduler=SCHEDULER, terminationGracePeriodSeconds=0), ns)
    assert _bound(kubectl, ns, "next")["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.87.2.2"
