"""The reserved address on the pod's interface, in real network namespaces.

The scheduler binds pods; then ``cnitool`` (containernetworking/cni v1.3.0)
drives the reference ``bridge`` plugin (containernetworking/plugins v1.9.1)
the way containerd does (``CNI_ARGS`` with the pod's namespace, name and UID;
``CAP_ARGS`` with the ``io.kubernetes.cri.pod-annotations`` capability), with
``ipscheduler-ipam`` as IPAM, in a fresh network namespace per case. The
plugin reads the API with a ServiceAccount that may only ``get`` pods and
NodeIPPools. Exact error codes are read from the plugin itself, run with the
same input (cnitool prints only the message).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess, build_cni_plugin, token_kubeconfig
from tests.kube import Kubectl, pod_manifest, wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack"))

import binaries  # noqa: E402
import realnode  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="network namespaces need root and iproute2's ip",
)

NETWORK = "underlay"  # the Multus network the module's scheduler fills in
POOL, NODE = "cni-pool", "node-1"
SUBNET = {"cidr": "10.77.1.0/24", "gateway": "10.77.1.1", "routes": [{"dst": "0.0.0.0/0"}]}
ANNOTATIONS = ("ipscheduler.io/pool", "ipscheduler.io/ip", "ipscheduler.io/network")


@dataclasses.dataclass(frozen=True)
class Cni:
    """Where the binaries are, and the plugin's kubeconfig."""

    plugin: Path
    tools: Path
    kubeconfig: Path
    ledger: Path
    """The plugin's node-local ledger (``ipam.dataDir``), the module's own."""

    @property
    def path(self) -> str:
        return f"{self.plugin.parent}:{self.tools}"


@pytest.fixture(scope="module")
def cni(kubectl: Kubectl, crd: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cni]:
    """The plugin built as ``make cni`` builds it, cnitool and the reference plugins, and a
    kubeconfig of a ServiceAccount with only ``get`` on pods, namespaces and nodeippools."""
    out = build_cni_plugin(tmp_path_factory.mktemp("cni-bin") / "ipscheduler-ipam")
    tools = binaries.ensure_cni_tools()
    name = f"cni-test-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    kubectl("create", "serviceaccount", "ipam", "-n", name)
    kubectl(
        "create", "clusterrole", name, "--verb=get", "--resource=pods,namespaces,nodeippools.ipscheduler.io"
    )
    kubectl("create", "clusterrolebinding", name, f"--clusterrole={name}", f"--serviceaccount={name}:ipam")
    try:
        kc = token_kubeconfig(kubectl, "ipam", name, tmp_path_factory.mktemp("cni-kc") / "kubeconfig")
        yield Cni(out, tools, kc, tmp_path_factory.mktemp("cni-ledger"))
    finally:
        kubectl.run("delete", "clusterrolebinding", name, "--ignore-not-found", check=False)
        kubectl.run("delete", "clusterrole", name, "--ignore-not-found", check=False)
        kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def multus_scheduler(
    kubectl: Kubectl, crd: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    """The module's one scheduler, also filling in the Multus network ``underlay``."""
    log = tmp_path_factory.mktemp("scheduler") / "scheduler.log"
    p = SchedulerProcess(kubectl.kubeconfig, log, "--multus-network", NETWORK).start()
    yield p
    p.stop()


@contextlib.contextmanager
def fresh_netns() -> Iterator[str]:
    """A fresh network namespace (removed afterwards with the bridge the test made). ``/run/netns``
    is made a mount point first under the host's lock, as real nodes of other test workers
    make it; ``ip netns add`` would make it unlocked."""
    realnode.ensure_netns_dir()
    name = f"ipst-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
        subprocess.run(["ip", "link", "del", bridge_of(name)], capture_output=True, check=False)


@pytest.fixture
def netns() -> Iterator[str]:
    with fresh_netns() as name:
        yield name


def bridge_of(netns: str) -> str:
    return f"br{netns[-10:]}"  # at most 15 characters


def conflist(
    cni: Cni, netns: str, node: str = NODE, version: str = "1.1.0", ipam: dict[str, Any] | None = None
) -> dict[str, Any]:
    """examples/cni/10-underlay-bridge.conflist, with this test's bridge, node and kubeconfig."""
    conf: dict[str, Any] = json.loads((ROOT / "examples" / "cni" / "10-underlay-bridge.conflist").read_text())
    conf["cniVersion"] = version
    plugin = conf["plugins"][0]
    plugin["bridge"] = bridge_of(netns)
    if ipam is None:
        plugin["ipam"].update(kubeconfig=str(cni.kubeconfig), nodeName=node, dataDir=str(cni.ledger))
    else:
        plugin["ipam"] = ipam
        plugin["capabilities"] = {"ips": True}
    return conf


@dataclasses.dataclass
class Pod:
    namespace: str
    name: str
    uid: str
    annotations: dict[str, str]


def run_cni(
    cni: Cni,
    verb: str,
    netns: str,
    conf: dict[str, Any],
    pod: Pod,
    tmp_path: Path,
    cap_args: dict[str, Any] | None = None,
    uid: str | None = None,
    ifname: str = "eth0",
) -> subprocess.CompletedProcess[str]:
    """``cnitool <verb>`` as a runtime calls the network (cnitool prints the result), for the
    sandbox's interface ``ifname`` (as Multus calls a further network's plugins)."""
    confdir = tmp_path / f"net.d-{netns}"
    confdir.mkdir(exist_ok=True)
    (confdir / "10-test.conflist").write_text(json.dumps(conf))
    env = {
        **os.environ,
        "NETCONFPATH": str(confdir),
        "CNI_PATH": cni.path,
        "CNI_IFNAME": ifname,
        "CNI_ARGS": (
            f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod.namespace};K8S_POD_NAME={pod.name};"
            f"K8S_POD_INFRA_CONTAINER_ID={netns};K8S_POD_UID={uid or pod.uid}"
        ),
    }
    if cap_args is not None:
        env["CAP_ARGS"] = json.dumps(cap_args)
    return subprocess.run(
        [str(cni.tools / "cnitool"), verb, conf["name"], f"/var/run/netns/{netns}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ipam_error(
    cni: Cni, conf: dict[str, Any], pod: Pod, netns: str, uid: str | None = None
) -> dict[str, Any]:
    """Run ipscheduler-ipam ADD directly with the bridge's input; its CNI error object."""
    plugin_conf = {**conf["plugins"][0], "cniVersion": conf["cniVersion"], "name": conf["name"]}
    env = {
        **os.environ,
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": netns,
        "CNI_NETNS": f"/var/run/netns/{netns}",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": cni.path,
        "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={pod.namespace};K8S_POD_NAME={pod.name};"
        f"K8S_POD_UID={uid or pod.uid}",
    }
    proc = subprocess.run(
        [str(cni.plugin)], input=json.dumps(plugin_conf), env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0, proc.stdout
    return dict(json.loads(proc.stdout))


def ipv4_of(netns: str, family: str = "inet", ifname: str = "eth0") -> list[str]:
    """``address/prefix`` of ``ifname``'s global IPv4 (``inet6``: IPv6) addresses in ``netns``
    ([] when the interface is absent)."""
    proc = subprocess.run(
        ["ip", "-n", netns, "-j", "addr", "show", ifname], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return []
    return [
        f"{a['local']}/{a['prefixlen']}"
        for a in json.loads(proc.stdout)[0]["addr_info"]
        if a["family"] == family and a.get("scope") == "global"
    ]


def routes_of(netns: str, version: str = "-4") -> str:
    return subprocess.run(
        ["ip", version, "-n", netns, "route"], capture_output=True, text=True, check=True
    ).stdout


def bound_pod(kubectl: Kubectl, ns: str, name: str, node: str = NODE, **extra: Any) -> Pod:
    manifest = pod_manifest(
        name,
        scheduler=SCHEDULER,
        nodeSelector={"kubernetes.io/hostname": node},
        terminationGracePeriodSeconds=0,
    )
    if extra.get("annotations"):
        manifest["metadata"]["annotations"] = extra["annotations"]
    kubectl.create(manifest, ns)
    body = wait_for(
        f"{name} bound",
        lambda: (p := kubectl.json("get", "pod", name, "-n", ns))["spec"].get("nodeName") and p,
        timeout=60,
    )
    meta = body["metadata"]
    return Pod(ns, name, meta["uid"], dict(meta.get("annotations") or {}))


@pytest.fixture
def address_pool(multus_scheduler: SchedulerProcess, pools: Pools) -> str:
    pools.create(POOL, NODE, ["10.77.1.1-10.77.1.20"], subnets=[SUBNET])
    return POOL


@dataclasses.dataclass(frozen=True)
class Family:
    """One address family's pool: its subnet, the prefix and route the pod must get."""

    addresses: str
    subnet: dict[str, Any]
    prefix: int
    default_route: str


FAMILIES = {
    "ipv4": Family("10.77.1.1-10.77.1.20", SUBNET, 24, "default via 10.77.1.1 dev eth0"),
    "ipv6": Family(
        "fd00:77::1-fd00:77::20",
        {"cidr": "fd00:77::/64", "gateway": "fd00:77::1", "routes": [{"dst": "::/0"}]},
        64,
        "default via fd00:77::1 dev eth0",
    ),
}


def pod_annotations_cap(pod: Pod) -> dict[str, Any]:
    return {"io.kubernetes.cri.pod-annotations": pod.annotations}


@pytest.mark.parametrize(
    ("source", "family"),
    [("runtime", "ipv4"), ("api", "ipv4"), ("runtime", "ipv6")],
    ids=["ipv4-annotations-from-the-runtime", "ipv4-annotations-from-the-api", "ipv6-from-the-runtime"],
)
def test_add_puts_exactly_the_reserved_address_on_eth0_then_check_and_del(
    source: str,
    family: str,
    multus_scheduler: SchedulerProcess,
    pools: Pools,
    cni: Cni,
    kubectl: Kubectl,
    ns: str,
    netns: str,
    tmp_path: Path,
) -> None:
    fam = FAMILIES[family]
    pools.create(POOL, NODE, [fam.addresses], subnets=[fam.subnet])
    pod = bound_pod(kubectl, ns, "web")
    ip = pod.annotations["ipscheduler.io/ip"]
    gateway = fam.subnet["gateway"]
    assert ip != gateway  # a gateway is never handed out
    assert json.loads(pod.annotations["ipscheduler.io/network"])["ips"][0] == {
        "address": f"{ip}/{fam.prefix}",
        "gateway": gateway,
    }
    conf = conflist(cni, netns)
    cap = pod_annotations_cap(pod) if source == "runtime" else None
    add = run_cni(cni, "add", netns, conf, pod, tmp_path, cap)
    assert add.returncode == 0, add.stderr
    result = json.loads(add.stdout)
    assert [i["address"] for i in result["ips"]] == [f"{ip}/{fam.prefix}"]
    assert result["ips"][0]["gateway"] == gateway
    inet = "inet6" if family == "ipv6" else "inet"
    assert ipv4_of(netns, inet) == [f"{ip}/{fam.prefix}"]
    assert fam.default_route in routes_of(netns, "-6" if family == "ipv6" else "-4")

    check = run_cni(cni, "check", netns, conf, pod, tmp_path, cap)
    assert check.returncode == 0, check.stderr
    for _ in range(2):  # DEL is idempotent
        delete = run_cni(cni, "del", netns, conf, pod, tmp_path, cap)
        assert delete.returncode == 0, delete.stderr
    assert ipv4_of(netns) == []


@pytest.mark.parametrize("families", ["IPv4,IPv6", "IPv6,IPv4"], ids=["ipv4-primary", "ipv6-primary"])
def test_a_dual_stack_pod_gets_both_reserved_addresses_on_eth0(
    families: str,
    multus_scheduler: SchedulerProcess,
    pools: Pools,
    cni: Cni,
    kubectl: Kubectl,
    ns: str,
    netns: str,
    tmp_path: Path,
) -> None:
    """One pool declares both families; a RequireDualStack pod is bound with one address of
    each (``ipscheduler.io/ips``, primary first), ADD puts exactly those two on eth0 with
    both default routes, CHECK passes, DEL takes both off."""
    v4, v6 = FAMILIES["ipv4"], FAMILIES["ipv6"]
    pools.create(POOL, NODE, [v4.addresses, v6.addresses], subnets=[v4.subnet, v6.subnet])
    pod = bound_pod(
        kubectl,
        ns,
        "dual",
        annotations={
            "ipscheduler.io/ip-family-policy": "RequireDualStack",
            "ipscheduler.io/ip-families": families,
        },
    )
    ips = pod.annotations["ipscheduler.io/ips"].split(",")
    assert [ipaddress.ip_address(ip).version for ip in ips] == ([4, 6] if families == "IPv4,IPv6" else [6, 4])
    assert pod.annotations["ipscheduler.io/ip"] == ips[0]
    prefix = {4: v4.prefix, 6: v6.prefix}
    want = [f"{ip}/{prefix[ipaddress.ip_address(ip).version]}" for ip in ips]
    conf = conflist(cni, netns)
    add = run_cni(cni, "add", netns, conf, pod, tmp_path, pod_annotations_cap(pod))
    assert add.returncode == 0, add.stderr
    assert [i["address"] for i in json.loads(add.stdout)["ips"]] == want
    assert sorted(ipv4_of(netns) + ipv4_of(netns, "inet6")) == sorted(want)
    assert v4.default_route in routes_of(netns, "-4")
    assert v6.default_route in routes_of(netns, "-6")
    allocation = pools.get(POOL)["status"]["allocations"][pod.uid]
    assert (allocation["ip"], allocation["ips"]) == (ips[0], ips)
    check = run_cni(cni, "check", netns, conf, pod, tmp_path)
    assert check.returncode == 0, check.stderr
    delete = run_cni(cni, "del", netns, conf, pod, tmp_path)
    assert delete.returncode == 0, delete.stderr
    assert ipv4_of(netns) == [] and ipv4_of(netns, "inet6") == []


def test_a_further_interface_gets_exactly_its_own_pools_address_on_net1(
    multus_scheduler: SchedulerProcess,
    pools: Pools,
    cni: Cni,
    kubectl: Kubectl,
    ns: str,
    netns: str,
    tmp_path: Path,
) -> None:
    """The pod asks for net1 from pool cni-rdma: ADD for eth0 gives the first interface's
    address and the default route, ADD for net1 (a second bridge, as Multus calls a further
    network's plugins) exactly net1's reserved address and its pool's other routes, no
    default route; CHECK passes for both; DEL of net1 leaves eth0 as it is."""
    pools.create(POOL, NODE, ["10.77.1.1-10.77.1.20"], subnets=[SUBNET])
    rdma_subnet = {
        "cidr": "10.78.1.0/24",
        "gateway": "10.78.1.1",
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.79.0.0/16"}],
    }
    pools.create("cni-rdma", NODE, ["10.78.1.10-10.78.1.20"], subnets=[rdma_subnet])
    pod = bound_pod(
        kubectl, ns, "multi", annotations={"ipscheduler.io/interface-pools": json.dumps({"net1": "cni-rdma"})}
    )
    entry = json.loads(pod.annotations["ipscheduler.io/interfaces"])["net1"]
    assert (entry["pool"], entry["ips"]) == ("cni-rdma", ["10.78.1.10"])
    first = conflist(cni, netns)
    second = conflist(cni, netns)
    second["name"] = "rdma"
    second["plugins"][0]["bridge"] = bridge_of(netns) + "1"
    try:
        for conf, ifname in ((first, "eth0"), (second, "net1")):
            add = run_cni(cni, "add", netns, conf, pod, tmp_path, pod_annotations_cap(pod), ifname=ifname)
            assert add.returncode == 0, add.stderr
        assert ipv4_of(netns) == [f"{pod.annotations['ipscheduler.io/ip']}/24"]
        assert ipv4_of(netns, ifname="net1") == ["10.78.1.10/24"]
        routes = routes_of(netns)
        assert "default via 10.77.1.1 dev eth0" in routes
        assert "10.79.0.0/16 via 10.78.1.1 dev net1" in routes
        assert "dev net1" not in next(line for line in routes.splitlines() if line.startswith("default"))
        assert routes.count("default") == 1
        for conf, ifname in ((first, "eth0"), (second, "net1")):
            check = run_cni(cni, "check", netns, conf, pod, tmp_path, ifname=ifname)
            assert check.returncode == 0, check.stderr
        delete = run_cni(cni, "del", netns, second, pod, tmp_path, ifname="net1")
        assert delete.returncode == 0, delete.stderr
        assert ipv4_of(netns, ifname="net1") == []
        assert ipv4_of(netns) == [f"{pod.annotations['ipscheduler.io/ip']}/24"]
        assert run_cni(cni, "del", netns, first, pod, tmp_path).returncode == 0
    finally:
        subprocess.run(["ip", "link", "del", bridge_of(netns) + "1"], capture_output=True, check=False)


def test_check_fails_once_the_pod_no_longer_holds_the_address(
    address_pool: str, cni: Cni, kubectl: Kubectl, pools: Pools, ns: str, netns: str, tmp_path: Path
) -> None:
    pod = bound_pod(kubectl, ns, "gone")
    conf = conflist(cni, netns)
    assert run_cni(cni, "add", netns, conf, pod, tmp_path).returncode == 0
    kubectl("delete", "pod", "gone", "-n", ns, "--wait=true")
    wait_for(
        "the address released",
        lambda: pod.uid not in (pools.get(POOL).get("status", {}).get("allocations") or {}),
        timeout=60,
    )
    check = run_cni(cni, "check", netns, conf, pod, tmp_path)
    assert check.returncode != 0 and "pod not found" in check.stderr + check.stdout, check
    assert run_cni(cni, "del", netns, conf, pod, tmp_path).returncode == 0
    again = run_cni(cni, "add", netns, conf, pod, tmp_path, pod_annotations_cap(pod))  # a stale sandbox
    assert again.returncode != 0 and "pod not found" in again.stderr + again.stdout, again
    assert ipv4_of(netns) == []
    assert run_cni(cni, "del", netns, conf, pod, tmp_path).returncode == 0
    subprocess.run(["ip", "netns", "del", netns], check=True)  # DEL after the sandbox is gone
    assert run_cni(cni, "del", netns, conf, pod, tmp_path).returncode == 0


@pytest.mark.parametrize(
    "teardown", ["del", "netns-gone"], ids=["the-old-sandbox-deleted", "the-old-netns-gone-without-del"]
)
def test_an_address_still_in_another_sandbox_is_refused_until_that_sandbox_is_gone(
    teardown: str,
    multus_scheduler: SchedulerProcess,
    pools: Pools,
    cni: Cni,
    kubectl: Kubectl,
    ns: str,
    tmp_path: Path,
) -> None:
    """Pod A is force-deleted while its sandbox (a netns with the address on eth0) is still
    there, and the pool's one address goes to pod B (a kwok node: released at once). ADD for
    B's sandbox is refused with "try again later" naming A's sandbox, and configures no
    address; the runtime's DEL of that failed sandbox leaves A's record alone. Once A's sandbox
    is torn down (its DEL, or its netns gone without a DEL, as after a reboot), the same ADD
    puts the address on B's eth0."""
    pools.create(POOL, NODE, ["10.77.1.5"], subnets=[SUBNET])
    with fresh_netns() as first, fresh_netns() as second:
        a = bound_pod(kubectl, ns, "a")
        conf_a, conf_b = conflist(cni, first), conflist(cni, second)
        assert run_cni(cni, "add", first, conf_a, a, tmp_path).returncode == 0
        kubectl("delete", "pod", "a", "-n", ns, "--grace-period=0", "--force")
        b = bound_pod(kubectl, ns, "b")
        assert b.annotations["ipscheduler.io/ip"] == a.annotations["ipscheduler.io/ip"] == "10.77.1.5"
        for _ in range(2):
            refused = run_cni(cni, "add", second, conf_b, b, tmp_path)
            said = refused.stdout + refused.stderr
            assert refused.returncode != 0, said
            assert "address still held by another sandbox on this node" in said, said
            assert f"UID {a.uid}" in said and f"/var/run/netns/{first}" in said, said
            assert ipv4_of(second) == []
            assert run_cni(cni, "del", second, conf_b, b, tmp_path).returncode == 0  # the runtime's cleanup
        assert ipv4_of(first) == ["10.77.1.5/24"]
        if teardown == "del":
            assert run_cni(cni, "del", first, conf_a, a, tmp_path).returncode == 0
        else:
            subprocess.run(["ip", "netns", "del", first], check=True)
        add = run_cni(cni, "add", second, conf_b, b, tmp_path)
        assert add.returncode == 0, add.stdout + add.stderr
        assert ipv4_of(second) == ["10.77.1.5/24"]
        assert run_cni(cni, "del", second, conf_b, b, tmp_path).returncode == 0


REFUSALS = ["uid", "other-node", "forged-runtime", "foreign-pod", "pending", "count-only"]


@pytest.mark.parametrize("case", REFUSALS, ids=REFUSALS)
def test_refusals_configure_nothing_and_say_why(
    case: str,
    address_pool: str,
    cni: Cni,
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
    netns: str,
    tmp_path: Path,
) -> None:
    node, uid, cap = NODE, None, None
    if case == "pending":  # ours, but no node can take it yet
        manifest = pod_manifest("wait", scheduler=SCHEDULER, nodeSelector={"ipscheduler.io/test": "none"})
        kubectl.create(manifest, ns)
        meta = kubectl.json("get", "pod", "wait", "-n", ns)["metadata"]
        pod = Pod(ns, "wait", meta["uid"], {})
        code, message = 11, "has no ipscheduler.io/pool annotation yet"
    elif case == "foreign-pod":  # another scheduler's pod, created with a bound pod's annotations
        holder = bound_pod(kubectl, ns, "holder")
        forged = pod_manifest("forged", nodeName=NODE)
        forged["metadata"]["annotations"] = {k: holder.annotations[k] for k in ANNOTATIONS}
        kubectl.create(forged, ns)
        meta = kubectl.json("get", "pod", "forged", "-n", ns)["metadata"]
        pod = Pod(ns, "forged", meta["uid"], dict(meta["annotations"]))
        code, message = 102, "no allocation for this pod"
    elif case == "count-only":
        pools.create("cni-slots", "node-3", capacity=2)
        pod = bound_pod(kubectl, ns, "slot", node="node-3")
        assert not set(ANNOTATIONS) & pod.annotations.keys()
        node, code, message = "node-3", 110, "count-only"
    else:
        pod = bound_pod(kubectl, ns, "web")
        if case == "uid":  # the pod was deleted and re-created under the same name
            uid, code, message = "0b7c0ffe-0000-4000-8000-000000000000", 100, "pod UID mismatch"
        elif case == "other-node":
            node, code, message = "node-2", 101, "pool serves another node"
        else:  # the runtime passes annotations the live pod does not carry
            cap = pod_annotations_cap(
                dataclasses.replace(pod, annotations={**pod.annotations, "ipscheduler.io/ip": "10.77.1.19"})
            )
            code, message = 106, "ipscheduler.io/ip"
    conf = conflist(cni, netns, node=node)
    add = run_cni(cni, "add", netns, conf, pod, tmp_path, cap, uid)
    assert add.returncode != 0, add.stdout
    assert message in add.stderr + add.stdout, add
    assert ipv4_of(netns) == []  # nothing configured
    if cap is None:
        err = ipam_error(cni, conf, pod, netns, uid)
        assert (err["code"], err["cniVersion"]) == (code, "1.1.0"), err
        assert message in err["msg"] + err.get("details", ""), err
    assert run_cni(cni, "del", netns, conf, pod, tmp_path, cap, uid).returncode == 0


def test_a_pod_of_another_scheduler_gets_its_address_from_the_delegate(
    address_pool: str, cni: Cni, kubectl: Kubectl, ns: str, netns: str, tmp_path: Path
) -> None:
    """``ipam.delegate`` with the reference ``host-local``: a pod without
    ``ipscheduler.io/pool`` of another scheduler (105 without a delegate) gets its address
    from host-local's range of the same subnet, outside the pool; the node ledger does not
    record it; CHECK passes; DEL frees it in host-local's store (twice: idempotent)."""
    kubectl.create(pod_manifest("system", nodeName=NODE), ns)
    meta = kubectl.json("get", "pod", "system", "-n", ns)["metadata"]
    pod = Pod(ns, "system", meta["uid"], {})
    conf = conflist(cni, netns)
    err = ipam_error(cni, conf, pod, netns)
    assert (err["code"], err["msg"]) == (105, "pod has no ipscheduler.io/pool annotation"), err

    store = tmp_path / "host-local"
    conf["plugins"][0]["ipam"]["delegate"] = {
        "type": "host-local",
        "ranges": [[{"subnet": "10.77.1.0/24", "rangeStart": "10.77.1.200", "rangeEnd": "10.77.1.250"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.77.1.1"}],
        "dataDir": str(store),
    }
    add = run_cni(cni, "add", netns, conf, pod, tmp_path)
    assert add.returncode == 0, add.stdout + add.stderr
    result = json.loads(add.stdout)
    assert [i["address"] for i in result["ips"]] == ["10.77.1.200/24"], result
    assert ipv4_of(netns) == ["10.77.1.200/24"]
    assert "default via 10.77.1.1 dev eth0" in routes_of(netns)
    held = store / conf["name"] / "10.77.1.200"
    assert held.exists()  # host-local's record of the container
    assert not (cni.ledger / "10.77.1.200").exists()  # the ledger is for underlay addresses

    check = run_cni(cni, "check", netns, conf, pod, tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    for _ in range(2):  # DEL is idempotent
        delete = run_cni(cni, "del", netns, conf, pod, tmp_path)
        assert delete.returncode == 0, delete.stdout + delete.stderr
        assert not held.exists()
    assert ipv4_of(netns) == []


def test_a_0_4_0_conflist_gets_a_0_4_0_result(
    address_pool: str, cni: Cni, kubectl: Kubectl, ns: str, netns: str, tmp_path: Path
) -> None:
    pod = bound_pod(kubectl, ns, "old-runtime")
    ip = pod.annotations["ipscheduler.io/ip"]
    conf = conflist(cni, netns, version="0.4.0")
    add = run_cni(cni, "add", netns, conf, pod, tmp_path)
    assert add.returncode == 0, add.stderr
    result = json.loads(add.stdout)
    assert result["cniVersion"] == "0.4.0"
    assert [(i["version"], i["address"]) for i in result["ips"]] == [("4", f"{ip}/24")]
    assert ipv4_of(netns) == [f"{ip}/24"]
    assert run_cni(cni, "check", netns, conf, pod, tmp_path).returncode == 0
    assert run_cni(cni, "del", netns, conf, pod, tmp_path).returncode == 0


def test_multus_users_get_the_address_through_static_ipam(
    address_pool: str, cni: Cni, kubectl: Kubectl, ns: str, netns: str, tmp_path: Path
) -> None:
    """``--multus-network underlay``: the Binding puts the address into the element's ``ips``;
    Multus would pass them to ``static`` through the ``ips`` capability, as here."""
    pod = bound_pod(
        kubectl, ns, "multi", annotations={"k8s.v1.cni.cncf.io/networks": f"{NETWORK}@net1, other"}
    )
    ip = pod.annotations["ipscheduler.io/ip"]
    elements = json.loads(pod.annotations["k8s.v1.cni.cncf.io/networks"])
    assert elements == [{"name": NETWORK, "interface": "net1", "ips": [f"{ip}/24"]}, {"name": "other"}]
    conf = conflist(cni, netns, ipam={"type": "static", "routes": [{"dst": "0.0.0.0/0", "gw": "10.77.1.1"}]})
    add = run_cni(cni, "add", netns, conf, pod, tmp_path, {"ips": elements[0]["ips"]})
    assert add.returncode == 0, add.stderr
    assert ipv4_of(netns) == [f"{ip}/24"]
    assert "default via 10.77.1.1 dev eth0" in routes_of(netns)
    assert run_cni(cni, "del", netns, conf, pod, tmp_path, {"ips": elements[0]["ips"]}).returncode == 0


def test_the_address_follows_the_pod_identity_to_its_next_pod(
    address_pool: str, cni: Cni, kubectl: Kubectl, ns: str, netns: str, tmp_path: Path
) -> None:
    """A pod with release policy Never ends; a pod of the same name gets its address back:
    ADD for the new UID gets it, with the same ``ipscheduler.io/network``, and CHECK for the
    old UID fails once the address has moved on."""
    kept = {"ipscheduler.io/release-policy": "Never"}
    old = bound_pod(kubectl, ns, "keep", annotations=kept)
    conf = conflist(cni, netns)
    assert run_cni(cni, "add", netns, conf, old, tmp_path).returncode == 0
    kubectl("delete", "pod", "keep", "-n", ns, "--wait=true")
    new = bound_pod(kubectl, ns, "keep", annotations=kept)
    assert new.uid != old.uid
    for key in ("ipscheduler.io/ip", "ipscheduler.io/pool", "ipscheduler.io/network"):
        assert new.annotations[key] == old.annotations[key], key
    check = run_cni(cni, "check", netns, conf, old, tmp_path)
    assert check.returncode != 0 and "pod UID mismatch" in check.stderr + check.stdout, check
    assert run_cni(cni, "del", netns, conf, old, tmp_path).returncode == 0
    with fresh_netns() as second:
        conf2 = conflist(cni, second)
        add = run_cni(cni, "add", second, conf2, new, tmp_path)
        assert add.returncode == 0, add.stderr
        assert ipv4_of(second) == [json.loads(new.annotations["ipscheduler.io/network"])["ips"][0]["address"]]
        assert run_cni(cni, "del", second, conf2, new, tmp_path).returncode == 0
    kubectl("delete", "pod", "keep", "-n", ns, "--wait=true")
    ip = new.annotations["ipscheduler.io/ip"]
    released = subprocess.run(  # Never: only an operator releases it (the pool can go then)
        [sys.executable, "-m", "ipscheduler", "ip", "release", ip, "--kubeconfig", str(kubectl.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert released.returncode == 0, released.stderr
