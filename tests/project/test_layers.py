"""The layers hold: import-linter's contracts (.importlinter), and starting the app loads no cloud SDK."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLOUD_SDKS = ("azure", "alibabacloud_cs20151215", "alibabacloud_tea_openapi", "alibabacloud_credentials", "boto3",
              "botocore", "google.cloud", "google.auth", "kubernetes")


def test_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--config", str(ROOT / ".importlinter"), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_importing_the_app_and_every_provider_loads_no_cloud_sdk() -> None:
    """SDKs are imported by a provider when a pool uses it, never when the service or the registry is imported."""
    probe = ("import json, sys; import app, providers, autoscaler.cli, autoscaler.replay;"
             "[providers.factory(n) for n in providers.available()];"
             "print(json.dumps(sorted(m for m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert "app" in loaded and "providers.aks" in loaded  # the probe did import what it claims
    leaked = [m for m in loaded if any(m == sdk or m.startswith(sdk + ".") for sdk in CLOUD_SDKS)]
    assert leaked == []


def test_tests_import_neither_each_other_nor_conftest() -> None:
    """Shared test code lives in tests/support/ (helpers, fakes, payloads), so a test module never imports another."""
    import ast

    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                last = name.rsplit(".", 1)[-1]
                if name.startswith("tests.") and (last.startswith("test_") or last == "conftest"):
                    offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def test_ruff_finds_nothing() -> None:
    """Unused imports and variables, redefinitions and ruff's other default rules (ruff.toml), over the tree."""
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def _python(under: str) -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in sorted((ROOT / under).rglob("*.py")) if "__pycache__" not in p.parts]


def test_only_the_door_asks_a_cloud_for_a_change() -> None:
    """Outside ``providers/``, a provider's ``scale`` or ``remove_nodes`` is called in autoscaler/pool/door.py alone
    (the replay's simulated cloud is a provider of its own, called the same way)."""
    call = re.compile(r"(?<!door)\.(scale|remove_nodes)\(")
    door = ROOT / "autoscaler" / "pool" / "door.py"
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p, text in _python("autoscaler") if p != door
                 for n, line in enumerate(text.splitlines(), 1) if call.search(line)]
    assert offenders == []
    asks = re.findall(r"provider\.(scale|remove_nodes)\(", door.read_text())
    assert sorted(asks) == ["remove_nodes", "scale"]  # the door itself: one of each


def test_nothing_reaches_a_part_through_the_engine() -> None:
    """The parts are built once and handed in (autoscaler/engine/parts.py); outside the engine's package, an engine
    is asked to decide (``handle``, ``handle_notification``) and nothing else."""
    core = (ROOT / "autoscaler" / "engine" / "core.py").read_text()
    members = set(re.findall(r"self\.(\w+) =", core)) | set(re.findall(r"    def (\w+)\(self", core))
    parts = sorted(members - {"handle", "handle_notification", "__init__"})
    assert {"hold", "store", "providers", "node_actions", "door"} <= set(parts)  # the pattern sees the engine's parts
    reach = re.compile(r"\bengine\.(" + "|".join(parts) + r")\b")
    offenders = [f"{p.relative_to(ROOT)}:{n}: {m.group(0)}" for under in ("autoscaler", "tests", "bench")
                 for p, text in _python(under) if "engine" not in p.relative_to(ROOT).parts[1:2]
                 for n, line in enumerate(text.splitlines(), 1) for m in reach.finditer(line)
                 if not line.lstrip().startswith(("from ", "import "))]
    assert offenders == []


def test_the_top_level_holds_few_modules() -> None:
    """The package's top level is a few modules; the rest lives in rooms named for what they do."""
    modules = sorted(p.name for p in (ROOT / "autoscaler").glob("*.py"))
    assert len(modules) <= 15, modules
