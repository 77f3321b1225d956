"""Word alignment's decoder pass (TextDecoder.alignment_pass): without logits it stops after the
last layer holding an alignment head, and the attention weights it returns are those of the full
pass. A small float32 decoder with random weights (no checkpoint), on the dense path and on a
'fit' window completed by encoded silence (the live path)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.models.whisper.model import TextDecoder, WhisperDims

DIMS = WhisperDims(n_mels=80, n_audio_ctx=40, n_audio_state=64, n_audio_head=4, n_audio_layer=1, n_vocab=300,
                   n_text_ctx=32, n_text_state=64, n_text_head=4, n_text_layer=3)


@pytest.mark.parametrize("fit", [False, True])
@pytest.mark.parametrize("heads", [[(0, 1), (1, 2)], [(1, 0)], [(2, 3), (0, 0)]])
def test_weights_without_logits_equal_the_full_pass(fit: bool, heads: list[tuple[int, int]]) -> None:
    torch.manual_seed(0)
    decoder = TextDecoder(DIMS).eval()
    torch.nn.init.normal_(decoder.positional_embedding, std=0.1)
    features = torch.randn(DIMS.n_audio_ctx, DIMS.n_audio_state)
    tokens = torch.randint(0, DIMS.n_vocab, (1, 9))
    silence = decoder.silence_kv(torch.randn(DIMS.n_audio_ctx, DIMS.n_audio_state)) if fit else None
    positions = 24 if fit else None
    calls: list[int] = []
    for layer, block in enumerate(decoder.blocks):
        block.mlp.register_forward_hook(lambda *_, layer=layer: calls.append(layer))
    with torch.inference_mode():
        full, logits = decoder.alignment_pass(tokens, features[None], heads, 20, positions, silence, with_logits=True)
        ran_full, calls[:] = list(calls), []
        light, none = decoder.alignment_pass(tokens, features[None], heads, 20, positions, silence, with_logits=False)
    assert logits is not None and logits.shape == (9, DIMS.n_vocab) and none is None
    assert torch.equal(full, light) and full.shape == (len(heads), 9, 20)
    assert ran_full == [0, 1, 2] and calls == list(range(max(layer for layer, _ in heads)))


def test_the_median_filter_is_numpys_median_with_reflect_padding() -> None:
    from engine.models.whisper.alignment import median_filter

    x = torch.randint(-3, 4, (2, 5, 40)).float().numpy()  # few values: many ties
    padded = torch.nn.functional.pad(torch.from_numpy(x), (3, 3), mode="reflect").numpy()
    expected = np.median(np.lib.stride_tricks.sliding_window_view(padded, 7, axis=-1), axis=-1)
    assert np.array_equal(median_filter(x, 7), expected)
    with pytest.raises(ValueError, match="odd"):
        median_filter(x, 6)
