"""Must-show 2 and 3: streams batched at different offsets decode exactly as alone, and the
size of the client's audio pieces does not change the result."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
import torch

from engine.models.wenet.runner import WenetRunner
from engine.models.wenet.testing import drive_alone, record_log_probs
from engine.request import Request
from engine.types import DecodingOptions, RequestOutput
from tests.conftest import load_clip

CLIPS = ["libri_61-70968-0000", "mfa_thoughts", "ps_cards_005", "mfa_her", "mfa_words", "ps_goforward"]
PIECE = 1600  # 100 ms per engine step


def stream_audio(i: int) -> np.ndarray:
    """Stream i: 0.8 .. 2.2 s from one of several real clips, at a clip-dependent offset."""
    clip = load_clip(CLIPS[i % len(CLIPS)])
    start = (i * 2311) % max(1, len(clip) - 36000)
    return clip[start : start + 12800 + (i * 977) % 22400]


@pytest.mark.parametrize(("num_streams", "beam_size"), [(1, 1), (3, 1), (8, 1), (32, 1), (1, 4), (8, 4)])
def test_batched_streams_equal_each_stream_alone(
    make_runner: Callable[..., WenetRunner], num_streams: int, beam_size: int
) -> None:
    options = DecodingOptions(beam_size=beam_size, n_best=beam_size)
    runner = make_runner(chunk_size=4, max_batch_size=32)
    seen = record_log_probs(runner)
    offsets_in_batches: list[set[int]] = []
    forward = runner.model.forward_chunk_paged

    def forward_and_note(feats, batch, *args):  # which offsets shared a forward
        offsets_in_batches.append({int(n) for n in batch.key_mask[:, 0].sum(-1).tolist()})
        return forward(feats, batch, *args)

    runner.model.forward_chunk_paged = forward_and_note
    audios = [stream_audio(i) for i in range(num_streams)]
    requests = [Request(f"s{i}", True, options, 16000) for i in range(num_streams)]
    finals: dict[str, RequestOutput] = {}
    step = 0
    while len(finals) < num_streams:
        if step < num_streams:  # stream `step` starts now: every stream has its own offset
            assert runner.admit([requests[step]]) == []
        for i, req in enumerate(requests[: step + 1]):
            fed = (step - i) * PIECE
            if fed < len(audios[i]):
                req.append_audio(audios[i][fed : fed + PIECE])
            else:
                req.input_finished = True
        for out in runner.execute():
            if out.finished:
                finals[out.request_id] = out
        step += 1
    if num_streams > 1:
        assert max(len(o) for o in offsets_in_batches) > 1  # rows at different offsets shared a forward

    alone_runner = make_runner(chunk_size=4)
    alone_seen = record_log_probs(alone_runner)
    for i, req in enumerate(requests):
        alone = drive_alone(alone_runner, audios[i], None, request_id=f"alone{i}", decoding=options)[-1]
        got = finals[req.request_id]
        assert got.finish_reason == alone.finish_reason == "stop"
        assert got.tokens == alone.tokens
        assert [a.text for a in got.nbest] == [a.text for a in alone.nbest]
        batched_lp, alone_lp = torch.cat(seen[req.request_id]), torch.cat(alone_seen[f"alone{i}"])
        assert batched_lp.shape == alone_lp.shape
        assert (batched_lp - alone_lp).abs().max().item() <= 1e-4
    assert runner.pool.num_free == runner.pool.num_blocks


@pytest.mark.parametrize("beam_size", [1, 4])
def test_client_chunking_does_not_matter(make_runner: Callable[..., WenetRunner], beam_size: int) -> None:
    audio = load_clip("libri_61-70968-0000")
    options = DecodingOptions(beam_size=beam_size)
    results = {}
    for piece_ms in (10, 100, 640, None):
        runner = make_runner(chunk_size=8)
        outs = drive_alone(runner, audio, piece_ms and piece_ms * 16, decoding=options)
        results[piece_ms] = outs[-1]
        assert [o.finished for o in outs].count(True) == 1
        partial_texts = [o.committed for o in outs]
        assert all(b.startswith(a) for a, b in itertools.pairwise(partial_texts))  # committed only grows
    tokens = {k: tuple(v.tokens) for k, v in results.items()}
    assert len(set(tokens.values())) == 1, tokens
    assert len(tokens[None]) > 5

    # An offline request (all audio at admission) takes the same chunked path.
    runner = make_runner(chunk_size=8)
    req = Request("offline", False, options, 16000, audio=audio)
    runner.admit([req])
    outs: list[RequestOutput] = []
    while runner.has_work():
        outs += runner.execute()
    assert outs[-1].finished and tuple(outs[-1].tokens) == tokens[None]


def test_offline_audio_is_featurized_piecewise_with_the_same_result(
    make_runner: Callable[..., WenetRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.models.wenet.runner as runner_module

    audio = load_clip("mfa_thoughts")
    whole = drive_alone(make_runner(chunk_size=8), audio, None)[-1]
    monkeypatch.setattr(runner_module, "OFFLINE_PIECE_SAMPLES", 4321)  # many uneven pieces
    runner = make_runner(chunk_size=8)
    runner.admit([Request("offline", False, DecodingOptions(), 16000, audio=audio)])
    outs: list[RequestOutput] = []
    while runner.has_work():
        outs += runner.execute()
    assert [o.finished for o in outs].count(True) == 1
    assert outs[-1].tokens == whole.tokens and len(whole.tokens) > 3


def test_streams_stepped_counts_the_live_streams_of_each_forward(make_runner: Callable[..., WenetRunner]) -> None:
    """What `oasr_engine_batch_size{mode="streaming"}` observes: the live streams one chunk forward advanced."""
    runner = make_runner(chunk_size=4, max_batch_size=32)
    rows: list[int] = []
    forward = runner.model.forward_chunk_paged

    def forward_and_note(feats, *args):
        rows.append(int(feats.shape[0]))
        return forward(feats, *args)

    runner.model.forward_chunk_paged = forward_and_note
    live = [Request(f"s{i}", True, DecodingOptions(), 16000) for i in range(3)]
    offline = Request("file", False, DecodingOptions(), 16000, audio=stream_audio(3))
    assert runner.admit([*live, offline]) == []
    for i, req in enumerate(live):
        req.append_audio(stream_audio(i))
        req.input_finished = True
    stepped = []
    while runner.has_work():
        before = len(rows)
        runner.execute()
        stepped.append((rows[-1] if len(rows) > before else 0, runner.streams_stepped))
    # all four share the first forward; the offline request is no live stream
    assert stepped[0] == (4, 3)
    assert all(n <= forwarded for forwarded, n in stepped)  # a step without a forward advanced none
