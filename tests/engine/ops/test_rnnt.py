"""RNN-T / TDT greedy label loop: the compiled loop against the Python reference on generated
transducers (tokens, frames, log-probs and the next state bit for bit: both call the same ATen
ops on the same shapes), batch 1..64 with ragged and empty rows, chunk by chunk with the state
carried, and bad arguments raising RuntimeError."""

from __future__ import annotations

import pytest
import torch

from engine.ops import TransducerDecodeState, TransducerWeights, rnnt_greedy_label_loop
from engine.ops.rnnt import _op_args

TDT = (0, 1, 2, 3, 4)


def encoder_frames(batch: int, frames: int, seed: int, dim: int = 40) -> torch.Tensor:
    return torch.randn(batch, frames, dim, generator=torch.Generator().manual_seed(seed))


def both(w: TransducerWeights, enc: torch.Tensor, lengths: torch.Tensor, max_symbols: int,
         state: TransducerDecodeState | None = None) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:  # fmt: skip
    state = state or w.initial_state(enc.shape[0])
    f = w.project(enc)
    results = []
    for use in (True, False):
        out, nxt = rnnt_greedy_label_loop(f, lengths, state, w, max_symbols, use_extension=use)
        results.append((out.tokens, out.frames, out.logprobs, out.counts, nxt.h, nxt.c, nxt.pred, nxt.time_jump,
                        nxt.frames_decoded))  # fmt: skip
    return results[0], results[1]


def assert_identical(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    names = ("tokens", "frames", "logprobs", "counts", "h", "c", "pred", "time_jump", "frames_decoded")
    for name, a, b in zip(names, got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    ("batch", "frames", "durations", "blank_bias", "max_symbols", "layers", "activation"),
    [
        (1, 40, (), 10.0, 5, 1, "relu"),
        (9, 30, (), 0.0, 3, 2, "tanh"),  # a joint that wants a label on every step: max_symbols binds
        (64, 12, (), 8.0, 10, 1, "relu"),
        (5, 35, TDT, 10.0, 5, 1, "relu"),
        (32, 20, TDT, 4.0, 2, 2, "sigmoid"),
    ],
)
def test_kernel_equals_reference(ext: None, batch: int, frames: int, durations: tuple[int, ...], blank_bias: float,
                                 max_symbols: int, layers: int, activation: str) -> None:  # fmt: skip
    w = TransducerWeights.random(durations=durations, blank_bias=blank_bias, layers=layers, activation=activation,
                                 seed=batch)  # fmt: skip
    lengths = torch.randint(0, frames + 1, (batch,), generator=torch.Generator().manual_seed(batch))
    lengths[0] = frames
    got, want = both(w, encoder_frames(batch, frames, seed=batch), lengths, max_symbols)
    assert_identical(got, want)
    assert int(got[3].sum()) > 0


def test_max_symbols_bounds_the_labels_of_a_frame(ext: None) -> None:
    w = TransducerWeights.random(blank_bias=0.0, seed=3)
    enc, lengths = encoder_frames(2, 10, seed=3), torch.tensor([10, 4])
    for limit in (1, 2, 4):
        out, _ = rnnt_greedy_label_loop(w.project(enc), lengths, w.initial_state(2), w, limit, use_extension=True)
        for row in range(2):
            _, frames, _ = out.row(row)
            assert max(frames.count(t) for t in set(frames)) <= limit
        assert int(out.counts[0]) == 10 * limit  # this joint always prefers a label


@pytest.mark.parametrize("durations", [(), TDT])
def test_chunk_by_chunk_equals_one_call(ext: None, durations: tuple[int, ...]) -> None:
    w = TransducerWeights.random(durations=durations, seed=5)
    enc = encoder_frames(4, 48, seed=5)
    lengths = torch.tensor([48, 48, 30, 48])
    whole, _ = rnnt_greedy_label_loop(w.project(enc), lengths, w.initial_state(4), w, 5, use_extension=True)
    state, rows = w.initial_state(4), [([], [], []) for _ in range(4)]
    for start, size in ((0, 16), (16, 16), (32, 16)):
        piece = w.project(enc[:, start : start + size])
        out, state = rnnt_greedy_label_loop(piece, (lengths - start).clamp(0, size), state, w, 5, use_extension=True)
        for r in range(4):
            for acc, part in zip(rows[r], out.row(r), strict=True):
                acc.extend(part)
    for r in range(4):
        assert tuple(rows[r]) == whole.row(r)


def test_empty_inputs(ext: None) -> None:
    w = TransducerWeights.random(seed=1)
    for b, t in ((0, 5), (3, 0)):
        got, want = both(w, encoder_frames(b, t, seed=0), torch.zeros(b, dtype=torch.long), 5)
        assert_identical(got, want)
        assert got[0].shape == (b, 0)


def args(**change: object) -> list[object]:
    w = TransducerWeights.random(seed=0)
    enc = encoder_frames(2, 6, seed=0)
    names = ["f", "lengths", "h", "c", "pred", "time_jump", "frames_decoded", "embed", "lstm", "pred_weight",
             "pred_bias", "out_weight", "out_bias", "durations", "activation", "max_symbols"]  # fmt: skip
    values = dict(zip(names, _op_args(w.project(enc), torch.tensor([6, 3]), w.initial_state(2), w, 5), strict=True))
    values.update(change)
    return [values[n] for n in names]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"f": torch.zeros(2, 6)}, r"f must be \(batch, frames, joint_hidden\)"),
        ({"f": torch.zeros(2, 6, 48, dtype=torch.float64)}, "embed must be Double"),
        ({"lengths": torch.tensor([7, 3])}, "lengths holds 7"),
        ({"lengths": torch.tensor([6, 3], dtype=torch.int32)}, "lengths must be Long"),
        ({"h": torch.zeros(2, 2, 32)}, "h has shape"),
        ({"lstm": [torch.zeros(128, 32)] * 3}, "weight_ih, weight_hh, bias_ih, bias_hh per layer"),
        ({"out_weight": torch.zeros(70, 48)}, "out_weight has shape"),
        ({"durations": torch.tensor([0, 1])}, "out_weight has shape"),
        ({"activation": "gelu"}, "activation must be relu, tanh or sigmoid"),
        ({"max_symbols": 0}, "max_symbols must be >= 1"),
        ({"time_jump": torch.tensor([-1, 0])}, "time_jump holds -1"),
    ],
)
def test_bad_arguments_raise_runtime_errors(ext: None, change: dict[str, object], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.oasr.rnnt_greedy_label_loop(*args(**change))


def test_schema_and_fake_implementation(ext: None) -> None:
    torch.library.opcheck(torch.ops.oasr.rnnt_greedy_label_loop.default, tuple(args()),
                          test_utils=("test_schema", "test_faketensor"))  # fmt: skip
