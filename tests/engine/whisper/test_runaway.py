"""A candidate stuck in a loop is ended early when a hotter attempt follows it (offline.py
`cut_runaways`): the runaway test itself, the window's verdict, and on the real model (int8
path) a clip driven into loops ("a a a ..." as its prompt, greedy and sampled) that decodes less
and is transcribed no worse than decoding every candidate to its token limit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.models.whisper import offline
from engine.models.whisper.decoding import DecodeGroup
from engine.models.whisper.offline import OfflineTranscription
from engine.models.whisper.transcript import RUNAWAY_MAX_PERIOD, RUNAWAY_MIN_TOKENS, RUNAWAY_REPEATS, runaway
from engine.models.whisper.window import WindowJob, WindowResult
from engine.request import Request
from engine.types import DecodingOptions
from tests.conftest import Clip, wer

LOOPING_CLIP = "libri_61-70968-0000"
LOOP_PROMPT = " ".join(["a"] * 20)
"""A prompt that talks tiny.en into writing "a a a ..." over LOOPING_CLIP at temperature 0 (on
both numeric paths): a real decode that runs away."""


def phrase(length: int) -> list[int]:
    return list(range(100, 100 + length))


@pytest.mark.parametrize("period", [1, 3, RUNAWAY_MAX_PERIOD])
def test_a_tail_repeating_a_short_run_is_a_runaway(period: int) -> None:
    span = max(RUNAWAY_MIN_TOKENS, RUNAWAY_REPEATS * period)
    loop = (phrase(period) * span)[:span]
    assert runaway([7, 8, 9, *loop])
    assert not runaway(loop[1:])  # too short to tell
    broken = [*loop[:-5], 999, *loop[-4:]]
    assert not runaway(broken)


def test_a_longer_phrase_repeated_is_not_a_runaway() -> None:
    long_phrase = phrase(RUNAWAY_MAX_PERIOD + 1)
    assert not runaway(long_phrase * RUNAWAY_REPEATS * 2)


def test_a_word_said_a_few_times_is_not_a_runaway() -> None:
    assert not runaway([*phrase(20), *[5] * (RUNAWAY_MIN_TOKENS - 1)])  # "no, no, no" is three


def transcription(engine: Any) -> tuple[OfflineTranscription, WindowJob]:
    parts = engine.runner.parts
    audio = np.zeros(16000 * 5, dtype=np.float32)
    request = Request(request_id="r", streaming=False, decoding=DecodingOptions(seed=3), sample_rate=16000, audio=audio)
    owner = OfflineTranscription(request, parts.features([audio], audio_padding=False)[0], parts, fit_context=True)
    job = owner.next_job()
    assert job is not None
    return owner, job


def test_a_window_calls_a_candidate_a_runaway_only_when_it_loops_and_an_attempt_follows(engine_int8: Any) -> None:
    tok = engine_int8.runner.parts.tokenizer
    owner, first = transcription(engine_int8)
    looping = [tok.timestamp_begin, *tok.encode(" a" * (RUNAWAY_MIN_TOKENS + 10))]
    speech = [tok.timestamp_begin, *tok.encode(" the quick brown fox jumps over the lazy dog" * 2)]
    assert owner.runs_away(first, looping)
    assert not owner.runs_away(first, speech)
    last = WindowJob(owner, first.mel, first.seek, first.frames, owner.ladder[-1], len(owner.ladder) - 1)
    assert not owner.runs_away(last, looping)  # nothing hotter would follow: it decodes to its end


def test_a_looping_window_is_cut_short_for_less_work_and_no_worse_a_transcript(
        engine_int8: Any, clips: list[Clip], monkeypatch: pytest.MonkeyPatch) -> None:
    clip = next(c for c in clips if c.id == LOOPING_CLIP)
    decoding = DecodingOptions(prompt=LOOP_PROMPT)
    attempts: list[tuple[int, int]] = []  # (ladder index, tokens) of every attempt decoded
    done = OfflineTranscription.on_window_done

    def record(self: OfflineTranscription, job: WindowJob, result: WindowResult) -> Any:
        attempts.append((job.ladder_index, len(result.tokens)))
        return done(self, job, result)

    monkeypatch.setattr(OfflineTranscription, "on_window_done", record)
    cuts: list[int] = []
    cut_short = DecodeGroup.cut_short

    def count(group: DecodeGroup, rows: list[int] | None = None) -> None:
        if rows is None or rows:
            cuts.append(len(group.tokens[0]))
        cut_short(group, rows)

    monkeypatch.setattr(DecodeGroup, "cut_short", count)
    cut = engine_int8.transcribe_outputs(clip.audio, decoding=decoding)[0]
    cut_attempts, attempts[:] = list(attempts), []
    monkeypatch.setattr(offline, "RUNAWAY_CHECK_EVERY", 10**9)  # never looked at: every candidate decodes to its end
    whole = engine_int8.transcribe_outputs(clip.audio, decoding=decoding)[0]

    assert cuts, "the prompt no longer drives the window into a loop"
    assert cut_attempts[0][0] == attempts[0][0] == 0
    assert cut_attempts[0][1] < attempts[0][1]  # the greedy attempt ended early (and failed all the same)
    assert sum(n for _, n in cut_attempts) < sum(n for _, n in attempts)
    # both texts are a hotter attempt's best_of pick of sampled candidates, among different ones
    # (cut candidates rank last): which word a draw drops is luck, so at most one more word wrong
    # (with int8 cross K/V the cut decode's pick drops this clip's first word, "He")
    one_word = 100.0 / len(clip.text.split())
    assert wer([clip.text], [cut.text]) <= wer([clip.text], [whole.text]) + one_word, (cut.text, whole.text)
