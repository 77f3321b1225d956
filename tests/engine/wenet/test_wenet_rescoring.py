"""Attention rescoring of the final CTC n-best with the checkpoint's U2++ decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.models.wenet.decoder import rescore
from engine.models.wenet.options import WenetOptions
from engine.models.wenet.runner import AUDIO_SCALE, WenetRunner
from engine.models.wenet.testing import CheckpointSpec, drive_alone, write_checkpoint
from engine.types import DecodingOptions
from tests.conftest import load_clip

CHUNK = 8
BEAM = DecodingOptions(beam_size=4, n_best=4)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """The same encoder (same seed) with and without the attention decoder."""
    root = tmp_path_factory.mktemp("rescore")
    return (write_checkpoint(str(root / "dec"), CheckpointSpec(with_decoder=True, seed=3)),
            write_checkpoint(str(root / "ctc"), CheckpointSpec(seed=3)))  # fmt: skip


def runner_for(ckpt: str, **options: float) -> WenetRunner:
    return WenetRunner.from_config(
        EngineConfig(ckpt_dir=ckpt, service_mode="streaming", chunk_size=CHUNK, max_num_blocks=256),
        WenetOptions(**options),
    )


def test_nbest_is_reordered_by_decoder_and_ctc_scores(pair: tuple[str, str]) -> None:
    with_decoder, ctc_only = pair
    audio = load_clip("mfa_thoughts")
    runner = runner_for(with_decoder)
    assert "attention_rescoring" in runner.info().decode_methods
    rescored = drive_alone(runner, audio, 1600, decoding=BEAM)[-1]
    plain_runner = runner_for(ctc_only)
    assert runner.info().decode_method == "attention_rescoring"
    assert plain_runner.info().decode_methods == ("ctc",)
    plain = drive_alone(plain_runner, audio, 1600, decoding=BEAM)[-1]
    assert sorted(a.text for a in rescored.nbest) == sorted(a.text for a in plain.nbest)

    # Expected order, computed independently: the full-utterance encoder output under the
    # chunk mask, CTC scores of the plain beams, WeNet's rescoring formula.
    model = runner.model
    feats = runner.fbank([torch.tensor(audio) * AUDIO_SCALE])[0]
    enc, _ = model.encode_full(feats[None], torch.tensor([len(feats)]), CHUNK, -1)
    state = plain_runner.ckpt  # same units
    beams = [tuple(t) for t in _beam_tokens(plain_runner, audio)]
    ctc_scores = _beam_scores(plain_runner, audio)
    scores = rescore(runner.ckpt.decoder, enc[0], beams, ctc_scores, sos=len(state.units) - 1, eos=len(state.units) - 1,
                     ctc_weight=0.5, reverse_weight=runner.ckpt.reverse_weight)  # fmt: skip
    best = beams[max(range(len(beams)), key=scores.__getitem__)]
    assert tuple(rescored.tokens) == best
    assert rescored.text == runner.detok.text(best)


def test_huge_ctc_weight_keeps_the_ctc_order(pair: tuple[str, str]) -> None:
    with_decoder, ctc_only = pair
    audio = load_clip("mfa_thoughts")
    rescored = drive_alone(runner_for(with_decoder, ctc_weight=1e6), audio, 1600, decoding=BEAM)[-1]
    plain = drive_alone(runner_for(ctc_only), audio, 1600, decoding=BEAM)[-1]
    assert [a.text for a in rescored.nbest] == [a.text for a in plain.nbest]


def test_greedy_is_never_rescored(pair: tuple[str, str], tmp_path: Path) -> None:
    with_decoder, ctc_only = pair
    audio = load_clip("mfa_thoughts")
    a = drive_alone(runner_for(with_decoder), audio, None)[-1]
    b = drive_alone(runner_for(ctc_only), audio, None)[-1]
    assert a.tokens == b.tokens


def _beam_tokens(runner: WenetRunner, audio) -> list[tuple[int, ...]]:
    return [h.tokens for h in _final_state(runner, audio).beams if h.tokens]


def _beam_scores(runner: WenetRunner, audio) -> list[float]:
    return [h.score for h in _final_state(runner, audio).beams if h.tokens]


def _final_state(runner: WenetRunner, audio):
    """The CTC beam state a stream ends with (captured as the runner finishes it)."""
    captured = {}
    finish = runner._finish

    def capture(stream, reason):
        captured["state"] = stream.ctc
        return finish(stream, reason)

    runner._finish = capture
    drive_alone(runner, audio, 1600, decoding=BEAM)
    runner._finish = finish
    return captured["state"]
