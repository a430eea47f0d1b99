"""cmd/serving: kube-scheduler's secure port in-process: the verb of a non-resource
request, the 401/403 answers, the always-allowed paths, TLS with given, generated and
client certificates (aiohttp on 127.0.0.1; the reviews faked), and certificates and a
client CA that follow their files without a restart: the reload logic on
in-memory handshakes, then a rotation under a running HTTPS server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import test_utils, web
from cryptography import x509

from ipscheduler.backend.health import HealthState, make_app, serve
from ipscheduler.cmd import serving
from ipscheduler.cmd.runner import loop_factory
from ipscheduler.cmd.serving import KeyPair, ReloadingContext, new_certificate
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


# ------------------------------------------------------------ certificates that follow their files
def cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)


def client_ctx(tmp: Path, pair: KeyPair | None = None) -> ssl.SSLContext:
    """A client that trusts any server (the test reads the certificate it gets), presenting
    ``pair`` when given."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if pair is not None:
        ctx.load_cert_chain(*pair.write(str(tmp), f"client-{id(pair)}"))
    return ctx


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """A TLS handshake in memory; the CN of the certificate the server presented. Raises
    ssl.SSLError when either side refuses."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", cli), ("server", srv)):
            try:
                side.do_handshake()
                done[name] = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()) and not s_out.pending and not c_out.pending:
            break
    der = cli.getpeercert(binary_form=True)
    assert der is not None
    return cn(x509.load_der_x509_certificate(der))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Files:
    """A server certificate, its key and a client CA in ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cert, self.key, self.ca = tmp / "tls.crt", tmp / "tls.key", tmp / "ca.crt"

    def write(self, pair: KeyPair | None = None, ca: KeyPair | None = None) -> None:
        if pair is not None:
            self.cert.write_bytes(pair.cert_pem)
            self.key.write_bytes(pair.key_pem)
        if ca is not None:
            self.ca.write_bytes(ca.cert_pem)

    def reloader(self, clock: Callable[[], float], require: bool = True) -> ReloadingContext:
        paths = (str(self.cert), str(self.key), str(self.ca))
        return ReloadingContext(*paths, require, interval=10, clock=clock)


@pytest.fixture
def tls_files(tmp_path: Path) -> Files:
    f = Files(tmp_path)
    f.write(new_certificate("server-a"), new_certificate("ca-1", is_ca=True))
    return f


def test_unchanged_files_keep_the_first_context(tls_files: Files) -> None:
    clock = Clock()
    r = tls_files.reloader(clock, require=False)
    clock.now += 60
    assert not r.maybe_reload() and r.current is r.context
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-a"


def test_a_rotation_is_served_from_the_first_handshake_after_the_interval(tls_files: Files) -> None:
    clock = Clock()
    r = tls_files.reloader(clock, require=False)
    tls_files.write(new_certificate("server-b"))
    clock.now += 9.9
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-a", "not looked at before the interval"
    clock.now += 0.1
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-b"
    assert r.current is not r.context


def test_a_rotated_client_ca_accepts_its_clients_and_refuses_the_old_ones(tls_files: Files) -> None:
    clock = Clock()
    ca1, ca2 = new_certificate("ca-1", is_ca=True), new_certificate("ca-2", is_ca=True)
    tls_files.write(ca=ca1)
    r = tls_files.reloader(clock)
    handshake(r.context, client_ctx(tls_files.tmp, new_certificate("u1", issuer=ca1)))
    tls_files.write(ca=ca2)
    clock.now += 10
    handshake(r.context, client_ctx(tls_files.tmp, new_certificate("u2", issuer=ca2)))
    with pytest.raises(ssl.SSLError):
        handshake(r.context, client_ctx(tls_files.tmp, new_certificate("u1", issuer=ca1)))


def test_a_key_not_matching_is_a_warning_and_the_old_certificate_serves(
    tls_files: Files, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    r = tls_files.reloader(clock, require=False)
    new = new_certificate("server-b")
    tls_files.cert.write_bytes(new.cert_pem)  # overwritten in place: the key is not there yet
    for _ in range(3):
        clock.now += 10
        with caplog.at_level(logging.WARNING, "ipscheduler.cmd.serving"):
            assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-a"
    warnings = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warnings) == 1, "once per content"
    assert "still serving the previous ones" in warnings[0].getMessage()
    tls_files.key.write_bytes(new.key_pem)
    clock.now += 10
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-b"


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda f: f.cert.write_bytes(f.cert.read_bytes()[:100]), id="half-written"),
        pytest.param(lambda f: f.ca.write_bytes(b"not a PEM"), id="bad-ca"),
        pytest.param(lambda f: f.key.unlink(), id="missing"),
    ],
)
def test_a_bad_file_never_stops_the_serving(tls_files: Files, damage: Callable[[Files], object]) -> None:
    clock = Clock()
    r = tls_files.reloader(clock, require=False)
    damage(tls_files)
    clock.now += 10
    assert not r.maybe_reload()
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-a"
    tls_files.write(new_certificate("server-b"), new_certificate("ca-2", is_ca=True))
    clock.now += 10
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-b", "the repaired files load"


def test_files_changing_while_they_load_wait_for_the_next_look(
    tls_files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    r = tls_files.reloader(clock, require=False)
    b, c = new_certificate("server-b"), new_certificate("server-c")
    tls_files.write(b)
    load = serving.load_context

    def load_then_rotate(*args: object) -> ssl.SSLContext:
        ctx = load(*args)  # type: ignore[arg-type]
        tls_files.write(c)
        return ctx

    monkeypatch.setattr(serving, "load_context", load_then_rotate)
    clock.now += 10
    assert not r.maybe_reload() and r.current is r.context
    monkeypatch.setattr(serving, "load_context", load)
    clock.now += 10
    assert r.maybe_reload()
    assert handshake(r.context, client_ctx(tls_files.tmp)) == "server-c"


def test_no_files_no_reloader(tmp_path: Path) -> None:
    assert serving.server_context(None, None).sni_callback is None


def test_the_generated_certificate_stays_when_the_client_ca_rotates(tmp_path: Path) -> None:
    ca1, ca2 = new_certificate("ca-1", is_ca=True), new_certificate("ca-2", is_ca=True)
    (tmp_path / "ca.crt").write_bytes(ca1.cert_pem)
    ctx = serving.server_context(None, None, str(tmp_path / "ca.crt"), True, reload_interval=0)
    first = handshake(ctx, client_ctx(tmp_path, new_certificate("u1", issuer=ca1)))
    assert first.endswith("@self-signed")
    (tmp_path / "ca.crt").write_bytes(ca2.cert_pem)
    assert handshake(ctx, client_ctx(tmp_path, new_certificate("u2", issuer=ca2))) == first
    with pytest.raises(ssl.SSLError):
        handshake(ctx, client_ctx(tmp_path, new_certificate("u1", issuer=ca1)))


# ------------------------------------------------------- a rotation under a running server
class SecretVolume:
    """A Secret volume as the kubelet writes it: ``<dir>/..<timestamp>/`` with the keys,
    ``..data`` a symlink to it, each key a symlink through ``..data``; an update writes a
    new timestamped folder and renames a new ``..data`` symlink over the old one
    (``pkg/volume/util/atomic_writer.go``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.generation = 0

    def path(self, key: str) -> str:
        return str(self.root / key)

    def update(self, data: dict[str, bytes]) -> None:
        self.generation += 1
        folder = self.root / f"..2026_11_27_{self.generation}"
        folder.mkdir()
        for key, value in data.items():
            (folder / key).write_bytes(value)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(folder.name)
        os.replace(tmp_link, self.root / "..data")
        for key in data:
            if not (self.root / key).is_symlink():
                (self.root / key).symlink_to(f"..data/{key}")

    def overwrite(self, key: str, value: bytes) -> None:
        """Write a key's file in place (``cp`` over a mounted file, not the kubelet's way)."""
        with open(self.root / key, "r+b") as f:
            f.truncate()
            f.write(value)


def secret(server: KeyPair, ca: KeyPair) -> dict[str, bytes]:
    return {"tls.crt": server.cert_pem, "tls.key": server.key_pem, "ca.crt": ca.cert_pem}


async def get_on(port: int, ctx: ssl.SSLContext, requests: int = 1) -> tuple[list[int], str]:
    """``requests`` GETs of /healthz on one TLS connection; their statuses and the server's CN."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    statuses = []
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        for _ in range(requests):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            status = await reader.readline()
            if not status:
                raise ConnectionError("closed before an answer")
            statuses.append(int(status.split()[1]))
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
    finally:
        writer.close()
    return statuses, cn(x509.load_der_x509_certificate(der))


async def rotate_under_a_running_server(tmp_path: Path) -> None:
    volume_dir = tmp_path / "tls"
    volume_dir.mkdir()
    volume = SecretVolume(volume_dir)
    ca1, ca2 = new_certificate("ca-1", is_ca=True), new_certificate("ca-2", is_ca=True)
    client1, client2 = new_certificate("client-1", issuer=ca1), new_certificate("client-2", issuer=ca2)
    volume.update(secret(new_certificate("server-a", hosts=["127.0.0.1"]), ca1))
    interval = 0.2
    # as cmd/wiring.py builds the extender's context, served as cmd/runner.py serves the port
    ctx = serving.server_context(
        volume.path("tls.crt"),
        volume.path("tls.key"),
        volume.path("ca.crt"),
        require_client_cert=True,
        reload_interval=interval,
    )
    port = free_port()
    runner = await serve(HealthState(), f"127.0.0.1:{port}", ctx)
    try:
        assert await get_on(port, client_ctx(tmp_path, client1)) == ([200], "server-a")
        # a connection open across the rotation keeps its certificate
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx(tmp_path, client1))
        kept = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)

        volume.update(secret(new_certificate("server-b", hosts=["127.0.0.1"]), ca2))
        await asyncio.sleep(interval * 1.5)
        assert await get_on(port, client_ctx(tmp_path, client2)) == ([200], "server-b")
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await get_on(port, client_ctx(tmp_path, client1))

        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert (await reader.readline()).split()[1] == b"200"
        assert cn(x509.load_der_x509_certificate(kept)) == "server-a"
        writer.close()

        # overwritten in place: key first, so the pair is mismatched for a moment
        server_c = new_certificate("server-c", hosts=["127.0.0.1"])
        volume.overwrite("tls.key", server_c.key_pem)
        await asyncio.sleep(interval * 1.5)
        assert await get_on(port, client_ctx(tmp_path, client2)) == ([200], "server-b"), "the old pair serves"
        volume.overwrite("tls.crt", server_c.cert_pem)
        await asyncio.sleep(interval * 1.5)
        assert await get_on(port, client_ctx(tmp_path, client2), requests=2) == ([200, 200], "server-c")
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_certificate_and_client_ca_rotated_under_a_running_server(tmp_path: Path, loop: str) -> None:
    with asyncio.Runner(loop_factory=loop_factory(loop)) as run:
        run.run(rotate_under_a_running_server(tmp_path))
