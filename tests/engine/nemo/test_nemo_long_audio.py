"""A long offline NeMo request runs as NeMo's buffered inference (issue 43 item 3): windows of
`long_window_seconds` under the model's offline attention, the decoder state carried across
them, so its memory is that of one window however long the file is. A request up to
`long_audio_seconds` is unchanged (the whole-file forward the committed references pin:
test_nemo_parity.py); here: one window over the whole file equals the whole-file forward token for
token, many windows cover the file in order, and memory stays flat as the file doubles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import ASREngine, DecodingOptions, EngineConfig
from tests.conftest import load_clip
from tests.engine.nemo.conftest import FIXTURES, reference

RATE = 16000
REPO = Path(__file__).resolve().parents[3]


def recording(seconds: float) -> np.ndarray:
    pause = np.zeros(RATE, dtype=np.float32)
    unit = np.concatenate([load_clip("libri_61-70968-0000"), pause, load_clip("mfa_thoughts"), pause])
    return np.tile(unit, int(np.ceil(seconds * RATE / unit.size)))[: int(seconds * RATE)]


def engine(name: str, **nemo: object) -> ASREngine:
    return ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / name), service_mode="offline", num_threads=1,
                                  family_options={"nemo": nemo}))  # fmt: skip


@pytest.mark.parametrize("name", ["hybrid_cache_aware", "ctc_striding_bn", "tdt"])
def test_one_window_over_the_whole_file_is_the_whole_file_forward(name: str) -> None:
    audio = recording(25.0)
    whole = engine(name)  # 25 s <= long_audio_seconds: the whole-file forward
    windowed = engine(name, long_audio_seconds=10.0, long_window_seconds=(0.0, 60.0, 0.0))
    try:
        (a,) = whole.transcribe_outputs(audio)
        (b,) = windowed.transcribe_outputs(audio)
    finally:
        whole.shutdown()
        windowed.shutdown()
    assert a.tokens and b.tokens == a.tokens and b.timestamps == a.timestamps


def test_short_input_keeps_the_committed_reference() -> None:
    """Under the default limit, a dev clip decodes as NeMo's offline forward did (the reference)."""
    eng = engine("hybrid_cache_aware")
    try:
        (out,) = eng.transcribe_outputs(load_clip("mfa_thoughts"))
    finally:
        eng.shutdown()
    assert out.tokens == reference("hybrid_cache_aware")["offline"]["mfa_thoughts"]["rnnt"]["tokens"]


def test_many_windows_of_a_limited_context_model_equal_the_whole_file_forward() -> None:
    """hybrid_cache_aware attends 12 frames back and 3 ahead: 5 s of context on each side of
    every window is more than it sees, so 75 s in 10 s windows decode exactly as in one forward."""
    audio = recording(75.0)
    whole = engine("hybrid_cache_aware", long_audio_seconds=1e6)
    windowed = engine("hybrid_cache_aware", long_audio_seconds=30.0, long_window_seconds=(5.0, 10.0, 5.0))
    try:
        (want,) = whole.transcribe_outputs(audio)
        rid = windowed.add_request(audio, decoding=DecodingOptions(word_timestamps=True))
        outputs = [o for o in windowed.run() if o.request_id == rid]
        runner = windowed.runner
        assert runner.stats().streams == 0 and runner.free_slots() == runner.slots.num_slots  # type: ignore[attr-defined]
    finally:
        whole.shutdown()
        windowed.shutdown()
    (out,) = outputs  # offline: one output, no partials
    assert out.finished and out.error is None and out.finish_reason == "stop"
    assert out.tokens == want.tokens and out.timestamps == want.timestamps


@pytest.mark.parametrize("name", ["ctc_striding_bn", "tdt"])
def test_many_windows_of_a_full_attention_model_cover_the_file_in_order(name: str) -> None:
    audio = recording(75.0)
    eng = engine(name, long_audio_seconds=30.0, long_window_seconds=(5.0, 10.0, 5.0))
    try:
        (out,) = eng.transcribe_outputs(audio, decoding=DecodingOptions(word_timestamps=True))
    finally:
        eng.shutdown()
    assert out.finished and out.error is None and out.finish_reason == "stop"
    assert out.timestamps == sorted(out.timestamps)
    assert out.timestamps[0] < 5.0 and out.timestamps[-1] > 70.0  # the first and the last window decoded
    assert out.words and all(b.start >= a.start for a, b in zip(out.words, out.words[1:]))


def _growth_mib(minutes: float, nemo: dict[str, object]) -> float:
    """Peak RSS a request of `minutes` adds to a loaded engine (a child process of its own)."""
    cmd = [sys.executable, "-m", "benchmarks.family_hour", "--one", "nemo_ctc", "--minutes", str(minutes),
           "--family-options", json.dumps({"nemo": nemo})]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["error"] is None and row["finish_reason"] == "stop"
    return float(row["request_peak_mib"])


def test_memory_stays_flat_as_the_file_doubles() -> None:
    """Bound: a request's peak over the loaded engine is its audio plus one window's work, so
    doubling a windowed file adds no more than its extra audio (a few MiB/min) and slack; the
    whole-file forward at the doubled length needs several times as much (the bound can fail)."""
    windowed = {"long_audio_seconds": 20.0, "long_window_seconds": [5.0, 10.0, 5.0]}
    one, two = _growth_mib(1.0, windowed), _growth_mib(2.0, windowed)
    whole_two = _growth_mib(2.0, {"long_audio_seconds": 1e6})
    assert two <= one * 1.25 + 16, (one, two)
    assert whole_two > 2 * two, (two, whole_two)
