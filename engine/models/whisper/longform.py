"""A long offline request decoded as parallel windows: its speech, cut at VAD silences into
windows of at most 30 s (engine/vad/windows.py), becomes one `OfflineTranscription` per window,
and every window's jobs are rows of the engine's batch at once, beside other requests' rows
(faster-whisper's BatchedInferencePipeline and WhisperX decode long files this way). The
transcript is stitched in window order with each window's times mapped back to the recording.

No window is conditioned on another's text: they decode side by side, so the text before a
window is not known when it starts (faster-whisper's batched pipeline does the same). The
request's own prompt and keywords prompt every window.

A window that fails Whisper's checks tries the hotter temperatures one at a time (the same
transcript as all at once, offline.py `fallback_width`): the other windows fill the batch
meanwhile, and all five at once made one window's retry 25 rows, the widest the batch ran on the
long-form benchmark recording.

A window's speech runs to its end (the VAD cut it at the silence after), so its text does not end
on a timestamp pair while more than a second of that speech is left after it (decoding.py
`EOT_HOLD_MARGIN_S`): tiny.en often ends a 30 s window's text a sentence early that way, and
openai/whisper's loop decodes that sentence again as a window of its own, after the first decode,
on the recording's critical path (the long-form benchmark's dev recording: 46 window decodes, 27
with the hold).

Memory: a request holds at most WINDOWS_IN_FLIGHT windows at once (features, audio,
and once encoded their decoder rows); the others wait as spans of the recording, the next
featurized when a window is done, and a done window keeps only its segments. What a request costs
is then bounded, not by its length: with every window featurized at collation and kept, an hour of
audio (120 windows) peaked 2.2 GB over the loaded engine and grew ~26 MB a minute (`python -m
benchmarks.family_hour --families whisper`).

Progress: whenever a window is done, a partial output carries the text of the windows done so far
in order (every window before them done too), so `stream=true` sends each window's text as soon as
it can be read in order, and `decoded` the seconds of the recording decoded in any order (windows
decoded side by side finish out of order): a job's progress advances with every window.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from torch import Tensor

from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.offline import OfflineTranscription
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.window import WindowJob, WindowResult, WindowUpdate, attach_logprobs
from engine.request import Request
from engine.types import Alternative, RequestOutput, Segment, Word
from engine.vad.base import SAMPLE_RATE
from engine.vad.windows import PAD_MS, SpeechMap, SpeechWindow


def window_request(request: Request, window: SpeechWindow) -> Request:
    """The request a window is decoded as: the same id and options, the window's audio."""
    assert request.audio is not None
    return Request(request_id=request.request_id, streaming=False, decoding=request.decoding,
                   sample_rate=request.sample_rate, priority=request.priority, audio=window.audio(request.audio),
                   arrival_time=request.arrival_time)


WINDOWS_IN_FLIGHT = 32
"""Most windows of one long request started and not done at once (fewer where the batch has fewer
rows). A window in the batch held ~15 MB, mostly its decoder cross K/V (float16 then, 1500
positions, four layers): an hour of audio (120 windows) through the engine API, int8, two threads,
16 / 32 / 64 in flight took 34.5 / 33.1 / 33.1 s at a request peak of 755 / 1167 / 1440 MiB over
the loaded engine (`python -m benchmarks.family_hour --families whisper --threads 2`): past 32 the
batch runs no faster, and a second long request still finds rows beside it. With int8 cross K/V
(4.9 MB a window against 9.2) the same hour at 32 took 28.5 s at a request peak of 843 MiB."""

WindowFeatures = Callable[[list[Request]], list[Tensor]]
"""Window requests -> their log-mel features (the collator's, collate.py), in order."""


@dataclass
class _DoneWindow:
    """What stitching reads of a window once it is done (its features and audio are let go)."""

    segments: list[Segment]
    segment_logprobs: list[list[float]]
    language: str | None


class SegmentedTranscription:
    """Routes each window job's result to its window's transcription and stitches their
    transcripts into the request's output."""

    def __init__(self, request: Request, speech: SpeechMap, windows: list[SpeechWindow],
                 first: list[tuple[Request, Tensor]], parts: WhisperParts, fit_context: bool,
                 coverage: Callable[[], SpeechCoverage], features: WindowFeatures):
        """`speech`: the VAD's verdict on the recording; `windows`: its speech windows in order;
        `first`: its first windows' requests (`window_request`) and features, as many as may be
        in flight (at least one); `coverage`: a window's coverage bookkeeping; `features`:
        featurizes each later window when a window is done, so that no more are in flight."""
        self.request = request
        self.speech = speech
        self.parts = parts
        self.windows = windows
        self.fit_context = fit_context
        self.coverage = coverage
        self.features = features
        self.parts_of: list[OfflineTranscription | _DoneWindow | None] = [None] * len(windows)
        """Per window: not started (None), started, or done."""
        self._started = 0  # windows featurized so far (in order)
        self._first = [self._start(mel, window) for window, mel in first]

    def _start(self, mel: Tensor, request: Request) -> OfflineTranscription:
        """The next window's transcription: its window `request`, over its features `mel`."""
        i = self._started
        w = self.windows[i]
        part = OfflineTranscription(request, mel, self.parts,
                                    fit_context=self.fit_context, coverage=self.coverage(), fallback_width=1,
                                    speech_until=w.samples / SAMPLE_RATE - PAD_MS / 1000, seams=w.seams)
        self.parts_of[i] = part
        self._started += 1
        return part

    def first_jobs(self) -> list[WindowJob]:
        """The first windows' first jobs (an empty window, which has none, is done at once, and
        the next window is started in its place)."""
        jobs = []
        for part in self._first:
            job = self._first_job(part)
            jobs.extend([job] if job is not None else self._next_window())
        self._first = []
        return jobs

    def _first_job(self, part: OfflineTranscription) -> WindowJob | None:
        """A started window's first job; None: it has none and is done."""
        job = part.next_job()
        if job is None:
            self._done(part)
        return job

    def _done(self, part: OfflineTranscription) -> None:
        self.parts_of[self.parts_of.index(part)] = _DoneWindow(part.segments, part.segment_logprobs, part.language)

    def _is_done(self, i: int) -> bool:
        return isinstance(self.parts_of[i], _DoneWindow)

    def _next_window(self) -> list[WindowJob]:
        """A window is done: the first job of the next window not started yet, if any (featurized
        now; empty windows on the way are done at once)."""
        while self._started < len(self.windows):
            request = window_request(self.request, self.windows[self._started])
            (mel,) = self.features([request])
            job = self._first_job(self._start(mel, request))
            if job is not None:
                return [job]
        return []

    def on_window_done(self, job: WindowJob, result: WindowResult) -> WindowUpdate:
        part = job.owner
        assert isinstance(part, OfflineTranscription)
        update = part.on_window_done(job, result)
        finished = update.output is not None and update.output.finished
        if finished:
            self._done(part)
            update.jobs = [*update.jobs, *self._next_window()]
        update.output = self._output() if finished else None  # a window's retry or remainder: nothing new
        return update

    def _output(self) -> RequestOutput:
        """The finished output once every window is done; else a partial: the text of the windows
        that can be read in order, and how much of the recording is decoded in any order."""
        ready = next((i for i in range(len(self.windows)) if not self._is_done(i)), len(self.windows))
        if ready == len(self.windows):
            return self.finish()
        out = self._stitched(ready, finished=False)
        out.decoded = self._decoded_seconds()
        return out

    def _decoded_seconds(self) -> float:
        """Seconds of the recording decoded: each done window counts from the previous window's
        end (the silence left out before it included) to its own end."""
        ends = [0.0, *(w.end for w in self.windows)]
        return sum(ends[i + 1] - ends[i] for i in range(len(self.windows)) if self._is_done(i))

    def finish(self) -> RequestOutput:
        return self._stitched(len(self.windows), finished=True)

    def _stitched(self, count: int, finished: bool) -> RequestOutput:
        """The first `count` windows' transcripts as one recording's: segments renumbered, times
        mapped to the recording and kept monotonic across windows."""
        segments: list[Segment] = []
        logprobs: list[float] = []
        last_end = 0.0
        for window, part in zip(self.windows[:count], self.parts_of[:count]):
            assert part is not None  # a window done was started
            for seg, lps in zip(part.segments, part.segment_logprobs):
                # a segment, like a word, ends in the piece it starts in: Whisper saw only the
                # padding of a silence left out at a seam, and its end timestamp often lands past it
                mapped_start, mapped_end = window.span_to_recording(seg.start, seg.end)
                start = max(last_end, round(mapped_start, 3))
                end = max(start, round(mapped_end, 3))
                if not self.speech.heard(start, end):  # text over silence is invented (a kept silence)
                    continue
                words = None if seg.words is None else _mapped_words(seg.words, window, start, end)
                segments.append(replace(seg, id=len(segments), start=start, end=end, words=words))
                logprobs.extend(lps)
                last_end = end
        tok = self.parts.tokenizer
        text = "".join(s.text for s in segments).strip()
        tokens = [t for s in segments for t in s.tokens if t < tok.eot]
        language = next((p.language for p in self.parts_of if p is not None and p.language),
                        self.request.decoding.language or None)
        if not self.parts.multilingual:
            language = "en"
        out = RequestOutput(
            request_id=self.request.request_id,
            text=text,
            finished=finished,
            language=language,
            duration=self.request.duration if finished else (self.windows[count - 1].end if count else 0.0),
            committed=text,
            segments=segments,
        )
        if finished:
            conf = math.exp(sum(s.avg_logprob for s in segments) / len(segments)) if segments else 0.0
            out.finish_reason = "stop"
            out.tokens = tokens
            out.nbest = [Alternative(text, round(conf, 4))]
            out.confidence = round(conf, 4)
            if self.request.decoding.word_timestamps:
                out.words = [w for s in segments for w in (s.words or [])]
        if self.request.decoding.logprobs:
            attach_logprobs(out, tok, tokens, logprobs)
        return out


def _mapped_words(words: list[Word], window: SpeechWindow, seg_start: float, seg_end: float) -> list[Word]:
    """A segment's words with their window times mapped to the recording, inside the segment and
    in order (a word's start is never before the previous word's end)."""
    out = []
    floor = seg_start
    for w in words:
        mapped_start, mapped_end = window.span_to_recording(w.start, w.end)
        start = min(max(round(mapped_start, 3), floor), seg_end)
        end = min(max(round(mapped_end, 3), start), seg_end)
        out.append(replace(w, start=start, end=end))
        floor = end
    return out
