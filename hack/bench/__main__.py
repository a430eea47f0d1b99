"""The bench's command line: ``python -m hack.bench [--preset P] [--phases a,b] ...`` from the
repository's root (``make bench``). Starts a dev cluster of kwok nodes under ``--dir``, runs
the phases (:func:`.phases.run_all`), tears the cluster down (unless ``--keep``), prints the
tables and writes the JSON (and PNG) to ``--output``; exit status 1 when a row is not correct.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import devcluster
from ipscheduler.coscheduling import models as podgroups
from ipscheduler.underlayip.models import POOLS

from . import __doc__ as OVERVIEW
from . import multi, multus, report
from .phases import DEFAULT_PHASES, PHASES, run_all
from .running import FORCED_EVERY, MAX_RUNNING_PODS, RUNNING_PODS

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {
    "tiny": (10, 10, 80),
    "small": (100, 20, 1000),
    "large": (1000, 20, 10000),
    "xlarge": (5000, 20, 20000),
}
"""preset → (nodes, addresses per node, pods)."""
BACKLOG_PODS = {"tiny": 80, "small": 1000, "large": 5000, "xlarge": 20000}
"""preset → pods pending before a backlog or failover phase starts its scheduler."""
NODE_LEASE_SECONDS = {"xlarge": 240}
"""preset → kwok node lease duration (default 40 s, the kubelet's). kwok renews each lease
every quarter of it: 5000 nodes at 40 s are 500 lease PUTs/s, more than a 2-core API server
serves beside the phases; at 240 s, 83/s. The same cluster serves every phase, so all
phases have the same background."""


def parser() -> argparse.ArgumentParser:
    """The bench's options (``--help``)."""
    p = argparse.ArgumentParser(prog="python -m hack.bench", description=OVERVIEW.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--nodes", type=int, help="override the preset's node count")
    p.add_argument("--capacity", type=int, help="override the preset's addresses per node")
    p.add_argument("--pods", type=int, help="override the preset's pod count")
    p.add_argument("--rate", type=float, help="steady arrival in pods/s (default: all at once)")
    p.add_argument("--dir", default=".bench/cluster", help="dev cluster folder")
    p.add_argument("--python", default=sys.executable, help="interpreter that has ipscheduler installed")
    p.add_argument("--output", default="bench-results/bench.json", help="JSON result (PNG beside it)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running")
    p.add_argument(
        "--phases",
        type=lambda v: set(v.split(",")),
        default=set(DEFAULT_PHASES),
        help=f"comma-separated subset of {','.join(PHASES)} (default: all but running and "
        f"{','.join(multus.MULTUS_PHASES)}, which need root, and {','.join(multi.MULTI_PHASES)}, "
        "asked for by name)",
    )
    p.add_argument(
        "--running-pods",
        type=int,
        default=RUNNING_PODS,
        help=f"pods of the running phase, on one real node (default {RUNNING_PODS}, "
        f"at most {MAX_RUNNING_PODS})",
    )
    p.add_argument(
        "--running-interface-pods",
        type=int,
        default=multus.INTERFACE_PODS,
        help=f"pods of each running-interfaces phase, on one real node with Multus (default "
        f"{multus.INTERFACE_PODS}, at most {multus.MAX_INTERFACE_PODS})",
    )
    p.add_argument(
        "--running-forced-every",
        type=int,
        default=FORCED_EVERY,
        metavar="N",
        help=f"force-delete every N-th pod of the running phase (default {FORCED_EVERY}: a third; 0: none)",
    )
    p.add_argument(
        "--backlog-pods",
        type=int,
        help="pods pending before a backlog or failover phase (default: per preset)",
    )
    p.add_argument(
        "--profile",
        help="py-spy profile (collapsed stacks, flamegraph.pl input) of ip-scheduler during one phase "
        "(needs the 'profile' extra: pip install -e '.[profile]')",
    )
    p.add_argument(
        "--profile-phase", default="ours", help="the phase --profile records (ours or backlog-ours)"
    )
    p.add_argument(
        "--scheduler-arg", action="append", default=[], help="extra argument for ipscheduler run (repeatable)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the bench with the options ``argv`` (default: the command line's); 0 when every row
    is correct, 1 otherwise. Raises SystemExit on a bad option."""
    p = parser()
    args = p.parse_args(argv)
    if unknown := args.phases - set(PHASES):
        p.error(f"unknown phase(s) {','.join(sorted(unknown))}; phases: {','.join(PHASES)}")
    if not 1 <= args.running_pods <= MAX_RUNNING_PODS:
        p.error(f"--running-pods must be within 1..{MAX_RUNNING_PODS} (the kubelet's maxPods)")
    if not 1 <= args.running_interface_pods <= multus.MAX_INTERFACE_PODS:
        p.error(
            f"--running-interface-pods must be within 1..{multus.MAX_INTERFACE_PODS} (the kubelet's maxPods)"
        )
    if args.profile and not Path(sys.executable).with_name("py-spy").exists():
        p.error(f"--profile needs py-spy beside {sys.executable}: pip install -e '.[profile]'")
    n, c, pods = PRESETS[args.preset]
    shape = (args.nodes or n, args.capacity or c, args.pods or pods)
    if why := multi.problem(args.phases, shape[0], shape[2]):
        p.error(why)
    backlog = args.backlog_pods or BACKLOG_PODS[args.preset]
    arrival = f"steady {args.rate}/s" if args.rate else "all at once"
    print(
        f"# bench: {shape[0]} nodes x {shape[1]} addresses, {shape[2]} pods, {arrival}; "
        f"backlog {backlog} pods"
        + (f"; running: {args.running_pods} pods on one real node" if "running" in args.phases else ""),
        file=sys.stderr,
    )
    cluster = devcluster.Cluster(
        Path(args.dir), NODE_LEASE_SECONDS.get(args.preset, devcluster.NODE_LEASE_SECONDS)
    )
    try:
        cluster.up(nodes=shape[0])
        kc = str(cluster.kubeconfig)
        subprocess.run(["kubectl", "--kubeconfig", kc, "apply", "-f", str(ROOT / "crds")], check=True)
        subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                kc,
                "wait",
                "--for=condition=Established",
                f"crd/{POOLS.plural}.{POOLS.group}",
                f"crd/{podgroups.PLURAL}.{podgroups.GROUP}",
            ],
            check=True,
        )
        results, extra = asyncio.run(run_all(args, cluster, shape, backlog))
    finally:
        if not args.keep:
            cluster.down()
    text = report.summary(results, extra, shape[0], args.running_pods)
    if text:
        print(text)
    run = {
        "preset": args.preset,
        "nodes": shape[0],
        "capacity": shape[1],
        "pods": shape[2],
        "rate": args.rate,
        "backlog_pods": backlog,
        "running_pods": args.running_pods if "running" in args.phases else None,
        "running_interface_pods": (
            args.running_interface_pods if args.phases & set(multus.MULTUS_PHASES) else None
        ),
    }
    doc = report.document(run, results, extra)
    report.write(doc, Path(args.output))
    return 0 if report.all_correct(doc) else 1


if __name__ == "__main__":
    sys.exit(main())
