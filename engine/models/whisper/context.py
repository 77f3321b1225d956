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

The window's own positions attend to that silence too, as they would in a 30 s window, but to
pooled keys (SILENCE_POOL_POSITIONS): attending to all ~1200 positions of silence after a 6 s
window was over half of the encoder's time on a CPU.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.log_mel import N_FRAMES
from engine.models.whisper.features import ENCODER_STRIDE
from engine.models.whisper.model import AttentionContext, AudioEncoder, TextDecoder

CONTEXT_TAIL_FRAMES = 100  # 1 s of padding encoded after the audio: the speech's end is heard as an end
CONTEXT_BUCKET_FRAMES = 100  # window lengths are rounded up to whole seconds, so passes share lengths
SILENCE_POOL_POSITIONS = 10
"""A short window's positions attend to the encoded silence after it with one key and value per
10 positions (0.2 s), their means, scored with log(10) added so that the group weighs as its
positions together would. The silence's keys change slowly with position, so the group's summed
attention is close to 10 times its mean key's. Measured (int8, 16 sessions in lockstep: `python -m benchmarks.asrbench engine lockstep --family whisper
--batch 16 --tick-ms 500`): encoder 38.7 -> 22.0 CPU-s, a pass 128 -> 99 ms.
Accuracy, exact -> pooled: dev-set offline WER 11.94 -> 11.94 % (int8), 12.44 -> 11.94 %
(float32); live on the 25 dev clips 13.43 -> 13.43 %; live in lockstep at 16 sessions with
400/500/600 ms ticks 9.65/10.61/9.65 -> 12.86/9.97/11.90 % (these move by a point or two with any
change of a pass's numbers). A speech window's encoding moves by 2-7 % (relative norm; int8
weights move it by ~3 %); dropping the silence instead (whisper.cpp's audio_ctx) moves it ~19 %."""
CPU_FRAMES_PER_FORWARD = 1600
"""Mel frames one encoder forward takes on a CPU (at least one window): a batch of windows runs as
forwards of about this size. Larger forwards were slower per window on a 2-core Xeon (AMX), likely
as a big batch's activations fall out of cache (glibc's mmap threshold made no difference): 16 windows of
800 frames 410 ms in one forward, 256 ms two at a time; 8 of 3000 frames ~1100 ms, ~830 ms one
at a time; 32 of 200 frames 198 ms, 123 ms eight at a time (`tests/engine/whisper/test_encoder_batch.py`
shows the encodings do not change)."""


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
        self._pooled: dict[int, list[AttentionContext]] = {}
        """Per window length (encoder positions), the pooled silence its blocks attend to after it."""

    def silence(self, like: Tensor) -> Tensor:
        """The encoding (positions, C) of a window that is all padding (`like`'s dtype and device)."""
        return self._encode_silence(like)[0]

    def silence_layers(self, like: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per encoder block, the self-attention K/V (H, n_audio_ctx, Dh) of the all-padding window."""
        return self._encode_silence(like)[1]

    def silence_after(self, like: Tensor, positions: int) -> list[AttentionContext]:
        """Per encoder block, the pooled K/V of the all-padding window's positions after the
        first `positions` (SILENCE_POOL_POSITIONS): what a window that short attends to after
        its own positions. Computed once per length (lengths are bucketed)."""
        if positions not in self._pooled:
            self._pooled[positions] = [
                AttentionContext(pool_positions(k[:, positions:]), pool_positions(v[:, positions:]),
                                 group_sizes(k.shape[1] - positions).to(device=k.device, dtype=k.dtype).log())
                for k, v in self.silence_layers(like)]
        return self._pooled[positions]

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
        for length, same in by_length.items():
            per_forward = len(same)
            if mels[same[0]].device.type == "cpu":
                per_forward = max(1, CPU_FRAMES_PER_FORWARD // length)
            for start in range(0, len(same), per_forward):
                self._encode_same_length(mels, same[start : start + per_forward], length, out)
        return out  # type: ignore[return-value]

    def _encode_same_length(self, mels: list[Tensor], index: list[int], length: int,
                            out: list[Tensor | None]) -> None:
        """Encode mels[i] for i in `index`, all `length` frames long, in one forward into out[i]."""
        batch = torch.stack([mels[i] for i in index])
        if length < N_FRAMES:
            feats = self.encoder(batch, self.silence_after(mels[index[0]], length // ENCODER_STRIDE))
            fill = self.silence(mels[index[0]])[length // ENCODER_STRIDE :]
            feats = torch.cat([feats, fill.expand(feats.shape[0], -1, -1)], dim=1)
        else:
            feats = self.encoder(batch)
        for k, i in enumerate(index):
            out[i] = feats[k]


def group_sizes(positions: int, group: int = SILENCE_POOL_POSITIONS) -> Tensor:
    """How many of `positions` consecutive positions each pooled group holds (the last may hold fewer)."""
    sizes = torch.full((math.ceil(positions / group),), float(group))
    if positions % group:
        sizes[-1] = positions % group
    return sizes


def pool_positions(x: Tensor, group: int = SILENCE_POOL_POSITIONS) -> Tensor:
    """(H, S, Dh) -> (H, ceil(S / group), Dh): the mean of each `group` consecutive positions."""
    h, s, d = x.shape
    pad = -s % group
    if pad:
        x = torch.cat([x, x.new_zeros(h, pad, d)], dim=1)
    sizes = group_sizes(s, group).to(device=x.device, dtype=x.dtype)
    return x.view(h, -1, group, d).sum(dim=2) / sizes[None, :, None]
