"""The operator's guides say what the code does: the README's comparison and per-cloud notes, docs/tuning.md's guide
sections and its base config (loaded by the service's own loader, `replay:` included), and the tuner's `--help`."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from autoscaler.replay import tune_cli

ROOT = Path(__file__).resolve().parent.parent
WORDS = {1: "as many as", 2: "twice", 3: "three times"}


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_help_and_guide_give_the_direction_change_default_the_code_applies() -> None:
    """`--max-direction-changes`'s default is CHANGES_FACTOR times the base config's changes a day (at least
    MIN_CHANGES): the help and docs/tuning.md say that factor and that floor."""
    words = WORDS[tune_cli.CHANGES_FACTOR]
    helped = subprocess.run([sys.executable, "-m", "autoscaler", "replay", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    option = _flat(helped.rsplit("--max-direction-changes", 1)[1].split("--stress", 1)[0])  # its help, not usage
    assert f"default: {words} the base config" in option, option
    assert f"at least {tune_cli.MIN_CHANGES}" in option, option
    guide = _flat((ROOT / "docs" / "tuning.md").read_text())
    assert f"{words} as often a day as the base config did" in guide
    assert f"never fewer than {tune_cli.MIN_CHANGES} a day" in guide
