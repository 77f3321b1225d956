"""DecoderCache: the beams of a window share one copy of its cross-attention K/V (model.py).

A small float32 decoder with random weights (no checkpoint) decodes the same rows twice: with a
window's rows as one item (its beams, as the batch holds them) and with every row its own
item holding a copy of the window's K/V (the layout before). Both must give the same logits up
to float32 rounding (the item's rows attend as one query block instead of one query each), on
the dense path and on the shared-silence path of live windows, and after evicting an item.
"""

from __future__ import annotations

import pytest
import torch

from engine.models.whisper.cache import DecoderCache
from engine.models.whisper.model import TextDecoder, WhisperDims

DIMS = WhisperDims(n_mels=80, n_audio_ctx=40, n_audio_state=64, n_audio_head=4, n_audio_layer=1, n_vocab=300,
                   n_text_ctx=32, n_text_state=64, n_text_head=4, n_text_layer=2)
ROWS = [3, 1, 2]  # rows per window: two beam groups and a greedy one
# float32 rounding of ~|logit| 10 summed over a few hundred products, with room: the two layouts
# differ only in the blocking of the attention's matmuls
TOLERANCE = {"rtol": 1e-5, "atol": 1e-4}


def _decoder() -> TextDecoder:
    torch.manual_seed(0)
    decoder = TextDecoder(DIMS)
    torch.nn.init.normal_(decoder.positional_embedding, std=0.1)
    return decoder.eval()


def _decode(decoder: TextDecoder, cache: DecoderCache, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Prefill 4 tokens per row, then two single-token steps: the logits of each call."""
    n = tokens.shape[0]
    out = [decoder(tokens[:, :4], torch.arange(4).expand(n, 4), cache)]
    for pos in (4, 5):
        out.append(decoder(tokens[:, pos : pos + 1], torch.full((n, 1), pos), cache))
    return out


@pytest.mark.parametrize("live", [False, True], ids=["dense", "shared-silence"])
def test_beams_sharing_cross_kv_decode_as_rows_with_their_own_copy(live: bool) -> None:
    decoder = _decoder()
    feats = torch.randn(len(ROWS), DIMS.n_audio_ctx, DIMS.n_text_state)
    silence = decoder.silence_kv(torch.randn(DIMS.n_audio_ctx, DIMS.n_text_state)) if live else None
    positions = [10, 25, 17] if live else None
    tokens = torch.randint(0, DIMS.n_vocab, (sum(ROWS), 6))  # every beam its own tokens
    per_row = torch.repeat_interleave(torch.arange(len(ROWS)), torch.tensor(ROWS))
    with torch.inference_mode():
        shared = decoder.new_cache(feats, capacity=8, audio_positions=positions, silence=silence, repeats=ROWS)
        copies = decoder.new_cache(feats[per_row], capacity=8, silence=silence,
                                   audio_positions=None if positions is None else [positions[i] for i in per_row])
        assert shared.num_items == len(ROWS) and shared.num_rows == copies.num_items == sum(ROWS)
        for a, b in zip(_decode(decoder, shared, tokens), _decode(decoder, copies, tokens)):
            torch.testing.assert_close(a, b, **TOLERANCE)
        # the first beam group leaves: its item and its three rows go, the others decode on
        shared.select_items([1, 2])
        copies.select_items([3, 4, 5])
        assert shared.item_rows == [1, 2] and shared.num_rows == 3
        step = tokens[3:, :1]
        torch.testing.assert_close(decoder(step, torch.full((3, 1), 6), shared),
                                   decoder(step, torch.full((3, 1), 6), copies), **TOLERANCE)


def test_item_runs_group_consecutive_items_with_equal_rows() -> None:
    cache = _decoder().new_cache(torch.randn(4, 5, DIMS.n_text_state), capacity=2, repeats=[5, 5, 1, 5])
    assert cache.item_runs() == [(slice(0, 2), slice(0, 10), 5), (slice(2, 3), slice(10, 11), 1),
                                 (slice(3, 4), slice(11, 16), 5)]
