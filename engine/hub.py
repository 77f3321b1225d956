"""Models by name: a short alias (`small.en`, `distil-large-v3`) or a Hugging Face repo id
(`Systran/faster-whisper-small`, `nvidia/parakeet-tdt-0.6b-v2@<revision>`) resolved to a local
checkpoint directory in the standard Hugging Face cache.

Only the files some model family loads are downloaded (`ModelFamily.hub_files`), so a repo that
also carries other formats (Flax, TensorFlow, ONNX) costs only the weights the engine reads. The
family is then detected from the downloaded contents by the family table, as for any directory.
The environment is read at call time: `HF_ENDPOINT` (another hub, or a mirror), `HF_HUB_OFFLINE`
(the cache only, never the network), `HF_HUB_CACHE` / `HF_HOME` (where the cache lives) and
`HF_TOKEN`. huggingface_hub is imported only when a name is resolved: the embedded default model
and local directories never touch it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from engine.errors import CheckpointError
from engine.families import FAMILY_TABLE, load_family, resolve_family
from engine.model_names import ALIASES, ModelRef, parse_model_name

logger = logging.getLogger(__name__)


class ModelNotFoundError(CheckpointError):
    """A model named by alias or repo id is neither on the hub nor in the cache."""


@dataclass(frozen=True)
class ResolvedModel:
    ref: ModelRef
    path: str
    """Local snapshot directory holding the downloaded files."""
    family: str
    """The family that recognised the downloaded checkpoint."""


def hub_patterns() -> list[str]:
    """Every family's `hub_files`: what a download may fetch."""
    patterns: list[str] = []
    for entry in FAMILY_TABLE:
        patterns += [p for p in load_family(entry.name).hub_files if p not in patterns]
    return patterns


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _cache_dir() -> str | None:
    """HF_HUB_CACHE, else HF_HOME/hub, read now (huggingface_hub reads them once, at its import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _quiet_tqdm() -> type:
    from tqdm.auto import tqdm

    class Quiet(tqdm):  # type: ignore[misc]
        """A server's download logs one line per model, not a progress bar in its log."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet


def download(ref: ModelRef, *, progress: type | None = None, offline: bool | None = None) -> str:
    """The snapshot directory of `ref` in the Hugging Face cache, downloading what is missing.
    `progress`: a tqdm class for progress bars (None: no bar). `offline` None follows HF_HUB_OFFLINE."""
    import huggingface_hub
    from huggingface_hub import constants as hf_constants
    from huggingface_hub import errors as hf_errors

    offline = (_env_true("HF_HUB_OFFLINE") or hf_constants.HF_HUB_OFFLINE) if offline is None else offline
    endpoint = os.environ.get("HF_ENDPOINT") or None
    where = endpoint or hf_constants.ENDPOINT
    logger.info("resolving model %s (%s)", ref, "cache only" if offline else f"hub {where}")
    try:
        path = huggingface_hub.snapshot_download(
            ref.repo_id, revision=ref.revision, allow_patterns=hub_patterns(), cache_dir=_cache_dir(),
            endpoint=endpoint, local_files_only=offline, tqdm_class=progress or _quiet_tqdm())
    except hf_errors.RevisionNotFoundError as exc:
        raise ModelNotFoundError(f"model {ref.repo_id!r} has no revision {ref.revision!r} on {where}") from exc
    except hf_errors.RepositoryNotFoundError as exc:  # also gated/private without a token
        raise ModelNotFoundError(
            f"model repo {ref.repo_id!r} was not found on {where} (check the name; a private or gated "
            "repo needs HF_TOKEN)") from exc
    except hf_errors.LocalEntryNotFoundError as exc:  # offline, or the hub unreachable, and not cached
        reason = "HF_HUB_OFFLINE is set" if offline else f"{where} could not be reached"
        raise ModelNotFoundError(
            f"model {str(ref)!r} is not in the Hugging Face cache and {reason}; download it first with "
            f"`oasr models pull {ref}`") from exc
    except (OSError, ValueError) as exc:  # an HTTP error the hub returned, a malformed revision
        raise ModelNotFoundError(f"model {str(ref)!r} could not be downloaded from {where}: {exc}") from exc
    if not os.path.isdir(path) or not os.listdir(path):
        raise CheckpointError(
            f"model repo {str(ref)!r} holds none of the files a model family loads ({', '.join(hub_patterns())})")
    return str(path)


def resolve_model(name: str, revision: str | None = None, *, progress: type | None = None,
                  offline: bool | None = None) -> ResolvedModel:
    """Download (or find in the cache) the model `name` names and detect its family."""
    ref = parse_model_name(name, revision)
    if ref is None:
        return ResolvedModel(ModelRef(name), name, resolve_family(name).name)
    path = download(ref, progress=progress, offline=offline)
    try:
        family = resolve_family(path)
    except CheckpointError as exc:
        files = ", ".join(sorted(os.listdir(path)))
        raise CheckpointError(f"model repo {str(ref)!r} downloaded, but no model family recognises its files "
                              f"({files})") from exc
    logger.info("model %s is %s, at %s", ref, family.name, path)
    return ResolvedModel(ref, path, family.name)


def checkpoint_dir(name: str | None, revision: str | None = None) -> str | None:
    """`EngineConfig.ckpt_dir` made local: None (the embedded model) and directories as they are,
    a model name downloaded (or found in the cache)."""
    if name is None or parse_model_name(name, revision) is None:
        return name
    return resolve_model(name, revision).path


def cached_checkpoint_dir(name: str | None, revision: str | None = None) -> str | None:
    """`checkpoint_dir` without the network: None (the embedded model) and directories as they
    are, a model name's snapshot when the cache holds it; raises ModelNotFoundError when it does not."""
    ref = None if name is None else parse_model_name(name, revision)
    return name if ref is None else download(ref, offline=True)


__all__ = ["ALIASES", "ModelNotFoundError", "ModelRef", "ResolvedModel", "cached_checkpoint_dir", "checkpoint_dir",
           "download",
           "hub_patterns", "parse_model_name", "resolve_model"]
