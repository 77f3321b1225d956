"""The Whisper window planner's live rules (engine/models/whisper/planning.py), on stand-in jobs:
finals first, a final encoded without interim batch-mates, an interim pass waiting longer than
its stream's pass period of audio marks the engine as behind, and the runner's count of shed passes."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch

from engine.models.whisper.planning import OFFLINE_PATIENCE_S, WindowPlanner
from engine.models.whisper.window import LATE_PASS_SHARE, WindowJob, WindowResult

MEL_FRAMES = 200  # a 2 s pass: a short window


def live_job(name: str, final: bool = False, patience_samples: float = math.inf) -> WindowJob:
    request = SimpleNamespace(request_id=name, received_samples=0)
    owner = SimpleNamespace(request=request, options=SimpleNamespace(beam_size=1))
    job = WindowJob(owner, torch.zeros(80, MEL_FRAMES), 0, MEL_FRAMES, 0.0, 0, live=True, final=final)  # type: ignore[arg-type]
    job.patience_samples = patience_samples
    job.stream_request = request  # type: ignore[assignment]
    return job


def idle_batch(*final_groups: WindowJob) -> Any:
    groups = [SimpleNamespace(job=j, done=False) for j in final_groups]
    return SimpleNamespace(groups=groups, num_rows=len(groups))


def planner() -> WindowPlanner:
    return WindowPlanner(max_rows=64, max_encode_batch=16, n_audio_ctx=1500)


def test_a_final_pass_is_encoded_without_interim_batch_mates() -> None:
    p = planner()
    a, b, final = live_job("a"), live_job("b"), live_job("c", final=True)
    for job in (a, b, final):
        p.submit(job)
    assert p.take_encode(idle_batch()) == [final]  # the final went ahead and keeps the batch short
    assert p.take_encode(idle_batch()) == [a, b]


def test_interim_passes_wait_for_finals_and_an_overdue_one_says_the_engine_is_behind() -> None:
    decoding_final = live_job("f", final=True)
    p = planner()
    patient, due = live_job("a"), live_job("b", patience_samples=8000)
    p.submit(patient)
    p.submit(due)
    assert not p.interims_overdue()  # however long it waits in wall time: its stream sent nothing
    due.stream_request.received_samples += 7999  # type: ignore[union-attr]
    assert not p.interims_overdue()
    due.stream_request.received_samples += 1  # type: ignore[union-attr]
    assert p.interims_overdue()  # b's stream sent its pass period meanwhile: streams coming due are shed
    assert p.take_encode(idle_batch(decoding_final)) == []  # a final decodes: partials wait
    assert p.take_encode(idle_batch()) == [patient, due]
    p.encoded([patient, due])
    assert p.take_join(idle_batch(decoding_final), active={"a", "b"}) == []
    assert p.take_join(idle_batch(), active={"a", "b"}) == [patient, due]
    result = WindowResult(tokens=[], sum_logprob=0.0, avg_logprob=0.0, no_speech_prob=0.0, temperature=0.0)
    finished = [SimpleNamespace(job=j, result=result) for j in (patient, due)]
    assert p.results(finished, idle_batch(decoding_final)) == []  # type: ignore[arg-type]
    assert [j for j, _ in p.results([], idle_batch())] == [patient, due]  # finals done: their alignment follows


def test_each_shed_pass_period_is_counted_once() -> None:
    from engine.models.whisper.stream_passes import StreamPassPicker

    step = 8000
    picker = StreamPassPicker(step)
    request = SimpleNamespace(request_id="shed-test", pending_samples=0)
    stream = SimpleNamespace(request=request, new_samples=step, pass_samples=lambda s: s)
    picker.count_shed(stream)  # type: ignore[arg-type]  # one period due and shed
    picker.count_shed(stream)  # type: ignore[arg-type]  # the same period again: not counted twice
    request.pending_samples = 2 * step  # two more periods arrive while the engine is behind
    picker.count_shed(stream)  # type: ignore[arg-type]
    assert picker.passes_shed == 3
    picker.forget("shed-test")  # the stream ended: a new one of the same id starts from zero
    picker.count_shed(stream)  # type: ignore[arg-type]
    assert picker.passes_shed == 6


def offline_window(name: str) -> WindowJob:
    owner = SimpleNamespace(request=SimpleNamespace(request_id=name), options=SimpleNamespace(beam_size=1))
    return WindowJob(owner, torch.zeros(80, 3000), 0, 3000, 0.0, 0)  # type: ignore[arg-type]


def test_live_passes_go_ahead_of_offline_windows_and_offline_encodes_one_window_beside_streams() -> None:
    """Offline work yields to live streams (issue 35): an interim pass queued after offline
    windows is encoded before them, and while streams are open an encoder batch holds one offline
    window, so a final that arrives meanwhile waits for one window's encode, not sixteen."""
    p = planner()
    files = [offline_window(f"file{k}") for k in range(3)]
    for job in files:
        p.submit(job)
    interim = live_job("s")
    p.submit(interim)
    assert list(p.encode_queue) == [interim, *files]
    assert p.take_encode(idle_batch(), live_streams=True) == [interim, files[0]]
    final = live_job("t", final=True)
    p.submit(final)
    assert p.take_encode(idle_batch(), live_streams=True) == [final]
    assert p.take_encode(idle_batch(), live_streams=True) == [files[1]]
    p.submit(files[0])  # a window of the same file again (its next 30 s), then the streams close
    assert p.take_encode(idle_batch(), live_streams=False) == [files[2], files[0]]  # the whole batch


def test_an_offline_window_that_waited_past_its_patience_goes_ahead_of_interims() -> None:
    """Yielding is not starving: admission accepted the file counting on a share of the engine."""
    p = planner()
    window = offline_window("file")
    p.submit(window)
    interims = [live_job(f"s{k}") for k in range(3)]
    for job in interims:
        p.submit(job)
    window.queued_at -= OFFLINE_PATIENCE_S  # it has waited that long behind the live passes
    assert p.take_encode(idle_batch(), live_streams=True) == [window, *interims]


def test_overdue_offline_windows_go_ahead_of_finals_at_most_once_per_patience() -> None:
    """With as many streams as the engine holds a final is pending at almost every step: offline
    work still gets one window every OFFLINE_PATIENCE_S, each delaying a final by one encode."""
    p = planner()
    windows = [offline_window(f"file{k}") for k in range(2)]
    for window in windows:
        p.submit(window)
        window.queued_at -= OFFLINE_PATIENCE_S
    finals = [live_job(f"f{k}", final=True) for k in range(3)]
    p.submit(finals[0])
    assert p.take_encode(idle_batch(), live_streams=True) == [windows[0], finals[0]]
    p.submit(finals[1])
    assert p.take_encode(idle_batch(), live_streams=True) == [finals[1]]  # the floor was just used
    p.offline_floor_at -= OFFLINE_PATIENCE_S  # two seconds later
    p.submit(finals[2])
    assert p.take_encode(idle_batch(), live_streams=True) == [windows[1], finals[2]]


def test_a_pass_taken_after_its_late_share_of_a_period_counts_as_late() -> None:
    p = planner()
    on_time, late, offline = live_job("a", patience_samples=8000), live_job("b", patience_samples=8000), live_job("c")
    for job in (on_time, late, offline):
        p.submit(job)
    # b waited LATE_PASS_SHARE of its 0.5 s pass period (wall time); a was queued just now; c has no period
    late.queued_at -= LATE_PASS_SHARE * 0.5
    on_time.queued_at += 10.0  # queued "later": never late, however loaded the machine running this
    offline.queued_at -= 100.0
    assert p.take_encode(idle_batch()) == [on_time, late, offline]
    assert p.passes_late == 1
    # a pass held back while a final goes first waited by the planner's choice: not late
    held = live_job("d", patience_samples=8000)
    p.submit(held)
    held.queued_at -= LATE_PASS_SHARE * 0.5
    assert p.take_encode(idle_batch(live_job("f", final=True))) == []
    assert p.take_encode(idle_batch()) == [held]
    assert p.passes_late == 1
