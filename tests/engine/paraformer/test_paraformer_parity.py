"""Parity with FunASR 1.4.16 on the checkpoint it wrote (tests/fixtures/paraformer/tiny): token
ids, text, and word timestamps identical to what FunASR's own `AutoModel` returned for each dev
clip, alone and when every clip runs in one padded batch; FunASR's text post-processing on
crafted token sequences; SeACo hotwords (SeacoParaformer) with and without keywords."""

from __future__ import annotations

import numpy as np
import pytest

from engine.models.paraformer.runner import ParaformerRunner
from engine.models.paraformer.text import postprocess
from engine.types import DecodingOptions
from tests.engine.paraformer.conftest import clip, make_runner, recognize, recognize_each, reference

CLIPS = tuple(reference()["clips"])
TIMED = DecodingOptions(word_timestamps=True)


@pytest.mark.parametrize("clip_id", CLIPS)
def test_one_clip_equals_funasr(runner: ParaformerRunner, clip_id: str) -> None:
    expected = reference()["clips"][clip_id]
    (out,) = recognize(runner, [clip(clip_id)], TIMED)
    assert out.finish_reason == "stop"
    assert out.tokens == expected["token_ids"]
    assert out.text == expected["text"]
    assert out.words is not None
    assert " ".join(w.word for w in out.words) == expected["timestamp_text"]
    assert [[round(w.start * 1000), round(w.end * 1000)] for w in out.words] == expected["timestamps_ms"]


def test_a_padded_batch_equals_funasr_alone() -> None:
    """Padding does not leak into a row: every clip in one forward (no padding limit) gives FunASR's
    batch-1 tokens. (FunASR's own padded batch differs for the shorter rows: its CIF convolution
    reads the encoder's un-zeroed padding as the last frame's right context; recorded under
    'batched'.)"""
    runner = make_runner(family_options={"paraformer": {"max_pad_ratio": 100.0}})
    outs = recognize(runner, [clip(c) for c in CLIPS], TIMED)
    assert [o.tokens for o in outs] == [reference()["clips"][c]["token_ids"] for c in CLIPS]
    assert [o.text for o in outs] == [reference()["clips"][c]["text"] for c in CLIPS]
    assert [[[round(w.start * 1000), round(w.end * 1000)] for w in o.words or []] for o in outs] == [
        reference()["clips"][c]["timestamps_ms"] for c in CLIPS
    ]
    batched = reference()["batched"]
    assert batched["clips"] == list(CLIPS)
    assert any(b != reference()["clips"][c]["token_ids"] for b, c in zip(batched["token_ids"], CLIPS, strict=True))


def test_token_times_and_logprobs_are_per_token(runner: ParaformerRunner) -> None:
    (out,) = recognize(runner, [clip(CLIPS[0])], DecodingOptions(logprobs=True))
    assert out.timestamps is not None and len(out.timestamps) == len(out.tokens)
    assert out.timestamps == sorted(out.timestamps) and 0 <= out.timestamps[0] < out.duration
    assert out.token_logprobs is not None and len(out.token_logprobs) == len(out.tokens)
    assert all(lp <= 0 for lp in out.token_logprobs)
    assert out.confidence == pytest.approx(float(np.exp(np.mean(out.token_logprobs))))


@pytest.mark.parametrize("case", reference()["postprocess"], ids=lambda c: " ".join(c["tokens"]))
def test_text_postprocessing_equals_funasr(case: dict) -> None:
    spans = [tuple(s) for s in case["spans"]]
    plain = postprocess(case["tokens"])
    timed = postprocess(case["tokens"], spans)
    assert plain.text == timed.text == case["text"]
    assert timed.words == case["words"] and " ".join(timed.words) == case["timestamp_text"]
    assert [list(s) for s in timed.spans or []] == case["word_spans"]


SEACO = reference()["seaco"]


def test_seaco_hotwords_are_spelled_as_funasr_spells_them(seaco_runner: ParaformerRunner) -> None:
    assert seaco_runner.speller is not None
    assert seaco_runner.speller.hotwords(tuple(SEACO["hotwords"])) == SEACO["hotword_ids"]


def test_seaco_with_and_without_keywords_equals_funasr(seaco_runner: ParaformerRunner) -> None:
    """One batch: rows with the hotwords take FunASR's biased tokens, the others its plain ones
    (FunASR gives every row of a batch one list; here each request brings its own)."""
    keywords = tuple(SEACO["hotwords"])
    options = [DecodingOptions(keywords=keywords if i % 2 else ()) for i in range(len(CLIPS))]
    outs = [recognize(seaco_runner, [clip(c)], o)[0] for c, o in zip(CLIPS, options, strict=True)]
    together = recognize_each(seaco_runner, [clip(c) for c in CLIPS], options)
    expected = [SEACO["clips"][c]["hotword_token_ids" if o.keywords else "token_ids"] for c, o in
                zip(CLIPS, options, strict=True)]  # fmt: skip
    assert [o.tokens for o in outs] == [o.tokens for o in together] == expected
    biased = [o.text for o, opt in zip(together, options, strict=True) if opt.keywords]
    assert biased == [SEACO["clips"][c]["hotword_text"] for c, o in zip(CLIPS, options, strict=True) if o.keywords]
    assert all(SEACO["clips"][c]["token_ids"] != SEACO["clips"][c]["hotword_token_ids"] for c in CLIPS)
