"""Where prepared datasets and results live, and the other paths the environment supplies.

The environment supplies paths only (never sizing; that comes from the profile):

    ASRBENCH_DATA_DIR     prepared datasets           default ~/.cache/oasr/asrbench
    ASRBENCH_RESULTS_DIR  runs, validations, baselines default $XDG_DATA_HOME/oasr/asrbench/results
    CKPT_DIR              default checkpoint of oasr_engine and oasr_server
    WHISPER_CKPT          default model of the transformers backend
    LJSPEECH_DIR, AUDIO_DIR, WAV_DIR   discovery of a local LJSpeech copy; audio root of manifests
    OASR_SPEECH_DATA      the dev speech set (as the tests read it) default ../shared/data/speech
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEV_MANIFEST = Path(os.environ.get("OASR_SPEECH_DATA", REPO_ROOT.parent / "shared" / "data" / "speech")) / "manifest.jsonl"
"""Our dev speech set: the primary dataset when no LibriSpeech copy is prepared."""
DEFAULT_MANIFEST = DEV_MANIFEST

_data_dir_override: Path | None = None


def set_data_dir(path: Path | None) -> None:
    """`--data-dir` on the command line; wins over ASRBENCH_DATA_DIR."""
    global _data_dir_override
    _data_dir_override = path


def data_root() -> Path:
    """Prepared datasets: `--data-dir`, `ASRBENCH_DATA_DIR`, else ~/.cache/oasr/asrbench."""
    if _data_dir_override is not None:
        return _data_dir_override
    env = os.environ.get("ASRBENCH_DATA_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "oasr" / "asrbench"


def results_root() -> Path:
    """`ASRBENCH_RESULTS_DIR`, else `$XDG_DATA_HOME/oasr/asrbench/results` (~/.local/share/...)."""
    env = os.environ.get("ASRBENCH_RESULTS_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "oasr" / "asrbench" / "results"


def env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def default_ckpt_dir() -> str:
    """`CKPT_DIR` or empty (empty = the embedded Whisper tiny.en)."""
    return os.environ.get("CKPT_DIR", "").strip()
