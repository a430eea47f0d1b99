"""What the e2e tests share besides fixtures: the scheduler as a real process, NodeIPPools,
`ipscheduler check`, and bodies and lookups through kubectl (fixtures: conftest.py)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

import devcluster
from tests.builders import free_port
from tests.kube import Kubectl, pod_manifest, wait_for

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "nodeippools.ipscheduler.io.yaml"
PODGROUP_CRD = ROOT / "crds" / "podgroups.scheduling.x-k8s.io.yaml"
SCHEDULER = "ip-scheduler"
PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The label that puts a pod in a PodGroup (scheduler-plugins' Coscheduling)."""
KUBE = "kube-with-extender"
"""kube-scheduler's profile in the extender tests (its pods request RESOURCE)."""
OURS = "ip-scheduler-ext"
"""The extender process's own schedulerName (its scheduler mode beside the verbs)."""
RESOURCE = "ipscheduler.io/underlay-ip"
RELEASED_ANNOTATION = "ipscheduler.io/underlay-ip-released"


def build_cni_plugin(out: Path) -> Path:
    """Build ``ipscheduler-ipam`` from cni/ into ``out`` (static, as the image carries it);
    returns ``out``. Raises CalledProcessError if ``go build`` fails."""
    subprocess.run(
        ["go", "build", "-trimpath", "-o", str(out), "./cmd/ipscheduler-ipam"],
        cwd=ROOT / "cni",
        env={**os.environ, "CGO_ENABLED": "0"},
        check=True,
    )
    return out


def install_crd(kubectl: Kubectl) -> None:
    """Apply the CRDs of crds/ (NodeIPPool, PodGroup) and wait until they are Established.
    Polled rather than ``kubectl wait --for=condition=Established``, which fails at once
    ("status.conditions accessor error") when it reads the CRD before the API server wrote
    any condition."""
    kubectl("apply", "-f", str(CRD), "-f", str(PODGROUP_CRD))

    def established(name: str) -> bool:
        crd = kubectl.json("get", "crd", name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    for name in ("nodeippools.ipscheduler.io", "podgroups.scheduling.x-k8s.io"):
        wait_for(f"the CRD {name} Established", lambda n=name: established(n), timeout=60, interval=0.2)


def leader_and_standby(
    start: Callable[..., SchedulerProcess], prefix: str, *extra: str
) -> tuple[SchedulerProcess, SchedulerProcess, str]:
    """Two replicas electing on a Lease of their own in ``default`` (``<prefix>-<hex>``),
    started by ``start`` (the ``scheduler_factory`` fixture) with ``extra`` flags: the first
    leads (its start-up reconcile done), the second stands by. Returns ``(leader, standby,
    lease name)``. A test that watches which replica binds gives them a ``--scheduler-name``
    of their own: a module's shared scheduler would bind ``ip-scheduler``'s pods too."""
    lease = f"{prefix}-{secrets.token_hex(3)}"
    args = (
        "--leader-elect",
        "--leader-elect-resource-namespace",
        "default",
        "--leader-elect-resource-name",
        lease,
        *extra,
    )
    leader = start(*args)
    standby = start(*args, wait="waiting for lease")
    return leader, standby, lease


def token_kubeconfig(kubectl: Kubectl, service_account: str, namespace: str, path: Path) -> Path:
    """A kubeconfig at ``path`` for a token of ``namespace/service_account`` (same cluster)."""
    token = kubectl("create", "token", service_account, "-n", namespace, "--duration=2h").strip()
    admin = yaml.safe_load(kubectl.kubeconfig.read_text())
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [
            {"name": "sa", "context": {"cluster": admin["clusters"][0]["name"], "user": service_account}}
        ],
        "current-context": "sa",
    }
    path.write_text(json.dumps(cfg))
    return path


def https_get(
    port: int, path: str, token: str | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, str]:
    """GET https://127.0.0.1:<port><path> as a scraper would, with ``token`` as the bearer
    token if given; ``context`` verifies the server (default: not verified, as for the
    scheduler's self-signed certificate). Returns ``(status, body)``, an error's too."""
    if context is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def ipscheduler_check(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """``ipscheduler check`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "ipscheduler", "check", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_check_clean(kubectl: Kubectl, timeout: float = 30) -> None:
    """``ipscheduler check`` exits 0 (waiting up to ``timeout`` for the cluster to go quiet)."""
    last: list[subprocess.CompletedProcess[str]] = []

    def clean() -> bool:
        last[:] = [ipscheduler_check(kubectl.kubeconfig)]
        return last[0].returncode == 0

    try:
        wait_for("ipscheduler check clean", clean, timeout=timeout, interval=1)
    except AssertionError:
        raise AssertionError(f"ipscheduler check: {last[0].stdout}{last[0].stderr}") from None


class SchedulerProcess:
    """``python -m ipscheduler run`` against the dev cluster, logs in a file."""

    def __init__(self, kubeconfig: Path, log_path: Path, *extra: str, command: str = "run") -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.extra = extra
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None
        self.health_port = free_port()

    def probe(self, path: str) -> tuple[int, str]:
        """GET http://127.0.0.1:<port><path> → (status, body); (0, error) if unreachable."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=3) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError as e:
            return 0, str(e)

    def start(self, wait: str = "start-up reconcile") -> SchedulerProcess:
        """Start the process; unless ``wait`` is empty, wait for that text in its log."""
        cmd = [sys.executable, "-m", "ipscheduler", self.command, "--kubeconfig", str(self.kubeconfig)]
        # One replica without a Lease unless the test elects (a later --leader-elect wins);
        # -v=2: binds and unschedulable attempts are logged, as tests read them.
        cmd += ["--leader-elect=false", "-v=2", "--health-addr", f"127.0.0.1:{self.health_port}"]
        cmd += ["--secure-port", "0", *self.extra]  # several run at once: no two on 10259
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        if wait:
            wait_for(f"scheduler log: {wait}", lambda: self.logged(wait, start), timeout=60)
        return self

    def metric(self, name: str, labels: str = "") -> float:
        """The sum of the samples of ``name`` on ``/metrics`` whose labels contain ``labels``
        (e.g. ``found_by="relist"``); 0.0 when there are none."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        pattern = rf"^{re.escape(name)}(\{{[^}}]*{re.escape(labels)}[^}}]*\}})? (\S+)$"
        return sum(float(m.group(2)) for m in re.finditer(pattern, text, re.MULTILINE))

    def logged(self, text: str, offset: int = 0) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"scheduler exited ({self.proc.returncode}):\n{self.log_tail()}")
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return text.encode() in f.read()

    def log_tail(self, n: int = 40) -> str:
        return "".join(self.log_path.read_text(errors="replace").splitlines(True)[-n:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self) -> None:
        self.kill(signal.SIGTERM)


class Pools:
    """Creates NodeIPPools for a test and deletes them afterwards."""

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl
        self.names: list[str] = []

    def create(self, name: str, node: str, addresses: list[str] | None = None, **spec: Any) -> None:
        body = {
            "apiVersion": "ipscheduler.io/v1alpha1",
            "kind": "NodeIPPool",
            "metadata": {"name": name},
            "spec": {"nodeName": node, **({"addresses": addresses} if addresses else {}), **spec},
        }
        self.kubectl.apply(body)
        if name not in self.names:
            self.names.append(name)

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.kubectl.json("get", "nodeippool", name))

    def cleanup(self) -> None:
        """Delete the pools; if no scheduler finishes them (none running), drop the finalizers."""
        if not self.names:
            return
        self.kubectl.run(
            "delete", "nodeippool", *self.names, "--ignore-not-found", "--wait=false", check=False
        )
        for name in self.names:
            gone = self.kubectl.run(
                "wait", "--for=delete", f"nodeippool/{name}", "--timeout=20s", check=False
            )
            if gone.returncode != 0:
                unblock = '{"metadata":{"finalizers":null}}'
                self.kubectl.run("patch", "nodeippool", name, "--type=merge", "-p", unblock, check=False)


def pods_of(kubectl: Kubectl, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", namespace]
    if selector:
        args += ["-l", selector]
    return list(kubectl.json(*args)["items"])


def events_for(
    kubectl: Kubectl, namespace: str, name: str, reason: str | None = None
) -> list[dict[str, Any]]:
    items = kubectl.json("get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")[
        "items"
    ]
    return [e for e in items if reason is None or e.get("reason") == reason]


def pod_template(name: str, annotations: dict[str, str] | None = None, **pod_spec: Any) -> dict[str, Any]:
    """A workload's pod template: label ``app=<name>``, our scheduler, a pause container."""
    return {
        "metadata": {"labels": {"app": name}, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            **pod_spec,
        },
    }


def workload(kind: str, name: str, replicas: int, template: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A ``kind`` (Deployment, StatefulSet) named ``name`` of ``replicas`` pods of ``template``."""
    selector = {"matchLabels": {"app": name}}
    body_spec = {"replicas": replicas, "selector": selector, "template": template, **spec}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": body_spec}


def deployment(name: str, replicas: int, **pod_spec: Any) -> dict[str, Any]:
    return workload("Deployment", name, replicas, pod_template(name, **pod_spec))


def statefulset(name: str, replicas: int, **annotations: str) -> dict[str, Any]:
    """A StatefulSet (parallel pod management) whose pod template carries ``annotations``."""
    template = pod_template(name, annotations)
    return workload("StatefulSet", name, replicas, template, serviceName=name, podManagementPolicy="Parallel")


def nodeippools_table(kubectl: Kubectl) -> dict[str, dict[str, str]]:
    """``kubectl get nodeippools`` parsed: NAME → {column: value}."""
    out = kubectl("get", "nodeippools")
    lines = out.splitlines()
    header = lines[0].split()
    return {row.split()[0]: dict(zip(header, row.split(), strict=False)) for row in lines[1:]}


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:3000]


def settle(seconds: float = 1.0) -> None:
    time.sleep(seconds)


def wants_address(name: str, **spec: Any) -> dict[str, Any]:
    """A pod of kube-scheduler's profile requesting one underlay address."""
    body = pod_manifest(name, scheduler=KUBE, **spec)
    body["spec"]["containers"][0]["resources"] = {"requests": {RESOURCE: "1"}, "limits": {RESOURCE: "1"}}
    return body


def published(kubectl: Kubectl) -> dict[str, str | None]:
    """node name → its allocatable RESOURCE (None where the extender published none)."""
    nodes = kubectl.json("get", "nodes")["items"]
    return {n["metadata"]["name"]: (n["status"].get("allocatable") or {}).get(RESOURCE) for n in nodes}


def node_annotated(kubectl: Kubectl, node: str) -> bool:
    return RELEASED_ANNOTATION in (kubectl.json("get", "node", node)["metadata"].get("annotations") or {})


@contextmanager
def running_extender(kubectl: Kubectl, log: Path, port: int, *tls: str) -> Iterator[SchedulerProcess]:
    """``ipscheduler extender --enable-https`` on 127.0.0.1:``port`` with the ``tls`` flags
    (none: its self-signed certificate, as deploy/extender runs it), its own schedulerName
    for scheduler mode beside it; the nodes' extended resource and its stamp are removed
    afterwards."""
    proc = SchedulerProcess(
        kubectl.kubeconfig,
        log,
        *("--listen", f"127.0.0.1:{port}", "--enable-https", *tls),
        *("--scheduler-name", OURS, "--gc-interval", "5s"),
        command="extender",
    ).start()
    wait_for("the extender verbs served", lambda: proc.logged("serving the extender verbs"), timeout=30)
    try:
        yield proc
    finally:
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


@contextmanager
def running_kube_scheduler(
    cluster: devcluster.Cluster, port: int, name: str, tls_config: dict[str, Any] | None = None
) -> Iterator[None]:
    """The real kube-scheduler with the extender entry deploy/extender/ ships, its urlPrefix
    (the in-cluster Service) pointed at the extender on 127.0.0.1:``port`` and, if given,
    ``tls_config`` instead of the entry's ``tlsConfig``."""
    config = yaml.safe_load((ROOT / "deploy" / "extender" / "kube-scheduler-config.yaml").read_text())
    (entry,) = config["extenders"]
    entry = {**entry, "urlPrefix": f"https://127.0.0.1:{port}"}
    if tls_config is not None:
        entry["tlsConfig"] = tls_config
    proc = cluster.start_kube_scheduler(name, scheduler_name=KUBE, extenders=[entry])
    try:
        yield
    finally:
        terminate(proc)


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc``, SIGKILL it if it has not exited 15 s later; waits for the exit."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def podgroup(name: str, min_member: int, timeout: int | None = None) -> dict[str, Any]:
    """A PodGroup of ``min_member`` (scheduleTimeoutSeconds ``timeout`` when given)."""
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def member(group: str, name: str, **spec: Any) -> dict[str, Any]:
    """A pod of our scheduler in PodGroup ``group`` (its label), no grace period."""
    body = pod_manifest(name, SCHEDULER, terminationGracePeriodSeconds=0, **spec)
    body["metadata"]["labels"][PODGROUP_LABEL] = group
    return body
