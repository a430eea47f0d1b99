"""Command line: ``ipscheduler run | crd | explain | check | ip | --version``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys

from ipscheduler import __version__
from ipscheduler.framework.config import ConfigError, SchedulerConfiguration
from ipscheduler.underlayip.multus import MultusError, parse_network_name

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"


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
    run.add_argument(
        "--bind-concurrency",
        type=int,
        default=256,
        help="binding cycles in flight at once (kube-scheduler does not bound them; this bounds memory)",
    )
    run.add_argument(
        "--gc-interval",
        type=float,
        default=30.0,
        help="seconds between garbage-collection sweeps (more when a sweep takes over 2%% of the time)",
    )
    run.add_argument(
        "--reserved-ttl",
        type=float,
        default=60.0,
        help="seconds a Reserved allocation may stay while its pod is bound elsewhere",
    )
    run.add_argument(
        "--bound-mark-delay",
        type=float,
        default=20.0,
        help="seconds PostBind's mark of an allocation as Bound may wait to ride along with its "
        "pool's next write (group commit; nobody waits for it; at most half of --reserved-ttl)",
    )
    run.add_argument(
        "--multus-network",
        metavar="[NAMESPACE/]NAME",
        help="also put the address into the ips of this network's element of the pod's "
        "k8s.v1.cni.cncf.io/networks annotation (Multus hands it to the static IPAM plugin)",
    )
    run.add_argument(
        "--watch-timeout",
        type=float,
        default=90.0,
        help="seconds a watch (nodes, NodeIPPools, pods by node) may be down or behind before /healthz fails",
    )
    run.add_argument(
        "--health-addr", default="0.0.0.0:8080", help="host:port for /healthz and /readyz ('' disables)"
    )
    run.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="active/passive: run only while holding the lease",
    )
    run.add_argument("--leader-elect-lease-name", default="ip-scheduler")
    run.add_argument(
        "--leader-elect-namespace", default=None, help="default: the pod's namespace, else kube-system"
    )
    run.add_argument("--leader-elect-lease-duration", type=int, default=15, help="seconds")
    run.add_argument("--leader-elect-renew-deadline", type=int, default=10, help="seconds")
    run.add_argument("--leader-elect-retry-period", type=int, default=2, help="seconds")
    run.add_argument(
        "--config", help="IPSchedulerConfiguration YAML (profile plugins, weights, pluginConfig)"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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
    """``--config`` of ``run`` and ``explain``: the file, validated against the plugin registry
    (its profile names the scheduler), or else the defaults for ``--scheduler-name``.
    Raises :class:`~ipscheduler.framework.config.ConfigError` naming the offending field."""
    from ipscheduler.cmd.profiles import load_config  # the plugins: imported only when needed

    if path:
        return load_config(path)
    return SchedulerConfiguration.defaults(scheduler_name)


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
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
        logging.getLogger("kopf").setLevel(logging.INFO if args.verbose else logging.WARNING)
        logging.getLogger("aiohttp").setLevel(logging.WARNING)
        from ipscheduler.cmd import runner

        try:
            file_config = configuration(args.config, args.scheduler_name)
        except ConfigError as e:
            print(f"ipscheduler: invalid --config: {e}", file=sys.stderr)
            return 2
        if args.multus_network is not None:
            try:
                parse_network_name(args.multus_network)
            except MultusError as e:
                print(f"ipscheduler: invalid --multus-network: {e}", file=sys.stderr)
                return 2
        scheduler_name = file_config.profile.scheduler_name
        from ipscheduler.cmd.election import ElectionSettings
        from ipscheduler.cmd.options import RunConfig

        cfg = RunConfig(
            kubeconfig=args.kubeconfig,
            scheduler_name=scheduler_name,
            ip_strategy=args.ip_strategy,
            config=file_config,
            bind_concurrency=max(1, args.bind_concurrency),
            gc_interval=max(1.0, args.gc_interval),
            reserved_ttl=max(0.0, args.reserved_ttl),
            bound_mark_delay=min(max(0.0, args.bound_mark_delay), max(0.0, args.reserved_ttl) / 2),
            multus_network=args.multus_network,
            health_addr=args.health_addr,
            watch_timeout=max(1.0, args.watch_timeout),
            leader_elect=args.leader_elect,
            election=ElectionSettings(
                lease_name=args.leader_elect_lease_name,
                lease_namespace=args.leader_elect_namespace,
                lease_duration=args.leader_elect_lease_duration,
                renew_deadline=args.leader_elect_renew_deadline,
                retry_period=args.leader_elect_retry_period,
            ),
        )
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(runner.main(cfg))
        return 0
    return 2  # pragma: no cover - argparse enforces a command
