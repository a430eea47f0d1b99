"""Multus hand-off: the reserved address in the pod's network-selection annotation.

Multus reads ``k8s.v1.cni.cncf.io/networks`` (the Network Plumbing Working
Group's "Kubernetes Network Custom Resource Definition De-facto Standard",
§4.1.2) and passes an element's ``"ips"`` to the delegate plugin through the
``ips`` capability; the reference ``static`` IPAM plugin configures exactly
those addresses. So with ``ipscheduler run --multus-network NAME`` the
Binding rewrites that annotation with our address in the element naming NAME,
and no plugin of ours is needed on the nodes.

The annotation has two forms, parsed as Multus parses them
(``pkg/k8sclient/k8sclient.go`` ``parsePodNetworkAnnotation`` and
``parsePodNetworkObjectName``): a JSON list of elements when the value
contains any of ``[``, ``{`` or ``"``; else a comma-separated list of
``[namespace/]name[@interface]``. The short form is converted to the JSON
form (``name``, ``namespace`` and ``interface`` keys); the user's other
elements and fields are kept as they are.
"""

from __future__ import annotations

import json
import re
from typing import Any

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"

NAD_GROUP, NAD_VERSION, NAD_PLURAL, NAD_KIND = (
    "k8s.cni.cncf.io",
    "v1",
    "network-attachment-definitions",
    "NetworkAttachmentDefinition",
)
"""The NetworkAttachmentDefinition resource (namespaced; the de-facto standard's §3, the CRD
Multus ships): the network an element's ``name`` selects."""

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class MultusError(ValueError):
    """The annotation (or the configured network name) cannot be parsed; the message says why."""


def parse_network_name(value: str) -> tuple[str | None, str]:
    """``[namespace/]name`` (the ``--multus-network`` flag) → ``(namespace or None, name)``.

    Both parts are DNS-1123 labels (Multus's rule for attachment names).
    Raises MultusError otherwise."""
    parts = value.strip().split("/")
    if len(parts) > 2:
        raise MultusError(f"network {value!r}: expected [namespace/]name")
    for part in parts:
        if not _DNS1123_LABEL.fullmatch(part):
            raise MultusError(f"network {value!r}: {part!r} is not a DNS-1123 label")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def parse_selection(value: str) -> list[dict[str, Any]]:
    """The elements of a ``k8s.v1.cni.cncf.io/networks`` value, as JSON objects.

    Short-form items become ``{"name": …}`` plus ``"namespace"``/``"interface"``
    when given. Raises MultusError on JSON that is not a list of objects with a
    string ``name``, or a short-form item with more than one ``/`` or ``@``."""
    if any(c in value for c in '[{"'):
        try:
            raw = json.loads(value)
        except json.JSONDecodeError as e:
            raise MultusError(f"{NETWORKS_ANNOTATION} is not valid JSON: {e}") from e
        if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
            raise MultusError(f"{NETWORKS_ANNOTATION} must be a JSON list of objects")
        for i, x in enumerate(raw):
            if not isinstance(x.get("name"), str) or not x["name"]:
                raise MultusError(f"{NETWORKS_ANNOTATION}[{i}] has no name")
        return raw
    out: list[dict[str, Any]] = []
    for raw_item in value.split(","):
        item = raw_item.strip()
        if not item:
            continue
        namespace, _, rest = item.rpartition("/") if "/" in item else ("", "", item)
        if "/" in namespace:
            raise MultusError(f"{NETWORKS_ANNOTATION}: {item!r}: expected [namespace/]name[@interface]")
        name, at, interface = rest.partition("@")
        if "@" in interface or not name.strip():
            raise MultusError(f"{NETWORKS_ANNOTATION}: {item!r}: expected [namespace/]name[@interface]")
        element: dict[str, Any] = {"name": name.strip()}
        if namespace.strip():
            element["namespace"] = namespace.strip()
        if at and interface.strip():
            element["interface"] = interface.strip()
        out.append(element)
    return out


def with_ips(value: str | None, network: str, pod_namespace: str, ips: list[str]) -> str | None:
    """``value`` with ``ips`` (addresses with prefix, e.g. ``["10.0.1.12/24"]``) set as the
    ``ips`` of the first element that names ``network`` (``[namespace/]name``; an element
    without a namespace is in the pod's, as Multus defaults it), as compact JSON.

    Returns None when the pod selects no such network (``value`` None or no element
    names it): the annotation is left alone. Raises MultusError when ``value`` or
    ``network`` cannot be parsed."""
    want_ns, want_name = parse_network_name(network)
    if value is None:
        return None
    elements = parse_selection(value)
    for element in elements:
        ns = element.get("namespace") or pod_namespace
        if element["name"] == want_name and (want_ns is None or ns == want_ns):
            element["ips"] = list(ips)
            return json.dumps(elements, separators=(",", ":"))
    return None


def with_element_ips(value: str | None, position: int, ips: list[str]) -> str | None:
    """``value`` with ``ips`` (addresses with prefix) set as the ``ips`` of its element at
    ``position`` (a further interface's network, :mod:`ipscheduler.underlayip.interfaces`), as
    compact JSON; None when ``value`` is None or has no such element. Raises MultusError when
    ``value`` cannot be parsed."""
    if value is None:
        return None
    elements = parse_selection(value)
    if not 0 <= position < len(elements):
        return None
    elements[position]["ips"] = list(ips)
    return json.dumps(elements, separators=(",", ":"))
