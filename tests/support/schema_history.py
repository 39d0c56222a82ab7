"""Every store schema this repository ever shipped, built by the code of the commit that shipped it.

The commits are the ones git names for the files that defined the schema (``autoscaler/store/schema.py``, later
``tables.py``, and the Alembic versions); each one's ``autoscaler/`` and ``providers/`` trees are extracted into a
temporary directory and that commit's own ``SqlStore(url)`` creates (or migrates) the database in a subprocess, so
the old schema is exactly what the old build made: nothing is hand-written or checked in to drift from it. The old
code runs on this checkout's virtualenv (its pinned libraries were the same or compatible).
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from functools import lru_cache
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from autoscaler.store import SqlStore, tables
from autoscaler.store.base import EventRecord, NodesView, PoolChange, PoolView
from autoscaler.store.migrate import head_revision
from tests.support.servers import ROOT

SCHEMA_FILES = ("autoscaler/store/schema.py", "autoscaler/store/tables.py", "autoscaler/store/migrations/versions")

#: Run by the old tree: its SqlStore sets the schema up; a pool row and an event are written the old way (raw SQL
#: on the columns every revision has), so that the upgrade is seen to keep data.
_BUILD = """
import sys
from sqlalchemy import text
from autoscaler.store.sql import SqlStore
store = SqlStore(sys.argv[1])
store.ensure_pools(["gpu"])
with store.engine.begin() as conn:
    conn.execute(text("UPDATE pools SET paused = :p, pause_reason = 'kept by the upgrade' WHERE name = 'gpu'"),
                 {"p": True})
    conn.execute(text("INSERT INTO events (time, pool, source, action, outcome, from_count, to_count, reason, "
                      "alerts, details) VALUES (1.0, 'gpu', 'manual', 'scale_out', 'scaled', 1, 2, 'old', '[]', "
                      "'{}')"))
store.engine.dispose()
"""


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()} (the upgrade tests need the history)")
    return done.stdout


@lru_cache(maxsize=1)
def shipped_commits() -> tuple[str, ...]:
    """Short hashes of the commits that changed the schema's definition, oldest first (HEAD's schema last)."""
    out = _git("rev-list", "--reverse", "--abbrev-commit", "HEAD", "--", *SCHEMA_FILES).split()
    if not out:
        raise RuntimeError("git rev-list found no commit of the store's schema (a shallow clone?)")
    return tuple(out)


def revision_label(commit: str) -> str:
    """What the commit's newest migration file is called (``create_all`` before migrations existed)."""
    names = _git("ls-tree", "--name-only", commit, "autoscaler/store/migrations/versions/").split()
    versions = sorted(os.path.basename(n) for n in names if os.path.basename(n)[:4].isdigit())
    return versions[-1].removesuffix(".py") if versions else "create_all"


def extract(commit: str, into: Path) -> Path:
    """The commit's ``autoscaler/`` and ``providers/`` trees under ``into``; returns ``into``."""
    tar = subprocess.run(["git", "archive", "--format=tar", commit, "autoscaler", "providers"], cwd=ROOT,
                         capture_output=True, timeout=60, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into


def build(commit: str, url: str, workdir: Path) -> None:
    """Create the schema ``commit`` shipped at ``url`` with that commit's own code (in a subprocess)."""
    tree = extract(commit, workdir / f"tree-{commit}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env["PYTHONPATH"] = str(tree)
    done = subprocess.run([sys.executable, "-c", _BUILD, url], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"building the schema of {commit} failed:\n{done.stderr[-3000:]}"


def usable(store: SqlStore) -> None:
    """The schema is head's, the old rows are kept, and every kind of row the service writes can be written."""
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert compare_metadata(ctx, tables.metadata) == []
        assert ctx.get_current_revision() == head_revision()
    gpu = store.pool("gpu")
    assert gpu.paused and gpu.pause_reason == "kept by the upgrade"
    assert [e.reason for e in store.events("gpu", 10)] == ["old"]
    store.ping()
    store.save_nodes(NodesView("gpu", [{"name": "n1"}], None, 5.0))
    assert store.nodes_view("gpu") == NodesView("gpu", [{"name": "n1"}], None, 5.0)
    store.save_view(PoolView("gpu", 2, False, "", 0, None, 5.0))
    assert store.views()["gpu"].current == 2
    assert store.hold_lease("reconciler", "me", 5.0, 30.0)
    store.add_recommendation("gpu", 5.0, 3, 0.0)
    assert store.recommendations("gpu", 0.0) == [(5.0, 3)]
    assert store.acquire("gpu", "owner", 5.0, 30.0) is not None
    ev = EventRecord(time=6.0, pool="gpu", source="manual", action="scale_out", outcome="no_capacity", from_=2,
                     to=2, reason="short")
    store.finish("gpu", "owner", ev, PoolChange(at=6.0, short_until=66.0, short_reason="stockout"))
    assert (store.pool("gpu").short_until, store.pool("gpu").short_reason) == (66.0, "stockout")



def usable_again(store: SqlStore) -> None:
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), tables.metadata) == []
    assert store.nodes_view("gpu") is not None and store.pool("gpu").short_reason == "stockout"
