"""deploy/, deploy/extender and the Helm chart against a real API server: every object they
hold passes the server's validation and admission (server-side dry run), their pods are
admitted by Pod Security and Priority admission, the scheduler runs under deploy/'s RBAC and
the extender under deploy/extender's.

The namespaces and ServiceAccounts a dry run needs are created for real and, like
everything else a test makes, removed at the end; what existed before is left alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

import binaries
from ipscheduler.underlayip.publisher import RESOURCE
from tests.builders import free_port
from tests.e2e.helpers import ROOT, Pools, SchedulerProcess, https_get, token_kubeconfig
from tests.kube import Kubectl, pod_manifest, wait_for

NAMESPACE = "ipscheduler-system"
NODE_NAMESPACE = "ipscheduler-node"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:ip-scheduler"
PRIORITY = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
"""The built-in priority classes' values, which Priority admission writes into the pod."""
CHART = ROOT / "deploy" / "chart" / "ipscheduler"

Manifest = dict[str, Any]


def _documents(text: str) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(text) if d]


def _rendered(*cmd: str, env: dict[str, str] | None = None) -> list[Manifest]:
    """The manifests ``cmd`` prints (kubectl kustomize, helm template: no server)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return _documents(proc.stdout)


def _kustomize(folder: str = "deploy") -> list[Manifest]:
    """``kubectl kustomize`` of ``folder`` (deploy/, or deploy/extender)."""
    return _rendered("kubectl", "kustomize", str(ROOT / folder))


def _helm_template(home: Path, *args: str, release: str = "ipscheduler") -> list[Manifest]:
    """``helm template`` of the chart as ``release`` into NAMESPACE. helm is built like the
    cluster's binaries (hack/binaries.ensure_helm; the cluster fixture already needed Go)."""
    helm = str(binaries.ensure_helm())
    env = {**os.environ, **{f"HELM_{d}_HOME": str(home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")}}
    return _rendered(helm, "template", release, str(CHART), "--namespace", NAMESPACE, *args, env=env)


def _ref(doc: Manifest) -> list[str]:
    meta = doc["metadata"]
    return [doc["kind"], meta["name"], *(["-n", meta["namespace"]] if meta.get("namespace") else [])]


@contextmanager
def _real(kubectl: Kubectl, docs: list[Manifest]) -> Iterator[None]:
    """Apply ``docs`` for real; at the end delete those that did not exist before (in reverse,
    waiting, so that a namespace is gone before a later test creates it again)."""
    made: list[Manifest] = []
    try:
        for doc in docs:
            if not kubectl("get", *_ref(doc), "--ignore-not-found", "-o", "name").strip():
                made.append(doc)
            kubectl.apply(doc)
        if any(d["kind"] == "Namespace" for d in made):
            names = [d["metadata"]["name"] for d in made if d["kind"] == "Namespace"]
            for name in names:  # ServiceAccount admission needs "default" before any pod
                wait_for(
                    f"{name}/default",
                    lambda n=name: kubectl.run("get", "sa", "default", "-n", n, check=False).returncode == 0,
                    timeout=30,
                )
        yield
    finally:
        for doc in reversed(made):
            kubectl.run(
                "delete", *_ref(doc), "--ignore-not-found", "--wait=true", "--timeout=90s", check=False
            )


def _needed_for_real(docs: list[Manifest]) -> list[Manifest]:
    """What a server-side dry run of ``docs`` and of their pods needs to exist: the
    namespaces (deploy/'s, with their Pod Security labels, also for the chart, which leaves
    the release namespace to `helm install --create-namespace`), then the ServiceAccounts."""
    namespaces = {d["metadata"]["name"]: d for d in _kustomize() if d["kind"] == "Namespace"}
    namespaces |= {d["metadata"]["name"]: d for d in docs if d["kind"] == "Namespace"}
    return [*namespaces.values(), *(d for d in docs if d["kind"] == "ServiceAccount")]


def _dry_run(kubectl: Kubectl, docs: list[Manifest]) -> None:
    """Every object passes a server-side dry run, and the pods of every workload pass
    admission in their namespace (Pod Security: restricted for the scheduler; Priority)."""
    out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs))
    for doc in docs:
        assert re.search(rf"/{re.escape(doc['metadata']['name'])} \w+ \(server dry run\)", out), (doc, out)
    workloads = {d["kind"]: d for d in docs if d["kind"] in ("Deployment", "DaemonSet")}
    assert workloads.keys() == {"Deployment", "DaemonSet"}
    for workload in workloads.values():
        ns = workload["metadata"]["namespace"]
        proc = _dry_run_pod(kubectl, workload, ns)
        assert proc.returncode == 0, f"{workload['kind']} {ns}/{workload['metadata']['name']}: {proc.stderr}"
        admitted = json.loads(proc.stdout)["spec"]
        priority_class = workload["spec"]["template"]["spec"]["priorityClassName"]
        assert admitted.get("priority") == PRIORITY[priority_class], admitted
    # The control: Pod Security is enforced here, so the installer (hostPath, root) is refused
    # in the scheduler's `restricted` namespace (under the ServiceAccount that exists there).
    installer = json.loads(json.dumps(workloads["DaemonSet"]))
    installer["spec"]["template"]["spec"]["serviceAccountName"] = "ip-scheduler"
    refused = _dry_run_pod(kubectl, installer, NAMESPACE)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr


def _dry_run_pod(kubectl: Kubectl, workload: Manifest, ns: str) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of one pod of ``workload`` in ``ns``."""
    template = workload["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"dry-run-{workload['metadata']['name']}",
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }
    args = ("create", "--dry-run=server", "-n", ns, "-o", "json", "-f", "-")
    return kubectl.run(*args, stdin=json.dumps(pod), check=False)


RBAC_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


LEASE = "ip-scheduler"
"""deploy/'s Lease (the default --leader-elect-resource-name), the only one its Role names."""
ADDRESS_ROLES = ("ip-scheduler-ip-releaser", "ip-scheduler-address-adopter")
"""deploy/14-address-roles.yaml: for people and tools, bound by nobody."""


def _admission_policies() -> list[Manifest]:
    """deploy/13-admission-policies.yaml as kustomize renders it."""
    return [d for d in _kustomize() if d["kind"].startswith("ValidatingAdmissionPolicy")]


def _scheduler_rbac() -> list[Manifest]:
    """deploy/'s scheduler namespace, ServiceAccount, ClusterRole, leader-election Role and
    their bindings (not the node installer's)."""
    docs = [
        d
        for d in _kustomize()
        if d["kind"] in RBAC_KINDS
        and NODE_NAMESPACE not in (d["metadata"]["name"], d["metadata"].get("namespace"))
        and d["metadata"]["name"] not in ("ipscheduler-ipam", "ip-scheduler-metrics-reader", *ADDRESS_ROLES)
    ]
    assert sorted(d["kind"] for d in docs) == sorted(RBAC_KINDS)
    return docs


def _can_i(kubectl: Kubectl, verb: str, res: str, *where: str, name: str = "") -> str:
    """``kubectl auth can-i`` as the scheduler's ServiceAccount (all namespaces unless
    ``where``); ``res`` may name a subresource (``nodes/status``), ``name`` one object."""
    resource, _, sub = res.partition("/")
    extra = ["--subresource", sub] if sub else []
    target = f"{resource}/{name}" if name else resource
    args = ("auth", "can-i", verb, target, *extra, "--as", SERVICE_ACCOUNT, *(where or ("-A",)))
    return kubectl.run(*args, check=False).stdout.strip()


NAD_VERBS = ("list", "watch", "get", "create")


def _may(kubectl: Kubectl, verb: str, group: str, resource: str) -> bool:
    """Whether the scheduler's ServiceAccount may ``verb`` ``resource`` of ``group`` in every
    namespace (a SubjectAccessReview: its answer needs no discovery of the resource)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": SERVICE_ACCOUNT,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NAMESPACE}",
                "system:authenticated",
            ],
            "resourceAttributes": {"verb": verb, "group": group, "resource": resource},
        },
    }
    answer = json.loads(kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(review)))
    return bool(answer["status"].get("allowed"))


def refused(log: str) -> bool:
    """Does a scheduler log show an API request refused (Forbidden, HTTP 403)? ``403`` as a word,
    not the digits inside a replica identity's UUID nor a log timestamp's milliseconds
    (``18:15:21,403``)."""
    return "Forbidden" in log or re.search(r"(?<!,)\b403\b", log) is not None


def test_deploy_passes_server_validation_and_admission(kubectl: Kubectl, crd: None) -> None:
    """`kubectl apply -k deploy/` as a dry run: the PodDisruptionBudget, the anti-affinity,
    and system-cluster-critical outside kube-system (admitted since Kubernetes 1.17)."""
    docs = _kustomize()
    assert {d["kind"] for d in docs} >= {"Deployment", "DaemonSet", "PodDisruptionBudget", "NetworkPolicy"}
    with _real(kubectl, _needed_for_real(docs)):
        _dry_run(kubectl, docs)


def test_deploy_extender_passes_server_validation_and_admission(kubectl: Kubectl, crd: None) -> None:
    """`kubectl apply -k deploy/extender` as a dry run: deploy/ with the Deployment in
    extender mode, its Service and the publisher's ClusterRole."""
    docs = _kustomize("deploy/extender")
    kinds = {d["kind"] for d in docs}
    assert (
        kinds >= {"Deployment", "DaemonSet", "Service", "NetworkPolicy"}
        and "PodDisruptionBudget" not in kinds
    )
    with _real(kubectl, _needed_for_real(docs)):
        _dry_run(kubectl, docs)


def test_the_chart_passes_server_validation_and_admission(
    kubectl: Kubectl, crd: None, tmp_path: Path
) -> None:
    """`helm template` with the CNI installer, a configuration and extra arguments."""
    values = tmp_path / "values.yaml"
    config = {
        "apiVersion": "ipscheduler.io/v1alpha1",
        "kind": "IPSchedulerConfiguration",
        "profiles": [{"schedulerName": "ip-scheduler"}],
    }
    values.write_text(
        yaml.safe_dump({"cni": {"enabled": True}, "config": config, "extraArgs": ["--ip-strategy=binpack"]})
    )
    docs = _helm_template(tmp_path, "--values", str(values))
    assert {d["kind"] for d in docs} >= {
        "ConfigMap",
        "DaemonSet",
        "Deployment",
        "Namespace",
        "PodDisruptionBudget",
    }
    with _real(kubectl, _needed_for_real(docs)):
        _dry_run(kubectl, docs)


def _chart_process(docs: list[Manifest], kubeconfig: Path, log: Path) -> SchedulerProcess:
    """The arguments of the chart's Deployment as a local `ipscheduler run` under
    ``kubeconfig``, its Lease in NAMESPACE (in a pod: the pod's namespace). SchedulerProcess
    serves on loopback ports of its own; for extender mode, without ``extender --listen
    --enable-https``: an extender would publish its resource on the cluster's nodes, which
    other tests read."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    _, *chart_args = container["args"]
    args: list[str] = []
    values = iter(chart_args)
    for arg in values:
        if arg in ("--health-addr", "--listen"):
            next(values)
        elif arg != "--enable-https":
            args.append(arg)
    return SchedulerProcess(kubeconfig, log, *args, "--leader-elect-namespace", NAMESPACE)


def test_two_chart_releases_in_one_namespace_each_lead_on_their_own_lease(
    kubectl: Kubectl, crd: None, tmp_path: Path
) -> None:
    """Two releases in one namespace: the documented `ipscheduler` (with the installer) and
    `team-b` in extender mode with its own schedulerName. Both pass the server's dry run
    and admission; each ServiceAccount may read and update its own Lease and not the other's;
    and each release's arguments, run under its own ServiceAccount's token, take their own
    Lease and lead, side by side, without one 403."""
    a = _helm_template(tmp_path, "--set", "cni.enabled=true")
    b = _helm_template(tmp_path, "--set", "mode=extender,schedulerName=team-b", release="team-b")
    rbac = [d for d in a + b if d["kind"] in RBAC_KINDS and d["kind"] != "Namespace"]
    leases = {"ip-scheduler": "ip-scheduler", "team-b-ip-scheduler": "team-b-ip-scheduler"}  # account: lease
    with _real(kubectl, [*_needed_for_real(a + b), *rbac]):
        _dry_run(kubectl, a)
        out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(b))
        assert out.count("(server dry run)") == len(b), out
        (deployment_b,) = [d for d in b if d["kind"] == "Deployment"]
        admitted = _dry_run_pod(kubectl, deployment_b, NAMESPACE)
        assert admitted.returncode == 0, admitted.stderr
        for account, lease in leases.items():
            (other,) = set(leases.values()) - {lease}
            res = "leases.coordination.k8s.io"
            want = {(verb, f"{res}/{lease}"): "yes" for verb in ("get", "update", "list", "watch")}
            want |= {(verb, f"{res}/{other}"): "no" for verb in ("get", "update", "list", "watch")}
            want |= {("create", res): "yes", ("delete", f"{res}/{lease}"): "no"}
            who = ("--as", f"system:serviceaccount:{NAMESPACE}:{account}", "-n", NAMESPACE)
            got = {k: kubectl.run("auth", "can-i", *k, *who, check=False).stdout.strip() for k in want}
            assert got == want, account
        procs = [
            _chart_process(
                docs,
                token_kubeconfig(kubectl, account, NAMESPACE, tmp_path / f"{account}.kc"),
                tmp_path / f"{account}.log",
            )
            for docs, account in ((a, "ip-scheduler"), (b, "team-b-ip-scheduler"))
        ]
        try:
            for proc in procs:
                proc.start()
            for proc in procs:
                wait_for(
                    "each leads on its own Lease",
                    lambda p=proc: p.probe("/readyz") == (200, "ok: leader\n"),
                    timeout=30,
                )
            holders = {
                name: kubectl.json("get", "lease", name, "-n", NAMESPACE)["spec"]["holderIdentity"]
                for name in leases.values()
            }
            assert all(holders.values()) and len(set(holders.values())) == 2, holders
            for proc in procs:
                log = proc.log_path.read_text()
                assert not refused(log), log
        finally:
            for proc in procs:
                proc.stop()
            for name in leases.values():
                kubectl.run("delete", "lease", name, "-n", NAMESPACE, "--ignore-not-found", check=False)


def test_scheduler_runs_with_the_deploy_service_account_rbac(
    kubectl: Kubectl, crd: None, pools: Pools, ns: str, tmp_path: Path
) -> None:
    """deploy/'s ServiceAccount, ClusterRole, leader-election Role and their bindings, for
    real: `kubectl auth can-i` both ways (the grants removed as unused included), then the
    scheduler under that ServiceAccount's token binds a pod without one 403, and its secure
    port reviews tokens under it (its own token may not read /metrics: 403, not 500)."""
    docs = _scheduler_rbac()
    must = [
        ("create", "pods/binding"),
        ("patch", "pods/status"),
        ("list", "pods"),
        ("get", "pods"),
        ("delete", "pods"),  # preemption's victims
        ("list", "poddisruptionbudgets.policy"),
        ("watch", "nodes"),
        ("watch", "namespaces"),
        ("get", "statefulsets.apps"),
        ("patch", "nodeippools.ipscheduler.io"),
        ("update", "nodeippools.ipscheduler.io/status"),
        ("allocate", "nodeippools.ipscheduler.io"),
        ("create", "events"),
        ("patch", "events"),
        # The secure port's reviews (as kube-scheduler's system:auth-delegator binding).
        ("create", "tokenreviews.authentication.k8s.io"),
        ("create", "subjectaccessreviews.authorization.k8s.io"),
    ]
    must_not = [
        ("deletecollection", "pods"),
        ("get", "secrets"),
        ("create", "pods"),
        ("update", "nodes"),
        ("delete", "nodeippools.ipscheduler.io"),
        ("adopt", "nodeippools.ipscheduler.io"),
        ("release", "nodeippools.ipscheduler.io"),
        ("list", "secrets"),
        # Granted once, used by nothing (deploy/02-clusterrole.yaml says what each rule is for).
        ("get", "nodes"),
        ("update", "nodeippools.ipscheduler.io"),
        ("get", "nodeippools.ipscheduler.io/status"),
        ("patch", "nodeippools.ipscheduler.io/status"),
        ("create", "events.events.k8s.io"),
    ]

    def can_i(verb: str, res: str, *where: str, name: str = "") -> str:
        return _can_i(kubectl, verb, res, *where, name=name)

    name = "ip-scheduler-rbac"
    # With the admission policies enforced: its Binding carries the address annotations, its
    # status writes add allocations; the ClusterRole's verb allocate lets both through.
    with _real(kubectl, docs + _admission_policies()):
        assert {(v, r): can_i(v, r) for v, r in must} == {(v, r): "yes" for v, r in must}
        assert {(v, r): can_i(v, r) for v, r in must_not} == {(v, r): "no" for v, r in must_not}
        # Multus' NADs naming our pools (the NAD informer; its API probed with a LIST of one).
        # Asked with a SubjectAccessReview: `kubectl auth can-i` cannot name a resource of a
        # CRD that is not installed.
        assert {
            v: _may(kubectl, v, "k8s.cni.cncf.io", "network-attachment-definitions") for v in NAD_VERBS
        } == {
            "list": True,
            "watch": True,
            "get": False,
            "create": False,
        }
        # Its own Lease only (deploy/04-role-leader-election.yaml): any name may be created,
        # only ip-scheduler read, updated and watched.
        for verb in ("get", "update", "list", "watch"):
            assert can_i(verb, "leases.coordination.k8s.io", "-n", NAMESPACE, name=LEASE) == "yes"
            assert can_i(verb, "leases.coordination.k8s.io", "-n", NAMESPACE, name="other") == "no"
        assert can_i("create", "leases.coordination.k8s.io", "-n", NAMESPACE) == "yes"
        assert can_i("update", "leases.coordination.k8s.io", "-n", "default", name=LEASE) == "no"
        kc = token_kubeconfig(kubectl, "ip-scheduler", NAMESPACE, tmp_path / "sa.kubeconfig")
        pools.create("rbac", "node-3", ["10.10.0.1-10.10.0.3"])
        # Its own schedulerName: the module's scheduler (admin credentials) must not be the one
        # that binds the pod.
        secure_port = free_port()
        proc = SchedulerProcess(
            kc,
            tmp_path / "sa-scheduler.log",
            *("--scheduler-name", name, "--leader-elect-lease-name", LEASE),
            *("--leader-elect", "--leader-elect-namespace", NAMESPACE),
            *("--secure-port", str(secure_port), "--bind-address", "127.0.0.1"),
        ).start()
        try:
            manifest = pod_manifest(
                "least-privilege", scheduler=name, nodeSelector={"kubernetes.io/hostname": "node-3"}
            )
            kubectl.create(manifest, ns)
            pod = wait_for(
                "bound under the ServiceAccount",
                lambda: (
                    (p := kubectl.json("get", "pod", "least-privilege", "-n", ns))["spec"].get("nodeName")
                    and p
                ),
                timeout=60,
            )
            assert pod["metadata"]["annotations"]["ipscheduler.io/ip"] == "10.10.0.1"
            own_token = yaml.safe_load(kc.read_text())["users"][0]["user"]["token"]
            assert https_get(secure_port, "/metrics", own_token)[0] == 403
            assert https_get(secure_port, "/healthz")[0] == 200
            log = proc.log_path.read_text()
            assert not refused(log), log
            assert "Scheduled" in kubectl("get", "events", "-n", ns, "--field-selector", "reason=Scheduled")
            check = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ipscheduler",
                    "check",
                    "--kubeconfig",
                    str(kc),
                    "--scheduler-name",
                    name,
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert check.returncode == 0, check.stdout + check.stderr
        finally:
            proc.stop()
            kubectl.run("delete", "lease", LEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)


def test_only_the_extender_rbac_lets_the_publisher_patch_node_status(
    kubectl: Kubectl, crd: None, pools: Pools, tmp_path: Path
) -> None:
    """deploy/'s RBAC does not let the ServiceAccount patch nodes/status; deploy/extender's
    ClusterRole adds that, and only that. Then `ipscheduler extender` under the
    ServiceAccount's token publishes the resource on a node with a pool, without one 403."""
    extender_rbac = [
        d for d in _kustomize("deploy/extender") if d["metadata"]["name"] == "ip-scheduler-extender"
    ]
    assert sorted(d["kind"] for d in extender_rbac) == ["ClusterRole", "ClusterRoleBinding", "Service"]
    extender_rbac = [d for d in extender_rbac if d["kind"] != "Service"]
    not_even_then = [
        ("update", "nodes/status"),
        ("get", "nodes/status"),
        ("patch", "nodes"),
        ("update", "nodes"),
        ("get", "nodes"),
        ("delete", "nodes"),
    ]

    def published(node: str) -> str | None:
        allocatable = kubectl.json("get", "node", node)["status"].get("allocatable") or {}
        return allocatable.get(RESOURCE)

    with _real(kubectl, _scheduler_rbac()):
        assert _can_i(kubectl, "patch", "nodes/status") == "no"
        with _real(kubectl, extender_rbac):
            assert _can_i(kubectl, "patch", "nodes/status") == "yes"
            assert {(v, r): _can_i(kubectl, v, r) for v, r in not_even_then} == {
                (v, r): "no" for v, r in not_even_then
            }
            kc = token_kubeconfig(kubectl, "ip-scheduler", NAMESPACE, tmp_path / "sa.kubeconfig")
            pools.create("rbac-ext", "node-3", ["10.10.1.1-10.10.1.3"])
            proc = SchedulerProcess(
                kc,
                tmp_path / "sa-extender.log",
                *("--listen", f"127.0.0.1:{free_port()}", "--scheduler-name", "ip-scheduler-rbac-ext"),
                command="extender",
            )
            try:
                proc.start(wait="serving the extender verbs")
                wait_for("the resource published on node-3", lambda: published("node-3") == "3", timeout=30)
                log = proc.log_path.read_text()
                assert not refused(log), log
            finally:
                proc.stop()
                patch = {"status": {"capacity": {RESOURCE: None}, "allocatable": {RESOURCE: None}}}
                kubectl(
                    "patch", "node", "node-3", "--subresource=status", "--type=merge", "-p", json.dumps(patch)
                )
        wait_for(
            "no patch of nodes/status once the extender's RBAC is gone",
            lambda: _can_i(kubectl, "patch", "nodes/status") == "no",
            timeout=30,
        )
