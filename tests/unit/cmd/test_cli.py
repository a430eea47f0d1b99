"""cmd/cli: ``ipscheduler ip show|list|release`` reach the address tool with their options,
and its exit status and text reach the terminal."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.cmd import cli
from ipscheduler.underlayip import addresstool


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    seen: list[tuple[str, tuple[Any, ...]]] = []

    def fake(name: str, status: int) -> Any:
        async def run(*args: Any) -> tuple[int, str]:
            seen.append((name, args))
            return status, f"{name} said\n"

        return run

    monkeypatch.setattr(addresstool, "ip_list", fake("list", 0))
    monkeypatch.setattr(addresstool, "ip_show", fake("show", 0))
    monkeypatch.setattr(addresstool, "ip_release", fake("release", 1))
    return seen


@pytest.mark.parametrize(
    ("argv", "expected", "status"),
    [
        (["ip", "show", "10.0.0.1"], ("show", (None, "ip-scheduler", "10.0.0.1", None)), 0),
        (
            ["ip", "list", "--pool", "p", "--phase", "Retained", "-o", "json", "--kubeconfig", "k"],
            ("list", ("k", "ip-scheduler", "p", None, "Retained", "json", None, None)),
            0,
        ),
        (
            ["ip", "release", "fd00::1", "--scheduler-name", "other"],
            ("release", (None, "other", "fd00::1", None)),
            1,
        ),
    ],
    ids=["show", "list-with-filters", "release"],
)
def test_ip_commands(
    argv: list[str],
    expected: tuple[str, tuple[Any, ...]],
    status: int,
    calls: list[tuple[str, tuple[Any, ...]]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(argv) == status
    assert calls == [expected]
    out, err = capsys.readouterr()
    assert (out if status == 0 else err) == f"{expected[0]} said\n"


def test_ip_needs_a_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["ip"])
    assert exit_info.value.code == 2


def test_the_run_command_imports_cryptography_only_to_generate_a_certificate() -> None:
    """Every start of ``ipscheduler run`` pays for its imports before its first bind; the
    cryptography package (0.1-0.2 s) is needed only for a self-signed certificate."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ipscheduler.cmd import cli, runner, wiring\n"
        "cli.build_parser()\n"
        "assert 'cryptography' not in sys.modules, 'imported at start'\n"
        "from ipscheduler.cmd import serving\n"
        "serving.new_certificate('x')\n"
        "assert 'cryptography' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
