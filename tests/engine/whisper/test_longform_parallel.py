"""Long offline requests decoded as parallel windows (engine/models/whisper/longform.py): dev
clips joined by pauses, with a long inner and a long trailing silence, transcribed in one request.
Pinned to int8_w8a8; driven by engine steps, never by timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.conftest import SAMPLE_RATE, Clip, wer

GAP_S = 1.0
INNER_SILENCE_S = 20.0  # longer than KEEP_SILENCE_S: left out of every window
TRAILING_SILENCE_S = 25.0
MIN_SPEECH_S = 70.0  # at least three windows of speech
EDGE_S = 0.5  # a word or segment may reach this far into a silence (padding, timestamp steps)


@dataclass
class Recording:
    audio: np.ndarray
    clips: list[tuple[float, Clip]]  # start (s) of each clip
    silences: list[tuple[float, float]]  # the long inner and the trailing silence


@pytest.fixture(scope="module")
def engine(engine_int8: Any) -> Any:
    """The session's int8 engine: this module's claims are pinned to int8_w8a8."""
    return engine_int8


@pytest.fixture(scope="module")
def recording(clips: list[Clip]) -> Recording:
    parts: list[np.ndarray] = []
    placed: list[tuple[float, Clip]] = []
    silences: list[tuple[float, float]] = []
    t = 0.0
    for clip in sorted(clips, key=lambda c: c.id):  # a fixed order, not the manifest's
        if t >= MIN_SPEECH_S:
            break
        gap = INNER_SILENCE_S if placed and not silences and t >= MIN_SPEECH_S / 2 else (GAP_S if placed else 0.0)
        if gap == INNER_SILENCE_S:
            silences.append((t, t + gap))
        parts.append(np.zeros(int(gap * SAMPLE_RATE), np.float32))
        t += gap
        placed.append((t, clip))
        parts.append(clip.audio)
        t += clip.audio.size / SAMPLE_RATE
    silences.append((t, t + TRAILING_SILENCE_S))
    parts.append(np.zeros(int(TRAILING_SILENCE_S * SAMPLE_RATE), np.float32))
    return Recording(np.concatenate(parts), placed, silences)


@pytest.fixture(scope="module")
def alone(engine: Any, recording: Recording) -> list[Any]:
    """Each clip of the recording transcribed on its own (one window each)."""
    return engine.transcribe_outputs([c.audio for _, c in recording.clips])


@pytest.fixture(scope="module")
def stepped(engine: Any, recording: Recording, clips: list[Clip]) -> dict[str, Any]:
    """The recording (with word timestamps) and a short clip submitted together, the engine
    stepped by hand: every output of each request, and which requests' windows shared each
    decoder batch."""
    from engine import DecodingOptions

    long_id = engine.add_request(recording.audio, decoding=DecodingOptions(word_timestamps=True))
    short_id = engine.add_request(clips[0].audio)
    outputs: dict[str, list[Any]] = {long_id: [], short_id: []}
    batches: list[list[str]] = []
    for _ in range(20_000):
        for out in engine.step():
            outputs[out.request_id].append(out)
        batches.append([g.job.request_id for g in engine.runner.batch.groups if not g.done])
        if all(o and o[-1].finished for o in outputs.values()):
            break
    return {"long": outputs[long_id], "short": outputs[short_id], "batches": batches, "ids": (long_id, short_id)}


def test_long_request_windows_share_the_batch_with_another_request(stepped: dict[str, Any]) -> None:
    long_id, short_id = stepped["ids"]
    assert stepped["long"][-1].finish_reason == "stop" and stepped["short"][-1].finish_reason == "stop"
    together = [b for b in stepped["batches"] if b.count(long_id) >= 2 and short_id in b]
    assert together, "the long request's windows never decoded side by side with the other request"


def test_partials_come_in_order_and_grow_to_the_final(stepped: dict[str, Any], recording: Recording) -> None:
    outs = stepped["long"]
    final = outs[-1]
    partials = [o for o in outs if not o.finished]
    # windows done in the same step are reported together: at least one partial with text comes first
    with_text = [p for p in partials if p.text]
    assert with_text and len(with_text[0].text) < len(final.text), "no window's text before the end"
    seen = ""
    durations = []
    for p in partials:
        assert p.text.startswith(seen) and final.text.startswith(p.text), (seen, p.text)
        seen = p.text
        durations.append(p.duration)
    assert durations == sorted(durations) and durations[-1] < final.duration
    # progress counts windows done in any order: it grows with every partial, text or not
    decoded = [p.progress_seconds for p in partials]
    assert decoded == sorted(decoded) and len(set(decoded)) == len(decoded) and decoded[-1] < final.duration
    assert all(p.progress_seconds >= p.duration for p in partials)
    assert final.duration == pytest.approx(recording.audio.size / SAMPLE_RATE, abs=0.01)


def test_timestamps_are_monotonic_and_read_as_one_recording(stepped: dict[str, Any], recording: Recording) -> None:
    out = stepped["long"][-1]
    duration = recording.audio.size / SAMPLE_RATE
    assert [s.id for s in out.segments] == list(range(len(out.segments)))
    assert out.text == "".join(s.text for s in out.segments).strip()
    previous = 0.0
    for seg in out.segments:
        assert previous - 1e-6 <= seg.start <= seg.end <= duration, seg
        previous = seg.end
    assert out.words and [w for s in out.segments for w in s.words or []] == out.words
    previous = 0.0
    for w in out.words:
        assert previous - 1e-6 <= w.start <= w.end <= duration, w
        previous = w.end
    # the last clip, decoded in the last window, is timed where it is in the recording
    start, last = recording.clips[-1]
    last_words = [w for w in out.words if w.start >= start - EDGE_S]
    assert last_words and last_words[-1].end <= start + last.audio.size / SAMPLE_RATE + EDGE_S


def test_nothing_is_written_over_silence(stepped: dict[str, Any], recording: Recording) -> None:
    out = stepped["long"][-1]
    for a, b in recording.silences:
        for seg in out.segments:
            assert seg.end <= a + EDGE_S or seg.start >= b - EDGE_S, f"segment over the silence {a:.1f}-{b:.1f}: {seg}"
        for w in out.words:
            assert w.end <= a + EDGE_S or w.start >= b - EDGE_S, f"word over the silence {a:.1f}-{b:.1f}: {w}"


def test_no_word_lost_or_doubled_at_a_cut(stepped: dict[str, Any], alone: list[Any], recording: Recording) -> None:
    """Against the clips transcribed one by one: the long request may word a clip differently (no
    previous text, other batch mates), but loses or repeats no words (a cut through a word, a
    window's text written twice)."""
    import jiwer
    from whisper_normalizer.english import EnglishTextNormalizer

    norm = EnglishTextNormalizer()
    one_by_one = norm(" ".join(o.text for o in alone))
    long_text = norm(stepped["long"][-1].text)
    diff = jiwer.process_words(one_by_one, long_text)
    words = len(one_by_one.split())
    assert diff.deletions + diff.insertions <= max(2, words // 50), jiwer.visualize_alignment(diff)
    references = " ".join(c.text or "" for _, c in recording.clips)
    assert wer([references], [stepped["long"][-1].text]) <= wer([references], [one_by_one]) + 2.0


def _decodes_and_text(engine: Any, audio: np.ndarray, prompt: str | None) -> tuple[int, str]:
    """The window decodes (jobs the planner took: first attempts, fallbacks, remainders) of one
    request, and its transcript."""
    from engine import DecodingOptions

    planner = engine.runner.planner
    taken: list[Any] = []
    submit = planner.submit
    planner.submit = lambda job: (taken.append(job), submit(job))[1]
    try:
        text = engine.transcribe_outputs(audio, decoding=DecodingOptions(prompt=prompt))[0].text
    finally:
        del planner.submit
    return len(taken), text


@pytest.mark.parametrize("prompt", [None, "Montreal Forced Aligner, Firefox, Queen of Clubs. A test recording."])
def test_a_window_writes_its_speech_to_the_end_in_one_decode(engine: Any, clips: list[Clip], prompt: str | None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny.en ends a long window's text a sentence early; with the end of text on a timestamp
    pair held while the VAD hears more than EOT_HOLD_MARGIN_S of speech after it, that sentence is
    written in the same decode instead of a window of its own: fewer decodes, and no words lost.
    Prompted, tiny.en writes such windows as one segment to their end and the hold changes nothing
    (holding every end made them loop to the token limit). Dev clips of at most one window joined
    by 1 s pauses (the long-form benchmark's recording, shorter)."""
    from engine.models.whisper import longform

    gap = np.zeros(int(GAP_S * SAMPLE_RATE), np.float32)
    joined = [c for c in sorted(clips, key=lambda c: c.id) if c.audio.size <= 30 * SAMPLE_RATE and c.text]
    parts: list[np.ndarray] = []
    for clip in joined:
        if sum(p.size for p in parts) >= 150 * SAMPLE_RATE:
            break
        parts += [clip.audio, gap]
    audio = np.concatenate(parts)
    references = [" ".join(c.text or "" for c in joined[: len(parts) // 2])]

    held_decodes, held_text = _decodes_and_text(engine, audio, prompt)

    class Unheld(longform.OfflineTranscription):  # type: ignore[misc,name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "speech_until": None})

    monkeypatch.setattr(longform, "OfflineTranscription", Unheld)
    free_decodes, free_text = _decodes_and_text(engine, audio, prompt)
    if prompt is None:
        assert held_decodes < free_decodes, (held_decodes, free_decodes)
    else:
        assert held_decodes <= free_decodes, (held_decodes, free_decodes)
    assert wer(references, [held_text]) <= wer(references, [free_text]) + 2.0, (held_text, free_text)


def test_silence_only_long_request_has_no_text(engine: Any) -> None:
    out = engine.transcribe_outputs(np.zeros(45 * SAMPLE_RATE, np.float32))[0]
    assert out.finish_reason == "stop" and out.text == "" and out.segments == []
    assert out.duration == pytest.approx(45.0)


def test_sequential_long_form_stays_available(clips: list[Clip]) -> None:
    """offline_long_form='sequential' decodes 30 s windows one after another (no VAD cut)."""
    from engine import ASREngine, EngineConfig
    from engine.models.whisper.longform import SegmentedTranscription
    from engine.models.whisper.options import WhisperOptions

    eng = ASREngine(EngineConfig(quantization="int8_w8a8",
                                 family_options={"whisper": WhisperOptions(offline_long_form="sequential")}))
    try:
        audio = np.concatenate([c.audio for c in clips[:12]])
        assert audio.size > 30 * SAMPLE_RATE
        rid = eng.add_request(audio)
        kinds = set()
        done = False
        while not done:
            done = any(o.finished for o in eng.step())
            kinds |= {type(s).__name__ for s in eng.runner.active.values()}
        assert SegmentedTranscription.__name__ not in kinds and rid
    finally:
        eng.shutdown()


def test_aborting_a_long_request_drops_all_its_windows(engine: Any, recording: Recording) -> None:
    rid = engine.add_request(recording.audio)
    runner = engine.runner
    for _ in range(1000):
        engine.step()
        if sum(g.job.request_id == rid for g in runner.batch.groups if not g.done) >= 2:
            break
    else:
        pytest.fail("the long request's windows never decoded together")
    engine.abort_request(rid)
    outs = engine.step()
    assert [o.finish_reason for o in outs if o.request_id == rid] == ["abort"]
    queued = [*runner.planner.encode_queue, *runner.planner.prefill_queue, *runner.planner.encoding]
    assert not any(j.request_id == rid for j in queued)
    assert not any(g.job.request_id == rid and not g.done for g in runner.batch.groups)
    assert rid not in runner.active


def test_a_long_request_holds_at_most_the_batch_rows_of_windows(engine: Any, recording: Recording) -> None:
    """With a batch of two rows, the recording's windows are featurized two at a time (each when
    one before is done): never more than two started and not done, the same transcript as with
    every window featurized at once (exact int8: a window's decode does not depend on its
    batchmates)."""
    from engine import ASREngine, EngineConfig
    from engine.models.whisper.longform import SegmentedTranscription
    from engine.models.whisper.offline import OfflineTranscription

    everything = engine.transcribe_outputs(recording.audio)[0]
    eng = ASREngine(EngineConfig(quantization="int8_w8a8", max_decode_rows=2, max_batch_size=2))
    try:
        rid = eng.add_request(recording.audio)
        most, windows, final = 0, 0, None
        while final is None:
            final = next((o for o in eng.step() if o.request_id == rid and o.finished), None)
            state = eng.runner.active.get(rid)
            if isinstance(state, SegmentedTranscription):
                windows = len(state.windows)
                # started and not done: a window's transcription (done ones keep their segments only)
                most = max(most, sum(isinstance(p, OfflineTranscription) for p in state.parts_of))
    finally:
        eng.shutdown()
    assert windows > 2 and most == 2
    assert final.text == everything.text and final.text
    assert [(s.start, s.end, s.text) for s in final.segments] == [(s.start, s.end, s.text) for s in everything.segments]


def test_speech_after_a_seam_is_decoded_where_a_segment_is_timed_over_it(
    engine: Any, recording: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the faint runs (engine/vad/windows.py), the falsetto clips after the recording's
    long silence join the second window's first piece at a seam; tiny.en (int8) writes none of
    them and times that piece's last segment ("... on the left.") to the window's end. Coverage
    reads the segment as ending at the seam, as the stitched segment does, so the speech after
    it is decoded again: "I hardly know her" (clear speech) is not lost. With word timestamps
    (30 s encodings): without them the same layout happens to be written whole."""
    from engine import DecodingOptions
    from engine.vad import windows

    monkeypatch.setattr(windows, "FAINT_RUN_THRESHOLD", 0.99)
    out = engine.transcribe_outputs(recording.audio, False, DecodingOptions(word_timestamps=True))[0]
    assert "hardly know her" in out.text.lower(), out.text
