"""Secure serving as kube-scheduler's: TLS, delegated authentication and authorization.

kube-scheduler serves ``/healthz``, ``/readyz``, ``/livez`` and ``/metrics`` over HTTPS on
``--secure-port`` (10259) of ``--bind-address`` with ``--tls-cert-file`` and
``--tls-private-key-file``, or a self-signed certificate it generates in memory when none
is given (``staging/src/k8s.io/apiserver/pkg/server/options/serving.go``,
``MaybeDefaultWithSelfSignedCerts``). Each request is authenticated (a client certificate
signed by ``--client-ca-file``, else a bearer token through a TokenReview) and authorized
through a SubjectAccessReview on the non-resource path (:mod:`ipscheduler.kube.reviews`),
except the ``--authorization-always-allow-paths`` (``/healthz,/readyz,/livez``), which
anyone may GET, so the kubelet's probes need no credentials.

- no credentials, or a token the API server does not accept: 401, body a ``Status``
  ``Unauthorized`` (``staging/src/k8s.io/apiserver/pkg/endpoints/filters/authentication.go``);
- authenticated but not allowed: 403, a ``Status`` ``Forbidden`` with the message
  ``forbidden: User "<name>" cannot <verb> path "<path>"``
  (``.../endpoints/handlers/responsewriters/errors.go``, ``forbiddenMessage``);
- a review that cannot be made (the API server unreachable): 500, as the apiserver's
  filters answer an authorizer error.

The verb of a non-resource request is the HTTP method in lower case
(``.../endpoints/request/requestinfo.go``, ``NewRequestInfo``: ``Verb:
strings.ToLower(req.Method)``): GET → ``get``, POST → ``post``. Members of
``system:masters`` are always allowed (kube-scheduler's ``AlwaysAllowGroups``).

The extender's verbs (``ipscheduler extender --enable-https``) use the same certificate
options; ``--client-ca-file`` there requires every client to present a certificate it
signed (kube-scheduler's extender ``tlsConfig.certData``/``keyData``).

The certificate, its key and the client CA are re-read when their files change, as
kube-scheduler's ``dynamiccertificates`` controllers do: a rotation (cert-manager renewing
the Secret, the kubelet swapping the volume's ``..data`` symlink) is served from the next
TLS handshake on, without a restart; a changed file that does not load is a warning and
the previous certificate keeps serving (:class:`ReloadingContext`).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import logging
import os
import socket
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.kube.client import TRANSIENT_ERRORS
from ipscheduler.kube.reviews import Decision, UserInfo

log = logging.getLogger(__name__)

DEFAULT_SECURE_PORT = 10259
"""kube-scheduler's secure port (``pkg/scheduler/apis/config``: ``DefaultKubeSchedulerPort``)."""
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
"""kube-scheduler's ``--authorization-always-allow-paths`` (``cmd/kube-scheduler/app/options``)."""
ALWAYS_ALLOW_GROUPS = ("system:masters",)
"""kube-scheduler's ``AlwaysAllowGroups``: allowed without a SubjectAccessReview."""
SELF_SIGNED_DAYS = 365
"""Validity of a generated self-signed certificate (client-go's ``certutil``: one year)."""


# -- certificates ---------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM bytes."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: str, name: str) -> tuple[str, str]:
        """Write ``<name>.crt`` and ``<name>.key`` (mode 0600) into ``directory``; their paths."""
        cert, key = os.path.join(directory, f"{name}.crt"), os.path.join(directory, f"{name}.key")
        for path, data in ((cert, self.cert_pem), (key, self.key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        return cert, key


def new_certificate(
    common_name: str,
    *,
    hosts: Iterable[str] = (),
    organizations: Iterable[str] = (),
    issuer: KeyPair | None = None,
    is_ca: bool = False,
    days: int = SELF_SIGNED_DAYS,
) -> KeyPair:
    """A new ECDSA P-256 key and an X.509 certificate for ``common_name``: self-signed when
    ``issuer`` is None, else signed by it. ``hosts`` become subjectAltNames (IP addresses
    as such, anything else as DNS names), ``organizations`` the subject's O (kube's groups
    of a client certificate). A CA (``is_ca``) may sign; any other certificate is valid for
    TLS servers and clients both. Valid from an hour ago for ``days`` days."""
    # cryptography only here: importing it takes 0.1-0.2 s of every start, also with
    # --secure-port 0 or a given --tls-cert-file.
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    if issuer is None:
        issuer_cert, issuer_key = None, key
    else:
        issuer_cert = x509.load_pem_x509_certificate(issuer.cert_pem)
        loaded = serialization.load_pem_private_key(issuer.key_pem, password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey), "issuer keys are made here (ECDSA)"
        issuer_key = loaded
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if not is_ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    return KeyPair(
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def self_signed() -> KeyPair:
    """kube-scheduler's generated certificate: for ``localhost``, ``127.0.0.1`` and this
    host's name (its pod name in a cluster), self-signed, never written to disk but for
    the moment :func:`server_context` loads it."""
    hostname = socket.gethostname()
    return new_certificate(f"{hostname}@self-signed", hosts=["localhost", "127.0.0.1", hostname])


RELOAD_INTERVAL = 10.0
"""Seconds between two looks at the TLS files (:class:`ReloadingContext`). kube-scheduler
watches them with fsnotify and re-reads them at least once a minute
(``k8s.io/apiserver/pkg/server/dynamiccertificates``, ``FileRefreshDuration``); without a
file watch, a look every 10 s keeps a rotation's delay near fsnotify's for the price of
reading three small files."""


def server_context(
    cert_file: str | None,
    key_file: str | None,
    client_ca_file: str | None = None,
    require_client_cert: bool = False,
    *,
    reload_interval: float = RELOAD_INTERVAL,
) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later) with ``cert_file``/``key_file`` (PEM), or a
    generated self-signed pair when both are None (logged as kube-scheduler does). With
    ``client_ca_file``, a client certificate is verified against it: asked for and checked
    when given, or demanded (``require_client_cert``: a client without one is refused in
    the handshake). Given files are re-read when they change, without a restart
    (:class:`ReloadingContext`, at most every ``reload_interval`` seconds); the generated
    pair needs no reload (a given client CA is still followed). Raises OSError for a file
    that cannot be read and ssl.SSLError for one that is not a matching PEM pair or CA
    bundle (at this first load only)."""
    if cert_file and key_file:
        return ReloadingContext(
            cert_file, key_file, client_ca_file, require_client_cert, interval=reload_interval
        ).context
    pair = self_signed()
    log.info("generated self-signed cert in-memory")
    if client_ca_file:  # the generated pair stays; the client CA may rotate all the same
        return ReloadingContext(
            None, None, client_ca_file, require_client_cert, interval=reload_interval, pair=pair
        ).context
    with tempfile.TemporaryDirectory(prefix="ipscheduler-tls-") as tmp:
        return load_context(*pair.write(tmp, "self-signed"), None, False)


def load_context(
    cert_file: str | None, key_file: str | None, client_ca_file: str | None, require_client_cert: bool
) -> ssl.SSLContext:
    """A new TLS 1.2+ server context from the files as they are now (the certificate and key
    when given; the client CA with ``verify_mode`` as :func:`server_context` says). Raises
    OSError for a file that cannot be read, ssl.SSLError for a bad PEM or a key that does
    not match the certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file and key_file:
        ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(cafile=client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


class ReloadingContext:
    """A server's TLS context whose certificate, key and client CA follow their files, as
    kube-scheduler's ``DynamicServingCertificateController`` and ``DynamicFileCAContent``
    (``k8s.io/apiserver/pkg/server/dynamiccertificates``, ``dynamic_serving_content.go``,
    ``dynamic_cafile_content.go``) do: a rotation (cert-manager renewing a Secret, the
    kubelet swapping its volume's ``..data`` symlink, or a file overwritten in place) is
    served from the next TLS handshake on, without a restart; connections already open
    keep theirs.

    :attr:`context` is what the server is given, once. Its SNI callback, which OpenSSL
    calls on every ClientHello (with or without a server name), first looks at the files
    if ``interval`` seconds have passed since the last look (:meth:`maybe_reload`), then
    hands the handshake :attr:`current` (``SSLObject.context``: OpenSSL's
    ``SSL_set_SSL_CTX``, which takes the new context's certificate, key and
    verification store). A look reads the files and compares their bytes with those in
    use, as ``dynamic_cafile_content.go`` (``hasCAChanged``, ``bytes.Equal``) does; a
    change builds a new context from the files. A change that does not load (a half-written
    file, a key not matching its certificate, an unreadable file) is logged as a warning
    once per content and the current context keeps serving until the files change again
    and load. Files that change while they are loaded are tried again at the next look. A look costs
    three small reads on the event loop, at most once per ``interval``.

    ``cert_file``/``key_file`` None: ``pair`` (the generated self-signed certificate, in
    memory; written to a private temporary folder for the moment a context loads it) is
    served, only ``client_ca_file`` is followed. Raises OSError or
    ssl.SSLError as :func:`load_context` when the files do not load at construction.
    ``clock`` (seconds, monotonic) is for tests."""

    def __init__(
        self,
        cert_file: str | None,
        key_file: str | None,
        client_ca_file: str | None = None,
        require_client_cert: bool = False,
        *,
        interval: float = RELOAD_INTERVAL,
        pair: KeyPair | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cert_file, self._key_file = cert_file, key_file
        self._ca_file, self._require = client_ca_file, require_client_cert
        self._pair = pair  # the certificate when none is read from files
        self.interval = interval
        self._clock = clock
        self._applied = self._read()
        self.current = self._build()
        self._failed: object = None  # the content (or read error) last warned about
        self._last_look = clock()
        self.context = self.current
        """The server's context: the first one, whose SNI callback switches to :attr:`current`."""
        self.context.sni_callback = self._on_client_hello

    def _files(self) -> tuple[str | None, ...]:
        return (self._cert_file, self._key_file, self._ca_file)

    def _read(self) -> tuple[bytes | None, ...]:
        """The files' bytes (None for a file not given). Raises OSError."""
        out: list[bytes | None] = []
        for path in self._files():
            if path is None:
                out.append(None)
                continue
            with open(path, "rb") as f:
                out.append(f.read())
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        if self._pair is None:
            return load_context(self._cert_file, self._key_file, self._ca_file, self._require)
        with tempfile.TemporaryDirectory(prefix="ipscheduler-tls-") as tmp:
            return load_context(*self._pair.write(tmp, "self-signed"), self._ca_file, self._require)

    def maybe_reload(self) -> bool:
        """:meth:`reload` if ``interval`` seconds have passed since the last look; whether a
        new context is now current. Never raises."""
        now = self._clock()
        if now - self._last_look < self.interval:
            return False
        self._last_look = now
        return self.reload()

    def reload(self) -> bool:
        """Look at the files now; on a change that loads, make a new :attr:`current` (logged).
        Whether it did. Never raises: what does not load is logged as a warning and the
        current context stays."""
        try:
            seen = self._read()
        except OSError as e:
            self._warn(str(e), e)
            return False
        if seen in (self._applied, self._failed):
            return False
        try:
            ctx = self._build()
            settled = self._read() == seen
        except (OSError, ssl.SSLError, ValueError) as e:
            self._warn(seen, e)
            return False
        if not settled:
            return False  # changed while loading: the next look takes the settled files
        changed = [
            p for p, old, new in zip(self._files(), self._applied, seen, strict=True) if p and old != new
        ]
        self._applied, self._failed, self.current = seen, None, ctx
        log.info("loaded the rotated TLS files %s: new connections use them", ", ".join(changed))
        return True

    def _warn(self, failed: object, e: Exception) -> None:
        """A warning for a change that does not load, once per content or read error."""
        if failed != self._failed:
            files = ", ".join(p for p in self._files() if p)
            log.warning("cannot load the changed TLS files %s, still serving the previous ones: %s", files, e)
        self._failed = failed

    def _on_client_hello(self, sslobj: Any, server_name: str | None, ctx: ssl.SSLContext) -> None:
        """The SNI callback: look at the files when due, then give the handshake the current
        context. An exception would abort the handshake, so none leaves."""
        try:
            self.maybe_reload()
            if self.current is not ctx:
                sslobj.context = self.current
        except Exception:  # a handshake must not fail on the reloader
            log.exception("could not switch a TLS handshake to the rotated certificate")


# -- the filters ----------------------------------------------------------------------------
def non_resource_verb(method: str) -> str:
    """The authorization verb of an HTTP request to a non-resource path: the method in lower
    case (``requestinfo.go``: ``GET`` → ``get``, ``HEAD`` → ``head``, ``POST`` → ``post``).
    Raises ValueError for an empty method."""
    if not method:
        raise ValueError("no HTTP method")
    return method.lower()


def forbidden_message(user: str, verb: str, path: str) -> str:
    """The apiserver's message for a denied non-resource request
    (``responsewriters/errors.go``: ``forbiddenMessage``, wrapped by ``NewForbidden``)."""
    return f'forbidden: User "{user}" cannot {verb} path "{path}"'


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` failure as the apiserver writes one (``kind: Status``)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if code == 403:
        body["details"] = {}
    return body


def _status_response(code: int, reason: str, message: str) -> web.Response:
    return web.Response(
        status=code,
        text=json.dumps(status_body(code, reason, message)),
        content_type="application/json",
        headers={"X-Content-Type-Options": "nosniff"},
    )


def path_matcher(paths: Iterable[str]) -> Callable[[str], bool]:
    """Whether a request path is one of ``paths`` (exact; one ending in ``*`` matches as a
    prefix), as kube's ``path.NewAuthorizer`` (``.../authorization/path/path.go``)."""
    exact = {p for p in paths if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in paths if p.endswith("*"))
    return lambda path: path in exact or (bool(prefixes) and path.startswith(prefixes))


class Reviewer(Protocol):
    """What the filter needs of :class:`ipscheduler.kube.reviews.DelegatingAuth`."""

    async def authenticate(self, token: str) -> UserInfo | None: ...

    async def authorize(self, user: UserInfo, verb: str, path: str) -> Decision: ...


def certificate_user(peercert: Any) -> UserInfo | None:
    """The user of a verified client certificate (``ssl`` ``getpeercert()``'s dict): CN the
    name, each O a group, as kube's x509 authenticator (``.../authentication/request/x509``,
    ``CommonNameUserConversion``). None without a certificate or a CN."""
    if not peercert:
        return None
    name, groups = "", []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    return UserInfo(name=name, groups=tuple(groups)) if name else None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def auth_middleware(reviewer: Reviewer, always_allow_paths: Iterable[str]) -> Any:
    """An aiohttp middleware: authenticate, then authorize each request as the module doc
    says; the always-allowed paths pass untouched."""
    allowed_path = path_matcher(list(always_allow_paths))

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if allowed_path(request.path):
            return await handler(request)
        transport = request.transport
        user = certificate_user(transport.get_extra_info("peercert") if transport is not None else None)
        try:
            if user is None:
                scheme, _, token = request.headers.get("Authorization", "").partition(" ")
                token = token.strip()
                if scheme.lower() == "bearer" and token:
                    user = await reviewer.authenticate(token)
            if user is None:
                return _status_response(401, "Unauthorized", "Unauthorized")
            verb = non_resource_verb(request.method)
            if not set(user.groups) & set(ALWAYS_ALLOW_GROUPS):
                decision = await reviewer.authorize(user, verb, request.path)
                if not decision.allowed:
                    message = forbidden_message(user.name, verb, request.path)
                    if decision.reason:
                        message += f": {decision.reason}"
                    return _status_response(403, "Forbidden", message)
        except (ApiException, *TRANSIENT_ERRORS) as e:
            log.warning("could not review a request for %s: %s", request.path, e)
            return _status_response(500, "InternalError", f"Internal error occurred: {e}")
        return await handler(request)

    return middleware
