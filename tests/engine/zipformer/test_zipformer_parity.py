"""Greedy tokens identical to icefall's, offline and streaming at two chunk sizes.

The references were recorded by icefall's own code on its own tiny random checkpoint
(tools/zipformer_fixtures.py): `greedy_search_batch` on the full-context encoder, and
`streaming_decode.decode_one_chunk` chunk loops at (chunk 16, left 64) and (32, 128). Our runner
starts from the waveform: features, encoder and decoding are all ours.
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from typing import Any

import numpy as np
import pytest
import torch

from engine.models.zipformer.frontend import Featurizer
from tests.engine.zipformer.conftest import (
    FIXTURES,
    clip,
    drive_alone,
    make_runner,
    reference,
    reference_features,
    transcribe_offline,
)

FEATURE_TOL = 1e-3
"""kaldi-native-fbank vs our fbank, in log-mel units: float32 rounding in near-empty mel bins
(log of energies near the FFT's rounding floor) reaches ~2e-4; speech bins agree far closer."""
ENCODER_TOL = 1e-4
"""Encoder outputs are O(1) (BiasNorm'd); float32 reordering of a tiny model stays far below."""

CLIPS = tuple(reference()["clips"])
SETTINGS = [(s["chunk_size"], s["left_context_frames"]) for s in reference()["clips"][CLIPS[0]]["streaming"]]


@pytest.mark.parametrize("clip_id", CLIPS)
def test_features_match_kaldi_native_fbank(clip_id: str) -> None:
    ours = Featurizer(torch.device("cpu")).utterance(clip(clip_id))
    ref = torch.from_numpy(reference_features()[clip_id])
    assert ours.shape == ref.shape
    assert float((ours - ref).abs().max()) < FEATURE_TOL


@pytest.mark.parametrize("clip_id", CLIPS)
def test_offline_greedy_tokens_and_frames_equal_icefall(clip_id: str) -> None:
    ref = reference()["clips"][clip_id]["offline"]
    runner = make_runner()
    out = transcribe_offline(runner, clip(clip_id))
    assert out.finish_reason == "stop"
    assert ref["greedy"]["tokens"], "the fixture must emit tokens"
    assert out.tokens == ref["greedy"]["tokens"]
    assert out.timestamps == [round(t * runner.frame_seconds, 3) for t in ref["greedy"]["timestamps"]]
    assert out.text == runner.ckpt.tokenizer.text(ref["greedy"]["tokens"])


def test_offline_encoder_output_equals_icefall() -> None:
    runner = make_runner()
    clip_id = CLIPS[0]
    feats = torch.from_numpy(reference_features()[clip_id])
    with torch.inference_mode():
        enc, lengths = runner.model.encoder(feats.unsqueeze(0), torch.tensor([feats.shape[0]]))
    ref = reference()["clips"][clip_id]["offline"]
    assert int(lengths[0]) == ref["encoder_frames"]
    assert float((enc[0, :4] - torch.tensor(ref["encoder_out_head"])).abs().max()) < ENCODER_TOL


def test_offline_batch_of_mixed_lengths_equals_each_alone() -> None:
    """Padding is invisible: each row decodes as icefall's unpadded run of it (the causal conv's
    edge scale, the downsamplers' last group and the subsampler's ConvNeXt all use the row's own end)."""
    runner = make_runner(max_batch_size=8)
    from engine.request import Request
    from engine.types import DecodingOptions

    reqs = [Request(c, streaming=False, decoding=DecodingOptions(), sample_rate=16000, audio=clip(c)) for c in CLIPS]
    assert runner.admit(reqs) == []
    outs = {o.request_id: o for o in runner.execute()}
    assert runner.streams_stepped == 0 and len(outs) == len(CLIPS)
    for c in CLIPS:
        assert outs[c].tokens == reference()["clips"][c]["offline"]["greedy"]["tokens"]


@pytest.mark.parametrize(("chunk", "left"), SETTINGS)
@pytest.mark.parametrize("clip_id", CLIPS)
def test_streaming_greedy_tokens_equal_icefall(clip_id: str, chunk: int, left: int) -> None:
    ref = next(s for s in reference()["clips"][clip_id]["streaming"] if s["chunk_size"] == chunk)
    runner = make_runner(chunk_size=chunk, num_left_chunks=left // chunk)
    audio = clip(clip_id)
    outputs = drive_alone(runner, audio, piece_samples=1999)  # odd pieces: the schedule follows frames only
    final = outputs[-1]
    assert final.finished and final.finish_reason == "stop"
    assert final.tokens == ref["greedy"]
    assert len(outputs) == ref["steps"], "one output per chunk, as many chunks as icefall's loop"
    committed = [o.committed for o in outputs]
    assert all(b.startswith(a) for a, b in itertools.pairwise(committed))


@pytest.mark.parametrize(("chunk", "left"), SETTINGS)
def test_streams_stepped_together_equal_each_alone(chunk: int, left: int) -> None:
    """All three clips as concurrent streams: one batched forward per step, icefall's tokens each."""
    from engine.request import Request
    from engine.types import DecodingOptions

    runner = make_runner(chunk_size=chunk, num_left_chunks=left // chunk)
    reqs = [Request(c, streaming=True, decoding=DecodingOptions(), sample_rate=16000) for c in CLIPS]
    assert runner.admit(reqs) == []
    audios = {c: clip(c) for c in CLIPS}
    piece = runner.stream_chunk_samples
    finals, batched = {}, 0
    for start in range(0, max(len(a) for a in audios.values()) + piece, piece):
        for r in reqs:
            if r.request_id in finals or r.input_finished:
                continue
            a = audios[r.request_id][start : start + piece]
            r.append_audio(np.ascontiguousarray(a))
            if start + piece >= len(audios[r.request_id]):
                r.input_finished = True
        for o in runner.execute():
            if o.finished:
                finals[o.request_id] = o
        batched = max(batched, runner.streams_stepped)
    while len(finals) < len(CLIPS):
        for o in runner.execute():
            if o.finished:
                finals[o.request_id] = o
    assert batched == len(CLIPS)
    for c in CLIPS:
        ref = next(s for s in reference()["clips"][c]["streaming"] if s["chunk_size"] == chunk)
        assert finals[c].tokens == ref["greedy"]
    assert runner.stats().decode_slots_used == 0


def test_word_timestamps_come_from_token_frames() -> None:
    from engine.types import DecodingOptions

    runner = make_runner()
    clip_id = CLIPS[1]
    out = transcribe_offline(runner, clip(clip_id), DecodingOptions(word_timestamps=True, logprobs=True))
    ref = reference()["clips"][clip_id]["offline"]["greedy"]
    assert out.words and [w.word for w in out.words] == out.text.split()
    pieces = runner.ckpt.tokenizer.pieces
    starts = [round(f * runner.frame_seconds, 3) for t, f in zip(ref["tokens"], ref["timestamps"], strict=True)
              if pieces[t].startswith("▁")]  # fmt: skip
    assert [w.start for w in out.words] == starts
    assert all(w.end > w.start for w in out.words)
    assert out.token_logprobs is not None and len(out.token_logprobs) == len(out.tokens)
    assert all(lp <= 0.0 for lp in out.token_logprobs)


@cache
def offline_reference() -> dict[str, Any]:
    return json.loads((FIXTURES / "reference_tiny_offline.json").read_text())


@pytest.mark.parametrize("clip_id", CLIPS)
def test_non_causal_model_offline_greedy_equals_icefall(clip_id: str) -> None:
    """icefall's non-streaming recipe (causal=False) as its training saves it (save_checkpoint's
    epoch-1.pt, chunk_size "16,32,64,-1" recorded and ignored): symmetric convolutions, a middle
    stack wider than the last, a context-size-1 predictor; served offline only."""
    runner = make_runner(ckpt_dir=str(FIXTURES / "tiny_offline"))
    assert not runner.supports_streaming and runner.info().streaming_styles == ()
    ref = offline_reference()["clips"][clip_id]["offline"]
    out = transcribe_offline(runner, clip(clip_id))
    assert out.tokens == ref["greedy"]["tokens"]
    assert out.timestamps == [round(t * runner.frame_seconds, 3) for t in ref["greedy"]["timestamps"]]
    feats = torch.from_numpy(reference_features()[clip_id])
    with torch.inference_mode():
        enc, _ = runner.model.encoder(feats.unsqueeze(0), torch.tensor([feats.shape[0]]))
    assert float((enc[0, :4] - torch.tensor(ref["encoder_out_head"])).abs().max()) < ENCODER_TOL


def test_a_long_offline_request_runs_as_icefall_streaming_decode() -> None:
    """Past `full_context_seconds` an offline request goes through the chunked path (bounded
    memory): icefall's streaming decode of the whole file, one final output and no partials."""
    from engine.request import Request
    from engine.types import DecodingOptions

    runner = make_runner(family_options={"zipformer": {"full_context_seconds": 1.0}})
    reqs = [Request(c, streaming=False, decoding=DecodingOptions(), sample_rate=16000, audio=clip(c)) for c in CLIPS]
    assert runner.admit(reqs) == []
    outs = []
    while len(outs) < len(CLIPS):
        step = runner.execute()
        assert all(o.finished for o in step), "an offline request reports once"
        outs += step
    for o in outs:
        ref = next(s for s in reference()["clips"][o.request_id]["streaming"] if s["chunk_size"] == 16)
        assert o.finish_reason == "stop" and o.tokens == ref["greedy"]
    assert runner.stats().decode_slots_used == 0


def test_a_non_streaming_model_refuses_offline_audio_past_its_full_context_limit() -> None:
    from engine.request import Request
    from engine.types import DecodingOptions

    runner = make_runner(ckpt_dir=str(FIXTURES / "tiny_offline"), family_options={"zipformer": {"full_context_seconds": 2.0}})
    req = Request("long", streaming=False, decoding=DecodingOptions(), sample_rate=16000, audio=clip(CLIPS[0]))
    (failed,) = runner.admit([req])
    assert failed.finish_reason == "error" and "full_context_seconds=2" in (failed.error or "")
