"""Which live streams' new audio may hold speech: the VAD gate that spares re-decoding passes
over silence.

A re-decoding stream (Whisper) runs a pass per cadence period of new audio. Measured at 16
lockstep sessions of the capacity benchmark's audio (three clips joined by pauses), 56 % of the
passes changed nothing, most of them over pauses after every word was committed. The runner
feeds each stream's audio through this gate as the stream absorbs it, in order; the gate says
where in the stream the VAD last heard speech, and the stream decides whether its pass may be
skipped (`StreamingTranscription.may_skip_pass`: the last pass heard that speech and a second
of silence after it, and every word is committed).

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
    leftover: np.ndarray  # the samples short of a whole window, scored with the stream's next audio
    scored: int = 0  # windows scored so far
    speech_end: int | None = None  # windows up to the end of the last one that may be speech


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

    def speech_ends(self, streams: Sequence[tuple[str, np.ndarray]]) -> list[float | None]:
        """Feed each stream's next audio (16 kHz float32, following what it was fed before) and
        say, per stream, where (seconds from the stream's first sample) the last window that may
        be speech ends, of all the whole windows it was fed so far; None: no speech yet. A
        stream appears at most once per call."""
        vads = [self._streams.setdefault(sid, _StreamVad(self.model.initial_state(), np.zeros(0, np.float32)))
                for sid, _ in streams]
        windows: list[np.ndarray] = []
        for vad, (_, audio) in zip(vads, streams):
            audio = np.concatenate([vad.leftover, audio]) if vad.leftover.size else audio
            whole = audio.size // WINDOW_SAMPLES * WINDOW_SAMPLES
            vad.leftover = audio[whole:].astype(np.float32, copy=True)
            windows.append(audio[:whole].reshape(-1, WINDOW_SAMPLES))
        for position in range(max((w.shape[0] for w in windows), default=0)):
            rows = [i for i, w in enumerate(windows) if w.shape[0] > position]
            batch = np.stack([windows[i][position] for i in rows]).astype(np.float32, copy=False)
            probs, states = self.model.predict(batch, [vads[i].state for i in rows])
            for i, prob, state in zip(rows, probs, states):
                vads[i].state = state
                vads[i].scored += 1
                if float(prob) > SPEECH_PROB:
                    vads[i].speech_end = vads[i].scored
        return [None if v.speech_end is None else v.speech_end * WINDOW_SAMPLES / SAMPLE_RATE for v in vads]

    def forget(self, stream_id: str) -> None:
        """The stream ended or was released."""
        self._streams.pop(stream_id, None)
