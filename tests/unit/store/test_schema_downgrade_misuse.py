"""``python -m autoscaler schema-downgrade`` misused (issue 45, item 10): a mistyped SQLite path, an unknown or
newer revision, a URL nobody can read, a database that is not the service's: one clear line, exit 1, no file made
and nothing changed; never an alembic traceback, never a password."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autoscaler.__main__ import main
from autoscaler.store import open_store
from autoscaler.store.migrate import head_revision
from tests.support.servers import free_port


def _run(capsys: pytest.CaptureFixture[str], revision: str, url: str) -> tuple[int, list[str]]:
    code = main(["schema-downgrade", revision, "--url", url])
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    return code, out.err.strip().splitlines()


def _revision(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])


def test_a_mistyped_sqlite_path_makes_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "autoscler.db"
    code, err = _run(capsys, "0004", f"sqlite:///{typo}")
    assert code == 1 and err == [f"schema-downgrade: no SQLite database at {typo} (check --url)"]
    assert not typo.exists()
    code, err = _run(capsys, "0004", f"sqlite:///{tmp_path}/no/such/dir/s.db")
    assert code == 1 and len(err) == 1 and "no SQLite database at" in err[0]


@pytest.mark.parametrize("revision", ["0404", "latest", "00"])
def test_an_unknown_revision_is_one_line_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             revision: str) -> None:
    db = tmp_path / "s.db"
    open_store(f"sqlite:///{db}").ensure_pools(["gpu"])
    code, err = _run(capsys, revision, f"sqlite:///{db}")
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith(f"schema-downgrade: no migration {revision!r} in this build (its revisions: 0001"), err
    assert _revision(db) == head_revision()


def test_a_revision_above_the_stores_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    open_store(f"sqlite:///{db}").ensure_pools(["gpu"])
    older = f"{int(head_revision()) - 1:04d}"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    code, err = _run(capsys, older, f"sqlite:///{db}")
    assert code == 1 and err == [f"schema-downgrade: the store is at 0001, older than {older}: nothing to take back"]
    assert _revision(db) == "0001"


def test_a_database_that_is_not_the_services(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    code, err = _run(capsys, "0004", f"sqlite:///{db}")
    assert code == 1 and err == [("schema-downgrade: the store has no schema version (not this service's database, "
                                  "or never started): nothing to take back")]


@pytest.mark.parametrize(("url", "said"), [
    ("sqlite:/data/autoscaler.db", "schema-downgrade: --url is not a database URL"),
    ("mysql+nodriver://u:hunter22pass@h/db",
     "schema-downgrade: --url: unsupported store url scheme 'mysql+nodriver': use sqlite:/// or postgresql://"),
    ("postgresql://u:hunter22pass@127.0.0.1:{port}/x",
     "schema-downgrade: the store at postgresql://u:***@127.0.0.1:{port}/x failed: OperationalError"),
])
def test_a_url_nobody_can_read_is_one_line_without_its_password(capsys: pytest.CaptureFixture[str], url: str,
                                                                said: str) -> None:
    port = free_port()
    code, err = _run(capsys, "0004", url.format(port=port))
    assert code == 1 and len(err) == 1 and err[0].startswith(said.format(port=port)), err
    assert "hunter22pass" not in err[0]


@pytest.mark.slow
def test_the_plain_postgresql_url_the_chart_sets_works(capsys: pytest.CaptureFixture[str]) -> None:
    """``postgresql://`` (the chart's DATABASE_URL) means psycopg 3, as for the service: it was a traceback asking
    for psycopg2. An unknown revision there changes nothing either."""
    from sqlalchemy import create_engine

    from autoscaler.store.connections import normalize_url
    from autoscaler.store.migrate import current_revision
    from tests.support import pg

    pg.require_postgres()
    with pg.temp_database() as name:
        url = pg.url_for(name)
        store = open_store(url)
        store.ensure_pools(["gpu"])
        store.close()
        head = head_revision()
        older = f"{int(head) - 1:04d}"
        code, err = _run(capsys, "0404", url)
        assert code == 1 and len(err) == 1 and "no migration '0404'" in err[0]
        assert main(["schema-downgrade", older, "--url", url]) == 0
        assert capsys.readouterr().out.strip() == f"schema: {head} -> {older}"
        engine = create_engine(normalize_url(url))
        with engine.connect() as conn:
            assert current_revision(conn) == older
        engine.dispose()
