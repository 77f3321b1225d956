"""A checkpoint directory becomes the PyTorch model the runner steps: loaded, checked, moved to
its device and float type, and (int8_w8a8, or 'auto' on a CPU with int8 dot-product instructions
whose int8 GEMM is exact at 8 bits: engine/quantization.py `decide_quantization`) quantized, except the layers the quantization object's `ignore` globs
keep in full precision. A checkpoint quantized ahead of time (`oasr quantize`, native.py) is
served as written: its int8 layers are built from the stored weights, with no rounding at load."""

from __future__ import annotations

import dataclasses
import logging

import torch

from engine.config import EngineConfig
from engine.cpu_facts import host_cpu_facts
from engine.errors import CheckpointError, InvalidRequestError, UnsupportedError
from engine.models.whisper import weights_cache
from engine.models.whisper.int8 import (
    Int8Linear,
    int8_gemm_kind,
    linear_layer_paths,
    quantize_linear_layers,
    serve_few_rows,
    weight_max,
)
from engine.models.whisper.loader import LoadedCheckpoint, detect_format, load_checkpoint
from engine.models.whisper.model import DecoderBlock, Whisper, sinusoids
from engine.models.whisper.native import NativeQuantization
from engine.ops.half_kv_attention import half_kv_kernel
from engine.quantization import (
    MODULE_TYPES,
    ONLINE_SCHEMES,
    QuantizationConfig,
    QuantizationDecision,
    decide_quantization,
)

logger = logging.getLogger(__name__)


def build_model(ckpt_dir: str, config: EngineConfig, device: torch.device,
                dtype: torch.dtype) -> tuple[Whisper, LoadedCheckpoint, QuantizationDecision]:
    quantization = config.quantization_config()
    check_module_types(quantization)
    ckpt = _read_checkpoint(ckpt_dir, config.checkpoint_name)
    if ckpt.quantization is not None:
        decision = decide_prequantized(ckpt.quantization, quantization, device, ckpt_dir)
    else:
        decision = decide_layer_scheme(quantization, device)
    transposed = ckpt.state_dict.pop(weights_cache.TRANSPOSED_EMBEDDING, None)
    model = _holding(ckpt, ckpt_dir)
    model.eval().requires_grad_(False)
    model = model.to(device, dtype)
    attention = encoder_attention_dtype(decision, device, dtype)
    if attention is not None:
        for block in model.encoder.blocks:
            block.attn.attention_dtype = attention
        decision = dataclasses.replace(decision, reason=f"{decision.reason}; encoder self-attention in bfloat16 "
                                                         "(amx_bf16, 'auto' only)")
    logger.info("quantization %s -> %s on %s: %s", decision.asked, decision.scheme, device, decision.reason)
    if decision.scheme == "int8_w8a8" and ckpt.quantization is None:
        quantize_model(model, quantization)
    for block in [*model.encoder.blocks, *model.decoder.blocks]:
        block.attn.fuse_int8_projections()
        if isinstance(block, DecoderBlock):
            block.cross_attn.fuse_int8_projections(with_query=False)  # its queries read other states
    serve_few_rows(model.decoder)  # its steps' few rows: a kernel call each on a VNNI CPU, not oneDNN's overhead
    if device.type == "cpu" and model.decoder.output_projection is None:
        model.decoder.keep_output_weight_transposed(transposed)
    if decision.scheme == "int8_w8a8" and dtype == torch.float32 and half_kv_kernel(device):
        # the int8 path's cross K/V as int8 rows with a scale each (engine/ops/int8_kv.py): a
        # quarter of float32's bytes, which its memory-bound decoder steps read (measured, one
        # query, 16 windows: float32 240, float16 102-147, int8 56 us per window and layer); the
        # float32 path stays the reference's
        model.decoder.cross_kv_dtype = torch.int8
    return model, ckpt, decision


def _read_checkpoint(ckpt_dir: str, checkpoint_name: str | None) -> LoadedCheckpoint:
    """The checkpoint; a CTranslate2 one through the converted-weights cache (weights_cache.py)."""
    if detect_format(ckpt_dir, checkpoint_name) != "ctranslate2":
        return load_checkpoint(ckpt_dir, checkpoint_name)
    cached = weights_cache.load(ckpt_dir)
    if cached is not None and cached.tokenizer_file is not None:
        cached.format = "ctranslate2"
        return cached
    return weights_cache.store(ckpt_dir, load_checkpoint(ckpt_dir, checkpoint_name))


def _holding(ckpt: LoadedCheckpoint, ckpt_dir: str) -> Whisper:
    """The model whose parameters are the checkpoint's tensors themselves: built on the meta
    device, so start-up neither fills the layers with random numbers nor copies the weights in
    (measured on the embedded tiny.en under load: ~2 s of a 5.5 s model build)."""
    with torch.device("meta"):
        model = Whisper(ckpt.dims)
    if ckpt.quantization is not None:
        _hold_int8_layers(model, ckpt.state_dict, ckpt.quantization.weight_max)
    missing, unexpected = model.load_state_dict(ckpt.state_dict, strict=False, assign=True)
    if "encoder.positional_embedding" in missing:  # sinusoids, computed
        missing.remove("encoder.positional_embedding")
        model.encoder.positional_embedding = sinusoids(ckpt.dims.n_audio_ctx, ckpt.dims.n_audio_state)
    if missing or unexpected:
        raise CheckpointError(f"{ckpt_dir}: missing {missing[:5]} unexpected {unexpected[:5]}")
    return model


INT8_WEIGHT_SUFFIX = ".weight_int8"


def _hold_int8_layers(model: Whisper, state_dict: dict[str, torch.Tensor], weight_bound: int) -> None:
    """Put an Int8Linear over the stored int8 weights wherever the state dict has them (a checkpoint
    from `oasr quantize`), in place of the float layer; nothing is rounded here."""
    for key in [k for k in state_dict if k.endswith(INT8_WEIGHT_SUFFIX)]:
        path = key.removesuffix(INT8_WEIGHT_SUFFIX)
        parent_path, _, name = path.rpartition(".")
        layer = Int8Linear.from_quantized(state_dict[key], state_dict[f"{path}.weight_scale"],
                                          state_dict.get(f"{path}.bias"), weight_bound)
        if path == LOGITS_PATH:
            model.decoder.output_projection = layer
        else:
            if not isinstance(model.get_submodule(path), torch.nn.Linear):
                raise CheckpointError(f"int8 weights for {path!r}, which is not a linear layer of this model")
            setattr(model.get_submodule(parent_path), name, layer)


def decide_prequantized(stored: NativeQuantization, asked: QuantizationConfig, device: torch.device,
                        ckpt_dir: str) -> QuantizationDecision:
    """A checkpoint quantized ahead of time is served as it was written: quantization unset ('auto')
    or naming its scheme follows it; anything else would need the float weights it no longer has,
    so it is refused, as are a device and a CPU that cannot run its int8 weights exactly."""
    if asked.scheme not in ("auto", stored.scheme) or asked.ignore or tuple(asked.module_types) != MODULE_TYPES:
        raise InvalidRequestError(
            f"{ckpt_dir} holds weights quantized ahead of time ({stored.scheme}, by `oasr quantize`): "
            f"quantization={asked.scheme!r}" + (f" ignore={','.join(asked.ignore)}" if asked.ignore else "")
            + " needs the float checkpoint; leave quantization unset to serve this one")
    if device.type != "cpu":
        raise UnsupportedError(f"{ckpt_dir} holds int8 weights ({stored.scheme}), which run on CPU; "
                               f"serve the float checkpoint on {device.type}")
    if stored.weight_max > weight_max():
        raise UnsupportedError(
            f"{ckpt_dir} was quantized with full-range int8 weights (±{stored.weight_max}) for a CPU whose int8 "
            f"GEMM sums them exactly; this CPU's int8 GEMM saturates above ±{weight_max()}: run `oasr quantize` "
            "on this machine, or serve the float checkpoint")
    return QuantizationDecision(asked.scheme, stored.scheme,
                                f"int8 weights (±{stored.weight_max}) quantized ahead of time by `oasr quantize`")


def encoder_attention_dtype(decision: QuantizationDecision, device: torch.device,
                            dtype: torch.dtype) -> torch.dtype | None:
    """bfloat16 for the encoder's self-attention where 'auto' chose int8 on a CPU with AMX-BF16
    tiles, else None (the states' float type). That attention over 1500 positions is ~60 % of a
    window's int8 encode in float32 (12.6 ms a layer, near the cores' float32 peak); torch's
    flash attention in bfloat16 on AMX takes 5.1 ms, a 28 s window 88 -> 58 ms, the 601 s
    long-form recording ~0.6 s of ~5 s, dev-set WER 12.44 % greedy either way (11.94 % with int8
    cross K/V, against 12.44 % in float32). 'auto' only: its numbers depend
    on the CPU's bfloat16 kernel, and an explicit 'int8_w8a8' is the same on every x86 CPU."""
    if decision.asked != "auto" or decision.scheme != "int8_w8a8" or device.type != "cpu" or dtype != torch.float32:
        return None
    return torch.bfloat16 if "amx_bf16" in host_cpu_facts().flags else None


LOGITS_PATH = "decoder.output_projection"
"""Module path of the logits projection (the tied token embedding) for `ignore` globs."""


def quantize_model(model: Whisper, quantization: QuantizationConfig) -> None:
    """int8 every linear layer and the logits projection, except the paths `ignore` keeps."""
    quantization.check_ignore_matches([*linear_layer_paths(model), LOGITS_PATH])
    quantize_linear_layers(model, keep=lambda path: not quantization.quantizes(path, "linear"))
    if quantization.quantizes(LOGITS_PATH, "linear"):
        model.decoder.quantize_output_projection()


def check_module_types(quantization: QuantizationConfig) -> None:
    """Refuse module_types that select none of Whisper's quantizable layers (on every CPU, not
    only where 'auto' picks int8): its GEMMs are linear layers, its two convolutions (kernel 3)
    are not pointwise."""
    if quantization.scheme in ONLINE_SCHEMES and "linear" not in quantization.module_types:
        raise InvalidRequestError(
            f"quantization module_types {','.join(quantization.module_types)} select no layer of a Whisper model "
            "(its GEMMs are linear layers; its convolutions are not pointwise): add 'linear'")


def decide_layer_scheme(quantization: QuantizationConfig, device: torch.device) -> QuantizationDecision:
    """The scheme this model's layers run in, from what the machine is (never a timing: the same
    config on the same machine gives the same transcripts at every start and under any load)."""
    if quantization.scheme == "int8_w8a8" and device.type != "cpu":
        raise InvalidRequestError("quantization='int8_w8a8' runs on CPU; use fp16/bf16 on CUDA")
    cpu = host_cpu_facts()
    # the probe only where its answer can change the decision ('auto' on a CPU with int8 dot
    # products): elsewhere it would run an int8 GEMM at every start for nothing
    exact = (device.type == "cpu" and quantization.scheme == "auto" and cpu.int8_dot_product is not None
             and int8_gemm_kind() == "vnni")
    decision = decide_quantization(quantization.scheme, device.type, cpu, exact)
    if quantization.scheme == "int8_w8a8" and cpu.int8_dot_product is None:
        logger.warning("quantization='int8_w8a8' as asked, but this CPU has no int8 dot-product instructions: "
                       "the int8 layers compute their exact integer sums with float32 GEMMs (same results, "
                       "no speed-up; 'auto' would keep float32)")
    return decision
