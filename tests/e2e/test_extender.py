"""Extender mode against the real kube-scheduler (the devcluster's binary, v1.34.4).

kube-scheduler runs a profile ``kube-with-extender`` whose configuration calls
``ipscheduler extender`` for filter, prioritize, bind and preempt, with the extended
resource ``ipscheduler.io/underlay-ip`` managed (pods that request it are sent) and not
ignored (kube-scheduler counts it against what the extender publishes on the nodes).
The pods act as a user's would: they keep kube-scheduler and request one address.
"""

from __future__ import annotations

import base64
import ipaddress
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import devcluster
from ipscheduler.cmd.serving import new_certificate
from tests.builders import bound_pods
from tests.e2e.helpers import (
    KUBE,
    OURS,
    RELEASED_ANNOTATION,
    RESOURCE,
    Pools,
    SchedulerProcess,
    assert_check_clean,
    events_for,
    pods_of,
    published,
    running_extender,
    running_kube_scheduler,
    wants_address,
)
from tests.kube import Kubectl, pod_manifest, wait_for

NODES = ("node-1", "node-2", "node-3")


def node_annotation(kubectl: Kubectl, node: str, key: str) -> str | None:
    annotations = kubectl.json("get", "node", node)["metadata"].get("annotations") or {}
    value = annotations.get(key)
    return None if value is None else str(value)


def ip_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("annotations") or {}).get("ipscheduler.io/ip", ""))


def in_range(ip: str, rng: str) -> bool:
    first, last = (ipaddress.ip_address(x) for x in rng.split("-"))
    return first <= ipaddress.ip_address(ip) <= last


RANGES = {"node-1": "10.40.1.1-10.40.1.3", "node-2": "10.40.2.1-10.40.2.2"}


def two_pools(pools: Pools, kubectl: Kubectl) -> None:
    for node, rng in RANGES.items():
        pools.create(f"ext-{node}", node, [rng])
    wait_for(
        "the resource published on the nodes with pools",
        lambda: (
            {k: v for k, v in published(kubectl).items() if k in NODES}
            == {"node-1": "3", "node-2": "2", "node-3": None}
        ),
        timeout=30,
    )


@pytest.mark.usefixtures("kube_scheduler")
def test_kube_scheduler_places_pods_with_distinct_addresses_from_their_nodes_pool(
    kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    two_pools(pools, kubectl)
    for i in range(7):
        kubectl.create(wants_address(f"w{i}"), ns)
    wait_for("5 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 5, timeout=60)
    time.sleep(2)  # the 2 left must stay Pending: both nodes' addresses are taken
    pods = pods_of(kubectl, ns)
    bound = bound_pods(pods)
    assert len(bound) == 5
    ips = [ip_of(p) for p in bound]
    assert len(set(ips)) == 5
    for pod in bound:
        node = pod["spec"]["nodeName"]
        assert node in RANGES and in_range(ip_of(pod), RANGES[node]), (
            pod["metadata"]["name"],
            node,
            ip_of(pod),
        )
        assert pod["spec"]["schedulerName"] == KUBE
    pending = [p["metadata"]["name"] for p in pods if not p["spec"].get("nodeName")]
    messages = [e["message"] for name in pending for e in events_for(kubectl, ns, name, "FailedScheduling")]
    assert messages and all(f"Insufficient {RESOURCE}" in m for m in messages), messages
    assert_check_clean(kubectl)
    # Deleting two bound pods releases their addresses: kube-scheduler places the two waiting.
    # Its retry on the deletion may come before the extender released the address (so our
    # filter refuses again): the extender's stamp on the node wakes it then (next test).
    for pod in bound[:2]:
        kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false")
    wait_for(
        "the waiting pods bound with the released addresses",
        lambda: all(
            p["spec"].get("nodeName") for p in pods_of(kubectl, ns) if p["metadata"]["name"] in pending
        ),
        timeout=60,
    )
    live = [p for p in bound_pods(pods_of(kubectl, ns))]
    assert len({ip_of(p) for p in live}) == len(live) == 5
    assert_check_clean(kubectl)


@pytest.mark.usefixtures("kube_scheduler")
def test_an_address_freed_without_a_pod_event_wakes_the_pod_kube_scheduler_parked(
    kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    """kube-scheduler does not watch NodeIPPools: once our filter refused a pod's nodes, only
    a cluster event brings it back. An address freed with no pod event at all (a Retained
    address released by an operator) still wakes it: the extender stamps the node
    (``ipscheduler.io/underlay-ip-released``, a Node update event). Without the stamp the
    pod would wait for kube-scheduler's 5-minute unschedulable flush."""
    pools.create("ext-node-2", "node-2", [RANGES["node-2"]])
    wait_for("node-2 publishes 2", lambda: published(kubectl).get("node-2") == "2", timeout=30)
    pin = {"nodeSelector": {"kubernetes.io/hostname": "node-2"}}
    keeper = wants_address("keeper", **pin)
    keeper["metadata"]["annotations"] = {"ipscheduler.io/release-policy": "Never"}
    kubectl.create(keeper, ns)
    kubectl.create(wants_address("filler", **pin), ns)
    wait_for("2 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 2, timeout=60)
    kept = next(ip_of(p) for p in pods_of(kubectl, ns) if p["metadata"]["name"] == "keeper")
    kubectl("delete", "pod", "keeper", "-n", ns, "--wait=true")

    def retained() -> bool:
        allocations = (pools.get("ext-node-2").get("status") or {}).get("allocations") or {}
        return any(a.get("ip") == kept and a.get("phase") == "Retained" for a in allocations.values())

    wait_for("keeper's address Retained", retained, timeout=30)
    before = node_annotation(kubectl, "node-2", RELEASED_ANNOTATION)
    kubectl.create(wants_address("waiter", **pin), ns)
    # kube-scheduler's own count lets it through (1 of 2 requested); our filter refuses.
    wait_for("FailedScheduling", lambda: events_for(kubectl, ns, "waiter", "FailedScheduling"), timeout=60)
    time.sleep(2)
    assert not kubectl.json("get", "pod", "waiter", "-n", ns)["spec"].get("nodeName")
    released = subprocess.run(
        [sys.executable, "-m", "ipscheduler", "ip", "release", kept, "--kubeconfig", str(kubectl.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert released.returncode == 0, released.stderr
    waiter = wait_for(
        "waiter bound with the released address",
        lambda: next(
            (p for p in bound_pods(pods_of(kubectl, ns)) if p["metadata"]["name"] == "waiter"), None
        ),
        timeout=60,
    )
    assert ip_of(waiter) == kept
    after = node_annotation(kubectl, "node-2", RELEASED_ANNOTATION)
    assert after is not None and after != before, (before, after)
    assert_check_clean(kubectl)


@pytest.mark.usefixtures("kube_scheduler")
def test_failed_scheduling_from_kube_scheduler_carries_the_extenders_reason(
    kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    two_pools(pools, kubectl)
    pod = wants_address("picky")
    pod["metadata"]["annotations"] = {"ipscheduler.io/pools": "no-such-pool"}
    kubectl.create(pod, ns)
    event = wait_for(
        "FailedScheduling", lambda: events_for(kubectl, ns, "picky", "FailedScheduling"), timeout=60
    )
    message = event[0]["message"]
    assert "NodeIPPool(s) no-such-pool named by ipscheduler.io/pools do not exist" in message, message
    assert message.startswith("0/"), message


@pytest.mark.usefixtures("kube_scheduler")
def test_the_extender_restarted_mid_run_loses_nothing(
    extender: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    two_pools(pools, kubectl)
    for i in range(2):
        kubectl.create(wants_address(f"before-{i}"), ns)
    wait_for("2 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 2, timeout=60)
    extender.kill(signal.SIGKILL)
    for i in range(3):
        kubectl.create(wants_address(f"during-{i}"), ns)
    time.sleep(2)  # kube-scheduler's calls fail meanwhile: the pods wait in its backoff
    extender.start()
    wait_for("the verbs served again", lambda: extender.logged("serving the extender verbs"), timeout=60)
    wait_for("5 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 5, timeout=120, interval=1)
    bound = bound_pods(pods_of(kubectl, ns))
    assert len({ip_of(p) for p in bound}) == 5
    assert_check_clean(kubectl)


@pytest.mark.usefixtures("kube_scheduler")
def test_scheduler_mode_and_extender_mode_on_the_same_pools_never_double_allocate(
    kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("shared", "node-3", ["10.40.3.1-10.40.3.6"])
    wait_for("node-3 published", lambda: published(kubectl).get("node-3") == "6", timeout=30)
    pin = {"kubernetes.io/hostname": "node-3"}
    for i in range(5):
        kubectl.create(wants_address(f"k{i}", nodeSelector=pin), ns)
        kubectl.create(pod_manifest(f"o{i}", scheduler=OURS, nodeSelector=pin), ns)
    wait_for("6 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 6, timeout=90)
    time.sleep(3)  # both schedulers retry the 4 pods left; none may get an address
    bound = bound_pods(pods_of(kubectl, ns))
    assert len(bound) == 6
    ips = [ip_of(p) for p in bound]
    assert len(set(ips)) == 6 and all(in_range(ip, "10.40.3.1-10.40.3.6") for ip in ips)
    assert {p["spec"]["schedulerName"] for p in bound} <= {KUBE, OURS}
    assert_check_clean(kubectl)


@pytest.mark.usefixtures("kube_scheduler")
def test_preemption_through_the_extender_frees_an_address_for_a_higher_priority_pod(
    extender: SchedulerProcess, kubectl: Kubectl, pools: Pools, ns: str
) -> None:
    pools.create("prio", "node-2", ["10.40.4.1-10.40.4.2"])
    wait_for("node-2 published", lambda: published(kubectl).get("node-2") == "2", timeout=30)
    classes = {"ext-low": 10, "ext-high": 1000}
    for name, value in classes.items():
        kubectl.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    try:
        pin = {"kubernetes.io/hostname": "node-2"}
        for i in range(2):
            kubectl.create(wants_address(f"low-{i}", nodeSelector=pin, priorityClassName="ext-low"), ns)
        wait_for("2 low bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 2, timeout=60)
        low_ips = {ip_of(p) for p in bound_pods(pods_of(kubectl, ns))}
        kubectl.create(wants_address("high", nodeSelector=pin, priorityClassName="ext-high"), ns)

        def high_bound() -> str | None:
            pod = kubectl.json("get", "pod", "high", "-n", ns)
            return pod["spec"].get("nodeName") and ip_of(pod)

        ip = wait_for("the high-priority pod bound after preemption", high_bound, timeout=120, interval=1)
        assert ip in low_ips, "it got the address its victim held"
        victims = [
            p["metadata"]["name"] for p in pods_of(kubectl, ns) if p["metadata"]["name"].startswith("low-")
        ]
        assert len(victims) <= 1, victims
        assert events_for(kubectl, ns, "high", "Scheduled")
        assert extender.metric("ipscheduler_extender_request_duration_seconds_count", 'verb="preempt"') >= 1
        assert_check_clean(kubectl)
    finally:
        for name in classes:
            kubectl("delete", "priorityclass", name, "--ignore-not-found")


@pytest.mark.usefixtures("extender")
def test_the_published_resource_follows_the_nodes_pools(kubectl: Kubectl, pools: Pools) -> None:
    pools.create("res-a", "node-3", ["10.40.5.1-10.40.5.4"])
    pools.create("res-b", "node-3", capacity=3)
    wait_for("node-3: 4 + 3", lambda: published(kubectl).get("node-3") == "7", timeout=30)
    kubectl("delete", "nodeippool", "res-a")
    wait_for("node-3: 3 once a pool went", lambda: published(kubectl).get("node-3") == "3", timeout=30)
    kubectl("delete", "nodeippool", "res-b")
    wait_for("removed with the last pool", lambda: published(kubectl).get("node-3") is None, timeout=30)
    node = kubectl.json("get", "node", "node-3")
    assert RESOURCE not in (node["status"].get("capacity") or {})


# --------------------------------------------------------------------------- mutual TLS
SERVICE_NAME = "ip-scheduler-extender.ipscheduler-system.svc"
"""The name kube-scheduler checks the extender's certificate for (tlsConfig.serverName)."""


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Any]:
    """A CA; the extender's certificate for the Service's name; kube-scheduler's client
    certificate; and an intruder's, signed by another CA. Files and PEM bytes."""
    ca = new_certificate("extender-ca", is_ca=True)
    server = new_certificate("ip-scheduler-extender", hosts=[SERVICE_NAME, "127.0.0.1"], issuer=ca)
    client = new_certificate("kube-scheduler", issuer=ca)
    intruder = new_certificate("intruder", issuer=new_certificate("other-ca", is_ca=True))
    files = {name: pair.write(str(tmp_path), name) for name, pair in (("server", server), ("client", client))}
    files["intruder"] = intruder.write(str(tmp_path), "intruder")
    return {"ca": ca, "ca_file": ca.write(str(tmp_path), "ca")[0], "client": client, "files": files}


@pytest.fixture
def mtls_extender(
    kubectl: Kubectl, crd: None, tmp_path: Path, extender_port: int, pki: dict[str, Any]
) -> Iterator[SchedulerProcess]:
    """The extender with a certificate of the test's CA, demanding client certificates it signed."""
    cert, key = pki["files"]["server"]
    tls = ("--tls-cert-file", cert, "--tls-private-key-file", key, "--client-ca-file", pki["ca_file"])
    with running_extender(kubectl, tmp_path / "extender-mtls.log", extender_port, *tls) as proc:
        yield proc


def b64(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


def test_kube_scheduler_binds_through_the_extender_over_mutual_tls(
    cluster: devcluster.Cluster,
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
    pki: dict[str, Any],
    mtls_extender: SchedulerProcess,
    extender_port: int,
) -> None:
    """enableHTTPS with tlsConfig caData (the extender verified, for serverName), certData and
    keyData (kube-scheduler's client certificate): pods are placed and bound with their address."""
    tls_config = {
        "caData": b64(pki["ca"].cert_pem),
        "serverName": SERVICE_NAME,
        "certData": b64(pki["client"].cert_pem),
        "keyData": b64(pki["client"].key_pem),
    }
    two_pools(pools, kubectl)
    with running_kube_scheduler(cluster, extender_port, "kube-scheduler-mtls", tls_config):
        for i in range(3):
            kubectl.create(wants_address(f"m{i}"), ns)
        wait_for("3 bound", lambda: len(bound_pods(pods_of(kubectl, ns))) == 3, timeout=60)
    bound = bound_pods(pods_of(kubectl, ns))
    assert len({ip_of(p) for p in bound}) == 3
    for pod in bound:
        node = pod["spec"]["nodeName"]
        assert node in RANGES and in_range(ip_of(pod), RANGES[node]), (pod["metadata"]["name"], node)
    assert mtls_extender.logged("https")


def post_bind(port: int, ctx: ssl.SSLContext) -> int:
    """POST an empty /bind over TLS with ``ctx``: the HTTP status. Raises OSError (an
    ssl.SSLError or a reset) when the handshake is refused."""
    request = urllib.request.Request(f"https://127.0.0.1:{port}/bind", data=b"{}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10, context=ctx) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize(
    ("client_cert", "served"),
    [
        pytest.param("client", True, id="kube-schedulers-certificate"),
        pytest.param(None, False, id="no-certificate"),
        pytest.param("intruder", False, id="another-cas-certificate"),
    ],
)
def test_only_a_client_with_a_certificate_of_the_ca_reaches_bind(
    mtls_extender: SchedulerProcess,
    extender_port: int,
    pki: dict[str, Any],
    client_cert: str | None,
    served: bool,
) -> None:
    ctx = ssl.create_default_context(cafile=pki["ca_file"])
    if client_cert:
        ctx.load_cert_chain(*pki["files"][client_cert])
    if served:
        assert post_bind(extender_port, ctx) == 400, "reached the verb (an empty binding is refused)"
    else:
        with pytest.raises(OSError):
            post_bind(extender_port, ctx)
