"""hack/bench/__main__.py: the command line refuses what it cannot run before it starts a
cluster."""

from __future__ import annotations

import pytest

from bench import __main__ as cli


class _NoCluster:
    def __init__(self, *args: object) -> None:
        raise AssertionError("a cluster was started")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--phases", "ours,nope"], "unknown phase(s) nope; phases: ours,restart,"),
        (["--running-pods", "0"], "--running-pods must be within 1..110 (the kubelet's maxPods)"),
        (["--running-pods", "111"], "--running-pods must be within 1..110"),
        (["--running-interface-pods", "0"], "--running-interface-pods must be within 1..110"),
        (["--running-interface-pods", "111"], "--running-interface-pods must be within 1..110"),
        (["--preset", "huge"], "invalid choice: 'huge'"),
        (
            ["--phases", "dualstack-dual", "--nodes", "2", "--pods", "1000"],
            "dualstack-dual: at most 224 pods per node, not 500",
        ),
    ],
    ids=[
        "unknown-phase",
        "no-running-pods",
        "more-than-max-pods",
        "no-interface-pods",
        "more-than-max-interface-pods",
        "unknown-preset",
        "pools-too-big",
    ],
)
def test_a_bad_option_is_a_usage_error_before_any_cluster_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    monkeypatch.setattr(cli.devcluster, "Cluster", _NoCluster)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m hack.bench ")
    assert message in err
