"""tests/faultproxy.py: bytes pass through unchanged, and each fault does what it says.

Upstreams are small threaded TCP servers on 127.0.0.1 (echo, a one-shot body
stream, and a stream that stops half-way until the test lets it go on).
Timing asserts are lower bounds only.
"""

from __future__ import annotations

import contextlib
import random
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest
import yaml

from tests.builders import free_port
from tests.faultproxy import FaultProxy, kubeconfig_via

pytestmark = pytest.mark.timeout(15)

BODY = random.Random(0).randbytes(2 * 1024 * 1024)  # spans many 64 KiB proxy chunks
HALF = len(BODY) // 2
RECV_TIMEOUT = 3.0
REQUEST = b"GET /api/v1/pods?watch=1\r\n\r\n"


class _Handler(socketserver.BaseRequestHandler):
    server: Upstream

    def handle(self) -> None:
        sock: socket.socket = self.request
        mode = self.server.mode
        with contextlib.suppress(OSError):  # the proxy may reset us: that is the point
            if mode == "echo":
                while data := sock.recv(65536):
                    sock.sendall(data)
                return
            if mode != "push":  # like an HTTP server: the response follows a request
                assert sock.recv(len(REQUEST)) == REQUEST
            if mode == "gated":  # half the body, then the rest once the test opens the gate
                sock.sendall(BODY[:HALF])
                if self.server.gate.wait(timeout=10):
                    sock.sendall(BODY[HALF:])
            else:
                sock.sendall(BODY)


class Upstream(socketserver.ThreadingTCPServer):
    """A tiny upstream.

    ``echo`` echoes until EOF; ``stream`` answers a REQUEST with BODY and
    closes; ``push`` sends BODY on connect; ``gated`` answers a REQUEST with
    half of BODY, and the rest once ``gate`` is set.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.gate = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)
        self.port: int = self.server_address[1]


Upstreams = dict[str, Upstream]
ProxyTo = Callable[[str], FaultProxy]


class Client(Protocol):
    """The ``client`` fixture: connect to ``port`` (and send REQUEST if ``request``)."""

    def __call__(self, port: int, request: bool = False) -> socket.socket: ...


@pytest.fixture
def upstreams() -> Iterator[Upstreams]:
    servers = {mode: Upstream(mode) for mode in ("echo", "stream", "push", "gated")}
    for srv in servers.values():
        threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield servers
    for srv in servers.values():
        srv.gate.set()
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def proxy_to(upstreams: Upstreams) -> Iterator[ProxyTo]:
    """``proxy_to(mode)``: a started FaultProxy in front of that upstream, stopped afterwards."""
    proxies: list[FaultProxy] = []

    def make(mode: str) -> FaultProxy:
        proxy = FaultProxy("127.0.0.1", upstreams[mode].port).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.stop()


@pytest.fixture
def client() -> Iterator[Client]:
    """``client(port, request=False)``: a connected socket (that sent REQUEST if asked), closed afterwards.

    Upstreams that answer a request keep the connection quiet until connect()
    returned, so a fast cut cannot reset it during connect().
    """
    socks: list[socket.socket] = []

    def connect(port: int, request: bool = False) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=RECV_TIMEOUT)
        socks.append(sock)
        if request:
            sock.sendall(REQUEST)
        return sock

    yield connect
    for sock in socks:
        sock.close()


def read_to_end(sock: socket.socket) -> tuple[bytes, str]:
    """Read until the stream ends; return the bytes and how it ended: eof, reset or timeout."""
    chunks: list[bytes] = []
    try:
        while data := sock.recv(65536):
            chunks.append(data)
    except ConnectionResetError:
        return b"".join(chunks), "reset"
    except TimeoutError:
        return b"".join(chunks), "timeout"
    return b"".join(chunks), "eof"


def read_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        data = sock.recv(n - len(buf))
        assert data, f"EOF after {len(buf)} of {n} bytes"
        buf += data
    return bytes(buf)


def echo_once(sock: socket.socket, payload: bytes = b"ping") -> bytes:
    sock.sendall(payload)
    return read_exactly(sock, len(payload))


def assert_reset(sock: socket.socket) -> None:
    """The connection was reset by the peer (seen on write or on read)."""
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        sock.sendall(b"ping")
        data = sock.recv(100)
        pytest.fail(f"connection still alive, read {data!r}")


def assert_turned_away(port: int) -> None:
    """A new connection to ``port`` is reset: during connect() if the RST is that quick, else on use."""
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        with socket.create_connection(("127.0.0.1", port), timeout=RECV_TIMEOUT) as sock:
            sock.sendall(b"ping")
            data = sock.recv(100)
        pytest.fail(f"connection was served, read {data!r}")


def wait_until(cond: Callable[[], bool], timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# -- pass-through --------------------------------------------------------------


def test_stream_passes_through_unchanged(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("stream")
    sock = client(proxy.port, request=True)
    data, end = read_to_end(sock)
    assert (len(data), end) == (len(BODY), "eof")
    assert data == BODY
    assert proxy.accepted == 1


def test_echo_passes_through_unchanged_with_half_close(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("echo")
    sock = client(proxy.port)
    assert wait_until(lambda: proxy.connections == 1)

    def send() -> None:  # concurrently, so neither side's buffers can deadlock us
        sock.sendall(BODY)
        sock.shutdown(socket.SHUT_WR)  # the proxy must carry the FIN upstream

    sender = threading.Thread(target=send)
    sender.start()
    data, end = read_to_end(sock)
    sender.join(timeout=RECV_TIMEOUT)
    assert end == "eof" and data == BODY
    assert wait_until(lambda: proxy.connections == 0)


# -- cuts ----------------------------------------------------------------------


def test_cut_all_resets_an_open_stream_mid_way(
    proxy_to: ProxyTo, client: Client, upstreams: Upstreams
) -> None:
    proxy = proxy_to("gated")
    sock = client(proxy.port, request=True)
    assert read_exactly(sock, HALF) == BODY[:HALF]
    assert proxy.cut_all() == 1
    upstreams["gated"].gate.set()
    data, end = read_to_end(sock)
    assert end == "reset", f"expected RST, got {end} after {len(data)} more bytes"
    assert HALF + len(data) < len(BODY)
    assert wait_until(lambda: proxy.connections == 0)
    assert proxy.cut_all() == 0
    # The listening port survives the cut: a new connection gets the whole body.
    sock2 = client(proxy.port, request=True)
    assert read_to_end(sock2) == (BODY, "eof")


@pytest.mark.parametrize(
    "nbytes",
    [0, 1, 1000, 65_536 + 123, 1_000_000, None],
    ids=["zero", "one-byte", "1000", "past-first-chunk", "1MB", "disabled"],
)
def test_cut_after_cuts_new_connections_mid_chunk(
    proxy_to: ProxyTo, client: Client, nbytes: int | None
) -> None:
    proxy = proxy_to("stream")
    proxy.cut_after(12_345)
    proxy.cut_after(nbytes)  # the last call wins
    data, end = read_to_end(client(proxy.port, request=True))
    if nbytes is None:
        assert (data == BODY, end) == (True, "eof")
    else:
        assert (len(data), end) == (nbytes, "reset")
        assert data == BODY[:nbytes]


def test_cut_after_counts_from_now_on_an_open_stream(
    proxy_to: ProxyTo, client: Client, upstreams: Upstreams
) -> None:
    proxy = proxy_to("gated")
    sock = client(proxy.port, request=True)
    assert read_exactly(sock, HALF) == BODY[:HALF]
    proxy.cut_after(5000)
    upstreams["gated"].gate.set()
    data, end = read_to_end(sock)
    assert (len(data), end) == (5000, "reset")
    assert data == BODY[HALF : HALF + 5000]


# -- refuse, delay, blackhole ------------------------------------------------


def test_refuse_resets_new_connections_but_keeps_open_ones(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("echo")
    kept = client(proxy.port)
    assert echo_once(kept) == b"ping"
    proxy.refuse()
    assert_turned_away(proxy.port)
    assert echo_once(kept, b"still here") == b"still here"
    assert proxy.accepted == 2
    proxy.refuse(False)
    assert echo_once(client(proxy.port), b"back") == b"back"
    assert proxy.accepted == 3


@pytest.mark.parametrize(
    ("mode", "at_least"),
    [("push", 0.2), ("echo", 0.45)],
    ids=["one-way-first-byte", "echo-round-trip-both-ways"],
)
def test_delay_adds_latency(proxy_to: ProxyTo, client: Client, mode: str, at_least: float) -> None:
    proxy = proxy_to(mode)
    proxy.delay(0.25)
    start = time.monotonic()
    sock = client(proxy.port)
    if mode == "push":
        first = sock.recv(1)
        elapsed = time.monotonic() - start
        rest, end = read_to_end(sock)
        assert (first + rest == BODY, end) == (True, "eof")  # order and content kept
    else:
        assert echo_once(sock) == b"ping"
        elapsed = time.monotonic() - start
    assert elapsed >= at_least


def test_delay_zero_disables(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("echo")
    proxy.delay(5)
    proxy.delay(0)
    sock = client(proxy.port)
    sock.settimeout(1.0)  # a 5 s delay would time this out
    assert echo_once(sock) == b"ping"


def test_blackhole_stalls_then_new_connections_work(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("echo")
    stalled = client(proxy.port)
    assert echo_once(stalled) == b"ping"
    proxy.blackhole()
    stalled.settimeout(0.3)
    with pytest.raises(TimeoutError):
        echo_once(stalled)
    assert proxy.connections == 1  # open, just silent
    proxy.blackhole(False)
    assert echo_once(client(proxy.port), b"alive") == b"alive"


@pytest.mark.parametrize(
    ("call", "arg"),
    [("delay", -1.0), ("delay", float("nan")), ("cut_after", -1)],
    ids=["negative-delay", "nan-delay", "negative-cut"],
)
def test_bad_fault_arguments_are_rejected(proxy_to: ProxyTo, call: str, arg: float) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        getattr(proxy_to("echo"), call)(arg)


def test_unreachable_upstream_resets_the_client() -> None:
    with FaultProxy("127.0.0.1", free_port()) as proxy:
        assert_turned_away(proxy.port)


def test_heal_turns_every_fault_off(proxy_to: ProxyTo, client: Client) -> None:
    proxy = proxy_to("stream")
    proxy.refuse()
    proxy.blackhole()
    proxy.delay(5)
    proxy.cut_after(10)
    proxy.heal()
    assert read_to_end(client(proxy.port, request=True)) == (BODY, "eof")


# -- lifecycle -----------------------------------------------------------------


def _proxy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("faultproxy-")]


def test_stop_resets_connections_joins_thread_and_restart_keeps_port(
    upstreams: Upstreams, client: Client
) -> None:
    assert _proxy_threads() == []
    proxy = FaultProxy("127.0.0.1", upstreams["echo"].port).start()
    port = proxy.port
    assert port > 0 and len(_proxy_threads()) == 1
    sock = client(port)
    assert echo_once(sock) == b"ping"

    proxy.stop()
    assert _proxy_threads() == []
    assert_reset(sock)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=RECV_TIMEOUT).close()
    proxy.stop()  # idempotent

    with proxy:  # restarts on the same port: a kubeconfig pointing at it stays valid
        assert proxy.port == port
        assert echo_once(client(port), b"again") == b"again"
    assert _proxy_threads() == []


def test_start_twice_is_an_error(proxy_to: ProxyTo) -> None:
    proxy = proxy_to("echo")
    with pytest.raises(RuntimeError, match="already started"):
        proxy.start()
    with proxy as entered:  # entering a started proxy is fine; leaving stops it
        assert entered is proxy
    assert _proxy_threads() == []


# -- kubeconfig_via ------------------------------------------------------------


def test_kubeconfig_via_points_every_cluster_at_the_proxy(tmp_path: Path) -> None:
    src = tmp_path / "cluster" / "kubeconfig"
    src.parent.mkdir()
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "a",
                "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E="},
            },
            {
                "name": "b",
                "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority": "pki/ca.crt"},
            },
            {"name": "c", "cluster": {"server": "https://x:1", "insecure-skip-tls-verify": True}},
        ],
        "users": [
            {"name": "admin", "user": {"token": "s3cret"}},
            {"name": "cert", "user": {"client-certificate": "/abs/c.crt", "client-key": "k.key"}},
        ],
        "contexts": [{"name": "ctx", "context": {"cluster": "a", "user": "admin"}}],
        "current-context": "ctx",
    }
    src.write_text(yaml.safe_dump(cfg))

    dst = kubeconfig_via(src, tmp_path / "out" / "kubeconfig", 4321)

    assert dst == tmp_path / "out" / "kubeconfig"
    assert stat.S_IMODE(dst.stat().st_mode) == 0o600
    out = yaml.safe_load(dst.read_text())
    assert [c["cluster"]["server"] for c in out["clusters"]] == ["https://127.0.0.1:4321"] * 3
    assert out["clusters"][0]["cluster"]["certificate-authority-data"] == "Q0E="
    assert out["clusters"][1]["cluster"]["certificate-authority"] == str(src.parent / "pki/ca.crt")
    assert out["clusters"][2]["cluster"]["insecure-skip-tls-verify"] is True
    assert out["users"][0] == cfg["users"][0]
    assert out["users"][1]["user"] == {
        "client-certificate": "/abs/c.crt",
        "client-key": str(src.parent / "k.key"),
    }
    assert (out["contexts"], out["current-context"]) == (cfg["contexts"], "ctx")
    assert yaml.safe_load(src.read_text()) == cfg  # the source is untouched


def test_kubeconfig_via_without_clusters_is_an_error(tmp_path: Path) -> None:
    src = tmp_path / "kubeconfig"
    src.write_text("apiVersion: v1\nkind: Config\nusers: []\n")
    with pytest.raises(ValueError, match="no clusters"):
        kubeconfig_via(src, tmp_path / "out", 1)
