"""The chart's NetworkPolicy opens each cloud identity's token endpoint, and only it (real ``helm template``)."""
from __future__ import annotations

from typing import Any

import pytest

from tests.support.chart import one, render, value_set

IMDS = "169.254.169.254/32"


def rules(docs: list[dict[str, Any]]) -> set[tuple[tuple[str, ...], tuple[int, ...]]]:
    """Each egress rule as (its ipBlocks' CIDRs, its TCP/UDP ports)."""
    out = set()
    for rule in one(docs, "NetworkPolicy")["spec"]["egress"]:
        cidrs = tuple(sorted(t["ipBlock"]["cidr"] for t in rule.get("to", [])))
        out.add((cidrs, tuple(sorted(p["port"] for p in rule["ports"]))))
    return out


BASE = {((), (53, 53)), ((), (443, 6443))}
POD_IDENTITY = (("169.254.170.23/32", "fd00:ec2::23/128"), (80,))
GKE = (("169.254.169.252/32", IMDS), (80, 988))


@pytest.mark.parametrize("args,extra", [
    pytest.param([], set(), id="default-dns-https-apiserver-only"),
    pytest.param(value_set("aks"), set(), id="aks-workload-identity-needs-https-only"),
    pytest.param(value_set("eks"), set(), id="eks-irsa-needs-https-only"),
    pytest.param(["--set", "networkPolicy.identityEgress.eksPodIdentity=true"], {POD_IDENTITY},
                 id="eks-pod-identity-agent"),
    pytest.param(value_set("gke"), {GKE}, id="gke-workload-identity-metadata-server"),
    pytest.param(["--set", "networkPolicy.identityEgress.gkeMetadata=true"], {GKE}, id="gke-metadata-by-value"),
    pytest.param(["--set", "networkPolicy.identityEgress.instanceMetadata=true"], {((IMDS,), (80,))},
                 id="imds-node-identity"),
    pytest.param([*value_set("postgresql")], {((), (5432,))}, id="postgresql"),
])
def test_egress_per_cloud_identity(helm: str, args: list[str], extra: set[Any]) -> None:
    assert rules(render(helm, *args)) == BASE | extra


def test_the_identity_rules_name_their_address_not_any_host(helm: str) -> None:
    """Port 80 is open only towards the link-local identity endpoints."""
    docs = render(helm, "--set", "networkPolicy.identityEgress.eksPodIdentity=true", "--set",
                  "networkPolicy.identityEgress.gkeMetadata=true")
    for rule in one(docs, "NetworkPolicy")["spec"]["egress"]:
        if any(p["port"] in (80, 988) for p in rule["ports"]):
            assert rule["to"] and all(t["ipBlock"]["cidr"].endswith(("/32", "/128")) for t in rule["to"]), rule


def test_a_misspelt_identity_key_is_refused(helm: str) -> None:
    from tests.support.chart import CHART, run_tool

    out = run_tool([helm, "template", "x", str(CHART), "--set", "networkPolicy.identityEgress.eksPodIdentty=true"])
    assert out.returncode != 0 and "eksPodIdentty" in out.stderr, out.stderr
