"""framework/quantity.parse_quantity: resource quantities as exact Decimals (no server)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from ipscheduler.framework.quantity import parse_quantity

# --------------------------------------------------------------------------- parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Decimal("0.1")),
        ("1Gi", Decimal(2**30)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1e-3", Decimal("0.001")),
        ("0.5", Decimal("0.5")),
        (".5", Decimal("0.5")),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("2", Decimal(2)),
        ("0", Decimal(0)),
        ("-1", Decimal(-1)),
        ("+1k", Decimal(1000)),
        ("128974848", Decimal(128974848)),
        ("129M", Decimal(129_000_000)),
        ("123Mi", Decimal(123 * 2**20)),
        ("1Ki", Decimal(1024)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1E", Decimal(10**18)),
        ("1P", Decimal(10**15)),
        ("1T", Decimal(10**12)),
        ("1G", Decimal(10**9)),
        ("1k", Decimal(1000)),
        ("500u", Decimal("0.0005")),
        ("3n", Decimal("0.000000003")),
        (4, Decimal(4)),
        (0.25, Decimal("0.25")),
    ],
    ids=repr,
)
def test_parse_quantity(text: Any, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1Gib",
        "1 Gi",
        "1gi",
        "1K",
        "1e",
        "e3",
        "1e3Gi",
        "1.5.5",
        "--1",
        "1m1",
        "Gi",
        None,
        True,
        [],
        {},
    ],
    ids=repr,
)
def test_parse_quantity_invalid(text: Any) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_parse_quantity_huge_exponent_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_quantity("1e1000000")


@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_parse_quantity_non_finite_float(value: float) -> None:
    with pytest.raises(ValueError):
        parse_quantity(value)
