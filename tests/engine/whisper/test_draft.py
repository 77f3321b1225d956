"""A window decoded with a draft (the tokens a live stream's last pass decoded) reads the draft in
its prefill and keeps it up to the first token the greedy choice disagrees with: the transcript
is the one decoding token by token gives (up to rounding, the prefill's attention summing in
another order: no near tie on these clips), in fewer decoder steps. Real model, real clips."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.decoding import DecodeGroup
from engine.models.whisper.features import N_FRAMES, pad_window
from engine.types import DecodingOptions
from tests.conftest import Clip

CLIPS = ("jfk_inaugural", "libri_61-70968-0000")


@pytest.fixture(scope="module")
def windows(engine: Any, clips: list[Clip]) -> list[torch.Tensor]:
    """The encoder outputs of a few dev clips, each one 30 s window."""
    parts = engine.runner.parts
    table = {c.id: c for c in clips}
    mels = parts.features([table[i].audio for i in CLIPS])
    with torch.inference_mode():
        return parts.context.encode([pad_window(m, 0, N_FRAMES).to(parts.dtype) for m in mels])


def _decode(engine: Any, features: torch.Tensor, draft: list[int]) -> tuple[list[int], int]:
    """Greedy decode of one window with `draft`: its tokens and the decoder steps after the prefill."""
    parts = engine.runner.parts
    tok = parts.tokenizer
    batch = DecodeBatch(parts.model.decoder, tok.no_speech, parts.device)
    group = DecodeGroup(None, tok.sot_sequence("en", "transcribe", timestamps=True), 0,  # type: ignore[arg-type]
                        DecodingOptions(), 0.0, parts.rules, True, 120, None, draft=draft)

    def fail(_: DecodeGroup, exc: Exception) -> None:
        raise exc

    steps = 0
    with torch.inference_mode():
        batch.join([group], [features])
        while not group.done:
            batch.step(fail)
            steps += 1
    assert group.result is not None
    return group.result.tokens, steps


@pytest.mark.parametrize("index", range(len(CLIPS)), ids=CLIPS)
def test_a_draft_changes_the_steps_not_the_transcript(engine: Any, windows: list[torch.Tensor], index: int) -> None:
    features = windows[index]
    eot = engine.runner.parts.tokenizer.eot
    plain, plain_steps = _decode(engine, features, [])
    assert len(plain) > 8 and plain_steps == len(plain)  # one token per step (the first from the prefill)
    # the whole answer: read in the prefill, nothing left to step
    assert _decode(engine, features, [*plain, eot]) == (plain, 0)
    # wrong from its fourth token: kept up to there, the model's own choice there, stepped on from it
    wrong = [*plain[:3], plain[3] + 1, *plain[4:], eot]
    tokens, steps = _decode(engine, features, wrong)
    assert tokens == plain and steps == len(plain) - 3
    # a draft that runs past the end of text: stops at the end of text
    assert _decode(engine, features, [*plain, eot, *plain[:3]])[0] == plain
    # the last pass heard less: its draft ends early, the rest is stepped
    tokens, steps = _decode(engine, features, [*plain[:5], eot])
    assert tokens == plain and steps == len(plain) - 5
