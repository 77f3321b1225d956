"""The compiled DTW path equals its numpy reference cell for cell, ties included, and refuses
bad input; the path is monotonic and runs corner to corner."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.ops.dtw import dtw_path, dtw_path_reference

pytestmark = pytest.mark.usefixtures("ext")


@pytest.mark.parametrize("shape", [(0, 4), (1, 1), (1, 6), (6, 1), (3, 3), (23, 211), (64, 750)])
def test_the_kernel_path_equals_the_reference(shape: tuple[int, int]) -> None:
    cost = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    text_idx, time_idx = dtw_path(cost, use_extension=True)
    ref_text, ref_time = dtw_path_reference(cost)
    assert np.array_equal(text_idx, ref_text) and np.array_equal(time_idx, ref_time)
    if not shape[0]:
        assert text_idx.size == 0  # no text: no path
        return
    assert (text_idx[0], time_idx[0]) == (0, 0) and (text_idx[-1], time_idx[-1]) == (shape[0] - 1, shape[1] - 1)
    steps = np.stack([np.diff(text_idx), np.diff(time_idx)])
    assert ((steps >= 0) & (steps <= 1)).all() and (steps.sum(axis=0) >= 1).all()


def test_ties_take_the_diagonal_then_up_like_the_reference() -> None:
    for cost in (np.zeros((5, 9), dtype=np.float32), np.random.default_rng(3).integers(0, 2, (17, 40)).astype(np.float32)):
        text_idx, time_idx = dtw_path(cost, use_extension=True)
        ref_text, ref_time = dtw_path_reference(cost)
        assert np.array_equal(text_idx, ref_text) and np.array_equal(time_idx, ref_time)


def test_a_cheap_diagonal_is_followed() -> None:
    cost = np.ones((4, 8), dtype=np.float32)
    cost[[0, 1, 2, 3], [0, 2, 4, 7]] = -5.0  # each text row is cheapest at its own time
    text_idx, time_idx = dtw_path(cost, use_extension=True)
    for row, col in zip([0, 1, 2, 3], [0, 2, 4, 7]):
        assert col in time_idx[text_idx == row]


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="dtw_path: cost must be Double"):
        torch.ops.oasr.dtw_path(torch.zeros(2, 3))
    with pytest.raises(RuntimeError, match="dtw_path: cost must have 2 dimensions"):
        torch.ops.oasr.dtw_path(torch.zeros(3, dtype=torch.float64))


def test_schema_and_fake_implementation() -> None:
    cost = torch.from_numpy(np.random.default_rng(0).standard_normal((5, 12)))
    torch.library.opcheck(torch.ops.oasr.dtw_path.default, (cost,), test_utils=("test_schema", "test_faketensor"))
