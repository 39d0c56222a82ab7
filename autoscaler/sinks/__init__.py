"""Where decision events go besides the store: the sink interface."""
from __future__ import annotations

from typing import Any, Protocol


class EventSink(Protocol):
    """Receives every decision's event; must never block or raise in ``emit``."""

    def emit(self, event: dict[str, Any]) -> None:
        """Hand over one event (the API's Event JSON); returns at once, dropping it if the sink can't keep up."""

    def close(self) -> None:
        """Flush what is queued (bounded wait) and release resources."""
