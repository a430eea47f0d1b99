"""NodeResources plugins: does the pod fit the node's allocatable, and how full would it be.

Semantics of kube-scheduler 1.34, ``pkg/scheduler/framework/plugins/noderesources/``:

* :class:`NodeResourcesFit` (``fit.go``, Filter): ``Too many pods`` when the
  node's pods + 1 exceed allocatable ``pods``; then, for every resource the
  pod requests (> 0) among cpu, memory, ephemeral-storage and the *scalar*
  resources (extended ``example.com/gpu``, ``ipscheduler.io/underlay-ip``,
  ``hugepages-*``, ``*kubernetes.io/*``, ``attachable-volumes-*``),
  ``Insufficient <resource>`` when the request exceeds allocatable minus
  what the node's pods already request (so an exact fit is accepted). A
  resource the node does not list has allocatable 0. Every failing
  resource gives one reason (``fitsRequest``); the status is Unschedulable,
  or UnschedulableAndUnresolvable when some request alone exceeds the
  node's whole allocatable (preemption cannot help; kubernetes PR #131345,
  in 1.34). Requests of other names (``foo``, ``pods``) are ignored, as
  ``Resource.SetMaxResource`` does.
* :class:`NodeResourcesLeastAllocated` (``least_allocated.go`` +
  ``resource_allocation.go``, Score; the default ``LeastAllocated`` scoring
  strategy of NodeResourcesFit): per resource
  ``(allocatable - requested) * 100 // allocatable`` (0 when over-committed),
  weighted integer average. ``requested`` includes the incoming pod and, for
  cpu and memory, uses the *non-zero* requests: a container that does not
  set a cpu (memory) request counts as 100m (200Mi)
  (``pkg/scheduler/util/pod_resources.go``).
* :class:`NodeResourcesBalancedAllocation` (``balanced_allocation.go``,
  Score): ``int((1 - std) * 100)`` over the per-resource fractions
  requested/allocatable (capped at 1) using the *actual* requests
  (``useRequested: true``); best-effort pods are skipped (score 0 everywhere).

Quantities are compared as upstream does: cpu in whole millicores, everything
else in whole units, each rounded up (``Quantity.MilliValue``/``Value``).
Neither score plugin has a NormalizeScore upstream: :meth:`normalize_score`
is a no-op and raw scores are already in ``0..MAX_NODE_SCORE``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from pydantic import Field

from ipscheduler.framework import events
from ipscheduler.framework.interface import (
    MAX_NODE_SCORE,
    ClusterEventWithHint,
    CycleState,
    Handle,
    QueueingHint,
    Status,
)
from ipscheduler.framework.nodememo import freeze
from ipscheduler.framework.quantity import to_units
from ipscheduler.framework.registry import PluginArgs
from ipscheduler.framework.resources import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    nonzero_requests_from_spec,  # noqa: F401  (re-exported)
)
from ipscheduler.framework.types import NodeInfo, PodInfo

NAME = "NodeResourcesFit"
LEAST_ALLOCATED_NAME = "NodeResourcesLeastAllocated"
BALANCED_ALLOCATION_NAME = "NodeResourcesBalancedAllocation"

RESOURCE_CPU = "cpu"
RESOURCE_MEMORY = "memory"
RESOURCE_EPHEMERAL_STORAGE = "ephemeral-storage"
RESOURCE_PODS = "pods"

ERR_TOO_MANY_PODS = "Too many pods"

DEFAULT_RESOURCES: Mapping[str, int] = {RESOURCE_CPU: 1, RESOURCE_MEMORY: 1}
"""Scored resources and weights of the default scoring strategy (``defaultResourceSpec``)."""

_NATIVE_FIXED = (RESOURCE_CPU, RESOURCE_MEMORY, RESOURCE_EPHEMERAL_STORAGE)
_STATE_KEY = "NodeResourcesFit/requests"


def insufficient_reason(resource: str) -> str:
    """The Filter reason for ``resource`` (``fmt.Sprintf("Insufficient %v", rName)``)."""
    return f"Insufficient {resource}"


def is_scalar_resource(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended, hugepages, prefixed-native or attachable-volumes.

    Extended = domain-prefixed (has a ``/``), not in ``kubernetes.io`` and not
    starting with ``requests.`` (the API server validates the rest).
    """
    if name.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in name:
        return True
    return "/" in name and not name.startswith("requests.")


def request_units(requests: Mapping[str, Decimal]) -> dict[str, int]:
    """The pod requests the scheduler accounts for (``Resource.SetMaxResource``), in units, > 0 only."""
    out: dict[str, int] = {}
    for name, value in requests.items():
        if name in _NATIVE_FIXED or is_scalar_resource(name):
            units = to_units(name, value)
            if units > 0:
                out[name] = units
    return out


def _allocatable(node: NodeInfo, resource: str) -> int:
    return node.allocatable_units.get(resource, 0)


def _requested(node: NodeInfo, resource: str) -> int:
    return node.requested_units.get(resource, 0)


# --------------------------------------------------------------------------- Fit


@dataclass(frozen=True)
class InsufficientResource:
    """One failed resource check (``noderesources.InsufficientResource``)."""

    resource: str
    reason: str
    requested: int
    used: int
    capacity: int
    unresolvable: bool = False


def insufficient_resources(pod_request: Mapping[str, int], node: NodeInfo) -> list[InsufficientResource]:
    """``fitsRequest``: every resource ``pod_request`` (from :func:`request_units`) does not get on ``node``.

    Order: pods, cpu, memory, ephemeral-storage, then scalar resources by
    name (upstream iterates a Go map for those, so its order is random).
    """
    out: list[InsufficientResource] = []
    allocatable = node.allocatable_units
    requested = node.requested_units
    allowed_pods = allocatable.get(RESOURCE_PODS, 0)
    if len(node.pods) + 1 > allowed_pods:
        out.append(InsufficientResource(RESOURCE_PODS, ERR_TOO_MANY_PODS, 1, len(node.pods), allowed_pods))
    order: Iterable[str] = _NATIVE_FIXED
    if any(r not in _NATIVE_FIXED for r in pod_request):
        order = (*_NATIVE_FIXED, *sorted(r for r in pod_request if r not in _NATIVE_FIXED))
    for resource in order:
        want = pod_request.get(resource, 0)
        if want <= 0:
            continue
        alloc = allocatable.get(resource, 0)
        used = requested.get(resource, 0)
        if want > alloc - used:
            reason = insufficient_reason(resource)
            out.append(InsufficientResource(resource, reason, want, used, alloc, unresolvable=want > alloc))
    return out


def fits(pod: PodInfo, node: NodeInfo) -> list[str]:
    """Reasons ``pod`` does not fit ``node`` by resources (``noderesources.Fits``); empty if it fits."""
    return [r.reason for r in insufficient_resources(request_units(pod.requests), node)]


class NodeResourcesFit:
    """PreFilter: the pod's requests into the cycle state. Filter: ``fitsRequest`` (see module doc)."""

    name: str = NAME

    def pre_filter(self, state: CycleState, pod: PodInfo, nodes: Mapping[str, NodeInfo]) -> Status:
        """Compute the pod's request vector once per cycle (``computePodResourceRequest``)."""
        state.write(_STATE_KEY, request_units(pod.requests))
        return Status.success()

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`: the pod's requests (the node's
        allocatable, requested and pod count are in the NodeInfo)."""
        return freeze(pod.requests)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Reject ``node`` with one reason per insufficient resource.

        Works without PreFilter too (upstream returns an Error then).
        """
        pod_request: Mapping[str, int] | None = state.get(_STATE_KEY)
        if pod_request is None:
            pod_request = request_units(pod.requests)
        failed = insufficient_resources(pod_request, node)
        if not failed:
            return Status.success()
        reasons = tuple(f.reason for f in failed)
        if any(f.unresolvable for f in failed):
            return Status.unresolvable(*reasons, plugin=self.name)
        return Status.unschedulable(*reasons, plugin=self.name)

    def events_to_register(self) -> list[ClusterEventWithHint]:
        """A bound pod deleted or scaled down: retry the pod if the freed requests are of a
        resource it asks for. A node added or its allocatable, labels or taints changed:
        retry if the pod's requests fit the node's allocatable
        (``isSchedulableAfterPodEvent``, ``isSchedulableAfterNodeChange``)."""
        return [
            ClusterEventWithHint(events.ASSIGNED_POD_DELETE_OR_SCALE_DOWN, _after_pod_event),
            ClusterEventWithHint(events.NODE_ADD_OR_FIT_CHANGE, _after_node_change),
        ]


def _after_pod_event(pod: PodInfo, old: PodInfo | None, new: PodInfo | None) -> QueueingHint:
    if old is None:
        return QueueingHint.SKIP
    freed = {k for k, v in old.requests.items() if (new.requests.get(k, 0) if new else 0) < v}
    if new is None:
        freed.add("pods")  # a deleted pod frees its pod slot
    wanted = {k for k, v in pod.requests.items() if v > 0} | {"pods"}
    return QueueingHint.QUEUE if freed & wanted else QueueingHint.SKIP


def _after_node_change(pod: PodInfo, old: NodeInfo | None, new: NodeInfo | None) -> QueueingHint:
    if new is None or insufficient_resources(request_units(pod.requests), dataclasses.replace(new, pods=())):
        return QueueingHint.SKIP
    return QueueingHint.QUEUE


# --------------------------------------------------------------------------- non-zero requests


def nonzero_requests(pod: PodInfo) -> dict[str, Decimal]:
    """The pod's requests with non-zero cpu/memory for scoring (``GetNonzeroRequests``).

    Uses ``pod.nonzero_requests`` when PodInfo provides it (computed by
    :func:`nonzero_requests_from_spec`). Otherwise approximates from the
    aggregated requests: a pod whose cpu (memory) request sums to 0 counts
    100m (200Mi) — exact for single-container pods without explicit zero
    requests; off for several containers lacking requests (upstream counts
    100m each) or an explicit ``cpu: 0`` (upstream keeps 0).
    """
    exact: Mapping[str, Decimal] | None = getattr(pod, "nonzero_requests", None)
    out = dict(pod.requests)
    if exact is not None:
        out.update({n: exact.get(n, Decimal(0)) for n in (RESOURCE_CPU, RESOURCE_MEMORY)})
        return out
    if out.get(RESOURCE_CPU, Decimal(0)) == 0:
        out[RESOURCE_CPU] = Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000
    if out.get(RESOURCE_MEMORY, Decimal(0)) == 0:
        out[RESOURCE_MEMORY] = Decimal(DEFAULT_MEMORY_REQUEST)
    return out


# --------------------------------------------------------------------------- scoring


def _sum_units(resource: str, pods: Iterable[Mapping[str, Decimal]]) -> int:
    """Sum of per-pod requests in units, each pod rounded up on its own (as NodeInfo.update does)."""
    return sum(to_units(resource, p.get(resource, Decimal(0))) for p in pods)


def _validate(resources: Mapping[str, int] | None) -> dict[str, int]:
    """Scoring resources and weights; weights must be 1..100 (``ValidateNodeResourcesFitArgs``)."""
    out = dict(DEFAULT_RESOURCES if resources is None else resources)
    if not out:
        raise ValueError("resources: at least one resource is required")
    for name, weight in out.items():
        if not 1 <= weight <= MAX_NODE_SCORE:
            raise ValueError(f"resources[{name}].weight: {weight} not in 1..{MAX_NODE_SCORE}")
    return out


def least_requested_score(requested: int, capacity: int) -> int:
    """``leastRequestedScore``: unused share on 0..100; 0 when over-committed or no capacity."""
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def balanced_resource_score(requested: Iterable[int], allocatable: Iterable[int]) -> int:
    """``balancedResourceScorer``: ``int((1 - std) * 100)`` over requested/allocatable fractions (≤ 1).

    Resources with allocatable 0 are left out; with two fractions std is
    ``|f1 - f2| / 2``, with more the population standard deviation, with
    fewer 0. Float arithmetic in the same order as upstream, so the
    truncation matches.
    """
    fractions = [min(float(r) / float(a), 1.0) for r, a in zip(requested, allocatable, strict=True) if a != 0]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
    return int((1 - std) * float(MAX_NODE_SCORE))


class NodeResourcesLeastAllocated:
    """Score: favour nodes with the most unrequested cpu/memory (NodeResourcesFit ``LeastAllocated``)."""

    name: str = LEAST_ALLOCATED_NAME
    normalizes: bool = False
    """Upstream's NodeResourcesFit has no ScoreExtensions
    (:func:`~ipscheduler.framework.nodememo.normalizes`)."""

    def __init__(self, resources: Mapping[str, int] | None = None) -> None:
        """``resources``: resource name → weight (1..100); default cpu and memory, weight 1 each."""
        self.resources = _validate(resources)
        self._node_memo: dict[str, tuple[NodeInfo, dict[str, tuple[int, int]]]] = {}
        self._state_key = f"{self.name}/pod-units"

    def _node_units(self, node: NodeInfo) -> dict[str, tuple[int, int]]:
        """Scored resource → (allocatable, requested by the node's pods) in units, cpu and
        memory with non-zero requests; resources to skip are absent. Memoized per NodeInfo
        object (an unchanged node is the same object in the next cycle)."""
        seen = self._node_memo.get(node.name)
        if seen is not None and seen[0] is node:
            return seen[1]
        existing = [nonzero_requests(p) for p in node.pods]
        nonzero = {r: _sum_units(r, existing) for r in (RESOURCE_CPU, RESOURCE_MEMORY)}
        units: dict[str, tuple[int, int]] = {}
        for resource in self.resources:
            if resource in _NATIVE_FIXED:
                used = nonzero.get(resource, _requested(node, resource))
                units[resource] = (_allocatable(node, resource), used)
            elif resource in node.allocatable:
                units[resource] = (_allocatable(node, resource), _requested(node, resource))
        self._node_memo[node.name] = (node, units)
        return units

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`: the pod's requests and its
        non-zero requests."""
        return (freeze(pod.requests), freeze(pod.nonzero_requests))

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Weighted integer mean of :func:`least_requested_score` over the scored resources
        (``_allocation``'s rules: a scalar resource the pod does not request, or the node
        does not list, is skipped)."""
        pod_units: dict[str, int] | None = state.get(self._state_key)
        if pod_units is None:
            pod_units = {r: to_units(r, v) for r, v in nonzero_requests(pod).items() if r in self.resources}
            state.write(self._state_key, pod_units)
        units = self._node_units(node)
        total = weights = 0
        for resource, weight in self.resources.items():
            want = pod_units.get(resource, 0)
            got = units.get(resource)
            if got is None or (want == 0 and is_scalar_resource(resource)):
                continue
            alloc, used = got
            if alloc == 0:
                continue
            total += least_requested_score(used + want, alloc) * weight
            weights += weight
        return total // weights if weights else 0

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """No-op: upstream has no NormalizeScore for this strategy."""


class NodeResourcesBalancedAllocation:
    """Score: favour nodes whose cpu and memory fractions stay close to each other."""

    name: str = BALANCED_ALLOCATION_NAME
    normalizes: bool = False
    """Upstream's plugin has no ScoreExtensions (:func:`~ipscheduler.framework.nodememo.normalizes`)."""

    def __init__(self, resources: Mapping[str, int] | None = None) -> None:
        """``resources``: resource names (weights are validated but, as upstream, unused)."""
        self.resources = _validate(resources)
        self._scalar = frozenset(r for r in self.resources if is_scalar_resource(r))
        self._state_key = f"{self.name}/pod-units"

    def node_local_key(self, pod: PodInfo) -> Hashable:
        """:class:`~ipscheduler.framework.interface.NodeLocal`: the pod's requests."""
        return freeze(pod.requests)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """:func:`balanced_resource_score` with the pod's actual requests added to the node's.

        A best-effort pod (no request for any scored resource) gets 0 on
        every node: upstream's PreScore returns Skip for it (kubernetes PR
        #130260), which leaves the ranking to the other plugins as a
        constant does.
        """
        pod_units = state.memo(
            self._state_key, lambda: {r: to_units(r, pod.requests.get(r, Decimal(0))) for r in self.resources}
        )
        if not any(pod_units.values()):
            return 0
        requested: list[int] = []
        allocatable: list[int] = []
        alloc_units, used_units = node.allocatable_units, node.requested_units
        for resource in self.resources:  # _allocation's rules, on the node's unit views
            want = pod_units[resource]
            if (want == 0 and resource in self._scalar) or (
                resource not in _NATIVE_FIXED and resource not in alloc_units
            ):
                alloc = req = 0
            else:
                alloc, req = alloc_units.get(resource, 0), used_units.get(resource, 0) + want
            requested.append(req if alloc else 0)
            allocatable.append(alloc)
        return balanced_resource_score(requested, allocatable)

    def normalize_score(self, state: CycleState, pod: PodInfo, scores: dict[str, int]) -> None:
        """No-op: upstream has no NormalizeScore for this plugin."""


# --------------------------------------------------------------------------- factories


class ResourceSpec(PluginArgs):
    """A scored resource and its weight (upstream ``ResourceSpec``)."""

    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=MAX_NODE_SCORE)


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name=n, weight=w) for n, w in DEFAULT_RESOURCES.items()]


class ResourcesArgs(PluginArgs):
    """``pluginConfig`` args of the two score plugins: the scored resources (default cpu and
    memory, weight 1 each), as ``scoringStrategy.resources`` of upstream's
    ``NodeResourcesFitArgs`` and ``resources`` of ``NodeResourcesBalancedAllocationArgs``
    (``staging/src/k8s.io/kube-scheduler/config/v1/types_pluginargs.go``)."""

    resources: list[ResourceSpec] = Field(default_factory=_default_resources, min_length=1)

    def weights(self) -> dict[str, int]:
        """Resource name → weight."""
        return {r.name: r.weight for r in self.resources}


def new(args: None, handle: Handle) -> NodeResourcesFit:
    """Factory of NodeResourcesFit (registered as :data:`NAME`; it takes no args)."""
    return NodeResourcesFit()


def new_least_allocated(args: ResourcesArgs, handle: Handle) -> NodeResourcesLeastAllocated:
    """Factory of NodeResourcesLeastAllocated (:data:`LEAST_ALLOCATED_NAME`, :class:`ResourcesArgs`)."""
    return NodeResourcesLeastAllocated(args.weights())


def new_balanced_allocation(args: ResourcesArgs, handle: Handle) -> NodeResourcesBalancedAllocation:
    """Factory of NodeResourcesBalancedAllocation (:data:`BALANCED_ALLOCATION_NAME`,
    :class:`ResourcesArgs`)."""
    return NodeResourcesBalancedAllocation(args.weights())
