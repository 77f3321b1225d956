"""The compiled label loop against its Python reference on the checkpoints NeMo wrote
(tests/fixtures/nemo): same tokens, frames, log-probs and state for an RNN-T and a TDT model, a
batch of real clips of different lengths. (The NeMo family decodes through this operator; its
tokens against NeMo's own are tests/engine/nemo/test_nemo_parity.py, run on both paths.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.models.nemo import checkpoint as nemo_checkpoint
from engine.ops import TransducerDecodeState, TransducerWeights, rnnt_greedy_label_loop
from tests.conftest import load_clip

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nemo"
CLIPS = ("libri_61-70968-0000", "mfa_thoughts", "ps_cards_005")


@pytest.mark.parametrize("name", ["hybrid_cache_aware", "tdt"])
def test_operator_equals_its_reference_on_nemo_checkpoints(ext: None, name: str) -> None:
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
    weights = TransducerWeights.from_state_dict(tr.state_dict(), tr.cfg.activation, tr.cfg.durations)
    state = TransducerDecodeState(start.h, start.c, start.pred, start.time_jump, start.frames_decoded)
    with torch.inference_mode():
        want, want_state = rnnt_greedy_label_loop(weights.project(enc), lengths, state, weights, max_symbols,
                                                  use_extension=False)  # fmt: skip
        out, nxt = rnnt_greedy_label_loop(weights.project(enc), lengths, state, weights, max_symbols,
                                          use_extension=True)  # fmt: skip
    assert sum(len(want.row(row)[0]) for row in range(len(CLIPS))) > 0
    for row in range(len(CLIPS)):
        assert out.row(row) == want.row(row), row
    assert torch.equal(nxt.h, want_state.h) and torch.equal(nxt.pred, want_state.pred)
    assert torch.equal(nxt.time_jump, want_state.time_jump)
