"""The operator's guides say what the code does: the README's comparison and per-cloud notes, docs/tuning.md's guide
sections and its base config (loaded by the service's own loader, `replay:` included), and the tuner's `--help`."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from autoscaler.replay import tune_cli
from tests.support import md_section

ROOT = Path(__file__).resolve().parents[2]
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
    assert f"at least {tune_cli.CYCLE_CHANGES} where the history has busy hours" in option, option
    assert f"never fewer than {tune_cli.CYCLE_CHANGES} a day on a history with busy hours" in guide


def _headings(text: str) -> list[str]:
    """Markdown headings outside fenced code."""
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,4} ", line):
            out.append(line)
    return out


README = (ROOT / "README.md").read_text()
CLOUD_OFF = "## Turn the cloud's own autoscaler off on these pools"
CLOUD_PAGE_OFF = "## The cloud's own autoscaler off, and scaling from zero"


def test_readme_compares_it_with_the_other_autoscalers() -> None:
    """Each peer, on each point the operator chooses by, and when this one is the wrong choice."""
    compares = md_section(README, "## How it compares")
    table = [line for line in compares.splitlines() if line.startswith("|")]
    header = table[0].lower()
    for peer in ("this service", "cluster-autoscaler", "karpenter", "keda", "the cloud's own"):
        assert peer in header, peer
    rows = {line.split("|")[1].strip().lower() for line in table[2:]}
    for point in ("signal", "loop", "scale from zero", "scale-in", "gpus"):
        assert any(point in row for row in rows), point
    assert all(line.count("|") == header.count("|") for line in table), "a row with a missing cell"
    assert "### When to pick which" in _headings(README) and "### When not to use it" in _headings(README)
    assert len(re.findall(r"(?m)^- ", md_section(README, "### When not to use it"))) >= 3


def test_readme_and_each_cloud_page_say_to_turn_the_clouds_autoscaler_off() -> None:
    off = md_section(README, CLOUD_OFF)
    for words in ("enableAutoScaling: false", "--disable-cluster-autoscaler", "--no-enable-autoscaling",
                  "auto_scaling.enable", "Karpenter", "cluster-autoscaler", "from zero"):
        assert words in off, words
    pages = {"aks": ("enableAutoScaling: false", "--node-count 0"),
             "eks": ("k8s.io/cluster-autoscaler/enabled", "minSize", "Karpenter"),
             "gke": ("--no-enable-autoscaling", "auto-provisioning"),
             "ack": ("auto_scaling.enable", "desired_size")}
    for cloud, must in pages.items():
        assert f"](docs/{cloud}.md#the-clouds-own-autoscaler-off-and-scaling-from-zero)" in off, cloud
        section = md_section((ROOT / "docs" / f"{cloud}.md").read_text(), CLOUD_PAGE_OFF)
        for words in (*must, "GPUDemandPending", "schedules"):
            assert words in section, (cloud, words)


TUNING = ROOT / "docs" / "tuning.md"
GUIDE = ["## What to run", "## Base config", "## Reading the report", "## What to apply", "## Limits"]
#: The rounds of measurement the guide used to hold, each kept as a section of BENCHMARKS.md.
ROUNDS = ["Issue 37's goals on 25 unseen days", "Round 9: Alertmanager's timing is part of what was tuned",
          "Round 9: what any reactive rule reaches", "Round 8: a cheaper replay", "Round 7: a deeper search",
          "Round 6: the headroom kept from the cluster", "Round 5: how far the settings reach",
          "Round 4: where the node-hours go", "Round 3: why the search finds nothing cheaper",
          "Before issue 37: the cheapest within the budget"]


def _base_config() -> str:
    found = re.search(r"```yaml\n(.*?)```", md_section(TUNING.read_text(), "## Base config"), re.DOTALL)
    assert found, "docs/tuning.md's Base config has no YAML block"
    return found.group(1)


def test_tuning_is_a_guide_in_the_order_an_operator_needs_it() -> None:
    headings = _headings(TUNING.read_text())
    assert [h for h in headings if h in GUIDE] == GUIDE, headings  # all there, what to apply before the limits
    assert not [h for h in headings if re.search(r"[Rr]ound \d|issue \d", h)], "a round of measurement left"
    history = _headings((ROOT / "BENCHMARKS.md").read_text())
    for name in ROUNDS:
        assert any(h.startswith("### ") and name in h for h in history), f"BENCHMARKS.md lacks {name!r}"
    assert "tuned.yaml" in md_section(TUNING.read_text(), "## What to apply")


def test_the_guides_base_config_loads_and_replays(tmp_path: Path) -> None:
    """The base config as the replay reads it (the project's loader, its `replay:` section included), then replayed
    on three hours of demand by the command the guide gives."""
    from autoscaler.config.load import load_replay_config

    base = tmp_path / "base.yaml"
    base.write_text(_base_config())
    _, settings = load_replay_config(str(base))
    replay = settings.config.replay
    assert replay is not None and {r.action.value for r in replay.rules} == {"scale_out", "scale_in"}
    assert {r.pool for r in replay.rules} == {p.name for p in settings.config.pools}
    trace = tmp_path / "trace.csv"
    rows = [f"2026-01-05T{m // 60:02d}:{m % 60:02d}:00Z,{2 + 4 * (60 <= m < 120):.1f}" for m in range(180)]
    trace.write_text("timestamp,demand\n" + "\n".join(rows) + "\n")
    out = subprocess.run([sys.executable, "-m", "autoscaler", "replay", "--config", str(base), "--trace", str(trace),
                          "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["minutes"] == 180 and summary["scale_actions"] > 0


def _slugs(text: str) -> set[str]:
    """GitHub's anchors of a page's headings (a repeated heading gets -1, -2, …)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in _headings(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """Relative links of a page whose file or heading anchor does not exist."""
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or (anchor and where.suffix == ".md" and anchor not in _slugs(where.read_text())):
            broken.append(target)
    return broken


PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs" / f"{name}.md" for name in
                                                      ("config", "tuning", "aks", "eks", "gke", "ack", "dra",
                                                       "upgrading", "production"))]


def test_links_of_the_moved_pages_resolve(tmp_path: Path) -> None:
    """The config reference and the tuning history moved: every relative link and anchor still lands."""
    probe = tmp_path / "probe.md"
    probe.write_text("## Here\n[a](#here) [b](#gone) [c](missing.md) [d](probe.md#here) [e](https://x.org/#y)\n")
    assert broken_links(probe) == ["#gone", "missing.md"]  # the checker sees a broken link
    broken = {page.name: broken_links(page) for page in PAGES}
    assert not any(broken.values()), broken


def test_dra_guide_says_how_to_check_it_works_and_what_a_mig_pool_divides_by() -> None:
    dra = (ROOT / "docs" / "dra.md").read_text()
    check = md_section(dra, "## Check it works")
    for words in ("python -m autoscaler nodes", "GET /api/v1/pools/", '"dra": "read"', "gpu.nvidia.com",
                  "gpu_autoscaler_pool_gpus", '"dra": "not_read"', "NODE"):
        assert words in check, words
    mig = md_section(dra, "### MIG pools: `gpus_per_node`")
    assert "gpus_per_node: 56" in mig and "nvidia.com/mig-" in mig


def test_upgrading_has_a_checklist_per_release_with_every_must_do() -> None:
    """The steps an operator must take, release by release: the chart's forced-removal default, rbac.yaml again for
    plain manifests, old workers failing mid-rollout, the new Alertmanager repeat, the held scale-in."""
    doc = (ROOT / "docs" / "upgrading.md").read_text()
    must = {"### From 0.4 to 0.5": ("forced_removal: true", "deploy/kubernetes/rbac.yaml", "Can't locate revision",
                                   "schema-downgrade 0005", "nodeAwareScaleIn.uses", "oncall", "check-config"),
            "### From 0.5 to 0.6": ("repeat_interval: 5m", "group_interval: 1m", "stabilization_window: 1m",
                                   "alertmanager-route.yml", "256 KiB", "check-config")}
    for heading, words in must.items():
        items = md_section(doc, heading)
        assert len(re.findall(r"(?m)^\d+\. \*\*", items)) >= 4, heading  # numbered, each with its bold verb
        for word in words:
            assert word in items, (heading, word)


def named_paths(text: str) -> set[str]:
    """The repository files a page names by path (``tests/…py``, ``bench/…py``, ``autoscaler/…py``, ``deploy/…``)."""
    pattern = r"(?<![\w/.-])((?:tests|bench|autoscaler|providers|scripts|deploy)/[\w./-]*\w\.(?:py|ya?ml|json|md))"
    return set(re.findall(pattern, text))


def test_every_file_a_page_names_exists() -> None:
    """A page that names a test or module by path names one that is there (the suite's rooms moved files).
    BENCHMARKS.md is a log of rounds (it names files of their day); bench/results/ holds what a bench writes."""
    assert named_paths("see `tests/test_gone.py` and tests/e2e/test_x.py, not a/tests/y.py") == {
        "tests/test_gone.py", "tests/e2e/test_x.py"}
    pages = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = {page.name: sorted(p for p in named_paths(page.read_text())
                                 if not (ROOT / p).exists() and not p.startswith("bench/results/"))
               for page in pages}
    assert not any(missing.values()), {k: v for k, v in missing.items() if v}
