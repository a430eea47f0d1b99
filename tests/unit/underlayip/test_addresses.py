"""Unit tests for ipscheduler.underlayip.addresses (pure interval math, no server)."""

from __future__ import annotations

import ipaddress
import itertools
import random
import re

import pytest

from ipscheduler.underlayip.addresses import (
    AddressError,
    AddressSet,
    SubnetInfo,
    canonical,
    parse_entry,
    parse_subnets,
    subnet_for,
)
from ipscheduler.underlayip.models import Subnet


def ip4(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def ip6(text: str) -> int:
    return int(ipaddress.IPv6Address(text))


def first_n(s: AddressSet, n: int) -> list[str]:
    return list(s.iter_addresses(n))


# --------------------------------------------------------------------------- parse_entry

PARSE_CASES: list[tuple[str, list[tuple[int, int, int]]]] = [
    ("10.0.0.5", [(4, ip4("10.0.0.5"), ip4("10.0.0.5"))]),
    ("  10.0.0.5\t", [(4, ip4("10.0.0.5"), ip4("10.0.0.5"))]),
    ("fd00::5", [(6, ip6("fd00::5"), ip6("fd00::5"))]),
    ("FD00:0:0::5", [(6, ip6("fd00::5"), ip6("fd00::5"))]),
    ("10.0.1.0/24", [(4, ip4("10.0.1.1"), ip4("10.0.1.254"))]),
    ("10.0.1.0/30", [(4, ip4("10.0.1.1"), ip4("10.0.1.2"))]),
    ("10.0.1.0/31", [(4, ip4("10.0.1.0"), ip4("10.0.1.1"))]),
    ("10.0.1.7/32", [(4, ip4("10.0.1.7"), ip4("10.0.1.7"))]),
    ("0.0.0.0/0", [(4, 1, 2**32 - 2)]),
    ("fd00::/120", [(6, ip6("fd00::"), ip6("fd00::ff"))]),
    ("fd00::/64", [(6, ip6("fd00::"), ip6("fd00::ffff:ffff:ffff:ffff"))]),
    ("fd00::7/128", [(6, ip6("fd00::7"), ip6("fd00::7"))]),
    ("10.0.0.10-10.0.0.19", [(4, ip4("10.0.0.10"), ip4("10.0.0.19"))]),
    ("10.0.0.10 - 10.0.0.19", [(4, ip4("10.0.0.10"), ip4("10.0.0.19"))]),
    ("10.0.0.10-10.0.0.10", [(4, ip4("10.0.0.10"), ip4("10.0.0.10"))]),
    ("fd00::1-fd00::ff", [(6, ip6("fd00::1"), ip6("fd00::ff"))]),
]


@pytest.mark.parametrize(
    ("entry", "expected"),
    PARSE_CASES,
    ids=[
        "ipv4-single",
        "ipv4-single-whitespace",
        "ipv6-single",
        "ipv6-single-noncanonical",
        "ipv4-cidr-24-drops-net-bcast",
        "ipv4-cidr-30-two-addresses",
        "ipv4-cidr-31-keeps-both",
        "ipv4-cidr-32-one-address",
        "ipv4-cidr-0",
        "ipv6-cidr-120-keeps-all",
        "ipv6-cidr-64",
        "ipv6-cidr-128",
        "ipv4-range",
        "ipv4-range-spaces-around-dash",
        "ipv4-range-single",
        "ipv6-range",
    ],
)
def test_parse_entry(entry: str, expected: list[tuple[int, int, int]]) -> None:
    assert parse_entry(entry) == expected


@pytest.mark.parametrize(
    ("entry", "size"),
    [("10.0.0.0/24", 254), ("10.0.0.0/30", 2), ("10.0.0.0/31", 2), ("10.0.0.0/32", 1), ("fd00::/120", 256)],
    ids=["v4-24", "v4-30", "v4-31", "v4-32", "v6-120"],
)
def test_cidr_sizes(entry: str, size: int) -> None:
    assert AddressSet.from_entries([entry]).size == size


INVALID_CASES: list[tuple[object, str]] = [
    ("", 'invalid address entry "": empty'),
    ("   ", 'invalid address entry "   ": empty'),
    (5, "invalid address entry 5: not a string"),
    ("10.0.0.300", 'invalid address entry "10.0.0.300": not an IP, CIDR or first-last range'),
    ("hello", 'invalid address entry "hello": not an IP, CIDR or first-last range'),
    ("010.0.0.1", 'invalid address entry "010.0.0.1": not an IP, CIDR or first-last range'),
    ("fd00::1::2", 'invalid address entry "fd00::1::2": not an IP, CIDR or first-last range'),
    ("fe80::1%eth0", 'invalid address entry "fe80::1%eth0": not an IP, CIDR or first-last range'),
    ("::ffff:10.0.0.1", 'invalid address entry "::ffff:10.0.0.1": not an IP, CIDR or first-last range'),
    ("::ffff:10.0.0.0/120", 'CIDR "::ffff:10.0.0.0/120": "::ffff:10.0.0.0" is not an IP address'),
    ("10.0.0.0/24-10.0.1.0", 'invalid address entry "10.0.0.0/24-10.0.1.0": not an IP, CIDR'),
    ("10.0.0.5/24", 'CIDR "10.0.0.5/24" has host bits set (did you mean 10.0.0.0/24?)'),
    ("fd00::1/64", 'CIDR "fd00::1/64" has host bits set (did you mean fd00::/64?)'),
    ("10.0.0.0/33", 'CIDR "10.0.0.0/33": prefix length "33" must be a number from 0 to 32'),
    ("fd00::/129", 'CIDR "fd00::/129": prefix length "129" must be a number from 0 to 128'),
    ("10.0.0.0/", 'CIDR "10.0.0.0/": prefix length "" must be a number from 0 to 32'),
    ("10.0.0.0/255.255.255.0", 'CIDR "10.0.0.0/255.255.255.0": prefix length "255.255.255.0" must'),
    ("10.0.0.0/-1x", 'invalid address entry "10.0.0.0/-1x": not an IP, CIDR'),
    ("10.0.0/24", 'CIDR "10.0.0/24": "10.0.0" is not an IP address'),
    ("10.0.0.9-10.0.0.1", 'range "10.0.0.9-10.0.0.1": first address is greater than last'),
    ("10.0.0.2-10.0.0.1", 'range "10.0.0.2-10.0.0.1": first address is greater than last'),
    ("fd00::9-fd00::1", 'range "fd00::9-fd00::1": first address is greater than last'),
    ("10.0.0.1-fd00::1", 'range "10.0.0.1-fd00::1" mixes IPv4 and IPv6'),
    ("10.0.0.1-10.0.0.x", 'range "10.0.0.1-10.0.0.x": "10.0.0.x" is not an IP address'),
    ("-10.0.0.1", 'range "-10.0.0.1": "" is not an IP address'),
    ("10.0.0.1-", 'range "10.0.0.1-": "" is not an IP address'),
    ("10.0.0.1-10.0.0.2-10.0.0.3", 'range "10.0.0.1-10.0.0.2-10.0.0.3": expected exactly one "-"'),
]


@pytest.mark.parametrize(
    ("entry", "message"),
    INVALID_CASES,
    ids=[
        "empty",
        "whitespace-only",
        "not-a-string",
        "octet-out-of-range",
        "garbage",
        "leading-zero-octet",
        "ipv6-double-double-colon",
        "ipv6-zone-id",
        "ipv4-mapped-ipv6",
        "ipv4-mapped-ipv6-cidr",
        "cidr-and-range",
        "ipv4-cidr-host-bits",
        "ipv6-cidr-host-bits",
        "ipv4-prefix-too-long",
        "ipv6-prefix-too-long",
        "cidr-missing-prefix",
        "cidr-netmask-form",
        "cidr-negative-prefix",
        "cidr-bad-address",
        "ipv4-range-reversed",
        "ipv4-range-reversed-by-one",
        "ipv6-range-reversed",
        "range-mixed-versions",
        "range-bad-last",
        "range-missing-first",
        "range-missing-last",
        "range-two-dashes",
    ],
)
def test_invalid_entries(entry: str, message: str) -> None:
    with pytest.raises(AddressError, match=re.escape(message)):
        parse_entry(entry)
    # from_entries reports the same error whether the entry is in addresses or in exclude.
    with pytest.raises(AddressError, match=re.escape(message)):
        AddressSet.from_entries(["10.0.0.1", entry])
    with pytest.raises(AddressError, match=re.escape(message)):
        AddressSet.from_entries(["10.0.0.1"], exclude=[entry])


def test_address_error_is_value_error() -> None:
    with pytest.raises(ValueError, match="not an IP"):
        parse_entry("nope")


def test_from_entries_reports_first_bad_entry() -> None:
    with pytest.raises(AddressError, match='"bad1"'):
        AddressSet.from_entries(["10.0.0.1", "bad1", "bad2"])


@pytest.mark.parametrize("bare", ["10.0.0.1", ""], ids=["ip-string", "empty-string"])
def test_from_entries_rejects_bare_string(bare: str) -> None:
    with pytest.raises(AddressError, match="not a single string"):
        AddressSet.from_entries(bare)
    with pytest.raises(AddressError, match="not a single string"):
        AddressSet.from_entries(["10.0.0.1"], exclude=bare)


# --------------------------------------------------------------------------- building sets

BUILD_CASES: list[tuple[list[str], list[str], str, int]] = [
    (["10.0.0.5"], [], "10.0.0.5", 1),
    (["10.0.0.1-10.0.0.10", "10.0.0.5-10.0.0.20"], [], "10.0.0.1-10.0.0.20", 20),
    (["10.0.0.1-10.0.0.10", "10.0.0.11-10.0.0.20"], [], "10.0.0.1-10.0.0.20", 20),
    (["10.0.0.11-10.0.0.20", "10.0.0.1-10.0.0.10"], [], "10.0.0.1-10.0.0.20", 20),
    (["10.0.0.1-10.0.0.10", "10.0.0.12-10.0.0.20"], [], "10.0.0.1-10.0.0.10, 10.0.0.12-10.0.0.20", 19),
    (["10.0.0.1-10.0.0.20", "10.0.0.5", "10.0.0.7-10.0.0.8"], [], "10.0.0.1-10.0.0.20", 20),
    (["10.0.0.5", "10.0.0.5", "10.0.0.5"], [], "10.0.0.5", 1),
    (["10.0.0.0/30", "10.0.0.4/30"], [], "10.0.0.1-10.0.0.2, 10.0.0.5-10.0.0.6", 4),
    (["10.0.0.0/31", "10.0.0.2/31"], [], "10.0.0.0-10.0.0.3", 4),
    (["fd00::1", "10.0.0.1"], [], "10.0.0.1, fd00::1", 2),
    (["fd00::/120", "fd00::100-fd00::1ff"], [], "fd00::-fd00::1ff", 512),
    (["10.0.0.10-10.0.0.19", "10.0.1.1"], [], "10.0.0.10-10.0.0.19, 10.0.1.1", 11),
    (["10.0.0.0/24"], ["10.0.0.10"], "10.0.0.1-10.0.0.9, 10.0.0.11-10.0.0.254", 253),
    (["10.0.0.0/24"], ["10.0.0.1-10.0.0.99"], "10.0.0.100-10.0.0.254", 155),
    (["10.0.0.0/24"], ["10.0.0.16/28"], "10.0.0.1-10.0.0.15, 10.0.0.32-10.0.0.254", 238),
    (["10.0.0.0-10.0.0.255"], ["10.0.0.0/24"], "(empty)", 0),
    (["10.0.0.0-10.0.0.7"], ["10.0.0.0/30"], "10.0.0.4-10.0.0.7", 4),
    (["10.0.0.0/24"], ["10.0.0.0/24"], "(empty)", 0),
    (["10.0.0.0/24", "fd00::/120"], ["0.0.0.0/0", "::/0"], "(empty)", 0),
    (["10.0.0.1-10.0.0.3"], ["10.0.0.1", "10.0.0.2", "10.0.0.3"], "(empty)", 0),
    (
        ["10.0.0.1-10.0.0.5", "fd00::1-fd00::5"],
        ["fd00::3"],
        "10.0.0.1-10.0.0.5, fd00::1-fd00::2, fd00::4-fd00::5",
        9,
    ),
    (["10.0.0.1-10.0.0.5"], ["fd00::/64", "192.168.0.0/16"], "10.0.0.1-10.0.0.5", 5),
    (
        ["10.0.0.1-10.0.0.5", "10.0.0.8-10.0.0.12"],
        ["10.0.0.4-10.0.0.9"],
        "10.0.0.1-10.0.0.3, 10.0.0.10-10.0.0.12",
        6,
    ),
    ([], [], "(empty)", 0),
    ([], ["10.0.0.1"], "(empty)", 0),
]


@pytest.mark.parametrize(
    ("addresses", "exclude", "text", "size"),
    BUILD_CASES,
    ids=[
        "single",
        "overlapping-ranges-merge",
        "adjacent-ranges-merge",
        "adjacent-ranges-unsorted-merge",
        "gap-keeps-two-intervals",
        "contained-entries-absorbed",
        "duplicates",
        "adjacent-30s-keep-holes",
        "adjacent-31s-merge",
        "ipv4-sorted-before-ipv6",
        "ipv6-cidr-and-range-merge",
        "docstring-example",
        "exclude-single",
        "exclude-range",
        "exclude-cidr",
        "exclude-cidr-whole-block",
        "exclude-ipv4-30-includes-network",
        "exclude-everything-same-cidr",
        "exclude-everything-both-versions",
        "exclude-every-single-address",
        "exclude-ipv6-only",
        "exclude-disjoint",
        "exclude-spanning-two-intervals",
        "no-entries",
        "exclude-from-nothing",
    ],
)
def test_from_entries(addresses: list[str], exclude: list[str], text: str, size: int) -> None:
    s = AddressSet.from_entries(addresses, exclude)
    assert str(s) == text
    assert s.size == size
    assert bool(s) is (size > 0)


def test_from_entries_accepts_generators() -> None:
    s = AddressSet.from_entries((f"10.0.0.{i}" for i in (3, 1, 2)), exclude=iter(["10.0.0.2"]))
    assert s.intervals == ((4, ip4("10.0.0.1"), ip4("10.0.0.1")), (4, ip4("10.0.0.3"), ip4("10.0.0.3")))


def test_intervals_are_sorted_merged_tuples() -> None:
    s = AddressSet.from_entries(["fd00::5", "10.0.0.9", "10.0.0.1-10.0.0.8", "fd00::6"])
    assert s.intervals == ((4, ip4("10.0.0.1"), ip4("10.0.0.9")), (6, ip6("fd00::5"), ip6("fd00::6")))


def test_empty() -> None:
    e = AddressSet.empty()
    assert e.intervals == ()
    assert e.size == 0
    assert not e
    assert str(e) == "(empty)"
    assert e.first_free([]) is None
    assert e.count_free([]) == 0
    assert e == AddressSet.from_entries([])


def test_equality_and_hash_follow_content() -> None:
    a = AddressSet.from_entries(["10.0.0.1-10.0.0.4"])
    b = AddressSet.from_entries(["10.0.0.3-10.0.0.4", "10.0.0.1", "10.0.0.2"])
    assert a == b
    assert hash(a) == hash(b)
    assert a != AddressSet.from_entries(["10.0.0.1-10.0.0.3"])


def test_direct_construction_normalizes() -> None:
    s = AddressSet(((4, 5, 9), (4, 1, 4), (6, 0, 0), (4, 20, 30)))
    assert s.intervals == ((4, 1, 9), (4, 20, 30), (6, 0, 0))


@pytest.mark.parametrize(
    "interval",
    [(5, 1, 2), (4, 3, 2), (4, -1, 2), (4, 0, 2**32), (6, 0, 2**128)],
    ids=["bad-version", "reversed", "negative", "ipv4-overflow", "ipv6-overflow"],
)
def test_direct_construction_validates(interval: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="interval"):
        AddressSet((interval,))


def test_frozen() -> None:
    s = AddressSet.empty()
    with pytest.raises(AttributeError):
        s.intervals = ((4, 1, 1),)  # type: ignore[misc]


def test_ipv6_64_size_is_exact() -> None:
    s = AddressSet.from_entries(["fd00::/64"])
    assert s.size == 2**64
    assert AddressSet.from_entries(["::/0", "0.0.0.0/0"]).size == 2**128 + 2**32 - 2


# --------------------------------------------------------------------------- canonical / containment


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        ("10.0.0.5", "10.0.0.5"),
        (" 10.0.0.5 ", "10.0.0.5"),
        ("fd00:0::1", "fd00::1"),
        ("FD00:0000:0000:0000:0000:0000:0000:0001", "fd00::1"),
        ("::", "::"),
    ],
    ids=["ipv4", "ipv4-whitespace", "ipv6-zero-group", "ipv6-full-uppercase", "ipv6-zero"],
)
def test_canonical(ip: str, expected: str) -> None:
    assert canonical(ip) == expected


@pytest.mark.parametrize(
    "ip",
    ["", "10.0.0.300", "10.0.0.0/24", "10.0.0.1-10.0.0.2", "fe80::1%eth0", "::ffff:10.0.0.1", "abc", 5],
    ids=["empty", "bad-octet", "cidr", "range", "zone-id", "ipv4-mapped", "garbage", "int"],
)
def test_canonical_rejects(ip: str) -> None:
    with pytest.raises(AddressError, match=r"invalid IP address .*not an IPv4 or IPv6 address"):
        canonical(ip)


POOL = AddressSet.from_entries(["10.0.0.0/24", "fd00::1-fd00::ff"], exclude=["10.0.0.50"])


@pytest.mark.parametrize(
    ("ip", "inside"),
    [
        ("10.0.0.1", True),
        ("10.0.0.254", True),
        ("10.0.0.0", False),
        ("10.0.0.255", False),
        ("10.0.0.50", False),
        ("10.0.0.49", True),
        (" 10.0.0.51 ", True),
        ("10.0.1.1", False),
        ("fd00::1", True),
        ("fd00:0::1", True),
        ("FD00::FF", True),
        ("fd00::", False),
        ("fd00::100", False),
        ("::a00:1", False),
        (ipaddress.IPv4Address("10.0.0.7"), True),
        (ipaddress.IPv6Address("fd00::7"), True),
        (ipaddress.IPv4Address("10.0.0.0"), False),
        ("10.0.0.300", False),
        ("", False),
        ("not-an-ip", False),
        ("10.0.0.0/24", False),
        ("10.0.0.1-10.0.0.2", False),
        ("fd00::1%eth0", False),
        (ipaddress.IPv6Address("fd00::1%eth0"), False),
        (167772161, False),
        (None, False),
    ],
    ids=[
        "v4-first",
        "v4-last",
        "v4-network-excluded",
        "v4-broadcast-excluded",
        "v4-excluded-entry",
        "v4-below-exclusion",
        "v4-whitespace",
        "v4-outside",
        "v6-first",
        "v6-noncanonical",
        "v6-uppercase",
        "v6-below",
        "v6-above",
        "v6-same-int-as-v4-member",
        "v4-object",
        "v6-object",
        "v4-object-outside",
        "invalid-octet",
        "empty-string",
        "garbage",
        "cidr-string",
        "range-string",
        "zone-id-string",
        "zone-id-object",
        "int",
        "none",
    ],
)
def test_contains(ip: object, inside: bool) -> None:
    assert (ip in POOL) is inside


# --------------------------------------------------------------------------- first_free / count_free

FREE_CASES: list[tuple[list[str], list[str], list[str], str | None, int]] = [
    # addresses, taken, blocked entries, first_free, count_free
    (["10.0.0.10-10.0.0.19"], [], [], "10.0.0.10", 10),
    (["10.0.0.10-10.0.0.19"], ["10.0.0.10", "10.0.0.11"], [], "10.0.0.12", 8),
    (["10.0.0.10-10.0.0.19"], ["10.0.0.11"], [], "10.0.0.10", 9),
    (["10.0.0.10-10.0.0.19"], ["10.0.0.12", "10.0.0.10", "10.0.0.11"], [], "10.0.0.13", 7),
    (["10.0.0.10-10.0.0.19"], [], ["10.0.0.10-10.0.0.14"], "10.0.0.15", 5),
    (["10.0.0.10-10.0.0.19"], ["10.0.0.15"], ["10.0.0.10-10.0.0.14"], "10.0.0.16", 4),
    (["10.0.0.10-10.0.0.19"], ["10.0.0.12"], ["10.0.0.10-10.0.0.14"], "10.0.0.15", 5),
    (["10.0.0.10-10.0.0.12"], ["10.0.0.10", "10.0.0.11", "10.0.0.12"], [], None, 0),
    (["10.0.0.10-10.0.0.12"], ["10.0.0.10"], ["10.0.0.11-10.0.0.12"], None, 0),
    (["10.0.0.10-10.0.0.12"], [], ["10.0.0.0/24"], None, 0),
    (["10.0.0.1-10.0.0.2", "10.0.0.5-10.0.0.6"], ["10.0.0.1", "10.0.0.2"], [], "10.0.0.5", 2),
    (["fd00::1", "10.0.0.1"], [], [], "10.0.0.1", 2),
    (["fd00::1-fd00::3", "10.0.0.1"], ["10.0.0.1"], [], "fd00::1", 3),
    (["fd00::1-fd00::3", "10.0.0.1"], ["fd00:0::1", "10.0.0.1"], [], "fd00::2", 2),
    (["fd00::1-fd00::3"], ["FD00::0:1", "fd00::1", "fd00:0:0::1"], [], "fd00::2", 2),
    (["10.0.0.1-10.0.0.3"], ["10.0.0.1", "10.0.0.1", " 10.0.0.1 "], [], "10.0.0.2", 2),
    (["10.0.0.1-10.0.0.3"], ["garbage", "", "10.0.0.300", "10.0.0.0/24"], [], "10.0.0.1", 3),
    (["10.0.0.1-10.0.0.3"], ["10.0.0.9", "fd00::1", "192.168.0.1"], [], "10.0.0.1", 3),
    (["10.0.0.1-10.0.0.3"], ["::a00:1"], [], "10.0.0.1", 3),
    (["10.0.0.1-10.0.0.3"], [], ["10.0.0.2", "10.0.9.0/24", "fd00::/64"], "10.0.0.1", 2),
    (["10.0.0.0/30"], [], [], "10.0.0.1", 2),
    (["10.0.0.0/31"], [], [], "10.0.0.0", 2),
    ([], ["10.0.0.1"], [], None, 0),
]


@pytest.mark.parametrize(
    ("addresses", "taken", "blocked", "first", "free"),
    FREE_CASES,
    ids=[
        "nothing-taken",
        "lowest-two-taken",
        "hole-below-taken-is-used",
        "taken-unsorted",
        "blocked-prefix",
        "blocked-and-taken",
        "taken-inside-blocked-not-double-counted",
        "full-by-taken",
        "full-by-taken-and-blocked",
        "full-by-blocked",
        "first-interval-full-moves-to-next",
        "ipv4-before-ipv6",
        "ipv4-full-moves-to-ipv6",
        "taken-canonicalized",
        "taken-duplicate-spellings",
        "taken-duplicates-and-whitespace",
        "taken-invalid-ignored",
        "taken-outside-ignored",
        "taken-v6-with-v4-int-ignored",
        "blocked-partly-outside",
        "cidr-30-starts-after-network",
        "cidr-31-starts-at-network",
        "empty-pool",
    ],
)
def test_first_free_and_count_free(
    addresses: list[str], taken: list[str], blocked: list[str], first: str | None, free: int
) -> None:
    pool = AddressSet.from_entries(addresses)
    blocked_set = AddressSet.from_entries(blocked)
    assert pool.first_free(taken, blocked_set) == first
    assert pool.count_free(taken, blocked_set) == free
    if not blocked:
        assert pool.first_free(taken) == first
        assert pool.count_free(taken) == free
        assert pool.first_free(taken, None) == first


def test_first_free_accepts_set_of_taken() -> None:
    pool = AddressSet.from_entries(["10.0.0.1-10.0.0.5"])
    assert pool.first_free({"10.0.0.1", "10.0.0.2"}) == "10.0.0.3"
    assert pool.first_free(frozenset()) == "10.0.0.1"


def test_first_free_and_count_free_on_huge_ipv6_pool() -> None:
    pool = AddressSet.from_entries(["fd00::/64"])
    taken = [str(ipaddress.IPv6Address(ip6("fd00::") + i)) for i in range(10_000)]
    blocked = AddressSet.from_entries(["fd00::2710-fd00::ffff"])
    assert pool.first_free(taken) == "fd00::2710"
    assert pool.first_free(taken, blocked) == "fd00::1:0"
    assert pool.count_free(taken) == 2**64 - 10_000
    assert pool.count_free(taken, blocked) == 2**64 - 2**16


def test_first_free_skips_many_intervals() -> None:
    # 2000 single-address intervals; everything but the last one taken or blocked.
    entries = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(0, 2000, 2)]
    pool = AddressSet.from_entries(entries)
    assert len(pool.intervals) == 1000
    listed = list(pool.iter_addresses(1000))
    taken, blocked = listed[:500], AddressSet.from_entries(listed[500:999])
    assert pool.first_free(taken, blocked) == listed[999]
    assert pool.count_free(taken, blocked) == 1


# --------------------------------------------------------------------------- set algebra


def s(*entries: str) -> AddressSet:
    return AddressSet.from_entries(entries)


ALGEBRA_CASES: list[tuple[AddressSet, AddressSet, str, str, str]] = [
    # a, b, a | b, a & b, a - b
    (
        s("10.0.0.1-10.0.0.10"),
        s("10.0.0.5-10.0.0.20"),
        "10.0.0.1-10.0.0.20",
        "10.0.0.5-10.0.0.10",
        "10.0.0.1-10.0.0.4",
    ),
    (s("10.0.0.1-10.0.0.4"), s("10.0.0.5-10.0.0.8"), "10.0.0.1-10.0.0.8", "(empty)", "10.0.0.1-10.0.0.4"),
    (
        s("10.0.0.1-10.0.0.10"),
        s("10.0.0.3", "10.0.0.6"),
        "10.0.0.1-10.0.0.10",
        "10.0.0.3, 10.0.0.6",
        "10.0.0.1-10.0.0.2, 10.0.0.4-10.0.0.5, 10.0.0.7-10.0.0.10",
    ),
    (s("10.0.0.1", "fd00::1"), s("fd00::1-fd00::2"), "10.0.0.1, fd00::1-fd00::2", "fd00::1", "10.0.0.1"),
    (s("10.0.0.1-10.0.0.3"), AddressSet.empty(), "10.0.0.1-10.0.0.3", "(empty)", "10.0.0.1-10.0.0.3"),
    (AddressSet.empty(), s("10.0.0.1"), "10.0.0.1", "(empty)", "(empty)"),
    (
        s("10.0.0.1-10.0.0.3", "10.0.0.7-10.0.0.9"),
        s("10.0.0.2-10.0.0.8"),
        "10.0.0.1-10.0.0.9",
        "10.0.0.2-10.0.0.3, 10.0.0.7-10.0.0.8",
        "10.0.0.1, 10.0.0.9",
    ),
    (s("::a00:1"), s("10.0.0.1"), "10.0.0.1, ::a00:1", "(empty)", "::a00:1"),
]


@pytest.mark.parametrize(
    ("a", "b", "union", "inter", "diff"),
    ALGEBRA_CASES,
    ids=[
        "overlap",
        "adjacent",
        "holes",
        "mixed-versions",
        "with-empty",
        "empty-with",
        "one-spanning-two",
        "same-int-different-version",
    ],
)
def test_set_algebra(a: AddressSet, b: AddressSet, union: str, inter: str, diff: str) -> None:
    assert str(a.union(b)) == union
    assert str(b.union(a)) == union
    assert str(a.intersection(b)) == inter
    assert str(b.intersection(a)) == inter
    assert str(a.difference(b)) == diff


def _brute(s: AddressSet) -> set[tuple[int, int]]:
    return {(v, x) for v, first, last in s.intervals for x in range(first, last + 1)}


def _text(version: int, value: int) -> str:
    return str(ipaddress.IPv6Address(value) if version == 6 else ipaddress.IPv4Address(value))


def _random_set(rng: random.Random) -> AddressSet:
    intervals = []
    for _ in range(rng.randint(0, 6)):
        version = rng.choice((4, 6))
        first = rng.randint(0, 40)
        intervals.append((version, first, first + rng.randint(0, 8)))
    return AddressSet(tuple(intervals))


@pytest.mark.parametrize("seed", range(5), ids=[f"seed{i}" for i in range(5)])
def test_set_algebra_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        a, b = _random_set(rng), _random_set(rng)
        ea, eb = _brute(a), _brute(b)
        assert _brute(a.union(b)) == ea | eb
        assert _brute(a.intersection(b)) == ea & eb
        assert _brute(a.difference(b)) == ea - eb
        assert a.size == len(ea)
        for result in (a.union(b), a.intersection(b), a.difference(b)):
            ivs = result.intervals
            assert all((p[0], p[2] + 1) < (q[0], q[1]) for p, q in itertools.pairwise(ivs)), ivs
        taken = [_text(v, x) for v, x in ea if x % 3]
        free = sorted(ea - eb - {(v, x) for v, x in ea if x % 3})
        expected = None
        if free:
            v, x = free[0]
            expected = _text(v, x)
        assert a.first_free(taken, b) == expected
        assert a.count_free(taken, b) == len(free)


# --------------------------------------------------------------------------- iteration / display


@pytest.mark.parametrize(
    ("entries", "limit", "expected"),
    [
        (["10.0.0.0/30"], 10, ["10.0.0.1", "10.0.0.2"]),
        (["fd00::/64", "10.0.0.5"], 3, ["10.0.0.5", "fd00::", "fd00::1"]),
        (["10.0.0.1-10.0.0.3", "10.0.0.7"], 4, ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.7"]),
        (["10.0.0.1-10.0.0.3"], 0, []),
        ([], 5, []),
    ],
    ids=["cidr-30", "huge-ipv6-limited", "across-intervals", "zero-limit", "empty"],
)
def test_iter_addresses(entries: list[str], limit: int, expected: list[str]) -> None:
    assert first_n(AddressSet.from_entries(entries), limit) == expected


def test_iter_addresses_rejects_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit must be >= 0"):
        AddressSet.empty().iter_addresses(-1)


@pytest.mark.parametrize(
    ("entries", "text"),
    [
        (["10.0.0.10-10.0.0.19", "10.0.1.1"], "10.0.0.10-10.0.0.19, 10.0.1.1"),
        (["fd00:0::/120"], "fd00::-fd00::ff"),
        (["10.0.0.1", "fd00::1"], "10.0.0.1, fd00::1"),
        ([], "(empty)"),
    ],
    ids=["ranges-and-single", "ipv6-canonical", "mixed", "empty"],
)
def test_str(entries: list[str], text: str) -> None:
    assert str(AddressSet.from_entries(entries)) == text


# --------------------------------------------------------------------------- spec.subnets


def subnet(cidr: str, gateway: str | None = None, routes: list[dict[str, str]] | None = None) -> Subnet:
    body: dict[str, object] = {"cidr": cidr, "routes": routes or []}
    if gateway is not None:
        body["gateway"] = gateway
    return Subnet.model_validate(body)


SUBNETS_OK = [
    ([subnet("10.0.1.0/24", "10.0.1.1")], ["10.0.1.10-10.0.1.20"], [("10.0.1.0/24", "10.0.1.1", ())]),
    (
        [
            subnet(
                "10.0.1.0/24", "10.0.1.1", [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.0.1.254"}]
            )
        ],
        ["10.0.1.0/28"],
        [("10.0.1.0/24", "10.0.1.1", (("0.0.0.0/0", "10.0.1.1"), ("10.9.0.0/16", "10.0.1.254")))],
    ),
    (
        [subnet("fd00:1::/64", "fd00:1::1", [{"dst": "::/0"}])],
        ["fd00:1::10"],
        [("fd00:1::/64", "fd00:1::1", (("::/0", "fd00:1::1"),))],
    ),
    ([subnet("10.0.1.5/24")], ["10.0.1.7"], [("10.0.1.0/24", None, ())]),
    (
        [subnet("10.0.1.0/24", "10.0.1.1"), subnet("fd00::/120", "fd00::1")],
        ["10.0.1.2", "fd00::2-fd00::9"],
        [("10.0.1.0/24", "10.0.1.1", ()), ("fd00::/120", "fd00::1", ())],
    ),
    ([], ["10.9.9.9"], []),
]


@pytest.mark.parametrize(
    ("subnets", "addresses", "expected"),
    SUBNETS_OK,
    ids=[
        "range-inside",
        "routes-gw-defaults-to-gateway",
        "ipv6",
        "host-bits-masked-no-gateway",
        "dual-stack",
        "none",
    ],
)
def test_parse_subnets(
    subnets: list[Subnet],
    addresses: list[str],
    expected: list[tuple[str, str | None, tuple[tuple[str, str | None], ...]]],
) -> None:
    got = parse_subnets(subnets, addresses)
    assert [(str(s.network), s.gateway, s.routes) for s in got] == expected


SUBNETS_BAD = [
    ([subnet("10.0.1.0/24", "10.0.2.1")], [], "spec.subnets[0].gateway: 10.0.2.1 is not inside 10.0.1.0/24"),
    ([subnet("10.0.1.0/24", "fd00::1")], [], "is not inside"),
    ([subnet("10.0.1.0/33")], [], "spec.subnets[0].cidr"),
    ([subnet("10.0.1.0/24", routes=[{"dst": "::/0", "gw": "10.0.1.1"}])], [], "different IP families"),
    (
        [subnet("10.0.1.0/24", "10.0.1.1")],
        ["10.0.1.250-10.0.2.5"],
        "10.0.1.250-10.0.2.5 is not inside any of spec.subnets",
    ),
    ([subnet("10.0.1.0/24")], ["10.0.9.1"], "10.0.9.1 is not inside any"),
    ([subnet("10.0.1.0/24")], ["fd00::1"], "fd00::1 is not inside any"),
]


@pytest.mark.parametrize(
    ("subnets", "addresses", "fragment"),
    SUBNETS_BAD,
    ids=[
        "gateway-outside",
        "gateway-other-family",
        "bad-prefix",
        "route-family-mismatch",
        "range-straddles",
        "address-outside",
        "family-outside",
    ],
)
def test_parse_subnets_refuses(subnets: list[Subnet], addresses: list[str], fragment: str) -> None:
    with pytest.raises(AddressError, match=re.escape(fragment)):
        parse_subnets(subnets, addresses)


def test_subnet_for_and_prefixed() -> None:
    subnets = parse_subnets([subnet("10.0.1.0/24", "10.0.1.1"), subnet("fd00::/64")], [])
    v4 = subnet_for(subnets, "10.0.1.12")
    assert isinstance(v4, SubnetInfo) and v4.prefixed("10.0.1.12") == "10.0.1.12/24"
    v6 = subnet_for(subnets, "fd00:0::5")
    assert v6 is not None and v6.prefixed("fd00:0::5") == "fd00::5/64"
    assert subnet_for(subnets, "10.0.2.1") is None and subnet_for(subnets, "junk") is None


# --------------------------------------------------------------------------- IP versions


@pytest.mark.parametrize(
    ("entries", "exclude", "v4", "v6", "versions"),
    [
        pytest.param(
            ["10.0.0.1-10.0.0.4", "fd00::1-fd00::3"],
            [],
            "10.0.0.1-10.0.0.4",
            "fd00::1-fd00::3",
            {4, 6},
            id="mixed",
        ),
        pytest.param(
            ["fd00::/126", "10.0.0.0/29"],
            ["10.0.0.3", "fd00::2"],
            "10.0.0.1-10.0.0.2, 10.0.0.4-10.0.0.6",
            "fd00::-fd00::1, fd00::3",
            {4, 6},
            id="mixed-with-excludes",
        ),
        pytest.param(["10.0.0.1", "10.0.0.9"], [], "10.0.0.1, 10.0.0.9", "(empty)", {4}, id="ipv4-only"),
        pytest.param(["fd00::1"], [], "(empty)", "fd00::1", {6}, id="ipv6-only"),
        pytest.param(
            ["10.0.0.1", "fd00::1"], ["fd00::1"], "10.0.0.1", "(empty)", {4}, id="ipv6-all-excluded"
        ),
        pytest.param([], [], "(empty)", "(empty)", set(), id="empty"),
    ],
)
def test_of_version_and_versions(
    entries: list[str], exclude: list[str], v4: str, v6: str, versions: set[int]
) -> None:
    s = AddressSet.from_entries(entries, exclude=exclude)
    assert (str(s.of_version(4)), str(s.of_version(6))) == (v4, v6)
    assert s.versions == versions
    assert s.of_version(4).union(s.of_version(6)) == s, "the two families make up the set"
    assert s.of_version(4).size + s.of_version(6).size == s.size
    for version in (4, 6):
        assert s.of_version(version).versions <= {version}
