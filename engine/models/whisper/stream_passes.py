"""Which live streams get a pass this step, and which interim passes are shed while the engine
is behind.

A stream is due a pass when its delay's cadence of new audio has arrived (or its input ended).
When interim passes already wait longer than a pass period, new interim passes are shed: the
stream keeps its audio and gets one pass over all of it once the engine catches up (fresher text
than a queue of stale passes, for less work). Final passes are never shed. Each pass period a
stream goes without its pass is counted once (`oasr_engine_stream_passes_shed_total`).

With a silence gate (engine/streaming/silence_gate.py), a due stream with nothing tentative
whose last pass heard a second of silence after the last speech the VAD hears skips its pass
(`may_skip_pass`).

A due stream whose window holds more than one pass decodes is behind: it catches up on its
backlog as offline segments (catchup.py) instead of a pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

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
             ) -> tuple[list[tuple[StreamingTranscription, np.ndarray]], list[StreamingTranscription],
                        list[StreamingTranscription]]:
        """The streams due a pass with the audio of their windows, the streams whose input
        ended with nothing left to decode (their final is the committed text), and the streams
        behind (their window holds more than a pass decodes: they catch up instead).
        `withdraw` takes an interim pass a final supersedes out of the planner and the decoder
        batch."""
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
        for stream in due:
            stream.absorb()
        behind = [s for s in due if s.behind()]
        due = [s for s in due if not s.behind()]
        for stream in behind:
            self.forget(stream.request.request_id)
        speech_ends = self._speech_ends(due)
        for stream in due:
            rid = stream.request.request_id
            self.forget(rid)  # it gets its pass (or ends): nothing shed is pending
            if rid in speech_ends and stream.may_skip_pass(speech_ends[rid]):
                stream.skip_pass(speech_ends[rid])
                self.passes_skipped += 1
                continue
            if speech_ends.get(rid) is not None:
                stream.spoken = True  # its pass runs over speech: it costs what speech costs from now on
            audio = stream.window_audio()
            if audio.size:
                passes.append((stream, audio))
            elif stream.request.input_finished:
                ended.append(stream)
        return passes, ended, behind

    def _speech_ends(self, due: list[StreamingTranscription]) -> dict[str, float | None]:
        """Where the VAD heard the last speech (None: none) in the audio that decides a skip, for
        the due streams whose passes may be skipped; the others (words tentative, input ended,
        no gate) are not scored."""
        if self.gate is None:
            return {}
        candidates = []
        for stream in due:
            if stream.may_skip_pass(None):
                candidates.append(stream)
            else:
                self.gate.forget(stream.request.request_id)
        ends = self.gate.speech_ends([(s.request.request_id, s.vad_since(), s.window_start, s.window)
                                      for s in candidates])
        return {s.request.request_id: end for s, end in zip(candidates, ends)}

    def count_shed(self, stream: StreamingTranscription) -> None:
        """Count the pass periods a shed stream has gone without its pass (each once)."""
        rid = stream.request.request_id
        periods = (stream.new_samples + stream.request.pending_samples) // stream.pass_samples(self.step_samples)
        shed = max(0, periods - self._shed_periods.get(rid, 0))
        self.passes_shed += shed
        self._shed_periods[rid] = max(periods, self._shed_periods.get(rid, 0))

    def forget(self, request_id: str) -> None:
        """The stream got its pass, ended or was released."""
        self._shed_periods.pop(request_id, None)

    def release(self, request_id: str) -> None:
        """The stream ended or was released: its shed count and VAD state go."""
        self.forget(request_id)
        if self.gate is not None:
            self.gate.forget(request_id)
