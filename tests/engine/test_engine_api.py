"""The reference design's engine usage (seed 000, §7 and §11), run as written.

Each test is one usage example of the design, adapted only for our import path (`engine`
instead of `oasr.engine`), our checkpoint (the embedded Whisper tiny.en, so `ckpt_dir=None`)
and loading audio with soundfile instead of torchaudio; then it checks what the example prints.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import soundfile as sf
import soxr

from engine import ASREngine, DecodingOptions, EngineConfig, RequestOutput
from tests.conftest import DATA_DIR, manifest, wer

CKPT = None  # the design's "/path/to/ckpt": the embedded model
AUDIO = "mfa_thoughts.flac"
A_B_C = ("mfa_her.flac", "mfa_um.flac", "libri_61-70968-0000.flac")
MAX_WER = 20.0  # percent; tiny.en on these clips scores well under it offline


def wav(p: str) -> np.ndarray:
    """The design's `torchaudio.load(p)[0].squeeze(0).float()`, with soundfile (+ resampling to 16 kHz)."""
    data, rate = sf.read(DATA_DIR / p, dtype="float32", always_2d=True)
    mono = data.mean(axis=1)
    return soxr.resample(mono, rate, 16000).astype(np.float32) if rate != 16000 else mono


def reference(p: str) -> str:
    (text,) = [c.text for c in manifest() if c.path.name == p]
    assert text is not None
    return text


@pytest.fixture(scope="module")
def offline_engine() -> Iterator[ASREngine]:
    engine = ASREngine(EngineConfig(quantization="none", ckpt_dir=CKPT, service_mode="offline"))
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def engine() -> Iterator[ASREngine]:
    engine = ASREngine(EngineConfig(quantization="none", ckpt_dir=CKPT))  # the design's default: service_mode="streaming"
    yield engine
    engine.shutdown()


def test_7_1_offline_one_and_many(offline_engine: ASREngine) -> None:
    engine = offline_engine
    text = engine.transcribe_offline(wav(AUDIO))
    texts = engine.transcribe_offline([wav(p) for p in A_B_C])
    assert isinstance(text, str) and wer([reference(AUDIO)], [text]) <= MAX_WER, text
    assert isinstance(texts, list) and len(texts) == 3
    assert wer([reference(p) for p in A_B_C], texts) <= MAX_WER, texts


def test_7_1_transcribe_outputs_with_word_timestamps(offline_engine: ASREngine) -> None:
    engine = offline_engine
    (out,) = engine.transcribe_outputs(
        [wav(AUDIO)], streaming=False, decoding=DecodingOptions(word_timestamps=True)
    )
    printed = [f"{w.start:6.2f}-{w.end:6.2f}  {w.confidence:.2f}  {w.word}" for w in out.words or ()]
    assert isinstance(out, RequestOutput) and out.finish_reason == "stop"
    assert len(printed) == len(out.text.split())
    starts = [w.start for w in out.words or ()]
    assert starts == sorted(starts) and all(0 <= w.confidence <= 1 for w in out.words or ())
    assert out.nbest_texts == [out.text] and out.confidence is not None and 0 < out.confidence <= 1


def test_7_2_streaming_attached_audio(engine: ASREngine) -> None:
    texts = engine.transcribe([wav(p) for p in A_B_C], streaming=True)
    assert isinstance(texts, list) and len(texts) == 3
    assert wer([reference(p) for p in A_B_C], texts) <= MAX_WER, texts
    one = engine.transcribe(wav(AUDIO), streaming=True)
    assert isinstance(one, str) and wer([reference(AUDIO)], [one]) <= MAX_WER, one


def mic_chunks(samples_per_chunk: int) -> Iterator[np.ndarray]:
    """The design's microphone: the clip in fixed-size chunks (all but the last)."""
    audio = wav(AUDIO)
    for start in range(0, len(audio) - samples_per_chunk, samples_per_chunk):
        yield audio[start : start + samples_per_chunk]


def test_7_3_chunk_by_chunk_feed(engine: ASREngine) -> None:
    audio = wav(AUDIO)
    printed = []
    rid = engine.add_streaming_request()
    for chunk in mic_chunks(samples_per_chunk=4000):
        engine.feed_chunk(rid, chunk, is_last=False)
        outputs = engine.step()  # may return partial transcripts
        for o in outputs:
            if o.request_id == rid and not o.finished:
                printed.append("partial: " + o.text)
    last_chunk = audio[(len(audio) - 1) // 4000 * 4000 :]
    engine.feed_chunk(rid, last_chunk, is_last=True)
    final = engine.run()  # drain until finalised
    assert printed, "partials while the audio is fed"
    assert [o.request_id for o in final] == [rid] and final[0].finished
    assert wer([reference(AUDIO)], [final[0].text]) <= MAX_WER, final[0].text
    assert engine.num_running == engine.num_waiting == 0


def test_7_4_mixed_offline_and_streaming_on_one_engine() -> None:
    engine = ASREngine(EngineConfig(quantization="none", ckpt_dir=CKPT, max_batch_size=8))
    try:
        offline_paths, streaming_paths = A_B_C[:2], (A_B_C[2], AUDIO)
        path_of = {}
        for path in offline_paths:
            path_of[engine.add_request(wav(path), streaming=False)] = path
        for path in streaming_paths:
            path_of[engine.add_request(wav(path), streaming=True)] = path
        results = engine.run()  # one engine handles both pools
        assert sorted(r.request_id for r in results) == sorted(path_of)
        assert all(r.finished and r.finish_reason == "stop" for r in results)
        refs = [reference(path_of[r.request_id]) for r in results]
        assert wer(refs, [r.text for r in results]) <= MAX_WER
    finally:
        engine.shutdown()


def test_11_decoding_options_and_mid_flight_control(engine: ASREngine) -> None:
    audio = wav(AUDIO)
    rid = engine.add_request(audio, streaming=False,
                             decoding=DecodingOptions(beam_size=3, n_best=3, max_new_tokens=64))
    aborted = engine.add_request(audio, streaming=False)
    engine.abort_request(aborted)
    assert engine.num_waiting + engine.num_running >= 0  # observability is readable mid-flight
    finals = {o.request_id: o for o in engine.run()}
    assert set(finals) == {rid, aborted}
    assert finals[aborted].finish_reason == "abort"
    out = finals[rid]
    assert out.finish_reason == "stop" and 1 <= len(out.nbest_texts) <= 3 and out.nbest_texts[0] == out.text
    assert wer([reference(AUDIO)], [out.text]) <= MAX_WER
    assert engine.num_running == 0 and engine.num_waiting == 0


def test_run_returns_at_once_when_nothing_is_unfinished(engine: ASREngine) -> None:
    assert engine.run() == []


def test_transcribe_outputs_refuses_decoding_in_the_streaming_slot(engine: ASREngine) -> None:
    with pytest.raises(TypeError, match="streaming must be a bool"):
        engine.transcribe_outputs(wav(AUDIO), DecodingOptions())  # type: ignore[arg-type]
