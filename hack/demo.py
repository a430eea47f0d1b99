#!/usr/bin/env python3
"""`make demo`: dev cluster up, CRD and examples applied, the scheduler running.

Leaves everything running; `make down` stops the scheduler and the cluster.
Standard library only (it runs the operator as a separate process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

import devcluster  # noqa: E402


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=False
    )
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


def scheduler_pid(root: Path) -> int | None:
    """The pid in D/scheduler.pid if that process is still our scheduler."""
    try:
        pid = int((root / "scheduler.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"ipscheduler" in cmdline and b"run" in cmdline else None


def start_scheduler(root: Path, python: str, kubeconfig: Path) -> int:
    pid = scheduler_pid(root)
    if pid:
        print(f"demo: scheduler already running (pid {pid})")
        return pid
    with open(root / "scheduler.log", "ab") as log:
        proc = subprocess.Popen(
            [python, "-m", "ipscheduler", "run", "--kubeconfig", str(kubeconfig)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    (root / "scheduler.pid").write_text(str(proc.pid))
    return proc.pid


def stop_scheduler(root: Path) -> None:
    pid = scheduler_pid(root)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if scheduler_pid(root) is None or not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        print(f"demo: scheduler (pid {pid}) stopped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=devcluster.DEFAULT_DIR)
    parser.add_argument("--python", default=sys.executable, help="interpreter with ipscheduler installed")
    parser.add_argument("--down", action="store_true", help="stop the demo scheduler only")
    args = parser.parse_args()
    root = Path(args.dir).resolve()
    if args.down:
        stop_scheduler(root)
        return 0
    cluster = devcluster.Cluster(root)
    try:
        cluster.up(nodes=3)
    except devcluster.DevclusterError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 2
    kc = cluster.kubeconfig
    kubectl(kc, "apply", "-f", str(ROOT / "crds"))
    kubectl(kc, "wait", "--for=condition=Established", "crd/nodeippools.ipscheduler.io", "--timeout=60s")
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "nodeippools.yaml"))
    pid = start_scheduler(root, args.python, kc)
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "deployment.yaml"))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pods = json.loads(kubectl(kc, "get", "pods", "-l", "app=demo", "-o", "json"))["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        if pods and len(running) == len(pods):
            break
        time.sleep(1)
    print(f"\n$ kubectl --kubeconfig {kc} get nodeippools")
    print(kubectl(kc, "get", "nodeippools"), end="")
    cols = (
        "NAME:.metadata.name,STATUS:.status.phase,NODE:.spec.nodeName,"
        r"IP:.metadata.annotations.ipscheduler\.io/ip"
    )
    print(f"\n$ kubectl --kubeconfig {kc} get pods -l app=demo -o custom-columns={cols}")
    print(
        kubectl(
            kc, "get", "pods", "-l", "app=demo", "-o", f"custom-columns={cols}", "--sort-by=.spec.nodeName"
        ),
        end="",
    )
    print(
        f"\nThe scheduler (pid {pid}) keeps running; its log is {root / 'scheduler.log'}.\n"
        f"Try: kubectl --kubeconfig {kc} scale deployment demo --replicas=40   (10 stay Pending)\n"
        f"     kubectl --kubeconfig {kc} describe pod <a Pending pod>          (FailedScheduling)\n"
        f"     {args.python} -m ipscheduler explain default/<a Pending pod> --kubeconfig {kc}\n"
        "Stop everything with: make down"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
