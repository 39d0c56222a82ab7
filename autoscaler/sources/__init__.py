"""One parser per sender: raw JSON in, a typed Notification out. Unknown fields are ignored."""
from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

from autoscaler.storable import MAX_LABEL, clean
from autoscaler.config.validation import one_line


class PayloadError(Exception):
    """The body is JSON but does not mean anything we can act on (answered 422)."""


def _as_text(value: Any) -> Any:
    """Numbers as senders write them in labels, as text; every text storable and bounded (``storable.MAX_LABEL``)."""
    if isinstance(value, str):
        return clean(value, MAX_LABEL)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return value


Text = Annotated[str, BeforeValidator(_as_text)]

_VALUE = re.compile(r"value=(-?[0-9.]+(?:[eE][-+]?\d+)?)")


def fingerprint_of(labels: dict[str, str]) -> str:
    """A stable fingerprint for senders that give none: a hash of the sorted labels."""
    text = "\x00".join(f"{k}\x01{v}" for k, v in sorted(labels.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_number(text: str | None) -> float | None:
    """A finite float from text such as ``95.2``; None when there is none."""
    if text is None:
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def parse_value(text: str | None) -> float | None:
    """An alert's value from text (``95.2``, ``NaN``, ``+Inf``: what Prometheus renders): kept even when not finite,
    so that routing can say why it is of no use; None when the text is no number at all."""
    if text is None:
        return None
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def value_from_value_string(text: str | None) -> float | None:
    """The first ``value=`` of Grafana's ``valueString`` (``[ var='A' labels={…} value=95.2 ]``)."""
    if not text:
        return None
    match = _VALUE.search(text)
    return parse_number(match.group(1)) if match else None


def validation_message(exc: Exception) -> str:
    """A one-line account of a pydantic ValidationError, for a person."""
    return one_line(exc)
