"""A small fault-injecting TCP proxy for the end-to-end tests (a pure-asyncio mini toxiproxy).

It listens on ``127.0.0.1:<port>`` and forwards raw bytes to an upstream
``(host, port)``, typically the dev cluster's kube-apiserver. TLS is not
terminated: the client's handshake goes through unchanged, so the apiserver
certificate and the client's credentials keep working.

The proxy runs its own event loop in a daemon thread; every public method is
synchronous and safe to call from a plain (non-async) pytest test. Faults:

* :meth:`FaultProxy.cut_all` - reset (RST) every open connection, mid-stream;
* :meth:`FaultProxy.cut_after` - reset each connection after another *n* bytes
  of upstream->client traffic (a response or watch stream cut mid-chunk);
* :meth:`FaultProxy.refuse` - reset new connections as soon as they arrive;
* :meth:`FaultProxy.delay` - add latency to every chunk, both directions;
* :meth:`FaultProxy.blackhole` - swallow bytes both ways, connections stay open.

Typical use::

    with FaultProxy("127.0.0.1", apiserver_port) as proxy:
        kubeconfig = kubeconfig_via(cluster.kubeconfig, tmp_path / "kubeconfig", proxy.port)
        ...  # run the scheduler with that kubeconfig
        proxy.cut_after(10_000)  # the next list/watch response breaks mid-chunk
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import math
import socket
import struct
import termios
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import yaml

__all__ = ["FaultProxy", "kubeconfig_via"]

T = TypeVar("T")

CHUNK = 64 * 1024
"""Largest chunk read from a socket at once (one ``read()``)."""

QUEUE_CHUNKS = 64
"""Chunks buffered per direction while they wait out the delay (back-pressure beyond that)."""

FLUSH_TIMEOUT = 1.0
"""How long a cut_after() cut waits for the partial chunk to leave the kernel before the RST."""

CALL_TIMEOUT = 10.0
"""How long a public method waits for the proxy loop to run it."""


def _linger_zero(writer: asyncio.StreamWriter | None) -> None:
    """Make the next close of ``writer``'s socket send RST instead of FIN."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Abruptly close ``writer``'s connection: RST, unsent data discarded."""
    if writer is None:
        return
    _linger_zero(writer)
    writer.transport.abort()


def _unsent(writer: asyncio.StreamWriter) -> int:
    """Bytes still in the kernel send queue (unsent or unacknowledged); 0 if unknown."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")  # SIOCOUTQ on Linux
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", out)[0])


class _Conn:
    """One proxied connection: the client side, the upstream side and their pump tasks."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.budget: int | None = None  # upstream->client bytes left before a cut_after() cut
        self.closed = False

    def cut(self) -> None:
        """Reset both sides (RST) and stop the pumps. Idempotent."""
        if self.closed:
            return
        self.closed = True
        _reset(self.client)
        _reset(self.upstream)
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()

    def close(self) -> None:
        """Close both sides gracefully (FIN), after both directions hit EOF."""
        if self.closed:
            return
        self.closed = True
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()


class FaultProxy:
    """TCP proxy on ``127.0.0.1:<port>`` forwarding to upstream ``(host, port)``, with faults.

    The listening socket is bound in :meth:`start` and kept until :meth:`stop`,
    so ``port`` is stable for the proxy's life (and reused by a later
    ``start()``): a kubeconfig pointing at it stays valid whatever the faults.
    Faults may be set before ``start()``; they apply once it runs.
    """

    def __init__(self, upstream_host: str, upstream_port: int, listen_port: int = 0) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.port: int = listen_port
        self._accepted = 0
        self._conns: set[_Conn] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        # Fault state; only touched on the proxy loop while it runs.
        self._refusing = False
        self._blackholing = False
        self._delay = 0.0
        self._cut_after: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_event: asyncio.Event | None = None

    # -- lifecycle -----------------------------------------------------
    def start(self) -> FaultProxy:
        """Bind the listening socket, start the proxy thread and its loop; return ``self``."""
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(sock, ready),), name=f"faultproxy-{self.port}", daemon=True
        )
        self._thread.start()
        try:
            ready.result(timeout=CALL_TIMEOUT)
        except BaseException:
            sock.close()
            self._thread.join(timeout=CALL_TIMEOUT)
            self._thread = None
            raise
        return self

    def stop(self) -> None:
        """Reset every connection, close the listening socket and join the thread. Idempotent."""
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None:
            with contextlib.suppress(RuntimeError):  # loop already gone
                loop.call_soon_threadsafe(stop_event.set)
        thread.join(timeout=CALL_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError(f"{thread.name} did not stop within {CALL_TIMEOUT}s")
        self._thread = None

    def __enter__(self) -> FaultProxy:
        """Start the proxy unless already started (so ``with FaultProxy(...).start():`` works too)."""
        return self if self._thread is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- faults ----------------------------------------------------------
    def cut_all(self) -> int:
        """Reset (RST) both sides of every open connection, mid-stream; return how many were cut."""

        def cut() -> int:
            conns = list(self._conns)
            for conn in conns:
                conn.cut()
            return len(conns)

        return self._call(cut)

    def cut_after(self, nbytes: int | None) -> None:
        """Cut (RST) each connection after another ``nbytes`` of upstream->client traffic.

        Applies to the open connections (counting from now) and to every new
        one (counting from its start). The client receives exactly ``nbytes``
        more bytes (the last chunk is split) and then a reset; ``0`` cuts at
        the next upstream byte. ``None`` disables it.
        """
        if nbytes is not None and nbytes < 0:
            raise ValueError(f"nbytes must be >= 0 or None, not {nbytes}")

        def apply() -> None:
            self._cut_after = nbytes
            for conn in self._conns:
                conn.budget = nbytes

        self._call(apply)

    def refuse(self, on: bool = True) -> None:
        """While on, reset new connections as soon as they are accepted; open ones keep working.

        The kernel completes the TCP handshake before the proxy sees it, so the
        client's ``connect()`` usually succeeds and its first read or write
        fails with ECONNRESET; if the RST is quicker than the client, the
        ``connect()`` itself fails with ECONNRESET. The listening port stays open.
        """
        self._call(lambda: setattr(self, "_refusing", on))

    def delay(self, seconds: float) -> None:
        """Deliver every chunk (both directions) ``seconds`` after it arrived; ``0`` disables.

        Chunks are pipelined (like toxiproxy's latency toxic): a stream is
        late by ``seconds``, its throughput is not divided by it.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"delay must be a finite number >= 0, not {seconds}")
        self._call(lambda: setattr(self, "_delay", float(seconds)))

    def blackhole(self, on: bool = True) -> None:
        """While on, swallow bytes in both directions; connections stay open but silent.

        Bytes arriving (or still waiting out a delay) while it is on are
        dropped for good, so a connection that lived through it is corrupt:
        only use new connections afterwards (as a client would after a timeout).
        """
        self._call(lambda: setattr(self, "_blackholing", on))

    def heal(self) -> None:
        """Turn every fault off (refuse, blackhole, delay, cut_after)."""

        def apply() -> None:
            self._refusing = self._blackholing = False
            self._delay = 0.0
            self._cut_after = None
            for conn in self._conns:
                conn.budget = None

        self._call(apply)

    # -- counters ------------------------------------------------------
    @property
    def connections(self) -> int:
        """Proxied connections currently open (client side accepted, not yet closed)."""
        return self._call(lambda: len(self._conns))

    @property
    def accepted(self) -> int:
        """Client connections accepted since the proxy was created, refused ones included."""
        return self._accepted

    # -- internals -------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the proxy loop and return its result (directly if not running)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or threading.current_thread() is thread:
            return fn()

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout=CALL_TIMEOUT)

    async def _main(self, sock: socket.socket, ready: concurrent.futures.Future[None]) -> None:
        try:
            server = await asyncio.start_server(self._handle, sock=sock)
            self._stop_event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        except BaseException as e:
            ready.set_exception(e)
            raise
        ready.set_result(None)
        try:
            await self._stop_event.wait()
        finally:
            self._loop = None
            server.close()
            for conn in list(self._conns):
                conn.cut()
            await server.wait_closed()
            # Let the handlers see their cut and return: cancelling one makes 3.11's
            # StreamReaderProtocol log an error. asyncio.run() cancels any straggler.
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=CALL_TIMEOUT / 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        if self._refusing:
            _reset(writer)
            return
        conn = _Conn(writer)
        self._conns.add(conn)
        handler = asyncio.current_task()
        assert handler is not None  # a stream server runs each handler in its own task
        self._handlers.add(handler)
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            except OSError:
                conn.cut()  # upstream down: the client sees a reset
                return
            conn.upstream = up_writer
            if conn.closed:  # cut while connecting
                _reset(up_writer)
                return
            conn.budget = self._cut_after
            conn.tasks = [
                *self._pipe(conn, reader, up_writer, downstream=False),
                *self._pipe(conn, up_reader, writer, downstream=True),
            ]
            await asyncio.gather(*conn.tasks, return_exceptions=True)
            conn.close()
        finally:
            self._conns.discard(conn)
            self._handlers.discard(handler)

    def _pipe(
        self, conn: _Conn, src: asyncio.StreamReader, dst: asyncio.StreamWriter, *, downstream: bool
    ) -> list[asyncio.Task[None]]:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUE_CHUNKS)
        return [
            asyncio.create_task(self._read_loop(conn, src, queue)),
            asyncio.create_task(self._write_loop(conn, queue, dst, downstream=downstream)),
        ]

    async def _read_loop(
        self, conn: _Conn, src: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await src.read(CHUNK):
                await queue.put((loop.time(), data))
        except OSError:
            conn.cut()
            return
        await queue.put(None)  # EOF

    async def _write_loop(
        self,
        conn: _Conn,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        dst: asyncio.StreamWriter,
        *,
        downstream: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await queue.get()) is not None:
                arrived, data = item
                if self._delay > 0:
                    await asyncio.sleep(max(0.0, arrived + self._delay - loop.time()))
                if self._blackholing:
                    continue
                budget = conn.budget if downstream else None
                if budget is not None and len(data) >= budget:
                    await self._flush(dst, data[:budget])
                    conn.cut()
                    return
                if budget is not None:
                    conn.budget = budget - len(data)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()  # half-close: the other direction keeps flowing
        except OSError:
            conn.cut()

    @staticmethod
    async def _flush(writer: asyncio.StreamWriter, data: bytes) -> None:
        """Write ``data`` and wait (bounded) until it left asyncio's buffer and the kernel's.

        The RST that follows discards whatever is still unsent, and the cut
        must land exactly after the promised bytes.
        """
        writer.transport.set_write_buffer_limits(high=0)  # drain() now waits for an empty buffer
        writer.write(data)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FLUSH_TIMEOUT
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(writer.drain(), FLUSH_TIMEOUT)
        # No event tells when the kernel sent (and got acks for) its queue: poll it.
        while _unsent(writer) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


def _absolute(value: Any, base: Path) -> Any:
    """``value`` as an absolute path relative to ``base`` if it is a relative path string."""
    if isinstance(value, str) and value and not Path(value).is_absolute():
        return str(base / value)
    return value


def kubeconfig_via(src: Path, dst: Path, port: int) -> Path:
    """Write ``dst``: a copy of kubeconfig ``src`` whose every cluster talks to ``https://127.0.0.1:<port>``.

    CA data, ``insecure-skip-tls-verify``, ``tls-server-name`` and user
    credentials are kept; relative file paths (CA, client cert/key, token
    file) are made absolute against ``src``'s directory so they still resolve
    from ``dst``. ``dst`` is written mode 0600 (it holds credentials).
    Returns ``dst``.
    """
    cfg = yaml.safe_load(src.read_text()) or {}
    base = src.resolve().parent
    clusters = cfg.get("clusters") or []
    if not clusters:
        raise ValueError(f"{src}: no clusters to redirect")
    for entry in clusters:
        cluster = entry.setdefault("cluster", {})
        cluster["server"] = f"https://127.0.0.1:{port}"
        if "certificate-authority" in cluster:
            cluster["certificate-authority"] = _absolute(cluster["certificate-authority"], base)
    for entry in cfg.get("users") or []:
        user = entry.get("user") or {}
        for key in ("client-certificate", "client-key", "tokenFile"):
            if key in user:
                user[key] = _absolute(user[key], base)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.touch(mode=0o600)
    dst.chmod(0o600)
    dst.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dst
