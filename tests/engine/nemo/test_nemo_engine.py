"""The nemo family through the public engine API: detection, offline and streaming requests,
output fields, aborts."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from engine import ASREngine, EngineConfig
from engine.errors import UnsupportedError
from engine.types import DecodingOptions, RequestOutput
from tests.engine.nemo.conftest import FIXTURES, clip, reference


@pytest.fixture(scope="module")
def streaming_engine() -> ASREngine:
    engine = ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / "hybrid_cache_aware"), service_mode="streaming",
                                    num_threads=1))  # fmt: skip
    yield engine
    engine.shutdown()


def feed_in_chunks(engine: ASREngine, rid: str, audio: np.ndarray) -> list[RequestOutput]:
    """Feed 200 ms at a time with a step after each, then step until the stream's final."""
    outputs = []
    for start in range(0, len(audio), 3200):
        engine.feed_chunk(rid, audio[start : start + 3200], is_last=start + 3200 >= len(audio))
        outputs += [o for o in engine.step() if o.request_id == rid]
    while not (outputs and outputs[-1].finished):
        outputs += [o for o in engine.step() if o.request_id == rid]
    return outputs


def test_family_is_detected_and_described(streaming_engine: ASREngine) -> None:
    assert streaming_engine.family == "nemo"
    info = streaming_engine.info()
    assert info["family"] == "nemo" and info["streaming_enabled"]
    assert info["decode_methods"] == ["rnnt", "ctc"] and info["decode_method"] == "rnnt"
    assert [la["att_context_size"] for la in info["stream_settings"]["look_aheads"]] == [[12, 3], [12, 1], [12, 0]]
    assert info["stream_settings"]["look_ahead"]["chunk_ms"] == 320


def test_offline_transcription_fields(streaming_engine: ASREngine) -> None:
    audio = clip("hybrid_cache_aware", "mfa_thoughts")
    out = streaming_engine.transcribe_outputs(audio, decoding=DecodingOptions(word_timestamps=True, logprobs=True))[0]
    ref = reference("hybrid_cache_aware")["offline"]["mfa_thoughts"]["rnnt"]
    assert out.tokens == ref["tokens"]
    assert out.timestamps == [round(f * 0.08, 3) for f in ref["frames"]]
    assert out.token_logprobs is not None and len(out.token_logprobs) == len(out.tokens)
    assert out.confidence == pytest.approx(math.exp(sum(out.token_logprobs) / len(out.tokens)))
    assert out.words and "".join(w.word for w in out.words) == out.text.replace(" ", "")
    assert all(0 <= w.start < w.end <= out.duration + 0.08 for w in out.words)



def test_live_logprobs_come_with_each_tokens_bytes(streaming_engine: ASREngine) -> None:
    audio = clip("hybrid_cache_aware", "libri_61-70968-0000")
    rid = streaming_engine.add_streaming_request(decoding=DecodingOptions(logprobs=True))
    outputs = feed_in_chunks(streaming_engine, rid, audio)
    assert outputs[-1].text and sum(not o.finished for o in outputs) > 3
    for out in outputs:
        assert out.token_logprobs is not None and out.token_bytes is not None
        assert len(out.token_logprobs) == len(out.token_bytes) == len(out.tokens)
        assert all(lp <= 0.0 for lp in out.token_logprobs)
        assert b"".join(out.token_bytes).decode().strip() == out.text


def test_streaming_through_the_engine(streaming_engine: ASREngine) -> None:
    audio = clip("hybrid_cache_aware", "libri_61-70968-0000")
    rid = streaming_engine.add_streaming_request()
    outputs = feed_in_chunks(streaming_engine, rid, audio)
    assert [o.finished for o in outputs].count(True) == 1
    expected = next(c for c in reference("hybrid_cache_aware")["cache_aware"]
                    if c["look_ahead"] == [12, 3] and c["head"] == "rnnt" and c["clip"] == "libri_61-70968-0000")  # fmt: skip
    assert outputs[-1].tokens == expected["tokens"]
    partials = [o for o in outputs if not o.finished]
    assert len(partials) > 3
    assert all(b.committed.startswith(a.committed) for a, b in itertools.pairwise(partials))


def test_abort_and_empty_stream(streaming_engine: ASREngine) -> None:
    rid = streaming_engine.add_streaming_request()
    streaming_engine.feed_chunk(rid, np.zeros(8000, dtype=np.float32))
    streaming_engine.step()
    streaming_engine.abort_request(rid)
    outs = [o for o in streaming_engine.step() if o.request_id == rid]
    assert [o.finish_reason for o in outs] == ["abort"]
    empty = streaming_engine.add_streaming_request()
    streaming_engine.feed_chunk(empty, np.zeros(0, dtype=np.float32), is_last=True)
    outs = []
    for _ in range(5):
        outs += [o for o in streaming_engine.step() if o.request_id == empty and o.finished]
    assert len(outs) == 1 and outs[0].finish_reason == "stop" and outs[0].text == ""
    assert streaming_engine.runner.stats().streams == 0


def test_ctc_prefix_beam_search_gives_nbest() -> None:
    engine = ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / "hybrid_cache_aware"),
                                    decode_method="ctc", num_threads=1))  # fmt: skip
    try:
        audio = clip("hybrid_cache_aware", "ps_goforward")
        greedy = engine.transcribe_outputs(audio)[0]
        assert greedy.tokens == reference("hybrid_cache_aware")["offline"]["ps_goforward"]["ctc"]["tokens"]
        beam = engine.transcribe_outputs(audio, decoding=DecodingOptions(beam_size=4, n_best=3))[0]
        assert 1 <= len(beam.nbest) <= 3 and beam.nbest[0].text == beam.text
        assert all(0 <= a.confidence <= 1 for a in beam.nbest)
    finally:
        engine.shutdown()


def test_transducer_beam_search_gives_nemo_nbest_and_admission_bounds_it() -> None:
    """Through the engine: the RNN-T's malsd_batch n-best equals NeMo's; a beam past the declared
    16 is refused at admission."""
    engine = ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / "hybrid_cache_aware"), num_threads=1))
    try:
        setting = next(s for s in json.loads((FIXTURES / "hybrid_cache_aware" / "beam_reference.json").read_text())
                       ["offline"] if s["beam"] == 4 and s["clip"] == "ps_goforward")  # fmt: skip
        out = engine.transcribe_outputs(clip("hybrid_cache_aware", "ps_goforward"),
                                        decoding=DecodingOptions(beam_size=4, n_best=4))[0]  # fmt: skip
        text = engine.runner.ckpt.tokenizer.text  # type: ignore[attr-defined]
        assert [a.text for a in out.nbest] == [text(h["tokens"]) for h in setting["nbest"]]
        assert all(0 < a.confidence <= 1 for a in out.nbest)
        with pytest.raises(UnsupportedError, match="largest beam is 16"):
            engine.validate_options(DecodingOptions(beam_size=17, n_best=1))
    finally:
        engine.shutdown()
