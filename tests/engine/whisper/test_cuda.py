"""Whisper on CUDA (float16): the paths a GPU takes, checked where one exists and skipped cleanly
elsewhere (`benchmarks/gpu_check.sh` runs them with the benchmarks on a CUDA machine)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.conftest import Clip, wer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

WER_MARGIN = 1.0  # points: float16 on the GPU against the CPU engine on the same clips


@pytest.fixture(scope="module")
def cuda_engine() -> Any:
    from engine import ASREngine, EngineConfig

    eng = ASREngine(EngineConfig(device="cuda"))
    yield eng
    eng.shutdown()


def test_the_gpu_engine_runs_float16_without_int8(cuda_engine: Any) -> None:
    info = cuda_engine.info()
    assert info["device"].startswith("cuda") and info["dtype"] == "float16"
    assert info["quantization"] == "none", "'auto' must not quantize to int8 on a GPU"


def test_int8_is_refused_on_cuda() -> None:
    from engine import ASREngine, EngineConfig
    from engine.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="runs on CPU"):
        ASREngine(EngineConfig(device="cuda", quantization="int8_w8a8"))


def test_float16_dev_set_wer_tracks_the_cpu_engine(cuda_engine: Any, clips: list[Clip],
                                                   greedy_alone: dict[str, Any]) -> None:
    scored = [c for c in clips if c.id in greedy_alone]
    refs = [c.text or "" for c in scored]
    outs = cuda_engine.transcribe_outputs([c.audio for c in scored])
    assert all(o.finish_reason == "stop" for o in outs)
    gpu_wer = wer(refs, [o.text for o in outs])
    cpu_wer = wer(refs, [greedy_alone[c.id].text for c in scored])
    assert gpu_wer <= cpu_wer + WER_MARGIN, (gpu_wer, cpu_wer)


def test_beam_search_and_word_timestamps_on_cuda(cuda_engine: Any, clips: list[Clip]) -> None:
    from engine import DecodingOptions

    clip = next(c for c in clips if c.id == "jfk_inaugural")
    beam = cuda_engine.transcribe_outputs(clip.audio, decoding=DecodingOptions(beam_size=5, n_best=3))[0]
    words = cuda_engine.transcribe_outputs(clip.audio, decoding=DecodingOptions(word_timestamps=True))[0]
    assert beam.finish_reason == "stop" and len(beam.nbest) >= 1 and "country" in beam.text.lower()
    assert words.words and all(0.0 <= w.start <= w.end <= clip.duration + 0.5 for w in words.words)


def test_a_live_stream_on_cuda_ends_with_its_transcript(clips: list[Clip]) -> None:
    from engine import ASREngine, EngineConfig

    clip = next(c for c in clips if c.id == "libri_61-70968-0000")
    eng = ASREngine(EngineConfig(device="cuda", service_mode="streaming"))
    try:
        rid = eng.add_streaming_request()
        outputs = []
        for off in range(0, clip.audio.size, 8000):
            eng.feed_chunk(rid, clip.audio[off : off + 8000], is_last=off + 8000 >= clip.audio.size)
            while eng.has_work():
                outputs.extend(o for o in eng.step() if o.request_id == rid)
    finally:
        eng.shutdown()
    assert outputs and outputs[-1].finished and outputs[-1].finish_reason == "stop"
    assert wer([clip.text or ""], [outputs[-1].text]) <= 30.0
