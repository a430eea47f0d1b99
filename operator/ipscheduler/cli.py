"""Command line: ``ipscheduler run | crd | --version``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from ipscheduler import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ipscheduler", description="An underlay-IP-aware pod scheduler.")
    parser.add_argument("--version", action="version", version=f"ipscheduler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the scheduler (operator)")
    run.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    run.add_argument("--scheduler-name", default="ip-scheduler", help="spec.schedulerName to serve")
    run.add_argument(
        "--ip-strategy",
        choices=("spread", "binpack"),
        default="spread",
        help="spread: prefer nodes with the most free addresses (default); binpack: the fewest",
    )
    run.add_argument("--bind-concurrency", type=int, default=16, help="binding cycles in flight at once")
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub.add_parser("crd", help="print the NodeIPPool CRD generated from the models")
    check = sub.add_parser("check", help="print every allocation invariant violation; exit 1 if any")
    check.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    check.add_argument("--scheduler-name", default="ip-scheduler")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ipscheduler`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "crd":
        from ipscheduler.models import crd_yaml

        sys.stdout.write(crd_yaml())
        return 0
    if args.command == "check":
        from ipscheduler.check import live_violations

        problems = asyncio.run(live_violations(args.kubeconfig, args.scheduler_name))
        for line in problems:
            print(line)
        print(f"{len(problems)} violation(s)" if problems else "ok: no violations")
        return 1 if problems else 0
    if args.command == "run":
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        logging.getLogger("kopf").setLevel(logging.INFO if args.verbose else logging.WARNING)
        logging.getLogger("aiohttp").setLevel(logging.WARNING)
        from ipscheduler.handlers import RunConfig, run_operator

        cfg = RunConfig(
            kubeconfig=args.kubeconfig,
            scheduler_name=args.scheduler_name,
            ip_strategy=args.ip_strategy,
            bind_concurrency=max(1, args.bind_concurrency),
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run_operator(cfg))
        return 0
    return 2  # pragma: no cover - argparse enforces a command
