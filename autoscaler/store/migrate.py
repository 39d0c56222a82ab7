"""Schema migrations (Alembic), safe when several replicas or workers start at the same instant."""
from __future__ import annotations

import logging
import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from autoscaler.store.schema_gaps import fill as fill_schema_gaps

log = logging.getLogger(__name__)

MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
# pg_advisory_lock key: any constant bigint, the same in every replica ("gpuautoscale" in hex-ish).
ADVISORY_KEY = 0x6770_7561_7574_6F73
MIGRATION_LOCK_WAIT_MS = 120_000  # a replica waits this long for another one's migration


def alembic_config(connection: Connection | None = None) -> Config:
    """A programmatic Alembic config (no alembic.ini); ``connection`` is the one migrations run on."""
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS)
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The newest revision this code knows."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database is at (None when never migrated)."""
    return MigrationContext.configure(connection).get_current_revision()


def _upgrade_locked(conn: Connection) -> str | None:
    """Bring the schema to head on a connection that holds the migration lock, in its open transaction."""
    cfg = alembic_config(conn)
    before = current_revision(conn)
    if before is None and inspect(conn).has_table("pools"):
        # Tables made by create_all before migrations existed: they are revision 0001.
        log.info("store: existing tables without a schema version; stamping them as revision 0001")
        command.stamp(cfg, "0001")
        before = "0001"
    if before is not None and not _known(before):
        # A newer release migrated this database (a rollback, or an old worker restarted during a roll-out).
        # Migrations only add (docs/replicas.md), so this build runs on it as it is.
        log.warning("store: schema revision %s is newer than this build knows (its newest is %s): running on it "
                    "unchanged; docs/upgrading.md#rolling-back", before, head_revision())
        return before
    if before != head_revision():
        log.info("store: migrating schema from %s to %s", before or "empty", head_revision())
        command.upgrade(cfg, "head")
    fill_schema_gaps(conn)  # the schema as it is, whatever revision the file claimed (see store/schema_gaps.py)
    return before


def _known(revision: str) -> bool:
    """Whether this build has the migration ``revision``."""
    from alembic.util.exc import CommandError

    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:
        return False


def upgrade(engine: Engine) -> str | None:
    """Migrate to head under a cross-process lock; return the revision found before (None for a new database)."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # Session-level advisory lock: the first replica migrates, the others wait, then find head.
            conn.execute(text(f"SET lock_timeout = {MIGRATION_LOCK_WAIT_MS}"))
            conn.execute(text("SET statement_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
            conn.commit()
            try:
                before = _upgrade_locked(conn)
                conn.commit()
            finally:
                conn.rollback()
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
                conn.commit()
            return before
        # SQLite: the store's engine opens every transaction with BEGIN IMMEDIATE, which takes the file's
        # write lock, so a second process blocks here until the first has committed the whole migration.
        with conn.begin():
            return _upgrade_locked(conn)


class DowngradeError(Exception):
    """A downgrade that cannot be done, said in one line for the operator (nothing was changed)."""


def downgrade(engine: Engine, revision: str) -> str | None:
    """Bring the schema back to ``revision`` (a rollback to an older release, docs/upgrading.md) under the same lock
    as :func:`upgrade`; return the revision found before. DowngradeError, before anything changes, for a revision
    this build does not have, a store without a schema version, or one already older than ``revision``."""
    script = ScriptDirectory.from_config(alembic_config())
    if not _known(revision) or revision in ("base", "head", "heads"):
        known = ", ".join(sorted(rev.revision for rev in script.walk_revisions()))
        raise DowngradeError(f"no migration {revision!r} in this build (its revisions: {known})")
    with engine.connect() as conn:
        locked = conn.dialect.name == "postgresql"
        if locked:
            conn.execute(text(f"SET lock_timeout = {MIGRATION_LOCK_WAIT_MS}"))
            conn.execute(text("SET statement_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
            conn.commit()
        try:
            with conn.begin():
                before = current_revision(conn)
                _downgradable(script, before, revision)
                command.downgrade(alembic_config(conn), revision)
            return before
        finally:
            if locked:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY})
                conn.commit()


def _downgradable(script: ScriptDirectory, before: str | None, revision: str) -> None:
    """DowngradeError unless the store, at ``before``, is at ``revision`` or newer, on this build's line."""
    if before is None:
        raise DowngradeError("the store has no schema version (not this service's database, or never started): "
                             "nothing to take back")
    if not _known(before):
        raise DowngradeError(f"the store is at {before}, which this build does not have: run schema-downgrade of "
                             "the release that migrated it")
    if revision not in {rev.revision for rev in script.iterate_revisions(before, "base")}:
        raise DowngradeError(f"the store is at {before}, older than {revision}: nothing to take back")
