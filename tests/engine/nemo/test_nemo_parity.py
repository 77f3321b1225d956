"""Must-show 1: tokens identical to NeMo's for every fixture setting; encoder outputs within 1e-4.

References were recorded by NeMo 3.0.0 itself (tools/nemo_fixtures): offline tokens and frames of
each head, cache-aware streaming per look-ahead and head (NeMo's buffer + conformer_stream_step),
buffered streaming per preset (NeMo's streaming loop). Streams are fed in odd piece sizes: the
chunk schedule depends on frame counts only, so slicing must not change a token.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from engine.models.nemo.greedy import greedy_label_looping
from tests.engine.nemo.conftest import (
    NAMES,
    clip,
    drive_alone,
    make_runner,
    reference,
    reference_arrays,
    transcribe_offline,
)

# Encoder outputs are O(1) (post layer norm); float32 rounding of a 2-layer, d_model 64-96 model
# stays orders of magnitude below this bound on any x86 SIMD width.
ENCODER_TOL = 1e-4


def _offline_cases() -> list[tuple[str, str, str]]:
    return [(name, cid, head) for name in NAMES for cid, heads in reference(name)["offline"].items()
            for head in ("rnnt", "ctc") if head in heads]  # fmt: skip


@pytest.mark.parametrize(("name", "clip_id", "head"), _offline_cases())
def test_offline_tokens_and_frames_equal_nemo(name: str, clip_id: str, head: str) -> None:
    ref = reference(name)["offline"][clip_id][head]
    runner = make_runner(name, decode_method=head)
    out = transcribe_offline(runner, clip(name, clip_id))
    assert out.finish_reason == "stop"
    assert out.tokens == ref["tokens"]
    frame_s = runner.frame_seconds
    assert out.timestamps == [round(f * frame_s, 3) for f in ref["frames"]]
    assert out.text == runner.ckpt.tokenizer.text(ref["tokens"])


@pytest.mark.parametrize("name", NAMES)
def test_offline_mel_and_encoder_match_nemo(name: str) -> None:
    runner = make_runner(name)
    arrays = reference_arrays(name)
    for clip_id, ref in reference(name)["offline"].items():
        audio = torch.from_numpy(np.array(clip(name, clip_id)))[None]
        mel, mel_len = runner.ckpt.frontend(audio, torch.tensor([audio.shape[1]]))
        with torch.inference_mode():
            enc, enc_len = runner.ckpt.model.encoder(mel, mel_len)
        assert (int(mel_len[0]), int(enc_len[0])) == (ref["mel_frames"], ref["encoder_frames"])
        ref_mel = torch.from_numpy(arrays[f"offline/{clip_id}/mel"])
        # log-mel values reach ~|20|: bound the error relative to the largest value.
        assert (mel[0, :, : ref_mel.shape[0]].T - ref_mel).abs().max() <= 1e-5 * ref_mel.abs().max()
        ref_enc = torch.from_numpy(arrays[f"offline/{clip_id}/encoder"])
        assert (enc[0, : ref_enc.shape[0]] - ref_enc).abs().max() <= ENCODER_TOL


def _cache_aware_cases() -> list[tuple[int, str]]:
    return [(i, e["head"]) for i, e in enumerate(reference("hybrid_cache_aware")["cache_aware"])]


@pytest.mark.parametrize(("index", "head"), _cache_aware_cases())
def test_cache_aware_streaming_tokens_equal_nemo(index: int, head: str) -> None:
    case = reference("hybrid_cache_aware")["cache_aware"][index]
    left, right = case["look_ahead"]
    runner = make_runner("hybrid_cache_aware", chunk_size=right + 1, num_left_chunks=left // (right + 1),
                         decode_method=head)  # fmt: skip
    assert runner.look_ahead == (left, right)
    audio = clip("hybrid_cache_aware", case["clip"])
    steps: list[tuple[int, torch.Tensor]] = []
    step = runner.ca_encoder.step  # type: ignore[union-attr]

    def recorded(streams, inputs):  # type: ignore[no-untyped-def]
        out, lengths = step(streams, inputs)
        steps.append((inputs[0].shape[1], out[0, : int(lengths[0])].clone()))
        return out, lengths

    runner.ca_encoder.step = recorded  # type: ignore[union-attr, method-assign]
    outs = drive_alone(runner, audio, piece_samples=1111)
    assert outs[-1].finish_reason == "stop"
    assert outs[-1].tokens == case["tokens"]
    # NeMo's schedule: input frames and encoder frames of every step
    assert [(n, len(e)) for n, e in steps] == [
        (s["input_frames"], s["encoded_frames"]) for s in case["steps"]
    ]
    arrays = reference_arrays("hybrid_cache_aware")
    for i in range(3):
        ref = arrays[f"cache_aware/{left}_{right}/{head}/{case['clip']}/step{i}"]
        assert (steps[i][1] - torch.from_numpy(ref)).abs().max() <= ENCODER_TOL


@pytest.mark.parametrize("index", range(len(reference("unified_rc")["buffered"])))
def test_buffered_streaming_tokens_equal_nemo(index: int) -> None:
    case = reference("unified_rc")["buffered"][index]
    preset = tuple(case["preset"])
    runner = make_runner("unified_rc", family_options={"nemo": {"stream_context": preset}})
    audio = clip("unified_rc", case["clip"])
    slices: list[torch.Tensor] = []
    step = runner.buffered_encoder.step

    def recorded(streams, steps):  # type: ignore[no-untyped-def]
        out = step(streams, steps)
        slices.append(out[0].chunk.clone())
        return out

    runner.buffered_encoder.step = recorded  # type: ignore[method-assign]
    outs = drive_alone(runner, audio, piece_samples=777)
    assert outs[-1].tokens == case["tokens"]
    assert [len(s) for s in slices] == [s["decoded_frames"] for s in case["steps"]]
    arrays = reference_arrays("unified_rc")
    for i in range(3):
        ref = arrays[f"buffered/{'_'.join(map(str, preset))}/{case['clip']}/step{i}"]
        assert (slices[i] - torch.from_numpy(ref)).abs().max() <= ENCODER_TOL
    committed = [o.committed for o in outs]
    assert all(b.startswith(a) for a, b in itertools.pairwise(committed))  # committed text never changes


@pytest.mark.parametrize("pieces", [160, 1280, 4000, 48000])
def test_client_slicing_does_not_change_tokens(pieces: int) -> None:
    case = reference("hybrid_cache_aware")["cache_aware"][0]
    audio = clip("hybrid_cache_aware", case["clip"])
    assert drive_alone(make_runner("hybrid_cache_aware"), audio, pieces)[-1].tokens == case["tokens"]
    buffered = reference("unified_rc")["buffered"][1]
    runner = make_runner("unified_rc", family_options={"nemo": {"stream_context": tuple(buffered["preset"])}})
    assert drive_alone(runner, clip("unified_rc", buffered["clip"]), pieces)[-1].tokens == buffered["tokens"]


def test_label_looping_respects_max_symbols() -> None:
    """The fixtures' random joints emit max_symbols (5) tokens on their first frames: the forced
    advance is exercised, and a smaller limit emits fewer tokens on those frames."""
    runner = make_runner("tdt")
    tr = runner.ckpt.model.transducer
    assert tr is not None and tr.is_tdt
    audio = torch.from_numpy(np.array(clip("tdt", "libri_61-70968-0000")))[None]
    mel, mel_len = runner.ckpt.frontend(audio, torch.tensor([audio.shape[1]]))
    with torch.inference_mode():
        enc, enc_len = runner.ckpt.model.encoder(mel, mel_len)
    five, _ = greedy_label_looping(tr, enc, enc_len, tr.initial_state(1, enc.device), 5)
    two, _ = greedy_label_looping(tr, enc, enc_len, tr.initial_state(1, enc.device), 2)
    assert five.frames[0][:5] == [0] * 5
    assert two.frames[0][:2] == [0, 0] and two.frames[0][2] != 0
