"""ip-scheduler installed as users install it, running as pods on real nodes.

The images are built here from the repository's Dockerfiles (``hack/images.py``, BuildKit),
imported into two real nodes of an in-cluster dev cluster (``hack/devcluster.py up
--in-cluster``: the ``kubernetes`` Service through kube-proxy, kube-scheduler beside it), and
the chart is installed with ``helm install -f <(devcluster.py values)``, as the README says.
Then, as a user would see it: both scheduler replicas Running on the real nodes and Ready by
the kubelet's own HTTPS probes, one holding the Lease, the node installer's plugin giving a
Deployment's pods the addresses ip-scheduler chose, ``/metrics`` scraped with a
ServiceAccount token, the leader's pod deleted and the other replica taking over, and
``helm uninstall`` leaving nothing of ours but the CRDs and their pools.

Root only (real nodes); in CI a cluster that cannot start fails the module. Times are printed
(``pytest -s``).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import binaries
import devcluster
import realnode
from tests.e2e.helpers import assert_check_clean
from tests.e2e.realpods import busybox_deployment
from tests.kube import Kubectl, create_namespace, wait_for

pytestmark = pytest.mark.timeout(2400)  # the first test sets up: images (cold, 6-12 min), nodes, install

REPO = Path(__file__).resolve().parents[2]
VERSION = (REPO / "VERSION").read_text().strip()
RELEASE = "ipscheduler"
NAMESPACE = "ipscheduler-system"
LEASE_DURATION = 15.0  # --leader-elect-lease-duration's default, the chart's


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (in CI the install tests must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Both images, built with ``hack/images.py`` from this checkout (``make images``)."""
    if os.geteuid() != 0:
        _fail_or_skip("building images and running real nodes needs root")
    out = tmp_path_factory.mktemp("images")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "hack" / "images.py"), "build", "--no-sbom", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if proc.returncode != 0:
        _fail_or_skip(f"make images failed: {proc.stderr[-2000:]}")
    print(f"images built in {time.monotonic() - started:.0f}s:\n{proc.stdout}")
    return [out / f"ipscheduler-{VERSION}.oci.tar", out / f"ipscheduler-ipam-{VERSION}.oci.tar"]


@pytest.fixture(scope="module")
def incluster(tmp_path_factory: pytest.TempPathFactory, images: list[Path]) -> Iterator[devcluster.Cluster]:
    """An in-cluster dev cluster with two real nodes and the images imported into both."""
    c = devcluster.Cluster(tmp_path_factory.mktemp("incluster") / "cluster", in_cluster=True)
    try:
        try:
            c.up(nodes=1, real_nodes=2)
            c.load_images(images)
        except binaries.DevclusterError as e:
            _fail_or_skip(f"an in-cluster dev cluster could not start: {e}")
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def kc(incluster: devcluster.Cluster) -> Kubectl:
    return Kubectl(incluster.kubeconfig)


def _helm(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(binaries.ensure_helm()), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, f"helm {' '.join(args)} failed: {proc.stderr}"
    return proc


def _scheduler_pods(kc: Kubectl) -> list[dict[str, Any]]:
    return list(kc.json("get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=ip-scheduler")["items"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return pod.get("metadata", {}).get("deletionTimestamp") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def _two_ready(kc: Kubectl) -> list[dict[str, Any]]:
    """The scheduler's pods once exactly two are Ready, else []."""
    pods = [p for p in _scheduler_pods(kc) if _ready(p)]
    return pods if len(pods) == 2 else []


def _holder(kc: Kubectl) -> str:
    lease = kc.json("get", "lease", "ip-scheduler", "-n", NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


def _workload(kc: Kubectl, ns: str, name: str, replicas: int) -> None:
    kc.apply(busybox_deployment(name, replicas), ns)


def _running_with_their_addresses(kc: Kubectl, ns: str, name: str, count: int) -> list[dict[str, Any]]:
    pods = [
        p
        for p in kc.json("get", "pods", "-n", ns, "-l", f"app={name}")["items"]
        if p["status"].get("phase") == "Running" and p["status"].get("podIP")
    ]
    return pods if len(pods) == count else []


@pytest.fixture(scope="module")
def installed(incluster: devcluster.Cluster, kc: Kubectl) -> Iterator[float]:
    """``helm install`` with the cluster's values; yields the seconds from the install to the
    first workload pod placed. Uninstalled at the end of the module if a test did not."""
    values = incluster.root / "values.json"
    values.write_text(json.dumps(incluster.helm_values()))
    started = time.monotonic()
    _helm(
        "install", RELEASE, str(REPO / "deploy/chart/ipscheduler"),
        "-n", NAMESPACE, "--create-namespace", "-f", str(values),
        kubeconfig=incluster.kubeconfig,
    )  # fmt: skip
    for i, layout in enumerate(incluster.real_layout(n) for n in sorted(incluster.state["real_nodes"])):
        base = layout.subnet.rsplit(".", 1)[0]
        kc.apply(
            {
                "apiVersion": "ipscheduler.io/v1alpha1",
                "kind": "NodeIPPool",
                "metadata": {"name": f"install-{i + 1}"},
                "spec": {
                    "nodeName": layout.name,
                    "addresses": [f"{base}.10-{base}.29"],
                    "subnets": [
                        {"cidr": layout.subnet, "gateway": layout.node_ip, "routes": [{"dst": "0.0.0.0/0"}]}
                    ],
                },
            }
        )
    ns = create_namespace(kc, "install-workload")
    _workload(kc, ns, "web", 1)
    wait_for(
        "the first workload pod Running", lambda: _running_with_their_addresses(kc, ns, "web", 1), timeout=300
    )
    took = time.monotonic() - started
    print(f"helm install → first pod placed and Running: {took:.1f}s")
    kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
    yield took
    subprocess.run(
        [
            str(binaries.ensure_helm()),
            "--kubeconfig",
            str(incluster.kubeconfig),
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
        ],
        capture_output=True,
        check=False,
    )


def test_two_replicas_run_on_the_real_nodes_ready_by_their_https_probes_and_one_holds_the_lease(
    incluster: devcluster.Cluster, kc: Kubectl, installed: float
) -> None:
    pods = wait_for("2 scheduler replicas Ready", lambda: _two_ready(kc), timeout=180)
    assert {p["spec"]["nodeName"] for p in pods} <= set(incluster.state["real_nodes"])
    probe = pods[0]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["scheme"] == "HTTPS" and probe["port"] in (10259, "https")
    holder = wait_for("the Lease held", lambda: _holder(kc), timeout=60)
    assert holder.split("_", 1)[0] in {p["metadata"]["name"] for p in pods}
    for layout in (incluster.real_layout(n) for n in incluster.state["real_nodes"]):
        assert str(REPO / "bin") not in map(str, layout.cni_bin)  # not the harness's copy
    cni_bin, cni_net = (
        incluster.helm_values()["cni"]["cniBinDir"],
        incluster.helm_values()["cni"]["cniNetDir"],
    )
    assert (Path(cni_bin) / "ipscheduler-ipam").is_file()
    assert (Path(cni_net) / "ipscheduler-ipam.kubeconfig").is_file()


def test_a_deployments_pods_get_the_addresses_ip_scheduler_chose_through_what_the_chart_installed(
    kc: Kubectl, installed: float
) -> None:
    ns = create_namespace(kc, "install-deployment")
    try:
        _workload(kc, ns, "app", 4)
        pods = wait_for(
            "4 pods Running", lambda: _running_with_their_addresses(kc, ns, "app", 4), timeout=180
        )
        for pod in pods:
            assert pod["status"]["podIP"] == pod["metadata"]["annotations"]["ipscheduler.io/ip"]
            assert pod["spec"]["nodeName"].startswith(realnode.PREFIX)
        assert len({p["status"]["podIP"] for p in pods}) == 4
    finally:
        kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)


def test_metrics_of_both_replicas_are_scraped_with_a_service_account_token(
    kc: Kubectl, installed: float
) -> None:
    ns = create_namespace(kc, "install-scraper")
    try:
        kc("create", "serviceaccount", "scraper", "-n", ns)
        kc(
            "create", "clusterrolebinding", f"{ns}-scraper",
            "--clusterrole=ip-scheduler-metrics-reader", f"--serviceaccount={ns}:scraper",
        )  # fmt: skip
        token = kc("create", "token", "scraper", "-n", ns).strip()
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE  # a self-signed serving cert
        for pod in _scheduler_pods(kc):
            url = f"https://{pod['status']['podIP']}:10259/metrics"
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})

            def scrape(req: urllib.request.Request = req) -> str:
                try:
                    with urllib.request.urlopen(req, context=insecure, timeout=10) as r:
                        return str(r.read().decode())
                except OSError:
                    return ""  # the delegated authorizer's first review may still be on its way

            body = wait_for(f"{url} scraped", scrape, timeout=60)
            assert "scheduler_pending_pods" in body
    finally:
        kc.run("delete", "clusterrolebinding", f"{ns}-scraper", check=False)
        kc.run("delete", "namespace", ns, "--wait=false", check=False)


def test_the_leaders_pod_deleted_the_other_replica_takes_the_lease_and_places_the_next_pods(
    kc: Kubectl, installed: float
) -> None:
    holder = wait_for("the Lease held", lambda: _holder(kc), timeout=60)
    leader = holder.split("_", 1)[0]
    started = time.monotonic()
    kc("delete", "pod", leader, "-n", NAMESPACE, "--wait=false")
    new = wait_for(
        "another replica holding the Lease",
        lambda: (h := _holder(kc)) and not h.startswith(f"{leader}_") and h,
        timeout=LEASE_DURATION * 4,
        interval=0.25,
    )
    took = time.monotonic() - started
    print(f"Lease handed from {leader} to {new.split('_', 1)[0]} in {took:.1f}s")
    ns = create_namespace(kc, "install-after-failover")
    try:
        _workload(kc, ns, "next", 2)
        pods = wait_for(
            "2 pods Running", lambda: _running_with_their_addresses(kc, ns, "next", 2), timeout=180
        )
        assert all(p["status"]["podIP"] == p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods)
    finally:
        kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)


def test_helm_upgrade_to_a_second_image_while_pods_arrive_rolls_both_replicas_and_gives_no_address_twice(
    incluster: devcluster.Cluster, kc: Kubectl, installed: float, tmp_path: Path
) -> None:
    version = f"{VERSION}-upgrade"
    proc = subprocess.run(
        [sys.executable, str(REPO / "hack/images.py"), "build", "--no-sbom", "--version", version,
         "--out", str(tmp_path), "ipscheduler"],
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    incluster.load_images([tmp_path / f"ipscheduler-{version}.oci.tar"])
    ns = create_namespace(kc, "install-upgrade")
    try:
        _workload(kc, ns, "arriving", 0)
        upgrade = subprocess.Popen(
            [str(binaries.ensure_helm()), "--kubeconfig", str(incluster.kubeconfig), "upgrade", RELEASE,
             str(REPO / "deploy/chart/ipscheduler"), "-n", NAMESPACE, "--reuse-values",
             "--set", f"image.tag={version}", "--wait", "--timeout", "5m"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        replicas = 0
        while upgrade.poll() is None or replicas < 12:  # pods keep arriving through the roll
            replicas = min(replicas + 1, 12)
            kc("scale", "deployment", "arriving", "-n", ns, f"--replicas={replicas}")
            time.sleep(1.5)
        assert upgrade.wait(timeout=300) == 0, upgrade.stdout.read() if upgrade.stdout else ""

        def rolled() -> list[dict[str, Any]]:
            pods = [p for p in _scheduler_pods(kc) if _ready(p)]
            images = {c["image"] for p in pods for c in p["spec"]["containers"]}
            return pods if len(pods) == 2 and images == {f"ipscheduler:{version}"} else []

        wait_for("both replicas rolled to the new image and Ready", rolled, timeout=180)
        pods = wait_for(
            "12 pods Running", lambda: _running_with_their_addresses(kc, ns, "arriving", 12), timeout=180
        )
        ips = [p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods]
        assert len(set(ips)) == 12
        assert all(p["status"]["podIP"] == p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods)
        assert_check_clean(kc, timeout=60)
    finally:
        kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)


def test_helm_uninstall_leaves_nothing_of_ours_but_the_crds_and_their_pools(
    incluster: devcluster.Cluster, kc: Kubectl, installed: float
) -> None:
    _helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", kubeconfig=incluster.kubeconfig)
    selector = "app.kubernetes.io/part-of=ipscheduler"
    kinds = (
        "deployments,daemonsets,services,serviceaccounts,configmaps,roles,rolebindings,poddisruptionbudgets"
    )
    cluster_kinds = (
        "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings"
    )

    def gone() -> bool:
        left = kc.json("get", kinds, "-A", "-l", selector)["items"]
        left += kc.json("get", cluster_kinds, "-l", selector)["items"]
        left += [p for p in _scheduler_pods(kc)]
        return not left

    wait_for("every object of the release gone", gone, timeout=120)
    crds = {c["metadata"]["name"] for c in kc.json("get", "crds")["items"]}
    assert "nodeippools.ipscheduler.io" in crds
    assert kc.json("get", "nodeippools")["items"], "the pools are the user's: uninstall keeps them"


def _overlay(incluster: devcluster.Cluster, folder: Path) -> Path:
    """A kustomization over ``deploy/`` for this cluster, as its user writes one: the scheduler
    on the real nodes, the node installer writing into their CNI folders."""
    values = incluster.helm_values()
    folder.mkdir(parents=True, exist_ok=True)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "ip-scheduler", "namespace": NAMESPACE},
        "spec": {
            "template": {
                "spec": {"nodeSelector": values["nodeSelector"], "tolerations": values["tolerations"]}
            }
        },
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ipscheduler-ipam", "namespace": "ipscheduler-node"},
        "spec": {
            "template": {
                "spec": {
                    "volumes": [
                        {"name": "cni-bin", "hostPath": {"path": values["cni"]["cniBinDir"]}},
                        {"name": "cni-net", "hostPath": {"path": values["cni"]["cniNetDir"]}},
                    ]
                }
            }
        },
    }
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy", folder)],
        "patches": [{"patch": json.dumps(deployment)}, {"patch": json.dumps(daemonset)}],
    }
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization, indent=2))
    return folder


def test_kubectl_apply_k_runs_the_same_workload_and_delete_k_leaves_nothing(
    incluster: devcluster.Cluster, kc: Kubectl, installed: float, tmp_path: Path
) -> None:
    """After the chart is gone: deploy/ through a kustomization of this cluster's, as
    `kubectl apply -k` users install it; `kubectl delete -k` removes every object it made."""
    overlay = _overlay(incluster, tmp_path / "overlay")
    rendered = [o for o in yaml.safe_load_all(kc("kustomize", str(overlay))) if o]
    kc("apply", "-f", str(REPO / "crds"))
    kc("apply", "-k", str(overlay))

    wait_for("2 replicas of deploy/ Ready", lambda: _two_ready(kc), timeout=180)
    ns = create_namespace(kc, "install-kustomize")
    try:
        _workload(kc, ns, "kustomized", 2)
        pods = wait_for(
            "2 pods Running", lambda: _running_with_their_addresses(kc, ns, "kustomized", 2), timeout=180
        )
        assert all(p["status"]["podIP"] == p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods)
    finally:
        kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
    kc("delete", "-k", str(overlay), "--wait=true", "--timeout=180s")

    def left() -> list[str]:
        names = []
        for obj in rendered:
            kind, meta = obj["kind"], obj["metadata"]
            args = ["get", kind, meta["name"], "--ignore-not-found", "-o", "name"]
            if meta.get("namespace"):
                args += ["-n", meta["namespace"]]
            if kc(*args).strip():
                names.append(f"{kind}/{meta['name']}")
        return names

    wait_for("every object of deploy/ gone", lambda: not left(), timeout=120)


def test_extender_mode_through_the_chart_places_pods_with_kube_scheduler_configured_as_the_notes_say(
    incluster: devcluster.Cluster, kc: Kubectl, installed: float
) -> None:
    """``mode: extender``: kube-scheduler (on the host network, as kubeadm's) gets
    deploy/extender/kube-scheduler-config.yaml's entry with the urlPrefix the chart's NOTES
    give such a kube-scheduler (the Service's ClusterIP, over HTTPS); a Deployment of the
    default scheduler requesting ipscheduler.io/underlay-ip runs with the addresses the
    extender bound."""
    values = incluster.root / "values.json"
    notes = _helm(
        "install", RELEASE, str(REPO / "deploy/chart/ipscheduler"), "-n", NAMESPACE, "--create-namespace",
        "-f", str(values), "--set", "mode=extender", kubeconfig=incluster.kubeconfig,
    ).stdout  # fmt: skip
    service = "ip-scheduler-extender"
    hint = f"kubectl -n {NAMESPACE} get service {service} -o jsonpath='{{.spec.clusterIP}}'"
    assert hint in notes and "urlPrefix: https://<CLUSTER-IP>:8888" in notes, notes
    cluster_ip = kc("-n", NAMESPACE, "get", "service", service, "-o", "jsonpath={.spec.clusterIP}").strip()
    entry = yaml.safe_load((REPO / "deploy/extender/kube-scheduler-config.yaml").read_text())["extenders"][0]
    entry["urlPrefix"] = f"https://{cluster_ip}:8888"
    assert entry["enableHTTPS"] is True and entry["tlsConfig"] == {"insecure": True}  # as the NOTES say
    wait_for(
        "the extender's leader Ready", lambda: [p for p in _scheduler_pods(kc) if _ready(p)], timeout=180
    )
    incluster.stop_component("kube-scheduler")
    scheduler = incluster.start_kube_scheduler(name="kube-scheduler-extender", extenders=[entry])
    ns = create_namespace(kc, "install-extender")
    try:
        deployment = busybox_deployment("extended", 2)
        template = deployment["spec"]["template"]
        del template["spec"]["schedulerName"]  # the default scheduler, with the extender
        resources = {"ipscheduler.io/underlay-ip": "1"}
        template["spec"]["containers"][0]["resources"] = {"requests": resources, "limits": resources}
        kc.apply(deployment, ns)
        pods = wait_for(
            "2 pods Running", lambda: _running_with_their_addresses(kc, ns, "extended", 2), timeout=180
        )
        assert all(p["status"]["podIP"] == p["metadata"]["annotations"]["ipscheduler.io/ip"] for p in pods)
        assert all(p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler" for p in pods)
    finally:
        kc.run("delete", "namespace", ns, "--wait=true", "--timeout=120s", check=False)
        scheduler.terminate()
        scheduler.wait(timeout=30)
        incluster.start_component("kube-scheduler")
        _helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", kubeconfig=incluster.kubeconfig)
