"""``ipscheduler run``'s flags: kube-scheduler's spellings, Go durations, conflicts with --config."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from ipscheduler.cmd import cli, flags
from ipscheduler.cmd.options import RunConfig
from tests.builders import config_file


def run_args(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["run", *argv])


def config_of(*argv: str) -> RunConfig:
    return flags.run_config(run_args(*argv))


def test_defaults_are_kube_schedulers() -> None:
    cfg = config_of()
    assert (cfg.scheduler_name, cfg.ip_strategy, cfg.leader_elect) == ("ip-scheduler", "spread", True)
    e = cfg.election
    assert (e.lease_name, e.lease_namespace, e.lease_duration, e.renew_deadline, e.retry_period) == (
        "ip-scheduler",
        None,
        15,
        10.0,
        2.0,
    )
    assert (cfg.gc_interval, cfg.reserved_ttl, cfg.bound_mark_delay, cfg.watch_timeout) == (30, 60, 300, 90)
    assert (cfg.kube_api_qps, cfg.kube_api_burst) == (0.0, 0)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--leader-elect"], True),
        (["--leader-elect=true"], True),
        (["--leader-elect=false"], False),
        (["--leader-elect", "false"], False),
        (["--leader-elect=0"], False),
        (["--no-leader-elect"], False),
        (["--leader-elect=false", "--leader-elect"], True),
    ],
    ids=["bare", "eq-true", "eq-false", "space-false", "zero", "no-prefix", "last-wins"],
)
def test_leader_elect_spellings(argv: list[str], expected: bool) -> None:
    assert config_of(*argv).leader_elect is expected


def test_leader_elect_refuses_a_non_boolean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        run_args("--leader-elect=maybe")
    assert e.value.code == 2
    assert "invalid boolean 'maybe'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--leader-elect-resource-name", "lease-a", "--leader-elect-resource-namespace", "ns-a"],
        ["--leader-elect-lease-name", "lease-a", "--leader-elect-namespace", "ns-a"],
    ],
    ids=["upstream-names", "old-aliases"],
)
def test_lease_name_and_namespace_and_their_old_names(argv: list[str]) -> None:
    e = config_of(*argv).election
    assert (e.lease_name, e.namespace()) == ("lease-a", "ns-a")


@pytest.mark.parametrize(
    ("flag", "text", "attr", "seconds"),
    [
        ("--gc-interval", "45s", "gc_interval", 45.0),
        ("--gc-interval", "1m30s", "gc_interval", 90.0),
        ("--gc-interval", "45", "gc_interval", 45.0),
        ("--reserved-ttl", "2m", "reserved_ttl", 120.0),
        ("--reserved-ttl", "1.5", "reserved_ttl", 1.5),
        ("--watch-timeout", "500ms", "watch_timeout", 1.0),  # at least 1 s
        ("--bound-mark-delay", "10s", "bound_mark_delay", 10.0),
        ("--bound-mark-delay", "1h", "bound_mark_delay", 3600.0),  # not capped by --reserved-ttl
        ("--bound-mark-delay", "0", "bound_mark_delay", 0.0),
    ],
    ids=[
        "go-seconds",
        "go-compound",
        "bare-seconds",
        "minutes",
        "bare-fraction",
        "floor",
        "delay",
        "delay-beyond-the-ttl",
        "no-delay",
    ],
)
def test_durations_take_go_syntax_or_bare_seconds(flag: str, text: str, attr: str, seconds: float) -> None:
    assert getattr(config_of(f"{flag}={text}"), attr) == seconds


@pytest.mark.parametrize(
    ("argv", "lease", "renew", "retry"),
    [
        (["--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s"], 30, 20.0, 2.0),
        (["--leader-elect-lease-duration=15.5", "--leader-elect-retry-period=1500ms"], 16, 10.0, 1.5),
    ],
    ids=["seconds", "lease-rounded-up"],
)
def test_election_timings(argv: list[str], lease: int, renew: float, retry: float) -> None:
    e = config_of(*argv).election
    assert (e.lease_duration, e.renew_deadline, e.retry_period) == (lease, renew, retry)


def test_a_malformed_duration_is_refused_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_args("--gc-interval=10 s")
    err = capsys.readouterr().err
    assert "--gc-interval" in err and "invalid duration '10 s'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--leader-elect-lease-duration=10s", "--leader-elect-renew-deadline=10s"],
            "--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline",
        ),
        (
            ["--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=2s"],
            "--leader-elect-renew-deadline must be greater than 1.2 x --leader-elect-retry-period",
        ),
        (["--leader-elect-retry-period=500ms"], "--leader-elect-retry-period must be at least 1s"),
        (["--kube-api-qps=-1"], "--kube-api-qps and --kube-api-burst must not be negative"),
        (["--multus-network=a/b/c"], "invalid --multus-network"),
    ],
    ids=["lease-not-above-renew", "renew-vs-retry", "retry-below-1s", "negative-qps", "multus"],
)
def test_values_kube_scheduler_would_refuse(argv: list[str], message: str) -> None:
    with pytest.raises(flags.UsageError, match=message.replace(".", r"\.")):
        config_of(*argv)


def test_election_timings_are_not_checked_without_election() -> None:
    cfg = config_of("--leader-elect=false", "--leader-elect-retry-period=500ms")
    assert cfg.leader_elect is False


def test_burst_defaults_to_twice_the_qps() -> None:
    assert (
        config_of("--kube-api-qps=50").kube_api_burst,
        config_of("--kube-api-qps=5.5").kube_api_burst,
    ) == (
        100,
        11,
    )
    assert config_of("--kube-api-qps=50", "--kube-api-burst=7").kube_api_burst == 7


@pytest.mark.parametrize(
    ("argv", "v"),
    [([], 0), (["-v=2"], 2), (["-v", "3"], 3), (["--v=5"], 5), (["-v"], 4), (["-v2"], 2)],
    ids=["default", "short-eq", "short-space", "long", "bare-is-debug", "short-joined"],
)
def test_verbosity_spellings(argv: list[str], v: int) -> None:
    assert run_args(*argv).v == v


def test_logging_format_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_args("--logging-format=json").logging_format == "json"
    with pytest.raises(SystemExit):
        run_args("--logging-format=xml")
    assert "invalid choice: 'xml'" in capsys.readouterr().err


# --------------------------------------------------------------------------- --config and the flags

PROFILE = (
    "profiles: [{schedulerName: from-file, pluginConfig: [{name: UnderlayIP, args: {strategy: binpack}}]}]"
)


@pytest.mark.parametrize(
    ("argv", "name", "strategy"),
    [
        ([], "from-file", "binpack"),
        (["--scheduler-name=from-file"], "from-file", "binpack"),
        (["--ip-strategy=binpack"], "from-file", "binpack"),
    ],
    ids=["file-only", "same-name", "same-strategy"],
)
def test_flags_that_agree_with_the_config_are_fine(
    tmp_path: Path, argv: list[str], name: str, strategy: str
) -> None:
    cfg = config_of("--config", str(config_file(tmp_path, PROFILE)), *argv)
    assert (cfg.scheduler_name, cfg.ip_strategy) == (name, strategy)
    assert cfg.config is not None and cfg.config.profile.plugin_args()["UnderlayIP"]["strategy"] == "binpack"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--scheduler-name=other"],
            "--scheduler-name other contradicts --config's profile schedulerName from-file",
        ),
        (["--ip-strategy=spread"], "--ip-strategy spread contradicts --config's UnderlayIP strategy binpack"),
    ],
    ids=["scheduler-name", "ip-strategy"],
)
def test_flags_that_contradict_the_config_are_reported(tmp_path: Path, argv: list[str], message: str) -> None:
    with pytest.raises(flags.UsageError, match=message):
        config_of("--config", str(config_file(tmp_path, PROFILE)), *argv)


def test_the_scheduler_name_flag_names_the_default_profile() -> None:
    assert config_of("--scheduler-name=mine").config.profile.scheduler_name == "mine"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "profiles: [{plugins: {filter: {disabled: [{name: UnderlayIP}]}}}]",
            "the UnderlayIP filter cannot be disabled",
        ),
        ("profiles: [{plugins: {filter: {enabled: [{name: NoSuchPlugin}]}}}]", "NoSuchPlugin"),
    ],
    ids=["underlay-ip-disabled", "unknown-plugin"],
)
def test_run_exits_2_on_a_config_it_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = config_file(tmp_path, text)
    assert cli.main(["run", "--config", str(path), "--health-addr", ""]) == flags.EXIT_USAGE == 2
    err = capsys.readouterr().err
    assert err.startswith("ipscheduler: invalid --config: ") and message in err


def test_run_exits_2_on_conflicting_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config_file(tmp_path, PROFILE)
    assert cli.main(["run", "--config", str(path), "--scheduler-name", "x"]) == 2
    assert "contradicts" in capsys.readouterr().err


def test_every_flag_has_help() -> None:
    run: Any = cli.build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    missing = [a.option_strings for a in run._actions if a.option_strings and not a.help]
    assert missing == []


def test_the_docs_list_every_flag_as_the_parser_has_it() -> None:
    """The flag table of the docs (one, in README.md or docs/*.md: docs/configuration.md) is
    :func:`flags.reference` (regenerate it with ``python -m ipscheduler.cmd.flags``)."""
    root = Path(__file__).parents[3]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    holding = [p for p in pages if flags.README_BEGIN in p.read_text(encoding="utf-8")]
    assert len(holding) == 1, f"generated flag tables in {[p.name for p in holding]}"
    text = holding[0].read_text(encoding="utf-8")
    begin, end = text.find(flags.README_BEGIN), text.find(flags.README_END)
    assert begin >= 0 and end > begin, f"{holding[0].name}: the flag table has no end"
    assert text[begin : end + len(flags.README_END)] + "\n" == flags.reference()


def test_the_reference_has_a_row_per_flag_with_go_durations() -> None:
    table = flags.reference()
    assert "| `--gc-interval` DURATION | `30s` |" in table
    assert "| `--leader-elect` BOOL | `true` |" in table
    assert "`--leader-elect-resource-name`, `--leader-elect-lease-name`" in table
    assert "--no-leader-elect`" not in table  # documented in --leader-elect's help, not a row


def test_extender_takes_runs_flags_and_where_to_listen() -> None:
    args = cli.build_parser().parse_args(
        ["extender", "--listen", "127.0.0.1:9999", "--leader-elect=false", "-v=2"]
    )
    cfg = flags.run_config(args)
    assert (cfg.extender_listen, cfg.leader_elect, args.v) == ("127.0.0.1:9999", False, 2)
    default = flags.run_config(cli.build_parser().parse_args(["extender"]))
    assert default.extender_listen == flags.DEFAULT_EXTENDER_LISTEN
    assert flags.run_config(run_args()).extender_listen is None


# --------------------------------------------------------------------------- secure serving
def test_secure_serving_defaults_are_kube_schedulers() -> None:
    cfg = config_of()
    s = cfg.secure
    assert (s.port, s.bind_address, s.address, s.tls_cert_file, s.tls_private_key_file) == (
        10259,
        "0.0.0.0",
        "0.0.0.0:10259",
        None,
        None,
    )
    assert s.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert (s.token_ttl, s.allow_ttl, s.deny_ttl) == (10.0, 10.0, 10.0)
    assert cfg.health_addr == "", "plain HTTP only when asked for"


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, str]:
    from ipscheduler.cmd.serving import new_certificate

    ca = new_certificate("ca", is_ca=True)
    cert, key = new_certificate("server", issuer=ca).write(str(tmp_path), "server")
    (tmp_path / "garbage.pem").write_text("not PEM\n")
    return {
        "CERT": cert,
        "KEY": key,
        "CA": ca.write(str(tmp_path), "ca")[0],
        "GARBAGE": str(tmp_path / "garbage.pem"),
    }


@pytest.mark.parametrize(
    ("argv", "attr", "want"),
    [
        pytest.param(["--secure-port", "0"], "port", 0, id="port-0-off"),
        pytest.param(["--secure-port", "10260"], "port", 10260, id="port"),
        pytest.param(["--bind-address", "::"], "address", "[::]:10259", id="ipv6-bind"),
        pytest.param(
            ["--tls-cert-file", "CERT", "--tls-private-key-file", "KEY"], "tls_cert_file", "CERT", id="cert"
        ),
        pytest.param(["--client-ca-file", "CA"], "client_ca_file", "CA", id="client-ca"),
        pytest.param(
            ["--authorization-always-allow-paths", "/healthz, /debug/*"],
            "always_allow_paths",
            ("/healthz", "/debug/*"),
            id="allow-paths",
        ),
        pytest.param(
            ["--authorization-always-allow-paths", ""], "always_allow_paths", (), id="allow-no-path"
        ),
        pytest.param(["--authentication-token-webhook-cache-ttl", "1m"], "token_ttl", 60.0, id="token-ttl"),
        pytest.param(
            ["--authorization-webhook-cache-authorized-ttl", "5m"], "allow_ttl", 300.0, id="allow-ttl"
        ),
        pytest.param(
            ["--authorization-webhook-cache-unauthorized-ttl", "30s"], "deny_ttl", 30.0, id="deny-ttl"
        ),
    ],
)
def test_secure_serving_flags(tls_files: dict[str, str], argv: list[str], attr: str, want: Any) -> None:
    argv = [tls_files.get(a, a) for a in argv]
    if isinstance(want, str):
        want = tls_files.get(want, want)
    assert getattr(config_of(*argv).secure, attr) == want


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--bind-address", "localhost"], "invalid --bind-address 'localhost'", id="bind-not-ip"),
        pytest.param(
            ["--tls-cert-file", "CERT"], "--tls-cert-file and --tls-private-key-file go together", id="no-key"
        ),
        pytest.param(["--tls-private-key-file", "KEY"], "go together", id="no-cert"),
        pytest.param(
            ["--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "KEY"],
            "cannot load --tls-cert-file /nonexistent.crt",
            id="missing-cert",
        ),
        pytest.param(
            ["--tls-cert-file", "KEY", "--tls-private-key-file", "CERT"],
            "cannot load --tls-cert-file",
            id="swapped",
        ),
        pytest.param(
            ["--client-ca-file", "/nonexistent-ca.crt"], "cannot load --client-ca-file", id="missing-ca"
        ),
        pytest.param(["--client-ca-file", "GARBAGE"], "cannot load --client-ca-file", id="garbage-ca"),
        pytest.param(["--health-addr", "8080"], "invalid --health-addr '8080'", id="health-addr"),
    ],
)
def test_secure_serving_flags_that_do_not_hold(
    tls_files: dict[str, str], argv: list[str], message: str
) -> None:
    with pytest.raises(flags.UsageError, match=re.escape(message)):
        config_of(*[tls_files.get(a, a) for a in argv])


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--secure-port", "65536"], id="port-too-big"),
        pytest.param(["--secure-port", "-1"], id="negative-port"),
        pytest.param(["--authorization-always-allow-paths", "healthz"], id="relative-path"),
    ],
)
def test_secure_serving_values_the_parser_refuses(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        run_args(*argv)
    assert e.value.code == flags.EXIT_USAGE
    assert argv[0] in capsys.readouterr().err


def test_a_missing_certificate_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"]
    assert cli.main(argv) == flags.EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        err.startswith("ipscheduler: cannot load --tls-cert-file /nonexistent.crt") and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    ("argv", "https", "problem"),
    [
        pytest.param([], False, None, id="plain-http-by-default"),
        pytest.param(["--enable-https"], True, None, id="https-self-signed"),
        pytest.param(["--enable-https=false"], False, None, id="https-false"),
        pytest.param(["--enable-https", "--client-ca-file", "CA"], True, None, id="mutual-tls"),
        pytest.param(["--client-ca-file", "CA"], False, "needs --enable-https", id="client-ca-without-https"),
    ],
)
def test_extender_https(tls_files: dict[str, str], argv: list[str], https: bool, problem: str | None) -> None:
    args = cli.build_parser().parse_args(["extender", *[tls_files.get(a, a) for a in argv]])
    if problem:
        with pytest.raises(flags.UsageError, match=problem):
            flags.run_config(args)
    else:
        assert flags.run_config(args).extender_https is https


@pytest.mark.parametrize(
    ("argv", "loop_module"),
    [
        pytest.param((), "uvloop", id="uvloop-by-default"),
        pytest.param(("--event-loop", "asyncio"), "asyncio", id="the-standard-librarys-on-request"),
    ],
)
def test_the_event_loop_flag_picks_the_loop_the_scheduler_runs_on(
    argv: tuple[str, ...], loop_module: str
) -> None:
    import asyncio

    from ipscheduler.cmd import runner

    args = run_args(*argv)
    with asyncio.Runner(loop_factory=runner.loop_factory(args.event_loop)) as r:

        async def which() -> str:
            return type(asyncio.get_running_loop()).__module__.split(".")[0]

        assert r.run(which()) == loop_module


def test_an_unknown_event_loop_is_refused() -> None:
    from ipscheduler.cmd import runner

    with pytest.raises(ValueError, match="unknown event loop 'trio'"):
        runner.loop_factory("trio")
    with pytest.raises(SystemExit):
        run_args("--event-loop", "trio")
