"""Must-show 1: chunk-by-chunk streaming through the paged KV cache reproduces the
full-utterance forward under the same chunk attention mask (fp32, max abs diff <= 1e-4)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from engine.models.wenet.runner import AUDIO_SCALE, WenetRunner
from engine.models.wenet.testing import drive_alone, record_log_probs
from tests.conftest import load_clip


def streamed_log_probs(runner: WenetRunner, audio, piece: int | None) -> torch.Tensor:
    """Run one stream and collect the log-probs its CTC decoder consumed, chunk by chunk."""
    seen = record_log_probs(runner)
    outs = drive_alone(runner, audio, piece)
    assert outs[-1].finish_reason == "stop"
    return torch.cat(seen["alone"])


@pytest.mark.parametrize("chunk_size", [4, 8, 16])
@pytest.mark.parametrize("num_left_chunks", [-1, 2])
@pytest.mark.parametrize("block_size", [None, 5])
def test_streaming_equals_masked_full_forward(
    make_runner: Callable[..., WenetRunner], chunk_size: int, num_left_chunks: int, block_size: int | None
) -> None:
    audio = load_clip("libri_61-70968-0000")  # 4.9 s: 122 encoder frames, many chunks
    runner = make_runner(chunk_size=chunk_size, num_left_chunks=num_left_chunks, block_size_frames=block_size)
    streamed = streamed_log_probs(runner, audio, piece=1600)

    feats = runner.fbank([torch.tensor(audio) * AUDIO_SCALE])[0]
    full, lens = runner.model.forward_full(
        feats[None], torch.tensor([len(feats)]), chunk_size, num_left_chunks
    )
    assert streamed.shape == full[0].shape == (int(lens[0]), runner.ckpt.config.vocab_size)
    assert (streamed - full[0]).abs().max().item() <= 1e-4
    # the pool is back to empty once the stream finished
    assert runner.pool.num_free == runner.pool.num_blocks


def test_left_chunks_bound_the_blocks_a_stream_holds(make_runner: Callable[..., WenetRunner]) -> None:
    audio = load_clip("libri_61-70968-0000")
    runner = make_runner(chunk_size=4, num_left_chunks=2)
    held = []
    execute = runner.execute

    def execute_and_measure():
        out = execute()
        held.append(runner.pool.num_blocks - runner.pool.num_free)
        return out

    runner.execute = execute_and_measure
    drive_alone(runner, audio, 1600)
    assert max(held) <= 4  # 2 left chunks + the chunk being written, one block each (+1 while sliding)
