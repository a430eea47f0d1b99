"""framework/config: the profile model's own checks (those that need no registry)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ipscheduler.framework.config import ProfileConfig


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ({"filter": {"enabled": [{"name": "A"}, {"name": "A"}]}}, "plugin 'A' is listed twice in filter"),
        ({"reserve": {"enabled": [{"name": "A", "weight": 1}]}}, "weight is only valid for score plugins"),
    ],
    ids=["duplicate", "weight-off-score"],
)
def test_profile_model_refuses_without_a_registry(plugins: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ProfileConfig.model_validate({"plugins": plugins})
