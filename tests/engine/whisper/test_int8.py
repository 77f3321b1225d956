"""int8 Whisper: per-row × per-channel int8 linears are exact integer GEMMs within a derived error
bound, independent of batch mates, safe on CPUs without VNNI, and keep the dev-set WER within
half a point of float32."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import sys

import pytest
import torch

from engine.cpu_facts import CpuFacts, host_cpu_facts
from engine.errors import InvalidRequestError
from engine.models.whisper.int8 import (
    ACTIVATION_MAX,
    Int8Linear,
    amx_int8_available,
    fuse_int8_layers,
    int8_gemm_kind,
    int8_kernel,
    quantize_linear_layers,
    serve_few_rows,
    weight_max,
)
from engine.models.whisper.model import Whisper, WhisperDims
from engine.ops.int8_rows import RowsLinear, dequantize_rows, quantize_rows
from tests.conftest import Clip, wer
from tests.paths import REPO

logger = logging.getLogger(__name__)

WER_MARGIN = 0.5  # points: int8 may be at most this much worse than float32 on the dev set


def _error_bound(x: torch.Tensor, layer: Int8Linear, weight: torch.Tensor) -> torch.Tensor:
    """|x·w − x̂·ŵ| ≤ Σ_k |x_k|·Δw/2 + |w_k|·Δx/2 + Δx·Δw/4 per output, where Δx (per row) and Δw
    (per output channel) are the quantization steps; plus the float32 rounding of both sides
    (a K-term sum: at most K·2⁻²⁴ of Σ|x||w|, K = 384)."""
    dx = x.abs().amax(dim=1, keepdim=True) / ACTIVATION_MAX  # (M, 1)
    dw = layer.weight_scale[None, :]  # (1, N)
    k = x.shape[1]
    bound = x.abs() @ torch.ones(k, 1) * dw / 2 + dx / 2 * weight.abs().sum(dim=1)[None, :] + k * dx * dw / 4
    reference = x.abs() @ weight.abs().T
    return bound + 1e-4 * reference + 1e-6


def _run_python(code: str, **env: str) -> str:
    """`code`'s stdout in a fresh interpreter with `env` set (oneDNN reads its settings at load)."""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO), **env},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("qmax", [None, 63], ids=["probed", "7-bit"])
def test_int8_linear_error_is_within_its_quantization_bound(qmax: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if qmax is not None:
        monkeypatch.setattr("engine.models.whisper.int8.weight_max", lambda: qmax)
    torch.manual_seed(0)
    linear = torch.nn.Linear(384, 200)
    x = torch.randn(37, 384) * torch.rand(37, 1) * 4  # rows of very different ranges
    x[3, 7] = 60.0  # an outlier: only its own row's scale may coarsen
    layer = Int8Linear.from_linear(linear)
    with torch.inference_mode():
        got = layer(x)
        want = linear(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert bool(((got - want).abs() <= _error_bound(x, layer, linear.weight.detach())).all())


def test_int8_rows_do_not_depend_on_their_batch_mates() -> None:
    torch.manual_seed(1)
    layer = Int8Linear.from_linear(torch.nn.Linear(384, 1536))
    x = torch.randn(9, 384)
    x[4] *= 50  # a loud row: with a per-tensor activation scale it would coarsen every other row
    with torch.inference_mode():
        together = layer(x)
        alone = torch.cat([layer(x[i : i + 1]) for i in range(9)])
        head = layer(x[:2])
    assert torch.equal(together, alone)
    assert torch.equal(together[:2], head)


@pytest.mark.parametrize(("k", "n"), [(384, 1536), (1536, 384)])
def test_float32_sums_of_int8_products_are_bitwise_the_int8_gemms(monkeypatch: pytest.MonkeyPatch, k: int, n: int) -> None:
    """Where the CPU has no int8 dot products, the layers sum the same int8 products in float32: exact below
    2**24, so the outputs are bitwise those of `torch._int_mm`. Rows loud enough to pass that
    bound (full-scale at K = 1536) go to the int8 GEMM, whatever the CPU."""
    torch.manual_seed(2)
    linear = torch.nn.Linear(k, n)
    layers = {}
    for fast in (True, False):
        facts = CpuFacts("test cpu", frozenset({"avx2", "avx512_vnni"} if fast else {"avx2"}))
        monkeypatch.setattr("engine.models.whisper.int8.host_cpu_facts", lambda facts=facts: facts)
        layers[fast] = Int8Linear.from_linear(linear)
    assert layers[True].weight_as_float is None and layers[False].weight_as_float is not None
    assert "exact integer sums" in repr(layers[False])
    x = torch.randn(64, k) * torch.rand(64, 1) * 8
    loud = torch.ones(2, k)  # every activation at ±127 after quantization
    with torch.inference_mode():
        for rows in (x, x[:1], loud):
            assert torch.equal(layers[False](rows), layers[True](rows))
    q = torch.full((1, k), ACTIVATION_MAX, dtype=torch.int8)
    assert layers[False]._sums_exact_in_float(q) is (k == 384)


def test_the_probed_kernel_sums_full_range_products_exactly() -> None:
    kind = int8_gemm_kind()
    assert kind in ("vnni", "no-vnni")
    assert int8_kernel() in (kind, "amx")
    q = weight_max()
    x = torch.full((3, 512), ACTIVATION_MAX, dtype=torch.int8)
    w = torch.full((512, 8), q, dtype=torch.int8)
    assert bool((torch._int_mm(x, w) == ACTIVATION_MAX * q * 512).all()), kind


def test_without_vnni_the_weights_narrow_and_sums_stay_exact() -> None:
    """oneDNN limited to AVX2 (or AVX-512 without VNNI) saturates full-range int8 pair sums on
    Intel; the probe must see that and choose 7-bit weights, whose products it sums exactly. Other
    CPUs' int8 GEMM sums full-range products exactly under that limit too (AMD EPYC Zen 3, AVX2
    only: MKL's generic int8 path), and may keep 8-bit weights: either way a layer's sums are exact."""
    code = (
        "import torch\n"
        "from engine.models.whisper.int8 import int8_gemm_kind, weight_max, Int8Linear\n"
        "torch.manual_seed(0)\n"
        "lin = torch.nn.Linear(384, 64)\n"
        "x = torch.randn(5, 384)\n"
        "layer = Int8Linear.from_linear(lin)\n"
        "ref = (torch.round(x / (x.abs().amax(1, keepdim=True) / 127)).double()"
        " @ layer.weight_int8.double().T).round()\n"
        "q = torch.round(x / (x.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127)).to(torch.int8)\n"
        "exact = torch.equal(torch._int_mm(q, layer.weight_int8.t()).double(), ref)\n"
        "print(int8_gemm_kind(), weight_max(), exact)\n"
    )
    stdout = _run_python(code, ONEDNN_MAX_CPU_ISA="AVX2")
    kind, qmax, exact = stdout.split()
    assert (kind, qmax) in (("no-vnni", "63"), ("vnni", "127")), stdout
    assert exact == "True", stdout


needs_amx = pytest.mark.skipif(not amx_int8_available(), reason="no amx_int8 (or no exact oneDNN int8 matmul) here")


@needs_amx
@pytest.mark.parametrize(("k", "n"), [(384, 1536), (1536, 384)])
def test_amx_layers_are_bitwise_the_int8_gemm(k: int, n: int) -> None:
    """oneDNN's AMX matmul sums offset activations and takes the offset back in float32: exact
    integers while the layer's 255·Σ|w| stays below 2**24, which is checked per layer at load. A
    layer within it gives `torch._int_mm`'s bits for any input, loud rows included; one beyond
    it keeps `torch._int_mm`."""
    torch.manual_seed(4)
    weight = torch.randn(n, k) * 0.05
    weight[:, 0] = 1.0  # an outlier column: per-channel scales put the rest well inside the range
    layer = Int8Linear(weight, torch.randn(n))
    assert layer.weight_packed is not None and "kernel=amx" in repr(layer)
    x = torch.randn(300, k) * torch.rand(300, 1) * 8
    loud = torch.ones(2, k)
    loud[1, ::2] = -1.0  # every activation at ±127 after quantization
    with torch.inference_mode():
        for rows in (x, x[:1], x[:16], loud):
            amx = layer(rows)
            packed, layer.weight_packed = layer.weight_packed, None
            assert torch.equal(amx, layer(rows))  # torch._int_mm
            layer.weight_packed = packed
    dense = Int8Linear(torch.rand(n, k) + 0.5, None)  # every weight near the range: 255·Σ|w| > 2**24 at K = 1536
    assert (dense.weight_packed is None) is (k == 1536)


needs_vnni_rows = pytest.mark.skipif(RowsLinear.for_weight(torch.zeros(16, 4, dtype=torch.int8), torch.ones(16), None)
                                     is None, reason="no AVX-512 VNNI (or no compiled kernels) here")


@needs_vnni_rows
@pytest.mark.parametrize(("k", "n"), [(384, 1152), (1536, 384), (40, 80)])
def test_few_rows_kernel_is_bitwise_the_int8_gemm(k: int, n: int) -> None:
    """A decoder step's few rows in one VNNI kernel call: the same integer sums (u8 activations,
    the offset's 128·Σw taken back in int32) and the same dequantization as the GEMM paths, for
    every row count it serves, loud rows (every activation at ±127) and a layer without bias
    included; more rows than it serves take the GEMM."""
    torch.manual_seed(5)
    weight = torch.randn(n, k) * 0.05
    weight[:, 0] = 1.0
    for bias in (torch.randn(n), None):
        layer = Int8Linear(weight, bias)
        layer.serve_few_rows()
        assert layer.rows_linear is not None
        loud = torch.ones(2, k)
        loud[1, ::2] = -1.0
        x = torch.randn(RowsLinear.MAX_ROWS + 3, k) * torch.rand(RowsLinear.MAX_ROWS + 3, 1) * 8
        with torch.inference_mode():
            for rows in (*(x[:m] for m in range(1, RowsLinear.MAX_ROWS + 1)), loud, x[:5].reshape(1, 5, k)):
                few = layer(rows)
                kernel, layer.rows_linear = layer.rows_linear, None
                q, scale = quantize_rows(rows.reshape(-1, k))
                gemm = dequantize_rows(torch._int_mm(q, layer.weight_int8.t()), scale, layer.weight_scale, layer.bias)
                assert torch.equal(few, layer(rows)) and torch.equal(few.reshape(-1, n), gemm)
                layer.rows_linear = kernel
            # a kernel that forgets the offset: only the calls it serves change
            kernel = layer.rows_linear
            assert kernel is not None
            layer.rows_linear = dataclasses.replace(kernel, offsets=torch.zeros_like(kernel.offsets))
            many, few = layer(x), layer(x[:2])
            layer.rows_linear = None
            assert torch.equal(many, layer(x)) and not torch.equal(few, layer(x[:2]))


@needs_vnni_rows
def test_only_the_decoders_layers_keep_a_few_rows_copy() -> None:
    """The kernel's packed weight is one more copy: the decoder's layers (steps of a few rows)
    get it, fused projections included; the encoder's (a window's 1500 positions) do not, nor
    does the logits projection (its 51864 columns are not a multiple of 16: oneDNN keeps it)."""
    model = Whisper(WhisperDims(n_mels=80, n_vocab=51864, n_audio_ctx=30, n_audio_state=64, n_audio_head=2,
                                n_audio_layer=1, n_text_ctx=16, n_text_state=64, n_text_head=2, n_text_layer=2))
    quantize_linear_layers(model)
    model.decoder.quantize_output_projection()
    for block in model.decoder.blocks:
        block.attn.fuse_int8_projections()
        block.cross_attn.fuse_int8_projections(with_query=False)
    serve_few_rows(model.decoder)
    decoder_layers = [m for m in model.decoder.modules() if isinstance(m, Int8Linear)
                      and m is not model.decoder.output_projection]
    assert decoder_layers and all(m.rows_linear is not None for m in decoder_layers)
    assert all(b.attn.__dict__["fused_qkv"].rows_linear is not None for b in model.decoder.blocks)
    assert model.decoder.output_projection.rows_linear is None
    assert all(m.rows_linear is None for m in model.encoder.modules() if isinstance(m, Int8Linear))


@needs_vnni_rows
def test_few_rows_ops_have_schemas_and_fake_implementations() -> None:
    weight = torch.randint(-127, 128, (32, 8), dtype=torch.int8)
    rows = RowsLinear.for_weight(weight, torch.rand(32) + 0.1, torch.randn(32))
    assert rows is not None
    torch.library.opcheck(torch.ops.oasr.pack_int8_rows_weight.default, (weight,),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.oasr.int8_linear_rows.default,
                          (torch.randn(3, 8), rows.packed, rows.offsets, rows.col_scale, rows.bias),
                          test_utils=("test_schema", "test_faketensor"))


def test_few_rows_kernel_refuses_bad_input_clearly() -> None:
    if RowsLinear.for_weight(torch.zeros(16, 4, dtype=torch.int8), torch.ones(16), None) is None:
        pytest.skip("no AVX-512 VNNI (or no compiled kernels) here")
    rows = RowsLinear.for_weight(torch.ones(32, 8, dtype=torch.int8), torch.ones(32), None)
    assert rows is not None
    with pytest.raises(RuntimeError, match="int8_linear_rows: w_packed has shape"):
        rows(torch.zeros(2, 12))
    with pytest.raises(RuntimeError, match="int8_linear_rows: x must be Float"):
        rows(torch.zeros(2, 8, dtype=torch.float64))
    assert RowsLinear.for_weight(torch.ones(24, 8, dtype=torch.int8), torch.ones(24), None) is None  # N % 16


def test_fused_projections_are_bitwise_the_separate_layers() -> None:
    """Query, key (no bias) and value as one int8 layer: one quantization and one GEMM, the same bits
    (on whichever kernel this CPU runs), also inside an attention block of the real model."""
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    torch.manual_seed(5)
    linears = [torch.nn.Linear(384, 384, bias=bias) for bias in (True, False, True)]
    layers = [Int8Linear.from_linear(linear) for linear in linears]
    fused = fuse_int8_layers(layers)
    x = torch.randn(3, 50, 384) * torch.rand(3, 50, 1) * 6
    with torch.inference_mode():
        assert torch.equal(fused(x), torch.cat([layer(x) for layer in layers], dim=-1))
    parts = WhisperParts.load(EngineConfig(quantization="int8_w8a8"))
    attn = parts.model.decoder.blocks[0].attn
    assert "fused_qkv" in attn.__dict__ and not any("fused" in key for key in parts.model.state_dict())
    cross = parts.model.decoder.blocks[0].cross_attn.__dict__
    assert "fused_kv" in cross and "fused_qkv" not in cross  # cross-attention's queries read other states
    h = torch.randn(4, 3, 384)
    with torch.inference_mode():
        q, k, v = attn.project_qkv(h)
        assert torch.equal(q, attn.split_heads(attn.query(h)))
        assert torch.equal(k, attn.split_heads(attn.key(h))) and torch.equal(v, attn.split_heads(attn.value(h)))
        k2, v2 = attn.project_kv(h)
        assert torch.equal(k2, k) and torch.equal(v2, v)


@needs_amx
def test_the_amx_tiles_run_under_onednn_verbose() -> None:
    """The int8 layers reach oneDNN's AMX kernel (`torch._int_mm` runs its VNNI gemm_api on the
    same CPU), as oneDNN itself reports it."""
    assert "amx_int8" in host_cpu_facts().flags and int8_kernel() == "amx"
    code = (
        "import torch\n"
        "from engine.models.whisper.int8 import Int8Linear\n"
        "layer = Int8Linear(torch.randn(1536, 384) * 0.05, None)\n"
        "with torch.inference_mode():\n"
        "    layer(torch.randn(64, 384))\n"
    )
    stdout = _run_python(code, ONEDNN_VERBOSE="1")
    matmuls = [line for line in stdout.splitlines() if ",exec," in line and ",matmul," in line and "64x384" in line]
    assert matmuls, stdout[-2000:]
    assert all("amx" in line.split(",")[6] and "src:u8" in line for line in matmuls), matmuls


def test_int8_dev_set_wer_is_within_half_a_point_of_float32(clips: list[Clip]) -> None:
    """Greedy decoding without the temperature fallback, so that both sides decode every clip by
    the model's numbers alone: with the fallback, the few windows that fail at every temperature
    keep a sampled draw (mfa_long: 3 words for 3 reference words, which ones is luck), and one such
    draw moved the corpus WER by 1.5 points between float32 and int8 whose greedy decodes agreed."""
    from engine import ASREngine, EngineConfig
    from engine.types import DecodingOptions

    scored = [c for c in clips if c.duration <= 30.0]
    assert len(scored) >= 20, "the dev set should give a corpus, not a handful of clips"
    refs = [c.text or "" for c in scored]
    texts: dict[str, list[str]] = {}
    for quantization in ("none", "int8_w8a8"):
        eng = ASREngine(EngineConfig(quantization=quantization))  # type: ignore[arg-type]
        try:
            outs = eng.transcribe_outputs([c.audio for c in scored], decoding=DecodingOptions(temperature_fallback=False))
        finally:
            eng.shutdown()
        assert all(o.finish_reason == "stop" for o in outs)
        texts[quantization] = [o.text for o in outs]
    float_wer, int8_wer = wer(refs, texts["none"]), wer(refs, texts["int8_w8a8"])
    logger.info("dev set WER: float32 %.2f%%, int8 %.2f%% (%s kernel)", float_wer, int8_wer, int8_gemm_kind())
    assert int8_wer <= float_wer + WER_MARGIN, (int8_wer, float_wer)
    assert int8_wer < 30.0  # a sanity floor: a broken float32 path cannot make a broken int8 pass


def test_ignore_globs_keep_the_decoder_in_float_and_refuse_a_typo() -> None:
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    parts = WhisperParts.load(EngineConfig(quantization={"scheme": "int8_w8a8", "ignore": "decoder.*"}))
    assert parts.quantization == "int8_w8a8"
    encoder_linears = [m for m in parts.model.encoder.modules() if isinstance(m, (Int8Linear, torch.nn.Linear))]
    assert encoder_linears and all(isinstance(m, Int8Linear) for m in encoder_linears)
    assert not any(isinstance(m, Int8Linear) for m in parts.model.decoder.modules())
    assert parts.model.decoder.output_projection is None  # logits from the float embedding
    with pytest.raises(InvalidRequestError, match=re.escape("'decoder.blocks.9.*' matches no quantizable layer")):
        WhisperParts.load(EngineConfig(quantization={"scheme": "int8_w8a8", "ignore": "decoder.blocks.9.*"}))


@pytest.mark.parametrize("scheme", ["int8_w8a8", "auto"])
def test_module_types_without_linear_are_refused_for_whisper(scheme: str) -> None:
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    config = EngineConfig(quantization={"scheme": scheme, "module_types": "pointwise_conv"})
    with pytest.raises(InvalidRequestError, match="select no layer of a Whisper model"):
        WhisperParts.load(config)


@pytest.mark.auto_quantization
@pytest.mark.parametrize("flags", [{"avx2", "avx512f", "avx512_vnni"}, {"avx2"}])
def test_auto_quantizes_only_on_cpus_with_int8_dot_products(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture, flags: set[str]) -> None:
    """'auto' keeps float32 on a CPU without int8 dot products (MKL's generic int8 path on an AMD
    EPYC Zen 3: exact, ~20x slower); an explicit int8_w8a8 is still served there, with a warning.
    The CPU's flags are set here, so that both kinds of machine are checked on this one."""
    from engine.models.whisper.build import decide_layer_scheme
    from engine.quantization import QuantizationConfig

    vnni = "avx512_vnni" in flags
    monkeypatch.setattr("engine.models.whisper.build.int8_gemm_kind", lambda: "vnni")
    monkeypatch.setattr("engine.models.whisper.build.host_cpu_facts", lambda: CpuFacts("test cpu", frozenset(flags)))
    cpu = torch.device("cpu")
    auto = decide_layer_scheme(QuantizationConfig.parse("auto"), cpu)
    assert (auto.asked, auto.scheme) == ("auto", "int8_w8a8" if vnni else "none")
    assert decide_layer_scheme(QuantizationConfig.parse("none"), cpu).scheme == "none"
    with caplog.at_level(logging.WARNING, logger="engine.models.whisper.build"):
        assert decide_layer_scheme(QuantizationConfig.parse("int8_w8a8"), cpu).scheme == "int8_w8a8"
    assert ("no int8 dot-product instructions" in caplog.text) is not vnni


@pytest.mark.auto_quantization
@pytest.mark.parametrize("flags", [{"avx512_vnni", "amx_int8", "amx_bf16"}, {"avx512_vnni", "avx512_bf16"}])
def test_auto_attends_in_bfloat16_in_the_encoder_only_on_amx_bf16(monkeypatch: pytest.MonkeyPatch,
                                                                  flags: set[str]) -> None:
    """'auto' on a CPU with AMX-BF16 tiles computes the encoder's self-attention in bfloat16 (its
    float32 softmax attention is most of an int8 encode there); an explicit int8_w8a8 never does,
    so that its numbers stay the same on every x86 CPU, and neither does the decoder."""
    from engine.models.whisper.build import encoder_attention_dtype
    from engine.quantization import QuantizationDecision

    monkeypatch.setattr("engine.models.whisper.build.host_cpu_facts", lambda: CpuFacts("test cpu", frozenset(flags)))
    cpu, f32 = torch.device("cpu"), torch.float32
    auto_int8 = QuantizationDecision("auto", "int8_w8a8", "test")
    expected = torch.bfloat16 if "amx_bf16" in flags else None
    assert encoder_attention_dtype(auto_int8, cpu, f32) is expected
    assert encoder_attention_dtype(QuantizationDecision("int8_w8a8", "int8_w8a8", "set explicitly"), cpu, f32) is None
    assert encoder_attention_dtype(QuantizationDecision("auto", "none", "test"), cpu, f32) is None
    assert encoder_attention_dtype(auto_int8, cpu, torch.bfloat16) is None


@pytest.mark.auto_quantization
def test_auto_model_attends_as_its_cpu_decides() -> None:
    """The loaded 'auto' model on this machine: bfloat16 encoder attention exactly where the CPU
    has AMX-BF16 and 'auto' chose int8, said in the reason /v1/models shows; never in the decoder."""
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    parts = WhisperParts.load(EngineConfig())
    expected = torch.bfloat16 if parts.quantization == "int8_w8a8" and "amx_bf16" in host_cpu_facts().flags else None
    assert {b.attn.attention_dtype for b in parts.model.encoder.blocks} == {expected}
    assert all(b.attn.attention_dtype is None and b.cross_attn.attention_dtype is None
               for b in parts.model.decoder.blocks)
    assert ("encoder self-attention in bfloat16" in parts.quantization_reason) is (expected is not None)


def test_bfloat16_attention_is_close_to_float32_and_keeps_the_float_type() -> None:
    """`attend` in bfloat16 returns float32 states within bfloat16's rounding of the float32 result
    (8 bits of mantissa: scores over 64 dims, values averaged), mask included."""
    from engine.models.whisper.model import MultiHeadAttention

    torch.manual_seed(0)
    attn = MultiHeadAttention(64, 2).eval()
    q, k, v = (torch.randn(1, 2, 50, 32) for _ in range(3))
    mask = torch.cat([torch.zeros(40), torch.full((10,), -2.0)]).view(1, 1, 1, -1)
    with torch.inference_mode():
        exact = attn.attend(q, k, v, mask)
        attn.attention_dtype = torch.bfloat16
        half = attn.attend(q, k, v, mask)
    assert half.dtype == torch.float32
    assert (half - exact).abs().max() < 0.05 * exact.abs().max()


def test_bfloat16_encoder_attention_keeps_the_int8_dev_set_wer(clips: list[Clip], monkeypatch: pytest.MonkeyPatch) -> None:
    """The int8 path with the encoder's attention in bfloat16 ('auto' on an AMX-BF16 CPU, set here
    on the int8_w8a8 path so that every CPU runs it) transcribes the dev set within half a point of
    the int8 path's WER (greedy, no fallback: `test_int8_dev_set_wer_is_within_half_a_point_of_float32`)."""
    from engine import ASREngine, EngineConfig
    from engine.types import DecodingOptions

    scored = [c for c in clips if c.duration <= 30.0]
    refs = [c.text or "" for c in scored]
    wers = {}
    for attention in (None, torch.bfloat16):
        monkeypatch.setattr("engine.models.whisper.build.encoder_attention_dtype", lambda *_, kind=attention: kind)
        eng = ASREngine(EngineConfig(quantization="int8_w8a8"))
        try:
            assert {b.attn.attention_dtype for b in eng.runner.parts.model.encoder.blocks} == {attention}
            outs = eng.transcribe_outputs([c.audio for c in scored], decoding=DecodingOptions(temperature_fallback=False))
        finally:
            eng.shutdown()
        wers[attention] = wer(refs, [o.text for o in outs])
    logger.info("dev set WER int8: float32 attention %.2f%%, bfloat16 encoder attention %.2f%%",
                wers[None], wers[torch.bfloat16])
    assert wers[torch.bfloat16] <= wers[None] + WER_MARGIN, wers


def test_bfloat16_encoder_attention_does_not_depend_on_batch_mates() -> None:
    """A window encodes bitwise the same in a batch as alone with the encoder attending in
    bfloat16, as in float32: no transcript depends on what it was batched with."""
    from engine import EngineConfig
    from engine.models.whisper.parts import WhisperParts

    encoder = WhisperParts.load(EngineConfig(quantization="int8_w8a8")).model.encoder
    for block in encoder.blocks:
        block.attn.attention_dtype = torch.bfloat16
    torch.manual_seed(0)
    mels = torch.randn(3, 80, 3000) * 0.5
    with torch.inference_mode():
        together = encoder(mels)
        alone = torch.cat([encoder(mels[i : i + 1]) for i in range(3)])
    assert torch.equal(together, alone)
