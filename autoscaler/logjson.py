"""Log lines that cannot be forged and hold no secret: ``LOG_FORMAT=json`` (one JSON object per line, for the
app's and gunicorn's loggers alike) and the plain key=value text format.

Text: every interpolated field has its control characters escaped (newline, CR, ESC, NUL, every other C0 and C1
control, DEL, U+2028/U+2029, and the bidirectional overrides, isolates and marks that make a terminal show text in
another order than it was written), so an alert name or a label cannot start a line of its own or disguise one.
JSON: ``json.dumps`` escapes C0 controls; U+0085, U+2028 and U+2029 (line breaks to some readers) and the bidi
controls are escaped too. Both apply the
process's redactor (``autoscaler.redact``) to the finished line.
"""
from __future__ import annotations

import json
import logging
import os
import re
from datetime import datetime, timezone
from typing import Any

from autoscaler.redact import redact_text

TEXT_FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
#: The cloud SDKs' and HTTP clients' loggers: each logs every request (azure-core's HttpLoggingPolicy with its
#: headers, at INFO), so they say only warnings unless the operator asks for DEBUG (``quiet_sdks``).
SDK_LOGGERS = ("azure", "msal", "alibabacloud", "botocore", "boto3", "google.auth", "google.api_core", "urllib3",
               "kubernetes.client.rest")
#: Bidirectional controls (Unicode's Bidi_Control: ALM, LRM, RLM, the embeddings and overrides, the isolates).
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
_JSON_BREAKS = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def json_logs() -> bool:
    """Whether ``LOG_FORMAT=json`` asks for JSON log lines (read here only)."""
    return os.environ.get("LOG_FORMAT", "").lower() == "json"


def escape_controls(text: str) -> str:
    """Control characters as visible escapes (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _CONTROL.sub(lambda m: _NAMED.get(m.group(0)) or
                        (f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100 else f"\\u{ord(m.group(0)):04x}"),
                        text)


def escape_lines(text: str) -> str:
    """Text for a terminal (the CLI's tables, messages and errors): each line's control characters escaped, the
    newlines between lines kept, so nothing a sender wrote can move the cursor, erase rows or retitle a window."""
    return "\n".join(escape_controls(line) for line in text.split("\n"))


class TextFormatter(logging.Formatter):
    """The key=value text line with every interpolated field escaped and every secret redacted."""

    def __init__(self, fmt: str = TEXT_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def format(self, record: logging.LogRecord) -> str:
        safe = logging.makeLogRecord(record.__dict__)
        safe.msg, safe.args = escape_controls(record.getMessage()), None  # the whole line: no field starts one
        safe.name = escape_controls(safe.name)
        return redact_text(super().format(safe))


class JsonFormatter(logging.Formatter):
    """A record as one JSON line; a message that is itself a JSON object (a decision) is merged in."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
        }
        merged = False
        if message.startswith("{"):
            try:
                fields = json.loads(message)
            except ValueError:
                fields = None
            if isinstance(fields, dict):
                out.update({k: v for k, v in fields.items() if k not in out})
                merged = True
        if not merged:
            out["message"] = message
        if record.exc_info:
            out["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack_info"] = self.formatStack(record.stack_info)
        line = redact_text(json.dumps(out, default=str, ensure_ascii=False))
        return _JSON_BREAKS.sub(lambda m: f"\\u{ord(m.group(0)):04x}", line)


def quiet_sdks(level: str) -> None:
    """The one place the SDKs' request logging is set: warnings only at INFO and above, everything at DEBUG (the
    root's level then decides). Called by every process's logging set-up, whoever configured the handlers."""
    debug = logging.getLevelName(level.upper()) == logging.DEBUG
    for name in SDK_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if debug else logging.WARNING)


def gunicorn_logconfig(level: str = "INFO", fmt: str = "json", access: bool = True) -> dict[str, Any]:
    """A ``logconfig_dict`` that sends gunicorn's error and access logs, and the root logger, through the JSON or
    the text formatter (so gunicorn's own lines are escaped and redacted too); ``access`` False keeps access lines
    out (gunicorn writes them whenever a logconfig is set)."""
    formatter = "json" if fmt == "json" else "text"
    handler = {"class": "logging.StreamHandler", "formatter": formatter, "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "autoscaler.logjson.JsonFormatter"},
                       "text": {"()": "autoscaler.logjson.TextFormatter"}},
        "handlers": {"stderr": handler},
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["stderr"], "propagate": False,
                               "qualname": "gunicorn.error"},
            "gunicorn.access": {"level": "INFO" if access else "WARNING", "handlers": ["stderr"], "propagate": False,
                                "qualname": "gunicorn.access"},
        },
    }
