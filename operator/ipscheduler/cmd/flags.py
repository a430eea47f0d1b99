"""The flags of ``ipscheduler run``, spelled and defaulted as kube-scheduler's where one exists.

kube-scheduler's own (``cmd/kube-scheduler/app/options``, component-base ``logs`` and
``leaderelection``): ``-v``/``--v``, ``--logging-format``, ``--leader-elect`` (default
true; ``--leader-elect=false``), ``--leader-elect-lease-duration``/``-renew-deadline``/
``-retry-period`` (Go durations), ``--leader-elect-resource-name``/``-namespace``/``-lock``,
``--kube-api-qps``/``--kube-api-burst``, ``--kubeconfig``, ``--config``. Durations accept
Go syntax (``15s``, ``1m30s``) or a bare number of seconds.

:func:`run_config` turns parsed flags into a :class:`~ipscheduler.cmd.options.RunConfig`
and raises :class:`UsageError` (exit status :data:`EXIT_USAGE`) on a bad value or a flag
that contradicts ``--config``.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import ssl
from typing import Any, cast

from ipscheduler.cmd import logs
from ipscheduler.cmd.election import ElectionSettings
from ipscheduler.cmd.options import RunConfig, SecureServing
from ipscheduler.cmd.serving import DEFAULT_ALWAYS_ALLOW_PATHS, DEFAULT_SECURE_PORT, server_context
from ipscheduler.framework.config import ConfigError, SchedulerConfiguration
from ipscheduler.framework.duration import format_duration, parse_duration
from ipscheduler.underlayip.args import Strategy
from ipscheduler.underlayip.multus import MultusError, parse_network_name
from ipscheduler.underlayip.publisher import RESOURCE
from ipscheduler.underlayip.teardown import DEFAULT_RELEASE_DELAY

EXIT_USAGE = 2
"""Exit status of a bad flag, an invalid ``--config`` or a flag that contradicts it."""

KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)"
DEFAULT_SCHEDULER_NAME = "ip-scheduler"
DEFAULT_STRATEGY: Strategy = "spread"

_TRUE = {"true", "t", "1", "yes", "y"}
_FALSE = {"false", "f", "0", "no", "n"}


class UsageError(Exception):
    """A flag value the scheduler cannot run with; the message names the flag."""


def _bool(text: str) -> bool:
    """Go's ``strconv.ParseBool`` spellings (``--leader-elect=false``)."""
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r} (true or false)")


def _duration(text: str) -> float:
    try:
        return parse_duration(text, bare_seconds=True)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _verbosity(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"invalid verbosity {text!r} (a number >= 0)")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"invalid port {text!r} (0 to 65535)")
    return int(text)


def _paths(text: str) -> tuple[str, ...]:
    """A comma-separated list of absolute paths (kube's ``--authorization-always-allow-paths``)."""
    paths = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in paths if not p.startswith("/")]
    if bad:
        raise argparse.ArgumentTypeError(f"paths must start with '/': {', '.join(bad)}")
    return paths


def add_run_flags(run: argparse.ArgumentParser) -> None:
    """Add every flag of ``run`` to ``run``. Flags that ``--config`` may also set
    (``--scheduler-name``, ``--ip-strategy``, ``--multus-network``) default to None, so
    :func:`run_config` can tell a flag given from a default."""
    run.add_argument("--kubeconfig", help=KUBECONFIG_HELP)
    run.add_argument(
        "--config", help="IPSchedulerConfiguration YAML (profile plugins, weights, pluginConfig)"
    )
    run.add_argument(
        "--scheduler-name",
        help=f"spec.schedulerName to serve (default {DEFAULT_SCHEDULER_NAME}; with --config: its profile's)",
    )
    run.add_argument(
        "--ip-strategy",
        choices=("spread", "binpack"),
        help="spread: prefer nodes with the most free addresses (default); binpack: the fewest",
    )
    run.add_argument(
        "--multus-network",
        metavar="[NAMESPACE/]NAME",
        help="also put the address into the ips of this network's element of the pod's "
        "k8s.v1.cni.cncf.io/networks annotation (Multus hands it to the static IPAM plugin)",
    )
    run.add_argument(
        "--bind-concurrency",
        type=int,
        default=256,
        help="binding cycles in flight at once (kube-scheduler does not bound them; this bounds memory)",
    )
    run.add_argument(
        "--gc-interval",
        type=_duration,
        default=30.0,
        metavar="DURATION",
        help="between garbage-collection sweeps (more when a sweep takes over 2%% of the time)",
    )
    run.add_argument(
        "--reserved-ttl",
        type=_duration,
        default=60.0,
        metavar="DURATION",
        help="how long a Reserved allocation may stay while its pod is bound elsewhere",
    )
    run.add_argument(
        "--bound-mark-delay",
        type=_duration,
        default=300.0,
        metavar="DURATION",
        help="how long a Bound mark waits to ride along with its pool's next write before the "
        "garbage-collection sweep writes it (batched: one write per pool; the allocation stays "
        "Reserved meanwhile, which --reserved-ttl never releases while its pod is bound with it)",
    )
    run.add_argument(
        "--release-delay",
        type=_duration,
        default=DEFAULT_RELEASE_DELAY,
        metavar="DURATION",
        help="how long the address of a pod removed without its node confirming the teardown "
        "(deleted without its grace period, or while its node was not Ready) stays Releasing once "
        "the node is Ready, before it is handed out again (at once when the node is deleted or "
        "simulated by kwok)",
    )
    run.add_argument(
        "--watch-timeout",
        type=_duration,
        default=90.0,
        metavar="DURATION",
        help="how long a watch (nodes, NodeIPPools, pods by node) may be down or behind before "
        "/healthz fails",
    )
    run.add_argument(
        "--health-addr",
        default="",
        metavar="HOST:PORT",
        help="also serve /healthz, /livez, /readyz and /metrics here over plain HTTP, no "
        "authentication, for local development only ('' off)",
    )
    run.add_argument(
        "--kube-api-qps",
        type=float,
        default=0.0,
        help="requests per second to the API server, sustained (0: no limit; kube-scheduler's "
        "default is 50, which would cap binding at well under 50 pods/s)",
    )
    run.add_argument(
        "--kube-api-burst",
        type=int,
        default=0,
        help="requests to the API server allowed at once above --kube-api-qps (default: 2 x qps)",
    )
    run.add_argument(
        "--publish-resource",
        action="store_true",
        help="keep --resource-name on the nodes in scheduler mode too (always on in extender mode)",
    )
    run.add_argument(
        "--resource-name",
        default=RESOURCE,
        help="the extended resource kept on every node with a NodeIPPool (the sum of its pools' "
        "capacity) for kube-scheduler to count (extender mode, or with --publish-resource)",
    )
    secure = run.add_argument_group("secure serving (kube-scheduler's)")
    secure.add_argument(
        "--secure-port",
        type=_port,
        default=DEFAULT_SECURE_PORT,
        help="HTTPS port of /healthz, /livez, /readyz and /metrics, with authentication and "
        "authorization (0: not served)",
    )
    secure.add_argument(
        "--bind-address",
        default="0.0.0.0",
        metavar="IP",
        help="the address --secure-port listens on (0.0.0.0 or :: for all)",
    )
    secure.add_argument(
        "--tls-cert-file",
        metavar="FILE",
        help="x509 certificate (PEM, intermediates after it) for HTTPS; with neither this nor "
        "--tls-private-key-file a self-signed one is generated in memory",
    )
    secure.add_argument(
        "--tls-private-key-file", metavar="FILE", help="the private key (PEM) of --tls-cert-file"
    )
    secure.add_argument(
        "--client-ca-file",
        metavar="FILE",
        help="CA bundle (PEM): a client certificate it signed authenticates its CN as the user, "
        "O as groups; on the extender's --enable-https port every client must present one",
    )
    secure.add_argument(
        "--authorization-always-allow-paths",
        type=_paths,
        default=DEFAULT_ALWAYS_ALLOW_PATHS,
        metavar="PATHS",
        help="comma-separated paths anyone may request without a token (a trailing * matches a prefix)",
    )
    secure.add_argument(
        "--authentication-token-webhook-cache-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long a TokenReview's answer is cached",
    )
    secure.add_argument(
        "--authorization-webhook-cache-authorized-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long an allowed SubjectAccessReview's answer is cached",
    )
    secure.add_argument(
        "--authorization-webhook-cache-unauthorized-ttl",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long a denied SubjectAccessReview's answer is cached",
    )
    elect = run.add_argument_group("leader election")
    elect.add_argument(
        "--leader-elect",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        metavar="BOOL",
        help="active/passive: schedule only while holding the Lease, release it on SIGTERM "
        "(--leader-elect=false or --no-leader-elect: run without)",
    )
    elect.add_argument("--no-leader-elect", dest="leader_elect", action="store_false", help=argparse.SUPPRESS)
    elect.add_argument(
        "--leader-elect-resource-name",
        "--leader-elect-lease-name",
        dest="leader_elect_resource_name",
        default="ip-scheduler",
        help="the Lease's name",
    )
    elect.add_argument(
        "--leader-elect-resource-namespace",
        "--leader-elect-namespace",
        dest="leader_elect_resource_namespace",
        help="the Lease's namespace (default: the pod's namespace, else kube-system)",
    )
    elect.add_argument(
        "--leader-elect-resource-lock",
        choices=("leases",),
        default="leases",
        help="the lock object (only leases, as kube-scheduler since 1.24)",
    )
    elect.add_argument(
        "--leader-elect-lease-duration",
        type=_duration,
        default=15.0,
        metavar="DURATION",
        help="how long a standby waits after the last renewal before taking the Lease (whole seconds)",
    )
    elect.add_argument(
        "--leader-elect-renew-deadline",
        type=_duration,
        default=10.0,
        metavar="DURATION",
        help="how long the leader keeps trying to renew before it gives up and exits",
    )
    elect.add_argument(
        "--leader-elect-retry-period",
        type=_duration,
        default=2.0,
        metavar="DURATION",
        help="between attempts to take or renew the Lease",
    )
    logging_group = run.add_argument_group("logging")
    logging_group.add_argument(
        "-v",
        "--v",
        dest="v",
        type=_verbosity,
        nargs="?",
        const=4,
        default=0,
        metavar="N",
        help="log verbosity, klog's levels: 2 adds binds and unschedulable attempts, 4 debug (bare -v: 4)",
    )
    run.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="uvloop",
        help="the asyncio event loop: uvloop (libuv's, less CPU per event) or asyncio (the "
        "standard library's)",
    )
    logging_group.add_argument(
        "--logging-format",
        choices=logs.FORMATS,
        default="text",
        help="text, or json: one object per line as kube-scheduler's JSON: ts (milliseconds), "
        "logger, caller, msg, v (not on errors), the fields pod, node, pool, uid, ip where they "
        "apply, err and errVerbose for an exception",
    )


EVENT_LOOPS = ("uvloop", "asyncio")
"""``--event-loop`` choices (:func:`ipscheduler.cmd.runner.loop_factory`)."""

DEFAULT_EXTENDER_LISTEN = "0.0.0.0:8888"


def add_extender_flags(extender: argparse.ArgumentParser) -> None:
    """The flags of ``extender``: every flag of ``run``, and where to serve the verbs (the
    extended resource is always published in this mode)."""
    add_run_flags(extender)
    extender.add_argument(
        "--listen",
        default=DEFAULT_EXTENDER_LISTEN,
        metavar="HOST:PORT",
        help="where kube-scheduler reaches the extender verbs (/filter, /prioritize, /bind, /preempt)",
    )
    extender.add_argument(
        "--enable-https",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="serve the verbs over HTTPS (kube-scheduler's enableHTTPS) with --tls-cert-file and "
        "--tls-private-key-file or a generated self-signed certificate; with --client-ca-file "
        "only clients presenting a certificate it signed are served",
    )


def load_configuration(path: str | None, scheduler_name: str) -> SchedulerConfiguration:
    """``--config`` of ``run`` and ``explain``: the file, validated against the plugin registry
    (its profile names the scheduler; a profile that disables UnderlayIP is refused here),
    or else the defaults for ``scheduler_name``.
    Raises :class:`~ipscheduler.framework.config.ConfigError` naming the offending field."""
    from ipscheduler.cmd.profiles import load_config  # the plugins: imported only when needed

    if path:
        return load_config(path)
    return SchedulerConfiguration.defaults(scheduler_name)


def _conflicts(args: Any, config: SchedulerConfiguration) -> list[str]:
    """Flags given on the command line that say otherwise than ``--config``."""
    out = []
    profile = config.profile
    if args.scheduler_name is not None and args.scheduler_name != profile.scheduler_name:
        out.append(
            f"--scheduler-name {args.scheduler_name} contradicts --config's profile "
            f"schedulerName {profile.scheduler_name}"
        )
    underlay = profile.plugin_args().get("UnderlayIP", {})
    for flag, key, given in (
        ("--ip-strategy", "strategy", args.ip_strategy),
        ("--multus-network", "multusNetwork", args.multus_network),
    ):
        if given is not None and key in underlay and underlay[key] != given:
            out.append(f"{flag} {given} contradicts --config's UnderlayIP {key} {underlay[key]}")
    return out


def secure_serving(args: Any, problems: list[str]) -> SecureServing:
    """The :class:`SecureServing` of parsed flags; appends to ``problems`` a bad
    ``--bind-address``, a certificate without its key (or the other way round), a file
    that cannot be read or is not PEM of its kind, and a malformed ``--health-addr``."""
    try:
        ipaddress.ip_address(args.bind_address)
    except ValueError:
        problems.append(f"invalid --bind-address {args.bind_address!r}: not an IP address")
    cert, key, ca = args.tls_cert_file, args.tls_private_key_file, args.client_ca_file
    if bool(cert) != bool(key):
        problems.append("--tls-cert-file and --tls-private-key-file go together")
    elif cert:
        try:
            server_context(cert, key)
        except (OSError, ssl.SSLError) as e:
            problems.append(f"cannot load --tls-cert-file {cert} with --tls-private-key-file {key}: {e}")
    if ca:
        try:
            ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            problems.append(f"cannot load --client-ca-file {ca}: {e}")
    if args.health_addr:
        _, sep, port = args.health_addr.rpartition(":")
        if not sep or not port.isdigit() or int(port) > 65535:
            problems.append(f"invalid --health-addr {args.health_addr!r}: expected host:port")
    https = getattr(args, "enable_https", False)
    if ca and getattr(args, "listen", None) and not https:
        problems.append("--client-ca-file in extender mode needs --enable-https (the verbs would stay open)")
    return SecureServing(
        port=args.secure_port,
        bind_address=args.bind_address,
        tls_cert_file=cert or None,
        tls_private_key_file=key or None,
        client_ca_file=ca or None,
        always_allow_paths=tuple(args.authorization_always_allow_paths),
        token_ttl=max(0.0, args.authentication_token_webhook_cache_ttl),
        allow_ttl=max(0.0, args.authorization_webhook_cache_authorized_ttl),
        deny_ttl=max(0.0, args.authorization_webhook_cache_unauthorized_ttl),
    )


def run_config(args: Any) -> RunConfig:
    """The :class:`RunConfig` of parsed ``run`` flags.

    Raises :class:`UsageError` for an invalid ``--config`` (naming the field), a flag that
    contradicts it, an invalid ``--multus-network``, leader-election timings
    kube-scheduler would refuse, a negative rate limit, or secure serving flags that do not
    hold (:func:`secure_serving`).
    """
    try:
        config = load_configuration(args.config, args.scheduler_name or DEFAULT_SCHEDULER_NAME)
    except ConfigError as e:
        raise UsageError(f"invalid --config: {e}") from None
    problems = _conflicts(args, config) if args.config else []
    if args.multus_network is not None:
        try:
            parse_network_name(args.multus_network)
        except MultusError as e:
            problems.append(f"invalid --multus-network: {e}")
    election = ElectionSettings(
        lease_name=args.leader_elect_resource_name,
        lease_namespace=args.leader_elect_resource_namespace,
        lease_duration=math.ceil(args.leader_elect_lease_duration),
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
    if args.leader_elect:
        problems += election.problems()
    secure = secure_serving(args, problems)
    if args.kube_api_qps < 0 or args.kube_api_burst < 0:
        problems.append("--kube-api-qps and --kube-api-burst must not be negative")
    if problems:
        raise UsageError("; ".join(problems))
    return RunConfig(
        kubeconfig=args.kubeconfig,
        scheduler_name=config.profile.scheduler_name,
        ip_strategy=cast(
            Strategy,
            args.ip_strategy
            or config.profile.plugin_args().get("UnderlayIP", {}).get("strategy")
            or DEFAULT_STRATEGY,
        ),
        config=config,
        bind_concurrency=max(1, args.bind_concurrency),
        gc_interval=max(1.0, args.gc_interval),
        reserved_ttl=max(0.0, args.reserved_ttl),
        bound_mark_delay=max(0.0, args.bound_mark_delay),
        release_delay=max(0.0, args.release_delay),
        multus_network=args.multus_network,
        health_addr=args.health_addr,
        secure=secure,
        extender_https=bool(getattr(args, "enable_https", False)),
        watch_timeout=max(1.0, args.watch_timeout),
        leader_elect=args.leader_elect,
        election=election,
        extender_listen=getattr(args, "listen", None),
        publish_resource=args.resource_name
        if getattr(args, "listen", None) or args.publish_resource
        else None,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst or math.ceil(2 * args.kube_api_qps),
    )


README_BEGIN = "<!-- run-flags: generated by `python -m ipscheduler.cmd.flags`; do not edit -->"
README_END = "<!-- /run-flags -->"


def _default_text(action: argparse.Action) -> str:
    default = action.default
    if default is None or default == argparse.SUPPRESS or action.option_strings[0] == "--help":
        return ""
    if action.type is _duration:
        return format_duration(float(default))
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, tuple):
        return ",".join(default)
    if default == "":
        return "''"
    return str(default)


def reference() -> str:
    """The flags of ``run`` as a Markdown table (flag, default, what), in parser order,
    between :data:`README_BEGIN` and :data:`README_END`: the README's flag list."""
    parser = argparse.ArgumentParser(prog="ipscheduler run", add_help=False)
    add_run_flags(parser)
    rows = ["| Flag | Default | What |", "|------|---------|------|"]
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.choices:
            names += " " + "\\|".join(str(c) for c in action.choices)
        elif action.metavar:
            names += f" {action.metavar}"
        default = _default_text(action)
        what = (action.help or "").replace("%%", "%").replace("|", "\\|")
        rows.append(f"| {names} | {'`' + default + '`' if default else ''} | {what} |")
    return "\n".join([README_BEGIN, *rows, README_END]) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference())
