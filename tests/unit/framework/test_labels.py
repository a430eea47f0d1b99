"""framework/labels: label selectors parsed and matched as apimachinery does."""

from __future__ import annotations

from typing import Any

import pytest

from ipscheduler.framework.labels import InvalidSelectorError, LabelSelector, label_selector_matches
from tests.builders import label_selector as sel
from tests.builders import label_selector_exprs as exprs

# --------------------------------------------------------------------------- label selectors

SELECTOR_CASES: list[tuple[str, Any, dict[str, str], bool]] = [
    ("none-matches-nothing", None, {"a": "1"}, False),
    ("empty-matches-everything", {}, {}, True),
    ("null-parts-match-everything", {"matchLabels": None, "matchExpressions": None}, {}, True),
    ("match-labels", sel(a="1"), {"a": "1", "b": "2"}, True),
    ("match-labels-wrong-value", sel(a="1"), {"a": "2"}, False),
    ("match-labels-missing", sel(a="1"), {}, False),
    ("in", exprs(("a", "In", ["1", "2"])), {"a": "2"}, True),
    ("in-missing", exprs(("a", "In", ["1"])), {}, False),
    ("notin-absent-matches", exprs(("a", "NotIn", ["1"])), {}, True),
    ("notin-listed", exprs(("a", "NotIn", ["1"])), {"a": "1"}, False),
    ("exists", exprs(("a", "Exists", [])), {"a": ""}, True),
    ("exists-missing", exprs(("a", "Exists", [])), {}, False),
    ("doesnotexist", exprs(("a", "DoesNotExist", [])), {}, True),
    ("doesnotexist-present", exprs(("a", "DoesNotExist", [])), {"a": "x"}, False),
    ("anded", {**sel(a="1"), **exprs(("b", "Exists", []))}, {"a": "1"}, False),
    ("invalid-operator-matches-nothing", exprs(("a", "Gt", ["1"])), {"a": "2"}, False),
    ("in-without-values-invalid", exprs(("a", "In", [])), {"a": "x"}, False),
    ("exists-with-values-invalid", exprs(("a", "Exists", ["x"])), {"a": "x"}, False),
    ("not-a-mapping", ["a"], {"a": "x"}, False),
    ("non-string-match-label", {"matchLabels": {"a": 1}}, {"a": "1"}, False),
]


@pytest.mark.parametrize(
    ("raw", "labels", "expected"), [c[1:] for c in SELECTOR_CASES], ids=[c[0] for c in SELECTOR_CASES]
)
def test_label_selector_matches(raw: Any, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matches(raw, labels) is expected


def test_label_selector_parse_errors_and_emptiness() -> None:
    with pytest.raises(InvalidSelectorError, match="not a valid label selector operator"):
        LabelSelector.parse(exprs(("a", "Foo", ["1"])))
    assert LabelSelector.parse({}).empty
    assert not LabelSelector.parse(None).empty
    assert not LabelSelector.parse(sel(a="1")).empty
