"""Pydantic's validation errors told to a person, the same way for the config, the API and the webhooks."""
from __future__ import annotations

from typing import Any, Iterable

from pydantic import ValidationError

_PREFIXES = ("Value error, ", "Assertion failed, ")


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
        path = location(err["loc"], prefix) or whole
        out.append(f"{path}: {message(err)}" if path else message(err))
    return out


def one_line(exc: Exception, limit: int = 5) -> str:
    """The first ``limit`` errors on one line, for an API answer (``body`` names the document itself)."""
    if not isinstance(exc, ValidationError):
        return str(exc)
    return "; ".join(problems(exc, whole="body")[:limit])
