"""Reading fields of API objects as JSON gives them (dicts, lists, strings), where any field
may be absent, null or of the wrong type: each helper returns the value when it has the
expected type, else an empty (or default) one, so parsing never raises on a malformed
object. Shared by the pod and node parsing of ``types`` and ``resources``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a dict, else ``{}``."""
    return value if isinstance(value, dict) else {}


def as_mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping (a dict, or a read-only view of one), else ``{}``."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def as_str(value: Any, default: str = "") -> str:
    """``value`` if it is a string, else ``default``."""
    return value if isinstance(value, str) else default
