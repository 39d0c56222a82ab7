"""The code is type-checked (mypy), as the house style asks."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mypy_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy", "autoscaler", "providers", "app.py",
                             "--ignore-missing-imports", "--no-error-summary"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
