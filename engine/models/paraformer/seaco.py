"""SeACo hotwords (FunASR's SeacoParaformer): contextual biasing of the one-pass decoder.

Each hotword is a token sequence; the decoder's token embedding and a 2-layer LSTM turn it into
one vector (the LSTM output at its last token). FunASR always appends a hotword made of `<s>`
alone (the 'no hotword' entry). A SANM decoder attends from the acoustic embeddings and from the
main decoder's hidden states to those vectors; the sum of the two goes through
`hotword_output_layer`. At each token where that head's argmax is not NO_BIAS, its
log-probabilities replace the decoder's (FunASR's merge with seaco_weight 1).

Rows are independent: each request brings its own hotwords (FunASR shares one list across its
batch), padded to the longest list and masked.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.models.paraformer.config import SeacoConfig
from engine.models.paraformer.decoder import ParaformerDecoder

HOTWORD_FILTER = 50
"""FunASR pre-selects 50 hotwords with an attention filter (ASF) when it is given more; this
runtime serves up to that many (the `<s>` entry included) and refuses longer lists."""


class SeacoBias(nn.Module):
    """The contextual parts; parameter names follow FunASR's state dict (top level of the model)."""

    def __init__(self, cfg: SeacoConfig, d_model: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.bias_encoder = nn.LSTM(d_model, d_model, 2, batch_first=True, bidirectional=cfg.bidirectional)
        self.lstm_proj = nn.Linear(2 * d_model, d_model) if cfg.bidirectional else None
        self.seaco_decoder = ParaformerDecoder(cfg.decoder)
        self.hotword_output_layer = nn.Linear(d_model, cfg.decoder.vocab_size)

    def hotword_vectors(self, embed: nn.Module, hotwords: list[list[int]]) -> torch.Tensor:
        """(H, D): one vector per hotword (token id lists, each non-empty)."""
        device = self.hotword_output_layer.weight.device
        lengths = torch.tensor([len(h) for h in hotwords])
        ids = torch.zeros(len(hotwords), int(lengths.max()), dtype=torch.long, device=device)
        for i, h in enumerate(hotwords):
            ids[i, : len(h)] = torch.tensor(h, device=device)
        packed = nn.utils.rnn.pack_padded_sequence(embed(ids), lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.bias_encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)  # (H, L, D or 2D)
        if self.lstm_proj is not None:
            out = self.lstm_proj(out)
        last: torch.Tensor = out[torch.arange(len(hotwords)), lengths - 1]
        return last

    def bias(self, logp: torch.Tensor, embeds: torch.Tensor, hidden: torch.Tensor, counts: torch.Tensor,
             contexts: torch.Tensor, context_lengths: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """logp (B, N, V) decoder log-probabilities, embeds / hidden (B, N, D) acoustic embeddings
        and decoder hidden states, contexts (B, H, D) hotword vectors padded, context_lengths (B,)
        -> (B, N, V) merged log-probabilities."""
        cif_att = self.seaco_decoder(embeds, counts, contexts, context_lengths)
        dec_att = self.seaco_decoder(hidden, counts, contexts, context_lengths)
        dha = torch.log_softmax(self.hotword_output_layer(cif_att + dec_att), dim=-1)
        keep = (dha.argmax(-1) == self.cfg.no_bias).unsqueeze(-1)  # (B, N, 1)
        return torch.where(keep, logp, dha)
