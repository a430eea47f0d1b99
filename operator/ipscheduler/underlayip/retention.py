"""Release policies: when a pod's address goes, and which pod gets it back (pure, no I/O).

A pod's policy comes from its annotation ``ipscheduler.io/release-policy``, else from its
owner (as Kube-OVN decides it for StatefulSet pods, and Galaxy with its release policies):

- ``Pod``: the address goes when the pod ends. The default for pods not owned by a
  StatefulSet.
- ``StatefulSet``: the default for StatefulSet pods. The address belongs to the identity
  namespace/pod-name (a StatefulSet pod's name is ``<statefulset>-<ordinal>``, kept across
  re-creations) of the StatefulSet with that UID: when the pod ends the allocation stays
  (phase ``Retained``) and the next pod of that identity and owner gets it back, and with
  it the node of its pool.
- ``Never``: kept for the identity namespace/pod-name whatever its owner, even after its
  workload is gone; a pod of the same name gets it back; only an operator releases it.
  A pod whose name was generated (``generateName``, not a StatefulSet's) has no stable
  identity: the policy is refused and the pod treated as ``Pod``.

``ipscheduler.io/retain-timeout`` (a Go duration, default ``5m``; ``0`` waits forever) is
how long a pod waits for the node of its retained address before it is placed anew.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from ipscheduler.framework.duration import parse_duration
from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.models import (
    ANNOTATION_RELEASE_POLICY,
    ANNOTATION_RETAIN_TIMEOUT,
    NEVER,
    POD,
    STATEFULSET,
    Allocation,
    ReleasePolicy,
)

DEFAULT_RETAIN_TIMEOUT = 300.0
"""Seconds a pod waits for the node of its retained address (``5m``)."""

POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
"""The ordinal label the StatefulSet controller puts on its pods (Kubernetes 1.28+)."""

_ORDINAL = re.compile(r"^(.*)-(\d+)$")
T = TypeVar("T")


@dataclass(frozen=True)
class Retention:
    """What happens to a pod's address when the pod ends.

    ``policy``: the policy in force. ``identity``: ``namespace/name`` that keeps the address
    ("" for ``Pod``). ``owner_uid``: the StatefulSet's UID (policy ``StatefulSet``, else "").
    ``ordinal``: the pod's StatefulSet ordinal (None when not a StatefulSet pod).
    ``timeout``: seconds to wait for the retained address's node (None: for ever).
    ``problem``: why an annotation was not honoured as written ("" when all was), for a
    Warning event on the pod.
    """

    policy: ReleasePolicy
    identity: str = ""
    owner_uid: str = ""
    ordinal: int | None = None
    timeout: float | None = DEFAULT_RETAIN_TIMEOUT
    problem: str = ""

    @property
    def sticky(self) -> bool:
        """Whether the address outlives the pod."""
        return self.policy != POD


def statefulset_ordinal(pod: PodInfo) -> int | None:
    """The ordinal of a pod its StatefulSet controller made: the ``apps.kubernetes.io/pod-index``
    label, else the ``-<n>`` suffix of a name ``<statefulset>-<n>``
    (``pkg/controller/statefulset/stateful_set_utils.go``, ``getParentNameAndOrdinal``);
    None for a pod not owned by a StatefulSet or whose name does not follow the rule."""
    owner = pod.owner
    if owner is None or owner.kind != "StatefulSet":
        return None
    m = _ORDINAL.match(pod.name)
    if m is None or m.group(1) != owner.name:
        return None
    index = pod.labels.get(POD_INDEX_LABEL)
    if index is not None and index != m.group(2):
        return None  # a label that disagrees with the name: not the controller's pod
    return int(m.group(2))


def retention_of(pod: PodInfo) -> Retention:
    """The release policy of ``pod`` and what it keeps (see the module doc). Never raises: an
    annotation that cannot be honoured falls back to the default (``problem`` says why)."""
    problems: list[str] = []
    timeout: float | None = DEFAULT_RETAIN_TIMEOUT
    raw_timeout = pod.annotations.get(ANNOTATION_RETAIN_TIMEOUT)
    if raw_timeout is not None:
        try:
            seconds = parse_duration(raw_timeout)
            timeout = None if seconds == 0 else seconds
        except ValueError as e:
            problems.append(f"{ANNOTATION_RETAIN_TIMEOUT}: {e}; using 5m")
    ordinal = statefulset_ordinal(pod)
    default: ReleasePolicy = STATEFULSET if ordinal is not None else POD
    raw = pod.annotations.get(ANNOTATION_RELEASE_POLICY)
    policy: ReleasePolicy = default
    if raw is not None:
        wanted = raw.strip()
        if wanted == POD:
            policy = POD
        elif wanted == STATEFULSET:
            if ordinal is None:
                problems.append(
                    f"{ANNOTATION_RELEASE_POLICY}=StatefulSet: the pod is not a StatefulSet's "
                    "(no controller StatefulSet, or a name without its ordinal); using Pod"
                )
            policy = default
        elif wanted == NEVER:
            if pod.generate_name and ordinal is None:
                problems.append(
                    f"{ANNOTATION_RELEASE_POLICY}=Never needs a stable pod name, and this one was "
                    f"generated from {pod.generate_name!r}; using {default}"
                )
            else:
                policy = NEVER
        else:
            problems.append(
                f"{ANNOTATION_RELEASE_POLICY}={raw!r} is not one of Pod, StatefulSet, Never; using {default}"
            )
    problem = "; ".join(problems)
    if policy == POD:
        return Retention(POD, ordinal=ordinal, timeout=timeout, problem=problem)
    owner_uid = pod.owner.uid if policy == STATEFULSET and pod.owner is not None else ""
    return Retention(policy, pod.key, owner_uid, ordinal, timeout, problem)


def wants_ordinal(ordinal: int, replicas: int, start: int = 0) -> bool:
    """Whether a StatefulSet with ``replicas`` and ``spec.ordinals.start`` ``start`` still
    wants ``ordinal`` (Kube-OVN's ``isStatefulSetPodToDel``: an ordinal at or past
    ``start + replicas``, or below ``start``, is scaled away)."""
    return start <= ordinal < start + replicas


@dataclass(frozen=True)
class StatefulSetFacts:
    """What the release rules read of a StatefulSet: its ``uid``, ``spec.replicas`` and
    ``spec.ordinals.start`` (0 when unset)."""

    uid: str
    replicas: int
    start: int = 0


def statefulset_of(identity: str) -> tuple[str, str, int] | None:
    """``(namespace, statefulset name, ordinal)`` of a StatefulSet pod identity
    ``namespace/<set>-<ordinal>``; None when it does not have that form."""
    namespace, _, name = identity.partition("/")
    m = _ORDINAL.match(name)
    if not namespace or m is None:
        return None
    return namespace, m.group(1), int(m.group(2))


def retained_release_reason(
    policy: ReleasePolicy | None, identity: str, owner_uid: str, facts: StatefulSetFacts | None
) -> str | None:
    """Why a Retained allocation (its ``policy``, ``identity`` and ``owner_uid``) goes now,
    or None to keep it. ``facts``: the StatefulSet named by the identity as the API server
    has it now (None: it does not exist). Kube-OVN's rules (``isStatefulSetPodToDel``):

    - ``Never``: kept (only an operator releases it, ``ipscheduler ip release``);
    - ``StatefulSet``: released when its StatefulSet is gone, was recreated (another UID),
      or no longer wants the ordinal (``ordinal >= spec.ordinals.start + replicas``);
    - anything else (no policy, or an identity that names no StatefulSet ordinal): a
      Retained allocation that nothing will claim, released.
    """
    if policy == NEVER:
        return None
    parsed = statefulset_of(identity) if policy == STATEFULSET else None
    if parsed is None:
        return "Retained without a release policy that keeps it"
    namespace, name, ordinal = parsed
    if facts is None:
        return f"its StatefulSet {namespace}/{name} no longer exists"
    if facts.uid != owner_uid:
        return f"its StatefulSet {namespace}/{name} was recreated (UID {facts.uid}, was {owner_uid})"
    if not wants_ordinal(ordinal, facts.replicas, facts.start):
        return (
            f"StatefulSet {namespace}/{name} no longer wants ordinal {ordinal} "
            f"(replicas {facts.replicas}, ordinals from {facts.start})"
        )
    return None


def claims(
    pod_uid: str, retention: Retention, kept: Iterable[tuple[T, str, Allocation]]
) -> list[tuple[T, str, Allocation]]:
    """Of ``kept`` (the allocations recorded for the pod's identity: ``(pool, UID,
    allocation)``, e.g. ``PoolCache.kept_for``), those pod ``pod_uid`` of ``retention``
    takes back: another UID's, kept with policy ``Never`` (any pod of that name) or for the
    same owner (a StatefulSet re-created under the same name has another UID and does not).
    The one rule UnderlayIP's PreFilter and ``explain`` share (through
    :func:`ipscheduler.underlayip.sticky.kept_address`)."""
    return [(pool, uid, a) for pool, uid, a in kept if uid != pod_uid and takes_back(a, retention.owner_uid)]


def takes_back(allocation: Allocation, owner_uid: str) -> bool:
    """Whether a pod owned by ``owner_uid`` ("" for none) takes ``allocation``, kept for its
    identity, back: one kept with ``Never`` (any pod of that name), or for the same owner
    (a StatefulSet re-created under the same name has another UID and does not)."""
    return allocation.release_policy == NEVER or (allocation.owner_uid or "") == owner_uid
