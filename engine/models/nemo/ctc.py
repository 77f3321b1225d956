"""NeMo's CTC head (ConvASRDecoder: a 1x1 convolution to vocabulary + blank, blank last) and its
decoding through the engine's shared CTC search (greedy, and the `ctc_prefix_beam_search`
operator with keyword biasing; state carried across chunks: engine/ctc_prefix.py's `CTCState`,
which puts blank at id 0).

The shared search expects blank first, so `CtcDecoder` moves NeMo's last column to the front
and maps the ids back (keyword tries are built in the shifted ids); both are O(V) per frame,
nothing is searched twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from engine.ctc_prefix import CTCState
from engine.ops import ContextTrie

KEYWORD_BEAM = 4
"""Beam of a greedy request that names keywords: biasing needs alternatives to promote."""


class CtcHead(nn.Module):
    def __init__(self, d_model: int, classes: int) -> None:
        super().__init__()
        self.decoder_layers = nn.Sequential(nn.Conv1d(d_model, classes, kernel_size=1))

    def forward(self, enc: torch.Tensor) -> torch.Tensor:
        """enc (B, T, D) -> log-probs (B, T, V + 1), blank last."""
        return torch.log_softmax(self.decoder_layers(enc.transpose(1, 2)).transpose(1, 2), dim=-1)


@dataclass
class CtcDecoder:
    """One request's CTC search in NeMo's ids (blank = vocabulary size)."""

    beam_size: int
    keywords: list[list[int]] = field(default_factory=list)
    """Token-id sequences (NeMo ids) to bias toward, each token boosted by `boost`."""
    boost: float = 0.0
    state: CTCState = field(init=False)

    def __post_init__(self) -> None:
        trie = None
        if self.keywords:
            trie = ContextTrie.from_keywords([[t + 1 for t in k] for k in self.keywords], self.boost)
        beam = max(self.beam_size, KEYWORD_BEAM) if trie is not None else self.beam_size
        self.state = CTCState(beam_size=beam, trie=trie)

    def advance(self, log_probs: torch.Tensor) -> None:
        """log_probs (T, V + 1) with blank last (CPU)."""
        self.state.advance(torch.cat((log_probs[:, -1:], log_probs[:, :-1]), dim=1))

    def best(self) -> tuple[list[int], list[int], list[float]]:
        """Tokens, their frames and log-probs of the best hypothesis."""
        h = self.state.best()
        return [t - 1 for t in h.tokens], list(h.frames), list(h.token_logprobs)

    def nbest(self, n: int) -> list[tuple[list[int], float]]:
        """Up to n (tokens, confidence) alternatives, best first."""
        return [([t - 1 for t in h.tokens], self.state.confidence(h)) for h in self.state.beams[:n]]

    def stable_tokens(self) -> list[int]:
        return [t - 1 for t in self.state.stable_tokens()]

    @property
    def frames(self) -> int:
        return self.state.frames
