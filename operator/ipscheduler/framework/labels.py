"""Label selectors (``metav1.LabelSelector``), as ``apimachinery/pkg/labels`` and
``metav1.LabelSelectorAsSelector`` parse and match them: shared by the InterPodAffinity and
PodTopologySpread plugins (and any other that selects pods by label)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


class InvalidSelectorError(ValueError):
    """A LabelSelector that ``metav1.LabelSelectorAsSelector`` would refuse."""


@dataclass(frozen=True)
class Requirement:
    """One selector requirement (``labels.Requirement``): ``key operator values``."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """In: present with a listed value; NotIn: absent or unlisted value; Exists / DoesNotExist."""
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        if self.operator == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``: requirements ANDed, or the match-nothing selector.

    ``LabelSelector()`` matches everything (upstream ``labels.Everything()``,
    what ``{}`` parses to); ``LabelSelector(nothing=True)`` matches nothing
    (``labels.Nothing()``, what an absent/null selector parses to).
    """

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @classmethod
    def parse(cls, raw: Any) -> LabelSelector:
        """Parse a raw selector mapping; raises :class:`InvalidSelectorError` as upstream would error.

        ``None`` → nothing; ``{}`` (no matchLabels, no matchExpressions) →
        everything. ``matchLabels`` entries become ``key In (value)``.
        """
        if raw is None:
            return NOTHING
        if not isinstance(raw, Mapping):
            raise InvalidSelectorError(f"label selector is not a mapping: {raw!r}")
        match_labels = raw.get("matchLabels")
        exprs = raw.get("matchExpressions")
        match_labels = {} if match_labels is None else match_labels
        exprs = [] if exprs is None else exprs
        if not isinstance(match_labels, Mapping) or not isinstance(exprs, list):
            raise InvalidSelectorError("matchLabels must be a mapping and matchExpressions a list")
        reqs: list[Requirement] = []
        for k, v in match_labels.items():
            if not isinstance(k, str) or not k or not isinstance(v, str):
                raise InvalidSelectorError(f"invalid matchLabels entry {k!r}: {v!r}")
            reqs.append(Requirement(k, "In", frozenset({v})))
        for e in exprs:
            reqs.append(_parse_requirement(e))
        return cls(tuple(reqs))

    @property
    def empty(self) -> bool:
        """True for the match-everything selector (``Selector.Empty()``)."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def with_requirements(self, extra: Iterable[Requirement]) -> LabelSelector:
        """This selector ANDed with ``extra`` (the match-nothing selector stays as is)."""
        if self.nothing:
            return self
        return LabelSelector((*self.requirements, *extra))


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)


def _parse_requirement(expr: Any) -> Requirement:
    if not isinstance(expr, Mapping):
        raise InvalidSelectorError(f"matchExpressions entry is not a mapping: {expr!r}")
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
    values = [] if values is None else values
    if not isinstance(key, str) or not key:
        raise InvalidSelectorError(f"invalid key {key!r}")
    if not isinstance(op, str) or op not in _SELECTOR_OPERATORS:
        raise InvalidSelectorError(f"{op!r} is not a valid label selector operator")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InvalidSelectorError(f"values of {key!r} must be a list of strings")
    if op in ("In", "NotIn") and not values:
        raise InvalidSelectorError(
            f"values of {key!r}: for 'in', 'notin' operators, values set can't be empty"
        )
    if op in ("Exists", "DoesNotExist") and values:
        raise InvalidSelectorError(
            f"values of {key!r}: values set must be empty for exists and does not exist"
        )
    return Requirement(key, op, frozenset(values))


def label_selector_matches(raw: Any, labels: Mapping[str, str]) -> bool:
    """Whether the raw ``metav1.LabelSelector`` ``raw`` matches ``labels``.

    ``{}`` matches everything; ``None`` and an invalid selector match nothing.
    """
    try:
        return LabelSelector.parse(raw).matches(labels)
    except InvalidSelectorError:
        return False
