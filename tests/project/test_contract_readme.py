"""The config reference (docs/config.md, which the README links) names every key the config schema accepts
(autoscaler/config/), and each provider's section keys (in its row or the page that row links to);
config.example.yaml passes check-config."""
from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel

import providers
from autoscaler.config import Config
from tests.support import md_section

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REFERENCE = (DOCS / "config.md").read_text()
ROWS = [line for line in REFERENCE.splitlines() if line.startswith("| `")]


def _models(annotation: Any) -> Iterator[tuple[type[BaseModel], bool]]:
    """The pydantic models inside a field's type, each with whether it sits in a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, False
        return
    for arg in typing.get_args(annotation):
        for model, in_list in _models(arg):
            yield model, in_list or typing.get_origin(annotation) is list


def schema_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}" if prefix else field.alias or name
        yield path
        for sub, in_list in _models(field.annotation):
            yield from schema_keys(sub, path + ("[]" if in_list else ""))


def _first_cell_paths(row: str) -> set[str]:
    """The key paths a row's first cell names: `a.b` / `.c` (sibling of b) / `d` (sibling too), `<dir>` for
    both directions."""
    out: set[str] = set()
    parent = ""
    for span in re.findall(r"`([^`]+)`", row.split("|")[1]):
        span = span.split(":")[0].strip()
        if span.startswith("."):
            full = parent + span
        elif "." in span or "[]" in span:
            full = span
        else:
            full = f"{parent}.{span}" if parent else span
        parent = full.rsplit(".", 1)[0] if "." in full else ""
        out |= {full.replace("<dir>", "scale_out"), full.replace("<dir>", "scale_in")}
    return out


NAMED = {path: row for row in ROWS for path in _first_cell_paths(row)}


def _aliases(path: str) -> set[str]:
    """A pool's direction keys and dedup_window are documented once, under ``defaults``."""
    out = {path}
    for direction in ("scale_out", "scale_in"):
        if path.startswith(f"pools[].{direction}."):
            out.add(path.replace("pools[]", "defaults", 1))
        if path.startswith(f"defaults.{direction}."):
            out.add(path.replace("defaults", "pools[]", 1))
    if path.endswith("scale_out.delay_after_scale_out"):  # a scale-in key, said to do nothing here (and warned)
        out.add("defaults.scale_in.delay_after_scale_out")
    if path == "pools[].dedup_window":
        out.add("defaults.dedup_window")
    return out


def _in_text(leaf: str, text: str) -> bool:
    """``leaf`` as a code span or in a ``{a, b}`` list, or as a key of a YAML example (commented out or not)."""
    return (re.search(r"[`{,|]\s*`?" + re.escape(leaf) + r"(?![\w])", text) is not None
            or re.search(r"(?m)^[\s#-]*" + re.escape(leaf) + r":", text) is not None)


def documented(path: str, linked_pages: bool = False) -> bool:
    if _aliases(path) & NAMED.keys():
        return True
    parent, _, leaf = path.rpartition(".")
    for candidate in (parent, parent.removesuffix("[]")):
        for alias in _aliases(candidate):
            row = NAMED.get(alias)
            if row is None:
                continue
            if _in_text(leaf, row.split("|", 2)[2]):
                return True
            if linked_pages and any(_in_text(leaf, (DOCS / page).read_text())
                                    for page in re.findall(r"\]\(([\w-]+\.md)\)", row)):
                return True
    return False


def test_every_schema_key_is_in_the_config_reference() -> None:
    """Every key that takes a value (a section is documented through its keys)."""
    sections = {path.rpartition(".")[0].removesuffix("[]") for path in schema_keys(Config) if "." in path}
    missing = [path for path in schema_keys(Config) if path not in sections and not documented(path)]
    assert not missing, f"docs/config.md lacks: {', '.join(missing)}"


def test_every_provider_key_is_in_the_config_reference_or_its_page() -> None:
    missing = []
    for name in providers.available():
        assert f"pools[].{name}" in NAMED, f"docs/config.md has no `pools[].{name}` row"
        missing += [path for path in schema_keys(providers.factory(name).settings_model, f"pools[].{name}")
                    if not documented(path, linked_pages=True)]
    assert not missing, f"docs/config.md (or the page its row links to) lacks: {', '.join(missing)}"


def test_the_checker_sees_a_missing_key() -> None:
    """The comparison is not vacuous: an unknown key is not documented, a documented one is."""
    assert not documented("server.no_such_key") and not documented("pools[].aks.no_such_key", linked_pages=True)
    assert documented("server.lock_wait") and documented("pools[].scale_in.stabilization_window")


def test_config_example_passes_check_config() -> None:
    result = subprocess.run([sys.executable, "-m", "autoscaler", "check-config", "config.example.yaml"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1 and "simulated" in result.stdout


def test_the_readme_keeps_the_essentials_and_points_to_the_reference() -> None:
    """The README lost its config reference to docs/config.md but keeps what a newcomer needs on one page: the two
    commands, a quick start with curl, Alertmanager and Grafana pointed at the service, and the link."""
    readme = (ROOT / "README.md").read_text()
    commands = md_section(readme, "## The two commands")
    assert "| `make run` |" in commands and "| `make test` |" in commands
    quick = md_section(readme, "## Quick start (60 seconds)")
    assert quick.count("curl -s") >= 5 and "/webhook/alertmanager" in quick and "/webhook/grafana" in quick
    alertmanager = md_section(readme, "## Pointing Alertmanager at it")
    assert "url: http://autoscaler:8080/webhook/alertmanager" in alertmanager and "repeat_interval:" in alertmanager
    grafana = md_section(readme, "## Pointing Grafana at it")
    assert "http://autoscaler:8080/webhook/grafana" in grafana and "Contact points" in grafana
    assert "](docs/config.md)" in md_section(readme, "## Configuration")
    assert "| `server.lock_wait` |" not in readme  # the reference lives in one place
