"""The encode and join stages of a Whisper step: the windows the planner takes are encoded in one
batch (here, on the engine thread, or collected from the encoder thread), their language detected
where the request names none, and then prefilled into the running decoder batch.

A batch that fails is run again one window at a time, so that only a window that fails alone
fails its request (through `fail`, the runner's); the other windows go on. The functions hold no
state: the runner passes each the parts, the planner and the decoder batch it works on.

    collect_encoded(thread, ...)   -> the encoder thread's batch, once done, waits to join
    encode(jobs, ...)              -> `jobs` encoded here wait to join
    join(jobs, ...)                -> `jobs` prefilled into the decoder batch
    live_share(jobs, weight)       -> the live passes' share of a stage's work (its metrics)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torch import Tensor

from engine.metrics import stage_timer
from engine.models.whisper.batch import DecodeBatch
from engine.models.whisper.decoding import DecodeGroup
from engine.models.whisper.encoder_thread import EncoderThread
from engine.models.whisper.parts import WhisperParts
from engine.models.whisper.planning import WindowPlanner
from engine.models.whisper.window import FailRequest, WindowJob

logger = logging.getLogger(__name__)


def collect_encoded(thread: EncoderThread | None, parts: WhisperParts, planner: WindowPlanner,
                    batch: DecodeBatch, fail: FailRequest) -> None:
    """Take the encoder thread's batch once it is done, or wait for it when the decoder has
    nothing to step meanwhile. Windows dropped while it ran (a superseded pass, a released
    request) are discarded; a failed batch is encoded again here, one window at a time."""
    if thread is None or not thread.busy:
        return
    if not thread.done() and (batch.groups or planner.prefill_queue):
        return
    with stage_timer("streaming.encode"):  # the wait, not the encoder's time (the thread takes live passes only)
        jobs, feats, exc = thread.collect()
    wanted = planner.still_encoding(jobs)
    if exc is not None:
        logger.warning("encoder batch of %d failed (%s); retrying one by one", len(jobs), exc)
        _encode_one_by_one([j for j, keep in zip(jobs, wanted) if keep], parts, planner, fail)
        return
    assert feats is not None
    _encoded([j for j, keep in zip(jobs, wanted) if keep], [f for f, keep in zip(feats, wanted) if keep],
             parts, planner)


def encode(jobs: list[WindowJob], parts: WhisperParts, planner: WindowPlanner, fail: FailRequest) -> None:
    """Encode `jobs` in one batch (one by one if the batch fails: only the culprit fails)."""
    try:
        feats: list[Tensor | None] = list(parts.context.encode([j.mel for j in jobs]))
    except Exception as exc:
        logger.warning("encoder batch of %d failed (%s); retrying one by one", len(jobs), exc)
        _encode_one_by_one(jobs, parts, planner, fail)
        return
    _encoded(jobs, feats, parts, planner)


def _encode_one_by_one(jobs: list[WindowJob], parts: WhisperParts, planner: WindowPlanner, fail: FailRequest) -> None:
    """Encode `jobs` one at a time after their batch failed: a window that fails again fails its request."""
    feats: list[Tensor | None] = []
    for j in jobs:
        try:
            feats.append(parts.context.encode([j.mel])[0])
        except Exception as one_exc:
            feats.append(None)
            fail(j.owner, "encode", one_exc)
    _encoded(jobs, feats, parts, planner)


def _encoded(jobs: list[WindowJob], feats: list[Tensor | None], parts: WhisperParts, planner: WindowPlanner) -> None:
    """Encoded windows (None: failed) wait to join the decoder, their language detected."""
    encoded = [j for j, f in zip(jobs, feats) if f is not None]
    for j, f in zip(jobs, feats):
        j.audio_features = f
    needs = [j for j in encoded if j.owner.needs_language()]
    for j, code in zip(needs, parts.detect_languages([j.audio_features for j in needs])):  # type: ignore[misc]
        j.owner.set_language(code)
        j.refresh_prefix()
    planner.encoded(encoded)


def join(jobs: list[WindowJob], parts: WhisperParts, batch: DecodeBatch, fail: FailRequest) -> None:
    """Prefill `jobs` into the decoder batch: live passes together, offline windows together
    (one by one if that fails). Live rows attend to the shared silence once for all rows;
    offline rows hold their whole context, so no transcript depends on its batch mates."""
    for live in (True, False):
        group = [j for j in jobs if j.live == live]
        if not group:
            continue
        # windows of one length attend in one call where they attend per length (offline rows,
        # prefills: DecoderCache.item_runs)
        group.sort(key=lambda j: j.audio_positions)
        try:
            with stage_timer("streaming.decode" if live else "offline.prefill"):  # no streaming.prefill stage
                _prefill(group, parts, batch, shared_silence=live)
        except Exception as exc:
            logger.warning("prefill of %d windows failed (%s); retrying one by one", len(group), exc)
            for j in group:
                try:
                    _prefill([j], parts, batch, shared_silence=live)
                except Exception as one_exc:
                    fail(j.owner, "decode", one_exc)


def _prefill(jobs: list[WindowJob], parts: WhisperParts, batch: DecodeBatch, shared_silence: bool) -> None:
    groups = [DecodeGroup.for_job(j, parts.rules, parts.dims.n_text_ctx) for j in jobs]
    cross = batch.join(groups, [j.audio_features for j in jobs], [j.audio_positions for j in jobs],  # type: ignore[misc]
                       parts.silence_kv(jobs), shared_silence=shared_silence,
                       projected=[j.cross_kv for j in jobs])
    for job, kv in zip(jobs, cross):
        if job.live:  # a live pass aligns its words over the same window (offline jobs do not keep theirs)
            job.cross_kv = kv


def live_share(jobs: list[WindowJob], weight: Callable[[WindowJob], int]) -> float:
    """The fraction of a batch's work that is live passes, each job weighted by `weight` (its mel
    frames for the encoder, its rows for the decoder); 0 for an empty batch. A stage that runs
    offline windows and live passes together is timed as offline.* and streaming.* by it."""
    total = sum(weight(j) for j in jobs)
    return sum(weight(j) for j in jobs if j.live) / total if total else 0.0

