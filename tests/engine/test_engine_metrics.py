"""Engine-side metrics (engine/metrics.py): what a step records, the cap, and stage timing."""

from __future__ import annotations

import numpy as np
import pytest

from engine import ASREngine, EngineConfig
from engine.metrics import STAGES, EngineMetrics, shared_stage_timer, stage_timer
from engine.models.fake import write_checkpoint


def test_a_drain_hands_over_totals_and_forgets_samples() -> None:
    m = EngineMetrics(max_samples=2)
    m.count_outputs(3)
    m.count_finished(tokens=7, search_overflow=True)
    m.observe_batch("offline", 2, [0.1, 0.2, 0.3])
    m.observe_padding(padded_length=10.0, useful_length=7.5)
    first = m.drain()
    assert (first.outputs_total, first.tokens_generated_total, first.search_overflow_total) == (3, 7, 1)
    assert first.batch_size == {"offline": [2]} and first.queue_wait_seconds == {"offline": [0.1, 0.2]}
    assert first.batch_padding_ratio == [0.25] and first.samples_dropped_total == 1  # the third wait
    second = m.drain()
    assert second.outputs_total == 3 and second.batch_size == {} and second.samples_dropped_total == 1


def test_stage_timer_records_only_into_the_active_collector() -> None:
    m = EngineMetrics()
    with stage_timer("offline.encode"):  # no step running: nothing to record into
        pass
    with m.active(), stage_timer("offline.encode"):
        pass
    assert list(m.drain().stage_seconds) == ["offline.encode"]
    assert "offline.encode" in STAGES


def test_a_shared_stage_splits_its_time_between_live_and_offline_work() -> None:
    m = EngineMetrics()
    with m.active(), shared_stage_timer("decode", 0.25):
        sum(range(20000))
    stages = m.drain().stage_seconds
    live, offline = stages["streaming.decode"][0], stages["offline.decode"][0]
    assert live > 0 and offline == pytest.approx(3 * live)
    with m.active(), shared_stage_timer("encode", 1.0):
        pass
    assert list(m.drain().stage_seconds) == ["streaming.encode"]  # all live: no empty offline sample


def test_a_step_counts_outputs_tokens_audio_and_batches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = ASREngine(EngineConfig(ckpt_dir=write_checkpoint(str(tmp_path))))
    try:
        second = np.full(16000, 0.1, dtype=np.float32)
        outs = engine.transcribe_outputs([second, np.concatenate([second, second])])
        stream = engine.add_streaming_request()
        engine.feed_chunk(stream, second, is_last=True)
        engine.run()
        snap = engine.metrics.drain()
        assert snap.tokens_generated_total == sum(len(o.tokens) for o in outs) + 10 == 40
        assert snap.audio_seconds_total == 4.0
        assert snap.batch_size["offline"] == [2] and snap.batch_size["streaming"] == [1]
        assert snap.batch_padding_ratio == [0.25]  # 1 s and 2 s padded to 2 x 2 s
        assert snap.outputs_total >= 3 and "streaming.allocate" in snap.stage_seconds
    finally:
        engine.shutdown()


def test_whisper_times_its_offline_and_streaming_stages(engine, clips) -> None:  # type: ignore[no-untyped-def]
    """A Whisper request through the engine leaves samples of every stage it ran: an offline
    request its collate/encode/prefill/decode/advance, a live stream its pass stages."""
    audio = next(c for c in clips if c.id == "jfk_inaugural").audio[:48000]  # 3 s: one window, few tokens
    engine.metrics.drain()
    out = engine.transcribe_outputs(audio)[0]
    offline = engine.metrics.drain().stage_seconds
    assert out.finish_reason == "stop" and out.text
    assert {f"offline.{s}" for s in ("collate", "encode", "prefill", "decode", "advance")} <= set(offline)
    assert not any(stage.startswith("streaming.") for stage in offline)

    stream = engine.add_streaming_request()
    for start in range(0, audio.size, 8000):
        engine.feed_chunk(stream, audio[start : start + 8000], is_last=start + 8000 >= audio.size)
        while engine.has_work():
            engine.step()
    live = engine.metrics.drain().stage_seconds
    wanted = {"allocate", "schedule", "features", "encode", "decode", "finalize"}
    assert {f"streaming.{s}" for s in wanted} <= set(live)
    assert set(live) <= set(STAGES) and all(t >= 0 for times in live.values() for t in times)

    # Together: a decoder batch holding both a window and live passes counts for both (app/backlog.py
    # measures the engine time live streams take from the streaming.* stages).
    file = engine.add_request(audio)
    stream = engine.add_streaming_request()
    for start in range(0, audio.size, 8000):
        engine.feed_chunk(stream, audio[start : start + 8000], is_last=start + 8000 >= audio.size)
        engine.step()
    while engine.has_work():
        engine.step()
    both = engine.metrics.drain().stage_seconds
    assert sum(both["streaming.decode"]) > 0 and sum(both["offline.decode"]) > 0, (file, both.keys())
