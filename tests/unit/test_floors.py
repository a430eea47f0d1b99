"""The generic floors speak only Kubernetes (ARCHITECTURE.md): the names of what the
underlayip wing writes on pods live in that wing (import-linter keeps the imports out; this
keeps the literals out)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "ipscheduler"
GENERIC = ("framework", "plugins", "backend", "scheduler", "kube")
OUR_ANNOTATION = re.compile(r"ipscheduler\.io/(ip|pool|network)\b")


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_names_no_annotation_of_the_underlayip_wing(floor: str) -> None:
    files = sorted((PACKAGE / floor).glob("*.py"))
    assert files, f"no modules under {floor}/"
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUR_ANNOTATION.search(line)
    ]
    assert found == []
