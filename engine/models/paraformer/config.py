"""A FunASR Paraformer's `config.yaml`, read into the sizes and settings this runtime implements.

Served: the offline `Paraformer` (and SeACo's `SeacoParaformer`) with a `SANMEncoder` (input
layer `pe`), a `CifPredictorV2` and a `ParaformerSANMDecoder`, with FunASR's `WavFrontend`; and
the streaming `ParaformerStreaming` (paraformer-online) with a `SANMEncoderChunkOpt` (input layer
`pe_online`) and `WavFrontendOnline`. Any other class or a setting this runtime does not
reproduce exactly is refused here, naming the key. Training-only settings (dropout, specaug, loss
weights, the online encoder's training chunk sizes) are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import CheckpointError

MODEL_CLASSES = ("Paraformer", "SeacoParaformer", "ParaformerStreaming")
"""`model:` values served: the plain model, and SeACo's contextual one (hotwords). BiCifParaformer
(a second, timestamp predictor) differs in its timestamps and is refused rather than served
approximately."""
ONLINE_CLASS = "ParaformerStreaming"
"""paraformer-online: chunked encoder with caches, CIF across chunks, decoder over fired tokens."""


@dataclass(frozen=True)
class EncoderConfig:
    input_size: int
    """Feature dimension after LFR (n_mels x lfr_m: 560 for FunASR's 80 x 7)."""
    output_size: int
    attention_heads: int
    linear_units: int
    num_blocks: int
    kernel_size: int
    """Taps of the FSMN memory block (a depthwise convolution over time) in each layer."""
    sanm_shift: int
    """Extra left padding of the FSMN (`sanm_shfit` in FunASR's spelling): 0 centres the kernel."""


@dataclass(frozen=True)
class DecoderConfig:
    d_model: int
    vocab_size: int
    attention_heads: int
    linear_units: int
    num_blocks: int
    att_layer_num: int
    """Leading blocks with cross-attention; the rest up to num_blocks have only the FSMN."""
    kernel_size: int
    sanm_shift: int
    output_layer: bool = True
    """False for SeACo's hotword decoder, whose hidden states feed `hotword_output_layer`."""
    embed: bool = False
    """Keep the token embedding (`decoder.embed`): SeACo embeds hotwords with it."""


@dataclass(frozen=True)
class SeacoConfig:
    """SeACo's contextual parts: hotwords -> token embeddings -> LSTM (last state per hotword);
    a SANM decoder over the acoustic embeddings and over the decoder's hidden states attends to
    them; where `hotword_output_layer` does not pick `no_bias`, its prediction replaces the
    decoder's."""

    decoder: DecoderConfig
    bidirectional: bool
    no_bias: int
    """Token id meaning 'no hotword here' (NO_BIAS)."""


@dataclass(frozen=True)
class PredictorConfig:
    idim: int
    l_order: int
    r_order: int
    threshold: float
    smooth_factor: float
    noise_threshold: float
    tail_threshold: float
    """Weight added after the last frame so a trailing partial token still fires (0.45 in
    FunASR's released models)."""


@dataclass(frozen=True)
class FrontendConfig:
    sample_rate: int
    """Hz."""
    window: str
    n_mels: int
    frame_length_ms: float
    frame_shift_ms: float
    lfr_m: int
    """Frames stacked into one low-frame-rate frame."""
    lfr_n: int
    """Frames advanced per low-frame-rate frame (6: 60 ms per encoder frame)."""

    @property
    def frame_seconds(self) -> float:
        """Seconds per LFR (= encoder) frame: 60 ms for FunASR's 10 ms x 6."""
        return self.frame_shift_ms * self.lfr_n / 1000.0


@dataclass(frozen=True)
class ParaformerConfig:
    encoder: EncoderConfig
    decoder: DecoderConfig
    predictor: PredictorConfig
    frontend: FrontendConfig
    blank_id: int
    sos: int
    eos: int
    seaco: SeacoConfig | None = None
    online: bool = False
    """ParaformerStreaming: served chunk by chunk (engine/models/paraformer/online.py)."""
    bpe_model: str | None = None
    """`tokenizer_conf.bpemodel`: the SentencePiece model file (relative to the checkpoint
    directory) that spells the tokens; None for FunASR's character tokenizer."""


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise CheckpointError(f"config.yaml: {key} must be a mapping, got {type(value).__name__}")
    return value


def _require(raw: dict[str, Any], key: str, allowed: tuple[str, ...]) -> None:
    if raw.get(key) not in allowed:
        raise CheckpointError(f"config.yaml: {key}={raw.get(key)!r} is not served (served: {', '.join(allowed)})")


def parse_config(raw: dict[str, Any], vocab_size: int) -> ParaformerConfig:
    """The runtime's view of a FunASR config.yaml (already parsed from YAML)."""
    _require(raw, "model", MODEL_CLASSES)
    online = raw["model"] == ONLINE_CLASS
    _require(raw, "encoder", ("SANMEncoderChunkOpt",) if online else ("SANMEncoder",))
    _require(raw, "decoder", ("ParaformerSANMDecoder",))
    _require(raw, "predictor", ("CifPredictorV2",))
    _require(raw, "frontend", ("WavFrontendOnline",) if online else ("WavFrontend", "wav_frontend"))
    enc, dec, pred, fe = (_section(raw, k) for k in ("encoder_conf", "decoder_conf", "predictor_conf", "frontend_conf"))
    model = _section(raw, "model_conf")
    checks = {
        "encoder_conf.input_layer": (enc.get("input_layer", "conv2d"), "pe_online" if online else "pe"),
        "encoder_conf.selfattention_layer_type": (enc.get("selfattention_layer_type", "sanm"), "sanm"),
        "encoder_conf.normalize_before": (enc.get("normalize_before", True), True),
        "encoder_conf.concat_after": (enc.get("concat_after", False), False),
        "encoder_conf.positionwise_layer_type": (enc.get("positionwise_layer_type", "linear"), "linear"),
        "decoder_conf.normalize_before": (dec.get("normalize_before", True), True),
        "decoder_conf.concat_after": (dec.get("concat_after", False), False),
        "decoder_conf.use_output_layer": (dec.get("use_output_layer", True), True),
        "predictor_conf.tail_mask": (pred.get("tail_mask", True), True),
        "frontend_conf.snip_edges": (fe.get("snip_edges", True), True),
        "frontend_conf.upsacle_samples": (fe.get("upsacle_samples", True), True),
    }
    for key, (value, served) in checks.items():
        if value != served:
            raise CheckpointError(f"config.yaml: {key}={value!r} is not served (only {served!r})")
    for key in ("lora_list",):
        if enc.get(key) or dec.get(key):
            raise CheckpointError(f"config.yaml: {key} (LoRA layers) is not served")
    if enc.get("interctc_layer_idx"):
        raise CheckpointError("config.yaml: encoder_conf.interctc_layer_idx is not served")
    if fe.get("window", "hamming") not in ("hamming", "povey", "hanning", "rectangular"):
        raise CheckpointError(f"config.yaml: frontend_conf.window={fe.get('window')!r} is not served")
    n_mels, lfr_m = int(fe.get("n_mels", 80)), int(fe.get("lfr_m", 1))
    d_model = int(enc.get("output_size", 256))
    if int(pred.get("idim", d_model)) != d_model:
        raise CheckpointError(f"config.yaml: predictor_conf.idim={pred.get('idim')} != encoder output_size {d_model}")
    seaco = _seaco(raw, model, d_model, vocab_size) if raw["model"] == "SeacoParaformer" else None
    decoder = _decoder(dec, d_model, vocab_size, embed=seaco is not None)
    if online:
        _check_online_decoder(decoder)
    tokenizer = _section(raw, "tokenizer_conf")
    bpe_model = tokenizer.get("bpemodel")
    if bpe_model is not None and not isinstance(bpe_model, str):
        raise CheckpointError(f"config.yaml: tokenizer_conf.bpemodel must be a file name, got {bpe_model!r}")
    return ParaformerConfig(
        encoder=EncoderConfig(
            input_size=n_mels * lfr_m, output_size=d_model, attention_heads=int(enc.get("attention_heads", 4)),
            linear_units=int(enc.get("linear_units", 2048)), num_blocks=int(enc.get("num_blocks", 6)),
            kernel_size=int(enc.get("kernel_size", 11)), sanm_shift=int(enc.get("sanm_shfit", 0)),
        ),
        decoder=decoder,
        predictor=PredictorConfig(
            idim=d_model, l_order=int(pred.get("l_order", 1)), r_order=int(pred.get("r_order", 1)),
            threshold=float(pred.get("threshold", 1.0)), smooth_factor=float(pred.get("smooth_factor", 1.0)),
            noise_threshold=float(pred.get("noise_threshold", 0.0)),
            tail_threshold=float(pred.get("tail_threshold", 0.0)),
        ),
        frontend=FrontendConfig(
            sample_rate=int(fe.get("fs", 16000)), window=str(fe.get("window", "hamming")), n_mels=n_mels,
            frame_length_ms=float(fe.get("frame_length", 25)), frame_shift_ms=float(fe.get("frame_shift", 10)),
            lfr_m=lfr_m, lfr_n=int(fe.get("lfr_n", 1)),
        ),
        blank_id=int(model.get("blank_id", 0)),
        sos=int(model.get("sos", 1) if model.get("sos", 1) is not None else vocab_size - 1),
        eos=int(model.get("eos", 2) if model.get("eos", 2) is not None else vocab_size - 1),
        seaco=seaco,
        online=online,
        bpe_model=bpe_model,
    )


def _check_online_decoder(dec: DecoderConfig) -> None:
    """What FunASR's chunked decoder (`forward_chunk`) does exactly as its offline one, and this
    runtime reproduces: every block cross-attends (FunASR skips a lone FSMN-only block when
    streaming), and the FSMN is causal (no right padding: FunASR's cache would keep the padding
    zeros as history). paraformer-online's released decoder has both (kernel 11, shift 5)."""
    if dec.att_layer_num != dec.num_blocks:
        raise CheckpointError(f"config.yaml: decoder_conf.att_layer_num={dec.att_layer_num} != num_blocks="
                              f"{dec.num_blocks} is not served for {ONLINE_CLASS}")  # fmt: skip
    left = (dec.kernel_size - 1) // 2 + max(dec.sanm_shift, 0)
    if left != dec.kernel_size - 1:
        raise CheckpointError(f"config.yaml: decoder_conf.sanm_shfit={dec.sanm_shift} is not served for "
                              f"{ONLINE_CLASS} (only a causal FSMN: {dec.kernel_size - 1 - (dec.kernel_size - 1) // 2})")  # fmt: skip


def _decoder(dec: dict[str, Any], d_model: int, vocab_size: int, embed: bool) -> DecoderConfig:
    kernel = int(dec.get("kernel_size", 21))
    shift = dec.get("sanm_shfit", 0)
    return DecoderConfig(
        d_model=d_model, vocab_size=vocab_size, attention_heads=int(dec.get("attention_heads", 4)),
        linear_units=int(dec.get("linear_units", 2048)), num_blocks=int(dec.get("num_blocks", 6)),
        att_layer_num=int(dec.get("att_layer_num", 6)), kernel_size=kernel,
        # FunASR: a null shift means (kernel - 1) // 2
        sanm_shift=(kernel - 1) // 2 if shift is None else int(shift),
        output_layer=bool(dec.get("use_output_layer", True)), embed=embed,
    )  # fmt: skip


def _seaco(raw: dict[str, Any], model: dict[str, Any], d_model: int, vocab_size: int) -> SeacoConfig:
    if model.get("bias_encoder_type", "lstm") != "lstm":
        raise CheckpointError(f"config.yaml: model_conf.bias_encoder_type={model.get('bias_encoder_type')!r} "
                              "is not served (only 'lstm')")  # fmt: skip
    if int(model.get("inner_dim", 256)) != d_model:
        raise CheckpointError(f"config.yaml: model_conf.inner_dim={model.get('inner_dim')} must equal the "
                              f"encoder output_size {d_model} (hotwords are embedded by the decoder)")  # fmt: skip
    _require(raw, "seaco_decoder", ("ParaformerSANMDecoder",))
    conf = _section(raw, "seaco_decoder_conf")
    if conf.get("use_output_layer", True) or not conf.get("wo_input_layer", False):
        raise CheckpointError("config.yaml: seaco_decoder_conf must have use_output_layer false and "
                              "wo_input_layer true (FunASR's SeACo layout)")  # fmt: skip
    return SeacoConfig(decoder=_decoder(conf, d_model, vocab_size, embed=False),
                       bidirectional=bool(model.get("bias_encoder_bid", False)),
                       no_bias=int(model.get("NO_BIAS", 8377)))  # fmt: skip
