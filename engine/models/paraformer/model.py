"""FunASR's offline Paraformer: SAN-M encoder -> CIF predictor -> one-pass decoder, batched.

`recognize` takes a padded batch of LFR features and returns, per row, the greedy tokens (argmax
of each acoustic embedding's decoder output, blank/sos/eos dropped, as FunASR's inference
does), their log-probabilities, and the CIF alphas and fires that timestamps are read from.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from engine.models.paraformer.cif import CifPredictor
from engine.models.paraformer.config import ParaformerConfig
from engine.models.paraformer.decoder import ParaformerDecoder
from engine.models.paraformer.encoder import SANMEncoder
from engine.models.paraformer.seaco import SeacoBias


@dataclass
class Recognized:
    """One row's result."""

    tokens: list[int]
    logprobs: list[float]
    """Log-probability of each token (its argmax), in the decoder's softmax."""
    alphas: torch.Tensor
    """(T_enc + 1,) CIF weights (cpu float32), the tail frame included when the model has one."""
    fires: torch.Tensor
    """(T_enc + 1,) CIF running-sum marks (cpu float32), as FunASR's `cif_peak`."""


class Paraformer(nn.Module):
    def __init__(self, cfg: ParaformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = SANMEncoder(cfg.encoder)
        self.predictor = CifPredictor(cfg.predictor)
        self.decoder = ParaformerDecoder(cfg.decoder)
        self.seaco = None if cfg.seaco is None else SeacoBias(cfg.seaco, cfg.encoder.output_size)
        self.dropped = {cfg.blank_id, cfg.sos, cfg.eos}

    @torch.inference_mode()
    def recognize(self, feats: torch.Tensor, lengths: torch.Tensor,
                  hotwords: list[list[list[int]]] | None = None) -> list[Recognized]:  # fmt: skip
        """feats (B, T, input_size) padded with anything, lengths (B,) long on the same device;
        hotwords: per row, token id lists (the `<s>` entry included) or [] for none (SeACo)."""
        enc = self.encoder(feats, lengths)
        cif = self.predictor(enc, lengths)
        counts = cif.token_counts
        b = feats.shape[0]
        if b == 0 or int(counts.max()) < 1:
            best = torch.zeros(b, 0, dtype=torch.long)
            scores = torch.zeros(b, 0)
        else:
            hidden = self.decoder(cif.embeds, counts, enc, lengths)
            logp = self.decoder.logprobs(hidden)
            if hotwords is not None and any(hotwords):
                logp = self._bias(logp, cif.embeds, hidden, counts, hotwords)
            scores_t, best_t = logp.max(dim=-1)  # (B, N)
            best, scores = best_t.cpu(), scores_t.float().cpu()
        # timestamps read alphas and fires up to the tail frame (FunASR: encoder length + 1)
        tail = 1 if self.cfg.predictor.tail_threshold > 0 else 0
        alphas, fires = cif.alphas.float().cpu(), cif.fires.float().cpu()
        out = []
        for i, (n, t) in enumerate(zip(counts.tolist(), lengths.tolist(), strict=True)):
            keep = [(tok, s) for tok, s in zip(best[i, :n].tolist(), scores[i, :n].tolist(), strict=True)
                    if tok not in self.dropped]  # fmt: skip
            out.append(Recognized(tokens=[k for k, _ in keep], logprobs=[s for _, s in keep],
                                  alphas=alphas[i, : t + tail], fires=fires[i, : t + tail]))  # fmt: skip
        return out

    def _bias(self, logp: torch.Tensor, embeds: torch.Tensor, hidden: torch.Tensor, counts: torch.Tensor,
              hotwords: list[list[list[int]]]) -> torch.Tensor:  # fmt: skip
        """SeACo-merged log-probabilities of the rows that have hotwords."""
        assert self.seaco is not None and self.decoder.embed is not None, "hotwords need a SeACo checkpoint"
        rows = [i for i, h in enumerate(hotwords) if h]
        vectors = [self.seaco.hotword_vectors(self.decoder.embed, hotwords[i]) for i in rows]
        sizes = torch.tensor([len(v) for v in vectors], device=logp.device)
        contexts = logp.new_zeros(len(rows), int(sizes.max()), embeds.shape[-1])
        for j, v in enumerate(vectors):
            contexts[j, : len(v)] = v
        idx = torch.tensor(rows, device=logp.device)
        logp = logp.clone()
        logp[idx] = self.seaco.bias(logp[idx], embeds[idx], hidden[idx], counts[idx], contexts, sizes)
        return logp
