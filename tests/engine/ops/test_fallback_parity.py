"""Must-show 4: the engine's parity tests pass with the compiled operators (this run) and with
them forced off (OASR_DISABLE_EXTENSIONS=1, rerun here in a child pytest). The WeNet and NeMo
modules are the ones that run operators (CTC prefix beam search, paged attention, the RNN-T label
loop: NeMo's parity against NeMo's own outputs runs on both paths); the extension test's
engine check builds a Whisper engine with the switch on and sees the Python path reported.
Whisper's int8 layers run the int8 row operators, whose results are bitwise equal to their
torch references (test_int8_rows.py, which also compares an int8 layer on both paths); Whisper's
batch-invariance test is not repeated here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.ops.extension import DISABLE_ENV, disabled_by_env

ROOT = Path(__file__).resolve().parents[3]
PARITY_MODULES = (
    "tests/engine/wenet/test_wenet_parity.py",
    "tests/engine/wenet/test_wenet_batching.py",
    "tests/engine/wenet/test_wenet_ctc.py",
    "tests/engine/wenet/test_wenet_keywords.py",
    "tests/engine/nemo/test_nemo_parity.py",
    "tests/engine/ops/test_extension.py",
)


def test_parity_modules_pass_with_the_extension_forced_off() -> None:
    if disabled_by_env():
        pytest.skip(f"this run already has {DISABLE_ENV}=1")
    env = {**os.environ, DISABLE_ENV: "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *PARITY_MODULES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
