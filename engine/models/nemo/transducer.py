"""RNN-T / TDT prediction network and joint, named as NeMo's `decoder` and `joint` modules.

The prediction network embeds the last label (blank is the padding row of the embedding, so the
start symbol embeds to zeros) and runs an LSTM; the joint adds the projected encoder frame and
projected prediction, applies its activation and the output layer. TDT joints emit
vocabulary + blank + one logit per duration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.models.nemo.config import TransducerConfig

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


class _LSTMHolder(nn.Module):
    """NeMo wraps its LSTM as `dec_rnn.lstm`."""

    def __init__(self, hidden: int, layers: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers)


class PredictionNetwork(nn.Module):
    def __init__(self, cfg: TransducerConfig) -> None:
        super().__init__()
        self.blank = cfg.vocab_size
        self.prediction = nn.ModuleDict({
            "embed": nn.Embedding(cfg.vocab_size + 1, cfg.pred_hidden, padding_idx=cfg.vocab_size),
            "dec_rnn": _LSTMHolder(cfg.pred_hidden, cfg.pred_rnn_layers),
        })  # fmt: skip

    def forward(
        self, labels: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """labels (B,) -> output (B, H), (h, c) each (layers, B, H)."""
        y = self.prediction["embed"](labels).unsqueeze(0)  # (1, B, H)
        g, (h, c) = self.prediction["dec_rnn"].lstm(y, state)
        return g[0], (h, c)


class Joint(nn.Module):
    def __init__(self, cfg: TransducerConfig, enc_hidden: int) -> None:
        super().__init__()
        self.pred = nn.Linear(cfg.pred_hidden, cfg.joint_hidden)
        self.enc = nn.Linear(enc_hidden, cfg.joint_hidden)
        outputs = cfg.vocab_size + 1 + len(cfg.durations)
        self.joint_net = nn.Sequential(ACTIVATIONS[cfg.activation](), nn.Linear(cfg.joint_hidden, outputs))

    def forward(self, f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Projected encoder frames f (B, Hj) and predictions g (B, Hj) -> logits (B, outputs)."""
        return self.joint_net(f + g)


@dataclass
class TransducerState:
    """Per-row decoding state carried across chunks (rows of a batch, or one stream)."""

    h: torch.Tensor
    """(layers, B, H) LSTM hidden state after the last emitted label."""
    c: torch.Tensor
    pred: torch.Tensor
    """(B, Hj) the joint's projection of the prediction for the last label."""
    time_jump: torch.Tensor
    """(B,) int64: TDT frames to skip at the start of the next chunk (0 for RNN-T)."""
    frames_decoded: torch.Tensor
    """(B,) int64: encoder frames consumed before this chunk (to make frame indices absolute)."""

    def rows(self, index: torch.Tensor | list[int]) -> TransducerState:
        idx = torch.as_tensor(index, dtype=torch.long, device=self.pred.device)
        return TransducerState(self.h[:, idx], self.c[:, idx], self.pred[idx], self.time_jump[idx],
                               self.frames_decoded[idx])  # fmt: skip

    @staticmethod
    def stack(states: list[TransducerState]) -> TransducerState:
        return TransducerState(
            torch.cat([s.h for s in states], dim=1), torch.cat([s.c for s in states], dim=1),
            torch.cat([s.pred for s in states]), torch.cat([s.time_jump for s in states]),
            torch.cat([s.frames_decoded for s in states]),
        )  # fmt: skip


class Transducer(nn.Module):
    """decoder + joint, with the start state."""

    def __init__(self, cfg: TransducerConfig, enc_hidden: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.decoder = PredictionNetwork(cfg)
        self.joint = Joint(cfg, enc_hidden)
        self.register_buffer(
            "durations", torch.tensor(cfg.durations or [0], dtype=torch.long), persistent=False
        )

    @property
    def blank(self) -> int:
        return self.cfg.vocab_size

    @property
    def is_tdt(self) -> bool:
        return bool(self.cfg.durations)

    def predict(
        self, labels: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        g, hc = self.decoder(labels, state)
        return self.joint.pred(g), hc

    def initial_state(self, batch: int, device: torch.device) -> TransducerState:
        """After the start symbol (blank), as NeMo's label-looping decoder begins."""
        labels = torch.full((batch,), self.blank, dtype=torch.long, device=device)
        pred, (h, c) = self.predict(labels, None)
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        return TransducerState(h, c, pred, zeros, zeros.clone())
