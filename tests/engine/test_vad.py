"""Voice activity on real speech: turn boundaries, chunking invariance, silence, segmentation.

The test recording is two real clips with a pause between them:
    mfa_thoughts.flac + 1.5 s gap + mfa_her.flac
Both clips carry their own leading and trailing room silence, so the clip edges are not the
speech edges. The "true" speech span of each clip is measured offline on 10 ms frames: the
first and last frame whose level is within 30 dB of the clip's loud speech (99th percentile
of frame levels). This is a whole-clip, peak-relative analysis, unlike either VAD under test
(Silero's network; the energy VAD's causal noise-floor gate), and on these clips it moves by
under 50 ms when the 30 dB margin is changed to 25 or 35 dB, so it is a stable reference for
a ±200 ms tolerance.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from engine.errors import InvalidRequestError
from engine.vad import (
    SAMPLE_RATE,
    WINDOW_SAMPLES,
    EnergyVAD,
    SpeechGate,
    SpeechStarted,
    SpeechStopped,
    TurnAudio,
    TurnDetector,
    TurnEvent,
    TurnSettings,
    VoiceActivityModel,
    feed_many,
    load_vad_model,
    speech_probs,
    speech_segments,
)
from engine.vad.silero import SileroVAD
from tests.paths import SPEECH_DATA

DATA = SPEECH_DATA
TOLERANCE_MS = 200
GAP_S = 1.5
MS = SAMPLE_RATE // 1000

def _load_clip(name: str) -> np.ndarray:
    """A dev clip (the dev set is always beside the checkout: its absence fails the tests that read it)."""
    assert (DATA / "manifest.jsonl").is_file(), f"speech clips not available at {DATA}"
    entries = {e["audio"]: e for e in map(json.loads, (DATA / "manifest.jsonl").read_text().splitlines())}
    assert entries[name]["sample_rate"] == SAMPLE_RATE
    audio, rate = sf.read(DATA / name, dtype="float32")
    assert rate == SAMPLE_RATE and audio.ndim == 1
    return audio


def _speech_span_ms(clip: np.ndarray, margin_db: float = 30.0) -> tuple[int, int]:
    """(first, last) ms of the clip's speech by the peak-relative analysis in the module doc."""
    frames = clip[: clip.size // (10 * MS) * 10 * MS].reshape(-1, 10 * MS)  # (T, 10 ms)
    level = 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > np.percentile(level, 99) - margin_db)
    return int(loud[0]) * 10, int(loud[-1] + 1) * 10


def _noise(seconds: float, dbfs: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(seconds * SAMPLE_RATE)) * 10 ** (dbfs / 20)).astype(np.float32)


class Recording:
    """Two clips with a gap, and the true speech spans (ms) of each turn."""

    def __init__(self, gap: np.ndarray) -> None:
        first, second = _load_clip("mfa_thoughts.flac"), _load_clip("mfa_her.flac")
        self.audio = np.concatenate([first, gap, second])
        offset_ms = (first.size + gap.size) // MS
        (a0, a1), (b0, b1) = _speech_span_ms(first), _speech_span_ms(second)
        self.truth = [(a0, a1), (b0 + offset_ms, b1 + offset_ms)]


@pytest.fixture(scope="module")
def silero() -> SileroVAD:
    return SileroVAD.load()


@pytest.fixture(scope="module", params=["silero", "energy"])
def model(request: pytest.FixtureRequest, silero: SileroVAD) -> VoiceActivityModel:
    return silero if request.param == "silero" else EnergyVAD()


@pytest.fixture(scope="module")
def recording() -> Recording:
    return Recording(np.zeros(int(GAP_S * SAMPLE_RATE), np.float32))


def _run(model: VoiceActivityModel, audio: np.ndarray, chunk_ms: int, settings: TurnSettings | None = None
         ) -> list[TurnEvent]:
    detector = TurnDetector(model, settings)
    step = chunk_ms * MS
    events = [e for i in range(0, audio.size, step) for e in detector.feed(audio[i : i + step])]
    return events + detector.flush()


def _turns(events: list[TurnEvent]) -> list[tuple[SpeechStarted, np.ndarray, SpeechStopped]]:
    """Group events into (started, concatenated turn audio, stopped), checking their order."""
    turns = []
    started: SpeechStarted | None = None
    pieces: list[np.ndarray] = []
    for event in events:
        if isinstance(event, SpeechStarted):
            assert started is None, "turn started inside a turn"
            started, pieces = event, []
        elif isinstance(event, TurnAudio):
            assert started is not None, "audio handed out outside a turn"
            expected = started.audio_start_ms * MS + sum(p.size for p in pieces)
            assert event.start_sample == expected, "turn audio is not contiguous"
            pieces.append(event.audio)
        else:
            assert started is not None, "turn stopped without a start"
            turns.append((started, np.concatenate(pieces), event))
            started = None
    assert started is None, "turn left open after flush"
    return turns


def _key(events: list[TurnEvent]) -> list[tuple[object, ...]]:
    return [(s, len(a), a.tobytes(), e) for s, a, e in _turns(events)]


# ---- the per-window state machine, on scripted probabilities ----


def _decisions(probs: list[float], settings: TurnSettings | None = None) -> list[tuple[str, int]]:
    """Gate decisions as (kind, window index)."""
    gate = SpeechGate(settings or TurnSettings())
    return [(kind, sample // WINDOW_SAMPLES) for p in probs for kind, sample in gate.update(p)]


def test_gate_onset_needs_min_speech_and_tolerates_short_dips() -> None:
    # 8 voiced windows = 256 ms >= 250 ms: confirmed on the 8th, dated from the 1st.
    assert _decisions([0.0] * 5 + [0.9] * 8) == [("start", 5)]
    assert _decisions([0.0] * 5 + [0.9] * 7 + [0.0] * 20) == []
    # A 64 ms dip inside the onset is a syllable gap; a 128 ms one ends a blip.
    assert _decisions([0.9] * 3 + [0.0] * 2 + [0.9] * 6) == [("start", 0)]
    assert _decisions([0.9] * 3 + [0.0] * 4 + [0.9] * 8) == [("start", 7)]


def test_gate_stop_uses_hysteresis_and_dates_the_end_at_the_last_voiced_window() -> None:
    speech = [0.9] * 10  # windows 0-9
    # 16 windows (512 ms) below threshold - 0.15 after speech end the turn at window 10.
    assert _decisions(speech + [0.1] * 16) == [("start", 0), ("stop", 10)]
    assert _decisions(speech + [0.1] * 15) == [("start", 0)]
    # Hovering between the thresholds neither ends the turn nor extends it ...
    assert _decisions(speech + [0.4] * 30) == [("start", 0)]
    assert _decisions(speech + [0.4] * 30 + [0.1]) == [("start", 0), ("stop", 10)]
    # ... for at most silence_duration_ms + 2 s (79 windows > 2500 ms).
    assert _decisions(speech + [0.4] * 78) == [("start", 0)]
    assert _decisions(speech + [0.4] * 79) == [("start", 0), ("stop", 10)]
    # Speech resuming inside the silence keeps the turn going.
    assert _decisions(speech + [0.1] * 15 + [0.9] * 2 + [0.1] * 16) == [("start", 0), ("stop", 27)]


# ---- live turn detection ----


@pytest.mark.parametrize("gap", ["silence", "low_noise"])
def test_turn_boundaries_match_speech(model: VoiceActivityModel, gap: str) -> None:
    rec = Recording(np.zeros(int(GAP_S * SAMPLE_RATE), np.float32))
    if gap == "low_noise":  # room noise at -60 dBFS in the pause and under both clips
        rec.audio = rec.audio + _noise(rec.audio.size / SAMPLE_RATE, -60.0, seed=1)
    settings = TurnSettings()
    turns = _turns(_run(model, rec.audio, chunk_ms=100, settings=settings))

    assert len(turns) == 2, [(s, e) for s, _, e in turns]
    for (started, audio, stopped), (true_start, true_end) in zip(turns, rec.truth, strict=True):
        assert abs(started.speech_start_ms - true_start) <= TOLERANCE_MS, (started, true_start)
        assert abs(stopped.speech_end_ms - true_end) <= TOLERANCE_MS, (stopped, true_end)
        # Padding as configured, and the audio handed out is exactly that stretch of the input.
        assert started.audio_start_ms == max(0, started.speech_start_ms - settings.prefix_padding_ms)
        assert stopped.audio_end_ms == stopped.speech_end_ms + settings.suffix_padding_ms
        np.testing.assert_array_equal(audio, rec.audio[started.audio_start_ms * MS : stopped.audio_end_ms * MS])
    # The pause between the turns is never handed out.
    assert turns[0][2].audio_end_ms < turns[1][0].audio_start_ms


def test_events_do_not_depend_on_chunk_size(model: VoiceActivityModel, recording: Recording) -> None:
    reference = _key(_run(model, recording.audio, chunk_ms=10))
    assert len(reference) == 2
    for chunk_ms in (100, 1000):
        assert _key(_run(model, recording.audio, chunk_ms=chunk_ms)) == reference, chunk_ms
    # Irregular sizes, including empty chunks and ones that are not a whole number of windows.
    rng = np.random.default_rng(0)
    detector, events, i = TurnDetector(model), [], 0
    while i < recording.audio.size:
        size = int(rng.choice([0, 1, 37, 511, 513, 4000, 23000]))
        events += detector.feed(recording.audio[i : i + size])
        i += size
    assert _key(events + detector.flush()) == reference


@pytest.mark.parametrize("dbfs", [None, -70.0, -55.0])
def test_no_turn_in_silence_or_low_noise(model: VoiceActivityModel, dbfs: float | None) -> None:
    audio = np.zeros(5 * SAMPLE_RATE, np.float32) if dbfs is None else _noise(5.0, dbfs, seed=2)
    assert _run(model, audio, chunk_ms=100) == []


def test_silence_duration_splits_turns(silero: SileroVAD, recording: Recording) -> None:
    # mfa_her.flac has a ~150 ms pause between "aligner" and "I hardly know her": one turn at
    # the default 500 ms, two once a 100 ms silence ends a turn.
    default = _turns(_run(silero, recording.audio, chunk_ms=100))
    short = _turns(_run(silero, recording.audio, chunk_ms=100, settings=TurnSettings(silence_duration_ms=100)))
    assert len(default) == 2 and len(short) == 3
    first, second = short[1:]
    assert first[0].speech_start_ms == default[1][0].speech_start_ms
    assert second[2].speech_end_ms == default[1][2].speech_end_ms
    assert 0 < second[0].speech_start_ms - first[2].speech_end_ms < 500


def test_min_speech_ignores_blips(model: VoiceActivityModel) -> None:
    # 128 ms of real speech (the loud middle of a word) between silences is a blip.
    clip = _load_clip("mfa_thoughts.flac")
    blip = np.concatenate([np.zeros(SAMPLE_RATE, np.float32), clip[1088 * MS : 1216 * MS],
                           np.zeros(SAMPLE_RATE, np.float32)])
    assert _run(model, blip, 100) == []
    events = _run(model, blip, 100, TurnSettings(min_speech_ms=0))
    assert [type(e) for e in events if not isinstance(e, TurnAudio)] == [SpeechStarted, SpeechStopped]


def test_flush_closes_a_turn_in_progress(model: VoiceActivityModel, recording: Recording) -> None:
    cut_ms = (recording.truth[1][0] + recording.truth[1][1]) // 2  # in the middle of turn 2
    turns = _turns(_run(model, recording.audio[: cut_ms * MS], chunk_ms=100))
    assert len(turns) == 2
    started, audio, stopped = turns[1]
    assert stopped.speech_end_ms == stopped.audio_end_ms == cut_ms
    np.testing.assert_array_equal(audio, recording.audio[started.audio_start_ms * MS : cut_ms * MS])


def test_feed_many_batches_streams(silero: SileroVAD, recording: Recording) -> None:
    streams = [recording.audio, np.concatenate([np.zeros(7000, np.float32), recording.audio]), _noise(4.0, -60, 3)]
    alone = [_key(_run(silero, audio, chunk_ms=250)) for audio in streams]
    detectors = [TurnDetector(silero) for _ in streams]
    events: list[list[TurnEvent]] = [[] for _ in streams]
    longest = max(a.size for a in streams)
    for i in range(0, longest, 250 * MS):
        for mine, new in zip(events, feed_many(detectors, [a[i : i + 250 * MS] for a in streams]), strict=True):
            mine += new
    batched = [_key(mine + d.flush()) for mine, d in zip(events, detectors, strict=True)]
    # Batched and single-stream Silero agree to float rounding, so the decisions are identical.
    for one, many in zip(alone, batched, strict=True):
        assert [(s, n, e) for s, n, _, e in one] == [(s, n, e) for s, n, _, e in many]
    assert [len(k) for k in batched] == [2, 2, 0]


def test_clear_drops_turn_and_keeps_clock(silero: SileroVAD, recording: Recording) -> None:
    detector = TurnDetector(silero)
    mid_first_turn = (recording.truth[0][0] + 500) * MS
    assert any(isinstance(e, SpeechStarted) for e in detector.feed(recording.audio[:mid_first_turn]))
    detector.clear()
    assert not detector.in_turn
    rest = detector.feed(recording.audio[mid_first_turn:]) + detector.flush()
    starts = [e.speech_start_ms for e in rest if isinstance(e, SpeechStarted)]
    assert any(abs(s - recording.truth[1][0]) <= TOLERANCE_MS for s in starts)
    assert detector.position_ms == recording.audio.size / MS


def test_bad_input_is_rejected(silero: SileroVAD) -> None:
    with pytest.raises(InvalidRequestError, match="threshold"):
        TurnDetector(silero, TurnSettings(threshold=1.5))
    with pytest.raises(InvalidRequestError, match="silence_duration_ms"):
        TurnDetector(silero, TurnSettings(silence_duration_ms=-1))
    detector = TurnDetector(silero)
    with pytest.raises(InvalidRequestError, match="1-D"):
        detector.feed(np.zeros((2, 100), np.float32))
    with pytest.raises(InvalidRequestError, match="float"):
        detector.feed(np.zeros(100, np.int16))
    with pytest.raises(InvalidRequestError, match="NaN"):
        detector.feed(np.full(100, np.nan, np.float32))
    detector.flush()
    with pytest.raises(InvalidRequestError, match="flush"):
        detector.feed(np.zeros(100, np.float32))
    with pytest.raises(InvalidRequestError, match="unknown VAD"):
        load_vad_model("webrtc")


# ---- the models ----


def test_silero_loads_packaged_model_without_touching_torch_threads() -> None:
    threads = torch.get_num_threads()
    model = load_vad_model("silero")
    assert isinstance(model, SileroVAD) and isinstance(model, VoiceActivityModel)
    assert torch.get_num_threads() == threads


def test_silero_backends_agree(silero: SileroVAD, recording: Recording) -> None:
    assert silero.backend == "onnx"
    # 1.5 s around the first onset; TorchScript is slow when the cores are busy.
    audio = recording.audio[400 * MS : 1900 * MS]
    np.testing.assert_allclose(speech_probs(SileroVAD.load("torch"), audio), speech_probs(silero, audio), atol=1e-4)


def test_silero_batched_windows_match_single(silero: SileroVAD, recording: Recording) -> None:
    audio = recording.audio[: recording.audio.size // 512 * 512]
    single = speech_probs(silero, audio)
    # Three streams in one batch: the recording, its reverse, and silence.
    lanes = np.stack([audio, audio[::-1], np.zeros_like(audio)]).reshape(3, -1, 512)  # (B, T, W)
    states = [silero.initial_state() for _ in range(3)]
    batched = []
    for t in range(lanes.shape[1]):
        probs, states = silero.predict(lanes[:, t], states)
        batched.append(probs)
    np.testing.assert_allclose(np.stack(batched)[:, 0], single, atol=1e-4)
    assert single.max() > 0.9 and np.stack(batched)[:, 2].max() < 0.1


def test_energy_vad_adapts_to_the_noise_floor() -> None:
    vad = EnergyVAD()
    quiet, noisy = _noise(3.0, -70, 4), _noise(4.5, -35, 5)
    # Steady noise louder than the absolute gate reads as speech at first, then, once the
    # 3 s floor window has seen only noise, as background.
    probs = speech_probs(vad, np.concatenate([quiet, noisy]))
    switch = quiet.size // WINDOW_SAMPLES  # the window where the noise comes in
    assert probs[:switch].max() < 0.05
    assert probs[switch + 1] > 0.9
    assert probs[-30:].max() < 0.05


# ---- offline segmentation ----


def test_speech_segments_on_recording(model: VoiceActivityModel, recording: Recording) -> None:
    segments = speech_segments(recording.audio, model=model, padding_ms=200)
    assert len(segments) == 2
    for (start, end), (true_start, true_end) in zip(segments, recording.truth, strict=True):
        assert abs(start * 1000 + 200 - true_start) <= TOLERANCE_MS, (start, true_start)
        assert abs(end * 1000 - 200 - true_end) <= TOLERANCE_MS, (end, true_end)
    # An 8 kHz copy is resampled and segmented the same way, to a window or two.
    import soxr

    low = soxr.resample(recording.audio, SAMPLE_RATE, 8000).astype(np.float32)
    for (a0, a1), (b0, b1) in zip(speech_segments(low, 8000, model=model, padding_ms=200), segments, strict=True):
        assert abs(a0 - b0) <= 0.07 and abs(a1 - b1) <= 0.07


def test_speech_segments_merge_and_split(silero: SileroVAD, recording: Recording) -> None:
    # Padding that covers the ~4 s pause joins the two turns into one segment; so does a merge gap.
    joined = speech_segments(recording.audio, model=silero, padding_ms=2100)
    assert len(joined) == 1
    assert len(speech_segments(recording.audio, model=silero, padding_ms=100, merge_gap_ms=5000)) == 1
    # Four clips back to back with short pauses are one speech run, split to fit 5 s.
    clips = [_load_clip(n) for n in ("mfa_her.flac", "mfa_thoughts.flac")] * 2
    trimmed = [c[_speech_span_ms(c)[0] * MS : _speech_span_ms(c)[1] * MS] for c in clips]
    pause = np.zeros(int(0.25 * SAMPLE_RATE), np.float32)
    audio = np.concatenate([x for c in trimmed for x in (c, pause)])
    assert len(speech_segments(audio, model=silero, max_segment_s=30)) == 1
    pieces = speech_segments(audio, model=silero, max_segment_s=5)
    assert len(pieces) >= 2
    assert all(end - start <= 5.0 + 1e-9 for start, end in pieces)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(pieces))
    covered = sum(end - start for start, end in pieces)
    assert covered >= 0.95 * audio.size / SAMPLE_RATE - 0.3
    assert speech_segments(np.zeros(0, np.float32), model=silero) == []
    with pytest.raises(InvalidRequestError, match="max_segment_s"):
        speech_segments(audio, model=silero, max_segment_s=0.5)


@pytest.mark.parametrize("chunk_windows", [64, 2048])
def test_a_recording_scored_at_once_scores_as_window_by_window(
    silero: SileroVAD, recording: Recording, chunk_windows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Silero's batched scorer of a whole recording (the front in chunks, the LSTM state carried
    across them) gives the probabilities of the network window by window, on both backends, its
    last window partial, across chunk boundaries (64 windows: ~20 of them here)."""
    from engine.vad import silero_recording

    monkeypatch.setattr(silero_recording, "CHUNK_WINDOWS", chunk_windows)
    audio = np.concatenate([recording.audio, recording.audio[: 5 * SAMPLE_RATE + 123]])
    for model in (silero, SileroVAD.load("torch")):
        at_once = model.score_recording(audio)
        assert at_once.shape == (-(-audio.size // WINDOW_SAMPLES),) and at_once.dtype == np.float32
        np.testing.assert_allclose(at_once, speech_probs(model, audio), atol=1e-4)
    assert (at_once > 0.9).any() and (at_once < 0.1).any()
    assert silero.score_recording(np.zeros(0, np.float32)).shape == (0,)
    with pytest.raises(InvalidRequestError, match="NaN"):
        silero.score_recording(np.full(1000, np.nan, np.float32))


def test_a_silero_release_without_the_pieces_scores_recordings_window_by_window(
    silero: SileroVAD, recording: Recording, tmp_path: Path
) -> None:
    """A TorchScript file whose pieces are named otherwise gives no batched scorer (a warning,
    not an error), and a Silero without one scores a recording one window at a time."""
    from engine.vad.silero_recording import load_torchscript, recording_scorer

    other = tmp_path / "other.jit"
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(other))  # type: ignore[no-untyped-call]
    assert recording_scorer(load_torchscript(other)) is None
    plain = SileroVAD(silero._network, "onnx", recording=None)
    audio = recording.audio[: 3 * SAMPLE_RATE]
    np.testing.assert_array_equal(plain.score_recording(audio), speech_probs(silero, audio))
