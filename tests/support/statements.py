"""The SQL statements a request or a tick sends, counted on the real engine (a listener on
``before_cursor_execute``)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from flask.testing import FlaskClient
from sqlalchemy import event

from tests.support import AUTH


@contextmanager
def recorded(engine: Any) -> Iterator[list[str]]:
    """Every statement the engine sends within the block, in the list yielded."""
    sent: list[str] = []

    def hook(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(engine, "before_cursor_execute", hook)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", hook)


def sent_by(client: FlaskClient, engine: Any, path: str) -> tuple[str, list[str]]:
    """GET ``path`` once to warm up (connections opened, nothing counted), then again: its body and every statement
    the second GET sent."""
    client.get(path, headers=AUTH)
    with recorded(engine) as sent:
        resp = client.get(path, headers=AUTH)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_data(as_text=True), sent


def reads(statements: list[str]) -> list[str]:
    """The reads among them (SQLite's BEGIN IMMEDIATE and the writes aside)."""
    return [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
