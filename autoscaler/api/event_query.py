"""The event log's filters and paging, as ``GET /api/v1/events`` and the status page both take them.

``pool=``, ``outcome=`` (one or more, comma-separated or repeated), ``source=``, ``limit=`` and ``before=<event id>``;
an answer's ``next`` is the ``before`` of the page after it (null: nothing older matches).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlencode

from werkzeug.datastructures import MultiDict

from autoscaler.api import fail
from autoscaler.api.guards import visible_events
from autoscaler.models import OperatorOutcome, Outcome, Source
from autoscaler.store import EventRecord, Store

MAX_PAGE = 1000  # the most events one GET /api/v1/events answers
OUTCOMES = tuple(o.value for o in Outcome) + tuple(o.value for o in OperatorOutcome)
SOURCES = tuple(s.value for s in Source)


@dataclass(frozen=True)
class EventQuery:
    """One page of the event log: which events, how many, older than which id."""

    pool: str | None = None
    outcomes: tuple[str, ...] = ()
    source: str | None = None
    limit: int = 100
    before: int | None = None
    default_limit: int = 100  # where the query came from: a link leaves ``limit`` out when it is this

    def args(self, before: int | None = None, **changes: object) -> str:
        """The query string of this filter (``before``: another page of it), for links; empty values left out."""
        values: dict[str, object] = {"pool": self.pool, "outcome": ",".join(self.outcomes), "source": self.source,
                                     "limit": self.limit if self.limit != self.default_limit else None,
                                     "before": before}
        values.update(changes)
        return urlencode([(k, str(v)) for k, v in values.items() if v not in (None, "")])


def _outcomes(values: Sequence[str]) -> tuple[str, ...]:
    wanted = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in OUTCOMES]
    if unknown:
        fail(400, f"outcome: unknown outcome {unknown[0][:40]!r} (one or more of: {', '.join(OUTCOMES)})")
    return tuple(dict.fromkeys(wanted))


def parse(args: MultiDict[str, str], default_limit: int = 100) -> EventQuery:
    """The filters of a request's query string, or a 400 naming the bad one."""
    text = args.get("limit", str(default_limit))
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PAGE:
        fail(400, f"limit must be a whole number from 1 to {MAX_PAGE}")
    before = args.get("before")
    if before is not None and not (before.isascii() and before.isdigit() and len(before) <= 18):
        fail(400, "before must be an event id")
    source = args.get("source") or None
    if source is not None and source not in SOURCES:
        fail(400, f"source: unknown source {source[:40]!r} (one of: {', '.join(SOURCES)})")
    return EventQuery(pool=args.get("pool") or None, outcomes=_outcomes(args.getlist("outcome")), source=source,
                      limit=int(text), before=int(before) if before else None, default_limit=default_limit)


def page(store: Store, query: EventQuery) -> tuple[list[EventRecord], int | None]:
    """The events of one page the credential may read, newest first, and the ``before`` of the next page (None:
    none older matches). One row more than the page is read to know whether another page follows."""
    rows = visible_events(store, query.pool, query.limit + 1, query.before, outcomes=query.outcomes,
                          source=query.source)
    more = len(rows) > query.limit
    rows = rows[:query.limit]
    return rows, (rows[-1].id if more and rows else None)
