"""The stateless predictor, the joiner, and batched greedy decoding over them.

Step interface (what a beam search drives; see runner.py's module docstring):
- `Predictor.predict(context) -> decoder_out`: context (N, context_size) token ids, -1 for "no
  token yet" (the start context is `start_context()`); returns (N, decoder_dim). Stateless: the
  last `context_size` tokens are the whole state.
- `Joiner.project_encoder(enc)` / `Joiner.project_decoder(dec)`: the joiner's input projections,
  applied once per frame / per prediction.
- `Joiner.join(enc_proj, dec_proj) -> logits`: (..., joiner_dim) x 2 -> (..., vocab).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


class Predictor(nn.Module):
    """icefall's stateless Decoder: embeddings of the last `context_size` tokens mixed by a grouped
    1-D conv (groups of 4 channels), then ReLU; context_size 1 is the bare embedding."""

    def __init__(self, vocab_size: int, dim: int, blank_id: int, context_size: int) -> None:
        super().__init__()
        self.blank_id, self.context_size = blank_id, context_size
        self.embedding = nn.Embedding(vocab_size, dim)
        if context_size > 1:
            self.conv = nn.Conv1d(dim, dim, context_size, groups=dim // 4, bias=False)

    def start_context(self) -> list[int]:
        return [-1] * (self.context_size - 1) + [self.blank_id]

    def predict(self, context: torch.Tensor) -> torch.Tensor:
        """(N, context_size) int64 -> (N, dim)."""
        emb = self.embedding(context.clamp(min=0)) * (context >= 0).unsqueeze(-1)
        if self.context_size == 1:
            return emb[:, 0]
        return F.relu(self.conv(emb.transpose(1, 2)))[:, :, 0]


class Joiner(nn.Module):
    def __init__(self, encoder_dim: int, decoder_dim: int, joiner_dim: int, vocab_size: int) -> None:
        super().__init__()
        self.encoder_proj = nn.Linear(encoder_dim, joiner_dim)
        self.decoder_proj = nn.Linear(decoder_dim, joiner_dim)
        self.output_linear = nn.Linear(joiner_dim, vocab_size)

    def project_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return self.encoder_proj(enc)

    def project_decoder(self, dec: torch.Tensor) -> torch.Tensor:
        return self.decoder_proj(dec)

    def join(self, enc_proj: torch.Tensor, dec_proj: torch.Tensor) -> torch.Tensor:
        return self.output_linear(torch.tanh(enc_proj + dec_proj))


@dataclass
class GreedyState:
    """One stream's greedy hypothesis; carried across chunks."""

    context: list[int]
    tokens: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    """Encoder frame (25 Hz, from the stream's start) of each token."""
    logprobs: list[float] = field(default_factory=list)
    frames_seen: int = 0


@torch.inference_mode()
def greedy_decode(predictor: Predictor, joiner: Joiner, states: list[GreedyState], enc_proj: torch.Tensor,
                  lengths: list[int]) -> None:  # fmt: skip
    """icefall's greedy_search_batch: at most one token per frame, the predictor re-run only for
    rows that emitted. enc_proj (B, T, J) already projected; row b decodes its first lengths[b]."""
    b_total = len(states)
    if b_total == 0:
        return
    device = enc_proj.device
    context = torch.tensor([s.context for s in states], dtype=torch.long, device=device)
    dec = joiner.project_decoder(predictor.predict(context))  # (B, J)
    for t in range(max(lengths)):
        active = [b for b in range(b_total) if t < lengths[b]]
        logits = joiner.join(enc_proj[active, t], dec[active])  # (A, V)
        best = logits.argmax(dim=-1).tolist()
        emitted = [(row, b) for row, b in enumerate(active) if best[row] != predictor.blank_id]
        if not emitted:
            continue
        logp = logits.log_softmax(dim=-1)
        for row, b in emitted:
            s, tok = states[b], best[row]
            s.tokens.append(tok)
            s.frames.append(s.frames_seen + t)
            s.logprobs.append(float(logp[row, tok]))
            s.context = [*s.context[1:], tok]
        rows = [b for _, b in emitted]
        ctx = torch.tensor([states[b].context for b in rows], dtype=torch.long, device=device)
        dec[rows] = joiner.project_decoder(predictor.predict(ctx))
    for b, s in enumerate(states):
        s.frames_seen += lengths[b]
