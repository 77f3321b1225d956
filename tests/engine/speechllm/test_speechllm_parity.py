"""Parity with Transformers' `generate` on tiny random Qwen2-Audio and Qwen3-ASR checkpoints
written by Transformers itself (tools/speechllm_fixtures.py): the same prompt ids from the chat template,
greedy tokens identical with their log-probabilities, and beam n-best lists identical on >= 95 %
of settings (the rest within 2 % edit distance), all through the public engine API with every
request of a kind submitted together (so they decode in one continuous batch)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import ASREngine, DecodingOptions, EngineConfig
from engine.models.speechllm.runner import SpeechLLMRunner
from engine.types import RequestOutput
from tests.conftest import load_clip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "speechllm"
MODELS = ("qwen2_audio", "qwen3_asr")
BEAMS = (2, 4)
LOGPROB_ATOL = 1e-4
"""Float32 rounding of a log-softmax over ~500 logits of magnitude ~10 after two layers of a
different kernel order (observed: < 5e-6)."""


def _reference(model: str) -> dict[str, Any]:
    return json.loads((FIXTURES / model / "reference.json").read_text())


def _options(reference: dict[str, Any], case: dict[str, Any], **extra: Any) -> DecodingOptions:
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in case["options"].items()}
    return DecodingOptions(max_new_tokens=reference["max_new_tokens"], **given, **extra)


def _transcript(runner: SpeechLLMRunner, tokens: list[int]) -> list[int]:
    """The reference's generated tokens as a transcript: no end token, no Qwen3-ASR header."""
    tokens = tokens[:-1] if tokens and tokens[-1] in runner.eos else tokens
    if runner.asr_text is not None and runner.asr_text in tokens:
        return tokens[tokens.index(runner.asr_text) + 1 :]
    return tokens


@pytest.fixture(scope="module", params=MODELS)
def engine(request: pytest.FixtureRequest) -> Iterator[ASREngine]:
    eng = ASREngine(EngineConfig(ckpt_dir=str(FIXTURES / request.param), service_mode="offline", max_batch_size=16))
    yield eng
    eng.shutdown()


def _cases(engine: ASREngine) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    reference = _reference(_runner(engine).ckpt.model_type)
    return reference, reference["cases"]


def _runner(engine: ASREngine) -> SpeechLLMRunner:
    runner = engine.runner
    assert isinstance(runner, SpeechLLMRunner)
    return runner


def test_prompt_ids_are_the_chat_template_s(engine: ASREngine) -> None:
    runner = _runner(engine)
    reference, cases = _cases(engine)
    for case in cases:
        n_audio = case["input_ids"].count(runner.ckpt.audio_token)
        assert n_audio == runner.model.audio_tokens(len(load_clip(case["clip"])))
        ids, _ = runner._prompt_ids(_options(reference, case), n_audio)
        assert ids == case["input_ids"], case["prompt_text"]


def _decode_together(engine: ASREngine, cases: list[dict[str, Any]],
                     options: list[DecodingOptions]) -> list[RequestOutput]:  # fmt: skip
    """Every case submitted at once: they are admitted together and decode in one batch."""
    ids = [engine.add_request(load_clip(c["clip"]), decoding=o) for c, o in zip(cases, options)]
    finished = {o.request_id: o for o in engine.run() if o.finished}
    return [finished[i] for i in ids]


def test_greedy_tokens_and_logprobs_match_transformers(engine: ASREngine) -> None:
    runner = _runner(engine)
    reference, cases = _cases(engine)
    outs = _decode_together(engine, cases, [_options(reference, c, logprobs=True) for c in cases])
    assert len({tuple(o.tokens) for o in outs}) > 1, "the transcripts do not depend on the input"
    for case, out in zip(cases, outs):
        ref = case["greedy"]
        expected = _transcript(runner, ref["tokens"])
        assert out.tokens == expected, (case["clip"], case["options"])
        assert out.text == runner.tokenizer.decode(expected)
        assert out.finish_reason == ("stop" if ref["tokens"][-1] in runner.eos else "length")
        skipped = len(ref["tokens"]) - len(expected) - (ref["tokens"][-1] in runner.eos)  # a Qwen3-ASR header
        assert out.token_logprobs == pytest.approx(ref["logprobs"][skipped : skipped + len(expected)],
                                                   abs=LOGPROB_ATOL)


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


@pytest.mark.parametrize("beams", BEAMS)
def test_beam_nbest_matches_transformers(engine: ASREngine, beams: int) -> None:
    runner = _runner(engine)
    reference, cases = _cases(engine)
    outs = _decode_together(engine, cases, [_options(reference, c, beam_size=beams, n_best=beams) for c in cases])
    identical = 0
    for case, out in zip(cases, outs):
        ref = case["beam"][str(beams)]
        ref_texts = [runner.tokenizer.decode(_transcript(runner, h["tokens"])) for h in ref]
        texts = [a.text for a in out.nbest]
        assert len(texts) == beams and out.text == texts[0]
        if texts == ref_texts and out.tokens == _transcript(runner, ref[0]["tokens"]):
            identical += 1
            assert [a.confidence for a in out.nbest] == pytest.approx([math.exp(h["score"]) for h in ref], rel=1e-4)
        else:
            for ours, theirs in zip(texts, ref_texts):
                assert _edit_distance(ours, theirs) <= 0.02 * len(theirs), (case["clip"], case["options"], ours, theirs)
    assert identical >= 0.95 * len(cases), f"{identical}/{len(cases)} n-best lists identical"
