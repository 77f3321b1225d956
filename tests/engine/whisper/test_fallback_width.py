"""A failed window's hotter attempts decode `fallback_width` at a time (a long request's windows:
one) or all at once (a request alone), and either way the coolest attempt that passes is kept:
driven on the real parts with decoded results written by hand (what passes Whisper's checks is
the avg log-probability alone here), so which attempt runs when is known."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.models.whisper.offline import OfflineTranscription
from engine.models.whisper.window import WindowJob, WindowResult
from engine.request import Request
from engine.types import DecodingOptions

PASSES, FAILS = -0.3, -2.0  # avg log-probabilities either side of Whisper's -1.0 threshold


def transcription(engine: Any, width: int | None) -> tuple[OfflineTranscription, WindowJob]:
    parts = engine.runner.parts
    audio = np.zeros(16000 * 5, dtype=np.float32)
    request = Request(request_id="r", streaming=False, decoding=DecodingOptions(seed=3), sample_rate=16000, audio=audio)
    mel = parts.features([audio], audio_padding=False)[0]
    owner = OfflineTranscription(request, mel, parts, fit_context=True, fallback_width=width)
    job = owner.next_job()
    assert job is not None
    return owner, job


def result(engine: Any, job: WindowJob, avg_logprob: float) -> WindowResult:
    tok = engine.runner.parts.tokenizer
    text = tok.encode(f" attempt at {job.temperature}")
    tokens = [tok.timestamp_begin, *text, tok.timestamp_begin + 100]
    return WindowResult(tokens, avg_logprob * len(tokens), avg_logprob, 0.01, job.temperature,
                        token_logprobs=[avg_logprob] * len(tokens))


@pytest.mark.parametrize("width", [1, 2, None])
def test_the_coolest_passing_attempt_is_kept_whatever_the_width(engine: Any, width: int | None) -> None:
    owner, first = transcription(engine, width)
    update = owner.on_window_done(first, result(engine, first, FAILS))
    launched = list(update.jobs)
    assert [j.temperature for j in launched] == [0.2, 0.4, 0.6, 0.8, 1.0][: width or 5]
    # the attempts at 0.2 and 0.4 fail, 0.6 passes; results arrive hottest first where several run
    verdict = {0.2: FAILS, 0.4: FAILS, 0.6: PASSES, 0.8: PASSES, 1.0: PASSES}
    done = None
    while done is None:
        job = max((j for j in launched if j.ladder_index not in owner.fallback_results), key=lambda j: j.temperature)
        update = owner.on_window_done(job, result(engine, job, verdict[job.temperature]))
        launched += update.jobs
        if update.output is not None:
            done = update
        else:
            assert sum(1 for j in launched if j.ladder_index not in owner.fallback_results) <= (width or 5)
    assert done.output.text == "attempt at 0.6"
    assert max(j.temperature for j in launched) == (1.0 if width in (2, None) else 0.6)  # width 1 never starts 0.8
    assert all(j.temperature > 0.6 for j in done.withdrawn)


def test_every_attempt_failing_keeps_the_most_confident_one_at_width_one(engine: Any) -> None:
    owner, first = transcription(engine, 1)
    update = owner.on_window_done(first, result(engine, first, -2.0))
    scores = {0.2: -1.5, 0.4: -1.2, 0.6: -3.0, 0.8: -2.5, 1.0: -4.0}
    temperatures = []
    while update.output is None:
        (job,) = update.jobs  # one attempt at a time
        temperatures.append(job.temperature)
        update = owner.on_window_done(job, result(engine, job, scores[job.temperature]))
    assert temperatures == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert update.output.text == "attempt at 0.4"
