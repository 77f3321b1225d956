"""A window decoded with a draft (the tokens a live stream's last pass decoded) reads the draft in
its prefill and keeps it up to the first token the greedy choice disagrees with: the transcript
is the one decoding token by token gives, in fewer decoder steps. Real model, real clips, on
both numeric paths.

"The one decoding token by token gives" holds up to rounding: the prefill's attention sums in
another order than the steps' (and on the int8 path each activation row is quantized again),
so where the token-by-token decode meets a near tie the prefill may take the other token (seen
on the int8 path: jfk_inaugural's 11th token). The tests assert what holds: the two decodes agree
up to their first difference, that difference is a near tie on both sides (top-two logit gap
under NEAR_TIE), and the draft's bookkeeping (steps saved) is exact whenever they agree."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.log_mel import N_FRAMES, pad_window
from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.decoding import DecodeGroup
from engine.types import DecodingOptions
from tests.conftest import Clip

CLIPS = ("jfk_inaugural", "libri_61-70968-0000")
NEAR_TIE = 0.5
"""Logits: a top-two gap under this is a near tie that rounding may flip. The gaps rounding moves
are hundredths (float32) to tenths (int8 re-quantized activations); a clip's typical gap is
several units."""


class RecordingGroup(DecodeGroup):
    """A greedy group that also records, for each token it takes, the gap between its two best
    ruled logits there."""

    margins: list[float]

    def advance(self, logits: torch.Tensor, logprobs: torch.Tensor) -> list[int]:
        self.margins.append(_gap(logits[0]))
        return super().advance(logits, logprobs)

    def accept_draft(self, logits: torch.Tensor, logprobs: torch.Tensor) -> None:
        before = len(self.tokens[0])
        super().accept_draft(logits, logprobs)
        self.margins += [_gap(row) for row in logits[: len(self.tokens[0]) - before]]


def _gap(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


@pytest.fixture(scope="module")
def windows(engine_on_each_path: Any, clips: list[Clip]) -> list[torch.Tensor]:
    """The encoder outputs of a few dev clips, each one 30 s window."""
    parts = engine_on_each_path.runner.parts
    table = {c.id: c for c in clips}
    mels = parts.features([table[i].audio for i in CLIPS])
    with torch.inference_mode():
        return parts.context.encode([pad_window(m, 0, N_FRAMES).to(parts.dtype) for m in mels])


def _decode(engine: Any, features: torch.Tensor, draft: list[int]) -> tuple[list[int], int, list[float]]:
    """Greedy decode of one window with `draft`: its tokens, the decoder steps after the prefill,
    and each token's top-two logit gap."""
    parts = engine.runner.parts
    tok = parts.tokenizer
    batch = DecodeBatch(parts.model.decoder, tok.no_speech, parts.device)
    group = RecordingGroup(None, tok.sot_sequence("en", "transcribe", timestamps=True), 0,  # type: ignore[arg-type]
                           DecodingOptions(), 0.0, parts.rules, True, 120, None, draft=draft)
    group.margins = []

    def fail(_: DecodeGroup, exc: Exception) -> None:
        raise exc

    steps = 0
    with torch.inference_mode():
        batch.join([group], [features])
        while not group.done:
            batch.step(fail)
            steps += 1
    assert group.result is not None
    return group.result.tokens, steps, group.margins


def _same_up_to_a_near_tie(plain: tuple[list[int], int, list[float]],
                           drafted: tuple[list[int], int, list[float]]) -> bool:
    """True when the drafted decode gave the plain tokens; False when they first differ at a
    token where both decodes were at a near tie; fails otherwise."""
    (a, _, gaps_a), (b, _, gaps_b) = plain, drafted
    if a == b:
        return True
    first = next(i for i, (x, y) in enumerate(zip([*a, None], [*b, None])) if x != y)
    assert first < len(gaps_a) and first < len(gaps_b), (first, a, b)
    assert gaps_a[first] < NEAR_TIE and gaps_b[first] < NEAR_TIE, (first, gaps_a[first], gaps_b[first], a, b)
    return False


@pytest.mark.parametrize("index", range(len(CLIPS)), ids=CLIPS)
def test_a_draft_changes_the_steps_not_the_transcript(engine_on_each_path: Any, windows: list[torch.Tensor],
                                                      index: int) -> None:
    engine = engine_on_each_path
    features = windows[index]
    eot = engine.runner.parts.tokenizer.eot
    plain_decode = _decode(engine, features, [])
    plain, plain_steps, _ = plain_decode
    assert len(plain) > 8 and plain_steps == len(plain)  # one token per step (the first from the prefill)
    # the whole answer: read in the prefill, nothing left to step
    whole = _decode(engine, features, [*plain, eot])
    if _same_up_to_a_near_tie(plain_decode, whole):
        assert whole[1] == 0
    # wrong from its fourth token: kept up to there, the model's own choice there, stepped on from it
    wrong = _decode(engine, features, [*plain[:3], plain[3] + 1, *plain[4:], eot])
    if _same_up_to_a_near_tie(plain_decode, wrong):
        assert wrong[1] == len(plain) - 3
    # a draft that runs past the end of text: stops at the end of text
    _same_up_to_a_near_tie(plain_decode, _decode(engine, features, [*plain, eot, *plain[:3]]))
    # the last pass heard less: its draft ends early, the rest is stepped
    early = _decode(engine, features, [*plain[:5], eot])
    if _same_up_to_a_near_tie(plain_decode, early):
        assert early[1] == len(plain) - 5
