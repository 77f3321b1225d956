"""Record NeMo's own outputs on a checkpoint: offline, cache-aware streaming, buffered streaming.

Runs inside the throwaway NeMo venv. Every recorder returns plain JSON-able data plus a dict of
float32 arrays (encoder outputs of the first steps) that the caller stores in an .npz.
The loops are NeMo's reference loops, unchanged in substance:
- cache-aware: examples/asr/asr_cache_aware_streaming/speech_to_text_cache_aware_streaming_infer.py
  (`CacheAwareStreamingAudioBuffer` + `conformer_stream_step`, pad_and_drop_preencoded=False);
- buffered: examples/asr/asr_chunked_inference/rnnt/speech_to_text_streaming_infer_rnnt.py
  (`StreamingBatchedAudioBuffer` + `ContextSize` in samples, window-relative [L, C, R] mask,
  the label-looping decoding computer carrying its state).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ENCODER_FRAMES_KEPT = 12
"""Offline: encoder output frames stored per clip (all dims)."""
STREAM_STEPS_KEPT = 3
"""Streaming: steps whose encoder output is stored."""
MEL_FRAMES_KEPT = 24


def collapse_ctc(frame_ids: list[int], blank: int) -> tuple[list[int], list[int]]:
    """Greedy CTC: merge repeats, drop blanks; returns (tokens, frame of each token)."""
    tokens, frames, prev = [], [], blank
    for t, tok in enumerate(frame_ids):
        if tok != blank and tok != prev:
            tokens.append(tok)
            frames.append(t)
        prev = tok
    return tokens, frames


def _hyp_tokens(hyp: Any) -> list[int]:
    seq = hyp.y_sequence
    return [int(x) for x in (seq.tolist() if torch.is_tensor(seq) else seq)]


def _hyp_timestamps(hyp: Any) -> list[int] | None:
    ts = getattr(hyp, "timestamp", None)
    if ts is None:
        return None
    if isinstance(ts, dict):
        ts = ts.get("timestep")
    if ts is None:
        return None
    return [int(x) for x in (ts.tolist() if torch.is_tensor(ts) else ts)]


def _first_hyp(out: Any) -> Any:
    """rnnt_decoder_predictions_tensor returns a list of hypotheses (or a tuple around it)."""
    while isinstance(out, (tuple, list)) and out and isinstance(out[0], (tuple, list)):
        out = out[0]
    return out[0]


def _ctc_head(model: Any) -> Any:
    return model.ctc_decoder if hasattr(model, "ctc_decoder") else model.decoder


def has_rnnt(model: Any) -> bool:
    return hasattr(model, "joint")


def has_ctc(model: Any) -> bool:
    return hasattr(model, "ctc_decoder") or not has_rnnt(model)


@torch.inference_mode()
def offline(model: Any, audio: np.ndarray, key: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Whole-utterance forward: mel, encoder, each head's greedy tokens and frame indices."""
    signal = torch.from_numpy(audio).unsqueeze(0)
    length = torch.tensor([len(audio)])
    mel, mel_len = model.preprocessor(input_signal=signal, length=length)
    enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
    out: dict[str, Any] = {"mel_frames": int(mel_len[0]), "encoder_frames": int(enc_len[0])}
    arrays = {
        f"{key}/mel": mel[0, :, :MEL_FRAMES_KEPT].T.contiguous().numpy(),
        f"{key}/encoder": enc[0, :, :ENCODER_FRAMES_KEPT].T.contiguous().numpy(),
    }
    if has_rnnt(model):
        if hasattr(model, "cur_decoder"):
            model.change_decoding_strategy(decoder_type="rnnt", verbose=False)
        hyp = _first_hyp(
            model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len,
                                                           return_hypotheses=True)
        )  # fmt: skip
        out["rnnt"] = {"tokens": _hyp_tokens(hyp), "frames": _hyp_timestamps(hyp)}
    if has_ctc(model):
        log_probs = _ctc_head(model)(encoder_output=enc)
        blank = log_probs.shape[-1] - 1
        ids = log_probs[0, : int(enc_len[0])].argmax(-1).tolist()
        tokens, frames = collapse_ctc(ids, blank)
        out["ctc"] = {"tokens": tokens, "frames": frames}
        arrays[f"{key}/ctc_log_probs"] = log_probs[0, :ENCODER_FRAMES_KEPT].contiguous().numpy()
    return out, arrays


@torch.inference_mode()
def cache_aware(
    model: Any, audio: np.ndarray, look_ahead: list[int], head: str, key: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """NeMo's cache-aware streaming loop for one clip at one look-ahead [L, R] with one head."""
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    model.encoder.set_default_att_context_size(list(look_ahead))
    if hasattr(model, "cur_decoder"):
        model.change_decoding_strategy(decoder_type=head, verbose=False)
    buffer = CacheAwareStreamingAudioBuffer(
        model=model, online_normalization=False, pad_and_drop_preencoded=False
    )
    buffer.append_audio(audio)
    cfg = model.encoder.streaming_cfg
    steps: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    encoder_step = model.encoder.cache_aware_stream_step

    def recorded_step(**kwargs: Any) -> Any:
        rets = encoder_step(**kwargs)
        encoded, encoded_len = rets[0], rets[1]
        i = len(steps)
        steps.append({
            "input_frames": int(kwargs["processed_signal"].shape[-1]),
            "input_length": int(kwargs["processed_signal_length"][0]),
            "drop_extra_pre_encoded": int(kwargs["drop_extra_pre_encoded"]),
            "encoded_frames": int(encoded_len[0]),
        })  # fmt: skip
        if i < STREAM_STEPS_KEPT:
            arrays[f"{key}/step{i}"] = encoded[0, :, : int(encoded_len[0])].T.contiguous().numpy()
        return rets

    model.encoder.cache_aware_stream_step = recorded_step
    try:
        cache_channel, cache_time, cache_len = model.encoder.get_initial_cache_state(batch_size=1)
        hyps, pred_out = None, None
        for step_num, (chunk, chunk_lengths) in enumerate(iter(buffer)):
            pred_out, _texts, cache_channel, cache_time, cache_len, hyps = model.conformer_stream_step(
                processed_signal=chunk,
                processed_signal_length=chunk_lengths,
                cache_last_channel=cache_channel,
                cache_last_time=cache_time,
                cache_last_channel_len=cache_len,
                keep_all_outputs=buffer.is_buffer_empty(),
                previous_hypotheses=hyps,
                previous_pred_out=pred_out,
                drop_extra_pre_encoded=0 if step_num == 0 else cfg.drop_extra_pre_encoded,
                return_transcription=True,
            )
    finally:
        del model.encoder.cache_aware_stream_step  # back to the class method
    if head == "rnnt":
        result = {"tokens": _hyp_tokens(hyps[0]), "frames": _hyp_timestamps(hyps[0])}
    else:
        blank = _ctc_head(model).num_classes_with_blank - 1
        tokens, frames = collapse_ctc([int(x) for x in pred_out[0].tolist()], blank)
        result = {"tokens": tokens, "frames": frames}
    result["steps"] = steps
    result["streaming_cfg"] = {
        "chunk_size": list(cfg.chunk_size), "shift_size": list(cfg.shift_size),
        "pre_encode_cache_size": list(cfg.pre_encode_cache_size), "valid_out_len": cfg.valid_out_len,
        "drop_extra_pre_encoded": cfg.drop_extra_pre_encoded, "last_channel_cache_size": cfg.last_channel_cache_size,
    }  # fmt: skip
    return result, arrays


@torch.inference_mode()
def buffered(
    model: Any, audio: np.ndarray, preset: list[int], key: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """NeMo's buffered streaming loop (seed 004) for one clip at one (L, C, R) preset in encoder frames."""
    from nemo.collections.asr.parts.utils.rnnt_utils import batched_hyps_to_hypotheses
    from nemo.collections.asr.parts.utils.streaming_utils import ContextSize, StreamingBatchedAudioBuffer

    stride_s = float(model.cfg.preprocessor.window_stride)
    factor = int(model.encoder.subsampling_factor)
    rate = int(model.cfg.preprocessor.sample_rate)
    frame_samples = (int(rate * stride_s) // factor) * factor * factor  # 1280 at 10 ms x 8
    left, chunk, right = preset
    context = ContextSize(left=left * frame_samples, chunk=chunk * frame_samples, right=right * frame_samples)
    model.encoder.set_default_att_context_size(att_context_size=[left, chunk, right])
    computer = model.decoding.decoding.decoding_computer

    signal = torch.from_numpy(audio).unsqueeze(0)
    total = signal.shape[1]
    lengths = torch.tensor([total])
    buffer = StreamingBatchedAudioBuffer(batch_size=1, context_samples=context, dtype=signal.dtype,
                                         device=signal.device)  # fmt: skip
    rest = lengths.clone()
    hyps, state = None, None
    left_sample, right_sample = 0, min(context.chunk + context.right, total)
    steps: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    while left_sample < total:
        chunk_length = min(right_sample, total) - left_sample
        is_last_batch = chunk_length >= rest
        is_last = right_sample >= total
        chunk_lengths = torch.where(is_last_batch, rest, torch.full_like(rest, fill_value=chunk_length))
        buffer.add_audio_batch_(signal[:, left_sample:right_sample], audio_lengths=chunk_lengths,
                                is_last_chunk=is_last, is_last_chunk_batch=is_last_batch)  # fmt: skip
        enc, enc_len = model(
            input_signal=buffer.samples, input_signal_length=buffer.context_size_batch.total()
        )
        enc = enc.transpose(1, 2)
        enc_ctx = buffer.context_size.subsample(factor=frame_samples)
        enc_ctx_batch = buffer.context_size_batch.subsample(factor=frame_samples)
        out_len = torch.where(is_last_batch, enc_len - enc_ctx_batch.left, enc_ctx_batch.chunk)
        enc_chunk = enc[:, enc_ctx.left :]
        chunk_hyps, state = computer(x=enc_chunk, out_len=out_len, prev_batched_state=state,
                                        multi_biasing_ids=None)  # fmt: skip
        hyps = chunk_hyps if hyps is None else hyps.merge_(chunk_hyps)
        i = len(steps)
        steps.append({
            "context_samples": [buffer.context_size.left, buffer.context_size.chunk, buffer.context_size.right],
            "window_samples": int(buffer.samples.shape[1]),
            "encoder_frames": int(enc_len[0]),
            "decode_from": int(enc_ctx.left),
            "decoded_frames": int(out_len[0]),
            "is_last": bool(is_last),
        })  # fmt: skip
        if i < STREAM_STEPS_KEPT:
            arrays[f"{key}/step{i}"] = enc_chunk[0, : int(out_len[0])].contiguous().numpy()
        rest = rest - chunk_lengths
        left_sample = right_sample
        right_sample = min(right_sample + context.chunk, total)
    hyp = batched_hyps_to_hypotheses(hyps, batch_size=1)[0]
    return {"tokens": _hyp_tokens(hyp), "frames": _hyp_timestamps(hyp), "steps": steps}, arrays
