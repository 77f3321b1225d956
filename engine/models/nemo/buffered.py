"""Buffered streaming of `chunked_limited_with_rc` checkpoints (seed 004): each step re-encodes the
raw audio window [left | chunk | right] and decodes only the chunk's frames.

`BufferedSchedule` is NeMo's loop (speech_to_text_streaming_infer_rnnt.py, one utterance) with no
model, in samples: an encoder frame is hop x factor samples (1280 at 10 ms x 8). Step k's right
edge is C + R + k*C samples; a step runs once audio beyond its right edge has arrived, or at the
end of input, when it is the last one (its chunk takes everything left and the right context is
empty). The window bookkeeping ports NeMo's `ContextSize` (which trims the buffer and places the
decoded slice) and `ContextSizeBatch` (which gives the window's length and the decoded frames)
exactly, including the left context trimmed by samples on the last step.

`BufferedEncoder.step` runs the windows of several streams in one forward: mel over each window
(normalised over it for per_feature models), the encoder under each row's window-relative
[L, C, R] mask. It returns each window's chunk frames (decoded and committed) and its right-context
frames (decoded from a copy of the decoder state for a tentative partial; seed 004).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.models.nemo.checkpoint import NemoCheckpoint


@dataclass
class _Context:
    left: int = 0
    chunk: int = 0
    right: int = 0

    def total(self) -> int:
        return self.left + self.chunk + self.right


@dataclass(frozen=True)
class BufferedStep:
    """What one step encodes and decodes (samples, then encoder frames)."""

    new_samples: int
    is_last: bool
    trim: int
    """Samples dropped from the front of the buffer after the new ones are appended."""
    window_samples: int
    """The model input's length (NeMo: context_size_batch.total())."""
    decode_from: int
    """First decoded frame of the encoded window."""
    chunk_frames: int
    """Frames decoded; -1 = everything from decode_from to the window's end (last step)."""


@dataclass
class BufferedSchedule:
    left: int
    chunk: int
    right: int
    """Context in samples."""
    frame_samples: int
    consumed: int = 0
    """Samples handed to steps so far (the next step's left edge)."""
    steps: int = 0
    done: bool = False
    _ctx: _Context = field(default_factory=_Context)
    _ctx_batch: _Context = field(default_factory=_Context)

    def right_edge(self) -> int:
        return self.chunk + self.right + self.steps * self.chunk

    def runnable(self, received: int, finished: bool) -> bool:
        """Whether a step can run with `received` samples (all of the stream's when `finished`)."""
        if self.done:
            return False
        if not finished:  # the step reaching the end of the audio must know it is the last
            return received > self.right_edge()
        return self.consumed < received

    def finished_all(self, received: int) -> bool:
        """After end of input: no step is left."""
        return self.done or self.consumed >= received

    def next_step(self, received: int, finished: bool) -> BufferedStep | None:
        """Take the next step, if one can run."""
        if not self.runnable(received, finished):
            return None
        edge = self.right_edge()
        is_last = finished and edge >= received
        end = min(edge, received) if finished else edge
        step = self._advance(end - self.consumed, is_last)
        self.consumed = end
        self.steps += 1
        self.done = is_last
        return step

    def _advance(self, n: int, is_last: bool) -> BufferedStep:
        total = self.left + self.chunk + self.right
        c = self._ctx  # NeMo's ContextSize.add_frames_get_removed_
        c.left += c.chunk
        c.chunk = 0
        c.right += n
        if is_last:
            c.chunk, c.right = c.right, 0
        elif c.right > self.chunk:
            c.chunk = self.chunk
            c.right -= self.chunk
        trim = max(c.total() - total, 0)
        c.left -= trim
        b = self._ctx_batch  # NeMo's ContextSizeBatch.add_frames_
        b.left += b.chunk
        b.right += n
        b.chunk = b.right if is_last else self.chunk
        b.right = 0 if is_last else b.right - self.chunk
        b.left = b.left if b.chunk > 0 else 0
        extra = max(b.total() - total, 0)
        b.left = max(b.left - extra, 0)
        chunk_frames = -1 if is_last else b.chunk // self.frame_samples
        return BufferedStep(n, is_last, trim, b.total(), c.left // self.frame_samples, chunk_frames)

    def batch_left_frames(self) -> int:
        return self._ctx_batch.left // self.frame_samples


@dataclass(eq=False)
class BufferedStream:
    schedule: BufferedSchedule
    preset: tuple[int, int, int]
    """(L, C, R) encoder frames: the attention window of every step."""
    audio: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    """Samples received and not yet handed to a step."""
    window: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    """NeMo's buffer: the samples the model still reads."""
    received: int = 0
    attention: list[int] | None = None
    """The encoder's attention context over each window: None = the window-relative `preset`
    (buffered streaming of a `chunked_limited_with_rc` model); a long offline request's windows
    take the model's offline context instead (NeMo's buffered inference of an offline model)."""

    def add_audio(self, samples: torch.Tensor) -> None:
        if samples.numel():
            # a long offline request's whole audio arrives at once: keep it (a view), do not copy it
            self.audio = torch.cat((self.audio, samples.float())) if self.audio.numel() else samples.float()
            self.received += int(samples.numel())

    def take_step(self, finished: bool) -> BufferedStep | None:
        step = self.schedule.next_step(self.received, finished)
        if step is None:
            return None
        self.window = torch.cat((self.window, self.audio[: step.new_samples]))[step.trim :]
        self.audio = self.audio[step.new_samples :]
        return step


@dataclass(frozen=True)
class EncodedWindow:
    chunk: torch.Tensor
    """(n, D) the frames this step commits."""
    right: torch.Tensor
    """(r, D) the right-context frames after them (none on the last step)."""


class BufferedEncoder:
    def __init__(self, ckpt: NemoCheckpoint) -> None:
        self.ckpt = ckpt

    @torch.inference_mode()
    def step(self, streams: list[BufferedStream], steps: list[BufferedStep]) -> list[EncodedWindow]:
        """Encode each stream's window; returns its chunk and right-context frames."""
        device = next(self.ckpt.model.parameters()).device
        lengths = torch.tensor([s.window_samples for s in steps], device=device)
        audio = torch.zeros(len(streams), int(lengths.max()), device=device)
        for i, (stream, st) in enumerate(zip(streams, steps, strict=True)):
            audio[i, : st.window_samples] = stream.window[: st.window_samples].to(device)
        mel, mel_len = self.ckpt.frontend(audio, lengths)
        dtype = next(self.ckpt.model.parameters()).dtype
        contexts = [s.attention if s.attention is not None else list(s.preset) for s in streams]
        enc, enc_len = self.ckpt.model.encoder(mel.to(dtype), mel_len, contexts)
        out = []
        for i, (stream, st) in enumerate(zip(streams, steps, strict=True)):
            n = (
                st.chunk_frames
                if st.chunk_frames >= 0
                else int(enc_len[i]) - stream.schedule.batch_left_frames()
            )
            end = st.decode_from + max(n, 0)
            right_end = end if st.is_last else int(enc_len[i])
            out.append(EncodedWindow(enc[i, st.decode_from : end], enc[i, end:right_end]))
        return out
