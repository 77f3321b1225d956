"""Buffered streaming's tentative partials (seed 004: "committed tokens never change; partials can
show the right-context hypothesis as tentative"), on the NeMo-written unified fixture: each
partial decodes its window's right context from a copy of the decoder state, so the committed
tokens, step for step, are the ones a stream gets with tentative partials off (and NeMo's), the
final holds only committed text, and streams batched together show the tentative text each shows
alone."""

from __future__ import annotations

import numpy as np
import pytest

from engine.models.nemo.runner import NemoRunner
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.engine.nemo.conftest import clip, drive_alone, make_runner, reference

NAME = "unified_rc"
PIECE = 777  # samples per engine step: windows end mid-piece


def _runner(preset: tuple[int, int, int], tentative: bool = True) -> NemoRunner:
    return make_runner(NAME, family_options={"nemo": {"stream_context": preset, "tentative_partials": tentative}})


@pytest.mark.parametrize("index", [0, 6, 9])  # presets (10, 4, 4), (10, 1, 1), (10, 1, 4)
def test_tentative_text_follows_the_committed_tokens_without_moving_them(index: int) -> None:
    case = reference(NAME)["buffered"][index]
    preset, audio = tuple(case["preset"]), clip(NAME, case["clip"])
    shown = drive_alone(_runner(preset), audio, PIECE)
    plain = drive_alone(_runner(preset, tentative=False), audio, PIECE)
    assert shown[-1].tokens == plain[-1].tokens == case["tokens"]  # NeMo's
    assert [o.committed for o in shown] == [o.committed for o in plain]
    assert not any(o.tentative for o in plain)
    partials = shown[:-1]
    for with_tail, committed_only in zip(partials, plain[:-1], strict=True):
        assert with_tail.text == with_tail.committed + with_tail.tentative
        assert with_tail.tokens[: len(committed_only.tokens)] == committed_only.tokens
        assert with_tail.committed == committed_only.text
    assert any(o.tentative for o in partials), "no partial showed its right context"
    final = shown[-1]
    assert final.finished and final.text == final.committed and not final.tentative
    assert all(final.text.startswith(o.committed) for o in partials)


def test_a_partial_with_logprobs_scores_its_tentative_tokens_too() -> None:
    case = reference(NAME)["buffered"][9]
    outs = drive_alone(_runner(tuple(case["preset"])), clip(NAME, case["clip"]), PIECE,
                       decoding=DecodingOptions(logprobs=True))  # fmt: skip
    tailed = [o for o in outs[:-1] if o.tentative]
    assert tailed
    for o in tailed:
        assert o.token_logprobs is not None and len(o.token_logprobs) == len(o.tokens)
        assert all(lp <= 0.0 for lp in o.token_logprobs)


def _partials_together(runner: NemoRunner, audios: list[np.ndarray], presets: list[tuple[int, int, int]]
                       ) -> tuple[dict[str, list[RequestOutput]], int]:  # fmt: skip
    """Stream i starts at engine step i; every stream feeds PIECE samples a step. Returns each
    stream's outputs and the most streams one step advanced together."""
    reqs = [Request(f"s{i}", True, DecodingOptions(stream_context=p), runner.sample_rate)
            for i, p in enumerate(presets)]  # fmt: skip
    outs: dict[str, list[RequestOutput]] = {r.request_id: [] for r in reqs}
    fed, step, widest = [0] * len(reqs), 0, 0
    while not all(o and o[-1].finished for o in outs.values()):
        if step < len(reqs):
            assert runner.admit([reqs[step]]) == []
        for i, req in enumerate(reqs[: step + 1]):
            if not req.input_finished:
                req.append_audio(audios[i][fed[i] : fed[i] + PIECE])
                fed[i] += PIECE
                req.input_finished = fed[i] >= len(audios[i])
        for out in runner.execute():
            outs[out.request_id].append(out)
        widest, step = max(widest, runner.streams_stepped), step + 1
    return outs, widest


def test_batched_streams_show_the_tentative_text_they_show_alone() -> None:
    cases = [reference(NAME)["buffered"][i] for i in (0, 7, 11)]  # three presets, three clips
    audios = [clip(NAME, c["clip"]) for c in cases]
    presets = [tuple(c["preset"]) for c in cases]
    together, widest = _partials_together(_runner(presets[0]), audios, presets)
    assert widest >= 2, "the streams never shared a step"
    for i, (audio, preset) in enumerate(zip(audios, presets, strict=True)):
        alone = _partials_together(_runner(preset), [audio], [preset])[0]["s0"]
        assert [(o.text, o.tentative) for o in together[f"s{i}"]] == [(o.text, o.tentative) for o in alone]
