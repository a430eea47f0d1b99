"""plugins/helper: what the in-tree plugins share (node selector terms)."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.plugins.helper import match_node_selector_terms
from tests.builders import node as make_node
from tests.builders import node_selector_expr as expr
from tests.builders import node_selector_term as term


def name_in(name: str) -> dict[str, Any]:
    return expr("metadata.name", "In", name)


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ([term(expr("zone", "In", "a"))], True),
        ([term(expr("zone", "In", "b"))], False),
        ([], False),
        (None, False),
        ("zone", False),
        ([{"matchExpressions": None, "matchFields": None}], False),
        ([term(fields=[name_in("n1")])], True),
    ],
    ids=["match", "no-match", "empty-list", "none", "not-a-list", "null-parts", "fields-only"],
)
def test_match_node_selector_terms(terms: Any, expected: bool) -> None:
    node = make_node(name="n1", labels={"zone": "a"})
    assert match_node_selector_terms(terms, node) is expected


def test_match_fields_ignored_for_nameless_node() -> None:
    """A nameless node has no fields upstream: matchFields cannot reject it, parse errors still do."""
    node = make_node(name="", labels={"foo": "bar"})
    assert match_node_selector_terms([term(expr("foo", "Exists"), fields=[name_in("x")])], node)
    assert not match_node_selector_terms([term(expr("foo", "Exists"), fields=[name_in("x"), {"a": 1}])], node)
