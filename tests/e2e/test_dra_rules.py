"""deploy/prometheus/gpu-dra-rules.yml: the pending alert built on gpu_autoscaler_pool_gpus, proven with promtool, and
the metric's name and labels checked against what the service exports."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from autoscaler.metrics import PoolStateCollector
from tests.support.pipeline import PROMTOOL, require_binary

PROM = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def test_promtool_unit_tests_of_the_dra_pending_rule_pass() -> None:
    tests = sorted((PROM / "tests" / "dra").glob("*.test.yml"))
    assert len(tests) == 1
    out = subprocess.run([require_binary(*PROMTOOL), "test", "rules", *(p.name for p in tests)],
                         cwd=tests[0].parent, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and out.stdout.count("SUCCESS") == 1, out.stdout + out.stderr


def test_the_rule_reads_the_gauge_the_service_exports() -> None:
    row = {"name": "h100", "paused": False, "cooldown": {"scale_out_remaining_s": 0, "scale_in_remaining_s": 0},
           "min": 0, "max": 8, "gpus": {"allocatable": 32, "requested": 9, "pending": 8}}
    families = {f.name: f for f in PoolStateCollector(lambda: [row]).collect()}
    samples = {(s.labels["pool"], s.labels["state"]): s.value for s in families["gpu_autoscaler_pool_gpus"].samples}
    assert samples == {("h100", "allocatable"): 32, ("h100", "requested"): 9, ("h100", "pending"): 8}
    rules = yaml.safe_load((PROM / "gpu-dra-rules.yml").read_text())["groups"][0]["rules"]
    assert 'gpu_autoscaler_pool_gpus{state="pending"}' in rules[0]["expr"]
    assert rules[1]["alert"] == "GPUDemandPending" and rules[1]["labels"]["autoscaler_action"] == "scale_out"
