"""A speech-LLM request over its one 30 s window is cut at silences and served (issue 43 item 3):
each segment decodes as its own rows of the batch, several at once, and the request's text is the
segments' texts in order, equal to what each segment's audio makes alone. Silence is not decoded;
n_best > 1 over one window is refused with a reason (UnsupportedError: a 400 on every surface)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from engine import ASREngine, DecodingOptions
from engine.errors import UnsupportedError
from engine.models.speechllm.longform import join_texts, plan_segments
from engine.vad import load_vad_model
from tests.conftest import load_clip
from tests.engine.speechllm.engines import fixture_engine, runner_of

MAX_NEW = 12
RATE = 16000
FIRST, SECOND = "libri_61-70968-0000", "mfa_thoughts"


@pytest.fixture(scope="module")
def engine() -> Iterator[ASREngine]:
    eng = fixture_engine(MAX_NEW)
    yield eng
    eng.shutdown()


def two_halves() -> np.ndarray:
    """~42 s: four times the first clip, then four times the second, each followed by 1 s of silence."""
    pause = np.zeros(RATE, dtype=np.float32)
    a, b = load_clip(FIRST), load_clip(SECOND)
    return np.concatenate([a, pause] * 4 + [b, pause] * 4)


_runner = runner_of


def test_over_one_window_is_served_with_text_from_both_halves(engine: ASREngine) -> None:
    audio = two_halves()
    half = audio.shape[0] // 2
    assert audio.shape[0] > 30 * RATE
    spans = plan_segments(audio, load_vad_model("silero"))
    alone = [engine.transcribe_outputs(audio[s:e], decoding=DecodingOptions(logprobs=True))[0] for s, e in spans]

    rid = engine.add_request(audio, decoding=DecodingOptions(logprobs=True))
    outputs, rows = [], []
    while engine.has_unfinished():
        outputs += [o for o in engine.step() if o.request_id == rid]
        rows.append(_runner(engine).decode_rows_last)
    *partials, final = outputs

    assert final.finished and final.finish_reason in ("stop", "length") and final.error is None
    assert final.text == join_texts([o.text for o in alone])
    assert final.tokens == [t for o in alone for t in o.tokens]
    # batched beside other segments: the same tokens, log-probabilities equal to float rounding
    assert final.token_logprobs == pytest.approx([lp for o in alone for lp in o.token_logprobs or []], abs=1e-4)
    # both halves are heard: segments lie in each, and the second half's text is the second clip's
    assert any(e <= half for _, e in spans) and any(s >= half for s, _ in spans)
    second_alone = engine.transcribe_outputs(load_clip(SECOND))[0].text
    assert second_alone and final.segments[-1].text == second_alone
    assert [(seg.start, seg.end) for seg in final.segments] == [(s / RATE, e / RATE) for s, e in spans]
    # segments decode side by side, and the text grows in order
    assert max(rows) > 1
    assert all(final.text.startswith(p.text) for p in partials) and not any(p.finished for p in partials)
    assert _runner(engine).stats().kv_blocks_used == 0


def test_silence_over_one_window_is_an_empty_transcript(engine: ASREngine) -> None:
    (out,) = engine.transcribe_outputs(np.zeros(40 * RATE, dtype=np.float32))
    assert out.finished and out.finish_reason == "stop" and out.text == "" and out.segments == []


def test_n_best_over_one_window_is_refused_with_the_reason(engine: ASREngine) -> None:
    with pytest.raises(UnsupportedError, match=r"n_best > 1 is served for audio up to 30 s"):
        engine.add_request(two_halves(), decoding=DecodingOptions(beam_size=2, n_best=2))
    # one window still gets its alternatives
    (out,) = engine.transcribe_outputs(load_clip(SECOND), decoding=DecodingOptions(beam_size=2, n_best=2))
    assert len(out.nbest) == 2


def test_abort_mid_way_returns_every_block(engine: ASREngine) -> None:
    rid = engine.add_request(two_halves())
    engine.step()
    engine.step()
    assert _runner(engine).stats().kv_blocks_used > 0
    engine.abort_request(rid)
    (out,) = [o for o in engine.run() if o.request_id == rid and o.finished]
    assert out.finish_reason == "abort"
    assert _runner(engine).stats().kv_blocks_used == 0 and not engine.has_unfinished()


def test_segments_in_flight_are_bounded_by_long_form_rows() -> None:
    """The memory bound: at most `long_form_rows` segments of a request hold KV blocks at once
    (each at most one window's prompt and max_new_tokens), however many segments the file has."""
    eng = fixture_engine(MAX_NEW, long_form_rows=2)
    try:
        runner = _runner(eng)
        rid = eng.add_request(two_halves())
        in_flight, blocks = [], []
        while eng.has_unfinished():
            eng.step()
            in_flight.append(sum(1 for key in runner._running if key.startswith(f"{rid}#")))
            blocks.append(runner.stats().kv_blocks_used)
        assert max(in_flight) == 2
        assert max(blocks) <= 2 * runner.typical_blocks
    finally:
        eng.shutdown()
