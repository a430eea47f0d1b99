"""Property tests: generated NodeIPPool specs and pod annotations through the real API server.

One scheduler process (the module fixture ``scheduler``) serves the whole
module; every example talks to the real kube-apiserver with kubectl, as a
user would. Expected address sets come from ``AddressSet.from_entries``; the
generators tag each entry they build as valid / semantically invalid /
schema-invalid, so the tags cross-check the operator's parser independently.
Hypothesis runs derandomized (fixed seed, no example database) so CI runs are
reproducible.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from ipscheduler.underlayip.addresses import AddressError, AddressSet
from ipscheduler.underlayip.models import MAX_POOL_ADDRESSES, MIN_PREFIX_V4, MIN_PREFIX_V6
from tests.builders import bound_pods
from tests.e2e.helpers import (
    SCHEDULER,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    events_for,
    ipscheduler_check,
    pods_of,
)
from tests.kube import Kubectl, create_namespace, pod_manifest, wait_for

NODES = ("node-1", "node-2", "node-3")
MISSING_NODE = "node-404"
ANNOTATION_IP = "ipscheduler.io/ip"
ANNOTATION_POOL = "ipscheduler.io/pool"
ENTRY_PATTERN = re.compile(r"^[0-9A-Fa-f:.]+(/[0-9]{1,3}|-[0-9A-Fa-f:.]+)?$")
NODE_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
MAX_CAPACITY = MAX_POOL_ADDRESSES  # the pool-size ceiling (models.py)
CEILING_RULE = f"a CIDR in addresses holds more than {MAX_POOL_ADDRESSES} addresses"
MAX_REPORTED = 2**31 - 1
DOCUMENTED_REASONS = {
    "InvalidSpec",
    "NodeNotFound",
    "AddressConflict",
    "OverCommitted",
    "NoAddresses",
    "NoCapacity",
    "Terminating",
}

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}

_serial = itertools.count()
_run = secrets.token_hex(2)


def unique(prefix: str) -> str:
    """A name no other example (nor a shrink replay) uses."""
    return f"{prefix}-{_run}-{next(_serial)}"


def pool_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ipscheduler.io/v1alpha1",
        "kind": "NodeIPPool",
        "metadata": {"name": name},
        "spec": spec,
    }


def ready_condition(obj: dict[str, Any]) -> dict[str, Any] | None:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready"), None)


def get_pool(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    res = kubectl.run("get", "nodeippool", name, "-o", "json", check=False)
    if res.returncode != 0:
        assert "NotFound" in res.stderr, res.stderr
        return None
    return dict(json.loads(res.stdout))


def wait_processed(kubectl: Kubectl, name: str, timeout: float = 20) -> dict[str, Any]:
    """The pool once the operator has written a Ready condition for its current generation."""

    def processed() -> dict[str, Any] | None:
        obj = get_pool(kubectl, name)
        if obj is None:
            return None
        gen = obj["metadata"].get("generation")
        cond = ready_condition(obj)
        status = obj.get("status") or {}
        if status.get("observedGeneration") == gen and cond and cond.get("observedGeneration") == gen:
            return obj
        return None

    return wait_for(f"NodeIPPool {name} processed", processed, timeout=timeout, interval=0.2)


def delete_pool(kubectl: Kubectl, name: str) -> None:
    kubectl("delete", "nodeippool", name, "--ignore-not-found", "--wait=true", "--timeout=60s")
    assert get_pool(kubectl, name) is None


def delete_pods(kubectl: Kubectl, namespace: str, names: list[str]) -> None:
    if names:
        kubectl(
            "delete", "pod", "-n", namespace, *names, "--ignore-not-found", "--wait=true", "--timeout=60s"
        )


def create_pods(kubectl: Kubectl, namespace: str, pods: list[dict[str, Any]]) -> None:
    kubectl.create({"apiVersion": "v1", "kind": "List", "items": pods}, namespace)


def scheduler_pod(name: str, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = pod_manifest(name, scheduler=SCHEDULER, terminationGracePeriodSeconds=0, **spec)
    if annotations is not None:
        body["metadata"]["annotations"] = annotations
    return body


def pinned(node: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": node}}


def assert_alive(scheduler: SchedulerProcess) -> None:
    assert scheduler.proc is not None
    assert scheduler.proc.poll() is None, f"scheduler exited:\n{scheduler.log_tail()}"


def no_foreign_pools(kubectl: Kubectl) -> None:
    left = [p["metadata"]["name"] for p in kubectl.json("get", "nodeippools")["items"]]
    assert not left, f"pools of other tests still exist: {left}"


# ---------------------------------------------------------------------------
# Generators for property 1: spec entries tagged with what they are
# ---------------------------------------------------------------------------

Kind = Literal["ok", "bad", "schema", "fuzz"]
"""ok: valid; bad: passes the CRD schema but is not an address; schema: the API server rejects it;
fuzz: random text, judged by the schema regex and by AddressSet.from_entries."""


@dataclass(frozen=True)
class Entry:
    text: str
    kind: Kind


def _ip(version: int, value: int) -> str:
    return str(ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value))


def _mapped(version: int, value: int) -> bool:
    """An IPv4-mapped IPv6 address (``::ffff:a.b.c.d``): not an underlay address (the CNI
    plugin refuses it), so an entry naming one is "bad"."""
    return version == 6 and ipaddress.IPv6Address(value).ipv4_mapped is not None


_BITS = {4: 32, 6: 128}
_LOCAL = {4: int(ipaddress.IPv4Address("10.200.0.0")), 6: int(ipaddress.IPv6Address("fd00:200::"))}


def ip_ints(version: int) -> st.SearchStrategy[int]:
    """Anywhere in the address space, or in a small local block (so ranges overlap and nest)."""
    return st.one_of(
        st.integers(0, 2 ** _BITS[version] - 1), st.integers(0, 300).map(lambda i: _LOCAL[version] + i)
    )


versions = st.sampled_from([4, 6])


@st.composite
def single_ips(draw: st.DrawFn) -> Entry:
    version = draw(versions)
    value = draw(ip_ints(version))
    if version == 6 and value < 2**32 and draw(st.booleans()):
        return Entry(f"::ffff:{ipaddress.IPv4Address(value)}", "bad")  # IPv4-mapped IPv6
    return Entry(_ip(version, value), "bad" if _mapped(version, value) else "ok")


@st.composite
def cidrs(draw: st.DrawFn, host_bits: bool = True) -> Entry:
    """A CIDR of any prefix length; unless ``host_bits`` is False, host bits may be set (invalid)."""
    version = draw(versions)
    bits = _BITS[version]
    prefix = draw(st.integers(0, bits))
    value = draw(ip_ints(version))
    hostmask = (1 << (bits - prefix)) - 1
    if not host_bits or draw(st.booleans()):
        value &= ~hostmask  # a proper network address
    ok = value & hostmask == 0 and not _mapped(version, value)
    return Entry(f"{_ip(version, value)}/{prefix}", "ok" if ok else "bad")


@st.composite
def bad_prefix_cidrs(draw: st.DrawFn) -> Entry:
    version = draw(versions)
    prefix = draw(st.integers(_BITS[version] + 1, 999))
    return Entry(f"{_ip(version, draw(ip_ints(version)))}/{prefix}", "bad")


@st.composite
def ranges(draw: st.DrawFn, broken: bool = True) -> Entry:
    """A first-last range; if ``broken``, sometimes reversed or mixing IPv4 and IPv6 (invalid)."""
    v1 = draw(versions)
    v2 = v1 if not broken or draw(st.integers(0, 4)) else draw(versions)  # rarely mixed
    first = draw(ip_ints(v1))
    if v1 == v2 and draw(st.booleans()):
        last = first + draw(st.integers(-3 if broken else 0, 40))  # short, sometimes reversed
        last = min(max(last, 0), 2 ** _BITS[v1] - 1)
    else:
        last = draw(ip_ints(v2))
    if not broken and last < first:
        first, last = last, first
    ok = v1 == v2 and first <= last and not _mapped(v1, first) and not _mapped(v2, last)
    return Entry(f"{_ip(v1, first)}-{_ip(v2, last)}", "ok" if ok else "bad")


BAD_FIXED = [
    "10.0.0.300",
    "256.1.1.1",
    "1.2.3.4.5",
    "1.2.3",
    "010.0.0.1",  # leading zeros are ambiguous (octal?): ipaddress rejects them
    "abc",
    "fffff::",
    "1:2:3:4:5:6:7:8:9",
    ":::",
    "...",
    "1.2.3.4:80",
    "10.0.0.1-10.0.0.300",
    "10.0.0.300/24",
    "1.2.3.4-abc",
    "10.0.0.5-10.0.0.1",
    "10.0.0.1-fd00::1",
    "10.0.0.1/24",
]
SCHEMA_FIXED = [
    "hello",
    "10.0.0.1 ",
    " 10.0.0.1",
    "10.0.0.1\n",
    "10.0.0.1/",
    "10.0.0.1-",
    "10.0.0.0/24-10.0.1.0",
    "10.0.0.1/1234",
    "",
    "1" * 101,
    "10.0.0.1,10.0.0.2",
    "fe80::1%eth0",
    "1.2.3.4/-1",
    "10.0.0.1 - 10.0.0.2",
]

valid_entries = st.one_of(single_ips(), cidrs(host_bits=False), ranges(broken=False))
schema_valid_entries = st.one_of(
    valid_entries,
    cidrs(),
    ranges(),
    bad_prefix_cidrs(),
    st.sampled_from(BAD_FIXED).map(lambda t: Entry(t, "bad")),
)
any_entries = st.one_of(
    schema_valid_entries,
    st.sampled_from(SCHEMA_FIXED).map(lambda t: Entry(t, "schema")),
    st.text(alphabet="0123456789abcdefg:./- ", max_size=14).map(lambda t: Entry(t, "fuzz")),
)


@dataclass(frozen=True)
class PoolCase:
    spec: dict[str, Any]
    addresses: tuple[Entry, ...] = ()
    exclude: tuple[Entry, ...] = ()


VALID_NODES = st.sampled_from([*NODES, MISSING_NODE])
ANY_NODES = st.sampled_from([*NODES, MISSING_NODE, None, "Node_1", "", "node-1."])
VALID_CAPACITIES = st.one_of(st.none(), st.integers(0, 12), st.just(MAX_CAPACITY))
ANY_CAPACITIES = st.one_of(
    VALID_CAPACITIES, st.sampled_from([-1, -(2**31), MAX_CAPACITY + 1, 2**31, 2**63 - 1, 2**64])
)


@st.composite
def pool_specs(
    draw: st.DrawFn,
    entries: st.SearchStrategy[Entry],
    nodes: st.SearchStrategy[str | None],
    capacities: st.SearchStrategy[int | None],
) -> PoolCase:
    spec: dict[str, Any] = {}
    node = draw(nodes)
    if node is not None:
        spec["nodeName"] = node
    addresses = tuple(draw(st.lists(entries, max_size=4)))
    if addresses or draw(st.booleans()):
        spec["addresses"] = [e.text for e in addresses]
    exclude = tuple(draw(st.lists(entries, max_size=3)))
    if exclude:
        spec["exclude"] = [e.text for e in exclude]
    capacity = draw(capacities)
    if capacity is not None:
        spec["capacity"] = capacity
    return PoolCase(spec, addresses, exclude)


pool_cases = st.one_of(
    pool_specs(valid_entries, VALID_NODES, VALID_CAPACITIES),  # the operator judges: mostly Ready
    pool_specs(schema_valid_entries, VALID_NODES, VALID_CAPACITIES),  # the operator judges: InvalidSpec
    pool_specs(any_entries, ANY_NODES, ANY_CAPACITIES),  # mostly rejected by the API server
)


def cidr_above_ceiling(spec: dict[str, Any]) -> bool:
    """Whether the CRD's CEL rule refuses ``spec``: no capacity, and an ``addresses`` entry
    that Kubernetes' ``isCIDR`` accepts (Go's netip.ParsePrefix: no leading zeros in the
    bits, no IPv4-mapped IPv6) holding more addresses than the pool-size ceiling."""
    if "capacity" in spec:
        return False
    for text in spec.get("addresses") or []:
        addr, slash, bits = text.partition("/")
        if not slash or not bits.isdigit() or bits != str(int(bits)):
            continue
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            continue
        if (ip.version == 6 and ip.ipv4_mapped is not None) or int(bits) > _BITS[ip.version]:
            continue
        if int(bits) < (MIN_PREFIX_V4 if ip.version == 4 else MIN_PREFIX_V6):
            return True
    return False


def schema_errors(spec: dict[str, Any]) -> list[str]:
    """Field paths the CRD schema must reject (as the API server names them), or, when the
    fields are fine, the message of the CEL rule that refuses a CIDR above the ceiling."""
    bad = []
    node = spec.get("nodeName")
    if not isinstance(node, str) or not 1 <= len(node) <= 253 or not NODE_PATTERN.fullmatch(node):
        bad.append("spec.nodeName")
    for key in ("addresses", "exclude"):
        for i, text in enumerate(spec.get(key) or []):
            if not 1 <= len(text) <= 100 or not ENTRY_PATTERN.fullmatch(text):
                bad.append(f"spec.{key}[{i}]")
    capacity = spec.get("capacity")
    if capacity is not None and not 0 <= capacity <= MAX_CAPACITY:
        bad.append("spec.capacity")
    if not bad and cidr_above_ceiling(spec):
        bad.append(CEILING_RULE)
    return bad


@dataclass
class Expected:
    reason: str
    capacity: int | None = None
    message: str | None = None


def expected_condition(case: PoolCase) -> Expected:
    """What the operator must report for a schema-valid spec (no other pools exist)."""
    spec = case.spec
    addresses, exclude = spec.get("addresses") or [], spec.get("exclude") or []
    tagged_bad = any(e.kind == "bad" for e in (*case.addresses, *case.exclude))
    fuzzed = any(e.kind == "fuzz" for e in (*case.addresses, *case.exclude))
    try:
        aset = AddressSet.from_entries(addresses, exclude)
    except AddressError as e:
        assert tagged_bad or fuzzed, f"AddressSet rejects entries generated as valid: {e}"
        return Expected("InvalidSpec", message=str(e))
    assert not tagged_bad, f"AddressSet accepts an entry generated as invalid: {case}"
    cap = spec.get("capacity")
    if addresses and cap is None and aset.size > MAX_POOL_ADDRESSES:
        return Expected("InvalidSpec", 0, message="exceed the pool-size ceiling")
    if spec["nodeName"] not in NODES:
        return Expected("NodeNotFound", message=spec["nodeName"])
    if not addresses:
        total = cap or 0
        return Expected("Ready", total) if total else Expected("NoCapacity", 0)
    total = aset.size if cap is None else min(aset.size, cap)
    return Expected("Ready", min(total, MAX_REPORTED)) if total else Expected("NoAddresses", 0)


@settings(max_examples=40, **SETTINGS)
@given(steps=st.lists(pool_cases, min_size=1, max_size=2))
def test_generated_pool_specs_are_rejected_or_reported_consistently(
    scheduler: SchedulerProcess, kubectl: Kubectl, steps: list[PoolCase]
) -> None:
    """1-2 specs applied in turn to one pool (create, update); the API server or the operator judges each."""
    no_foreign_pools(kubectl)
    name = unique("prop-spec")
    exists = False
    try:
        for case in steps:
            res = kubectl.run("apply", "-f", "-", stdin=json.dumps(pool_body(name, case.spec)), check=False)
            fields = schema_errors(case.spec)
            if res.returncode != 0:
                event("rejected by the API server")
                assert fields, f"API server rejected a schema-valid spec {case.spec}: {res.stderr}"
                for f in fields:
                    assert f in res.stderr, f"rejection of {case.spec} does not name {f}: {res.stderr}"
                continue
            assert not fields, f"API server accepted {case.spec} although {fields} are invalid"
            exists = True
            obj = wait_processed(kubectl, name)
            cond = ready_condition(obj)
            assert cond is not None
            status = obj["status"]
            expected = expected_condition(case)
            event(f"operator: {expected.reason}")
            assert cond["reason"] == expected.reason, f"{case.spec}: {cond}"
            assert status["allocated"] == 0 and status["free"] == max(0, status["capacity"])
            if expected.reason == "Ready":
                assert cond["status"] == "True", cond
                assert status["capacity"] == expected.capacity, f"{case.spec}: {status}"
            else:
                assert cond["status"] == "False", cond
                assert cond["reason"] in DOCUMENTED_REASONS
                assert expected.message is None or expected.message in cond["message"], cond
                if expected.capacity is not None:
                    assert status["capacity"] == expected.capacity, f"{case.spec}: {status}"
            assert_alive(scheduler)
    finally:
        if exists:
            delete_pool(kubectl, name)
    assert_alive(scheduler)


# ---------------------------------------------------------------------------
# Property 2: handed-out addresses are inside the spec
# ---------------------------------------------------------------------------


@st.composite
def small_entries(draw: st.DrawFn) -> str:
    """An entry inside 10.99.0.0/29 or fd00:99::/125 (8 addresses each)."""
    version = draw(versions)

    def fmt(i: int) -> str:
        return f"10.99.0.{i}" if version == 4 else f"fd00:99::{i:x}"

    form = draw(st.sampled_from(["ip", "range", "cidr"]))
    if form == "ip":
        return fmt(draw(st.integers(0, 7)))
    if form == "range":
        first = draw(st.integers(0, 7))
        return f"{fmt(first)}-{fmt(draw(st.integers(first, min(7, first + 3))))}"
    host_bits = draw(st.integers(0, 2))
    block = 2**host_bits
    start = draw(st.integers(0, 8 // block - 1)) * block
    return f"{fmt(start)}/{_BITS[version] - host_bits}"


@st.composite
def small_pools(draw: st.DrawFn) -> tuple[list[str], list[str], int | None]:
    addresses = draw(st.lists(small_entries(), min_size=1, max_size=3))
    exclude = draw(st.lists(small_entries(), max_size=2))
    size = AddressSet.from_entries(addresses, exclude).size
    assume(1 <= size <= 6)
    capacity = draw(st.one_of(st.none(), st.integers(0, 7)))
    return addresses, exclude, capacity


def ip_order(ip: str | None) -> tuple[int, int]:
    """IPv4 before IPv6, each numerically (the order AddressSet hands addresses out in)."""
    addr = ipaddress.ip_address(str(ip))
    return addr.version, int(addr)


@settings(max_examples=8, **SETTINGS)
@given(pool=small_pools(), n=st.integers(1, 8))
def test_handed_out_addresses_are_inside_the_spec(
    scheduler: SchedulerProcess,
    kubectl: Kubectl,
    ns: str,
    pool: tuple[list[str], list[str], int | None],
    n: int,
) -> None:
    addresses, exclude, capacity = pool
    no_foreign_pools(kubectl)
    aset = AddressSet.from_entries(addresses, exclude)
    excluded = AddressSet.from_entries(addresses).difference(aset)
    usable = aset.size if capacity is None else min(aset.size, capacity)
    name = unique("prop-addr")
    spec: dict[str, Any] = {"nodeName": "node-1", "addresses": addresses, "exclude": exclude}
    if capacity is not None:
        spec["capacity"] = capacity
    names = [unique("p") for _ in range(n)]
    try:
        kubectl.apply(pool_body(name, spec))
        obj = wait_processed(kubectl, name)
        assert obj["status"]["capacity"] == usable, obj["status"]
        create_pods(kubectl, ns, [scheduler_pod(p, **pinned("node-1")) for p in names])
        want = min(n, usable)
        event(f"{want} of {n} pods bound" if want < n else "all pods bound")

        def settled() -> dict[str, list[dict[str, Any]]] | None:
            pods = [p for p in pods_of(kubectl, ns) if p["metadata"]["name"] in names]
            bound = bound_pods(pods, terminating=True)
            if len(pods) != n or len(bound) != want:
                return None
            waiting = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
            if any(not events_for(kubectl, ns, w, "FailedScheduling") for w in waiting):
                return None
            return {"bound": bound}  # truthy even when no pod may be bound

        try:
            bound = wait_for(f"{want} of {n} pods bound, the rest FailedScheduling", settled, timeout=60)[
                "bound"
            ]
        except AssertionError as e:
            pods = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_of(kubectl, ns)}
            events = kubectl("get", "events", "-n", ns)
            raise AssertionError(f"{e}\npods: {pods}\nevents:\n{events}\n{scheduler.log_tail(30)}") from None
        ips = [p["metadata"]["annotations"].get(ANNOTATION_IP) for p in bound]
        for p, ip in zip(bound, ips, strict=True):
            assert p["spec"]["nodeName"] == "node-1"
            assert p["metadata"]["annotations"][ANNOTATION_POOL] == name
            assert ip is not None and ip in aset, f"{ip} not in {aset} ({spec})"
            assert ip not in excluded, f"{ip} is excluded ({spec})"
        assert len(set(ips)) == len(ips), f"addresses handed out twice: {ips}"
        # Reserve takes the lowest free address, so a fresh pool hands out its first `want` addresses.
        assert sorted(ips, key=ip_order) == sorted(aset.iter_addresses(want), key=ip_order), spec
        assert len(bound_pods(pods_of(kubectl, ns), terminating=True)) == want
        status = kubectl.json("get", "nodeippool", name)["status"]
        assert {a.get("ip") for a in status["allocations"].values()} == set(ips)
        assert_check_clean(kubectl)
    finally:
        try:
            delete_pods(kubectl, ns, names)
        finally:
            delete_pool(kubectl, name)
    assert_alive(scheduler)


# ---------------------------------------------------------------------------
# Property 3: malformed or foreign ipscheduler.io/* annotations
# ---------------------------------------------------------------------------

POOL_A, POOL_B = "prop-anno-a", "prop-anno-b"
RANGE_A, RANGE_B = "10.98.0.1-10.98.0.8", "10.98.1.1-10.98.1.8"
HOLDER_IP = "10.98.1.1"  # the first address of pool B, taken by the holder pod before any example

ANN_IPS = st.one_of(
    st.sampled_from(
        ["not-an-ip", "", HOLDER_IP, "10.98.0.1", "10.98.0.8", "fd00::1", "999.1.1.1", "10.98.0.1/32"]
    ),
    st.sampled_from([" 10.98.0.2 ", "10.98.0.0-10.98.0.9", "0.0.0.0", "::"]),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=20),
)
ANN_POOLS = st.one_of(
    st.sampled_from(["nonexistent", POOL_A, POOL_B, "", "UPPER_case", "../etc", "prop-anno-c"]),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=20),
)
ANNOTATIONS = st.fixed_dictionaries(
    {},
    optional={
        ANNOTATION_IP: ANN_IPS,
        ANNOTATION_POOL: ANN_POOLS,
        "ipscheduler.io/note": st.text(alphabet="abc xyz", max_size=8),
    },
)


@dataclass(frozen=True)
class AnnotatedPod:
    annotations: dict[str, str]
    node: str | None = None


annotated_pods = st.builds(
    AnnotatedPod, annotations=ANNOTATIONS, node=st.sampled_from([None, "node-1", "node-2"])
)


@dataclass
class AnnoEnv:
    ns: str
    sets: dict[str, AddressSet] = field(default_factory=dict)
    pool_of_node: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def anno_env(kubectl: Kubectl, pools: Pools, ns: str, scheduler: SchedulerProcess) -> Iterator[AnnoEnv]:
    """Pools A (node-1) and B (node-2); a holder pod on node-2 holds B's first address."""
    no_foreign_pools(kubectl)
    pools.create(POOL_A, "node-1", [RANGE_A])
    pools.create(POOL_B, "node-2", [RANGE_B])
    for p in (POOL_A, POOL_B):
        wait_processed(kubectl, p)
    create_pods(kubectl, ns, [scheduler_pod("holder", **pinned("node-2"))])
    holder = wait_for(
        "holder bound",
        lambda: (p := kubectl.json("get", "pod", "holder", "-n", ns))["spec"].get("nodeName") and p,
        timeout=30,
    )
    assert holder["metadata"]["annotations"][ANNOTATION_IP] == HOLDER_IP
    yield AnnoEnv(
        ns,
        sets={POOL_A: AddressSet.from_entries([RANGE_A]), POOL_B: AddressSet.from_entries([RANGE_B])},
        pool_of_node={"node-1": POOL_A, "node-2": POOL_B},
    )


@settings(max_examples=10, **SETTINGS)
@given(cases=st.lists(annotated_pods, min_size=1, max_size=3))
def test_unbound_pods_with_foreign_annotations_get_the_schedulers_annotations(
    scheduler: SchedulerProcess, kubectl: Kubectl, anno_env: AnnoEnv, cases: list[AnnotatedPod]
) -> None:
    ns = anno_env.ns
    names = [unique("anno") for _ in cases]
    bodies = [
        scheduler_pod(n, c.annotations, **(pinned(c.node) if c.node else {}))
        for n, c in zip(names, cases, strict=True)
    ]
    try:
        create_pods(kubectl, ns, bodies)

        def all_bound() -> list[dict[str, Any]] | None:
            pods = [p for p in pods_of(kubectl, ns) if p["metadata"]["name"] in names]
            return (
                pods
                if len(pods) == len(names) and len(bound_pods(pods, terminating=True)) == len(names)
                else None
            )

        pods = {p["metadata"]["name"]: p for p in wait_for("annotated pods bound", all_bound, timeout=30)}
        ips = []
        for n, case in zip(names, cases, strict=True):
            pod = pods[n]
            node = pod["spec"]["nodeName"]
            ann = pod["metadata"]["annotations"]
            assert case.node in (None, node)
            assert node in anno_env.pool_of_node, f"{n} landed on {node}, which has no pool"
            pool = anno_env.pool_of_node[node]
            assert ann[ANNOTATION_POOL] == pool, f"{n} given {case.annotations}, ended with {ann}"
            ip = ann.get(ANNOTATION_IP)
            assert ip is not None and ip in anno_env.sets[pool], f"{n} given {case.annotations}: {ann}"
            assert ip != HOLDER_IP, f"{n} got the holder's address"
            if "ipscheduler.io/note" in case.annotations:  # keys the scheduler does not own are kept
                assert ann["ipscheduler.io/note"] == case.annotations["ipscheduler.io/note"]
            ips.append(ip)
        assert len(set(ips)) == len(ips), f"addresses handed out twice: {ips}"
        assert_check_clean(kubectl)
        assert_alive(scheduler)
    finally:
        delete_pods(kubectl, ns, names)


def test_stale_ip_annotation_is_cleared_on_a_pod_of_a_count_only_pool(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    no_foreign_pools(kubectl)
    pools.create("prop-slots", "node-3", capacity=2)
    wait_processed(kubectl, "prop-slots")
    stale = {ANNOTATION_IP: "10.98.0.4", ANNOTATION_POOL: "prop-forged"}
    create_pods(kubectl, ns, [scheduler_pod("stale", stale, **pinned("node-3"))])
    pod = wait_for(
        "stale bound",
        lambda: (p := kubectl.json("get", "pod", "stale", "-n", ns))["spec"].get("nodeName") and p,
        timeout=30,
    )
    assert_alive(scheduler)
    ann = pod["metadata"]["annotations"]
    try:
        # A Binding can only add annotations: "" is how "no address" reads.
        assert (ann[ANNOTATION_IP], ann[ANNOTATION_POOL]) == ("", ""), f"a slot, no address, but {ann}"
        assert "ipscheduler.io/network" not in ann
        assert "stale" in [
            a["pod"].split("/")[1] for a in pools.get("prop-slots")["status"]["allocations"].values()
        ]
        assert_check_clean(kubectl)
    finally:
        delete_pods(kubectl, ns, ["stale"])


# ---------------------------------------------------------------------------
# Pods created already bound, carrying foreign annotations (adoption)
# ---------------------------------------------------------------------------

PB_A, PB_B = "prop-bound-a", "prop-bound-b"
LEGIT_IP, CROSS_IP = "10.97.0.5", "10.97.0.6"
CONFLICTING = {  # pod → (node, annotations, text the Warning event must contain)
    "dup": ("node-2", {ANNOTATION_POOL: PB_B, ANNOTATION_IP: "10.97.1.1"}, "already held"),
    "dup-far": ("node-1", {ANNOTATION_POOL: PB_B, ANNOTATION_IP: "10.97.1.1"}, "serves node-2, not node-1"),
    "ghost": ("node-1", {ANNOTATION_POOL: "nonexistent", ANNOTATION_IP: "10.97.0.2"}, "does not exist"),
    "junk": ("node-1", {ANNOTATION_POOL: PB_A, ANNOTATION_IP: "not-an-ip"}, "is not an IP"),
    "outside": ("node-1", {ANNOTATION_POOL: PB_A, ANNOTATION_IP: "10.97.9.9"}, "is not in pool"),
}


@dataclass
class Prebound:
    ns: str
    uids: dict[str, str]


def _check_output(kubectl: Kubectl) -> str:
    res: subprocess.CompletedProcess[str] = ipscheduler_check(kubectl.kubeconfig)
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def prebound(kubectl: Kubectl, scheduler: SchedulerProcess) -> Iterator[Prebound]:
    """Pools A (node-1, 10.97.0.1-6) and B (node-2, 10.97.1.1-4); a holder pod takes 10.97.1.1 in B.

    Then pods are created already bound (spec.nodeName set, schedulerName ip-scheduler) with
    annotations naming: B and the holder's address (dup on node-2, dup-far on node-1); a pool
    that does not exist (ghost); A and a non-IP (junk); A and an address outside A (outside);
    A and a free address of A (legit, on node-1, A's node); A and a free address of A but bound
    to node-2 (cross). None may be double-allocated; only legit may be adopted.

    Adoption happens at start-up reconcile and in the periodic GC sweep (every 30s by default):
    the fixture waits up to 45s for the sweep to have handled every pod.
    """
    no_foreign_pools(kubectl)
    ns = create_namespace(kubectl, "prop-prebound")
    try:
        kubectl.apply(pool_body(PB_A, {"nodeName": "node-1", "addresses": ["10.97.0.1-10.97.0.6"]}))
        kubectl.apply(pool_body(PB_B, {"nodeName": "node-2", "addresses": ["10.97.1.1-10.97.1.4"]}))
        for p in (PB_A, PB_B):
            wait_processed(kubectl, p)
        create_pods(kubectl, ns, [scheduler_pod("holder", **pinned("node-2"))])
        wait_for(
            "holder bound",
            lambda: (
                kubectl.json("get", "pod", "holder", "-n", ns)["metadata"]
                .get("annotations", {})
                .get(ANNOTATION_IP)
                == "10.97.1.1"
            ),
            timeout=30,
        )
        bodies = [scheduler_pod(n, ann, nodeName=node) for n, (node, ann, _) in CONFLICTING.items()]
        bodies.append(
            scheduler_pod("legit", {ANNOTATION_POOL: PB_A, ANNOTATION_IP: LEGIT_IP}, nodeName="node-1")
        )
        bodies.append(
            scheduler_pod("cross", {ANNOTATION_POOL: PB_A, ANNOTATION_IP: CROSS_IP}, nodeName="node-2")
        )
        create_pods(kubectl, ns, bodies)
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods_of(kubectl, ns)}

        def swept() -> bool:
            allocs = kubectl.json("get", "nodeippool", PB_A)["status"].get("allocations") or {}
            if uids["legit"] not in allocs:
                return False
            if not (uids["cross"] in allocs or events_for(kubectl, ns, "cross", "AddressConflict")):
                return False
            return all(events_for(kubectl, ns, n, "AddressConflict") for n in CONFLICTING)

        wait_for("the GC sweep to adopt or reject every pre-bound pod", swept, timeout=45, interval=1)
        yield Prebound(ns, uids)
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=true", "--timeout=90s", check=False)
        for p in (PB_A, PB_B):
            kubectl.run("delete", "nodeippool", p, "--ignore-not-found", "--wait=true", check=False)


def test_prebound_pods_with_foreign_annotations_are_never_double_allocated(
    scheduler: SchedulerProcess, kubectl: Kubectl, prebound: Prebound
) -> None:
    ns, uids = prebound.ns, prebound.uids
    assert_alive(scheduler)
    pool_a = kubectl.json("get", "nodeippool", PB_A)["status"]
    pool_b = kubectl.json("get", "nodeippool", PB_B)["status"]
    # The holder keeps its address; the legit pod (right node, free address of the pool) is adopted.
    assert pool_b["allocations"][uids["holder"]]["ip"] == "10.97.1.1"
    assert pool_a["allocations"][uids["legit"]] | {"since": None} == {
        "ip": LEGIT_IP,
        "pod": f"{ns}/legit",
        "phase": "Bound",
        "since": None,
    }
    held = [a["ip"] for s in (pool_a, pool_b) for a in s["allocations"].values() if a.get("ip")]
    assert len(held) == len(set(held)), f"an address is recorded twice: {held}"
    # Pods that cannot be adopted get a Warning event saying why, and no allocation anywhere.
    for name, (_, _, why) in CONFLICTING.items():
        events = events_for(kubectl, ns, name, "AddressConflict")
        assert events and events[0]["type"] == "Warning", name
        assert why in events[0]["message"], events[0]["message"]
        assert uids[name] not in pool_a["allocations"] and uids[name] not in pool_b["allocations"]
    assert not events_for(kubectl, ns, "legit", "AddressConflict")
    # ipscheduler check: never an address held twice; the rejected pods are reported as lacking one.
    out = _check_output(kubectl)
    assert "held twice" not in out, out
    lacking = set(
        re.findall(rf"pod {re.escape(ns)}/(\S+) \(\S+\) is bound to \S+ but holds no allocation", out)
    )
    assert lacking - {"cross"} == set(CONFLICTING), out  # cross: see the next test
    # New pods on node-1 never get the adopted address.
    new = ["after-0", "after-1", "after-2"]
    create_pods(kubectl, ns, [scheduler_pod(n, **pinned("node-1")) for n in new])
    bound = wait_for(
        "new pods bound",
        lambda: (
            (
                b := [
                    p
                    for p in bound_pods(pods_of(kubectl, ns), terminating=True)
                    if p["metadata"]["name"] in new
                ]
            )
            and len(b) == 3
            and b
        ),
        timeout=30,
    )
    ips = [p["metadata"]["annotations"][ANNOTATION_IP] for p in bound]
    assert LEGIT_IP not in ips and len(set(ips)) == 3, ips
    assert all(ip in AddressSet.from_entries(["10.97.0.1-10.97.0.6"]) for ip in ips), ips
    out = _check_output(kubectl)
    assert "held twice" not in out, out
    delete_pods(kubectl, ns, new)
    assert_alive(scheduler)


def test_prebound_pod_on_another_node_is_not_adopted_into_the_pool(
    scheduler: SchedulerProcess, kubectl: Kubectl, prebound: Prebound
) -> None:
    ns, uids = prebound.ns, prebound.uids
    assert_alive(scheduler)
    out = _check_output(kubectl)
    allocs = kubectl.json("get", "nodeippool", PB_A)["status"]["allocations"]
    assert uids["cross"] not in allocs, (
        f"cross (node-2) adopted into {PB_A} (node-1): {allocs[uids['cross']]}"
    )
    assert "but the pool serves" not in out, out
    events = events_for(kubectl, ns, "cross", "AddressConflict")
    assert events and events[0]["type"] == "Warning"
    assert f"pool {PB_A} named in the pod's annotation serves node-1, not node-2" in events[0]["message"]
    assert f"pod {ns}/cross ({uids['cross']}) is bound to node-2 but holds no allocation" in out, out
