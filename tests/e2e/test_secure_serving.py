"""The secure port as a scraper and the kubelet meet it (kube-scheduler's contract): HTTPS
on --secure-port, /metrics for a ServiceAccount token bound to deploy/'s metrics reader
ClusterRole (200), 403 without the grant, 401 without a token or with a garbage one, the
probes without a token; with the certificate files given, and with the self-signed one."""

from __future__ import annotations

import json
import secrets
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

import devcluster
from ipscheduler.cmd.serving import new_certificate
from tests.builders import free_port
from tests.e2e.helpers import ROOT, SchedulerProcess, https_get, terminate
from tests.kube import Kubectl, wait_for

READER = yaml.safe_load((ROOT / "deploy" / "15-clusterrole-metrics-reader.yaml").read_text())


@pytest.fixture
def scrapers(kubectl: Kubectl, namespace: str) -> Iterator[dict[str, str]]:
    """Tokens of two ServiceAccounts of ``namespace``: ``reader``, bound to a copy of deploy/'s
    metrics reader ClusterRole (its own name: the cluster's copy is not this test's), and
    ``stranger``, bound to nothing. The ClusterRole and its binding are removed afterwards."""
    role = f"{READER['metadata']['name']}-{secrets.token_hex(3)}"
    for account in ("reader", "stranger"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    kubectl.apply({**READER, "metadata": {"name": role}})
    kubectl(
        "create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={namespace}:reader"
    )
    try:
        yield {
            account: kubectl("create", "token", account, "-n", namespace, "--duration=1h").strip()
            for account in ("reader", "stranger")
        }
    finally:
        kubectl.run("delete", "clusterrolebinding", role, "--ignore-not-found", check=False)
        kubectl.run("delete", "clusterrole", role, "--ignore-not-found", check=False)


def secure(scheduler_factory: Callable[..., SchedulerProcess], *extra: str) -> int:
    """A scheduler serving its secure port on 127.0.0.1 (a free port); the port."""
    port = free_port()
    proc = scheduler_factory("--secure-port", str(port), "--bind-address", "127.0.0.1", *extra)
    wait_for("the secure port", lambda: proc.logged(f"127.0.0.1:{port}, https"), timeout=30)
    return port


def test_metrics_for_a_token_allowed_to_get_them_and_no_one_else(
    kubectl: Kubectl,
    namespace: str,
    scrapers: dict[str, str],
    scheduler_factory: Callable[..., SchedulerProcess],
) -> None:
    port = secure(scheduler_factory)
    status, body = https_get(port, "/metrics", scrapers["reader"])
    assert status == 200, body
    assert "# TYPE scheduler_schedule_attempts_total counter" in body

    status, body = https_get(port, "/metrics", scrapers["stranger"])
    assert status == 403, body
    answer = json.loads(body)
    assert (answer["kind"], answer["reason"], answer["code"]) == ("Status", "Forbidden", 403)
    user = f"system:serviceaccount:{namespace}:stranger"
    assert answer["message"] == f'forbidden: User "{user}" cannot get path "/metrics"'

    for token in (None, "garbage", ""):
        status, body = https_get(port, "/metrics", token)
        assert status == 401, (token, body)
        assert json.loads(body)["reason"] == "Unauthorized"

    # The grant covers /metrics only (and get only).
    assert https_get(port, "/debug/pprof", scrapers["reader"])[0] == 403


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
def test_the_probes_need_no_token(scheduler_factory: Callable[..., SchedulerProcess], path: str) -> None:
    port = secure(scheduler_factory)
    status, body = https_get(port, path)
    assert (status, body.split(":")[0].strip()) == (200, "ok"), body


def test_tls_with_the_given_certificate_files(
    tmp_path: Path, scrapers: dict[str, str], scheduler_factory: Callable[..., SchedulerProcess]
) -> None:
    """The client verifies the server against the CA that signed --tls-cert-file."""
    ca = new_certificate("test-ca", is_ca=True)
    ca_file, _ = ca.write(str(tmp_path), "ca")
    cert, key = new_certificate("ip-scheduler", hosts=["127.0.0.1", "localhost"], issuer=ca).write(
        str(tmp_path), "tls"
    )
    port = secure(scheduler_factory, "--tls-cert-file", cert, "--tls-private-key-file", key)
    verified = ssl.create_default_context(cafile=ca_file)
    assert https_get(port, "/healthz", context=verified)[0] == 200
    assert https_get(port, "/metrics", scrapers["reader"], context=verified)[0] == 200
    # Another CA's client cannot verify it.
    other = new_certificate("other-ca", is_ca=True).write(str(tmp_path), "other")[0]
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        https_get(port, "/healthz", context=ssl.create_default_context(cafile=other))


def test_tls_with_a_self_signed_certificate(scheduler_factory: Callable[..., SchedulerProcess]) -> None:
    port = secure(scheduler_factory)
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        https_get(port, "/healthz", context=ssl.create_default_context())
    assert https_get(port, "/healthz")[0] == 200, "served to a client that does not verify"


@pytest.fixture
def real_kube_scheduler(cluster: devcluster.Cluster) -> Iterator[int]:
    """The real kube-scheduler (its own secure port on 127.0.0.1, self-signed); the port."""
    proc = cluster.start_kube_scheduler("kube-scheduler-secure-port")
    (port,) = (int(str(a).split("=")[1]) for a in proc.args if str(a).startswith("--secure-port="))

    def healthy() -> bool:
        try:
            return https_get(port, "/healthz")[0] == 200
        except OSError:
            return False

    try:
        wait_for("kube-scheduler's secure port", healthy, timeout=60)
        yield port
    finally:
        terminate(proc)


def test_the_answers_are_kube_schedulers(
    scrapers: dict[str, str], scheduler_factory: Callable[..., SchedulerProcess], real_kube_scheduler: int
) -> None:
    """The same requests to the real kube-scheduler's secure port and to ours: the same
    status and, for a refusal, the same Status reason and message. The one difference:
    kube-scheduler lets a request without credentials through as system:anonymous (403),
    ours answers it 401."""
    ours = secure(scheduler_factory)

    def answer(port: int, path: str, token: str | None) -> tuple[int, str, str]:
        status, body = https_get(port, path, token)
        if status in (401, 403):
            status_body = json.loads(body)
            return status, status_body["reason"], status_body["message"]
        return status, "", ""

    for path, token in [
        ("/metrics", scrapers["reader"]),
        ("/metrics", scrapers["stranger"]),
        ("/metrics", "garbage"),
        ("/healthz", None),
        ("/livez", scrapers["stranger"]),
    ]:
        assert answer(ours, path, token) == answer(real_kube_scheduler, path, token), (path, token)
    assert answer(real_kube_scheduler, "/metrics", None) == (
        403,
        "Forbidden",
        'forbidden: User "system:anonymous" cannot get path "/metrics"',
    )
    assert answer(ours, "/metrics", None)[:2] == (401, "Unauthorized")
