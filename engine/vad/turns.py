"""Turn detection: split a live audio stream into utterances with a voice-activity model.

    audio chunks (any size) ──► 32 ms windows ──► model ──► speech probability
                                                               │
                  SpeechGate (pure, per window): silence ⇄ onset ⇄ speech
                                                               │
    TurnDetector: SpeechStarted, TurnAudio (padded turn audio), SpeechStopped

All times are audio time from the start of the stream, so results do not depend on how
the audio was chunked or how fast it arrived. Audio between turns is never handed out:
the caller forwards exactly the `TurnAudio` of each turn to the recognizer.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from engine.errors import InvalidRequestError
from engine.vad.base import SAMPLE_RATE, WINDOW_SAMPLES, VoiceActivityModel, as_mono_float32

logger = logging.getLogger(__name__)

SAMPLES_PER_MS = SAMPLE_RATE // 1000
HYSTERESIS = 0.15
"""Once in speech, a window only counts as silence below threshold - HYSTERESIS (as Silero's
own segmenter does), so probabilities wobbling around the threshold do not end a turn."""
ONSET_GAP_MS = 100
"""During the onset (before min_speech_ms of speech is confirmed) a gap this long means the
candidate was an isolated blip; shorter gaps are the dips between syllables."""

UNDECIDED_LIMIT_MS = 2000
"""After speech, windows hovering between the two thresholds end the turn once they have
lasted silence_duration_ms plus this long."""


@dataclass(frozen=True)
class TurnSettings:
    """Server-side turn detection settings (the `server_vad` knobs of the realtime API)."""

    threshold: float = 0.5
    """Speech probability at or above which a 32 ms window is speech."""
    silence_duration_ms: int = 500
    """Silence after speech that ends a turn."""
    prefix_padding_ms: int = 300
    """Audio kept before the detected speech start (the onset is often quieter than the gate)."""
    min_speech_ms: int = 250
    """Speech shorter than this (a cough, a click) does not start a turn."""
    suffix_padding_ms: int = 100
    """Audio kept after the detected speech end, so the last phoneme's decay is not cut."""

    def validate(self) -> None:
        """Raise InvalidRequestError naming the first out-of-range setting."""
        if not 0.0 < self.threshold < 1.0:
            raise InvalidRequestError(f"threshold must be in (0, 1), got {self.threshold}")
        for name in ("silence_duration_ms", "prefix_padding_ms", "min_speech_ms", "suffix_padding_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= 60_000:
                raise InvalidRequestError(f"{name} must be an integer in [0, 60000], got {value!r}")

    @property
    def neg_threshold(self) -> float:
        return max(self.threshold - HYSTERESIS, 0.01)


# ---- Events, in audio time (ms from the start of the stream) ----


@dataclass(frozen=True)
class SpeechStarted:
    audio_start_ms: int
    """Start of the turn's audio: the speech start minus prefix padding, clamped at 0 and at
    the end of the previous turn (the OpenAI realtime `audio_start_ms`)."""
    speech_start_ms: int
    """Start of the first window detected as speech."""


@dataclass(frozen=True)
class SpeechStopped:
    audio_end_ms: int
    """End of the turn's audio: the speech end plus suffix padding (the realtime `audio_end_ms`)."""
    speech_end_ms: int
    """End of the last window detected as speech (or of the input, when flushed mid-speech)."""


@dataclass(frozen=True, eq=False)
class TurnAudio:
    """Audio of the current turn, to forward to the recognizer in order."""

    audio: np.ndarray
    """float32 mono at SAMPLE_RATE."""
    start_sample: int
    """Position of audio[0] in the stream."""

    @property
    def start_ms(self) -> float:
        return self.start_sample / SAMPLES_PER_MS


TurnEvent = SpeechStarted | TurnAudio | SpeechStopped


# ---- The pure per-window state machine ----


class _Phase(enum.Enum):
    SILENCE = "silence"
    ONSET = "onset"
    """Speech heard but not yet min_speech_ms of it; nothing announced yet."""
    SPEECH = "speech"


@dataclass
class SpeechGate:
    """Speech/silence decisions from per-window probabilities; sample positions, no audio.

    `update(prob)` consumes the next window and returns ("start", sample) when a turn is
    confirmed (the sample where its speech began) and/or ("stop", sample) when the silence
    after speech has lasted silence_duration_ms (the sample where speech ended).
    """

    settings: TurnSettings
    position: int = 0
    """Samples consumed (the end of the last window)."""
    phase: _Phase = _Phase.SILENCE
    onset_start: int = 0
    voiced_end: int = 0
    """End of the last window at or above threshold in the current onset/turn: where speech
    ends if silence follows."""
    dipped: bool = False
    """In SPEECH: a window below the hysteresis threshold came after `voiced_end`."""

    def update(self, prob: float, window_samples: int = WINDOW_SAMPLES) -> list[tuple[str, int]]:
        s = self.settings
        start, end = self.position, self.position + window_samples
        self.position = end
        decisions: list[tuple[str, int]] = []
        voiced = prob >= s.threshold
        silent = prob < s.neg_threshold
        if self.phase is _Phase.SILENCE:
            if voiced:
                self.phase, self.onset_start, self.voiced_end = _Phase.ONSET, start, end
        elif self.phase is _Phase.ONSET:
            if voiced:
                self.voiced_end = end
            elif silent and end - self.voiced_end >= ONSET_GAP_MS * SAMPLES_PER_MS:
                self.phase = _Phase.SILENCE
        elif self.phase is _Phase.SPEECH:
            if voiced:
                self.voiced_end, self.dipped = end, False
            elif silent:
                self.dipped = True
            # Windows between the two thresholds neither extend speech nor, alone, end it, unless
            # they go on for UNDECIDED_LIMIT_MS more (bounding the audio a turn holds back).
            unvoiced = end - self.voiced_end
            silence = s.silence_duration_ms * SAMPLES_PER_MS
            if (self.dipped and unvoiced >= silence) or unvoiced >= silence + UNDECIDED_LIMIT_MS * SAMPLES_PER_MS:
                decisions.append(("stop", self.voiced_end))
                self.phase, self.dipped = _Phase.SILENCE, False
        if (
            self.phase is _Phase.ONSET
            and voiced
            and self.voiced_end - self.onset_start >= s.min_speech_ms * SAMPLES_PER_MS
        ):
            decisions.append(("start", self.onset_start))
            self.phase, self.dipped = _Phase.SPEECH, False
        return decisions

    @property
    def in_speech(self) -> bool:
        return self.phase is _Phase.SPEECH


# ---- Audio bookkeeping ----


@dataclass
class _History:
    """Recent windows with their stream positions, kept only while a turn may still need them."""

    windows: deque[tuple[int, np.ndarray]] = field(default_factory=deque)

    def append(self, start: int, samples: np.ndarray) -> None:
        self.windows.append((start, samples))

    def drop_before(self, sample: int) -> None:
        while self.windows and self.windows[0][0] + len(self.windows[0][1]) <= sample:
            self.windows.popleft()

    def slice(self, start: int, end: int) -> np.ndarray:
        parts = [
            samples[max(start - pos, 0) : end - pos]
            for pos, samples in self.windows
            if pos < end and pos + len(samples) > start
        ]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


class TurnDetector:
    """Per-stream turn detection over audio chunks of any size.

        detector = TurnDetector(model)
        for chunk in chunks:
            for event in detector.feed(chunk):
                ...  # SpeechStarted -> open a recognition request,
                     # TurnAudio -> feed it, SpeechStopped -> end its input
        events = detector.flush()  # end of input: closes a turn in progress

    Audio is scored in 32 ms windows; up to one window of audio waits for the next chunk.
    While silence follows speech, its audio is held back until the turn either resumes
    (then it is released) or ends (then only `suffix_padding_ms` of it belongs to the turn),
    so a turn's audio arrives up to one window plus any unvoiced stretch after it was spoken.
    Several streams sharing one model can be scored in one batched call with `feed_many`.
    """

    def __init__(self, model: VoiceActivityModel, settings: TurnSettings | None = None) -> None:
        self.settings = settings or TurnSettings()
        self.settings.validate()
        self.model = model
        self._model_state = model.initial_state()
        self._gate = SpeechGate(self.settings)
        self._unscored = np.zeros(0, dtype=np.float32)
        self._history = _History()
        self._forwarded = 0
        """Next stream sample to hand out for the current turn."""
        self._previous_turn_end = 0
        self._events: list[TurnEvent] = []
        self._flushed = False

    # -- public API --

    @property
    def position_ms(self) -> float:
        """Audio time received so far."""
        return (self._gate.position + self._unscored.size) / SAMPLES_PER_MS

    @property
    def in_turn(self) -> bool:
        """True between a SpeechStarted and its SpeechStopped."""
        return self._gate.in_speech

    def feed(self, chunk: np.ndarray) -> list[TurnEvent]:
        """Add audio (float32 mono, SAMPLE_RATE); return the events it completes, in order."""
        return feed_many([self], [chunk])[0]

    def flush(self) -> list[TurnEvent]:
        """End of input: close a turn in progress (its audio runs to the end of the input)."""
        if self._flushed:
            return []
        self._flushed = True
        gate = self._gate
        total = gate.position + self._unscored.size
        if gate.in_speech:
            if gate.dipped:
                speech_end = gate.voiced_end
                audio_end = min(speech_end + self.settings.suffix_padding_ms * SAMPLES_PER_MS, total)
            else:  # speech (or an undecided pause) runs into the end of the input
                speech_end = audio_end = total
            tail = self._unscored
            self._history.append(gate.position, tail)
            self._forward(audio_end)
            self._stop(speech_end, audio_end)
        elif gate.phase is _Phase.ONSET:
            logger.debug("input ended during a %d ms onset; too short for a turn",
                         (gate.voiced_end - gate.onset_start) // SAMPLES_PER_MS)
        gate.position = total
        self._unscored = np.zeros(0, dtype=np.float32)
        self._history = _History()
        return self._take_events()

    def retune(self, silence_duration_ms: int) -> None:
        """Change the silence that ends a turn, also for the turn in progress (semantic turn
        detection sets it from the transcript so far)."""
        settings = replace(self.settings, silence_duration_ms=silence_duration_ms)
        settings.validate()
        self.settings = self._gate.settings = settings

    def clear(self) -> None:
        """Drop held and unscored audio and any turn in progress, keeping the stream clock.

        No SpeechStopped is emitted for a dropped turn: the caller, who cleared, ends it.
        """
        self._gate.position += self._unscored.size
        self._gate.phase, self._gate.dipped = _Phase.SILENCE, False
        self._unscored = np.zeros(0, dtype=np.float32)
        self._history = _History()
        self._forwarded = self._previous_turn_end = self._gate.position
        self._events.clear()

    # -- used by feed_many --

    def _accept(self, chunk: np.ndarray) -> None:
        if self._flushed:
            raise InvalidRequestError("audio fed after flush(); start a new TurnDetector")
        # concatenate copies, so a caller reusing its buffer cannot change audio we hold
        self._unscored = np.concatenate([self._unscored, as_mono_float32(chunk, "audio chunk")])

    def _has_window(self) -> bool:
        return self._unscored.size >= WINDOW_SAMPLES

    def _pop_window(self) -> np.ndarray:
        window = self._unscored[:WINDOW_SAMPLES]
        self._unscored = self._unscored[WINDOW_SAMPLES:]
        return window

    def _on_window(self, window: np.ndarray, prob: float) -> None:
        gate, settings = self._gate, self.settings
        self._history.append(gate.position, window)
        for kind, sample in gate.update(prob):
            if kind == "stop":
                audio_end = min(sample + settings.suffix_padding_ms * SAMPLES_PER_MS, gate.position)
                self._forward(audio_end)
                self._stop(sample, audio_end)
            else:
                audio_start = max(sample - settings.prefix_padding_ms * SAMPLES_PER_MS, self._previous_turn_end)
                self._forwarded = audio_start
                self._events.append(
                    SpeechStarted(audio_start_ms=_to_ms(audio_start), speech_start_ms=_to_ms(sample))
                )
        if gate.in_speech:
            # Hold back audio after the last voiced window: it is released if speech resumes and
            # cut to the suffix padding if the turn ends.
            self._forward(gate.voiced_end)
            keep_from = self._forwarded
        elif gate.phase is _Phase.ONSET:
            keep_from = gate.onset_start - settings.prefix_padding_ms * SAMPLES_PER_MS
        else:
            keep_from = gate.position - settings.prefix_padding_ms * SAMPLES_PER_MS
        self._history.drop_before(max(keep_from, self._previous_turn_end))

    def _take_events(self) -> list[TurnEvent]:
        """The events since the last call, consecutive audio pieces merged into one."""
        merged: list[TurnEvent] = []
        run: list[TurnAudio] = []
        for event in [*self._events, None]:
            if isinstance(event, TurnAudio):
                run.append(event)
                continue
            if run:
                merged.append(TurnAudio(np.concatenate([a.audio for a in run]), run[0].start_sample))
                run = []
            if event is not None:
                merged.append(event)
        self._events = []
        return merged

    # -- internals --

    def _forward(self, end: int) -> None:
        if end > self._forwarded:
            audio = self._history.slice(self._forwarded, end)
            self._events.append(TurnAudio(audio, self._forwarded))
            self._forwarded = end

    def _stop(self, speech_end: int, audio_end: int) -> None:
        self._events.append(SpeechStopped(audio_end_ms=_to_ms(audio_end), speech_end_ms=_to_ms(speech_end)))
        self._previous_turn_end = audio_end


def _to_ms(sample: int) -> int:
    return sample // SAMPLES_PER_MS


def feed_many(detectors: Sequence[TurnDetector], chunks: Sequence[np.ndarray]) -> list[list[TurnEvent]]:
    """Feed one chunk to each detector, scoring all streams' windows in batched model calls.

    All detectors must share one model instance. Returns each detector's events, as
    `TurnDetector.feed` would. Streams with more new audio take part in more calls.
    """
    if len(detectors) != len(chunks):
        raise ValueError(f"{len(detectors)} detectors but {len(chunks)} chunks")
    if not detectors:
        return []
    model = detectors[0].model
    if any(d.model is not model for d in detectors):
        raise ValueError("feed_many needs detectors that share one model instance")
    for detector, chunk in zip(detectors, chunks, strict=True):
        detector._accept(chunk)
    while ready := [d for d in detectors if d._has_window()]:
        windows = np.stack([d._pop_window() for d in ready])  # (B, W)
        probs, states = model.predict(windows, [d._model_state for d in ready])
        for detector, window, prob, state in zip(ready, windows, probs, states, strict=True):
            detector._model_state = state
            detector._on_window(window, float(prob))
    return [d._take_events() for d in detectors]
