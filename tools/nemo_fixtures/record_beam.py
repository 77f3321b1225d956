"""Record NeMo's own batched transducer beam search (`malsd_batch`) n-best lists on the committed
fixture checkpoints (tests/fixtures/nemo/*/model.nemo): offline, and carried across chunks of
cache-aware and buffered streaming. Writes `<fixture>/beam_reference.json` beside each checkpoint.

Run in the throwaway NeMo venv (see make_fixtures.py), from the repository root:

    /tmp/ref-nemo/bin/python tools/nemo_fixtures/record_beam.py

Decoding: NeMo's `malsd_batch` strategy through `change_decoding_strategy` (beam.beam_size K,
return_best_hypothesis False, score_norm True, NeMo's default beam.max_symbols 10, CUDA graphs
off). Streaming: each chunk's encoder output (NeMo's cache-aware step, or the buffered window of
record.buffered) goes to the strategy's `decoding_computer` with the previous chunk's
`BatchedBeamState`; each chunk's hypotheses are flattened in beam order (`flatten_`) and merged
into the accumulated ones (`merge_(..., is_chunk_continuation=True, boundary_prev_ptr=roots)`),
as the streaming beam API documents; the n-best comes from `to_nbest_hyps_list(score_norm=True)`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures

logger = logging.getLogger("nemo_beam_fixtures")

FIXTURES = ("hybrid_cache_aware", "unified_rc", "tdt")
"""The transducer fixtures (for TDT NeMo's malsd_batch is its TDT variant, ModifiedALSDBatchedTDTComputer)."""
OFFLINE_BEAMS = (2, 4, 8)
STREAM_BEAM = 4
MAX_SYMBOLS = 10
"""NeMo's default `beam.max_symbols` for malsd_batch."""
BUFFERED_PRESETS = ([10, 4, 4], [10, 1, 1])


def use_malsd(model: Any, beam: int) -> Any:
    """Switch the model's transducer decoding to malsd_batch with beam `beam`; the computer."""
    from omegaconf import OmegaConf, open_dict

    cfg = OmegaConf.create(OmegaConf.to_container(model.cfg.decoding, resolve=True))
    with open_dict(cfg):
        cfg.strategy = "malsd_batch"
        cfg.beam = {"beam_size": beam, "return_best_hypothesis": False, "score_norm": True,
                    "max_symbols": MAX_SYMBOLS, "allow_cuda_graphs": False}  # fmt: skip
    if hasattr(model, "cur_decoder"):
        model.change_decoding_strategy(decoding_cfg=cfg, decoder_type="rnnt", verbose=False)
    else:
        model.change_decoding_strategy(decoding_cfg=cfg, verbose=False)
    return model.decoding.decoding.decoding_computer


def nbest_json(nbest: Any) -> list[dict[str, Any]]:
    out = []
    for h in nbest:
        seq = h.y_sequence.tolist() if hasattr(h.y_sequence, "tolist") else list(h.y_sequence)
        ts = h.timestamp.tolist() if hasattr(h.timestamp, "tolist") else list(h.timestamp or [])
        out.append({"tokens": [int(x) for x in seq], "frames": [int(x) for x in ts], "score": float(h.score)})
    return out


def decode_chunks(computer: Any, chunks: list[tuple[torch.Tensor, torch.Tensor]]) -> list[dict[str, Any]]:
    """(enc (1, T, D), lengths (1,)) per chunk through the computer, state carried; the n-best."""
    acc, state = None, None
    for enc, length in chunks:
        hyps, state = computer(x=enc, out_len=length, prev_batched_state=state)
        roots = hyps.flatten_()
        if acc is None:
            acc = hyps
        else:
            acc.merge_(hyps, is_chunk_continuation=True, boundary_prev_ptr=roots)
    assert acc is not None
    return nbest_json(acc.to_nbest_hyps_list(score_norm=True)[0].n_best_hypotheses)


@torch.inference_mode()
def offline(model: Any, audio: np.ndarray, beam: int) -> list[dict[str, Any]]:
    computer = use_malsd(model, beam)
    mel, mel_len = model.preprocessor(input_signal=torch.from_numpy(audio)[None], length=torch.tensor([len(audio)]))
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    return decode_chunks(computer, [(enc.transpose(1, 2), enc_len)])


@torch.inference_mode()
def cache_aware(model: Any, audio: np.ndarray, look_ahead: list[int], beam: int) -> list[dict[str, Any]]:
    """NeMo's cache-aware encoder loop (as record.cache_aware), each step's output decoded by malsd."""
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model.encoder.set_default_att_context_size(list(look_ahead))
    computer = use_malsd(model, beam)
    buffer = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False, pad_and_drop_preencoded=False)
    buffer.append_audio(audio)
    cfg = model.encoder.streaming_cfg
    cache_channel, cache_time, cache_len = model.encoder.get_initial_cache_state(batch_size=1)
    chunks = []
    for step, (chunk, chunk_lengths) in enumerate(iter(buffer)):
        encoded, encoded_len, cache_channel, cache_time, cache_len = model.encoder.cache_aware_stream_step(
            processed_signal=chunk, processed_signal_length=chunk_lengths, cache_last_channel=cache_channel,
            cache_last_time=cache_time, cache_last_channel_len=cache_len, keep_all_outputs=buffer.is_buffer_empty(),
            drop_extra_pre_encoded=0 if step == 0 else cfg.drop_extra_pre_encoded,
        )  # fmt: skip
        chunks.append((encoded.transpose(1, 2), encoded_len))
    return decode_chunks(computer, chunks)


@torch.inference_mode()
def buffered(model: Any, audio: np.ndarray, preset: list[int], beam: int) -> list[dict[str, Any]]:
    """record.buffered's window loop, each window's chunk frames decoded by malsd."""
    from nemo.collections.asr.parts.utils.streaming_utils import ContextSize, StreamingBatchedAudioBuffer

    computer = use_malsd(model, beam)
    stride_s = float(model.cfg.preprocessor.window_stride)
    factor = int(model.encoder.subsampling_factor)
    frame_samples = (int(int(model.cfg.preprocessor.sample_rate) * stride_s) // factor) * factor * factor
    left, chunk, right = preset
    context = ContextSize(left=left * frame_samples, chunk=chunk * frame_samples, right=right * frame_samples)
    model.encoder.set_default_att_context_size(att_context_size=[left, chunk, right])
    signal = torch.from_numpy(audio).unsqueeze(0)
    total = signal.shape[1]
    buffer = StreamingBatchedAudioBuffer(batch_size=1, context_samples=context, dtype=signal.dtype,
                                         device=signal.device)  # fmt: skip
    rest = torch.tensor([total])
    left_sample, right_sample = 0, min(context.chunk + context.right, total)
    chunks = []
    while left_sample < total:
        chunk_length = min(right_sample, total) - left_sample
        is_last_batch = chunk_length >= rest
        chunk_lengths = torch.where(is_last_batch, rest, torch.full_like(rest, fill_value=chunk_length))
        buffer.add_audio_batch_(signal[:, left_sample:right_sample], audio_lengths=chunk_lengths,
                                is_last_chunk=right_sample >= total, is_last_chunk_batch=is_last_batch)  # fmt: skip
        enc, enc_len = model(input_signal=buffer.samples, input_signal_length=buffer.context_size_batch.total())
        enc = enc.transpose(1, 2)
        enc_ctx = buffer.context_size.subsample(factor=frame_samples)
        enc_ctx_batch = buffer.context_size_batch.subsample(factor=frame_samples)
        out_len = torch.where(is_last_batch, enc_len - enc_ctx_batch.left, enc_ctx_batch.chunk)
        chunks.append((enc[:, enc_ctx.left :].clone(), out_len.clone()))
        rest = rest - chunk_lengths
        left_sample = right_sample
        right_sample = min(right_sample + context.chunk, total)
    return decode_chunks(computer, chunks)


def record_fixture(path: Path, clips: dict[str, np.ndarray]) -> dict[str, Any]:
    from nemo.collections.asr.models import ASRModel

    model = ASRModel.restore_from(str(path / "model.nemo"), map_location="cpu").eval()
    enc = model.encoder
    default_context = list(enc.att_context_size)
    ref: dict[str, Any] = {"strategy": "malsd_batch", "max_symbols": MAX_SYMBOLS, "score_norm": True,
                           "offline": [], "cache_aware": [], "buffered": []}  # fmt: skip
    for cid, audio in clips.items():
        for beam in OFFLINE_BEAMS:
            ref["offline"].append({"clip": cid, "beam": beam, "nbest": offline(model, audio, beam)})
    if enc.att_context_style == "chunked_limited":
        for look_ahead in (enc.att_context_size_all[0], enc.att_context_size_all[-1]):
            for cid, audio in clips.items():
                nbest = cache_aware(model, audio, list(look_ahead), STREAM_BEAM)
                ref["cache_aware"].append({"look_ahead": list(look_ahead), "clip": cid, "beam": STREAM_BEAM,
                                           "nbest": nbest})  # fmt: skip
        enc.set_default_att_context_size(default_context)
    if enc.att_context_style == "chunked_limited_with_rc":
        for preset in BUFFERED_PRESETS:
            for cid, audio in clips.items():
                nbest = buffered(model, audio, preset, STREAM_BEAM)
                ref["buffered"].append({"preset": preset, "clip": cid, "beam": STREAM_BEAM, "nbest": nbest})
    return ref


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fixtures", type=Path, default=make_fixtures.REPO / "tests" / "fixtures" / "nemo")
    parser.add_argument("--speech-data", type=Path, default=make_fixtures.DEFAULT_SPEECH)
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    clips = {cid: make_fixtures.load_clip(args.speech_data, cid) for cid in make_fixtures.CLIPS}
    for name in args.only or FIXTURES:
        ref = record_fixture(args.fixtures / name, clips)
        out = args.fixtures / name / "beam_reference.json"
        out.write_text(json.dumps(ref, indent=1) + "\n")
        logger.info("%s: %d offline, %d cache-aware, %d buffered settings -> %s", name, len(ref["offline"]),
                    len(ref["cache_aware"]), len(ref["buffered"]), out)  # fmt: skip


if __name__ == "__main__":
    main()
