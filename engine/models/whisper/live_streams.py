"""The Whisper runner's open live streams, by request id, and what a step does for them before
the encoder runs: the pass picker says which are due (stream_passes.py), streams behind their
audio are set to catch up on their backlog (catchup.py), and the due passes' windows are
featurized in one call and queued as live jobs.

It owns the streams and the picker. The runner owns everything else a stream touches (the
planner, the decoder batch, its table of active requests) and hands each call the planner and its
`fail`, which releases a stream whose catch-up or features fail; a stream leaves here when it
finishes or is released (`end`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import numpy as np

from engine.log_mel import SAMPLE_RATE
from engine.metrics import stage_timer
from engine.models.whisper.coverage import SpeechCoverage
from engine.models.whisper.options import WhisperOptions
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.planning import WindowPlanner
from engine.models.whisper.stream_passes import StreamPassPicker
from engine.models.whisper.streaming import StreamingTranscription
from engine.models.whisper.totals import WhisperTotals
from engine.models.whisper.window import FailRequest
from engine.request import Request
from engine.streaming.silence_gate import SilenceGate
from engine.types import RequestOutput
from engine.vad import VoiceActivityModel


class LiveStreams(Mapping[str, StreamingTranscription]):
    """The open streams, read as a mapping from request id to stream."""

    def __init__(self, parts: WhisperParts, options: WhisperOptions, gate: SilenceGate | None,
                 coverage: Callable[[], SpeechCoverage], totals: WhisperTotals) -> None:
        """`gate`: lets passes over silence be skipped (None: every pass runs); `coverage`: a new
        stream's speech coverage bookkeeping (coverage.py); `totals`: the runner's counts, which
        every pass is added to."""
        self.parts = parts
        self.window_s = options.stream_window_s
        self.fit_context = options.stream_encoder_context == "fit"
        self.step_samples = int(options.stream_step_ms * SAMPLE_RATE / 1000)
        """The engine's stream step: a delay's pass cadence is a multiple of it."""
        self.picker = StreamPassPicker(self.step_samples, gate)
        self._coverage = coverage
        self.totals = totals
        self._streams: dict[str, StreamingTranscription] = {}

    def __getitem__(self, request_id: str) -> StreamingTranscription:
        return self._streams[request_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    def open(self, request: Request) -> StreamingTranscription:
        stream = StreamingTranscription(request, self.parts, self.window_s, fit_context=self.fit_context,
                                        coverage=self._coverage(), totals=self.totals)
        self._streams[request.request_id] = stream
        return stream

    def end(self, request_id: str) -> None:
        """The stream finished or was released: it and its picker state go (no-op if not open)."""
        if self._streams.pop(request_id, None) is not None:
            self.picker.release(request_id)

    def clear(self) -> None:
        self._streams.clear()

    def spoken(self) -> int:
        """Streams whose passes cost what speech costs (`StreamingTranscription.spoken`)."""
        return sum(s.spoken for s in self._streams.values())

    def due(self) -> bool:
        """Some stream is due a pass."""
        return any(s.ready(self.step_samples) for s in self._streams.values())

    def live(self) -> bool:
        """Some stream runs live passes that offline windows yield to; a stream catching up
        decodes offline windows of its own, which need not yield to themselves."""
        return any(s.catch_up is None for s in self._streams.values())

    def catch_up(self, behind: list[StreamingTranscription], vad: VoiceActivityModel | None, planner: WindowPlanner,
                 fail: FailRequest, outputs: list[RequestOutput]) -> None:
        """Streams `behind` decode their backlog as offline segments (catchup.py): the first
        segments' windows are queued, or a round with nothing to decode reports at once."""
        for stream in behind:
            with stage_timer("streaming.features"):  # VAD cuts and segment features
                try:
                    jobs, output = stream.start_catch_up(vad)
                except Exception as exc:
                    fail(stream, "catchup", exc)
                    continue
            for job in jobs:
                planner.submit(job)
            if output is not None:
                outputs.append(output)

    def start(self, passes: list[tuple[StreamingTranscription, np.ndarray]], planner: WindowPlanner,
              fail: FailRequest) -> None:
        """The passes' windows are featurized in one call and join the encoder queue together;
        if that fails, every one of their streams fails."""
        if not passes:
            return
        with stage_timer("streaming.features"):
            try:
                mels = self.parts.features([audio for _, audio in passes])
            except Exception as exc:
                for stream, _ in passes:
                    fail(stream, "features", exc)
                return
        for (stream, _), mel in zip(passes, mels):
            job = stream.make_job(mel.to(self.parts.dtype))
            job.patience_samples = stream.pass_samples(self.step_samples)
            job.stream_request = stream.request
            planner.submit(job)
