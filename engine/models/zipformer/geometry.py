"""The streaming chunk: its geometry and its choice among the trained values.

The chunk is chosen with the engine's `chunk_size` (icefall's `--chunk-size`: 50 Hz frames, 16 =
320 ms of audio per step) and `num_left_chunks` (left context = num_left_chunks x chunk_size
frames, icefall's `--left-context-frames`). Both must be values the checkpoint was trained with
(its `chunk_size` and `left_context_frames` lists; training draws the two independently, so any
pair of trained values is a trained setting). EngineConfig's untouched defaults (16, -1) mean
"not chosen": the first trained chunk size and the left context listed at the same position
(icefall's own pairing: 16/64, 32/128, 64/256), else the largest. Anything else is refused
naming the trained choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InvalidRequestError
from engine.models.zipformer.config import CONVNEXT_PAD, EMBED_CONTEXT, ZipformerConfig

DEFAULT_ENGINE_CHUNK = (16, -1)
"""EngineConfig's defaults of (chunk_size, num_left_chunks): 'not chosen' for this family."""
TAIL_PAD_FRAMES = 30
"""Feature frames of log(1e-10) icefall's streaming decode appends after the utterance
(`DecodeStream.set_features(tail_pad_len=30)`), so the last words get through the look-ahead."""


@dataclass(frozen=True)
class StreamGeometry:
    chunk: int
    """c: 50 Hz frames per chunk (a trained `chunk_size`)."""
    left: int
    """50 Hz frames of left context (a trained `left_context_frames`)."""

    @property
    def lookahead_frames(self) -> int:
        """Feature frames past the chunk a step reads (13)."""
        return EMBED_CONTEXT - 1 + 2 * CONVNEXT_PAD + 1

    @property
    def window(self) -> int:
        """Feature frames one step reads (2c + 13)."""
        return 2 * self.chunk + self.lookahead_frames

    @property
    def hop(self) -> int:
        """Feature frames one step advances (2c)."""
        return 2 * self.chunk

    @property
    def end_padding(self) -> int:
        """Frames of log(1e-10) appended at the end of input (13 + 30)."""
        return self.lookahead_frames + TAIL_PAD_FRAMES

    @property
    def out_frames(self) -> int:
        """Encoder frames (25 Hz) one step yields."""
        return (self.chunk + 1) // 2


def select_geometry(cfg: ZipformerConfig, chunk_size: int, num_left_chunks: int) -> StreamGeometry | None:
    """The streaming chunk and left context, or None for a model that cannot stream (causal=False)."""
    chunks, lefts = cfg.streaming_chunks, cfg.streaming_lefts
    if not cfg.causal or not chunks or not lefts:
        return None
    trained = (f"trained chunk_size (50 Hz frames): {', '.join(map(str, chunks))}; trained left contexts "
               f"(frames): {', '.join(map(str, lefts))}, i.e. num_left_chunks = left / chunk_size")  # fmt: skip
    if (chunk_size, num_left_chunks) == DEFAULT_ENGINE_CHUNK and chunk_size not in chunks:
        chunk_size = chunks[0]
    if chunk_size not in chunks:
        raise InvalidRequestError(f"chunk_size={chunk_size} is not a chunk size this Zipformer was trained with; {trained}")
    if num_left_chunks == -1:
        i = cfg.chunk_size.index(chunk_size)
        paired = cfg.left_context_frames[i] if i < len(cfg.left_context_frames) else -1
        left = paired if paired > 0 else max(lefts)
    else:
        left = num_left_chunks * chunk_size
        if left not in lefts:
            raise InvalidRequestError(
                f"num_left_chunks={num_left_chunks} x chunk_size={chunk_size} = {left} left-context frames is not "
                f"trained; {trained}"
            )
    geo = StreamGeometry(chunk_size, left)
    for i, ds in enumerate(cfg.downsampling_factor):
        if chunk_size % ds or left % ds:
            raise InvalidRequestError(f"chunk_size {chunk_size} and left context {left} must be multiples of "
                                      f"every stack's downsampling factor ({ds} at stack {i})")  # fmt: skip
    return geo
