"""Pydantic's validation errors told to a person, the same way for the config, the API and the webhooks."""
from __future__ import annotations

import re
from typing import Any, Iterable

from pydantic import ValidationError

_PREFIXES = ("Value error, ", "Assertion failed, ")
#: A model-level check names the key it is about first (``schedules[0].min: must be <= max (8)``).
_NESTED = re.compile(r"([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)", re.S)


def location(loc: Iterable[Any], prefix: str = "") -> str:
    """A dotted path with list indexes in brackets: ``pools[0].scale_out.step``."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def message(err: Any) -> str:
    """One error's message without pydantic's "Value error, " prefix."""
    msg = str(err.get("msg", "invalid"))
    for prefix in _PREFIXES:
        msg = msg.removeprefix(prefix)
    return msg


def problems(exc: ValidationError, prefix: str = "", whole: str = "") -> list[str]:
    """Every error as ``path: message``; an error about the whole document is ``whole: message`` (or the bare
    message when ``whole`` is empty)."""
    out = []
    for err in exc.errors():
        path, text = location(err["loc"], prefix), message(err)
        nested = _NESTED.fullmatch(text) if path else None
        if nested:  # one path: pools[0].schedules[0].min, not pools[0]: schedules[0].min
            path, text = f"{path}.{nested[1]}", nested[2]
        path = path or whole
        out.append(f"{path}: {text}" if path else text)
    return out


def one_line(exc: Exception, limit: int = 5) -> str:
    """The first ``limit`` errors on one line, for an API answer (``body`` names the document itself)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    return "; ".join(problems(exc, whole="body")[:limit])
