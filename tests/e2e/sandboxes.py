"""Which pod sandbox on a real node has which address, sampled every 100 ms.

A test that deletes pods on a real node runs an :class:`AddressSampler` beside it: a thread
that, every ``interval`` seconds, enters every network namespace under ``/run/netns`` (the
runtime pins each pod sandbox's there; ``setns(2)`` on the thread alone) and reads the IPv4
address of its ``eth0`` (``SIOCGIFADDR``): the address the sandbox holds on the node's bridge.
Namespaces whose address is outside ``subnet`` (another node's, another test's) are not this
node's sandboxes. An address held by two namespaces in one sample is an overlap: two live
interfaces with one address, the ARP conflict the node ledger and the Releasing phase exist
to prevent.

Linux and root only (entering a namespace needs CAP_SYS_ADMIN); the standard library's
``ctypes`` for ``setns``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import ipaddress
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
SIOCGIFADDR = 0x8915
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _eth0_ipv4() -> str | None:
    """The IPv4 address of ``eth0`` in the calling thread's network namespace, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            out = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", b"eth0"))
        except OSError:
            return None  # no eth0, or no address on it
    return socket.inet_ntoa(out[20:24])


@dataclasses.dataclass
class Overlap:
    """One address held by more than one namespace, over consecutive samples."""

    address: str
    netns: frozenset[str]
    first: float
    last: float
    samples: int = 1

    def __str__(self) -> str:
        return (
            f"{self.address} in {len(self.netns)} sandboxes ({', '.join(sorted(self.netns))}) for "
            f"{self.last - self.first:.1f}s ({self.samples} samples)"
        )


class AddressSampler:
    """The sampling thread (module doc) as a context manager.

    ``subnet``: the node's pod subnet (e.g. ``10.88.1.0/24``). After (or during) the run:
    :attr:`overlaps` (episodes), :attr:`samples` (how many), :meth:`held` (the last sample:
    address → namespaces), :meth:`span` (when a namespace was first and last seen with an
    address, in ``time.monotonic()`` seconds)."""

    def __init__(self, subnet: str, interval: float = 0.1) -> None:
        self.subnet = ipaddress.ip_network(subnet)
        self.interval = interval
        self.samples = 0
        self.overlaps: list[Overlap] = []
        self.longest_gap = 0.0
        """The longest time between two samples (a loaded machine may stretch ``interval``)."""
        self._seen: dict[tuple[str, str], tuple[float, float]] = {}
        self._last: dict[str, set[str]] = {}
        self._open: dict[str, Overlap] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="address-sampler", daemon=True)
        self.error: BaseException | None = None

    def __enter__(self) -> AddressSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def held(self) -> dict[str, set[str]]:
        """The last sample: address → the namespaces holding it."""
        with self._lock:
            return {a: set(n) for a, n in self._last.items()}

    def span(self, address: str, netns: str) -> tuple[float, float] | None:
        """``(first, last)`` monotonic time ``netns`` was seen holding ``address``, or None."""
        with self._lock:
            return self._seen.get((address, netns))

    def holders_of(self, address: str) -> set[str]:
        """Every namespace seen holding ``address`` so far."""
        with self._lock:
            return {n for a, n in self._seen if a == address}

    def wait_samples(self, n: int = 2, timeout: float = 10) -> None:
        """Wait until ``n`` more samples were taken (the state after an event is sampled)."""
        target, deadline = self.samples + n, time.monotonic() + timeout
        while self.samples < target:
            if self.error is not None:
                raise AssertionError(f"the sampler failed: {self.error!r}")
            assert time.monotonic() < deadline, "the sampler took no samples"
            time.sleep(self.interval / 2)

    def _run(self) -> None:
        try:
            host = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            try:
                last = time.monotonic()
                while not self._stop.is_set():
                    self._sample(host)
                    now = time.monotonic()
                    self.longest_gap = max(self.longest_gap, now - last)
                    last = now
                    self._stop.wait(self.interval)
            finally:
                _setns(host)
                os.close(host)
        except BaseException as e:  # surfaced by wait_samples and the tests' asserts
            self.error = e

    def _sample(self, host: int) -> None:
        found: dict[str, set[str]] = {}
        names = sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else []
        for name in names:
            try:
                fd = os.open(NETNS_DIR / name, os.O_RDONLY)
            except OSError:
                continue  # removed meanwhile
            try:
                with contextlib.suppress(OSError):  # not a namespace (being unmounted)
                    _setns(fd)
                    ip = _eth0_ipv4()
                    if ip is not None and ipaddress.ip_address(ip) in self.subnet:
                        found.setdefault(ip, set()).add(name)
            finally:
                os.close(fd)
                _setns(host)
        now = time.monotonic()
        with self._lock:
            self.samples += 1
            self._last = found
            for ip, holders in found.items():
                for n in holders:
                    first, _ = self._seen.get((ip, n), (now, now))
                    self._seen[(ip, n)] = (first, now)
            for ip in list(self._open):
                if len(found.get(ip, ())) < 2:
                    del self._open[ip]
            for ip, holders in found.items():
                if len(holders) < 2:
                    continue
                ongoing = self._open.get(ip)
                if ongoing is not None and ongoing.netns == frozenset(holders):
                    ongoing.last, ongoing.samples = now, ongoing.samples + 1
                else:
                    self._open[ip] = Overlap(ip, frozenset(holders), now, now)
                    self.overlaps.append(self._open[ip])


@contextlib.contextmanager
def sampling(subnet: str) -> Iterator[AddressSampler]:
    """An :class:`AddressSampler` running for the ``with`` block; it fails the block if its
    thread failed."""
    with AddressSampler(subnet) as sampler:
        sampler.wait_samples(1)
        yield sampler
    if sampler.error is not None:
        raise AssertionError(f"the address sampler failed: {sampler.error!r}")
