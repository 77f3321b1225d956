"""Live catch-up (issue 43 item 5): a stream handed more audio than one pass covers decodes the
backlog as offline segments and loses nothing.

Before it, a window that outgrew `stream_window_s` was cut to its cap and the audio no pass had
heard was dropped: a 9-minute recording fed at once came back with half its words. Every case
is driven by engine steps (no wall clock) on a pinned numeric path.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from engine.models.whisper.catchup import LIVE_TAIL_S, plan_cut
from tests.conftest import Clip, wer

SR = 16000
QUANTIZATION = "none"  # float32: the reference path, the same on every CPU


def _joined(clips: list[Clip], ids: list[str], pause_s: float = 1.0) -> tuple[np.ndarray, str]:
    by_id = {c.id: c for c in clips}
    pause = np.zeros(int(pause_s * SR), np.float32)
    audio = np.concatenate([piece for cid in ids for piece in (by_id[cid].audio, pause)])
    return audio, " ".join(by_id[cid].text for cid in ids)


def test_segments_are_cut_within_one_window_and_a_tail_in_speech_is_left_live(clips: list[Clip]) -> None:
    from engine.vad import load_vad_model

    vad = load_vad_model("silero")
    ids = ["libri_61-70968-0000", "jfk_inaugural", "libri_2412-153948-0000", "mfa_surround", "mfa_words"]
    audio, _ = _joined(clips, ids)
    cut = plan_cut(audio, 100.0, 100.0, vad, 30.0)
    assert cut.segments and all(e - s <= 30.0 + 1e-6 for s, e in cut.segments)
    assert all(a[1] <= b[0] for a, b in pairwise(cut.segments))  # in order, no overlap
    assert cut.until == pytest.approx(100.0 + audio.size / SR - LIVE_TAIL_S)  # the pause after: silence
    # the same audio cut mid-word at its end: the speech at the edge waits for the live passes
    clipped = audio[: audio.size - SR - int(0.5 * SR)]  # the pause and half a second of "word"
    mid = plan_cut(clipped, 0.0, 0.0, vad, 30.0)
    end = clipped.size / SR
    assert mid.until <= end - 0.5 and all(e <= mid.until for _, e in mid.segments)
    # without a VAD: pieces of one window, the whole audio decoded
    blind = plan_cut(audio, 0.0, 0.0, None, 30.0)
    assert blind.segments[0] == (0.0, 30.0) and blind.until == pytest.approx(audio.size / SR)
    # silence only: nothing to decode, a short tail stays live
    quiet = plan_cut(np.zeros(40 * SR, np.float32), 5.0, 5.0, vad, 30.0)
    assert quiet.segments == [] and quiet.until == pytest.approx(45.0 - LIVE_TAIL_S)


def test_silence_after_the_last_segment_of_an_ended_input_is_left_undecoded(clips: list[Clip]) -> None:
    from engine.vad import load_vad_model

    audio, _ = _joined(clips, ["libri_61-70968-0000", "jfk_inaugural"], pause_s=2.0)
    ongoing = plan_cut(audio, 0.0, 0.0, load_vad_model("silero"), 30.0)
    ended = plan_cut(audio, 0.0, 0.0, load_vad_model("silero"), 30.0, input_ended=True)
    assert ongoing.segments == ended.segments
    assert ongoing.until == pytest.approx(audio.size / SR - LIVE_TAIL_S)  # a word may be starting
    assert ended.until == pytest.approx(audio.size / SR)  # no pass over the trailing silence


def _stream_by_steps(engine, audio: np.ndarray, tick: int, on_step=None):  # type: ignore[no-untyped-def]
    """Feed `tick` samples per simulated tick and step until idle after each; the partials and
    the final."""
    rid = engine.add_streaming_request()
    partials, final = [], None
    for start in range(0, audio.size, tick):
        engine.feed_chunk(rid, audio[start : start + tick], is_last=start + tick >= audio.size)
        while engine.has_work():
            for out in engine.step():
                if out.finished:
                    final = out
                else:
                    partials.append(out)
            if on_step is not None:
                on_step(engine.runner.streams.get(rid))
    assert final is not None and final.error is None, final
    return partials, final


@pytest.mark.slow  # ~1-2 min on a loaded 2-core VM: 80 s of speech decoded offline and live
def test_a_live_burst_ends_with_all_words_and_never_retracts_committed_text(clips: list[Clip]) -> None:
    from engine import ASREngine, EngineConfig

    ids = ["libri_61-70968-0000", "jfk_inaugural", "libri_2412-153948-0000", "mfa_surround", "mfa_um",
           "mfa_long", "mfa_words", "cv_en_22058264"]
    audio, reference = _joined(clips, ids)
    assert audio.size > 60 * SR
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=QUANTIZATION))
    rounds: list[object] = []

    def watch(stream) -> None:  # type: ignore[no-untyped-def]
        if stream is not None and stream.catch_up is not None and all(r is not stream.catch_up for r in rounds):
            rounds.append(stream.catch_up)

    try:
        offline = engine.transcribe_offline(audio)
        partials, final = _stream_by_steps(engine, audio, audio.size, watch)  # the whole recording at once
    finally:
        engine.shutdown()
    assert rounds, "the burst never caught up"
    # its segments' speech coverage counts in the runner's totals, as the live passes' does
    assert all(r.coverage().totals is engine.runner.totals for r in rounds)  # type: ignore[attr-defined]
    offline_wer, live_wer = wer([reference], [str(offline)]), wer([reference], [final.text])
    assert live_wer <= offline_wer + 2.0, (live_wer, offline_wer, final.text)
    committed = [p.committed or "" for p in partials] + [final.text]
    for before, after in pairwise(committed):
        assert after.startswith(before), (before, after)


@pytest.mark.slow  # ~1-2 min: 12 minutes of audio (mostly silence) through the VAD, 8 clips decoded
def test_a_long_session_fed_in_stalls_keeps_its_window_bounded(clips: list[Clip]) -> None:
    """Twelve minutes arriving 40 s at a time (a client that stalls, then sends what it held):
    between rounds the stream's window never holds more than one pass decodes, a pass never
    encodes more than one window nor carries more than its prompt budget, and every utterance
    is in the final."""
    from engine import ASREngine, EngineConfig
    from engine.log_mel import N_FRAMES
    from engine.models.whisper.stream_prefix import PROMPT_CHARS

    ids = ["libri_61-70968-0000", "jfk_inaugural", "mfa_thoughts", "libri_2412-153948-0000", "cv_en_22058264",
           "mfa_surround", "mfa_long", "mfa_words"]
    by_id = {c.id: c for c in clips}
    minute = np.zeros(90 * SR, np.float32)
    pieces = []
    for cid in ids:  # one utterance every 90 s
        chunk = minute.copy()
        chunk[10 * SR : 10 * SR + by_id[cid].audio.size] = by_id[cid].audio
        pieces.append(chunk)
    audio = np.concatenate(pieces)
    engine = ASREngine(EngineConfig(service_mode="streaming", quantization=QUANTIZATION))
    cap = engine.runner.options.stream_window_s * SR  # type: ignore[attr-defined]
    tick = 40 * SR
    peaks = {"idle_window": 0, "round_window": 0, "frames": 0, "prompt": 0}

    def watch(stream) -> None:  # type: ignore[no-untyped-def]
        if stream is None:
            return
        key = "round_window" if stream.catch_up is not None else "idle_window"
        peaks[key] = max(peaks[key], stream.window.size)
        job = stream.current_job
        if job is not None:
            peaks["frames"] = max(peaks["frames"], job.frames)
            tokens = job.prefix[: job.sot_index]
            peaks["prompt"] = max(peaks["prompt"], len(engine.runner.tokenizer.decode(tokens[1:])))  # type: ignore[attr-defined]

    try:
        _, final = _stream_by_steps(engine, audio, tick, watch)
    finally:
        engine.shutdown()
    assert peaks["idle_window"] <= cap, peaks
    assert peaks["round_window"] <= cap + tick, peaks  # a round holds at most what arrived at once
    assert peaks["frames"] <= N_FRAMES, peaks
    assert peaks["prompt"] <= PROMPT_CHARS + 20, peaks  # the prompt's budget (+ the keywords, none here)
    reference = " ".join(by_id[cid].text for cid in ids)
    assert wer([reference], [final.text]) <= 15.0, final.text
