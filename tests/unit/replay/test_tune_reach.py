"""bench/reach.py: the best point of the tuner's space as the unseen days judge it (a diagnostic bound, issue 37)."""
from __future__ import annotations

from bench.reach import _init, held, rank, reach, score
from bench.tune import FAMILIES


def test_reach_reports_its_best_points_as_the_unseen_days_judge_them() -> None:
    out = reach("noisy_plateau", candidates=3, rounds=1, top=3, neighbours=2, workers=1, smoke=True)
    assert out["days"] == 3 and out["base_config"] == FAMILIES["noisy_plateau"].base
    assert 4 <= out["tried"] <= 1 + 3 + 3 * 2  # the base, the draws, the neighbours (a repeat is tried once)
    verdicts = [entry["verdict"] for entry in out["best"]]
    assert [rank(({}, v)) for v in verdicts] == sorted(rank(({}, v)) for v in verdicts)  # best first
    assert rank(({}, verdicts[0])) <= rank(({}, out["base"]))  # the base is one of the points tried
    budget = FAMILIES["noisy_plateau"].budget
    assert all(held(e["verdict"], budget) for e in out["best_held"])
    among_best = [e["settings"] for e in out["best"] if held(e["verdict"], budget)]
    assert [e["settings"] for e in out["best_held"]][:len(among_best)] == among_best  # the same order, first
    _init(out["base_config"], "noisy_plateau", True)
    for entry in out["best"]:  # replayed afresh in this process, each point gives the verdict reported
        assert score(entry["candidate"]) == entry["verdict"]
