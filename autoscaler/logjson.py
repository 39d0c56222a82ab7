"""``LOG_FORMAT=json``: one JSON object per log line, for the app's and gunicorn's loggers alike."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any


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
        return json.dumps(out, default=str, ensure_ascii=False)


def gunicorn_logconfig(level: str = "INFO") -> dict[str, Any]:
    """A ``logconfig_dict`` that sends gunicorn's error and access logs, and the root logger, through JSON."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "autoscaler.logjson.JsonFormatter"}},
        "handlers": {"stderr": handler},
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": ["stderr"], "propagate": False, "qualname": "gunicorn.error"},
            "gunicorn.access": {"level": "INFO", "handlers": ["stderr"], "propagate": False,
                                "qualname": "gunicorn.access"},
        },
    }
