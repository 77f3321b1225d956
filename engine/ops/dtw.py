"""Monotonic dynamic-time-warping path through a (text, time) cost matrix: the alignment step of
Whisper's word timestamps (engine/models/whisper/alignment.py), run on every live pass.
`torch.ops.oasr.dtw_path` (engine/csrc/dtw.cpp) fills the matrix cell by cell in C++; the numpy
reference below sweeps one anti-diagonal per step (~n + m numpy calls, measured ~4 % of a live
pass's CPU). Both add in float64 in the same order and take the first of (diagonal, up, left)
on ties, so their paths are identical (tests/engine/ops/test_dtw.py).

    text_idx, time_idx = dtw_path(cost)   # cost (n, m) -> the path's cells, start to end
"""

from __future__ import annotations

import numpy as np
import torch

from engine.ops.extension import kernel_for
from engine.ops.extension import use_extension as resolve_use_extension

__all__ = ["dtw_path", "dtw_path_reference"]


def dtw_path_reference(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The path as (text indices, time indices), computed one anti-diagonal at a time so each
    step is a vector operation."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    trace = np.zeros((n + 1, m + 1), dtype=np.int8)
    for d in range(2, n + m + 1):
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        options = np.stack([acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]])  # diag, up, left
        choice = options.argmin(axis=0)
        acc[i, j] = cost[i - 1, j - 1] + options[choice, np.arange(len(i))]
        trace[i, j] = choice
    i, j = n, m
    text_idx, time_idx = [], []
    while i > 0 and j > 0:
        text_idx.append(i - 1)
        time_idx.append(j - 1)
        c = trace[i, j]
        if c == 0:
            i, j = i - 1, j - 1
        elif c == 1:
            i -= 1
        else:
            j -= 1
    return np.array(text_idx[::-1], dtype=np.int64), np.array(time_idx[::-1], dtype=np.int64)


def dtw_path(cost: np.ndarray, *, use_extension: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cost (n, m), finite -> the path's (text indices, time indices), both int64, start to end."""
    if resolve_use_extension(kernel_for(torch.device("cpu")) if use_extension is None else use_extension):
        text_idx, time_idx = torch.ops.oasr.dtw_path(torch.from_numpy(np.ascontiguousarray(cost, dtype=np.float64)))
        return text_idx.numpy(), time_idx.numpy()
    return dtw_path_reference(cost)
