"""Keep secrets out of logs, events, answers and exception text."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

# http(s) and database URLs (a PostgreSQL store.url carries its password in the userinfo or the query).
_URL = re.compile(r"\b((?:https?|postgres(?:ql)?(?:\+\w+)?)://[^\s'\"<>]+)")


def redact_url(url: str) -> str:
    """The URL without credentials and with every query value replaced by ``REDACTED``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    query = "&".join(f"{kv.split('=', 1)[0]}=REDACTED" for kv in parts.query.split("&") if kv) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_text(text: str) -> str:
    """Every URL inside free text redacted (for exception messages that quote a URL)."""
    return _URL.sub(lambda m: redact_url(m.group(1)), text)


def redact_tree(value: Any) -> Any:
    """A JSON-like tree with SecretStr shown as ``**********`` and URLs redacted."""
    if isinstance(value, SecretStr):
        return "**********" if value.get_secret_value() else ""
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
