"""WeNet outputs pinned: refactors of the engine, the seam or the kernels must not change them.

The pins (tests/fixtures/wenet_pins.json) are the token ids and text a seeded generated
checkpoint gives for four dev clips, greedy, streamed in 8-frame chunks through the paged KV
cache, computed by this module's `--regenerate` mode:

    PYTHONPATH=. python tests/engine/wenet/test_wenet_pins.py --regenerate

A random-weight model can sit near a tie between two units, where float rounding that differs
between CPUs (AVX2 / AVX-512, MKL / oneDNN kernels) could flip the argmax. The generator
therefore refuses to pin a clip unless, on every frame, the best unit beats the second by at
least MIN_MARGIN nepers: orders of magnitude above cross-CPU float32 differences (~1e-5 here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from engine.config import EngineConfig
from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import CheckpointSpec, drive_alone, record_log_probs, write_checkpoint
from tests.conftest import load_clip

PINS = Path(__file__).resolve().parents[2] / "fixtures" / "wenet_pins.json"
CLIPS = ("mfa_her", "mfa_thoughts", "mfa_words", "ps_cards_001")
SPEC = CheckpointSpec(seed=3, logit_scale=32.0)
CHUNK = 8
PIECE_SAMPLES = 2560  # 160 ms pieces, so streams take several steps per chunk
MIN_MARGIN = 0.05
"""Nepers between the best and second-best unit on every frame of a pinned clip."""


def _runner(root: Path) -> WenetRunner:
    ckpt = write_checkpoint(str(root / "pinned"), SPEC)
    return WenetRunner.from_config(EngineConfig(ckpt_dir=ckpt, service_mode="streaming", chunk_size=CHUNK,
                                                max_num_blocks=512))


def _decode(runner: WenetRunner, clip: str) -> tuple[dict[str, object], float]:
    seen = record_log_probs(runner)
    outs = drive_alone(runner, np.asarray(load_clip(clip)), PIECE_SAMPLES, request_id=clip)
    final = outs[-1]
    assert final.finished and final.finish_reason == "stop"
    log_probs = torch.cat(seen[clip])
    top2 = log_probs.topk(2, dim=-1).values
    margin = float((top2[:, 0] - top2[:, 1]).min())
    return {"tokens": final.tokens, "text": final.text}, margin


def test_outputs_are_pinned(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    pins = json.loads(PINS.read_text())
    runner = _runner(tmp_path)
    for clip in CLIPS:
        got, _ = _decode(runner, clip)
        assert got == pins[clip], f"{clip}: outputs changed"
    assert runner.stats().streams == 0


def regenerate() -> None:
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        runner = _runner(Path(tmp))
        pins = {}
        for clip in CLIPS:
            pins[clip], margin = _decode(runner, clip)
            if margin < MIN_MARGIN:
                sys.exit(f"{clip}: top-2 margin {margin:.4f} < {MIN_MARGIN}; pick another seed or clip")
            print(f"{clip}: {len(pins[clip]['tokens'])} tokens, min top-2 margin {margin:.3f}")
    PINS.parent.mkdir(parents=True, exist_ok=True)
    PINS.write_text(json.dumps(pins, indent=1) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python tests/engine/wenet/test_wenet_pins.py --regenerate")
    regenerate()
