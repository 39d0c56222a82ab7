"""Drill: check-config on plausible mistakes in the new keys (node selectors, schedules, demand mode, EKS and GKE
sections), all in one file. One run names every problem, each with what is wrong and how to fix it; no traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.__main__ import main

MISTAKES = """
server: {auth: {bearer_tokens: [abcdefgh1]}}
kubernetes: {host: "http://127.0.0.1:1", token: t}
rules: [{match: {alertname: X}, pool: gpu, action: scale_out}]
pools:
  - name: gpu
    provider: simulated
    min: 0
    max: 4
    node_selector: {pool: gpu}          # a Kubernetes nodeSelector mapping, not the selector string
    scale_out: {mode: demand}           # and no gpus_per_node
    schedules: [{cron: "0 8 * * 1-5", duration: 11h, min: 6, timezone: Europe/Warsw}]
  - {name: eks-a10, provider: eks, min: 0, max: 8, eks: {region: us-east-1, cluster: prod}}
  - {name: gke-l4, provider: gke, min: 0, max: 8, gke: {project: p, cluster: prod, node_pool: gpu-l4}}
"""


def test_every_mistake_in_the_new_keys_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(MISTAKES)
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr()
    lines = out.err.splitlines()
    assert "Traceback" not in out.err + out.out
    for expected in (
            'pools[0].node_selector: a mapping; write the selector as one string: node_selector: "pool=gpu"',
            "pools[0].schedules[0].min: must be <= max (4)",
            "pools[0].schedules[0].timezone: 'Europe/Warsw' is not an IANA time zone (e.g. Europe/Warsaw, UTC)",
            "pools[0].gpus_per_node: required with scale_out.mode demand (the GPUs one node adds)",
            "pools[1].eks.nodegroup: Field required",
            "pools[2].gke.location: Field required"):
        assert expected in lines, "\n".join(lines)
