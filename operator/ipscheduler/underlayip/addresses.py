"""Underlay address pools as sets of integer intervals (pure math, no I/O).

A NodeIPPool's ``spec.addresses`` and ``spec.exclude`` are lists of text
entries, each one of:

* a single IP: ``10.0.0.5``, ``fd00::5``;
* a CIDR: ``10.0.1.0/28``, ``fd00::/120`` (decimal prefix length, no host bits);
* an inclusive ``first-last`` range: ``10.0.0.10-10.0.0.19``, ``fd00::1-fd00::ff``.

In ``spec.addresses`` an IPv4 CIDR with prefix length <= 30 leaves out its
network and broadcast address (so a /30 gives 2 addresses, a /24 gives 254);
/31 and /32 keep all their addresses, and IPv6 CIDRs always keep every address.
In ``spec.exclude`` a CIDR removes its *whole* block, network and broadcast
included, so excluding ``10.0.0.0/24`` never leaves ``10.0.0.0`` behind.

Pools can be astronomically large (an IPv6 /64 holds 2**64 addresses), so they
are never expanded into per-address sets. An :class:`AddressSet` is a sorted
tuple of disjoint, non-adjacent, inclusive intervals ``(version, first, last)``
where ``version`` is 4 or 6 and ``first``/``last`` are the addresses as
integers (``int(ipaddress.ip_address(...))``). All IPv4 intervals sort before
all IPv6 intervals. Every operation costs time proportional to the number of
intervals (plus the number of "taken" addresses where relevant), never to the
number of addresses.

Bad entries raise :class:`AddressError` (a ``ValueError``) whose message quotes
the offending entry and says what is wrong with it.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias

__all__ = ["AddressError", "AddressSet", "Interval", "canonical", "parse_entry"]

Interval: TypeAlias = tuple[int, int, int]
"""One inclusive interval ``(version, first, last)``: version 4 or 6, addresses as ints."""

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAX_PREFIX = {4: 32, 6: 128}
_MAX_INT = {4: 2**32 - 1, 6: 2**128 - 1}
_PREFIX_RE = re.compile(r"[0-9]{1,3}")


class AddressError(ValueError):
    """An address entry (IP, CIDR or range) or an IP string is malformed.

    The message names the offending entry in double quotes and the reason, e.g.
    ``range "10.0.0.9-10.0.0.1": first address is greater than last``.
    """


def _parse_ip(text: str) -> IPAddress | None:
    """Parse one bare IP address (surrounding whitespace allowed); None if it is not one.

    IPv6 zone/scope IDs (``fe80::1%eth0``) are rejected: they are not underlay addresses.
    So are IPv4-mapped IPv6 addresses (``::ffff:10.0.0.1``): the CNI plugin refuses them
    (Go's ``netip.Addr.Is4In6``, ``cni/internal/ipam``), and Python prints them
    differently from one version to the next; the IPv4 address is what to write.
    """
    text = text.strip()
    if not text or "%" in text:
        return None
    try:
        parsed = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return None
    return parsed


@functools.lru_cache(maxsize=1 << 16)
def _ip_int(text: str) -> tuple[int, int] | None:
    """``(version, integer)`` of the bare IP address ``text`` (as :func:`_parse_ip`), or None.

    Cached: the same allocation addresses are read on every change of their pool.
    """
    parsed = _parse_ip(text)
    return None if parsed is None else (parsed.version, int(parsed))


def _to_ip(version: int, value: int) -> IPAddress:
    """Integer ``value`` of IP ``version`` (4 or 6) back to an address object."""
    return ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)


@functools.lru_cache(maxsize=1 << 16)
def _ip_text(version: int, value: int) -> str:
    """Canonical (compressed) text of integer address ``value`` of IP ``version``."""
    return _to_ip(version, value).compressed


def canonical(ip: str) -> str:
    """Return the canonical text of one IP address (``ipaddress`` compressed form).

    ``"fd00:0::1"`` → ``"fd00::1"``, ``" 10.0.0.5 "`` → ``"10.0.0.5"``.
    Raises AddressError if ``ip`` is not a single IPv4/IPv6 address (CIDRs,
    ranges, zone IDs and non-strings are rejected). Memoized for strings
    (allocations are re-read on every pool change).
    """
    if isinstance(ip, str):
        return _canonical_str(ip)
    raise AddressError(f"invalid IP address {_quote(ip)}: not an IPv4 or IPv6 address")


@functools.lru_cache(maxsize=1 << 16)
def _canonical_str(ip: str) -> str:
    parsed = _parse_ip(ip)
    if parsed is None:
        raise AddressError(f"invalid IP address {_quote(ip)}: not an IPv4 or IPv6 address")
    return parsed.compressed


def _quote(value: object) -> str:
    """Render an entry for an error message: strings in double quotes, others as repr."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _parse_cidr(entry: str, *, whole_block: bool) -> Interval:
    """Parse ``addr/prefix``; drop IPv4 network/broadcast for prefix <= 30 unless ``whole_block``."""
    addr_text, _, prefix_text = entry.partition("/")
    addr = _parse_ip(addr_text)
    if addr is None:
        raise AddressError(f'CIDR "{entry}": "{addr_text.strip()}" is not an IP address')
    prefix_text = prefix_text.strip()
    max_prefix = _MAX_PREFIX[addr.version]
    if not _PREFIX_RE.fullmatch(prefix_text) or int(prefix_text) > max_prefix:
        raise AddressError(
            f'CIDR "{entry}": prefix length "{prefix_text}" must be a number from 0 to {max_prefix}'
        )
    network = ipaddress.ip_network(f"{addr}/{prefix_text}", strict=False)
    if network.network_address != addr:
        raise AddressError(f'CIDR "{entry}" has host bits set (did you mean {network.compressed}?)')
    first = int(network.network_address)
    last = int(network.broadcast_address)
    if addr.version == 4 and network.prefixlen <= 30 and not whole_block:
        first, last = first + 1, last - 1
    return (addr.version, first, last)


def _parse_range(entry: str) -> Interval:
    """Parse an inclusive ``first-last`` range of two IPs of the same version."""
    parts = entry.split("-")
    if len(parts) != 2:
        raise AddressError(f'range "{entry}": expected exactly one "-" between two addresses')
    low, high = _parse_ip(parts[0]), _parse_ip(parts[1])
    if low is None:
        raise AddressError(f'range "{entry}": "{parts[0].strip()}" is not an IP address')
    if high is None:
        raise AddressError(f'range "{entry}": "{parts[1].strip()}" is not an IP address')
    if low.version != high.version:
        raise AddressError(f'range "{entry}" mixes IPv4 and IPv6')
    if int(low) > int(high):
        raise AddressError(f'range "{entry}": first address is greater than last')
    return (low.version, int(low), int(high))


def _parse(entry: str, *, whole_block: bool) -> list[Interval]:
    """Shared parser for :func:`parse_entry` (pool semantics) and exclude entries (whole blocks)."""
    if not isinstance(entry, str):
        raise AddressError(f"invalid address entry {entry!r}: not a string")
    text = entry.strip()
    if not text:
        raise AddressError(f"invalid address entry {_quote(entry)}: empty")
    has_slash, has_dash = "/" in text, "-" in text
    if has_slash and not has_dash:
        interval = _parse_cidr(text, whole_block=whole_block)
    elif has_dash and not has_slash:
        interval = _parse_range(text)
    else:
        ip = None if has_slash or has_dash else _parse_ip(text)
        if ip is None:
            raise AddressError(f'invalid address entry "{text}": not an IP, CIDR or first-last range')
        interval = (ip.version, int(ip), int(ip))
    return [interval]


def parse_entry(entry: str) -> list[tuple[int, int, int]]:
    """Parse one ``spec.addresses`` entry into inclusive intervals ``(version, first_int, last_int)``.

    ``entry`` is an IP, a CIDR or a ``first-last`` range (surrounding whitespace
    is ignored). IPv4 CIDRs with prefix <= 30 leave out network and broadcast:
    ``"10.0.0.0/30"`` → ``[(4, 167772161, 167772162)]`` (2 addresses),
    ``"10.0.0.5/32"`` → one interval of 1 address. Currently always returns
    exactly one interval; callers should not rely on that.
    Raises AddressError for empty/non-string entries, unparsable addresses, bad
    prefix lengths, CIDRs with host bits set, reversed ranges and ranges that
    mix IPv4 and IPv6.
    """
    return _parse(entry, whole_block=False)


def _normalize(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sort by (version, first) and coalesce overlapping or adjacent intervals."""
    merged: list[Interval] = []
    for version, first, last in sorted(intervals):
        if merged:
            m_version, m_first, m_last = merged[-1]
            if m_version == version and first <= m_last + 1:
                if last > m_last:
                    merged[-1] = (version, m_first, last)
                continue
        merged.append((version, first, last))
    return tuple(merged)


def _key(value: Interval) -> tuple[int, int]:
    return (value[0], value[1])


@dataclass(frozen=True)
class AddressSet:
    """An immutable set of IPv4/IPv6 addresses stored as merged integer intervals.

    ``intervals`` holds inclusive ``(version, first, last)`` tuples (version 4
    or 6, addresses as ints), sorted by ``(version, first)``, disjoint and with
    adjacent intervals coalesced, so two equal sets compare ``==`` and hash the
    same. Constructing directly from unsorted/overlapping intervals is allowed:
    they are normalized. Raises ValueError for an unknown version or an
    interval outside its version's address space or with first > last.

    There is deliberately no ``__len__`` (sizes can exceed ``sys.maxsize``):
    use :attr:`size` and ``bool(s)``.
    """

    intervals: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        for version, first, last in self.intervals:
            if version not in _MAX_INT:
                raise ValueError(f"interval {(version, first, last)}: IP version must be 4 or 6")
            if not 0 <= first <= last <= _MAX_INT[version]:
                raise ValueError(f"interval {(version, first, last)}: bounds out of order or range")
        object.__setattr__(self, "intervals", _normalize(self.intervals))

    @classmethod
    def empty(cls) -> AddressSet:
        """Return the set with no addresses."""
        return cls(())

    @classmethod
    def from_entries(cls, addresses: Iterable[str], exclude: Iterable[str] = ()) -> AddressSet:
        """Build a pool from ``spec.addresses`` entries minus ``spec.exclude`` entries.

        Both are iterables of IP / CIDR / ``first-last`` range strings. Address
        CIDRs follow :func:`parse_entry` (IPv4 prefix <= 30 drops network and
        broadcast); exclude CIDRs remove their whole block. Overlapping and
        duplicate entries are fine. Raises AddressError on the first bad entry
        (addresses first, then exclude), or if either argument is a bare string
        instead of a list of entries.
        """
        if isinstance(addresses, str) or isinstance(exclude, str):
            raise AddressError("addresses and exclude must be lists of entries, not a single string")
        included = cls(tuple(iv for entry in addresses for iv in _parse(entry, whole_block=False)))
        excluded = cls(tuple(iv for entry in exclude for iv in _parse(entry, whole_block=True)))
        return included.difference(excluded)

    @staticmethod
    @functools.lru_cache(maxsize=1 << 14)
    def of_spec(addresses: tuple[str, ...], exclude: tuple[str, ...]) -> AddressSet:
        """:meth:`from_entries`, memoized on the entries (tuples): a NodeIPPool's spec is
        validated (its size) and parsed (its view) from the same entries, and every status
        write comes back through the watch with the same spec. 16384 specs, one per pool of
        the largest clusters. Raises AddressError (not memoized)."""
        return AddressSet.from_entries(addresses, exclude)

    @property
    def size(self) -> int:
        """Exact number of addresses (an int; may be up to 2**32 + 2**128)."""
        return sum(last - first + 1 for _, first, last in self.intervals)

    def __bool__(self) -> bool:
        """True if the set holds at least one address."""
        return bool(self.intervals)

    def of_version(self, version: int) -> AddressSet:
        """The addresses of IP version ``version`` (4 or 6) alone."""
        return AddressSet(tuple(iv for iv in self.intervals if iv[0] == version))

    @functools.cached_property
    def versions(self) -> frozenset[int]:
        """The IP versions (4, 6) the set holds addresses of."""
        return frozenset(iv[0] for iv in self.intervals)

    def _contains_int(self, version: int, value: int) -> bool:
        index = bisect_right(self.intervals, (version, value), key=_key) - 1
        if index < 0:
            return False
        i_version, _, last = self.intervals[index]
        return i_version == version and value <= last

    def __contains__(self, ip: object) -> bool:
        """True if ``ip`` (a str, IPv4Address or IPv6Address) is in the set.

        Anything that is not a single valid IP (garbage strings, CIDRs, other
        types, zone IDs) is simply not contained: no exception is raised.
        """
        if isinstance(ip, str):
            key = _ip_int(ip)
            return key is not None and self._contains_int(*key)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address):
            parsed = ip if getattr(ip, "scope_id", None) is None else None
        else:
            parsed = None
        return parsed is not None and self._contains_int(parsed.version, int(parsed))

    def union(self, other: AddressSet) -> AddressSet:
        """Addresses in ``self`` or ``other``."""
        return AddressSet(self.intervals + other.intervals)

    def intersection(self, other: AddressSet) -> AddressSet:
        """Addresses in both ``self`` and ``other`` (linear merge of both interval lists)."""
        result: list[Interval] = []
        a, b = self.intervals, other.intervals
        i = j = 0
        while i < len(a) and j < len(b):
            a_version, a_first, a_last = a[i]
            b_version, b_first, b_last = b[j]
            if a_version == b_version:
                first, last = max(a_first, b_first), min(a_last, b_last)
                if first <= last:
                    result.append((a_version, first, last))
                if a_last < b_last:
                    i += 1
                else:
                    j += 1
            elif a_version < b_version:
                i += 1
            else:
                j += 1
        return AddressSet(tuple(result))

    def difference(self, other: AddressSet) -> AddressSet:
        """Addresses in ``self`` but not in ``other`` (linear merge of both interval lists)."""
        result: list[Interval] = []
        b = other.intervals
        j = 0
        for version, first, last in self.intervals:
            # Skip subtrahend intervals entirely before this one (they cannot affect later ones either).
            while j < len(b) and (b[j][0], b[j][2]) < (version, first):
                j += 1
            start = first
            k = j
            while k < len(b) and b[k][0] == version and b[k][1] <= last:
                _, b_first, b_last = b[k]
                if b_first > start:
                    result.append((version, start, b_first - 1))
                start = max(start, b_last + 1)
                if b_last > last:
                    break  # may still overlap the next interval of self: do not advance j past it
                k += 1
            if start <= last:
                result.append((version, start, last))
        return AddressSet(tuple(result))

    def _taken_ints(self, taken: Collection[str]) -> set[tuple[int, int]]:
        """Distinct valid ``taken`` strings that are inside this set, as ``(version, int)``."""
        result: set[tuple[int, int]] = set()
        for text in taken:
            key = _ip_int(text) if isinstance(text, str) else None
            if key is not None and self._contains_int(*key):
                result.add(key)
        return result

    def first_free(self, taken: Collection[str], blocked: AddressSet | None = None) -> str | None:
        """Lowest address of the set not in ``taken`` and not in ``blocked``, or None if there is none.

        Order is all IPv4 before all IPv6, each numerically ascending. ``taken``
        holds IP strings in any valid spelling (they are canonicalized; invalid
        ones are ignored). Returns canonical text. Runs in O(len(taken) +
        number of intervals), independent of the set's size.
        """
        free = self.difference(blocked) if blocked else self
        used = free._taken_ints(taken)
        for version, first, last in free.intervals:
            candidate = first
            # Each step consumes one distinct taken address, so all loops together are O(len(taken)).
            while candidate <= last and (version, candidate) in used:
                candidate += 1
            if candidate <= last:
                return _ip_text(version, candidate)
        return None

    def count_free(self, taken: Collection[str], blocked: AddressSet | None = None) -> int:
        """Number of addresses neither ``taken`` nor ``blocked``.

        Equals ``size`` minus the addresses of ``blocked`` inside the set minus
        the distinct valid ``taken`` addresses inside the set and not blocked
        (taken strings are canonicalized; invalid or outside ones are ignored).
        """
        free = self.difference(blocked) if blocked else self
        return free.size - len(free._taken_ints(taken))

    def iter_addresses(self, limit: int) -> Iterator[str]:
        """Yield the first ``limit`` addresses in ascending order (IPv4 first) as canonical text.

        Meant for display and tests. Raises ValueError if ``limit`` is negative.
        """
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        return self._iter(limit)

    def _iter(self, limit: int) -> Iterator[str]:
        remaining = limit
        for version, first, last in self.intervals:
            value = first
            while value <= last:
                if remaining <= 0:
                    return
                yield _ip_text(version, value)
                remaining -= 1
                value += 1

    def __str__(self) -> str:
        """Compact form: intervals as ``first-last`` or a single IP, joined by ``", "``; ``(empty)`` if empty.

        Example: ``"10.0.0.10-10.0.0.19, 10.0.1.1"``.
        """
        if not self.intervals:
            return "(empty)"
        parts = []
        for version, first, last in self.intervals:
            text = _ip_text(version, first)
            parts.append(text if first == last else f"{text}-{_ip_text(version, last)}")
        return ", ".join(parts)


IPNetwork: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network


class RouteSpec(Protocol):
    """What :func:`parse_subnets` reads of a route (``models.SubnetRoute``)."""

    @property
    def dst(self) -> str: ...
    @property
    def gw(self) -> str | None: ...


class SubnetSpec(Protocol):
    """What :func:`parse_subnets` reads of a subnet (``models.Subnet``)."""

    @property
    def cidr(self) -> str: ...
    @property
    def gateway(self) -> str | None: ...
    @property
    def routes(self) -> Sequence[RouteSpec]: ...


@dataclass(frozen=True)
class SubnetInfo:
    """One ``spec.subnets`` entry, validated: ``network`` (the CIDR, host bits masked),
    ``gateway`` (canonical text, or None) and ``routes`` as ``(dst CIDR, gw or None)`` with
    ``gw`` defaulted to the gateway. Built by :func:`parse_subnets`."""

    network: IPNetwork
    gateway: str | None
    routes: tuple[tuple[str, str | None], ...]

    def prefixed(self, ip: str) -> str:
        """``ip/prefixlen`` of this subnet (``10.0.1.12/24``)."""
        return f"{canonical(ip)}/{self.network.prefixlen}"


def _network(text: str, where: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError as e:
        raise AddressError(f"{where}: {text!r} is not a CIDR") from e


def _address(text: str, where: str) -> IPAddress:
    ip = _parse_ip(text.strip())
    if ip is None:
        raise AddressError(f"{where}: {text!r} is not an IP address")
    return ip


def parse_subnets(subnets: Iterable[SubnetSpec], addresses: Iterable[str]) -> tuple[SubnetInfo, ...]:
    """Validate ``spec.subnets`` against the pool's ``spec.addresses`` entries.

    Each gateway must be an address inside its cidr; each route a CIDR and an IP
    of the same family; each address entry (IP, CIDR or range) must lie wholly
    inside one subnet. Raises AddressError naming the offending field (these are
    also refused at ``kubectl apply`` by the CRD's CEL rules where CEL can say
    so: the address-in-subnet rule cannot, so it surfaces as Ready=False).
    """
    out: list[SubnetInfo] = []
    for i, s in enumerate(subnets):
        where = f"spec.subnets[{i}]"
        network = _network(s.cidr, f"{where}.cidr")
        gateway: str | None = None
        raw_gw = s.gateway
        if raw_gw is not None:
            gw = _address(str(raw_gw), f"{where}.gateway")
            if gw.version != network.version or gw not in network:
                raise AddressError(f"{where}.gateway: {raw_gw} is not inside {network}")
            gateway = str(gw)
        routes: list[tuple[str, str | None]] = []
        for j, r in enumerate(s.routes):
            dst = _network(r.dst, f"{where}.routes[{j}].dst")
            rgw = str(_address(r.gw, f"{where}.routes[{j}].gw")) if r.gw is not None else gateway
            if rgw is not None and ipaddress.ip_address(rgw).version != dst.version:
                raise AddressError(
                    f"{where}.routes[{j}]: gw {rgw} and dst {dst} are of different IP families"
                )
            routes.append((str(dst), rgw))
        out.append(SubnetInfo(network, gateway, tuple(routes)))
    if out:
        for entry in addresses:
            for version, first, last in parse_entry(entry):
                if subnet_of(out, version, first, last) is None:
                    raise AddressError(f"spec.addresses: {entry} is not inside any of spec.subnets")
    return tuple(out)


def subnet_of(
    subnets: Iterable[SubnetInfo], version: int, first: int, last: int | None = None
) -> SubnetInfo | None:
    """The first subnet holding the whole interval ``first..last`` (one address when
    ``last`` is None) of IP ``version``, or None."""
    last = first if last is None else last
    for s in subnets:
        net = s.network
        if (
            net.version == version
            and int(net.network_address) <= first
            and last <= int(net.broadcast_address)
        ):
            return s
    return None


def subnet_for(subnets: Iterable[SubnetInfo], ip: str) -> SubnetInfo | None:
    """The subnet that holds address ``ip`` (None: none, or ``ip`` is not an address)."""
    parsed = _parse_ip(ip.strip())
    return None if parsed is None else subnet_of(subnets, parsed.version, int(parsed))
