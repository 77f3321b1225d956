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
from engine.models.whisper.cross_attention import cross_runs
from engine.models.whisper.int8 import quantize_linear_layers
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
    assert [(r.items, r.rows, r.per, r.held) for r in cache.item_runs()] == [
        (slice(0, 2), slice(0, 10), 5, 5), (slice(2, 3), slice(10, 11), 1, 5), (slice(3, 4), slice(11, 16), 5, 5)]


@pytest.mark.parametrize("beams", [1, 3])
def test_offline_items_hold_their_own_audio_and_attend_to_the_shared_silence_exactly(beams: int) -> None:
    """An offline ('fit') item holds only its own positions and attends to the one shared copy of
    the silence after them: the same logits as dense attention over its 30 s context. Items of
    different lengths attend in separate calls."""
    decoder = _decoder()
    silence_feats = torch.randn(DIMS.n_audio_ctx, DIMS.n_text_state)
    positions = [10, 20, 20, DIMS.n_audio_ctx]
    feats = silence_feats.repeat(len(positions), 1, 1)
    for i, n in enumerate(positions):
        feats[i, :n] = torch.randn(n, DIMS.n_text_state)
    repeats = [beams] * len(positions)
    tokens = torch.randint(0, DIMS.n_vocab, (beams * len(positions), 6))
    with torch.inference_mode():
        held = decoder.new_cache(feats, capacity=8, audio_positions=positions, silence=decoder.silence_kv(silence_feats),
                                 shared_silence=False, repeats=repeats)
        assert held.held == positions and held.cross_capacity == DIMS.n_audio_ctx
        assert [(r.items, r.held, r.silence) for r in held.item_runs()] == [
            (slice(0, 1), 10, True), (slice(1, 3), 20, True), (slice(3, 4), DIMS.n_audio_ctx, False)]
        dense = decoder.new_cache(feats, capacity=8, repeats=repeats)
        for a, b in zip(_decode(decoder, held, tokens), _decode(decoder, dense, tokens)):
            torch.testing.assert_close(a, b, **TOLERANCE)


# tiny.en's text width and heads (the head size sets the attention kernels' blocking), fewer layers
TINY_TEXT = WhisperDims(n_mels=80, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6, n_audio_layer=1, n_vocab=300,
                        n_text_ctx=32, n_text_state=384, n_text_head=6, n_text_layer=2)


def test_an_offline_items_cross_attention_does_not_depend_on_its_batch_mates() -> None:
    """Bit for bit: an offline item's cross-attention alone and beside offline items of its own
    and other lengths and live items sharing the silence, also after its mates leave. With int8
    projections, as the engine runs on a CPU (float GEMMs round differently with the number of
    rows; the int8 ones are exact per row), so only the attention could differ."""
    torch.manual_seed(0)
    decoder = quantize_linear_layers(TextDecoder(TINY_TEXT).eval())
    n_audio, width = TINY_TEXT.n_audio_ctx, TINY_TEXT.n_text_state
    silence = decoder.silence_kv(torch.randn(n_audio, width))
    offline, live = [300, 300, 1000, 100, 300], [300, 650, 100]
    feats = torch.randn(len(offline) + len(live), n_audio, width)
    states = torch.randn(feats.shape[0], 1, width)
    block = decoder.blocks[0]

    def attend(cache: DecoderCache, rows: int) -> torch.Tensor:
        return decoder._cross_attention(block, 0, states[:rows], cache, cross_runs(cache))

    with torch.inference_mode():
        alone = decoder.new_cache(feats[:1], capacity=8, audio_positions=offline[:1], silence=silence,
                                  shared_silence=False)
        batch = decoder.new_cache(feats[: len(offline)], capacity=8, audio_positions=offline, silence=silence,
                                  shared_silence=False)
        batch.extend(decoder.new_cache(feats[len(offline) :], capacity=8, audio_positions=live, silence=silence))
        assert torch.equal(attend(alone, 1), attend(batch, feats.shape[0])[:1])
        capacity = batch.cross_capacity
        batch.select_items([0])
        assert batch.cross_capacity == capacity, "the store keeps its positions: it is not copied at a departure"
        assert torch.equal(attend(alone, 1), attend(batch, 1))


def test_reordered_beams_take_their_sources_written_positions_and_decode_alike() -> None:
    """Rows that move take their source row's K/V up to `length` in place (the rest is past every
    row's mask until written again); rows that stay are untouched; the next step's logits are
    bitwise those of a cache reordered whole."""
    decoder = _decoder()
    feats = torch.randn(len(ROWS), DIMS.n_audio_ctx, DIMS.n_text_state)
    tokens = torch.randint(0, DIMS.n_vocab, (sum(ROWS), 7))
    index = torch.tensor([2, 0, 0, 3, 5, 4])  # beams move within their items only
    with torch.inference_mode():
        partial = decoder.new_cache(feats, capacity=16, repeats=ROWS)
        whole = decoder.new_cache(feats, capacity=16, repeats=ROWS)
        for cache in (partial, whole):
            _decode(decoder, cache, tokens)  # positions 0..5 written
        before = [t.clone() for t in partial.self_k]
        partial.reorder_rows(index, 6)
        whole.reorder_rows(index)
        for layer, t in enumerate(partial.self_k):
            assert torch.equal(t[:, :, :6], before[layer].index_select(0, index)[:, :, :6])
            assert torch.equal(t[3], before[layer][3])  # row 3 stays: not copied at all
            assert torch.equal(t[0, :, 6:], before[layer][0, :, 6:])  # past `length`: left as it was
        step = tokens[:, 6:7]
        n = sum(ROWS)
        assert torch.equal(decoder(step, torch.full((n, 1), 6), partial), decoder(step, torch.full((n, 1), 6), whole))
