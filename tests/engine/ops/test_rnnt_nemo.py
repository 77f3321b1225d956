"""The compiled label loop against the NeMo family's own greedy decoder on the checkpoints NeMo
wrote (tests/fixtures/nemo): same tokens, frames and log-probs for an RNN-T and a TDT model,
a batch of real clips of different lengths. Runs once the NeMo family is on the branch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.ops import TransducerDecodeState, TransducerWeights, rnnt_greedy_label_loop
from tests.conftest import load_clip

nemo_greedy = pytest.importorskip("engine.models.nemo.greedy", reason="the NeMo family is not on this branch yet")
nemo_checkpoint = pytest.importorskip("engine.models.nemo.checkpoint")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nemo"
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_cards_005")


@pytest.mark.parametrize("name", ["hybrid_cache_aware", "tdt"])
def test_operator_equals_the_nemo_family_decoder(ext: None, name: str) -> None:
    ckpt = nemo_checkpoint.load_checkpoint(str(FIXTURES / name), None, torch.device("cpu"), torch.float32)
    tr = ckpt.model.transducer
    assert tr is not None
    encoded = []
    with torch.inference_mode():
        for clip_id in CLIPS:
            audio = torch.from_numpy(load_clip(clip_id).copy())[None]
            mel, mel_len = ckpt.frontend(audio, torch.tensor([audio.shape[1]]))
            enc, enc_len = ckpt.model.encoder(mel, mel_len)
            encoded.append(enc[0, : int(enc_len[0])])
    lengths = torch.tensor([len(e) for e in encoded])
    enc = torch.nn.utils.rnn.pad_sequence(encoded, batch_first=True)
    start = tr.initial_state(len(CLIPS), enc.device)
    max_symbols = tr.cfg.max_symbols
    want, want_state = nemo_greedy.greedy_label_looping(tr, enc, lengths, start, max_symbols)
    weights = TransducerWeights.from_state_dict(tr.state_dict(), tr.cfg.activation, tr.cfg.durations)
    state = TransducerDecodeState(start.h, start.c, start.pred, start.time_jump, start.frames_decoded)
    for use_extension in (True, False):
        with torch.inference_mode():
            out, nxt = rnnt_greedy_label_loop(weights.project(enc), lengths, state, weights, max_symbols,
                                              use_extension=use_extension)  # fmt: skip
        for row in range(len(CLIPS)):
            assert out.row(row) == (want.tokens[row], want.frames[row], want.logprobs[row]), (use_extension, row)
        assert torch.equal(nxt.h, want_state.h) and torch.equal(nxt.pred, want_state.pred)
        assert torch.equal(nxt.time_jump, want_state.time_jump)
