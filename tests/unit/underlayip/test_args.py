"""underlayip/args: UnderlayIP's pluginConfig args over the command line's flags."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.underlayip.args import UnderlayIPArgs


@pytest.mark.parametrize(
    ("file", "flags", "want"),
    [
        ({}, (None, None), ("spread", None)),
        ({}, ("binpack", "net"), ("binpack", "net")),
        ({"strategy": "spread"}, ("binpack", None), ("spread", None)),
        ({"multusNetwork": "ns/a"}, (None, "b"), ("spread", "ns/a")),
    ],
    ids=["defaults", "flags-fill-in", "file-strategy-wins", "file-network-wins"],
)
def test_args_take_the_files_values_over_the_flags(
    file: dict[str, str], flags: tuple[Any, str | None], want: tuple[str, str | None]
) -> None:
    got = UnderlayIPArgs.model_validate(file).defaulted(*flags)
    assert (got.strategy, got.multus_network) == want


def test_args_refuse_a_network_name_multus_could_not_use() -> None:
    with pytest.raises(ValueError, match="a/b/c"):
        UnderlayIPArgs.model_validate({"multusNetwork": "a/b/c"})
