"""The layers hold: import-linter's contracts (.importlinter), and starting the app loads no cloud SDK."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
    """Shared test code lives in tests/support.py and tests/fakes/, so a test module never imports another."""
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
