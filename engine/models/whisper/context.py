"""Encoder context that fits the audio ('fit'), for live passes over short windows.

Whisper's encoder always sees 30 s: a 3 s window is zero-padded to 3000 mel frames, and on a
CPU the encoder costs the same ~0.4 s (tiny) whatever the speech length. A live stream re-encodes
its window every step, so that fixed cost caps how many streams keep up.

'fit' encodes only the window plus CONTEXT_TAIL_FRAMES of padding, and completes the encoder
output to Whisper's full length with the encoding of an all-padding window at the same
positions. The decoder thus still cross-attends over 1500 positions whose tail looks like the
silence it was trained on. Simply truncating the context instead (whisper.cpp's audio_ctx)
made tiny.en loop on short windows ("6, 6, 6, ...", per-clip WER in the hundreds, measured
on the dev clips at simulated real-time pace); with the silence fill, per-clip transcripts were
as good as with the full 30 s encoding.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.models.whisper.features import ENCODER_STRIDE, N_FRAMES
from engine.models.whisper.model import AudioEncoder, TextDecoder

CONTEXT_TAIL_FRAMES = 100  # 1 s of padding encoded after the audio: the speech's end is heard as an end
CONTEXT_BUCKET_FRAMES = 100  # window lengths are rounded up to whole seconds, so passes share lengths


def fit_frames(content_frames: int) -> int:
    """Mel frames to encode for a window with `content_frames` of audio (at most Whisper's 30 s)."""
    needed = content_frames + CONTEXT_TAIL_FRAMES
    return min(N_FRAMES, math.ceil(needed / CONTEXT_BUCKET_FRAMES) * CONTEXT_BUCKET_FRAMES)


class ContextEncoder:
    """Runs the audio encoder over windows of any length up to 30 s; every output is full length.
    Also holds the decoder's cross K/V of the encoded silence that completes short windows."""

    def __init__(self, encoder: AudioEncoder, decoder: TextDecoder):
        self.encoder = encoder
        self.decoder = decoder
        self._silence: tuple[Tensor, list[tuple[Tensor, Tensor]]] | None = None
        """The all-padding window's encoding and its per-block K/V (`_encode_silence`)."""
        self._silence_kv: tuple[list[Tensor], list[Tensor]] | None = None

    def silence(self, like: Tensor) -> Tensor:
        """The encoding (positions, C) of a window that is all padding (`like`'s dtype and device)."""
        return self._encode_silence(like)[0]

    def silence_layers(self, like: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per encoder block, the self-attention K/V (H, n_audio_ctx, Dh) of the all-padding window."""
        return self._encode_silence(like)[1]

    def _encode_silence(self, like: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        """The all-padding window's encoding and its per-block K/V: one 30 s encode, once."""
        if self._silence is None:
            self._silence = self.encoder.encode_keeping_kv(like.new_zeros(like.shape[0], N_FRAMES))
        return self._silence

    def silence_kv(self, like: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Per decoder layer, the cross K/V (H, n_audio_ctx, Dh) of `silence`, computed once."""
        if self._silence_kv is None:
            self._silence_kv = self.decoder.silence_kv(self.silence(like))
        return self._silence_kv

    def encode(self, mels: list[Tensor]) -> list[Tensor]:
        """mels (n_mels, L) with L <= 3000 -> encoder outputs (1500, C), in order. Windows of equal
        length share one forward, so a window's encoding never depends on its batchmates."""
        out: list[Tensor | None] = [None] * len(mels)
        by_length: dict[int, list[int]] = {}
        for i, mel in enumerate(mels):
            by_length.setdefault(int(mel.shape[1]), []).append(i)
        for length, index in by_length.items():
            batch = torch.stack([mels[i] for i in index])
            if length < N_FRAMES:
                feats = self.encoder(batch, self.silence_layers(mels[index[0]]))
            else:
                feats = self.encoder(batch)
            if length < N_FRAMES:
                fill = self.silence(mels[index[0]])[length // ENCODER_STRIDE :]
                feats = torch.cat([feats, fill.expand(feats.shape[0], -1, -1)], dim=1)
            for k, i in enumerate(index):
                out[i] = feats[k]
        return out  # type: ignore[return-value]
