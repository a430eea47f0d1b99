"""The generic floors speak only Kubernetes (ARCHITECTURE.md): the names of what the
underlayip wing writes on pods, and its NodeIPPool resource and cluster events, live in that
wing (import-linter keeps the imports out; this keeps the literals and names out)."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "ipscheduler"
GENERIC = ("framework", "plugins", "backend", "scheduler", "kube")
OUR_ANNOTATION = re.compile(r"ipscheduler\.io/(ip|pool|network)\b")
POOL_NAME = re.compile(r"node_?ip_?pool|address_?released", re.IGNORECASE)
"""An identifier about the NodeIPPool resource or its events (prose may name them)."""


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


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_has_no_name_for_the_pool_resource_or_its_events(floor: str) -> None:
    found = []
    for path in sorted((PACKAGE / floor).glob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        found += [
            f"{path.relative_to(PACKAGE)}:{t.start[0]}: {t.string}"
            for t in tokens
            if t.type == tokenize.NAME and POOL_NAME.search(t.string)
        ]
    assert found == []


def test_the_pool_rule_would_catch_what_it_forbids() -> None:
    assert POOL_NAME.search("NODE_IP_POOL_CHANGE")
    assert POOL_NAME.search("ADDRESS_RELEASED")
    assert POOL_NAME.search("NodeIPPool")
    assert not POOL_NAME.search("NODE_ADD")


GROUP_API = re.compile(r"scheduling\.x-k8s\.io|pod-group")
"""What names the coscheduling wing's PodGroup API (its group and its label)."""


@pytest.mark.parametrize("floor", GENERIC)
def test_a_generic_floor_names_nothing_of_the_podgroup_api(floor: str) -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for path in sorted((PACKAGE / floor).glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if GROUP_API.search(line)
    ]
    assert found == []
