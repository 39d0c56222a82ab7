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


def _headings(text: str) -> list[str]:
    """Markdown headings outside fenced code."""
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,4} ", line):
            out.append(line)
    return out


def _under(text: str, heading: str) -> str:
    """The text under one heading, up to the next heading of the same or a higher level."""
    lines, level = text.splitlines(), len(heading.split(" ", 1)[0])
    assert heading in lines, f"no heading {heading!r}"
    out, fenced = [], False
    for line in lines[lines.index(heading) + 1:]:
        fenced ^= line.startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        out.append(line)
    return "\n".join(out)


README = (ROOT / "README.md").read_text()
CLOUD_OFF = "## Turn the cloud's own autoscaler off on these pools"
CLOUD_PAGE_OFF = "## The cloud's own autoscaler off, and scaling from zero"


def test_readme_compares_it_with_the_other_autoscalers() -> None:
    """Each peer, on each point the operator chooses by, and when this one is the wrong choice."""
    compares = _under(README, "## How it compares")
    table = [line for line in compares.splitlines() if line.startswith("|")]
    header = table[0].lower()
    for peer in ("this service", "cluster-autoscaler", "karpenter", "keda", "the cloud's own"):
        assert peer in header, peer
    rows = {line.split("|")[1].strip().lower() for line in table[2:]}
    for point in ("signal", "loop", "scale from zero", "scale-in", "gpus"):
        assert any(point in row for row in rows), point
    assert all(line.count("|") == header.count("|") for line in table), "a row with a missing cell"
    assert "### When to pick which" in _headings(README) and "### When not to use it" in _headings(README)
    assert len(re.findall(r"(?m)^- ", _under(README, "### When not to use it"))) >= 3


def test_readme_and_each_cloud_page_say_to_turn_the_clouds_autoscaler_off() -> None:
    off = _under(README, CLOUD_OFF)
    for words in ("enableAutoScaling: false", "--disable-cluster-autoscaler", "--no-enable-autoscaling",
                  "auto_scaling.enable", "Karpenter", "cluster-autoscaler", "from zero"):
        assert words in off, words
    pages = {"aks": ("enableAutoScaling: false", "--node-count 0"),
             "eks": ("k8s.io/cluster-autoscaler/enabled", "minSize", "Karpenter"),
             "gke": ("--no-enable-autoscaling", "auto-provisioning"),
             "ack": ("auto_scaling.enable", "desired_size")}
    for cloud, must in pages.items():
        assert f"](docs/{cloud}.md#the-clouds-own-autoscaler-off-and-scaling-from-zero)" in off, cloud
        section = _under((ROOT / "docs" / f"{cloud}.md").read_text(), CLOUD_PAGE_OFF)
        for words in (*must, "GPUDemandPending", "schedules"):
            assert words in section, (cloud, words)
