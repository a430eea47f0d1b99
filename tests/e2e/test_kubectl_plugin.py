"""The kubectl plugin as a user runs it: the real kubectl finds ``kubectl-ipscheduler`` on the
PATH and runs ``kubectl ipscheduler pools | explain | ip list | check`` with ``--kubeconfig``,
``--context`` (a second context in a copy of the kubeconfig) and ``-n``; ``kubectl explain``
shows the CRD's descriptions; the API server refuses a pool above the pool-size ceiling, and
the operator marks one it cannot refuse (a range) InvalidSpec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.underlayip.models import MAX_POOL_ADDRESSES
from tests.e2e.helpers import SCHEDULER, Pools, SchedulerProcess
from tests.kube import Kubectl, pod_manifest, wait_for

BIN = Path(sys.executable).parent
"""The virtualenv's scripts: ``kubectl-ipscheduler`` is installed beside the interpreter."""


@pytest.fixture(scope="module")
def plugin_env() -> dict[str, str]:
    """The environment kubectl runs in: the virtualenv's scripts first on the PATH."""
    script = BIN / "kubectl-ipscheduler"
    assert script.is_file(), f"{script} missing: pip install -e . installs the console script"
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def plugin(
    env: dict[str, str], *args: str, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``kubectl ipscheduler ARGS [--kubeconfig K]`` through the real kubectl."""
    extra = ["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []
    return subprocess.run(
        ["kubectl", "ipscheduler", *args, *extra],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _ready(pools: Pools, name: str) -> dict[str, Any] | None:
    conds = pools.get(name).get("status", {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), None)


def _bound(kubectl: Kubectl, ns: str, name: str) -> str:
    pod = kubectl.json("get", "pod", name, "-n", ns)
    return str(pod["metadata"].get("annotations", {}).get("ipscheduler.io/ip", ""))


def test_kubectl_finds_the_plugin_and_pools_sums_up(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools, plugin_env: dict[str, str]
) -> None:
    listed = subprocess.run(
        ["kubectl", "plugin", "list"], capture_output=True, text=True, env=plugin_env, check=False
    )
    assert str(BIN / "kubectl-ipscheduler") in listed.stdout, listed.stdout + listed.stderr
    pools.create("kp-a", "node-1", ["10.93.1.1-10.93.1.3"])
    pools.create("kp-b", "node-1", ["10.93.1.11-10.93.1.12"], capacity=1)
    for name in ("kp-a", "kp-b"):
        wait_for(f"{name} Ready", lambda n=name: (_ready(pools, n) or {}).get("status") == "True")

    table = plugin(plugin_env, "pools", "--node", "node-1", kubeconfig=kubectl.kubeconfig)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "NAME",
        "NODE",
        "CAPACITY",
        "ALLOCATED",
        "FREE",
        "RETAINED",
        "RELEASING",
        "READY",
        "REASON",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["kp-a"] == ["node-1", "3", "0", "3", "0", "0", "True"]
    assert rows["kp-b"] == ["node-1", "1", "0", "1", "0", "0", "True"]
    assert rows["TOTAL"] == ["1", "node", "4", "0", "4", "0", "0", "2/2"]

    as_json = plugin(plugin_env, "pools", "-o", "json", kubeconfig=kubectl.kubeconfig)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    mine = {p["name"]: p for p in doc["pools"] if p["name"] in ("kp-a", "kp-b")}
    assert mine["kp-a"]["capacity"] == 3 and mine["kp-b"]["free"] == 1
    assert doc["total"]["capacity"] == sum(p["capacity"] for p in doc["pools"])
    assert doc["total"]["pools"] == len(doc["pools"])


def test_explain_ip_list_and_check_by_namespace_and_context(
    scheduler: SchedulerProcess,
    kubectl: Kubectl,
    pools: Pools,
    ns: str,
    namespace: str,
    plugin_env: dict[str, str],
    tmp_path: Path,
) -> None:
    pools.create("kp-c", "node-3", ["10.93.3.1-10.93.3.4"])
    pinned = {"nodeSelector": {"kubernetes.io/hostname": "node-3"}}
    kubectl.create(pod_manifest("web", scheduler=SCHEDULER, **pinned), ns)
    kubectl.create(pod_manifest("other", scheduler=SCHEDULER, **pinned), namespace)
    web_ip = wait_for("web bound", lambda: _bound(kubectl, ns, "web"))
    other_ip = wait_for("other bound", lambda: _bound(kubectl, namespace, "other"))
    kc = kubectl.kubeconfig

    explained = plugin(plugin_env, "explain", "-n", ns, "web", kubeconfig=kc)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert explained.stdout.startswith(f"Pod {ns}/web (bound to node-3;")
    assert "Would be scheduled to node-3" in explained.stdout
    missing = plugin(plugin_env, "explain", "web", kubeconfig=kc)  # the context has no namespace
    assert (missing.returncode, missing.stdout) == (2, "explain: pod default/web not found\n")

    listed = plugin(plugin_env, "ip", "list", "-n", ns, "-o", "json", kubeconfig=kc)
    assert listed.returncode == 0, listed.stderr
    assert [(r["ip"], r["pod"], r["holder"]) for r in json.loads(listed.stdout)] == [
        (web_ip, f"{ns}/web", "running")
    ]
    everything = plugin(plugin_env, "ip", "list", "--pool", "kp-c", kubeconfig=kc)
    assert {f"{ns}/web", f"{namespace}/other"} <= set(everything.stdout.split())
    checked = plugin(plugin_env, "check", "-n", ns, kubeconfig=kc)
    assert (checked.returncode, checked.stdout) == (0, "ok: no violations\n"), checked.stderr

    # A copy of the kubeconfig whose current context reaches nothing, and a second context
    # for the cluster with the namespace of "web".
    cfg = json.loads(kc.read_text())
    real = cfg["contexts"][0]["context"]
    cfg["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}})
    cfg["contexts"] = [
        {"name": "broken", "context": {**real, "cluster": "nowhere"}},
        {"name": "plugin-ctx", "context": {**real, "namespace": ns}},
    ]
    cfg["current-context"] = "broken"
    copy = tmp_path / "kubeconfig"
    copy.write_text(json.dumps(cfg))

    via_context = plugin(plugin_env, "explain", "web", "--context", "plugin-ctx", kubeconfig=copy)
    assert via_context.returncode == 0, via_context.stdout + via_context.stderr
    assert via_context.stdout.startswith(f"Pod {ns}/web (bound to node-3;")
    other = plugin(
        plugin_env, "ip", "list", "-n", namespace, "-o", "json", "--context", "plugin-ctx", kubeconfig=copy
    )
    assert [r["ip"] for r in json.loads(other.stdout)] == [other_ip], other.stderr
    before = plugin(plugin_env, "--context", "plugin-ctx", "pools", "--node", "node-3", kubeconfig=copy)
    assert before.returncode == 0 and before.stdout.splitlines()[1].split()[:2] == ["kp-c", "node-3"]
    from_env = subprocess.run(
        ["kubectl", "ipscheduler", "check", "--context", "plugin-ctx", "-n", ns],
        capture_output=True,
        text=True,
        timeout=60,
        env={**plugin_env, "KUBECONFIG": str(copy)},
        check=False,
    )
    assert (from_env.returncode, from_env.stdout) == (0, "ok: no violations\n"), from_env.stderr

    unreachable = plugin(plugin_env, "pools", kubeconfig=copy)
    assert unreachable.returncode == 2
    assert unreachable.stderr.startswith("kubectl ipscheduler pools: cannot reach the API server")
    unknown = plugin(plugin_env, "ip", "list", "--context", "nope", kubeconfig=copy)
    assert (unknown.returncode, unknown.stderr) == (
        2,
        f"kubectl ipscheduler ip: context 'nope' not found in {copy}\n",
    )


def _explained(kubectl: Kubectl, path: str) -> str | None:
    res = kubectl.run("explain", path, check=False)
    return " ".join(res.stdout.split()) if res.returncode == 0 else None


def test_kubectl_explain_describes_the_conditions(kubectl: Kubectl, crd: None) -> None:
    text = wait_for(
        "kubectl explain nodeippool.status.conditions",
        lambda: _explained(kubectl, "nodeippool.status.conditions"),
    )
    assert "The pool's conditions, one per type" in text
    for field, words in [
        ("type", "The condition's type, CamelCase"),
        ("status", "True, False or Unknown."),
        ("reason", "Why, in one CamelCase word. Ready's: Ready, or InvalidSpec"),
        ("message", "Why, for humans"),
        ("lastTransitionTime", "When status last changed (RFC 3339)."),
        ("observedGeneration", "The metadata.generation of the spec the condition was computed from."),
    ]:
        assert field in text and words in text, (field, text)
    capacity = _explained(kubectl, "nodeippool.spec.capacity") or ""
    assert f"at most {MAX_POOL_ADDRESSES}" in capacity


def test_a_pool_above_the_ceiling_is_refused_or_marked_invalid(
    scheduler: SchedulerProcess, kubectl: Kubectl, pools: Pools
) -> None:
    ceiling = MAX_POOL_ADDRESSES

    def apply(name: str, **spec: Any) -> subprocess.CompletedProcess[str]:
        body = {"apiVersion": "ipscheduler.io/v1alpha1", "kind": "NodeIPPool", "metadata": {"name": name}}
        body["spec"] = {"nodeName": "node-2", **spec}
        return kubectl.run("apply", "-f", "-", stdin=json.dumps(body), check=False)

    too_many = apply("kp-cap", capacity=ceiling + 1)
    assert too_many.returncode != 0
    assert f"spec.capacity: Invalid value: {ceiling + 1}" in too_many.stderr, too_many.stderr
    assert f"should be less than or equal to {ceiling}" in too_many.stderr
    for cidr in ("10.93.0.0/16", "fd00:93::/64"):
        refused = apply("kp-cidr", addresses=[cidr])
        assert refused.returncode != 0
        assert f"a CIDR in addresses holds more than {ceiling} addresses" in refused.stderr, refused.stderr
        assert f"set capacity to at most {ceiling}" in refused.stderr
    assert kubectl.run("get", "nodeippool", "kp-cap", "kp-cidr", check=False).returncode != 0

    pools.create("kp-capped", "node-2", ["10.93.0.0/16"], capacity=ceiling)  # capped: fine
    wait_for("kp-capped Ready", lambda: (_ready(pools, "kp-capped") or {}).get("status") == "True")
    assert pools.get("kp-capped")["status"]["capacity"] == ceiling

    pools.create("kp-range", "node-2", ["10.94.4.1-10.94.5.200"])  # 456: no CEL can count a range
    cond = wait_for("kp-range judged", lambda: _ready(pools, "kp-range"))
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert cond["message"].startswith(
        f"spec.addresses: 456 addresses (after exclude) exceed the pool-size ceiling of {ceiling}"
    )
    warned = wait_for(
        "InvalidSpec event",
        lambda: kubectl.json(
            "get",
            "events",
            "-A",
            "--field-selector",
            "involvedObject.kind=NodeIPPool,involvedObject.name=kp-range,reason=InvalidSpec",
        )["items"],
    )
    assert warned[0]["type"] == "Warning" and "pool-size ceiling" in warned[0]["message"]
