"""Live catch-up: a stream holding more unheard audio than one pass covers decodes that backlog
as offline segments, then resumes live passes.

A live pass re-decodes the stream's uncommitted window (at most `stream_window_s`). When audio
arrives faster than passes run (a network stall, a loaded server, a client that sends a file or
a whole recording at once), the window outgrows its cap. Cutting it there dropped audio no pass
had heard (measured: a 9-minute recording fed at once lost half its words). Instead, the audio
from the end of the committed words on is cut at VAD silences into segments of at most one
window (as the `chunking_strategy` upload path cuts a recording), and every segment is decoded
as an offline transcription (temperature fallback, speech coverage, word alignment) whose
windows join the engine's batch beside other requests' rows. Segments commit in order as soon as
they and all before them are done; the window then starts where the last segment ends and live
passes resume over what arrived meanwhile (another round if that is again more than a pass).

A segment that reaches the end of the audio while speech may still be going on is left to the
live passes, unless it is longer than CATCH_UP_KEEP_LIVE_S (a round must make progress).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from torch import Tensor

from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.features import SAMPLE_RATE
from engine.models.whisper.offline import OfflineTranscription, uses_audio_padding
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.window import WindowJob, WindowResult, WindowUpdate
from engine.request import Request
from engine.types import RequestOutput, Word
from engine.vad import VoiceActivityModel, speech_segments

EDGE_S = 0.3
"""A segment ending this close to the end of the audio may be cut mid-speech: the live passes
take it (they see the audio that follows)."""
CATCH_UP_KEEP_LIVE_S = 10.0
"""...unless it is longer than this: the window left to live passes stays well under its cap."""
MERGE_GAP_MS = 30_000
"""Speech runs are merged into one segment while it stays within one window, whatever the pause
between them, as faster-whisper's batched pipeline merges its VAD chunks: a segment per utterance
gave Whisper too little context (measured: "Montreal forced A liner" / "Maaaaaan tree all for a
stilliner" for two phrases of one speaker 3 s apart, "Montreal forced, um, aligner" merged)."""
SEGMENT_PROMPT_CHARS = 200
"""Committed text (its tail) that prompts a round's first segment, as it prompts a live pass;
later segments of the round are decoded without it (their previous text is not known yet)."""


@dataclass(frozen=True)
class Cut:
    """Where a round decodes: `segments` (absolute seconds, in order) and `until`, where the live
    window starts once the round is done (audio before it is decoded or silence)."""

    segments: list[tuple[float, float]]
    until: float


def plan_cut(audio: np.ndarray, offset_s: float, start_s: float, vad: VoiceActivityModel | None,
             max_segment_s: float) -> Cut:
    """The segments of `audio` (its first sample at `offset_s`) from `start_s` on: cut at VAD
    silences, each at most `max_segment_s`; without a VAD, fixed pieces of `max_segment_s`."""
    first = max(0, round((start_s - offset_s) * SAMPLE_RATE))
    rest = audio[first:]
    base = offset_s + first / SAMPLE_RATE
    end = base + rest.size / SAMPLE_RATE
    if vad is None:
        step = int(max_segment_s * SAMPLE_RATE)
        spans = [(base + i / SAMPLE_RATE, base + min(i + step, rest.size) / SAMPLE_RATE)
                 for i in range(0, rest.size, step)]
    else:
        spans = [(base + s, base + e) for s, e in speech_segments(rest, model=vad, merge_gap_ms=MERGE_GAP_MS,
                                                                 max_segment_s=max_segment_s)]
    if not spans:  # silence: nothing to decode, a short tail stays for the live passes
        return Cut([], max(base, end - EDGE_S))
    last_start, last_end = spans[-1]
    if end - last_end < EDGE_S and last_end - last_start <= CATCH_UP_KEEP_LIVE_S and len(spans) > 1:
        return Cut(spans[:-1], last_start)
    return Cut(spans, last_end if end - last_end >= EDGE_S else end)


class BacklogOwner(Protocol):
    """What a backlog segment reports to (the stream, streaming.py)."""

    def on_segment_done(self, index: int, words: list[Word]) -> RequestOutput | None:
        """Take segment `index`'s words (stream times); the stream's output to emit, if any."""
        ...


class BacklogSegment(OfflineTranscription):
    """One segment of a stream's backlog, decoded as an offline transcription of its audio. Its
    request is a stand-in with the stream's id (the runner routes its windows by id); its
    finished output goes to the stream, which answers with the stream's own partial."""

    def __init__(self, stream: BacklogOwner, index: int, start_s: float, request: Request,
                 mel: Tensor, parts: WhisperParts, fit_context: bool, coverage: SpeechCoverage):
        super().__init__(request, mel, parts, fit_context=fit_context, coverage=coverage)
        self.stream = stream
        self.index = index
        self.start_s = start_s

    def on_window_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        update = super().on_window_done(job, result)
        output = update.output
        if output is None or not output.finished:  # the segment's own partials are no stream output
            return replace(update, output=None)
        words = [replace(w, start=round(w.start + self.start_s, 3), end=round(w.end + self.start_s, 3))
                 for w in output.words or []]
        return replace(update, output=self.stream.on_segment_done(self.index, words))


@dataclass
class CatchUpRound:
    """One round's segments and the words of those done, committed in order."""

    segments: list[BacklogSegment]
    until: float
    done: dict[int, list[Word]]
    next_index: int = 0

    def take_ready(self, index: int, words: list[Word]) -> list[Word]:
        """Record segment `index`'s words; the words of the segments now done in order."""
        self.done[index] = words
        ready: list[Word] = []
        while self.next_index in self.done:
            ready += self.done.pop(self.next_index)
            self.next_index += 1
        return ready

    @property
    def finished(self) -> bool:
        return self.next_index >= len(self.segments)


def start_round(owner: BacklogOwner, request: Request, audio: np.ndarray, offset_s: float, cut: Cut,
                parts: WhisperParts, fit_context: bool, prompt: str,
                coverage: Callable[[], SpeechCoverage]) -> tuple[CatchUpRound, list[WindowJob]]:
    """Offline transcriptions of `cut`'s segments of `audio` (first sample at `offset_s`) and
    their first windows. Each segment decodes with word timestamps (its words are what the
    stream commits and trims by) and the stream's options otherwise; the first is prompted
    with `prompt` (the committed text's tail)."""
    pieces = [audio[round((s - offset_s) * SAMPLE_RATE) : round((e - offset_s) * SAMPLE_RATE)]
              for s, e in cut.segments]
    mels = parts.features(pieces, audio_padding=uses_audio_padding(fit_context)) if pieces else []
    segments: list[BacklogSegment] = []
    jobs: list[WindowJob] = []
    for index, ((start, _), piece, mel) in enumerate(zip(cut.segments, pieces, mels)):
        options = replace(request.decoding, word_timestamps=True,
                          prompt=(prompt[-SEGMENT_PROMPT_CHARS:].strip() or None) if index == 0 else request.decoding.prompt)
        stand_in = Request(request_id=request.request_id, streaming=False, decoding=options,
                           sample_rate=SAMPLE_RATE, audio=piece)
        segment = BacklogSegment(owner, index, start, stand_in, mel.to(parts.dtype), parts, fit_context, coverage())
        segments.append(segment)
        job = segment.next_job()
        if job is None:  # too short for a mel frame: nothing to decode
            continue
        jobs.append(job)
    round_ = CatchUpRound(segments, cut.until, {})
    for segment in segments:
        if not any(j.owner is segment for j in jobs):
            round_.take_ready(segment.index, [])
    return round_, jobs
