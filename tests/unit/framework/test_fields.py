"""framework/fields: reading fields of API objects as JSON gives them, any of which may be
absent, null or of the wrong type: the value when it has the expected type, else an empty
(or default) one, never an exception."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest

from ipscheduler.framework.fields import as_dict, as_list, as_mapping, as_str

A_DICT = {"a": 1}
A_VIEW = MappingProxyType({"a": 1})
A_LIST = [1, 2]


@pytest.mark.parametrize(
    ("read", "value", "want"),
    [
        (as_dict, A_DICT, A_DICT),
        (as_dict, None, {}),
        (as_dict, A_VIEW, {}),
        (as_dict, A_LIST, {}),
        (as_dict, "a", {}),
        (as_mapping, A_DICT, A_DICT),
        (as_mapping, A_VIEW, A_VIEW),
        (as_mapping, None, {}),
        (as_mapping, [("a", 1)], {}),
        (as_list, A_LIST, A_LIST),
        (as_list, None, []),
        (as_list, (1, 2), []),
        (as_list, A_DICT, []),
        (as_list, "ab", []),
        (as_str, "x", "x"),
        (as_str, "", ""),
        (as_str, None, ""),
        (as_str, 1, ""),
        (as_str, b"x", ""),
    ],
    ids=[
        "dict",
        "dict-of-null",
        "dict-of-a-read-only-view",
        "dict-of-a-list",
        "dict-of-a-string",
        "mapping-of-a-dict",
        "mapping-of-a-read-only-view",
        "mapping-of-null",
        "mapping-of-pairs",
        "list",
        "list-of-null",
        "list-of-a-tuple",
        "list-of-a-dict",
        "list-of-a-string",
        "str",
        "empty-str",
        "str-of-null",
        "str-of-a-number",
        "str-of-bytes",
    ],
)
def test_a_field_of_the_expected_type_or_an_empty_one(
    read: Callable[[Any], Any], value: Any, want: Any
) -> None:
    got = read(value)
    assert got == want
    assert type(got) is type(want)
    if got:
        assert got is value  # the value itself, not a copy


@pytest.mark.parametrize(
    ("value", "want"),
    [(None, "n/a"), (3, "n/a"), ("x", "x"), ("", "")],
    ids=["null", "a-number", "a-string", "empty"],
)
def test_as_str_falls_back_to_its_default(value: Any, want: str) -> None:
    assert as_str(value, "n/a") == want
