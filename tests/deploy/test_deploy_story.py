"""The README's deployment story, minus the cluster: `helm install` of the default chart, its pod booted from the image
under its read-only root (tests/support/container.py), and the README's first webhook answered as the README says."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.container import PROBE, Container, run
from tests.support.chart import ENV, ROOT, config_of, one, render



def as_the_kubelet_runs_it(docs: list[dict[str, Any]], stage: Path) -> Container:
    """The container the rendered Deployment makes: its env and the Secret's keys, the ConfigMap's file, emptyDirs
    as the writable paths, the pod's user and the container's read-only root."""
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "gpu-pool-autoscaler"}}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    binds, writable = {}, {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            config = stage / "config.yaml"
            config.write_text(yaml.safe_dump(config_of(docs)))
            binds[mount["mountPath"] + "/config.yaml"] = config
        else:
            assert "emptyDir" in volume, volume
            writable[mount["mountPath"]] = "mode=1777"  # an emptyDir is world-writable
    user = f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    env = {e["name"]: e["value"] for e in container["env"]} | {k: ENV[k] for k in ("AUTOSCALER_TOKEN",
                                                                                 "AUTOSCALER_PASSWORD")}
    return Container(env=env, user=user, binds=binds, writable=writable,
                     read_only=container["securityContext"]["readOnlyRootFilesystem"],
                     command=(container.get("command", []) + container.get("args", [])) or None)


def test_the_readmes_helm_install_reaches_a_first_decision(helm: str, stage: Path) -> None:
    """The README's deployment story, minus the cluster: the default chart's pod boots from the image under its
    read-only root and answers the README's first webhook as the README says."""
    readme = (ROOT / "README.md").read_text().split("## Deploying it", 1)[1].split("\n## ", 1)[0]
    install = re.search(r"helm install (\S+) (\S+) -n (\S+)", readme)
    assert install and install.groups() == ("gpu-pool-autoscaler", "deploy/helm/gpu-pool-autoscaler", "gpu-autoscaler")
    body = re.search(r"/webhook/alertmanager -d '(\{.*?\})'", readme, re.S)
    expected = re.search(r'# -> .*"pool":"(\w+)","action":"(\w+)","outcome":"(\w+)","from":(\d+),"to":(\d+)', readme)
    assert body and expected
    docs = render(helm)
    probe = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
    health = f"python -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080{probe['path']}')\""
    found, log = run(stage, as_the_kubelet_runs_it(docs, stage), PROBE, health, ENV["AUTOSCALER_TOKEN"],
                     json.dumps(json.loads(body.group(1))))
    assert found["healthy"] and found["readyz"] == 200 and found["metrics"] is True, log[-3000:]
    decision = found["decision"]
    pool, action, outcome, before, after = expected.groups()
    assert (decision["pool"], decision["action"], decision["outcome"]) == (pool, action, outcome), decision
    assert (decision["from"], decision["to"]) == (int(before), int(after))
