"""Where prepared datasets and results live: outside the checkout, overridable by env vars."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = REPO_ROOT.parent / "shared" / "data" / "speech" / "manifest.jsonl"


def data_root() -> Path:
    """Prepared datasets (`ASRBENCH_DATA_DIR`, default under the user's data dir)."""
    env = os.environ.get("ASRBENCH_DATA_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir("asrbench")) / "datasets"


def results_root() -> Path:
    """Run directories (`ASRBENCH_RESULTS_DIR`, default under the user's data dir)."""
    env = os.environ.get("ASRBENCH_RESULTS_DIR")
    return Path(env) if env else Path(platformdirs.user_data_dir("asrbench")) / "results"
