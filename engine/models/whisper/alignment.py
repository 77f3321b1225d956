"""Word timestamps: dynamic time warping over the cross-attention of the checkpoint's
alignment heads (the method of openai/whisper's `timing.py`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from engine.models.whisper.features import SECONDS_PER_TOKEN
from engine.models.whisper.model import TextDecoder
from engine.models.whisper.tokenizer import WhisperTokenizer
from engine.ops.dtw import dtw_path
from engine.types import Word

MEDIAN_FILTER_WIDTH = 7  # encoder positions: smooths attention jitter before DTW


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over the last axis with reflect padding; `width` odd, so the median is the middle
    element (a partition finds it; np.median, which also averages, is a third slower)."""
    if width % 2 != 1:
        raise ValueError(f"median filter width must be odd, got {width}")
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.partition(windows, pad, axis=-1)[..., pad]


def align_words(
    decoder: TextDecoder,
    tokenizer: WhisperTokenizer,
    heads: Sequence[tuple[int, int]],
    sot_sequence: list[int],
    text_tokens: list[int],
    audio_features: Tensor,
    num_frames: int,
    time_offset: float,
    audio_positions: int | None = None,
    silence: tuple[list[Tensor], list[Tensor]] | None = None,
    confidence: bool = True,
    cross: tuple[list[Tensor], list[Tensor]] | None = None,
) -> list[Word]:
    """Words of `text_tokens` with start/end (seconds, offset by `time_offset`) and confidence.
    `audio_features` (S, C) is the window's encoder output; `num_frames` its real mel frames;
    `audio_positions` and `silence` describe a 'fit' window (see TextDecoder.new_cache). Without
    `confidence`, every word's confidence is 0 and the vocabulary projection is skipped. `cross`:
    the window's decoder cross K/V from its prefill (TextDecoder.new_cache), not projected again."""
    if not text_tokens:
        return []
    seq = [*sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot]
    if tokenizer.no_timestamps in sot_sequence:
        seq = [*sot_sequence, *text_tokens, tokenizer.eot]
    n_audio = max(1, min(num_frames // 2, audio_features.shape[0]))
    tokens = torch.tensor([seq], device=audio_features.device)
    with torch.inference_mode():
        weights, logits = decoder.alignment_pass(tokens, audio_features[None], heads, n_audio, audio_positions, silence,
                                                 with_logits=confidence, cross=cross)
    start = len(seq) - len(text_tokens) - 1
    token_probs = np.zeros(len(text_tokens))
    if logits is not None:
        probs = torch.softmax(logits[start - 1 : start - 1 + len(text_tokens), : tokenizer.eot], dim=-1)
        token_probs = probs[torch.arange(len(text_tokens)), torch.tensor(text_tokens)].cpu().numpy()

    w = weights.cpu().numpy()  # (heads, T, n_audio)
    std = w.std(axis=-2, keepdims=True)
    w = (w - w.mean(axis=-2, keepdims=True)) / np.maximum(std, 1e-8)
    w = median_filter(w, MEDIAN_FILTER_WIDTH)
    matrix = w.mean(axis=0)[start - 1 : -1]  # rows: the text tokens and end-of-text
    text_idx, time_idx = dtw_path(-matrix)

    words, word_tokens = tokenizer.split_to_word_tokens(text_tokens)
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] * SECONDS_PER_TOKEN
    out: list[Word] = []
    for k, word in enumerate(words):
        b0, b1 = int(boundaries[k]), int(boundaries[k + 1])
        start_t = float(jump_times[min(b0, len(jump_times) - 1)])
        end_t = float(jump_times[min(b1, len(jump_times) - 1)])
        conf = float(np.mean(token_probs[b0:b1])) if b1 > b0 else 0.0
        out.append(Word(word=word, start=round(time_offset + start_t, 3),
                        end=round(time_offset + max(end_t, start_t), 3), confidence=round(conf, 4)))
    return _constrain_durations(out)


def _constrain_durations(words: list[Word]) -> list[Word]:
    """Cap implausibly long words (attention often smears the first/last word into silence) at
    twice the median word duration, as the reference implementation does."""
    durations = [w.end - w.start for w in words if w.end > w.start]
    if not durations:
        return words
    max_dur = min(0.7, float(np.median(durations))) * 2
    if max_dur <= 0:
        return words
    for i, w in enumerate(words):
        if w.end - w.start > max_dur:
            if i == 0 or words[i - 1].word.rstrip().endswith((".", "!", "?", ",")):
                w.start = max(w.start, w.end - max_dur)  # speech resumes late after a pause
            else:
                w.end = w.start + max_dur
    return words
