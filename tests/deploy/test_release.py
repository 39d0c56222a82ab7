"""One version everywhere (CHANGELOG.md, ``__version__`` and ``GET /version``, the chart, the image tag, the
manifests), ``make release`` that says which place disagrees, and docs/upgrading.md that keeps up with the
migrations and any renamed config key."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import autoscaler.config
from autoscaler import __version__
from tests.support import make_app

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-pool-autoscaler" / "Chart.yaml"
SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
PLACES = ["CHANGELOG.md", "autoscaler/__init__.py", "deploy/helm/gpu-pool-autoscaler/Chart.yaml",
          "docker-compose.yml", "deploy/kubernetes/deployment.yaml"]


def make(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", f"PYTHON={sys.executable}", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def test_every_place_says_the_version_get_version_answers(tmp_path: Path) -> None:
    chart = yaml.safe_load(CHART.read_text())
    assert re.fullmatch(SEMVER, __version__)
    assert chart["version"] == chart["appVersion"] == __version__
    newest = re.search(r"^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest and newest.group(1) == __version__
    image = make("-n", "image")  # the tag `make image` builds
    assert f"-t gpu-pool-autoscaler:{__version__} " in image.stdout, image.stdout + image.stderr
    for path in ("docker-compose.yml", "deploy/kubernetes/deployment.yaml"):
        assert f"image: gpu-pool-autoscaler:{__version__}" in (ROOT / path).read_text(), path
    client = make_app(f"sqlite:///{tmp_path}/s.db").test_client()
    resp = client.get("/version")  # no credentials
    assert resp.status_code == 200 and resp.get_json() == {"version": __version__}
    assert client.get("/healthz").get_json() == {"status": "ok", "version": __version__}
    assert client.get("/openapi.json").get_json()["paths"]["/version"]["get"]["security"] == []


def test_make_release_passes_when_they_agree_and_names_each_place_when_not() -> None:
    ok = make("release", f"VERSION={__version__}")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = make("release", "VERSION=99.0.0")
    assert bad.returncode != 0
    for place in ("CHANGELOG.md", "__version__", "Chart.yaml version", "Chart.yaml appVersion", "docker-compose.yml",
                  "deployment.yaml"):
        assert place in bad.stderr, bad.stderr
    assert f"{__version__} (want 99.0.0)" in bad.stderr
    other_tag = make("release", f"VERSION={__version__}",
                     f"IMAGE=registry.example.com/gpu-pool-autoscaler:{__version__}-rc1")
    assert other_tag.returncode != 0 and "the image tag (IMAGE)" in other_tag.stderr, other_tag.stderr
    not_semver = make("release", "VERSION=v1")
    assert not_semver.returncode != 0 and "not a semantic version" in not_semver.stderr


@pytest.mark.parametrize("path,old,new,named", [
    pytest.param("CHANGELOG.md", "## [{v}] - ", "## [0.0.1] - ", "CHANGELOG.md", id="changelog-behind"),
    pytest.param("deploy/helm/gpu-pool-autoscaler/Chart.yaml", 'appVersion: "{v}"', 'appVersion: "9.9.9"',
                 "Chart.yaml appVersion", id="chart-app-version"),
    pytest.param("autoscaler/__init__.py", '"{v}"', '"9.9.9"', "__version__", id="code"),
])
def test_a_single_place_out_of_step_is_named(tmp_path: Path, path: str, old: str, new: str, named: str) -> None:
    for place in PLACES + ["scripts/release_check.py"]:
        (tmp_path / place).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / place, tmp_path / place)
    target = tmp_path / path
    text = target.read_text()
    assert old.format(v=__version__) in text
    target.write_text(text.replace(old.format(v=__version__), new, 1))
    out = subprocess.run([sys.executable, str(tmp_path / "scripts" / "release_check.py"), __version__, "--root",
                          str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and named in out.stderr and out.stderr.count("(want ") == 1, out.stderr


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n") and "keepachangelog.com" in text and "semver.org" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings[0] == ("Unreleased", "")
    releases = headings[1:]
    assert len(releases) >= 4 and all(re.fullmatch(SEMVER, v) and d for v, d in releases), releases
    versions = [tuple(map(int, v.split("."))) for v, _ in releases]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    assert [d for _, d in releases] == sorted((d for _, d in releases), reverse=True)
    sections = set(re.findall(r"^### (\w+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, sections


def _aliases() -> set[str]:
    """Every config key the settings accept under another name (a renamed key keeps its old name as an alias)."""
    found: set[str] = set()
    for info in pkgutil.iter_modules(autoscaler.config.__path__):
        module = importlib.import_module(f"autoscaler.config.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseModel) and cls.__module__ == module.__name__:
                for name, field in cls.model_fields.items():
                    for alias in (field.alias, field.validation_alias):
                        if isinstance(alias, str) and alias != name.rstrip("_"):  # `for_` is YAML's `for`
                            found.add(alias)
                        elif alias is not None and not isinstance(alias, str):
                            found.update(str(choice) for choice in getattr(alias, "choices", [alias]))
    return found


def test_upgrading_lists_every_migration_and_every_renamed_key() -> None:
    doc = (ROOT / "docs" / "upgrading.md").read_text()
    revisions = {m.group(1) for p in (ROOT / "autoscaler" / "store" / "migrations" / "versions").glob("*.py")
                 if (m := re.search(r'^revision = "([^"]+)"', p.read_text(), re.M))}
    assert len(revisions) >= 5
    listed = set(re.findall(r"^\| `(\d{4})` \| ", doc, re.M))
    assert listed == revisions, f"docs/upgrading.md's migration table: {sorted(listed)}; the code: {sorted(revisions)}"
    for alias in _aliases():
        assert f"`{alias}`" in doc, f"config key alias {alias!r} (a renamed key) is not in docs/upgrading.md"
    assert "## Rolling back" in doc and "schema-downgrade" in doc


def test_schema_downgrade_takes_the_store_back_and_the_code_brings_it_forward(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    from autoscaler.store import open_store
    from autoscaler.store.migrate import current_revision, head_revision

    url = f"sqlite:///{tmp_path}/s.db"
    open_store(url).ensure_pools(["gpu"])
    head = head_revision()
    older = f"{int(head) - 1:04d}"
    out = subprocess.run([sys.executable, "-m", "autoscaler", "schema-downgrade", older, "--url", url], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0 and out.stdout.strip() == f"schema: {head} -> {older}", out.stdout + out.stderr
    engine = create_engine(url)
    with engine.connect() as conn:
        assert current_revision(conn) == older
    open_store(url).ensure_pools(["gpu"])  # the newer build migrates it forward again
    with engine.connect() as conn:
        assert current_revision(conn) == head
    engine.dispose()


def test_a_build_runs_on_a_schema_a_newer_release_migrated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A rollback (or an old worker restarted during a roll-out): the database is at a revision this build does not
    have. Migrations only add, so the build runs on it, saying so, instead of failing to start."""
    import logging
    import sqlite3

    from autoscaler.store import open_store

    url = f"sqlite:///{tmp_path}/s.db"
    open_store(url).ensure_pools(["gpu"])
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0099'")
    caplog.set_level(logging.WARNING, logger="autoscaler.store.migrate")
    store = open_store(url)
    store.ensure_pools(["gpu"])
    store.ping()
    assert any("schema revision 0099 is newer than this build knows" in r.getMessage() for r in caplog.records)
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0099",)]
