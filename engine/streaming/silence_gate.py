"""Which live streams' new audio may hold speech: the VAD gate that spares re-decoding passes
over silence.

A re-decoding stream (Whisper) runs a pass per cadence period of new audio. Measured at 16
lockstep sessions of the capacity benchmark's audio (three clips joined by pauses), 56 % of the
passes changed nothing, most of them over pauses after every word was committed. A stream
whose passes may be skipped (nothing tentative: `StreamingTranscription.may_skip_pass`) asks the
gate whether the VAD hears speech in the audio after the last second its last pass heard; the
pass is skipped when it does not. Streams in mid-speech (words tentative) are not scored at all:
measured through the server at 16 sessions, scoring every stream's audio as it arrived was 8 %
of the engine thread (py-spy), one Silero call per 32 ms window and stream.

One VAD model serves every stream; its per-stream state (Silero's LSTM) lives here, and the
windows of several streams are scored in one batched call per window position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.vad import SAMPLE_RATE, WINDOW_SAMPLES, VoiceActivityModel, load_vad_model

logger = logging.getLogger(__name__)

SPEECH_PROB = 0.35
"""A window scored above this may be speech: Silero's own end-of-speech threshold (its speech
threshold 0.5 minus 0.15), so the gate errs towards running a pass."""


@dataclass
class _StreamVad:
    state: Any
    scored_until: int  # stream samples scored (whole windows from where scoring started)
    speech_end: int | None = None  # stream sample where the last window that may be speech ends


class SilenceGate:
    def __init__(self, model: VoiceActivityModel):
        self.model = model
        self._streams: dict[str, _StreamVad] = {}

    @classmethod
    def load(cls, kind: str = "silero") -> SilenceGate | None:
        """The gate over the packaged VAD model, or None (every pass runs) when it cannot load."""
        try:
            return cls(load_vad_model(kind))
        except Exception as exc:  # a missing VAD costs CPU, never transcripts
            logger.warning("live passes run over silence too: VAD %r unavailable (%s)", kind, exc)
            return None

    def speech_ends(self, streams: Sequence[tuple[str, float, float, np.ndarray]]) -> list[float | None]:
        """Per (stream id, since, window start, window audio), where (stream seconds) the last
        32 ms window that may be speech ends, of the stream's audio from `since` (or its window
        start, if later) to the end of its window; None: none there. Only that audio matters to a
        skip, so a stream is scored only while its passes may be skipped: a stream scored in the
        last call goes on from where it stopped (its state carried), any other starts afresh at
        `since` (Silero settles within a few windows). The samples short of a whole window wait
        for the next call. A stream appears at most once per call."""
        vads: list[_StreamVad] = []
        windows: list[np.ndarray] = []
        for sid, since_s, window_start_s, audio in streams:
            window_start = round(window_start_s * SAMPLE_RATE)
            start = max(round(since_s * SAMPLE_RATE), window_start)
            vad = self._streams.get(sid)
            if vad is None or vad.scored_until < start:
                vad = self._streams[sid] = _StreamVad(self.model.initial_state(), start)
            offset = vad.scored_until - window_start
            whole = (audio.size - offset) // WINDOW_SAMPLES * WINDOW_SAMPLES
            windows.append(audio[offset : offset + whole].reshape(-1, WINDOW_SAMPLES))
            vads.append(vad)
        for position in range(max((w.shape[0] for w in windows), default=0)):
            rows = [i for i, w in enumerate(windows) if w.shape[0] > position]
            batch = np.stack([windows[i][position] for i in rows]).astype(np.float32, copy=False)
            probs, states = self.model.predict(batch, [vads[i].state for i in rows])
            for i, prob, state in zip(rows, probs, states):
                vads[i].state = state
                vads[i].scored_until += WINDOW_SAMPLES
                if float(prob) > SPEECH_PROB:
                    vads[i].speech_end = vads[i].scored_until
        return [None if v.speech_end is None else v.speech_end / SAMPLE_RATE for v in vads]

    def forget(self, stream_id: str) -> None:
        """The stream's passes may not be skipped now (or it ended): its scoring stops."""
        self._streams.pop(stream_id, None)
