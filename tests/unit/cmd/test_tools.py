"""cmd/tools: ``explain``, ``check``, ``ip`` and ``pools`` under ``ipscheduler`` and as the kubectl
plugin ``kubectl ipscheduler``: each reaches its tool with ``--kubeconfig``, ``--context`` and
``-n`` (before or after the command), explain finds the pod's namespace as kubectl does and
evaluates the ``--config`` profile, and a cluster that cannot be read is one line, exit 2."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from ipscheduler.cmd import cli, tools
from ipscheduler.cmd import explain as explain_module
from ipscheduler.cmd.tools import plugin_main, pod_target
from ipscheduler.framework.config import SchedulerConfiguration
from ipscheduler.underlayip import addresstool, check
from tests.builders import CUSTOM_PROFILE, config_file, kubeconfig_file

ROOT = Path(__file__).resolve().parents[3]

Calls = list[tuple[str, tuple[Any, ...]]]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Every tool replaced by one that records its arguments and answers ``<name> said``."""
    seen: Calls = []

    def fake(name: str, status: int = 0) -> Any:
        async def run(*args: Any) -> Any:
            seen.append((name, args))
            if name == "check":
                return ["pool p: team/x (u1): allocation of a pod that no longer exists"]
            return status, f"{name} said\n"

        return run

    monkeypatch.setattr(addresstool, "ip_list", fake("list"))
    monkeypatch.setattr(addresstool, "ip_show", fake("show"))
    monkeypatch.setattr(addresstool, "ip_release", fake("release", 1))
    monkeypatch.setattr(addresstool, "pools_summary", fake("pools"))
    monkeypatch.setattr(check, "live_violations", fake("check"))
    monkeypatch.setattr(explain_module, "explain", fake("explain"))
    return seen


def test_the_console_script_is_the_plugin() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-ipscheduler"] == "ipscheduler.cmd.tools:plugin_main"
    assert scripts[tools.PLUGIN] == "ipscheduler.cmd.tools:plugin_main"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["pools"], ("pools", (None, None, "table", None))),
        (
            ["pools", "--node", "node-1", "-o", "json", "--kubeconfig", "k", "--context", "c"],
            ("pools", ("k", "node-1", "json", "c")),
        ),
        (
            ["ip", "list", "-n", "team", "--phase", "Bound", "--context", "c"],
            ("list", (None, "ip-scheduler", None, None, "Bound", "table", "team", "c")),
        ),
        (["ip", "show", "10.0.0.1", "--context", "c"], ("show", (None, "ip-scheduler", "10.0.0.1", "c"))),
        (
            ["ip", "release", "fd00::1", "--kubeconfig", "k"],
            ("release", ("k", "ip-scheduler", "fd00::1", None)),
        ),
        (
            ["check", "-n", "team", "--context", "c", "--scheduler-name", "s"],
            ("check", (None, "s", "team", "c")),
        ),
        (["check"], ("check", (None, "ip-scheduler", None, None))),
    ],
    ids=["pools", "pools-flags", "ip-list-namespace", "ip-show", "ip-release", "check-namespace", "check"],
)
@pytest.mark.parametrize("entry", ["ipscheduler", "kubectl-ipscheduler"])
def test_each_command_reaches_its_tool_with_its_flags(
    calls: Calls, capsys: pytest.CaptureFixture[str], argv: list[str], expected: Any, entry: str
) -> None:
    run = cli.main if entry == "ipscheduler" else plugin_main
    status = run(argv)
    assert calls == [expected]
    out, err = capsys.readouterr()
    if expected[0] == "check":
        assert status == 1 and out.endswith("1 violation(s)\n")
    elif expected[0] == "release":
        assert status == 1 and err == "release said\n"
    else:
        assert status == 0 and out == f"{expected[0]} said\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--context", "c", "-n", "team", "ip", "list"],
            (None, "ip-scheduler", None, None, None, "table", "team", "c"),
        ),
        (
            ["--kubeconfig", "k", "ip", "list", "-n", "x"],
            ("k", "ip-scheduler", None, None, None, "table", "x", None),
        ),
        (
            ["-n", "top", "ip", "list", "-n", "sub"],
            (None, "ip-scheduler", None, None, None, "table", "sub", None),
        ),
    ],
    ids=["before-the-command", "both-places", "after-wins"],
)
def test_the_plugin_takes_the_connection_flags_before_the_command_too(
    calls: Calls, argv: list[str], expected: tuple[Any, ...]
) -> None:
    assert plugin_main(argv) == 0
    assert calls == [("list", expected)]


@pytest.mark.parametrize(
    ("pod", "namespace", "target"),
    [
        ("web-0", None, "ctx-ns/web-0"),
        ("web-0", "team", "team/web-0"),
        ("team/web-0", None, "team/web-0"),
        ("team/web-0", "team", "team/web-0"),
    ],
    ids=["context-namespace", "dash-n", "namespace-slash-pod", "both-agree"],
)
def test_pod_target(pod: str, namespace: str | None, target: str) -> None:
    assert pod_target(pod, namespace, lambda: "ctx-ns") == target


@pytest.mark.parametrize(
    ("pod", "namespace", "error"),
    [
        ("team/web-0", "other", "pod 'team/web-0' is not in namespace 'other' (-n)"),
        ("a/b/c", None, "expected POD or NAMESPACE/POD, got 'a/b/c'"),
        ("team/", None, "expected POD or NAMESPACE/POD"),
        ("/web-0", None, "expected POD or NAMESPACE/POD"),
    ],
    ids=["contradicted", "two-slashes", "no-name", "no-namespace"],
)
def test_pod_target_refuses(pod: str, namespace: str | None, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        pod_target(pod, namespace, lambda: "ctx-ns")


@pytest.mark.parametrize(
    ("argv", "target", "context"),
    [
        (["explain", "web-0"], "team-a/web-0", None),
        (["explain", "web-0", "--context", "second"], "default/web-0", "second"),
        (["explain", "web-0", "--context", "third"], "team-c/web-0", "third"),
        (["explain", "-n", "ns", "web-0", "--context", "third"], "ns/web-0", "third"),
        (["explain", "other/web-0"], "other/web-0", None),
    ],
    ids=[
        "current-context",
        "context-without-namespace",
        "context-namespace",
        "dash-n",
        "namespace-slash-pod",
    ],
)
@pytest.mark.parametrize("entry", ["ipscheduler", "kubectl-ipscheduler"])
def test_explain_finds_the_pod_in_the_namespace_kubectl_would_use(
    tmp_path: Path, calls: Calls, argv: list[str], target: str, context: str | None, entry: str
) -> None:
    path = kubeconfig_file(tmp_path, {"first": "team-a", "second": None, "third": "team-c"})
    run = cli.main if entry == "ipscheduler" else plugin_main
    assert run([*argv, "--kubeconfig", str(path)]) == 0
    [(name, (kubeconfig, got, scheduler, strategy, config, got_context))] = calls
    assert (name, kubeconfig, got, got_context) == ("explain", str(path), target, context)
    assert (scheduler, strategy) == ("ip-scheduler", "spread")
    assert config == SchedulerConfiguration.defaults("ip-scheduler")


def test_plugin_explain_evaluates_the_config_files_profile(tmp_path: Path, calls: Calls) -> None:
    """The file's plugins and weights reach the framework explain builds (its own tests:
    test_explain.py, the verdicts and the ``UnderlayIP <score>x7`` a file's weight prints)."""
    path = config_file(tmp_path, CUSTOM_PROFILE)
    assert plugin_main(["explain", "-n", "ns", "p", "--config", str(path)]) == 0
    [(_, (_, target, _, _, config, _))] = calls
    assert target == "ns/p"
    assert config.profile.scheduler_name == "custom"
    assert [r.name for r in config.profile.plugins.filter.disabled] == ["NodeUnschedulable"]
    assert [(r.name, r.weight) for r in config.profile.plugins.score.enabled] == [("UnderlayIP", 7)]


def test_explain_with_a_bad_target_or_config_exits_2(
    tmp_path: Path, calls: Calls, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plugin_main(["explain", "a/b", "-n", "c"]) == 2
    assert capsys.readouterr().err == "explain: pod 'a/b' is not in namespace 'c' (-n)\n"
    bad = config_file(tmp_path, "profiles: [{plugins: {score: {enabled: [{name: Nope}]}}}]")
    assert plugin_main(["explain", "a/b", "--config", str(bad)]) == 2
    assert "ipscheduler: invalid --config: " in capsys.readouterr().err
    assert calls == []


def test_an_unknown_context_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = kubeconfig_file(tmp_path, {"first": "team-a"})
    assert plugin_main(["explain", "p", "--kubeconfig", str(path), "--context", "nope"]) == 2
    assert capsys.readouterr().err == f"kubectl ipscheduler explain: context 'nope' not found in {path}\n"
    assert cli.main(["pools", "--kubeconfig", str(path), "--context", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ipscheduler pools: ") and "nope" in err and err.count("\n") == 1


def test_a_refusing_or_unreachable_api_server_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def forbidden(*args: Any) -> Any:
        raise ApiException(status=403, reason="Forbidden")

    async def unreachable(*args: Any) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(addresstool, "pools_summary", forbidden)
    assert plugin_main(["pools"]) == 2
    assert capsys.readouterr().err == "kubectl ipscheduler pools: the API server answered 403 Forbidden\n"
    monkeypatch.setattr(check, "live_violations", unreachable)
    assert cli.main(["check"]) == 2
    assert capsys.readouterr().err == (
        "ipscheduler check: cannot reach the API server: [Errno 111] Connection refused\n"
    )


def test_ip_needs_a_subcommand() -> None:
    with pytest.raises(SystemExit) as exit_info:
        plugin_main(["ip"])
    assert exit_info.value.code == 2
