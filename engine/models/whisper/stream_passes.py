"""Which live streams get a pass this step, and which interim passes are shed while the engine
is behind.

A stream is due a pass when its delay's cadence of new audio has arrived (or its input ended).
When interim passes already wait longer than a pass period, new interim passes are shed: the
stream keeps its audio and gets one pass over all of it once the engine catches up (fresher text
than a queue of stale passes, for less work). Final passes are never shed. Each pass period a
stream goes without its pass is counted once (`oasr_engine_stream_passes_shed_total`).

With a silence gate (engine/streaming/silence_gate.py), a due stream whose last pass heard the
last speech the VAD heard, and a second of silence after it, with nothing left tentative, skips
its pass (`may_skip_pass`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from engine.metrics import count_passes_shed
from engine.models.whisper.planning import WindowPlanner
from engine.models.whisper.streaming import StreamingTranscription
from engine.models.whisper.window import WindowJob
from engine.streaming.silence_gate import SilenceGate


class StreamPassPicker:
    def __init__(self, step_samples: int, gate: SilenceGate | None = None):
        """`step_samples`: the engine's stream step (a delay's cadence is a multiple of it);
        `gate`: the VAD that lets passes over silence be skipped (None: every pass runs)."""
        self.step_samples = step_samples
        self.gate = gate
        self.passes_shed = 0  # interim pass periods shed because the engine was behind
        self.passes_skipped = 0  # interim passes skipped over audio without speech
        self._shed_periods: dict[str, int] = {}  # stream -> pass periods already counted as shed

    def pick(self, streams: Iterable[StreamingTranscription], planner: WindowPlanner,
             withdraw: Callable[[WindowJob], None],
             ) -> tuple[list[tuple[StreamingTranscription, np.ndarray]], list[StreamingTranscription]]:
        """The streams due a pass with the audio of their windows, and the streams whose input
        ended with nothing left to decode (their final is the committed text). `withdraw` takes
        an interim pass a final supersedes out of the planner and the decoder batch."""
        streams = list(streams)
        for stream in streams:
            stale = stream.superseded_pass()
            if stale is not None:
                withdraw(stale)
                stream.drop_pass()
        due = [s for s in streams if s.ready(self.step_samples)]
        if planner.interims_overdue():
            for stream in (s for s in due if not s.request.input_finished):
                self.count_shed(stream)
            due = [s for s in due if s.request.input_finished]
        # the streams that waited longest go first
        due.sort(key=lambda s: -(s.new_samples + s.request.pending_samples))
        passes: list[tuple[StreamingTranscription, np.ndarray]] = []
        ended: list[StreamingTranscription] = []
        absorbed = [stream.absorb() for stream in due]
        speech_ends: list[float | None] = [None] * len(due)
        if self.gate is not None and due:
            speech_ends = self.gate.speech_ends([(s.request.request_id, audio) for s, audio in zip(due, absorbed)])
        for stream, speech_end in zip(due, speech_ends):
            self.forget(stream.request.request_id)  # it gets its pass (or ends): nothing shed is pending
            if self.gate is not None and stream.may_skip_pass(speech_end):
                stream.skip_pass(speech_end)
                self.passes_skipped += 1
                continue
            audio = stream.window_audio()
            if audio.size:
                passes.append((stream, audio))
            elif stream.request.input_finished:
                ended.append(stream)
        return passes, ended

    def count_shed(self, stream: StreamingTranscription) -> None:
        """Count the pass periods a shed stream has gone without its pass (each once)."""
        rid = stream.request.request_id
        periods = (stream.new_samples + stream.request.pending_samples) // stream.pass_samples(self.step_samples)
        shed = max(0, periods - self._shed_periods.get(rid, 0))
        self.passes_shed += shed
        count_passes_shed(shed)
        self._shed_periods[rid] = max(periods, self._shed_periods.get(rid, 0))

    def forget(self, request_id: str) -> None:
        """The stream got its pass, ended or was released."""
        self._shed_periods.pop(request_id, None)

    def release(self, request_id: str) -> None:
        """The stream ended or was released: its shed count and VAD state go."""
        self.forget(request_id)
        if self.gate is not None:
            self.gate.forget(request_id)
