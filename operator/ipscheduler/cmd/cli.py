"""Command line: ``ipscheduler run | crd | explain | check | ip | --version``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from ipscheduler import __version__
from ipscheduler.cmd import flags, logs
from ipscheduler.framework.config import ConfigError, SchedulerConfiguration

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ipscheduler", description="An underlay-IP-aware pod scheduler.")
    parser.add_argument("--version", action="version", version=f"ipscheduler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the scheduler (operator)")
    flags.add_run_flags(run)
    sub.add_parser("crd", help="print the NodeIPPool CRD generated from the models")
    ex = sub.add_parser("explain", help="dry-run one scheduling cycle for a pod: per-node filters and scores")
    ex.add_argument("pod", help="<namespace>/<name>")
    ex.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    ex.add_argument("--scheduler-name", default="ip-scheduler")
    ex.add_argument("--ip-strategy", choices=("spread", "binpack"), default="spread")
    ex.add_argument("--config", help="IPSchedulerConfiguration YAML (profile plugins, weights, pluginConfig)")
    ip = sub.add_parser("ip", help="show, list and release allocated addresses")
    ip_sub = ip.add_subparsers(dest="ip_command", required=True)
    for name, text in (
        ("show", "who holds ADDRESS: pool, node, pod and UID, phase, policy, since"),
        ("list", "every allocation, a table (or -o json)"),
        ("release", "release ADDRESS if no live pod holds it (Retained, or its pod is gone or ended)"),
    ):
        cmd = ip_sub.add_parser(name, help=text)
        if name != "list":
            cmd.add_argument("address", help="an IPv4 or IPv6 address")
        cmd.add_argument(
            "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
        )
        cmd.add_argument("--scheduler-name", default="ip-scheduler")
    ip_list = ip_sub.choices["list"]
    ip_list.add_argument("--pool", help="only this NodeIPPool")
    ip_list.add_argument("--node", help="only pools of this node")
    ip_list.add_argument("--phase", choices=("Reserved", "Bound", "Retained"), help="only this phase")
    ip_list.add_argument("-o", "--output", choices=("table", "json"), default="table")
    check = sub.add_parser("check", help="print every allocation invariant violation; exit 1 if any")
    check.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
    )
    check.add_argument("--scheduler-name", default="ip-scheduler")
    return parser


def configuration(path: str | None, scheduler_name: str) -> SchedulerConfiguration:
    """``--config`` of ``run`` and ``explain`` (:func:`ipscheduler.cmd.flags.load_configuration`)."""
    return flags.load_configuration(path, scheduler_name)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ipscheduler`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "crd":
        from ipscheduler.underlayip.models import crd_yaml

        sys.stdout.write(crd_yaml())
        return 0
    if args.command == "explain":
        from ipscheduler.cmd.explain import explain

        try:
            explained = configuration(args.config, args.scheduler_name)
        except ConfigError as e:
            print(f"ipscheduler: invalid --config: {e}", file=sys.stderr)
            return 2
        status, text = asyncio.run(
            explain(args.kubeconfig, args.pod, args.scheduler_name, args.ip_strategy, explained)
        )
        sys.stdout.write(text)
        return status
    if args.command == "ip":
        from ipscheduler.underlayip import addresstool

        if args.ip_command == "list":
            status, text = asyncio.run(
                addresstool.ip_list(
                    args.kubeconfig, args.scheduler_name, args.pool, args.node, args.phase, args.output
                )
            )
        elif args.ip_command == "show":
            status, text = asyncio.run(
                addresstool.ip_show(args.kubeconfig, args.scheduler_name, args.address)
            )
        else:
            status, text = asyncio.run(
                addresstool.ip_release(args.kubeconfig, args.scheduler_name, args.address)
            )
        (sys.stdout if status == 0 else sys.stderr).write(text)
        return status
    if args.command == "check":
        from ipscheduler.underlayip.check import live_violations

        problems = asyncio.run(live_violations(args.kubeconfig, args.scheduler_name))
        for line in problems:
            print(line)
        print(f"{len(problems)} violation(s)" if problems else "ok: no violations")
        return 1 if problems else 0
    if args.command == "run":
        logs.configure(args.v, args.logging_format)
        from ipscheduler.cmd import runner

        try:
            cfg = flags.run_config(args)
        except flags.UsageError as e:
            print(f"ipscheduler: {e}", file=sys.stderr)
            return flags.EXIT_USAGE
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(runner.main(cfg))
        return 0
    return 2  # pragma: no cover - argparse enforces a command
