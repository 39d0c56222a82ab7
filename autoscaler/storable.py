"""One rule for every text that reaches the store, the logs and the answers: what both databases can hold, bounded.

PostgreSQL's ``text`` cannot hold NUL (``\\u0000``), and neither database driver can encode a lone UTF-16
surrogate (``\\ud800``, which Python's JSON parser accepts); ``VARCHAR(n)`` refuses more than ``n`` characters on
PostgreSQL and not on SQLite. Any of those in an event written *after* a cloud call made the record fail, the dedup
claim be released, and the sender's retry act again. So every text is cleaned (those characters become U+FFFD) and
bounded here, the same way for SQLite and PostgreSQL: at the edge (the senders' label values, ``MAX_LABEL``), and
again where a row is built (each column's width from ``store/tables.py``, ``MAX_TEXT`` for unbounded ones).
"""
from __future__ import annotations

import re

MAX_LABEL = 1024  # characters of one label or annotation value (or name) a sender's alert keeps
MAX_TEXT = 4096  # characters of a reason, a pause reason or a view's detail (columns without a width)
MAX_ALERTS_LISTED = 100  # alerts an event lists; ``details.alerts_not_listed`` counts the rest

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def clean(text: str, limit: int | None = MAX_TEXT) -> str:
    """``text`` without NUL and lone surrogates (each replaced by U+FFFD), at most ``limit`` characters (the last
    one then an ellipsis)."""
    if not (text.isascii() and "\x00" not in text) and _UNSTORABLE.search(text):  # the common case: plain ASCII
        text = _UNSTORABLE.sub("\ufffd", text)
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text

