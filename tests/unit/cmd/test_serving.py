"""cmd/serving: kube-scheduler's secure port in-process: the verb of a non-resource
request, the 401/403 answers, the always-allowed paths, and TLS with given, generated and
client certificates (aiohttp on 127.0.0.1; the reviews faked)."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web
from cryptography import x509

from ipscheduler.backend.health import HealthState, make_app, serve
from ipscheduler.cmd import serving
from ipscheduler.cmd.serving import KeyPair, new_certificate
from ipscheduler.kube.reviews import Decision, UserInfo
from tests.builders import free_port


@pytest.mark.parametrize(
    ("method", "verb"),
    [
        ("GET", "get"),
        ("HEAD", "head"),
        ("POST", "post"),
        ("PUT", "put"),
        ("DELETE", "delete"),
        ("patch", "patch"),
    ],
    ids=str,
)
def test_the_verb_of_a_non_resource_request_is_the_method_in_lower_case(method: str, verb: str) -> None:
    assert serving.non_resource_verb(method) == verb


def test_no_method_has_no_verb() -> None:
    with pytest.raises(ValueError):
        serving.non_resource_verb("")


@pytest.mark.parametrize(
    ("paths", "path", "want"),
    [
        pytest.param(serving.DEFAULT_ALWAYS_ALLOW_PATHS, "/healthz", True, id="healthz"),
        pytest.param(serving.DEFAULT_ALWAYS_ALLOW_PATHS, "/livez", True, id="livez"),
        pytest.param(serving.DEFAULT_ALWAYS_ALLOW_PATHS, "/healthz/", False, id="not-a-subpath"),
        pytest.param(serving.DEFAULT_ALWAYS_ALLOW_PATHS, "/metrics", False, id="metrics"),
        pytest.param(("/debug/*",), "/debug/pprof", True, id="prefix"),
        pytest.param(("/debug/*",), "/debugger", False, id="prefix-is-the-text-before-star"),
        pytest.param((), "/healthz", False, id="none"),
    ],
)
def test_always_allowed_paths(paths: tuple[str, ...], path: str, want: bool) -> None:
    assert serving.path_matcher(paths)(path) is want


@pytest.mark.parametrize(
    ("peercert", "want"),
    [
        pytest.param(None, None, id="none"),
        pytest.param({"subject": ((("organizationName", "g"),),)}, None, id="no-cn"),
        pytest.param(
            {"subject": ((("organizationName", "system:masters"),), (("commonName", "admin"),))},
            UserInfo("admin", groups=("system:masters",)),
            id="cn-and-o",
        ),
    ],
)
def test_a_client_certificates_user(peercert: Any, want: UserInfo | None) -> None:
    assert serving.certificate_user(peercert) == want


class Reviewer:
    """Tokens → users; (user, verb, path) allowed; everything asked is recorded."""

    def __init__(self, fail: bool = False) -> None:
        self.users = {
            "scraper": UserInfo(SCRAPER),
            "admin": UserInfo("a", groups=("system:masters",)),
        }
        self.allowed = {(SCRAPER, "get", "/metrics")}
        self.asked: list[Any] = []
        self.fail = fail

    async def authenticate(self, token: str) -> UserInfo | None:
        self.asked.append(token)
        if self.fail:
            raise OSError("connection refused")
        return self.users.get(token)

    async def authorize(self, user: UserInfo, verb: str, path: str) -> Decision:
        self.asked.append((user.name, verb, path))
        return Decision((user.name, verb, path) in self.allowed)


SCRAPER = "system:serviceaccount:ns:scraper"


def scraper(method: str, path: str, status: int, case: str) -> Any:
    """A request with the scraper's token: reviewed (the token, then verb and path)."""
    verb = method.lower()
    message = None if status == 200 else f'forbidden: User "{SCRAPER}" cannot {verb} path "{path}"'
    asked = ["scraper", (SCRAPER, verb, path)]
    return pytest.param(method, path, "scraper", status, message, asked, id=case)


CASES = [
    pytest.param("GET", "/healthz", None, 200, None, [], id="healthz-without-token"),
    pytest.param("GET", "/readyz", "garbage", 503, None, [], id="readyz-never-reviewed"),
    pytest.param("GET", "/metrics", None, 401, "Unauthorized", [], id="metrics-no-token"),
    pytest.param("GET", "/metrics", "garbage", 401, "Unauthorized", ["garbage"], id="garbage-token"),
    scraper("GET", "/metrics", 200, "metrics-allowed"),
    scraper("POST", "/metrics", 403, "post-is-verb-post"),
    scraper("GET", "/debug", 403, "another-path"),
    pytest.param("GET", "/metrics", "admin", 200, None, ["admin"], id="system-masters-always-allowed"),
]


@pytest.mark.parametrize(("method", "path", "token", "status", "message", "asked"), CASES)
async def test_the_filter_answers_as_kube_schedulers(
    method: str, path: str, token: str | None, status: int, message: str | None, asked: list[Any]
) -> None:
    from ipscheduler.backend.metrics import Metrics

    reviewer = Reviewer()
    app = make_app(
        HealthState(metrics=Metrics()),
        [serving.auth_middleware(reviewer, serving.DEFAULT_ALWAYS_ALLOW_PATHS)],
    )

    async def secret(_: web.Request) -> web.Response:
        return web.Response(text="secret")

    app.router.add_route("*", "/debug", secret)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with test_utils.TestClient(test_utils.TestServer(app, host="127.0.0.1")) as client:
        resp = await client.request(method, path, headers=headers)
        body = await resp.text()
    assert resp.status == status, body
    assert reviewer.asked == asked
    if message is not None:
        status_body = json.loads(body)
        assert (status_body["kind"], status_body["code"], status_body["message"]) == (
            "Status",
            status,
            message,
        )
        assert status_body["reason"] == ("Unauthorized" if status == 401 else "Forbidden")
    if status == 200 and path == "/metrics":
        assert "# TYPE" in body


async def test_a_review_that_fails_is_a_500_not_a_pass() -> None:
    app = make_app(
        HealthState(), [serving.auth_middleware(Reviewer(fail=True), serving.DEFAULT_ALWAYS_ALLOW_PATHS)]
    )
    async with test_utils.TestClient(test_utils.TestServer(app, host="127.0.0.1")) as client:
        resp = await client.get("/metrics", headers={"Authorization": "Bearer scraper"})
        assert resp.status == 500
        assert "connection refused" in (await resp.json())["message"]


# --------------------------------------------------------------------------- TLS
def insecure() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def get(port: int, ctx: ssl.SSLContext, path: str = "/healthz") -> tuple[int, x509.Certificate]:
    """GET ``path`` over TLS with ``ctx``: the status and the server's certificate."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("closed before an answer")
        await reader.read()
    finally:
        writer.close()
    return int(status_line.split()[1]), x509.load_der_x509_certificate(der)


async def test_a_self_signed_certificate_when_no_files_are_given() -> None:
    port = free_port()
    runner = await serve(HealthState(), f"127.0.0.1:{port}", serving.server_context(None, None))
    try:
        status, cert = await get(port, insecure())
    finally:
        await runner.cleanup()
    assert status == 200
    assert cert.issuer == cert.subject
    assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value.endswith("@self-signed")
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)


def pki(tmp_path: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it."""
    ca = new_certificate("test-ca", is_ca=True)
    files = {"ca": ca.write(str(tmp_path), "ca")[0]}
    files["server"], files["server-key"] = new_certificate("server", hosts=["127.0.0.1"], issuer=ca).write(
        str(tmp_path), "server"
    )
    files["client"], files["client-key"] = new_certificate("kube-scheduler", issuer=ca).write(
        str(tmp_path), "client"
    )
    other = new_certificate("intruder", issuer=new_certificate("other-ca", is_ca=True))
    files["other"], files["other-key"] = other.write(str(tmp_path), "other")
    return files


def client_context(files: dict[str, str], cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=files["ca"])
    if cert:
        ctx.load_cert_chain(files[cert], files[f"{cert}-key"])
    return ctx


@pytest.mark.parametrize(
    ("require", "client_cert", "served"),
    [
        pytest.param(False, None, True, id="given-cert-no-client-ca"),
        pytest.param(True, "client", True, id="client-cert-signed-by-the-ca"),
        pytest.param(True, None, False, id="no-client-cert-refused"),
        pytest.param(True, "other", False, id="client-cert-of-another-ca-refused"),
    ],
)
async def test_the_given_certificate_and_client_certificates(
    tmp_path: Path, require: bool, client_cert: str | None, served: bool
) -> None:
    files = pki(tmp_path)
    ctx = serving.server_context(
        files["server"], files["server-key"], files["ca"] if require else None, require_client_cert=require
    )
    port = free_port()
    runner = await serve(HealthState(), f"127.0.0.1:{port}", ctx)
    try:
        if served:
            status, cert = await get(port, client_context(files, client_cert))
            assert status == 200
            assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == "server"
        else:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                await get(port, client_context(files, client_cert))
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("files", "error"),
    [
        pytest.param(("missing.crt", "missing.key"), OSError, id="missing"),
        pytest.param(("server.key", "server.crt"), ssl.SSLError, id="swapped"),
    ],
)
def test_unusable_files_raise(tmp_path: Path, files: tuple[str, str], error: type[Exception]) -> None:
    new_certificate("server").write(str(tmp_path), "server")
    with pytest.raises(error):
        serving.server_context(str(tmp_path / files[0]), str(tmp_path / files[1]))


def test_keypair_files_are_private(tmp_path: Path) -> None:
    cert, key = KeyPair(b"c", b"k").write(str(tmp_path), "x")
    assert (Path(cert).stat().st_mode & 0o777, Path(key).stat().st_mode & 0o777) == (0o600, 0o600)


@pytest.mark.parametrize(
    ("cn", "groups", "status"),
    [
        pytest.param("admin", ["system:masters"], 200, id="masters-certificate"),
        pytest.param(SCRAPER, [], 200, id="allowed-user-certificate"),
        pytest.param("viewer", [], 403, id="certificate-user-not-allowed"),
        pytest.param(None, [], 401, id="no-certificate-no-token"),
    ],
)
async def test_a_client_certificate_of_the_client_ca_authenticates_on_the_secure_port(
    tmp_path: Path, cn: str | None, groups: list[str], status: int
) -> None:
    """--client-ca-file on the secure port: a certificate it signed is the user (CN) and
    groups (O), with no TokenReview; without one, a token is needed as before."""
    from ipscheduler.backend.metrics import Metrics

    ca = new_certificate("client-ca", is_ca=True)
    server = new_certificate("server", hosts=["127.0.0.1"]).write(str(tmp_path), "server")
    ctx = serving.server_context(*server, ca.write(str(tmp_path), "ca")[0])
    reviewer = Reviewer()
    middleware = serving.auth_middleware(reviewer, serving.DEFAULT_ALWAYS_ALLOW_PATHS)
    port = free_port()
    runner = await serve(HealthState(metrics=Metrics()), f"127.0.0.1:{port}", ctx, [middleware])
    client = insecure()
    if cn is not None:
        client.load_cert_chain(
            *new_certificate(cn, organizations=groups, issuer=ca).write(str(tmp_path), "client")
        )
    try:
        got, _ = await get(port, client, "/metrics")
    finally:
        await runner.cleanup()
    assert got == status
    assert not [a for a in reviewer.asked if isinstance(a, str)], "no TokenReview for a certificate"
