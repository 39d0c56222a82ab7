"""Label requirements and selectors as the API server defines them (pure): node affinity, budgets, pod terms."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: (key, operator, values): a label requirement (node affinity's matchExpressions, a selector's).
Requirement = tuple[str, str, tuple[str, ...]]


def requirement_met(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """One label requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against a label set."""
    key, op, values = requirement
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])
        except ValueError:
            return False
    return False


def requirements(expressions: Any) -> tuple[Requirement, ...]:
    """matchExpressions (or matchFields) as the API sends them, as requirements."""
    return tuple((str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in e.get("values") or ()))
                 for e in expressions or ())


@dataclass(frozen=True)
class Selector:
    """A label selector: every ``matchLabels`` pair and every expression must hold (empty: every set matches)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return (all(labels.get(k) == v for k, v in self.match_labels)
                and all(requirement_met(r, labels) for r in self.match_expressions))


def selector_of(raw: Any) -> Selector | None:
    """A ``labelSelector`` as the API sends it; None for an absent one, which matches nothing (the scheduler's
    reading of a pod term or spread constraint without a selector)."""
    if raw is None:
        return None
    return Selector(tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items())),
                    requirements(raw.get("matchExpressions")))
