"""underlayip/families: the IP families a pod asks for in its annotations (the API server's
Service rules for ipFamilyPolicy and ipFamilies), its namespace's defaults, and the addresses
a bound pod's annotations give it (pure, no server)."""

from __future__ import annotations

import pytest

from ipscheduler.underlayip.families import (
    ANY_FAMILY,
    IPV4,
    IPV6,
    PREFER_DUAL_STACK,
    REQUIRE_DUAL_STACK,
    SINGLE_STACK,
    VERSION,
    FamilyNeed,
    annotated_ips,
    family_need,
    family_of,
)
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_IP_FAMILIES,
    ANNOTATION_IP_FAMILY_POLICY,
    ANNOTATION_IPS,
)

POLICY = ANNOTATION_IP_FAMILY_POLICY
FAMILIES = ANNOTATION_IP_FAMILIES

TWO_WITHOUT_DUAL = "TWO_WITHOUT_DUAL"
"""Expected outcome: two families with a single-stack policy (given or by default), refused."""

# Every pod's combination of the two annotations (None: not set) and what it asks for.
COMBINATIONS: list[tuple[str | None, str | None, FamilyNeed | str]] = [
    (None, None, ANY_FAMILY),
    (None, "IPv4", FamilyNeed(SINGLE_STACK, (IPV4,))),
    (None, "IPv6", FamilyNeed(SINGLE_STACK, (IPV6,))),
    (None, "IPv4,IPv6", TWO_WITHOUT_DUAL),
    (None, "IPv6,IPv4", TWO_WITHOUT_DUAL),
    ("SingleStack", None, ANY_FAMILY),
    ("SingleStack", "IPv4", FamilyNeed(SINGLE_STACK, (IPV4,))),
    ("SingleStack", "IPv6", FamilyNeed(SINGLE_STACK, (IPV6,))),
    ("SingleStack", "IPv4,IPv6", TWO_WITHOUT_DUAL),
    ("SingleStack", "IPv6,IPv4", TWO_WITHOUT_DUAL),
    ("PreferDualStack", None, FamilyNeed(PREFER_DUAL_STACK, (IPV4, IPV6))),
    ("PreferDualStack", "IPv4", FamilyNeed(PREFER_DUAL_STACK, (IPV4, IPV6))),
    ("PreferDualStack", "IPv6", FamilyNeed(PREFER_DUAL_STACK, (IPV6, IPV4))),
    ("PreferDualStack", "IPv4,IPv6", FamilyNeed(PREFER_DUAL_STACK, (IPV4, IPV6))),
    ("PreferDualStack", "IPv6,IPv4", FamilyNeed(PREFER_DUAL_STACK, (IPV6, IPV4))),
    ("RequireDualStack", None, FamilyNeed(REQUIRE_DUAL_STACK, (IPV4, IPV6))),
    ("RequireDualStack", "IPv4", FamilyNeed(REQUIRE_DUAL_STACK, (IPV4, IPV6))),
    ("RequireDualStack", "IPv6", FamilyNeed(REQUIRE_DUAL_STACK, (IPV6, IPV4))),
    ("RequireDualStack", "IPv4,IPv6", FamilyNeed(REQUIRE_DUAL_STACK, (IPV4, IPV6))),
    ("RequireDualStack", "IPv6,IPv4", FamilyNeed(REQUIRE_DUAL_STACK, (IPV6, IPV4))),
]

NAMESPACE_DEFAULT = {POLICY: "RequireDualStack", FAMILIES: "IPv6"}
"""A namespace default that differs from every pod combination's outcome but the one it equals."""
NAMESPACE_NEED = FamilyNeed(REQUIRE_DUAL_STACK, (IPV6, IPV4))


def annotations_of(policy: str | None, families: str | None) -> dict[str, str]:
    out = {"example.com/unrelated": "x"}
    if policy is not None:
        out[POLICY] = policy
    if families is not None:
        out[FAMILIES] = families
    return out


def _case_id(policy: str | None, families: str | None, where: str) -> str:
    return f"policy={policy or '-'},families={families or '-'},{where}"


FAMILY_NEED_CASES = [
    pytest.param(policy, families, where, expected, id=_case_id(policy, families, where))
    for policy, families, expected in COMBINATIONS
    for where in ("pod-alone", "namespace-alone", "pod-over-namespace")
]


@pytest.mark.parametrize(("policy", "families", "where", "expected"), FAMILY_NEED_CASES)
def test_family_need_of_every_combination(
    policy: str | None, families: str | None, where: str, expected: FamilyNeed | str
) -> None:
    """``where``: the combination on the pod, its namespace none (pod-alone); on the
    namespace, the pod setting neither key (namespace-alone); on the pod, the namespace
    carrying a default (pod-over-namespace: the namespace counts only when the pod sets
    neither key)."""
    given = annotations_of(policy, families)
    prefix = ""
    if where == "pod-alone":
        need = family_need(given, None)
    elif where == "namespace-alone":
        need = family_need({"example.com/unrelated": "x"}, given)
        prefix = "namespace default "
    else:
        need = family_need(given, NAMESPACE_DEFAULT)
        if policy is None and families is None:
            expected = NAMESPACE_NEED
    if isinstance(expected, FamilyNeed):
        assert need == expected
        return
    assert expected == TWO_WITHOUT_DUAL
    assert (need.policy, need.families) == (SINGLE_STACK, ())
    assert "must be RequireDualStack or PreferDualStack when multiple IP families are specified" in (
        need.problem
    )
    if policy is not None:  # the policy the pod set is the one at fault
        assert need.problem.startswith(f"{prefix}annotation {POLICY}={policy!r}")
        assert f"({FAMILIES}={families})" in need.problem
    else:  # it set the families only: those are named, and the policy they need
        assert need.problem.startswith(f"{prefix}annotation {FAMILIES}={families!r}: {POLICY} must be")


@pytest.mark.parametrize(
    ("pod", "namespace"),
    [
        pytest.param({}, None, id="no-annotations-no-namespace"),
        pytest.param({}, {}, id="no-annotations-empty-namespace"),
        pytest.param({"example.com/x": "y"}, {"ipscheduler.io/default-pools": "a"}, id="unrelated-both"),
        pytest.param({ANNOTATION_IP: "10.0.0.1"}, None, id="only-an-address"),
    ],
)
def test_a_pod_and_namespace_naming_no_family_get_any_family(
    pod: dict[str, str], namespace: dict[str, str] | None
) -> None:
    need = family_need(pod, namespace)
    assert need == ANY_FAMILY
    assert (need.policy, need.families, need.problem, need.required, need.dual) == (
        SINGLE_STACK,
        (),
        "",
        (),
        False,
    )


MALFORMED = [
    # (annotations, the annotation named, the bad value as the message quotes it, why)
    ({POLICY: "Dual"}, POLICY, "'Dual'", "supported values: PreferDualStack, RequireDualStack, SingleStack"),
    ({POLICY: "singlestack"}, POLICY, "'singlestack'", "supported values: PreferDualStack"),
    ({POLICY: ""}, POLICY, "''", "supported values: PreferDualStack"),
    ({POLICY: "Dual", FAMILIES: "IPv5"}, POLICY, "'Dual'", "supported values: PreferDualStack"),
    ({FAMILIES: "ipv4"}, FAMILIES, "'ipv4'", "'ipv4': supported values: IPv4, IPv6"),
    ({FAMILIES: "IPv5"}, FAMILIES, "'IPv5'", "'IPv5': supported values: IPv4, IPv6"),
    ({FAMILIES: "IPv4;IPv6"}, FAMILIES, "'IPv4;IPv6'", "'IPv4;IPv6': supported values: IPv4, IPv6"),
    ({FAMILIES: ""}, FAMILIES, "''", "'': supported values: IPv4, IPv6"),
    ({FAMILIES: "IPv4,"}, FAMILIES, "'IPv4,'", "'': supported values: IPv4, IPv6"),
    ({FAMILIES: "IPv4,IPv4"}, FAMILIES, "'IPv4,IPv4'", "duplicate value 'IPv4'"),
    (
        {POLICY: "RequireDualStack", FAMILIES: "IPv6, IPv6"},
        FAMILIES,
        "'IPv6, IPv6'",
        "duplicate value 'IPv6'",
    ),
    ({POLICY: "PreferDualStack", FAMILIES: "IPv4,IPv6,IPv4"}, FAMILIES, "'IPv4,IPv6,IPv4'", "duplicate"),
    ({POLICY: "PreferDualStack", FAMILIES: "IPv4,IPv6,IPv5"}, FAMILIES, "'IPv4,IPv6,IPv5'", "'IPv5'"),
    (
        {POLICY: "SingleStack", FAMILIES: "IPv6,IPv4"},
        POLICY,
        "'SingleStack'",
        "must be RequireDualStack or PreferDualStack",
    ),
]
MALFORMED_IDS = [
    "unknown-policy",
    "policy-case-matters",
    "empty-policy",
    "policy-checked-before-families",
    "family-case-matters",
    "unknown-family",
    "wrong-separator",
    "empty-families",
    "trailing-comma",
    "duplicate-family",
    "duplicate-family-trimmed",
    "three-families",
    "third-family-unknown",
    "single-stack-with-two-families",
]


@pytest.mark.parametrize("on_namespace", [False, True], ids=["on-the-pod", "on-the-namespace"])
@pytest.mark.parametrize(("annotations", "key", "value", "why"), MALFORMED, ids=MALFORMED_IDS)
def test_malformed_annotations_are_a_problem_naming_the_annotation_and_value(
    annotations: dict[str, str], key: str, value: str, why: str, on_namespace: bool
) -> None:
    need = family_need({}, annotations) if on_namespace else family_need(annotations)
    prefix = "namespace default " if on_namespace else ""
    assert need.problem.startswith(f"{prefix}annotation {key}={value}: "), need.problem
    assert why in need.problem
    assert (need.policy, need.families, need.required, need.dual) == (SINGLE_STACK, (), (), False), (
        "never guessed"
    )


def test_a_malformed_pod_annotation_is_refused_even_when_the_namespace_is_fine() -> None:
    need = family_need({FAMILIES: "IPv7"}, NAMESPACE_DEFAULT)
    assert need.problem == f"annotation {FAMILIES}='IPv7': 'IPv7': supported values: IPv4, IPv6"


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param(
            {POLICY: " RequireDualStack ", FAMILIES: " IPv6 , IPv4 "},
            FamilyNeed(REQUIRE_DUAL_STACK, (IPV6, IPV4)),
            id="both-padded",
        ),
        pytest.param({POLICY: "\tPreferDualStack"}, FamilyNeed(PREFER_DUAL_STACK, (IPV4, IPV6)), id="tab"),
        pytest.param({FAMILIES: " IPv6"}, FamilyNeed(SINGLE_STACK, (IPV6,)), id="one-family-padded"),
    ],
)
def test_entries_are_trimmed(annotations: dict[str, str], expected: FamilyNeed) -> None:
    assert family_need(annotations) == expected


@pytest.mark.parametrize(
    ("need", "required", "dual"),
    [
        pytest.param(ANY_FAMILY, (), False, id="any"),
        pytest.param(FamilyNeed(SINGLE_STACK, (IPV6,)), (IPV6,), False, id="single-stack-ipv6"),
        pytest.param(FamilyNeed(PREFER_DUAL_STACK, (IPV6, IPV4)), (), True, id="prefer-fits-anywhere"),
        pytest.param(FamilyNeed(REQUIRE_DUAL_STACK, (IPV6, IPV4)), (IPV6, IPV4), True, id="require-both"),
    ],
)
def test_required_and_dual(need: FamilyNeed, required: tuple[str, ...], dual: bool) -> None:
    assert (need.required, need.dual) == (required, dual)


def test_the_version_of_each_family() -> None:
    assert VERSION == {IPV4: 4, IPV6: 6}


# --------------------------------------------------------------------------- annotated_ips


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, (), id="none"),
        pytest.param({ANNOTATION_IP: "10.0.0.1"}, ("10.0.0.1",), id="ip-alone"),
        pytest.param({ANNOTATION_IP: ""}, (), id="count-only-slot"),
        pytest.param({ANNOTATION_IP: "FD00:0::1"}, ("fd00::1",), id="ip-canonical"),
        pytest.param({ANNOTATION_IP: "not-an-ip"}, (), id="ip-not-an-address"),
        pytest.param({ANNOTATION_IPS: "10.0.0.1,fd00::1"}, ("10.0.0.1", "fd00::1"), id="ips"),
        pytest.param({ANNOTATION_IPS: "FD00:0::1, 10.0.0.1"}, ("fd00::1", "10.0.0.1"), id="ips-ipv6-first"),
        pytest.param(
            {ANNOTATION_IPS: "10.0.0.2,fd00::2", ANNOTATION_IP: "10.0.0.9"},
            ("10.0.0.2", "fd00::2"),
            id="ips-over-ip",
        ),
        pytest.param({ANNOTATION_IPS: "", ANNOTATION_IP: "10.0.0.1"}, ("10.0.0.1",), id="empty-ips-then-ip"),
        pytest.param(
            {ANNOTATION_IPS: "junk,10.0.0.1,10.0.0.300,,fd00::1/64"}, ("10.0.0.1",), id="invalid-dropped"
        ),
        pytest.param(
            {ANNOTATION_IPS: "fd00::1,FD00:0::1,10.0.0.1,10.0.0.1"},
            ("fd00::1", "10.0.0.1"),
            id="duplicates-once",
        ),
    ],
)
def test_annotated_ips(annotations: dict[str, str], expected: tuple[str, ...]) -> None:
    assert annotated_ips(annotations) == expected


@pytest.mark.parametrize(
    ("ip", "family"),
    [("10.0.0.1", IPV4), ("fd00::1", IPV6), ("::ffff:10.0.0.1", IPV6), ("::", IPV6)],
    ids=["ipv4", "ipv6", "ipv4-mapped-ipv6", "unspecified-ipv6"],
)
def test_family_of(ip: str, family: str) -> None:
    assert family_of(ip) == family
