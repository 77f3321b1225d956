"""engine/streaming/chunked.py, the skeleton of the chunked-stream runners, under a minimal family
that counts samples: the step's pick, finishing, failing, release, stats and shutdown. The four
real families (NeMo, Zipformer, WeNet, Paraformer-online) run their parity tests on it too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.config import EngineConfig
from engine.request import Request
from engine.runner import RunnerStats
from engine.streaming.chunked import ChunkedStreamRunner
from engine.types import DecodingOptions, FinishReason, RequestOutput

CHUNK = 4
"""Samples one step consumes per stream."""


@dataclass(eq=False)
class CountJob:
    request: Request
    last_advanced: int = -1
    buffered: int = 0
    consumed: int = 0


class CountingRunner(ChunkedStreamRunner[CountJob]):
    """A family whose 'model' consumes CHUNK samples per step and transcribes the count."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.stepped: list[list[str]] = []
        """The request ids of each step's batch."""
        self.freed: list[str] = []

    def admit(self, requests: list[Request]) -> None:
        for req in requests:
            job = CountJob(req)
            if req.audio is not None:
                job.buffered = len(req.audio)
            self._register(job)

    def _featurize(self, outputs: list[RequestOutput]) -> None:
        for job in self._jobs.values():
            job.buffered += len(job.request.take_pending_audio())

    def _ready(self, job: CountJob) -> bool:
        return job.buffered >= CHUNK or (self._ended(job) and job.buffered > 0)

    def _run_streams(self, batch: list[CountJob]) -> list[RequestOutput]:
        self.stepped.append([j.request.request_id for j in batch])
        outputs = []
        for job in batch:
            take = min(job.buffered, CHUNK)
            job.buffered, job.consumed, job.last_advanced = job.buffered - take, job.consumed + take, self._step
            if self._ended(job) and not job.buffered:
                outputs.append(self._finish(job, "stop"))
            else:
                outputs.append(RequestOutput(request_id=job.request.request_id, text=str(job.consumed)))
        return outputs

    def _final_output(self, job: CountJob, reason: FinishReason) -> RequestOutput:
        if job.request.request_id.startswith("bad"):
            raise ValueError("cannot spell this count")
        return RequestOutput(request_id=job.request.request_id, text=str(job.consumed), finished=True,
                             finish_reason=reason)  # fmt: skip

    def _free(self, job: CountJob) -> None:
        self.freed.append(job.request.request_id)

    def _cache_stats(self) -> RunnerStats:
        return RunnerStats(decode_slots_used=len(self._jobs))

    @staticmethod
    def _ended(job: CountJob) -> bool:
        return not job.request.streaming or job.request.input_finished


def stream(rid: str, samples: int, finished: bool = False) -> Request:
    req = Request(rid, streaming=True, decoding=DecodingOptions(), sample_rate=16000)
    req.append_audio(np.zeros(samples, dtype=np.float32))
    req.input_finished = finished
    return req


def runner(max_batch_size: int) -> CountingRunner:
    return CountingRunner(EngineConfig(max_batch_size=max_batch_size))


def test_each_step_advances_the_least_recently_advanced_streams() -> None:
    r = runner(max_batch_size=2)
    r.admit([stream(rid, 100 * CHUNK) for rid in "abcde"])
    for _ in range(6):
        r.execute()
    # step 5: d (advanced at step 2) first, then a and e (both at step 3) in admission order
    assert r.stepped == [["a", "b"], ["c", "d"], ["e", "a"], ["b", "c"], ["d", "a"], ["e", "b"]]
    assert r.streams_stepped == 2


def test_a_stream_without_a_whole_chunk_waits_until_its_input_ends() -> None:
    r = runner(max_batch_size=4)
    short = stream("short", CHUNK - 1)
    r.admit([short, stream("long", CHUNK)])
    assert [o.request_id for o in r.execute()] == ["long"]
    short.input_finished = True
    (out,) = r.execute()
    assert (out.request_id, out.finished, out.text) == ("short", True, str(CHUNK - 1))


def test_a_finished_stream_is_released_once() -> None:
    r = runner(max_batch_size=4)
    req = stream("a", CHUNK, finished=True)
    r.admit([req])
    (out,) = r.execute()
    assert out.finished and out.finish_reason == "stop"
    assert req.runner_state is None and r.freed == ["a"] and r.stats().streams == 0
    r.release(req)  # an abort after the finish: nothing left to free
    assert r.freed == ["a"]


def test_a_final_output_that_fails_fails_the_request_and_releases_it() -> None:
    r = runner(max_batch_size=4)
    req = stream("bad", CHUNK, finished=True)
    r.admit([req])
    (out,) = r.execute()
    assert out.finish_reason == "error" and out.error_stage == "postprocess"
    assert out.error == "ValueError: cannot spell this count"
    assert r.freed == ["bad"] and req.runner_state is None


def test_stats_count_live_streams_and_streams_stepped_counts_live_rows() -> None:
    r = runner(max_batch_size=4)
    offline = Request("file", streaming=False, decoding=DecodingOptions(), sample_rate=16000,
                      audio=np.zeros(3 * CHUNK, dtype=np.float32))  # fmt: skip
    r.admit([offline, stream("live", 3 * CHUNK)])
    assert r.stats() == RunnerStats(streams=1, decode_slots_used=2)
    r.execute()
    assert r.stepped == [["file", "live"]] and r.streams_stepped == 1


def test_shutdown_releases_every_job() -> None:
    r = runner(max_batch_size=4)
    reqs = [stream(rid, CHUNK) for rid in "xyz"]
    r.admit(reqs)
    r.shutdown()
    assert sorted(r.freed) == ["x", "y", "z"] and all(q.runner_state is None for q in reqs)
    assert r.stats().streams == 0 and r.execute() == []
