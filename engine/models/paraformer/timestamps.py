"""Token times from the CIF, as FunASR's Paraformer reports them (`ts_prediction_lfr6_standard`).

A token spans from its fire to the next one, in encoder frames (60 ms), shifted 1.5 frames
earlier; a span longer than 12 frames is cut at 12 (the rest is silence); the last token ends at
the utterance end, or halfway there when more than 5 frames of silence follow. FunASR's
Paraformer passes the predictor's outputs to that function in swapped order: fire positions
are looked for where the frame *weights* reach 1 - 1e-4, and when that does not give one more
fire than tokens (the usual case), the running-sum marks are rescaled to sum to tokens + 1 and
re-integrated with a float32 running sum. Reproduced as it is, since it is what FunASR serves.
"""

from __future__ import annotations

import torch

FIRE = 1.0 - 1e-4
"""A peak at or above this is a fire."""
SHIFT_FRAMES = -1.5
"""Fires are moved this many encoder frames earlier."""
EDGE_FRAMES = 5
"""Leading / trailing silence longer than this (frames) is kept out of the first / last token."""
MAX_TOKEN_FRAMES = 12
"""Longest token span (frames); the rest of a longer gap is silence."""


def _integrate(weights: torch.Tensor, threshold: float) -> torch.Tensor:
    """FunASR's sequential integrate-and-fire over one row (float32, reset by subtracting)."""
    out = torch.empty_like(weights)
    acc = torch.zeros((), dtype=weights.dtype)
    thr = torch.tensor(threshold, dtype=weights.dtype)
    for t in range(weights.shape[0]):
        acc = acc + weights[t]
        out[t] = acc
        if acc >= thr:
            acc = acc - thr
    return out


def token_spans(alphas: torch.Tensor, fires: torch.Tensor, num_tokens: int,
                frame_seconds: float) -> list[tuple[int, int]]:  # fmt: skip
    """(start_ms, end_ms) of each token (fewer when the fires run out), FunASR's arithmetic."""
    if num_tokens == 0:
        return []
    rate = frame_seconds  # FunASR: 10 ms * lfr 6 / 1000 / upsample 1
    marks, weights = alphas, fires.clone()  # the swap described above
    place = torch.where(marks >= FIRE)[0].numpy() + SHIFT_FRAMES
    if len(place) != num_tokens + 1:
        weights /= weights.sum() / (num_tokens + 1)
        marks = _integrate(weights, FIRE)
        place = torch.where(marks >= FIRE)[0].numpy() + SHIFT_FRAMES
    num_frames = marks.shape[0]
    spans: list[list[float]] = []
    labels: list[bool] = []  # True: a token, False: silence
    if len(place) == 0:
        return []
    if place[0] > EDGE_FRAMES:
        spans.append([0.0, place[0] * rate])
        labels.append(False)
    for i in range(min(len(place) - 1, num_tokens)):
        labels.append(True)
        if place[i + 1] - place[i] <= MAX_TOKEN_FRAMES:
            spans.append([place[i] * rate, place[i + 1] * rate])
        else:
            cut = place[i] + MAX_TOKEN_FRAMES
            spans.append([place[i] * rate, cut * rate])
            spans.append([cut * rate, place[i + 1] * rate])
            labels.append(False)
    if num_frames - place[-1] > EDGE_FRAMES:
        end = (num_frames + place[-1]) * 0.5
        spans[-1][1] = end * rate
        spans.append([end * rate, num_frames * rate])
        labels.append(False)
    elif spans:
        spans[-1][1] = num_frames * rate
    return [(int(float(a) * 1000), int(float(b) * 1000)) for (a, b), tok in zip(spans, labels, strict=True) if tok]

