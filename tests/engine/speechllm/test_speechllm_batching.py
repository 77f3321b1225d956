"""Continuous batching over the paged KV pool: requests that join a running batch between decode
steps decode exactly as alone, greedy requests report a partial per token, beams share their
prompt's blocks, and an exhausted pool ends requests cleanly with every block returned."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from engine import ASREngine, DecodingOptions, EngineConfig
from engine.models.speechllm.runner import SpeechLLMRunner
from engine.types import RequestOutput
from tests.conftest import load_clip
from tests.engine.speechllm.engines import FIXTURE, fixture_engine, runner_of

CLIPS = ("mfa_her", "mfa_thoughts", "mfa_um", "libri_61-70968-0000")
MAX_NEW = 16


@pytest.fixture(scope="module")
def engine() -> Iterator[ASREngine]:
    eng = fixture_engine(MAX_NEW)
    yield eng
    eng.shutdown()


_runner = runner_of


def _assert_idle(engine: ASREngine) -> None:
    stats = engine.runner.stats()
    assert stats.kv_blocks_used == 0 and stats.decode_slots_used == 0, stats
    assert all(r == 0 for r in _runner(engine).blocks.refs)


def _alone(engine: ASREngine, clip: str, options: DecodingOptions) -> RequestOutput:
    (out,) = engine.transcribe_outputs(load_clip(clip), decoding=options)
    return out


def test_requests_joining_between_steps_decode_as_alone(engine: ASREngine) -> None:
    options = [DecodingOptions(), DecodingOptions(beam_size=3, n_best=2), DecodingOptions(prompt="aligner"),
               DecodingOptions(beam_size=2, logprobs=True)]
    alone = [_alone(engine, c, o) for c, o in zip(CLIPS, options)]
    finished: dict[str, RequestOutput] = {}
    ids = []
    rows_seen = []
    for clip, opts in zip(CLIPS, options):  # one more request joins after every step
        ids.append(engine.add_request(load_clip(clip), decoding=opts))
        finished.update({o.request_id: o for o in engine.step() if o.finished})
        rows_seen.append(_runner(engine).decode_rows_last)
    finished.update({o.request_id: o for o in engine.run() if o.finished})
    together = [finished[i] for i in ids]
    assert max(rows_seen) > 3, "requests of different ages never decoded in one forward"
    assert [o.tokens for o in together] == [o.tokens for o in alone]
    assert [o.nbest_texts for o in together] == [o.nbest_texts for o in alone]
    assert together[3].token_logprobs == alone[3].token_logprobs
    _assert_idle(engine)


def test_greedy_reports_a_partial_per_token(engine: ASREngine) -> None:
    rid = engine.add_request(load_clip("libri_61-70968-0000"), decoding=DecodingOptions(logprobs=True))
    outputs = [o for o in engine.run() if o.request_id == rid]
    *partials, final = outputs
    assert final.finished and not any(p.finished for p in partials)
    assert [len(p.tokens) for p in partials] == list(range(1, len(partials) + 1))
    assert all(final.tokens[: len(p.tokens)] == p.tokens for p in partials)
    assert all(final.text.startswith(p.text) for p in partials)
    assert all(p.token_logprobs == final.token_logprobs[: len(p.tokens)] for p in partials)  # type: ignore[index]
    _assert_idle(engine)


def test_beams_share_the_prompt_blocks(engine: ASREngine) -> None:
    runner = _runner(engine)
    beams = 4
    rid = engine.add_request(load_clip("mfa_um"), decoding=DecodingOptions(beam_size=beams))
    engine.step()  # prefill and the first beam step
    state = runner._running[rid]
    prompt_blocks = math.ceil(state.length / runner.pool.block_size)
    used = runner.stats().kv_blocks_used
    assert prompt_blocks <= used <= prompt_blocks + beams, (used, prompt_blocks)  # not beams x the prompt
    engine.run()
    _assert_idle(engine)


def _take_every_free_block(runner: SpeechLLMRunner) -> list[int]:
    taken = []
    while (block := runner.pool.allocate()) is not None:
        taken.append(block)
    return taken


def test_a_request_waits_for_prompt_blocks_and_one_without_a_next_block_ends_with_length() -> None:
    """Blocks held elsewhere (here: taken by the test) hold a new request back until they come
    back; a running request whose next position finds no block ends 'length' with its tokens."""
    eng = ASREngine(EngineConfig(ckpt_dir=str(FIXTURE), service_mode="offline", block_size_frames=1,
                                 max_num_blocks=2000, family_options={"speechllm": {"max_new_tokens": 8}}))
    try:
        runner = _runner(eng)
        taken = _take_every_free_block(runner)
        rid = eng.add_request(load_clip("mfa_her"))
        assert all(o.request_id != rid for o in eng.step() + eng.step())
        assert eng.num_waiting == 1 and runner.free_slots() == 0  # the engine holds it back
        runner.pool.free(taken)
        eng.step()
        assert eng.num_running == 1
        # admitted, then the blocks go before its prompt ran: it waits inside the runner
        request = runner._running[rid].request
        runner.release(request)
        assert runner.admit([request]) == []
        taken = _take_every_free_block(runner)
        assert runner.execute() == [] and not runner._running[rid].prefilled
        runner.pool.free(taken)
        partial = [o for o in runner.execute() if o.request_id == rid]  # prefill + first token
        assert len(partial) == 1 and not partial[0].finished
        taken = _take_every_free_block(runner)  # block size 1: the next position needs a new block
        (final,) = [o for o in runner.execute() if o.request_id == rid]
        assert final.finished and final.finish_reason == "length" and final.tokens == partial[0].tokens
        assert runner.stats().kv_exhausted_total == 1
        runner.pool.free(taken)
        assert runner.stats().kv_blocks_used == 0 and all(r == 0 for r in runner.blocks.refs)
    finally:
        eng.shutdown()
