"""Command line: ``ipscheduler run | crd | explain | check | ip | --version``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from ipscheduler import __version__
from ipscheduler.cmd import gctuning

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"


def build_parser() -> argparse.ArgumentParser:
    """The ``ipscheduler`` command line's parser (imports every command's flags)."""
    from ipscheduler.cmd import flags

    parser = argparse.ArgumentParser(prog="ipscheduler", description="An underlay-IP-aware pod scheduler.")
    parser.add_argument("--version", action="version", version=f"ipscheduler {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the scheduler (operator)")
    flags.add_run_flags(run)
    extender = sub.add_parser(
        "extender",
        help="run as kube-scheduler's extender (the filter, prioritize, bind and preempt verbs) "
        "beside the scheduler",
    )
    flags.add_extender_flags(extender)
    crd = sub.add_parser("crd", help="print a CRD generated from the models (NodeIPPool unless named)")
    crd.add_argument(
        "resource",
        nargs="?",
        default="nodeippools",
        choices=["nodeippools", "podgroups"],
        help="nodeippools (ipscheduler.io) or podgroups (scheduling.x-k8s.io, coscheduling)",
    )
    from ipscheduler.cmd import tools  # explain, check, ip, pools: also the kubectl plugin

    tools.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ipscheduler`` console script; returns the exit code."""
    if (sys.argv[1:] if argv is None else argv)[:1] in (["run"], ["extender"]):
        # Before the imports (the flags import kopf, kubernetes-asyncio and pydantic models):
        # no full collections until the caches are filled (cmd/gctuning).
        gctuning.hold()
    args = build_parser().parse_args(argv)
    from ipscheduler.cmd import flags, logs

    if args.command == "crd":
        if args.resource == "podgroups":
            from ipscheduler.coscheduling.models import crd_yaml as podgroup_crd

            sys.stdout.write(podgroup_crd())
            return 0
        from ipscheduler.underlayip.models import crd_yaml

        sys.stdout.write(crd_yaml())
        return 0
    from ipscheduler.cmd import tools

    if args.command in tools.COMMANDS:
        return tools.main(args)
    if args.command in ("run", "extender"):
        logs.configure(args.v, args.logging_format)
        from ipscheduler.cmd import runner

        try:
            cfg = flags.run_config(args)
        except flags.UsageError as e:
            print(f"ipscheduler: {e}", file=sys.stderr)
            return flags.EXIT_USAGE
        with (
            contextlib.suppress(KeyboardInterrupt),
            asyncio.Runner(loop_factory=runner.loop_factory(args.event_loop)) as loop,
        ):
            return loop.run(runner.main(cfg))
        return 0
    return 2  # pragma: no cover - argparse enforces a command
