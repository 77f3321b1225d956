"""Shared access to the deployment files for the deploy tests: rendered overlays, the
Dockerfile's CMD, the alert rules and dashboards, and the server's declared metrics."""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy import kustomize_lite

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
MONITORING = ROOT / "deploy" / "monitoring"
OVERLAYS = ("cpu", "gpu")

Manifest = dict[str, Any]


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render_with_kubectl(directory: Path) -> list[Manifest]:
    binary = kubectl()
    assert binary is not None
    result = subprocess.run(
        [binary, "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=True
    )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def _render(overlay: str) -> tuple[Manifest, ...]:
    directory = K8S / "overlays" / overlay
    objects = render_with_kubectl(directory) if kubectl() else kustomize_lite.render(directory)
    return tuple(objects)


def render(overlay: str) -> list[Manifest]:
    """The overlay's objects: `kubectl kustomize` when installed, else kustomize_lite."""
    return json.loads(json.dumps(_render(overlay)))  # a deep copy callers may mutate


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def dockerfile_cmd() -> list[str]:
    from dockerfile_parse import DockerfileParser

    cmds = [
        i["value"] for i in DockerfileParser(str(ROOT / "Dockerfile")).structure if i["instruction"] == "CMD"
    ]
    argv: list[str] = json.loads(cmds[-1])
    return argv


def dockerfile_cmd_option(name: str) -> str:
    argv = dockerfile_cmd()
    return argv[argv.index(name) + 1]
