"""A `.nemo` model_config.yaml read into typed records, refusing what the engine does not implement.

Each section is checked against the keys NeMo 3.0 writes for the supported modules: a key we do
not know, or a value we do not implement, is a CheckpointError naming `section.key` (a model that
silently computes something else is worse than one that does not load). Training-only keys
(dropouts, stochastic depth, spec augment, datasets, optimiser) are accepted and ignored; so is
the `decoding` section apart from `max_symbols` and TDT durations, since the engine chooses its
own search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.errors import CheckpointError

Architecture = Literal["rnnt", "ctc", "hybrid"]
AttentionStyle = Literal["regular", "chunked_limited", "chunked_limited_with_rc"]

MODEL_TARGETS: dict[str, Architecture] = {
    "EncDecRNNTBPEModel": "rnnt",
    "EncDecCTCModelBPE": "ctc",
    "EncDecHybridRNNTCTCBPEModel": "hybrid",
}
"""Supported `target` classes (the last dotted component) and what they run."""

_TRAINING_ONLY = {"dropout", "dropout_pre_encoder", "dropout_emb", "dropout_att", "stochastic_depth_drop_prob",
                  "stochastic_depth_mode", "stochastic_depth_start_layer", "att_context_probs"}  # fmt: skip
_PREPROCESSOR_KEYS = {
    "_target_", "sample_rate", "window_size", "window_stride", "n_window_size", "n_window_stride", "window",
    "normalize", "n_fft", "preemph", "features", "lowfreq", "highfreq", "log", "log_zero_guard_type",
    "log_zero_guard_value", "dither", "pad_to", "frame_splicing", "exact_pad", "pad_value", "mag_power", "rng",
    "nb_augmentation_prob", "nb_max_freq", "mel_norm", "use_torchaudio", "stft_exact_pad", "stft_conv",
    "use_grads", "max_duration",
}  # fmt: skip
_ENCODER_KEYS = _TRAINING_ONLY | {
    "_target_", "feat_in", "feat_out", "n_layers", "d_model", "use_bias", "subsampling", "subsampling_factor",
    "subsampling_conv_channels", "subsampling_conv_chunking_factor", "causal_downsampling", "reduction",
    "reduction_position", "reduction_factor", "ff_expansion_factor", "self_attention_model", "n_heads",
    "att_context_size", "att_chunk_context_size", "att_context_style", "xscaling", "untie_biases",
    "pos_emb_max_len", "conv_kernel_size", "conv_norm_type", "conv_context_size", "conv_context_style",
    "global_tokens", "global_tokens_spacing", "global_attn_separate", "use_pytorch_sdpa",
    "use_pytorch_sdpa_backends", "sync_max_audio_length",
}  # fmt: skip
_DECODER_KEYS = {
    "_target_",
    "normalization_mode",
    "random_state_sampling",
    "blank_as_pad",
    "prednet",
    "vocab_size",
}
_PREDNET_KEYS = {"pred_hidden", "pred_rnn_layers", "t_max", "dropout", "forget_gate_bias", "weights_init_scale",
                 "hidden_hidden_bias_scale", "rnn_hidden_size"}  # fmt: skip
_JOINT_KEYS = {"_target_", "log_softmax", "preserve_memory", "fuse_loss_wer", "fused_batch_size", "jointnet",
               "num_classes", "num_extra_outputs", "vocabulary", "experimental_fuse_loss_wer", "masking_prob"}  # fmt: skip
_JOINTNET_KEYS = {"joint_hidden", "activation", "dropout", "encoder_hidden", "pred_hidden"}
_CTC_KEYS = {"_target_", "feat_in", "num_classes", "vocabulary", "init_mode", "add_blank"}

RNNT_DECODER = "nemo.collections.asr.modules.RNNTDecoder"
RNNT_JOINT = "nemo.collections.asr.modules.RNNTJoint"
CONFORMER = "nemo.collections.asr.modules.ConformerEncoder"
MEL = "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor"
CTC_DECODER = "nemo.collections.asr.modules.ConvASRDecoder"


@dataclass(frozen=True)
class MelConfig:
    sample_rate: int
    """Hz."""
    win_length: int
    """Samples per analysis window (25 ms = 400 at 16 kHz)."""
    hop_length: int
    """Samples between frames (10 ms = 160 at 16 kHz)."""
    n_fft: int
    n_mels: int
    preemph: float | None
    per_feature: bool
    """Normalise each mel bin over the frames of the input (the whole utterance, or the window)."""
    log_guard_type: Literal["add", "clamp"]
    log_guard_value: float | str
    mag_power: float
    pad_value: float
    """What frames past the signal's length are filled with."""


@dataclass(frozen=True)
class EncoderConfig:
    feat_in: int
    n_layers: int
    d_model: int
    n_heads: int
    ff_expansion_factor: int
    subsampling: Literal["dw_striding", "striding"]
    subsampling_factor: int
    subsampling_conv_channels: int
    causal_downsampling: bool
    att_context_style: AttentionStyle
    att_context_sizes: tuple[tuple[int, ...], ...]
    """Trained [left, right] look-aheads in encoder frames, the default first (one [-1, -1, -1]
    for chunked_limited_with_rc, whose windows come from `att_chunk_context_size`)."""
    att_chunk_context_size: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None
    """chunked_limited_with_rc: the trained left, chunk and right choices in encoder frames."""
    xscaling: bool
    untie_biases: bool
    conv_kernel_size: int
    conv_norm_type: Literal["batch_norm", "layer_norm"]
    conv_context: tuple[int, int]
    """Frames the depthwise convolution sees left and right of each frame."""
    use_bias: bool

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def streaming(self) -> bool:
        return self.att_context_style == "chunked_limited"


@dataclass(frozen=True)
class TransducerConfig:
    vocab_size: int
    """Tokens without blank; blank = vocab_size."""
    pred_hidden: int
    pred_rnn_layers: int
    joint_hidden: int
    activation: Literal["relu", "tanh", "sigmoid"]
    durations: tuple[int, ...]
    """TDT duration choices (empty for a plain RNN-T)."""
    max_symbols: int
    """Most tokens greedy decoding emits on one encoder frame."""
    beam_max_symbols: int = 10
    """Most labels one hypothesis of the beam search emits on one frame (`decoding.beam.max_symbols`,
    NeMo's malsd_batch default 10)."""


@dataclass(frozen=True)
class ModelConfig:
    architecture: Architecture
    mel: MelConfig
    encoder: EncoderConfig
    transducer: TransducerConfig | None
    ctc_classes: int | None
    """Outputs of the CTC head (vocabulary + blank), None without one."""
    tokenizer_model: str
    """The config's reference to the SentencePiece model ('nemo:<hash>_tokenizer.model')."""


def _check_keys(section: str, cfg: dict[str, Any], known: set[str]) -> None:
    for key in cfg:
        if key not in known:
            raise CheckpointError(
                f"unsupported config key {section}.{key} (not implemented by the nemo family)"
            )


def _require(section: str, key: str, value: object, allowed: tuple[object, ...]) -> None:
    if value not in allowed:
        raise CheckpointError(
            f"unsupported config value {section}.{key}={value!r} (supported: {', '.join(map(repr, allowed))})"
        )


def _section(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    value = cfg.get(name)
    if not isinstance(value, dict):
        raise CheckpointError(f"config section {name!r} is missing")
    return value


def parse_config(cfg: dict[str, Any]) -> ModelConfig:
    architecture = _architecture(cfg)
    encoder = _encoder(_section(cfg, "encoder"))
    mel = _mel(_section(cfg, "preprocessor"))
    if encoder.feat_in != mel.n_mels:
        raise CheckpointError(
            f"encoder.feat_in={encoder.feat_in} differs from preprocessor.features={mel.n_mels}"
        )
    transducer = _transducer(cfg) if architecture in ("rnnt", "hybrid") else None
    ctc_classes = None
    if architecture == "ctc":
        ctc_classes = _ctc(_section(cfg, "decoder"), "decoder")
    elif architecture == "hybrid":
        ctc_classes = _ctc(_section(_section(cfg, "aux_ctc"), "decoder"), "aux_ctc.decoder")
    tokenizer = _section(cfg, "tokenizer")
    _require("tokenizer", "type", tokenizer.get("type"), ("bpe",))
    model_path = tokenizer.get("model_path")
    if not isinstance(model_path, str):
        raise CheckpointError(
            "tokenizer.model_path is missing: the checkpoint carries no SentencePiece model"
        )
    return ModelConfig(architecture, mel, encoder, transducer, ctc_classes, model_path)


def _architecture(cfg: dict[str, Any]) -> Architecture:
    target = cfg.get("target")
    if target is None:  # older exports: infer from the sections
        return "hybrid" if "aux_ctc" in cfg and "joint" in cfg else "rnnt" if "joint" in cfg else "ctc"
    name = str(target).rsplit(".", 1)[-1]
    if name not in MODEL_TARGETS:
        raise CheckpointError(
            f"unsupported config value target={target!r} (supported: {', '.join(sorted(MODEL_TARGETS))})"
        )
    return MODEL_TARGETS[name]


def _mel(p: dict[str, Any]) -> MelConfig:
    _check_keys("preprocessor", p, _PREPROCESSOR_KEYS)
    _require("preprocessor", "_target_", p.get("_target_"), (MEL,))
    rate = int(p.get("sample_rate", 16000))
    win = p.get("n_window_size") or int(float(p.get("window_size", 0.02)) * rate)
    hop = p.get("n_window_stride") or int(float(p.get("window_stride", 0.01)) * rate)
    normalize = p.get("normalize", "per_feature")
    if normalize not in ("per_feature", "NA", "None", None, ""):
        _require("preprocessor", "normalize", normalize, ("per_feature", "NA"))
    for key, value in (("log", True), ("frame_splicing", 1), ("exact_pad", False), ("stft_exact_pad", False),
                       ("stft_conv", False)):  # fmt: skip
        if key in p:
            _require("preprocessor", key, p[key], (value,))
    guard_type = p.get("log_zero_guard_type", "add")
    _require("preprocessor", "log_zero_guard_type", guard_type, ("add", "clamp"))
    guard = p.get("log_zero_guard_value", 2**-24)
    if isinstance(guard, str):
        _require("preprocessor", "log_zero_guard_value", guard, ("tiny", "eps"))
    else:
        guard = float(guard)
    preemph = p.get("preemph", 0.97)
    return MelConfig(
        sample_rate=rate, win_length=int(win), hop_length=int(hop),
        n_fft=int(p.get("n_fft") or 2 ** (int(win) - 1).bit_length()), n_mels=int(p.get("features", 64)),
        preemph=None if preemph is None else float(preemph), per_feature=normalize == "per_feature",
        log_guard_type=guard_type, log_guard_value=guard, mag_power=float(p.get("mag_power", 2.0)),
        pad_value=float(p.get("pad_value", 0.0)),
    )  # fmt: skip


def _encoder(e: dict[str, Any]) -> EncoderConfig:
    _check_keys("encoder", e, _ENCODER_KEYS)
    _require("encoder", "_target_", e.get("_target_"), (CONFORMER,))
    _require("encoder", "self_attention_model", e.get("self_attention_model", "rel_pos"), ("rel_pos",))
    subsampling = e.get("subsampling", "striding")
    _require("encoder", "subsampling", subsampling, ("dw_striding", "striding"))
    factor = int(e.get("subsampling_factor", 4))
    _require("encoder", "subsampling_factor", factor, (2, 4, 8, 16))
    if e.get("reduction") or int(e.get("reduction_factor") or 1) > 1:
        raise CheckpointError(f"unsupported config value encoder.reduction={e.get('reduction')!r}")
    if int(e.get("feat_out", -1)) not in (-1, int(e["d_model"])):
        raise CheckpointError(
            f"unsupported config value encoder.feat_out={e['feat_out']!r} (an output projection)"
        )
    if int(e.get("global_tokens", 0)):
        raise CheckpointError("unsupported config value encoder.global_tokens (local attention)")
    style = e.get("att_context_style", "regular")
    _require("encoder", "att_context_style", style, ("regular", "chunked_limited", "chunked_limited_with_rc"))
    norm = e.get("conv_norm_type", "batch_norm")
    _require("encoder", "conv_norm_type", norm, ("batch_norm", "layer_norm"))
    kernel = int(e.get("conv_kernel_size", 31))
    conv_context = e.get("conv_context_size")
    if conv_context is None:
        context = ((kernel - 1) // 2, (kernel - 1) // 2)
    elif conv_context == "causal":
        context = (kernel - 1, 0)
    elif isinstance(conv_context, list) and len(conv_context) == 2 and sum(conv_context) + 1 == kernel:
        context = (int(conv_context[0]), int(conv_context[1]))
    else:
        raise CheckpointError(f"unsupported config value encoder.conv_context_size={conv_context!r}")
    sizes = e.get("att_context_size") or [-1, -1]
    sizes = [sizes] if isinstance(sizes[0], int) else sizes
    chunk_ctx = e.get("att_chunk_context_size")
    if style == "chunked_limited_with_rc":
        sizes = [[-1, -1, -1]]
        if chunk_ctx is not None and (
            len(chunk_ctx) != 3 or not all(isinstance(c, list) and c for c in chunk_ctx)
        ):
            raise CheckpointError(f"unsupported config value encoder.att_chunk_context_size={chunk_ctx!r}")
    elif chunk_ctx is not None:
        raise CheckpointError(
            "unsupported config key encoder.att_chunk_context_size (only with chunked_limited_with_rc)"
        )
    if style == "chunked_limited":
        for left, right in sizes:
            if right < 0 or (left > 0 and left % (right + 1)):
                raise CheckpointError(f"unsupported config value encoder.att_context_size={sizes!r}")
    return EncoderConfig(
        feat_in=int(e["feat_in"]), n_layers=int(e["n_layers"]), d_model=int(e["d_model"]),
        n_heads=int(e.get("n_heads", 4)), ff_expansion_factor=int(e.get("ff_expansion_factor", 4)),
        subsampling=subsampling, subsampling_factor=factor,
        subsampling_conv_channels=int(e.get("subsampling_conv_channels", -1) if e.get("subsampling_conv_channels", -1) != -1 else e["d_model"]),
        causal_downsampling=bool(e.get("causal_downsampling", False)), att_context_style=style,
        att_context_sizes=tuple(tuple(int(v) for v in s) for s in sizes),
        att_chunk_context_size=None if chunk_ctx is None else tuple(tuple(int(v) for v in c) for c in chunk_ctx),  # type: ignore[arg-type]
        xscaling=bool(e.get("xscaling", True)), untie_biases=bool(e.get("untie_biases", True)),
        conv_kernel_size=kernel, conv_norm_type=norm, conv_context=context, use_bias=bool(e.get("use_bias", True)),
    )  # fmt: skip


def _transducer(cfg: dict[str, Any]) -> TransducerConfig:
    decoder, joint = _section(cfg, "decoder"), _section(cfg, "joint")
    _check_keys("decoder", decoder, _DECODER_KEYS)
    _require("decoder", "_target_", decoder.get("_target_"), (RNNT_DECODER,))
    _require("decoder", "normalization_mode", decoder.get("normalization_mode"), (None,))
    _require("decoder", "blank_as_pad", decoder.get("blank_as_pad", True), (True,))
    prednet = _section(decoder, "prednet")
    _check_keys("decoder.prednet", prednet, _PREDNET_KEYS)
    if int(prednet.get("rnn_hidden_size", -1)) > 0:
        raise CheckpointError("unsupported config key decoder.prednet.rnn_hidden_size (projected LSTM)")
    _check_keys("joint", joint, _JOINT_KEYS)
    _require("joint", "_target_", joint.get("_target_"), (RNNT_JOINT,))
    jointnet = _section(joint, "jointnet")
    _check_keys("joint.jointnet", jointnet, _JOINTNET_KEYS)
    activation = str(jointnet.get("activation", "relu")).lower()
    _require("joint.jointnet", "activation", activation, ("relu", "tanh", "sigmoid"))
    loss = cfg.get("loss") or {}
    loss_name = loss.get("loss_name", "default")
    _require("loss", "loss_name", loss_name, ("default", "tdt"))
    decoding = cfg.get("decoding") or {}
    durations: tuple[int, ...] = ()
    if loss_name == "tdt" or decoding.get("model_type") == "tdt":
        raw = decoding.get("durations") or (loss.get("tdt_kwargs") or {}).get("durations")
        if not raw:
            raise CheckpointError("a TDT model without decoding.durations")
        durations = tuple(int(d) for d in raw)
        if int(joint.get("num_extra_outputs", 0)) != len(durations):
            raise CheckpointError(f"joint.num_extra_outputs differs from the {len(durations)} TDT durations")
    elif int(joint.get("num_extra_outputs", 0)):
        raise CheckpointError("unsupported config key joint.num_extra_outputs (extra outputs without TDT)")
    greedy = decoding.get("greedy") or {}
    max_symbols = greedy.get("max_symbols", greedy.get("max_symbols_per_step", 10))
    beam = decoding.get("beam") or {}
    return TransducerConfig(
        vocab_size=int(decoder["vocab_size"]), pred_hidden=int(prednet["pred_hidden"]),
        pred_rnn_layers=int(prednet.get("pred_rnn_layers", 1)), joint_hidden=int(jointnet["joint_hidden"]),
        activation=activation, durations=durations, max_symbols=int(max_symbols or 10),  # type: ignore[arg-type]
        beam_max_symbols=int(beam.get("max_symbols") or 10),
    )  # fmt: skip


def _ctc(d: dict[str, Any], section: str) -> int:
    _check_keys(section, d, _CTC_KEYS)
    _require(section, "_target_", d.get("_target_"), (CTC_DECODER,))
    return int(d["num_classes"]) + 1
