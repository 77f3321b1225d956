"""A live Whisper stream's window, the state its passes (streaming.py) work on: the audio no pass
has let go of yet and where it starts in stream time, the words committed over it by local
agreement, and what the stream reports from them.

Words commit through the agreement (`_collect_commits`); the window is then cut where
stream_cuts.py says, so later passes encode less, and the committed words it still holds are
forced on the next pass (stream_prefix.py).
"""

from __future__ import annotations

import numpy as np

from engine.log_mel import SAMPLE_RATE
from engine.models.whisper.owner import WindowedTranscription
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.stream_cuts import cut_after_commits, cut_in_pause
from engine.models.whisper.stream_output import stream_output
from engine.models.whisper.stream_prefix import committed_in_window
from engine.request import Request
from engine.streaming.local_agreement import LocalAgreement
from engine.types import RequestOutput, Word


class StreamWindow(WindowedTranscription):
    """A stream's audio window and the words committed over it."""

    def __init__(self, request: Request, parts: WhisperParts, window_s: float, agree: int) -> None:
        """`window_s`: longest uncommitted window re-decoded per pass; `agree`: passes that must
        agree on words before they commit."""
        super().__init__(request, parts)
        self.window_cap = int(window_s * SAMPLE_RATE)  # samples
        self.window = np.zeros(0, dtype=np.float32)
        self.window_start = 0.0  # seconds of stream time at window[0]
        self.new_samples = 0  # audio (samples) since the last pass started or was skipped; a cadence of it makes one due
        self.agreement = LocalAgreement(agreement=agree)
        self.committed_words: list[Word] = []
        self.heard_until = 0.0  # stream time (s) up to which the last finished pass decoded

    def absorb(self) -> None:
        """Move the request's pending audio into the window."""
        chunk = self.request.take_pending_audio()
        if chunk.size:
            self.window = np.concatenate([self.window, chunk]) if self.window.size else chunk
            self.new_samples += int(chunk.size)

    def window_audio(self) -> np.ndarray:
        return self.window

    def is_final_pass(self) -> bool:
        return self.request.input_finished and not self.request.pending_audio

    def _window_end(self) -> float:
        return self.window_start + self.window.size / SAMPLE_RATE

    def _spoken_until(self) -> float:
        """Stream time (s) up to which words cover the window: the last committed word's end."""
        return max([self.window_start, *(w.end for w in self.committed_words[-1:])])

    def _committed_in_window(self) -> list[Word]:
        """Committed words whose audio the window still holds (stream_prefix.committed_in_window)."""
        return committed_in_window(self.committed_words, self.window_start, self.window_cap / SAMPLE_RATE)

    def _collect_commits(self) -> None:
        """Record newly committed words and cut the window where stream_cuts.py says."""
        new = self.agreement.take_committed()
        if not new:
            return
        self.committed_words.extend(new)
        cut = cut_after_commits(self._committed_in_window(), new, self.window.size / SAMPLE_RATE)
        if cut is not None:
            self._trim_to(cut)

    def _trim_in_pause_after_commits(self, reheard: list[Word]) -> None:
        """A pass that wrote nothing new (`reheard`) after a pause: stream_cuts.cut_in_pause."""
        cut = cut_in_pause(self._committed_in_window(), reheard, self.heard_until)
        if cut is not None:
            self._trim_to(cut)

    def _trim_to(self, t: float) -> None:
        cut = round((t - self.window_start) * SAMPLE_RATE)
        cut = max(0, min(cut, self.window.size))
        if cut:
            self.window = self.window[cut:]
            self.window_start += cut / SAMPLE_RATE

    def _output(self, finished: bool) -> RequestOutput:
        return stream_output(self.request.request_id, self.agreement, self.committed_words, self.options,
                             self.parts.tokenizer, self.language, self.request.received_samples / SAMPLE_RATE,
                             finished)
