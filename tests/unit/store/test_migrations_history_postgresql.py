"""Upgrades from every schema this repository ever shipped, on PostgreSQL (issue 34, item 3; SQLite and the history
itself: test_migrations_history.py, the same checks, split so that two test workers share the work)."""
from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.store import SqlStore
from tests.support import pg
from tests.support.schema_history import build, revision_label, shipped_commits, usable, usable_again

pytestmark = pytest.mark.slow
COMMITS = [pytest.param(c, id=f"{c}-{revision_label(c)}") for c in shipped_commits()]


@pytest.mark.parametrize("commit", COMMITS)
def test_postgresql_database_of_every_shipped_schema_upgrades_to_head(commit: str, tmp_path: Path) -> None:
    pg.require_postgres()
    with pg.temp_database() as name:
        build(commit, pg.url_for(name).replace("postgresql://", "postgresql+psycopg://", 1), tmp_path)
        store = SqlStore(pg.url_for(name))
        try:
            usable(store)
        finally:
            store.close()
        again = SqlStore(pg.url_for(name))
        try:
            usable_again(again)
        finally:
            again.close()
