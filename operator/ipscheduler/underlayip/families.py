"""Which IP families a pod's default interface needs (pure, no I/O): dual-stack per pod.

A pod asks in Kubernetes' own words, those of ``Service.spec.ipFamilyPolicy`` and
``Service.spec.ipFamilies``, as annotations:

- ``ipscheduler.io/ip-family-policy``: ``SingleStack`` (one address: the default),
  ``PreferDualStack`` (one address per family where the node can give both, else one, decided
  at scheduling time, never at sandbox time) or ``RequireDualStack`` (one address per
  family, or the node is refused);
- ``ipscheduler.io/ip-families``: ``IPv4``, ``IPv6``, ``IPv4,IPv6`` or ``IPv6,IPv4``; the
  first is the primary family (the pod's ``ipscheduler.io/ip``).

A namespace carries the same two annotations as the defaults of its pods that set neither
(beside its ``ipscheduler.io/default-pools``). A pod with neither, in a namespace with
neither, is single-stack of any family: the lowest free address of a usable pool, as
always.

The rules are the API server's for a Service (``pkg/apis/core/validation/validation.go``,
``validateServiceIPFamily``; defaulting as ``pkg/registry/core/service/storage/alloc.go``):
at most two families, each once; two families only with a dual-stack policy; a dual-stack
policy given one family (or none) gets the other second (IPv4 first when none is given).
A malformed value leaves the pod unschedulable with the reason, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ipscheduler.underlayip.addresses import AddressError, canonical
from ipscheduler.underlayip.models import (
    ANNOTATION_IP,
    ANNOTATION_IP_FAMILIES,
    ANNOTATION_IP_FAMILY_POLICY,
    ANNOTATION_IPS,
)

IPFamily = Literal["IPv4", "IPv6"]
IPV4: IPFamily = "IPv4"
IPV6: IPFamily = "IPv6"
FAMILIES: tuple[IPFamily, ...] = (IPV4, IPV6)
VERSION: dict[IPFamily, int] = {IPV4: 4, IPV6: 6}
"""The IP version of each family (what :class:`~ipscheduler.underlayip.addresses.AddressSet`
intervals carry)."""

FamilyPolicy = Literal["SingleStack", "PreferDualStack", "RequireDualStack"]
SINGLE_STACK: FamilyPolicy = "SingleStack"
PREFER_DUAL_STACK: FamilyPolicy = "PreferDualStack"
REQUIRE_DUAL_STACK: FamilyPolicy = "RequireDualStack"
POLICIES: tuple[FamilyPolicy, ...] = (PREFER_DUAL_STACK, REQUIRE_DUAL_STACK, SINGLE_STACK)


def canonical_each(texts: Iterable[object]) -> tuple[str, ...]:
    """The canonical text of each entry of ``texts`` that is one address, in order, each once
    (entries that are not, strings or not, are left out)."""
    out: list[str] = []
    for text in texts:
        try:
            ip = canonical(str(text).strip())
        except AddressError:
            continue
        if ip not in out:
            out.append(ip)
    return tuple(out)


def annotated_ips(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The canonical addresses a bound pod's annotations give it: ``ipscheduler.io/ips``
    (primary first), else ``ipscheduler.io/ip`` alone; entries that are not addresses are
    left out (the CNI plugin refuses such a pod), and so is an empty value (a count-only
    slot)."""
    raw = annotations.get(ANNOTATION_IPS) or annotations.get(ANNOTATION_IP) or ""
    return canonical_each(raw.split(","))


def family_of(ip: str) -> IPFamily:
    """The family of address text ``ip`` (``:`` marks IPv6; the text is not validated)."""
    return IPV6 if ":" in ip else IPV4


@dataclass(frozen=True)
class FamilyNeed:
    """A pod's families: ``policy``; ``families`` in order, primary first (empty: any one
    family, the pod named none); ``problem``: why the annotations are malformed ("" when
    they are not; the pod is then unschedulable with it)."""

    policy: FamilyPolicy = SINGLE_STACK
    families: tuple[IPFamily, ...] = ()
    problem: str = ""

    @property
    def dual(self) -> bool:
        """Whether the pod asked for dual-stack (``PreferDualStack`` or ``RequireDualStack``):
        it then carries ``ipscheduler.io/ips``."""
        return self.policy != SINGLE_STACK

    @property
    def versions(self) -> tuple[int, ...]:
        """The IP versions (4, 6) of :attr:`families`, in order (empty: any one address)."""
        return tuple(VERSION[f] for f in self.families)

    @property
    def required_versions(self) -> tuple[int, ...]:
        """The IP versions of :attr:`required`."""
        return tuple(VERSION[f] for f in self.required)

    @property
    def required(self) -> tuple[IPFamily, ...]:
        """The families a node must give for the pod to fit: both for ``RequireDualStack``,
        the one for ``SingleStack`` with a family, none named (any one) otherwise; a
        ``PreferDualStack`` pod fits where any of its families is free (:attr:`families`
        says which it prefers)."""
        return self.families if self.policy != PREFER_DUAL_STACK else ()


ANY_FAMILY = FamilyNeed()
"""Single-stack, any family: a pod that names none (exactly as before dual-stack)."""


def _problem(source: str, key: str, raw: str, why: str) -> FamilyNeed:
    return FamilyNeed(problem=f"{source}annotation {key}={raw!r}: {why}")


def family_need(
    annotations: Mapping[str, str], namespace_defaults: Mapping[str, str] | None = None
) -> FamilyNeed:
    """The families of a pod whose annotations are ``annotations``; when it sets neither key,
    those of ``namespace_defaults`` (its namespace's annotations of the same keys, or None).
    Entries are trimmed; messages name the annotation and, for a namespace default, the
    namespace's (``source`` words: "namespace default ")."""
    source = ""
    if ANNOTATION_IP_FAMILY_POLICY not in annotations and ANNOTATION_IP_FAMILIES not in annotations:
        if not namespace_defaults:
            return ANY_FAMILY
        annotations, source = namespace_defaults, "namespace default "
    raw_policy = annotations.get(ANNOTATION_IP_FAMILY_POLICY)
    raw_families = annotations.get(ANNOTATION_IP_FAMILIES)
    if raw_policy is None and raw_families is None:
        return ANY_FAMILY
    policy = SINGLE_STACK
    if raw_policy is not None:
        if raw_policy.strip() not in POLICIES:
            return _problem(
                source, ANNOTATION_IP_FAMILY_POLICY, raw_policy, f"supported values: {', '.join(POLICIES)}"
            )
        policy = raw_policy.strip()  # type: ignore[assignment]
    families: list[IPFamily] = []
    if raw_families is not None:
        for entry in raw_families.split(","):
            family = entry.strip()
            if family not in FAMILIES:
                return _problem(
                    source, ANNOTATION_IP_FAMILIES, raw_families, f"{family!r}: supported values: IPv4, IPv6"
                )
            if family in families:
                return _problem(source, ANNOTATION_IP_FAMILIES, raw_families, f"duplicate value {family!r}")
            families.append(family)
    if len(families) > 1 and policy == SINGLE_STACK:
        why = f"must be {REQUIRE_DUAL_STACK} or {PREFER_DUAL_STACK} when multiple IP families are specified"
        if raw_policy is None:  # the policy defaults to SingleStack: name what the pod set
            return _problem(
                source, ANNOTATION_IP_FAMILIES, raw_families or "", f"{ANNOTATION_IP_FAMILY_POLICY} {why}"
            )
        return _problem(
            source,
            ANNOTATION_IP_FAMILY_POLICY,
            raw_policy,
            f"{why} ({ANNOTATION_IP_FAMILIES}={raw_families})",
        )
    if policy != SINGLE_STACK:
        for family in FAMILIES:
            if family not in families:
                families.append(family)
    return FamilyNeed(policy, tuple(families))
