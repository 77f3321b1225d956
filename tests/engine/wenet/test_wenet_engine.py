"""The WeNet family driven through the engine core: ASREngine with a generated streaming checkpoint."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from engine import ASREngine, EngineConfig
from engine.errors import UnsupportedError
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip

PIECE = 1600  # 100 ms


@pytest.fixture
def streaming_engine(wenet_ckpt: str) -> Iterator[ASREngine]:
    eng = ASREngine(
        EngineConfig(ckpt_dir=wenet_ckpt, service_mode="streaming", chunk_size=8, max_num_blocks=256)
    )
    yield eng
    eng.shutdown()


def feed_all(eng: ASREngine, streams: dict[str, np.ndarray]) -> dict[str, list[RequestOutput]]:
    """Feed every stream 100 ms per engine step, interleaved, until all have finished."""
    outs: dict[str, list[RequestOutput]] = {rid: [] for rid in streams}
    fed = dict.fromkeys(streams, 0)
    done: set[str] = set()
    while len(done) < len(streams):
        for rid, audio in streams.items():
            if fed[rid] < len(audio):
                eng.feed_chunk(
                    rid, audio[fed[rid] : fed[rid] + PIECE], is_last=fed[rid] + PIECE >= len(audio)
                )
                fed[rid] += PIECE
        for out in eng.step():
            outs[out.request_id].append(out)
            if out.finished:
                done.add(out.request_id)
    return outs


def test_streams_through_the_engine_match_offline(streaming_engine: ASREngine) -> None:
    eng = streaming_engine
    assert eng.family == "wenet" and eng.streaming_enabled
    audios = {
        eng.add_streaming_request(decoding=DecodingOptions(word_timestamps=True)): load_clip(
            "libri_61-70968-0000"
        ),
        eng.add_streaming_request(): load_clip("mfa_thoughts"),
    }
    outs = feed_all(eng, audios)
    for rid, audio in audios.items():
        partials, final = outs[rid][:-1], outs[rid][-1]
        assert len(partials) >= 3 and not any(p.finished for p in partials)
        assert final.finished and final.finish_reason == "stop" and final.text
        assert all(final.text.startswith(p.committed) for p in partials)
        offline = eng.transcribe_outputs(audio)[0]
        assert offline.tokens == final.tokens and offline.text == final.text
    first = outs[next(iter(audios))][-1]
    assert first.words and first.words[-1].end <= first.duration + 0.05
    stats = eng.runner.stats()
    assert stats.kv_blocks_used == 0 < stats.kv_blocks_capacity and stats.streams == 0


def test_abort_mid_stream_frees_the_blocks(streaming_engine: ASREngine) -> None:
    eng = streaming_engine
    rid = eng.add_streaming_request()
    audio = load_clip("libri_61-70968-0000")
    for start in range(0, 32000, PIECE):
        eng.feed_chunk(rid, audio[start : start + PIECE])
        eng.step()
    assert eng.runner.stats().kv_usage > 0
    eng.abort_request(rid)
    outs = eng.step()
    assert [(o.request_id, o.finish_reason) for o in outs] == [(rid, "abort")]
    stats = eng.runner.stats()
    assert stats.kv_blocks_used == 0 < stats.kv_blocks_capacity


def test_unsupported_options_are_refused_at_the_door(streaming_engine: ASREngine) -> None:
    for options in (DecodingOptions(beam_size=11, n_best=1), DecodingOptions(task="translate"),
                    DecodingOptions(temperature=0.5), DecodingOptions(prompt="hello"),
                    DecodingOptions(logprobs=True)):  # fmt: skip
        with pytest.raises(UnsupportedError):
            streaming_engine.add_streaming_request(decoding=options)
