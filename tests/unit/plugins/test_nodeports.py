"""plugins/nodeports: NodePorts PreFilter, Filter and queueing hints (no server).

Cases follow kube-scheduler 1.34's node_ports_test.go; pods are parsed from raw bodies by
:meth:`PodInfo.from_obj`, so ``host_ports`` come from the real code.
"""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework import events
from ipscheduler.framework.interface import Code, FilterPlugin, QueueingHint
from ipscheduler.framework.types import HostPort, PodInfo
from ipscheduler.plugins.nodeports import NodePorts
from tests.builders import container, node, pod_body
from tests.unit.plugins.cycle import (
    HINT_NODE,
    HINT_POD,
    assert_plugin,
    hints_test,
    pre_point_code,
    run_filter,
)

UNSCHED = Code.UNSCHEDULABLE


def test_plugin_name_and_protocols() -> None:
    assert_plugin(NodePorts(), "NodePorts", FilterPlugin)


# --------------------------------------------------------------------------- NodePorts


def port(host_port: int, protocol: str | None = "TCP", host_ip: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"containerPort": host_port, "hostPort": host_port}
    if protocol is not None:
        p["protocol"] = protocol
    if host_ip is not None:
        p["hostIP"] = host_ip
    return p


def ports_pod(*ports: dict[str, Any], init_sidecar: bool | None = None) -> dict[str, Any]:
    """A pod with ``ports`` on an app container, or on an init container (sidecar or not)."""
    if init_sidecar is None:
        return pod_body(container(ports=list(ports)))
    return pod_body(container(), init=(container(ports=list(ports), sidecar=init_sidecar),))


PORT_CASES: list[tuple[str, dict[str, Any], tuple[dict[str, Any], ...], bool]] = [
    # (id, pod, pods on the node, fits)
    ("nothing-running", ports_pod(), (), True),
    ("no-host-ports-requested", ports_pod(), (ports_pod(port(8080)),), True),
    (
        "container-port-only",
        pod_body(container(ports=[{"containerPort": 8080}])),
        (ports_pod(port(8080)),),
        True,
    ),
    (
        "other-port",
        ports_pod(port(8080, "UDP", "127.0.0.1")),
        (ports_pod(port(9090, "UDP", "127.0.0.1")),),
        True,
    ),
    (
        "same-udp-port",
        ports_pod(port(8080, "UDP", "127.0.0.1")),
        (ports_pod(port(8080, "UDP", "127.0.0.1")),),
        False,
    ),
    (
        "same-tcp-port",
        ports_pod(port(8080, "TCP", "127.0.0.1")),
        (ports_pod(port(8080, "TCP", "127.0.0.1")),),
        False,
    ),
    (
        "different-host-ip",
        ports_pod(port(8080, "TCP", "127.0.0.1")),
        (ports_pod(port(8080, "TCP", "127.0.0.2")),),
        True,
    ),
    (
        "different-protocol",
        ports_pod(port(8080, "UDP", "127.0.0.1")),
        (ports_pod(port(8080, "TCP", "127.0.0.1")),),
        True,
    ),
    (
        "second-udp-port-conflict",
        ports_pod(port(8000, "UDP", "127.0.0.1"), port(8080, "UDP", "127.0.0.1")),
        (ports_pod(port(8080, "UDP", "127.0.0.1")),),
        False,
    ),
    (
        "first-tcp-port-conflict",
        ports_pod(port(8001, "TCP", "127.0.0.1"), port(8080, "UDP", "127.0.0.1")),
        (ports_pod(port(8001, "TCP", "127.0.0.1"), port(8081, "UDP", "127.0.0.1")),),
        False,
    ),
    (
        "wanted-0.0.0.0-conflicts-with-specific-ip",
        ports_pod(port(8001, "TCP", "0.0.0.0")),
        (ports_pod(port(8001, "TCP", "127.0.0.1")),),
        False,
    ),
    (
        "used-0.0.0.0-conflicts-with-specific-ip",
        ports_pod(port(8001, "TCP", "10.0.10.10")),
        (ports_pod(port(8001, "TCP", "0.0.0.0")),),
        False,
    ),
    (
        "second-tcp-port-conflict-via-0.0.0.0",
        ports_pod(port(8001, "UDP", "10.0.10.10"), port(8001, "TCP", "0.0.0.0")),
        (ports_pod(port(8001, "TCP", "127.0.0.1")),),
        False,
    ),
    (
        "0.0.0.0-other-protocol-fits",
        ports_pod(port(8001, "UDP", "10.0.10.10")),
        (ports_pod(port(8001, "TCP", "0.0.0.0")),),
        True,
    ),
    (
        "empty-host-ip-means-0.0.0.0",
        ports_pod(port(8001, "TCP")),
        (ports_pod(port(8001, "TCP", "10.0.0.1")),),
        False,
    ),
    ("protocol-defaults-to-tcp", ports_pod(port(8001, None)), (ports_pod(port(8001, "TCP")),), False),
    ("sctp-vs-default-tcp-fits", ports_pod(port(8001, None)), (ports_pod(port(8001, "SCTP")),), True),
    (
        "sidecar-init-container-port-wanted",
        ports_pod(port(8001), init_sidecar=True),
        (ports_pod(port(8001)),),
        False,
    ),
    (
        "regular-init-container-port-ignored",
        ports_pod(port(8001), init_sidecar=False),
        (ports_pod(port(8001)),),
        True,
    ),
    (
        "sidecar-port-of-existing-pod-used",
        ports_pod(port(8001)),
        (ports_pod(port(8001), init_sidecar=True),),
        False,
    ),
]


@pytest.mark.parametrize(
    ("body", "existing", "ok"), [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES]
)
def test_node_ports(body: dict[str, Any], existing: tuple[dict[str, Any], ...], ok: bool) -> None:
    n = node(pods=tuple(PodInfo.from_obj(b) for b in existing))
    status = run_filter(NodePorts(), PodInfo.from_obj(body), n)
    if ok:
        assert status.is_success()
    else:
        assert status.code is UNSCHED
        assert status.reasons == ("node(s) didn't have free ports for the requested pod ports",)
        assert status.plugin == "NodePorts"


# --------------------------------------------------------------------------- PreFilter Skip

SKIP_CASES = [
    # (plugin, extension point, pod fields, expected code)
    (NodePorts(), "pre_filter", {}, Code.SKIP),
    (NodePorts(), "pre_filter", {"host_ports": (HostPort("", "TCP", 8080),)}, Code.SUCCESS),
]


@pytest.mark.parametrize(
    ("plugin", "point", "fields", "code"),
    SKIP_CASES,
    ids=["nodeports-no-host-port", "nodeports-host-port"],
)
def test_pre_filter_and_pre_score_skip(plugin: Any, point: str, fields: dict[str, Any], code: Code) -> None:
    """As upstream: Skip when the pod gives the plugin nothing to check."""
    assert pre_point_code(plugin, point, fields) == code


# --------------------------------------------------------------------------- queueing hints

P_PORT = PodInfo(
    uid="u", namespace="ns", name="p", host_ports=(HostPort(host_ip="", protocol="TCP", port=80),)
)

HINTS = [
    # id, event, pod, old, new, expected
    ("ports-holder-deleted", events.ASSIGNED_POD_DELETE, P_PORT, P_PORT, None, QueueingHint.QUEUE),
    ("ports-other-pod-deleted", events.ASSIGNED_POD_DELETE, P_PORT, HINT_POD, None, QueueingHint.SKIP),
    ("ports-node-added", events.NODE_ADD, P_PORT, None, HINT_NODE, QueueingHint.QUEUE),
]


test_plugin_hints = hints_test(NodePorts, HINTS)
