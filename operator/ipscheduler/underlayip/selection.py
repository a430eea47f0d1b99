"""Which NodeIPPools a pod may use (pure, no I/O).

- The pod annotation ``ipscheduler.io/pools: a,b`` restricts the pod to those pools, in
  that order of preference (the UnderlayIP score prefers nodes of ``a`` over those of
  ``b``, Reserve takes ``a`` before ``b`` on a node with both).
- A namespace annotation ``ipscheduler.io/default-pools`` (same form) applies to the pods
  of that namespace that name none.
- NodeIPPool ``spec.namespaces`` reserves a pool for pods of those namespaces.

A pod may use a pool when both allow it (:func:`may_use`). :func:`tenancy_problem` says
which rule refuses a pod a pool, in words, for every path that lets a pod hold an address
without a scheduling cycle: adoption (start-up reconcile, GC sweep, a pod created bound),
``ipscheduler check``, ``explain`` and ``ip list``; the CNI plugin (``cni/``) phrases its
refusals the same way.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ipscheduler.framework.types import PodInfo
from ipscheduler.underlayip.models import (
    ANNOTATION_DEFAULT_POOLS,
    ANNOTATION_IP,
    ANNOTATION_IP_FAMILIES,
    ANNOTATION_IP_FAMILY_POLICY,
    ANNOTATION_POOL,
    ANNOTATION_POOLS,
)
from ipscheduler.underlayip.pool import PoolView

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class PoolChoice:
    """A pod's ``ipscheduler.io/pools``: ``names`` in order of preference (empty: any pool),
    ``problem``, why the annotation is malformed ("" when it is not; a malformed one
    leaves the pod unschedulable, never free to use any pool), and ``source``."""

    names: tuple[str, ...] = ()
    problem: str = ""
    source: str = ANNOTATION_POOLS
    """Where the names come from, for messages: the pod's annotation, or its namespace's."""

    @functools.cached_property
    def name_set(self) -> frozenset[str]:
        """:attr:`names` as a set (membership in a long list, once per pool asked)."""
        return frozenset(self.names)

    def rank(self, pool: str) -> int:
        """``pool``'s place in the pod's preference (0 first; 0 for every pool when the pod
        names none)."""
        return self.names.index(pool) if pool in self.names else 0


ANY = PoolChoice()


def pool_choice(pod: PodInfo, namespace_default: str | None = None) -> PoolChoice:
    """The pools ``pod`` names, else those its namespace's ``ipscheduler.io/default-pools``
    (``namespace_default``) names (see the module doc). Entries are trimmed; an empty entry
    or a name that cannot be a NodeIPPool's (a DNS subdomain) makes the annotation
    malformed; a name given twice counts once, at its first place."""
    raw = pod.annotations.get(ANNOTATION_POOLS)
    source = ANNOTATION_POOLS
    if raw is None:
        if namespace_default is None:
            return ANY
        raw, source = namespace_default, f"namespace {pod.namespace} annotation {ANNOTATION_DEFAULT_POOLS}"
    return parse_pool_list(raw, source)


def parse_pool_list(raw: str, source: str = ANNOTATION_POOLS) -> PoolChoice:
    """A comma-separated list of pool names (``raw``, from ``source``: an annotation's key,
    or words that say where it is, for messages) as a :class:`PoolChoice` (see
    :func:`pool_choice` for the rules)."""
    names: list[str] = []
    for entry in raw.split(","):
        name = entry.strip()
        if not name or len(name) > 253 or not _NAME.match(name):
            return PoolChoice(
                problem=f"{'' if source != ANNOTATION_POOLS else 'annotation '}{source}={raw!r}: "
                f"{name!r} is not a NodeIPPool name "
                "(a comma-separated list of pool names)",
                source=source,
            )
        if name not in names:
            names.append(name)
    return PoolChoice(tuple(names), source=source)


def may_use(pod: PodInfo, choice: PoolChoice, pool: PoolView) -> bool:
    """Whether ``pod`` (whose annotation gave ``choice``) may use ``pool``."""
    return (not choice.names or pool.name in choice.names) and pool.serves(pod.namespace)


def namespace_default_pools(body: Mapping[str, Any]) -> str | None:
    """A Namespace body's ``ipscheduler.io/default-pools`` annotation (None: it has none, or
    it is not a string)."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_DEFAULT_POOLS) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class NamespaceDefaults:
    """What a namespace's annotations give the pods that set none of their own: ``pools``,
    its ``ipscheduler.io/default-pools`` (None: none), and ``families``, its
    ``ipscheduler.io/ip-family-policy`` and ``ipscheduler.io/ip-families`` (those it carries:
    :func:`ipscheduler.underlayip.families.family_need` reads them)."""

    pools: str | None = None
    families: tuple[tuple[str, str], ...] = ()


def namespace_defaults(body: Mapping[str, Any]) -> NamespaceDefaults | None:
    """A Namespace body's defaults for its pods (None: it carries none of the annotations;
    values that are not strings are ignored)."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    if not isinstance(annotations, dict):
        return None
    families = tuple(
        (key, value)
        for key in (ANNOTATION_IP_FAMILY_POLICY, ANNOTATION_IP_FAMILIES)
        if isinstance(value := annotations.get(key), str)
    )
    pools = namespace_default_pools(body)
    return NamespaceDefaults(pools, families) if pools is not None or families else None


def tenancy_problem(
    pod: PodInfo,
    pool: PoolView,
    namespace_default: str | None,
    scheduler_name: str | None = None,
    further: bool = False,
) -> str | None:
    """Why ``pod`` may not use ``pool``, or None when it may: the rules Filter applies
    (UnderlayIP's PreFilter and Filter), checked in this order, the first that refuses
    named:

    - ``scheduler_name`` (None: not checked, as in extender mode, where kube-scheduler's
      pods of any ``schedulerName`` hold our addresses): the pod's ``spec.schedulerName``;
    - a malformed ``ipscheduler.io/pools`` (or namespace default, ``namespace_default``);
    - the pool's ``spec.namespaces``;
    - the pools the pod's annotation, else its namespace's ``ipscheduler.io/default-pools``,
      names.

    ``further``: ``pool`` is for one of the pod's further interfaces, whose pool list is the
    pod's own choice (:mod:`~ipscheduler.underlayip.interfaces`; its Multus element is not
    among the annotations adoption reads): only the ``schedulerName`` and ``spec.namespaces``
    rules apply.
    """
    if scheduler_name is not None and pod.scheduler_name != scheduler_name:
        return f"spec.schedulerName is {pod.scheduler_name!r}, not {scheduler_name!r}"
    choice = pool_choice(pod, namespace_default)
    if choice.problem and not further:
        return choice.problem
    if not pool.serves(pod.namespace):
        reserved = ", ".join(sorted(pool.namespaces or ()))
        return (
            f"NodeIPPool {pool.name} is reserved for namespaces {reserved} (spec.namespaces), "
            f"not {pod.namespace}"
        )
    if choice.names and pool.name not in choice.names and not further:
        own = choice.source == ANNOTATION_POOLS
        raw = pod.annotations.get(ANNOTATION_POOLS) if own else namespace_default
        return f"{'annotation ' if own else ''}{choice.source}={raw} does not name NodeIPPool {pool.name}"
    return None


def is_ours(pod: PodInfo, scheduler_name: str) -> bool:
    """Whether ``pod``'s address is ours to keep and release: it names our scheduler, or a
    Binding of ours gave it an address (``ipscheduler.io/pool`` or ``/ip``: kube-scheduler
    bound it through our extender, or it was restored already bound)."""
    return (
        pod.scheduler_name == scheduler_name
        or ANNOTATION_POOL in pod.annotations
        or ANNOTATION_IP in pod.annotations
    )
