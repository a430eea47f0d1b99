"""Kubernetes resource quantities (``resource.Quantity``) as exact Decimals.

Format from ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go``:
a signed decimal number, optionally in exponent form (``1e3``), followed by a
binary suffix (Ki, Mi, Gi, Ti, Pi, Ei), a decimal SI suffix (n, u, m, k, M,
G, T, P, E) or nothing.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def parse_quantity(value: Any) -> Decimal:
    """Parse ``value`` (str, int or float) into a Decimal in base units.

    ``"100m"`` → 0.1 (cpu cores), ``"1Gi"`` → 1073741824 (bytes).
    Raises ValueError on anything that is not a valid quantity.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        result = Decimal(str(value))
        if not result.is_finite():
            raise ValueError(f"invalid quantity {value!r}")
        return result
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}")
    m = _RE.match(value.strip())
    if not m:
        raise ValueError(f"invalid quantity {value!r}")
    number, exponent, suffix = m.groups()
    try:
        base = Decimal(number)
        if exponent:
            exp = int(exponent[1:])
            if abs(exp) > 100:
                raise ValueError(f"quantity {value!r} is out of range")
            return base * Decimal(10) ** exp
        suffix = suffix or ""
        return base * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])
    except (ArithmeticError, ValueError) as e:
        raise ValueError(f"invalid quantity {value!r}") from e


def to_units(resource: str, value: Decimal) -> int:
    """The scheduler's integer unit of ``value``: ``Quantity.MilliValue()`` for ``cpu``
    (millicores), ``Quantity.Value()`` otherwise (bytes, counts); both rounded up, as
    upstream's ``framework.Resource`` holds them (``pkg/scheduler/framework/types.go``)."""
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)
