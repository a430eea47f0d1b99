"""Resource requests and QoS class of a pod spec, as kube-scheduler and the kubelet compute
them (``k8s.io/component-helpers/resource``, ``pkg/apis/core/helper/qos``): the effective
requests NodeResourcesFit checks, the non-zero requests the scoring plugins use, and the
QoS class the queue orders by. Pure functions over raw (unvalidated) spec mappings: a
malformed value counts as absent."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ipscheduler.framework.fields import as_dict, as_list, as_mapping
from ipscheduler.framework.quantity import parse_quantity


def is_sidecar(container: Any) -> bool:
    """An init container with ``restartPolicy: Always`` (a sidecar: it runs beside the app)."""
    return as_dict(container).get("restartPolicy") == "Always"


def _requests_of(container: Any) -> dict[str, Decimal]:
    res = as_dict(as_dict(container).get("resources"))
    # A limit without a request defaults the request to the limit (API server defaulting).
    merged = {**as_dict(res.get("limits")), **as_dict(res.get("requests"))}
    out: dict[str, Decimal] = {}
    for name, q in merged.items():
        try:
            value = parse_quantity(q)
        except ValueError:
            continue
        if value > 0:
            out[str(name)] = value
    return out


def _add(a: dict[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, Decimal(0)) + v
    return out


def _max(a: dict[str, Decimal], b: Mapping[str, Decimal]) -> dict[str, Decimal]:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, Decimal(0)), v)
    return out


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective resource requests of a pod (cpu in cores, memory in bytes, ...).

    Rule from ``staging/src/k8s.io/component-helpers/resource/helpers.go``
    (PodRequests): the sum of app containers plus sidecar init containers
    (``restartPolicy: Always``), or, if larger per resource, each regular init
    container's request plus the sidecars started before it; then
    ``spec.overhead`` is added.
    """
    reqs: dict[str, Decimal] = {}
    for c in as_list(spec.get("containers")):
        reqs = _add(reqs, _requests_of(c))
    sidecars: dict[str, Decimal] = {}
    init_max: dict[str, Decimal] = {}
    for c in as_list(spec.get("initContainers")):
        r = _requests_of(c)
        if is_sidecar(c):
            sidecars = _add(sidecars, r)
            init_max = _max(init_max, sidecars)
        else:
            init_max = _max(init_max, _add(sidecars, r))
    reqs = _max(_add(reqs, sidecars), init_max)
    overhead = {}
    for name, q in as_dict(spec.get("overhead")).items():
        try:
            overhead[str(name)] = parse_quantity(q)
        except ValueError:
            continue
    return _add(reqs, overhead)


DEFAULT_MILLI_CPU_REQUEST = 100
"""Non-zero cpu request of a container without one, in millicores (``DefaultMilliCPURequest``)."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""Non-zero memory request of a container without one, in bytes (``DefaultMemoryRequest``)."""


def _quantity(value: Any) -> Decimal | None:
    """A parsed quantity, or None if absent or malformed."""
    try:
        return None if value is None else parse_quantity(value)
    except ValueError:
        return None


def _container_nonzero(container: Any) -> dict[str, Decimal]:
    """cpu/memory requests of one container, a missing one replaced by the default (``applyNonMissing``).

    An explicit request, even ``0``, is kept; a limit without a request
    stands for the request (API-server defaulting); an unparsable quantity
    counts as missing.
    """
    resources = as_mapping(as_mapping(container).get("resources"))
    given = {**as_mapping(resources.get("limits")), **as_mapping(resources.get("requests"))}
    defaults = {
        "cpu": Decimal(DEFAULT_MILLI_CPU_REQUEST) / 1000,
        "memory": Decimal(DEFAULT_MEMORY_REQUEST),
    }
    out: dict[str, Decimal] = {}
    for name, default in defaults.items():
        value = _quantity(given.get(name))
        out[name] = default if value is None else value
    return out


def nonzero_requests_from_spec(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Non-zero cpu (cores) and memory (bytes) requests of a pod spec, exactly as upstream.

    ``resourcehelper.PodRequests`` with ``NonMissingContainerRequests``
    (``staging/src/k8s.io/component-helpers/resource/helpers.go``): the
    defaults are applied per container *before* aggregating, so two
    containers without requests count 200m; sidecars add up, a regular init
    container counts with the sidecars started before it, the pod needs the
    max; pod-level ``spec.resources.requests`` (PodLevelResources) override
    cpu/memory; ``spec.overhead`` is added.

    :class:`~ipscheduler.framework.types.PodInfo` computes it once from the spec
    (``nonzero_requests``); plugins read it through
    :func:`ipscheduler.plugins.noderesources.nonzero_requests`.
    """
    names = ("cpu", "memory")
    zero = {n: Decimal(0) for n in names}
    total = dict(zero)
    for c in as_list(spec.get("containers")):
        r = _container_nonzero(c)
        total = {n: total[n] + r[n] for n in names}
    sidecars = dict(zero)
    init_max = dict(zero)
    for c in as_list(spec.get("initContainers")):
        r = _container_nonzero(c)
        if as_mapping(c).get("restartPolicy") == "Always":
            sidecars = {n: sidecars[n] + r[n] for n in names}
            running = sidecars
        else:
            running = {n: sidecars[n] + r[n] for n in names}
        init_max = {n: max(init_max[n], running[n]) for n in names}
    result = {n: max(total[n] + sidecars[n], init_max[n]) for n in names}
    pod_level = as_mapping(as_mapping(spec.get("resources")).get("requests"))
    overhead = as_mapping(spec.get("overhead"))
    for n in names:
        if (level := _quantity(pod_level.get(n))) is not None:
            result[n] = level
        result[n] += _quantity(overhead.get(n)) or Decimal(0)
    return result


QOS_RANK = {"Guaranteed": 2, "Burstable": 1, "BestEffort": 0}
"""Higher is scheduled first among pods of one priority: Guaranteed > Burstable > BestEffort
(ipscheduler's own tie-break, docs/scheduling.md; kube-scheduler's PrioritySort
has none)."""

_QOS_RESOURCES = ("cpu", "memory")


def _positive(raw: Any) -> dict[str, Decimal]:
    """cpu/memory quantities > 0 of a requests/limits map; malformed ones ignored."""
    out: dict[str, Decimal] = {}
    for rname, q in as_dict(raw).items():
        if rname not in _QOS_RESOURCES:
            continue
        try:
            value = parse_quantity(q)
        except ValueError:
            continue
        if value > 0:
            out[rname] = value
    return out


def qos_class(spec: Mapping[str, Any]) -> str:
    """Compute a pod's QoS class from its spec.

    Rule from ``pkg/apis/core/v1/helper/qos/qos.go`` (GetPodQOS): only cpu
    and memory count, init containers included. BestEffort: no requests and
    no limits anywhere. Guaranteed: every container sets cpu and memory
    limits and the summed requests equal the summed limits. Otherwise Burstable.
    Malformed quantities are ignored.
    """
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    containers = as_list(spec.get("containers")) + as_list(spec.get("initContainers"))
    for c in containers:
        res = as_dict(as_dict(c).get("resources"))
        c_limits = _positive(res.get("limits"))
        # The API server defaults a missing request to the limit (core/v1 defaults).
        c_requests = {**c_limits, **_positive(res.get("requests"))}
        for rname, value in c_requests.items():
            requests[rname] = requests.get(rname, Decimal(0)) + value
        for rname, value in c_limits.items():
            limits[rname] = limits.get(rname, Decimal(0)) + value
        if set(c_limits) != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        # Summed requests must equal summed limits for every resource requested.
        for rname, req in requests.items():
            if limits.get(rname) != req:
                guaranteed = False
        guaranteed = guaranteed and len(requests) == len(limits)
    return "Guaranteed" if guaranteed else "Burstable"
