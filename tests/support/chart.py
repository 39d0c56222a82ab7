"""The Helm chart under test: the real helm binary (unpacked from PyPI by scripts/fetch_helm.py) and its rendering."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpu-pool-autoscaler"
#: What the Secret holds in these tests (and the extraEnv the AKS value set names).
ENV = {"AUTOSCALER_TOKEN": "t" * 24, "AUTOSCALER_PASSWORD": "p" * 24,
       "DATABASE_URL": "postgresql://u:p@db:5432/a", "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000000"}




def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    """`helm template` of the chart as the README installs it, as YAML documents."""
    out = run_tool([helm, "template", "gpu-pool-autoscaler", str(CHART), "-n", "gpu-autoscaler", *args])
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def value_set(name: str) -> list[str]:
    """The arguments that select one of the chart's value sets (ci/<name>-values.yaml)."""
    return ["-f", str(CHART / "ci" / f"{name}-values.yaml")]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def config_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The service's config file as the chart rendered it."""
    found = [d["data"]["config.yaml"] for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"]]
    assert len(found) == 1
    return dict(yaml.safe_load(found[0]))
