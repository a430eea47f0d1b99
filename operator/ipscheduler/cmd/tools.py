"""The operator's tools: ``ipscheduler explain | check | ip | pools``, and the same commands as
the kubectl plugin ``kubectl ipscheduler ...`` (the console script ``kubectl-ipscheduler``:
on the PATH, kubectl finds it and hands it every argument after ``ipscheduler``).

Every command takes ``--kubeconfig`` (default: $KUBECONFIG, in-cluster, ~/.kube/config) and
``--context`` (a context of that kubeconfig; default: its current one); those that concern
pods take ``-n/--namespace``:

- ``explain [NAMESPACE/]POD [-n NAMESPACE] [--config FILE]``: one scheduling cycle as a dry run
  (:mod:`ipscheduler.cmd.explain`). Without ``NAMESPACE/``, the pod is in ``-n``, else in the
  kubeconfig context's namespace, else ``default`` (as kubectl picks it).
- ``check [-n NAMESPACE]``: every invariant violation (:mod:`ipscheduler.underlayip.check`);
  with ``-n`` only those that name a pod of that namespace.
- ``ip show ADDRESS``, ``ip list [-n NAMESPACE] [--pool P] [--node N] [--phase PHASE] [-o json]``,
  ``ip release ADDRESS`` (:mod:`ipscheduler.underlayip.addresstool`); ``ip list`` without
  ``-n`` lists the allocations of every namespace (pools are cluster-scoped).
- ``pools [--node N] [-o json]``: the pools with capacity, allocated, free, retained, Ready,
  and a total line.

Exit status: that of the command (explain: 0 when some node fits, 1 when none does; check: 1
when there are violations; ip show/release: 1 when not allocated or refused), 2 on bad input
and when the cluster cannot be read (no kubeconfig, an unknown context, the API server
unreachable or refusing), with one line on stderr instead of a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException

from ipscheduler import __version__
from ipscheduler.kube.client import TRANSIENT_ERRORS, context_namespace
from ipscheduler.underlayip.models import PHASES

COMMANDS = ("explain", "check", "ip", "pools")
"""The subcommands :func:`add_commands` adds and :func:`main` runs."""
PLUGIN = "kubectl-ipscheduler"
"""The console script's name: kubectl runs it for ``kubectl ipscheduler``."""

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
CONTEXT_HELP = "the kubeconfig context to use (default: its current context)"


def _connection(parser: argparse.ArgumentParser, namespace_help: str | None, top: bool = False) -> None:
    """``--kubeconfig``, ``--context`` and, with ``namespace_help``, ``-n/--namespace``. On a
    subcommand they default to absent (``argparse.SUPPRESS``), so the plugin's own top-level
    flags (``kubectl ipscheduler --context c pools``) are not overwritten."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--kubeconfig", default=default, help=KUBECONFIG_HELP)
    parser.add_argument("--context", default=default, help=CONTEXT_HELP)
    if namespace_help is not None:
        parser.add_argument("-n", "--namespace", default=default, help=namespace_help)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``explain``, ``check``, ``ip`` (``show``, ``list``, ``release``) and ``pools`` to the
    subcommands ``sub`` (of ``ipscheduler`` and of ``kubectl ipscheduler``)."""
    ex = sub.add_parser("explain", help="dry-run one scheduling cycle for a pod: per-node filters and scores")
    ex.add_argument(
        "pod", metavar="[NAMESPACE/]POD", help="the pod, in -n's namespace unless NAMESPACE/ is given"
    )
    _connection(ex, "the pod's namespace (default: the kubeconfig context's, else default)")
    ex.add_argument("--scheduler-name", default="ip-scheduler")
    ex.add_argument("--ip-strategy", choices=("spread", "binpack"), default="spread")
    ex.add_argument(
        "--config",
        help="IPSchedulerConfiguration YAML (profile plugins, weights, pluginConfig), as run takes it",
    )
    check = sub.add_parser("check", help="print every allocation invariant violation; exit 1 if any")
    _connection(check, "only the violations that name a pod of this namespace (default: all)")
    check.add_argument("--scheduler-name", default="ip-scheduler")
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
            _connection(cmd, None)
        cmd.add_argument("--scheduler-name", default="ip-scheduler")
    ip_list = ip_sub.choices["list"]
    _connection(ip_list, "only allocations of pods in this namespace (default: every namespace)")
    ip_list.add_argument("--pool", help="only this NodeIPPool")
    ip_list.add_argument("--node", help="only pools of this node")
    ip_list.add_argument("--phase", choices=PHASES, help="only this phase")
    ip_list.add_argument("-o", "--output", choices=("table", "json"), default="table")
    pools = sub.add_parser(
        "pools", help="the NodeIPPools: capacity, allocated, free, retained, Ready; totals"
    )
    _connection(pools, None)
    pools.add_argument("--node", help="only pools of this node")
    pools.add_argument("-o", "--output", choices=("table", "json"), default="table")


def pod_target(pod: str, namespace: str | None, default_namespace: Callable[[], str]) -> str:
    """``namespace/name`` of ``explain``'s POD argument: ``NAMESPACE/POD`` as given, else
    ``POD`` in ``namespace`` (``-n``), else in ``default_namespace()`` (the kubeconfig
    context's). Raises ValueError for an empty part, more than one ``/``, or a
    ``NAMESPACE/`` that ``-n`` contradicts."""
    given, slash, name = pod.rpartition("/")
    if not name or (slash and not given) or "/" in given:
        raise ValueError(f"expected POD or NAMESPACE/POD, got {pod!r}")
    if given and namespace is not None and given != namespace:
        raise ValueError(f"pod {pod!r} is not in namespace {namespace!r} (-n)")
    return f"{given or namespace or default_namespace()}/{name}"


def main(args: argparse.Namespace) -> int:
    """Run the command ``args.command`` (one of :data:`COMMANDS`) parsed by a parser that
    :func:`add_commands` built; returns the exit status. Output goes to stdout (an ``ip``
    command's refusals to stderr); errors reading the cluster are one line on stderr, exit 2."""
    prog = "kubectl ipscheduler" if getattr(args, "plugin", False) else "ipscheduler"
    try:
        return _run(args)
    except ConfigException as e:
        print(f"{prog} {args.command}: {e}", file=sys.stderr)
    except ApiException as e:
        print(f"{prog} {args.command}: the API server answered {e.status} {e.reason}", file=sys.stderr)
    except TRANSIENT_ERRORS as e:
        print(f"{prog} {args.command}: cannot reach the API server: {e}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    kubeconfig = getattr(args, "kubeconfig", None)
    context = getattr(args, "context", None)
    namespace = getattr(args, "namespace", None)
    if args.command == "explain":
        return _explain(args, kubeconfig, context, namespace)
    if args.command == "check":
        from ipscheduler.underlayip.check import live_violations

        problems = asyncio.run(live_violations(kubeconfig, args.scheduler_name, namespace, context))
        for line in problems:
            print(line)
        print(f"{len(problems)} violation(s)" if problems else "ok: no violations")
        return 1 if problems else 0
    from ipscheduler.underlayip import addresstool

    if args.command == "pools":
        status, text = asyncio.run(addresstool.pools_summary(kubeconfig, args.node, args.output, context))
    elif args.ip_command == "list":
        status, text = asyncio.run(
            addresstool.ip_list(
                kubeconfig,
                args.scheduler_name,
                args.pool,
                args.node,
                args.phase,
                args.output,
                namespace,
                context,
            )
        )
    elif args.ip_command == "show":
        status, text = asyncio.run(
            addresstool.ip_show(kubeconfig, args.scheduler_name, args.address, context)
        )
    else:
        status, text = asyncio.run(
            addresstool.ip_release(kubeconfig, args.scheduler_name, args.address, context)
        )
    (sys.stdout if status == 0 else sys.stderr).write(text)
    return status


def _explain(
    args: argparse.Namespace, kubeconfig: str | None, context: str | None, namespace: str | None
) -> int:
    from ipscheduler.cmd import explain as explain_module
    from ipscheduler.cmd.flags import load_configuration
    from ipscheduler.framework.config import ConfigError

    try:
        target = pod_target(args.pod, namespace, lambda: context_namespace(kubeconfig, context))
    except ValueError as e:
        print(f"explain: {e}", file=sys.stderr)
        return 2
    try:
        explained = load_configuration(args.config, args.scheduler_name)
    except ConfigError as e:
        print(f"ipscheduler: invalid --config: {e}", file=sys.stderr)
        return 2
    status, text = asyncio.run(
        explain_module.explain(kubeconfig, target, args.scheduler_name, args.ip_strategy, explained, context)
    )
    sys.stdout.write(text)
    return status


def build_plugin_parser() -> argparse.ArgumentParser:
    """The parser of ``kubectl ipscheduler``: :func:`add_commands`, plus ``--kubeconfig``,
    ``--context`` and ``-n`` before the command as well as after it."""
    parser = argparse.ArgumentParser(
        prog="kubectl ipscheduler",
        description="ipscheduler's tools as a kubectl plugin: explain a pod's placement, check the "
        "allocations, show, list and release addresses, summarize the NodeIPPools.",
    )
    parser.add_argument("--version", action="version", version=f"kubectl-ipscheduler {__version__}")
    _connection(parser, "the namespace of the pods concerned (explain, check, ip list)", top=True)
    parser.set_defaults(plugin=True)
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser


def plugin_main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kubectl-ipscheduler`` console script (kubectl's plugin for
    ``kubectl ipscheduler``); returns the exit status."""
    return main(build_plugin_parser().parse_args(argv))
