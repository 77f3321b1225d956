"""The subset of kustomize our manifests use, in Python, for machines without kubectl.

Supported: `resources` (files and directories holding a kustomization), `patches` with a
`path` to a strategic-merge patch, and `images` (newName/newTag). Anything else in a
kustomization raises, so a manifest change that needs more cannot render wrongly in
silence; `test_k8s.py` also compares this renderer with `kubectl kustomize` when the
binary is there.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

__all__ = ["render"]

Manifest = dict[str, Any]

SUPPORTED_FIELDS = {"apiVersion", "kind", "resources", "patches", "images"}

# Strategic-merge keys of the list fields we patch (from the Kubernetes API's
# x-kubernetes-patch-merge-key); lists without one are replaced whole, as in kustomize.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
}


def render(directory: Path) -> list[Manifest]:
    """Objects of the kustomization in `directory`, with patches and image overrides applied."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED_FIELDS
    if unknown:
        raise ValueError(f"{directory}: kustomize_lite does not support {sorted(unknown)}")

    objects: list[Manifest] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            objects.extend(render(path))
        else:
            objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)

    for patch_entry in kustomization.get("patches", []):
        if set(patch_entry) != {"path"}:
            raise ValueError(f"{directory}: only `patches: - path:` is supported, got {patch_entry}")
        patch = yaml.safe_load((directory / patch_entry["path"]).read_text())
        target = _find(objects, patch["kind"], patch["metadata"]["name"])
        objects[objects.index(target)] = _merge(target, patch)

    for image in kustomization.get("images", []):
        _set_image(objects, image)
    return objects


def _find(objects: list[Manifest], kind: str, name: str) -> Manifest:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise KeyError(f"patch target {kind}/{name} not among the resources")


def _merge(base: Any, patch: Any, field: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = _merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        out = copy.deepcopy(base)
        for item in patch:
            match = next((i for i, b in enumerate(out) if b.get(key) == item.get(key)), None)
            if match is None:
                out.append(copy.deepcopy(item))
            else:
                out[match] = _merge(out[match], item)
        return out
    return copy.deepcopy(patch)


def _set_image(objects: list[Manifest], image: dict[str, str]) -> None:
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            name, _, tag = container["image"].partition(":")
            if name != image["name"]:
                continue
            container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}".rstrip(":")
