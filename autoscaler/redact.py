"""Keep secrets out of logs, events, answers and exception text.

Two layers. URLs are redacted by shape (userinfo dropped, every query value replaced) wherever they appear in free
text. And every secret the config holds is replaced *by value*, wherever it appears (a hook that echoes its token
back in an error body, a token in a URL path, a header value): ``Redactor.from_config`` collects them once at
start-up and ``install`` makes them the process's, which ``redact_text`` (and so every caller) then applies.

What counts as a secret of the config:
- every ``SecretStr`` (bearer tokens, basic passwords, the HMAC secret, the InfluxDB token, hook URLs, headers);
- in a provider's section: every value under ``headers``, every value whose key names a secret (``token``,
  ``secret``, ``password``, ``key``, ``credential``, ``auth``, ``signature``, ``cookie``);
- of every URL there (and of ``store.url``): the userinfo's password (a username is not a secret, unless it stands
  alone and is not a plain word: a token written as ``https://TOKEN@host``), every query value, the fragment, and
  every path segment that is not a plain word. **A plain word** is shorter than 8 characters, or uses one class of
  letters only (all lower or all upper case) with at most ``-``, ``_`` and ``.`` between them (``scale-out``,
  ``trigger``, ``hooks``); a segment of 8 or more characters that mixes classes (``a1b2c3d4``, ``AbCdEfGh``) or is 24 or
  more characters long is a secret. A ``{placeholder}`` splits a segment; configured pool names and actions are words.
In a request's query string (gunicorn's access lines) the ``query_token``'s parameter is masked by name, and any
value that holds a secret once percent-decoded.
Values shorter than ``MIN_SECRET`` characters are not replaced by value (replacing every ``abc`` would garble every
log line); check-config warns about credentials that short. A secret made of letters of one case only
(``postgres``, ``changeme``, words joined by ``-``, ``_`` or ``.``) is replaced only where it stands as a word of its
own, not inside a longer one: a PostgreSQL password ``postgres`` is masked in ``postgres:postgres@db`` and
``password=postgres`` but leaves ``postgresql://`` whole. Any other secret is replaced wherever it appears, inside a
longer string too.
"""
from __future__ import annotations

import html
import json
import re
from typing import Any, Iterable
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit, urlunsplit

import markupsafe
from pydantic import BaseModel, SecretStr

MASK = "**********"
MIN_SECRET = 6
_SECRET_KEY = re.compile(r"token|secret|passw|(^|_)key|credential|auth(?!ority)|signature|cookie|apikey", re.I)
# http(s) and database URLs (a PostgreSQL store.url carries its password in the userinfo or the query).
_URL = re.compile(r"\b((?:https?|postgres(?:ql)?(?:\+\w+)?)://[^\s'\"<>]+)")
_PLACEHOLDER = re.compile(r"\{[A-Za-z_]+\}")
_WORD = re.compile(r"^(?:[a-z]+|[A-Z]+)(?:[-_.](?:[a-z]+|[A-Z]+))*$")


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
    return _ACTIVE.redact(urlunsplit((parts.scheme, netloc, parts.path, query, "")))


def plain_word(segment: str) -> bool:
    """Whether a URL path segment reads as a word, not a token (the rule in this module's docstring)."""
    return len(segment) < 8 or (len(segment) < 24 and bool(_WORD.match(segment)))


def url_secrets(url: str, words: Iterable[str] = ()) -> set[str]:
    """The parts of one URL that are secrets: userinfo, query values, fragment and non-word path segments."""
    known = set(words)
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return {url}
    alone = username if username and not password and not plain_word(unquote(username)) else None
    out = {v for v in (alone, password, parts.fragment) if v}
    out |= {v for _, v in parse_qsl(parts.query, keep_blank_values=False)}
    for segment in parts.path.split("/"):
        for piece in _PLACEHOLDER.split(unquote(segment)):
            if piece and piece not in known and not plain_word(piece):
                out.add(piece)
    out |= {raw for raw in parts.path.split("/") if raw != unquote(raw) and unquote(raw) in out}
    return {v for v in out if v and v not in known and not _PLACEHOLDER.fullmatch(v)}


def _alone(word: str) -> str:
    """A pattern of ``word`` where it is not part of a longer word or identifier (``postgres`` but not
    ``postgresql`` or ``postgres_exporter``)."""
    return rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])"


class Redactor:
    """Replaces each of a fixed set of secret strings (and their JSON- and HTML-escaped forms) by ``MASK``."""

    def __init__(self, secrets: Iterable[str] = (), params: Iterable[str] = ()) -> None:
        self.params = frozenset(params)  # query parameters that carry a secret, whatever their value
        values: set[str] = set()
        for whole in secrets:  # "Bearer abc123XYZ": the token alone is a secret too, "Bearer" is not
            for secret in {whole, *(p for p in whole.split() if not plain_word(p))}:
                if len(secret) < MIN_SECRET:
                    continue
                values |= {secret, json.dumps(secret)[1:-1], html.escape(secret), html.escape(secret, quote=False),
                           str(markupsafe.escape(secret))}  # the status page's templates escape with markupsafe
        self.secrets = frozenset(values)
        ordered = sorted(self.secrets, key=len, reverse=True)  # a secret that contains another goes first
        self._pattern = re.compile("|".join(_alone(s) if _WORD.match(s) else re.escape(s) for s in ordered)) \
            if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

    def query(self, query: str) -> str:
        """A URL's raw query string with each value masked that is a secret parameter's (``params``) or that,
        decoded, holds a secret: by value alone a percent-encoded copy, or a rotated-out token, would show."""
        pieces = []
        for piece in query.split("&"):
            name, eq, value = piece.partition("=")
            plain = unquote_plus(value)
            if eq and (unquote_plus(name) in self.params or self.redact(plain) != plain):
                piece = f"{name}={MASK}"
            pieces.append(piece)
        return "&".join(pieces)

    def tree(self, value: Any) -> Any:
        """A JSON-like tree with every string redacted."""
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self.tree(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.tree(v) for v in value]
        return value

    @classmethod
    def from_config(cls, config: Any, provider_settings: Iterable[Any] = (), words: Iterable[str] = ()) -> "Redactor":
        """Every secret a validated ``Config`` holds (see the module docstring), plus the typed provider settings."""
        query_token = getattr(getattr(getattr(config, "server", None), "auth", None), "query_token", None)
        return cls(config_secrets(config, provider_settings, words), [query_token.param] if query_token else [])


def config_secrets(config: Any, provider_settings: Iterable[Any] = (), words: Iterable[str] = ()) -> set[str]:
    """The secret values of a config (its pydantic model) and of the pools' typed provider settings."""
    known = set(words) | {"scale_out", "scale_in"}
    found: set[str] = set()
    _collect(config, "", False, found, known)
    for settings in provider_settings:
        _collect(settings, "", False, found, known)
    store_url = getattr(getattr(config, "store", None), "url", "")
    if store_url and not store_url.startswith("sqlite"):  # a file path holds no secret; a server URL may
        found |= {v for v in url_secrets(store_url, known) if v in store_url.split("@")[0] or "=" + v in store_url}
    return {s for s in found if s not in known}


def _collect(node: Any, key: str, secret: bool, found: set[str], known: set[str]) -> None:
    if isinstance(node, SecretStr):
        value = node.get_secret_value()
        found.add(value)
        found |= url_secrets(value, known) if _URL.fullmatch(value) else set()
        return
    if isinstance(node, BaseModel):
        fields = dict(node) | dict(node.model_extra or {})
        for name, child in fields.items():
            _collect(child, name, secret, found, known)
        return
    if isinstance(node, dict):
        inside = secret or key.lower() == "headers"
        for name, child in node.items():
            _collect(child, str(name), inside or bool(_SECRET_KEY.search(str(name))), found, known)
        return
    if isinstance(node, (list, tuple)):
        for child in node:
            _collect(child, key, secret, found, known)
        return
    if isinstance(node, str):
        if secret or _SECRET_KEY.search(key):
            found.add(node)
        if _URL.fullmatch(node):
            found |= url_secrets(node, known)


_ACTIVE = Redactor()


def install(redactor: Redactor) -> None:
    """Make ``redactor`` the process's: ``redact_text``, the log formatters and the API answers apply it."""
    global _ACTIVE
    _ACTIVE = redactor


def active() -> Redactor:
    """The process's redactor (empty until ``install``)."""
    return _ACTIVE


def redact_text(text: str) -> str:
    """Every URL inside free text redacted, then every configured secret replaced by value."""
    return _ACTIVE.redact(_URL.sub(lambda m: redact_url(m.group(1)), text))


def redact_query(query: str) -> str:
    """A raw URL query string with the process's secret parameters and secret values masked (``Redactor.query``)."""
    return _ACTIVE.query(query)


def redact_tree(value: Any) -> Any:
    """A JSON-like tree with SecretStr shown as ``**********``, URLs redacted and configured secrets replaced."""
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if isinstance(value, dict):
        return {k: redact_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
