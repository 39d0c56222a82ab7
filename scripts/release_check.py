"""`make release VERSION=x.y.z`: every place that names the version says x.y.z, or say which do not.

The places: CHANGELOG.md's newest release heading (``## [x.y.z] - YYYY-MM-DD``, below ``[Unreleased]``),
autoscaler/__init__.py's ``__version__`` (``GET /version``, ``/healthz``), the Helm chart's ``version`` and
``appVersion``, the image tag ``make image`` builds (``IMAGE``), and the image the plain manifests and compose run.
Exit 0 when they all agree, 1 (each disagreement on its own line) when not, 2 for a version that is not semantic.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
RELEASE = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})\s*$", re.M)
IMAGE_NAME = "gpu-pool-autoscaler"


def _read(root: Path, path: str) -> str:
    try:
        return (root / path).read_text()
    except OSError as exc:
        return f"<unreadable: {exc.strerror}>"


def _one(pattern: str, text: str) -> str | None:
    found = re.search(pattern, text, re.M)
    return found.group(1) if found else None


def found_versions(root: Path, image: str) -> dict[str, str | None]:
    """What each place says (None: it names no version where one belongs)."""
    changelog = RELEASE.search(_read(root, "CHANGELOG.md"))
    chart = _read(root, "deploy/helm/gpu-pool-autoscaler/Chart.yaml")
    image_of = rf"image:\s*\S*{IMAGE_NAME}:([^\s\"']+)"
    return {
        "CHANGELOG.md (newest release heading)": changelog.group("version") if changelog else None,
        "autoscaler/__init__.py __version__": _one(r'^__version__ = "([^"]+)"', _read(root, "autoscaler/__init__.py")),
        "deploy/helm/gpu-pool-autoscaler/Chart.yaml version": _one(r"^version:\s*\"?([^\s\"]+)\"?", chart),
        "deploy/helm/gpu-pool-autoscaler/Chart.yaml appVersion": _one(r"^appVersion:\s*\"?([^\s\"]+)\"?", chart),
        "the image tag (IMAGE)": image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else None,
        "docker-compose.yml autoscaler image": _one(image_of, _read(root, "docker-compose.yml")),
        "deploy/kubernetes/deployment.yaml image": _one(image_of, _read(root, "deploy/kubernetes/deployment.yaml")),
    }


def problems(version: str, root: Path, image: str) -> list[str]:
    """Each place that does not say ``version``, with what it says instead."""
    return [f"{where}: {said or 'no version found'} (want {version})"
            for where, said in found_versions(root, image).items() if said != version]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--image", default=None, help="the image make builds (default gpu-pool-autoscaler:VERSION)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    if not SEMVER.match(args.version):
        print(f"release: {args.version!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 0.4.0)", file=sys.stderr)
        return 2
    wrong = problems(args.version, args.root, args.image or f"{IMAGE_NAME}:{args.version}")
    if wrong:
        print(f"release {args.version}: {len(wrong)} place(s) disagree; make them all say {args.version} "
              "(docs/upgrading.md#releasing):", file=sys.stderr)
        for line in wrong:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"release {args.version}: CHANGELOG.md, __version__, the chart's version and appVersion, the image tag, "
          "compose and the plain manifests agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
