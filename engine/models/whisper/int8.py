"""int8 linear layers for the CPU: weights per output channel, activations per row.

`quantize_dynamic` (the eager default) scales weights per tensor and activations per tensor:
one outlier channel coarsens a whole layer, and a row's activation scale depends on the other
rows of the batch, so a request's transcript depended on what it was batched with (measured on
the dev set: int8 WER moved with the batch composition). Here each weight row (output channel)
has its own scale, each activation row (one token of one request) gets its own scale on the
fly, and the product is an exact int32 GEMM (`torch._int_mm`, oneDNN): a row's output depends
on that row only, as CTranslate2's int8 does.

oneDNN computes s8×s8 on CPUs without VNNI with 16-bit intermediate sums that saturate for
full-range weights (measured: wrong sums under ONEDNN_MAX_CPU_ISA=AVX2). `int8_gemm_kind()`
probes the kernel once: where full-range products are exact, weights use [-127, 127];
elsewhere [-63, 63], whose pairwise sums cannot saturate (255 × 63 × 2 < 2**15).

Exact is not fast everywhere: on an AMD EPYC (Zen 3, AVX2, no VNNI) `torch._int_mm` took 27 ms
for a (256, 384) × (384, 384) product that float32 does in 1.3 ms (MKL's int8 GEMM takes a
generic path on that CPU), and the offline dev set ran 7.6x slower at int8 than at float32.
'auto' picks int8 only on CPUs with int8 dot-product instructions (engine/cpu_facts.py: flags,
not a start-up timing, which flipped with the machine's load). Where int8 is asked for anyway on
a CPU without them, the layers compute the same integer sums with
the float32 GEMM: every partial sum of int8 × int8 products is an integer, exact in float32 while
its magnitude stays below 2**24 (always for K ≤ 1040 at full-range weights; checked per call above
that), so the results are bitwise those of `torch._int_mm` at float32's speed, not 20x below it.

On a CPU with AMX (`amx_int8`), `torch._int_mm` still runs oneDNN's VNNI `gemm_api`, not the
tiles. oneDNN's matmul primitive runs them (`brg_matmul:avx10_1_512_amx` under ONEDNN_VERBOSE=1),
reached through `torch.ops.onednn.qlinear_pointwise` over a weight packed once at load: unsigned
activations (q + 128 with zero point 128; signed ones take a path ~100x slower in oneDNN 3.12)
and a float32 output at unit scales, i.e. the integer sum as a float. oneDNN sums the offset
products and subtracts the offset's compensation (128 Σw) in float32, so the result is the exact
integer only while those stay below 2**24: `_amx_sums_exact` checks per layer at load that
255 · Σ|w| of every output channel does (always for K ≤ 518 at full-range weights; tiny.en's
K = 1536 layers pass with their real weights), and a layer that does not keeps `torch._int_mm`.
Either way the int32 sums, and so the layer's outputs, are bitwise those of `torch._int_mm`.
Measured single-threaded on this Xeon (Sapphire Rapids class): (1500, 384) × (384, 1536) 0.85 ms
against 1.80 ms for `torch._int_mm` (float32 8.0, bfloat16 0.84); at 16 rows 0.030 vs 0.033 ms.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from engine.cpu_facts import host_cpu_facts
from engine.ops.int8_rows import (
    ACTIVATION_MAX,
    UNSIGNED_OFFSET,
    RowsLinear,
    dequantize_rows,
    dequantize_rows_reference,
    quantize_rows,
    quantize_rows_u8,
)

FULL_WEIGHT_MAX = 127
SAFE_WEIGHT_MAX = 63  # 7-bit weights: u8 × s8 pair sums stay within int16


@functools.lru_cache(maxsize=1)
def int8_gemm_kind() -> str:
    """'vnni' when the int8 GEMM sums full-range products exactly, else 'no-vnni' (7-bit weights)."""
    for m in (1, 4, 32):  # oneDNN picks gemv-like and blocked kernels by shape
        x = torch.full((m, 256), ACTIVATION_MAX, dtype=torch.int8)
        w = torch.full((256, 16), FULL_WEIGHT_MAX, dtype=torch.int8)
        if not bool((torch._int_mm(x, w) == ACTIVATION_MAX * FULL_WEIGHT_MAX * 256).all()):
            return "no-vnni"
    return "vnni"


FLOAT_EXACT_LIMIT = 2**24  # integers up to this magnitude are exact in float32
UNSIGNED_MAX = ACTIVATION_MAX + UNSIGNED_OFFSET  # the largest offset activation (255)


def _amx_product(q_u8: Tensor, weight_packed: Tensor, ones: Tensor, zero_points: Tensor) -> Tensor:
    """The (M, N) integer sums Σ_k q·w as float32, by oneDNN's int8 matmul (AMX tiles where the CPU
    has them) over offset activations q + 128 (quantize_rows_u8) and a packed weight."""
    out: Tensor = torch.ops.onednn.qlinear_pointwise(q_u8, 1.0, UNSIGNED_OFFSET, weight_packed, ones, zero_points,
                                                     None, 1.0, 0, torch.float32, "none", [], "")
    return out


def _amx_sums_exact(weight_int8: Tensor) -> bool:
    """Whether every sum oneDNN forms for this weight (offset products up to 255·Σ|w| per output
    channel, and the offset's compensation 128·|Σw|) is an integer float32 holds exactly."""
    if weight_int8.numel() == 0:
        return True
    l1 = int(weight_int8.abs().sum(dim=1, dtype=torch.int32).max())
    return UNSIGNED_MAX * l1 < FLOAT_EXACT_LIMIT


@functools.lru_cache(maxsize=1)
def amx_int8_available() -> bool:
    """Whether int8 layers run oneDNN's int8 matmul (its AMX tiles): the CPU has `amx_int8`, this
    torch has the oneDNN ops, and they sum full-range products exactly, as `torch._int_mm` does (a
    correctness probe, never a timing; under ONEDNN_MAX_CPU_ISA=AVX2 u8 × s8 pair sums saturate)."""
    if "amx_int8" not in host_cpu_facts().flags or not torch.backends.mkldnn.is_available():
        return False
    try:
        k, n = 256, 16
        w = torch.full((n, k), FULL_WEIGHT_MAX, dtype=torch.int8)
        w[::2] = -FULL_WEIGHT_MAX
        packed = torch.ops.onednn.qlinear_prepack(w, None)
        ones, zero_points = torch.ones(n), torch.zeros(n, dtype=torch.long)
        for m in (1, 4, 32):  # oneDNN picks kernels by shape
            x = torch.full((m, k), ACTIVATION_MAX, dtype=torch.int8)
            x[1::2, ::3] = -ACTIVATION_MAX
            q_u8 = x.view(torch.uint8) ^ UNSIGNED_OFFSET
            if not torch.equal(_amx_product(q_u8, packed, ones, zero_points), torch._int_mm(x, w.t()).float()):
                return False
    except (AttributeError, RuntimeError):  # a torch without the onednn ops, or a oneDNN that refuses
        return False
    return True


def int8_kernel() -> str:
    """The kernel int8 layers run on this CPU: 'amx' (oneDNN's int8 matmul, AMX tiles), 'vnni'
    (`torch._int_mm`, full-range weights) or 'no-vnni' (7-bit weights)."""
    return "amx" if amx_int8_available() else int8_gemm_kind()


def weight_max() -> int:
    return FULL_WEIGHT_MAX if int8_gemm_kind() == "vnni" else SAFE_WEIGHT_MAX


def quantize_weight(weight: Tensor, qmax: int) -> tuple[Tensor, Tensor]:
    """Round a float (N, K) weight to int8 in [-qmax, qmax] with one scale per output channel:
    the (N, K) int8 weight and its (N,) float32 scales. The only place weights are quantized
    (at load for online int8, or once by `oasr quantize`)."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / qmax  # (N,)
    return torch.round(w / scale[:, None]).clamp(-qmax, qmax).to(torch.int8), scale


class Int8Linear(nn.Module):
    """y = x Wᵀ + b with W stored int8 (N, K) plus a float scale per output channel."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        qmax = weight_max()
        self._hold(*quantize_weight(weight, qmax), bias, qmax)

    @classmethod
    def from_quantized(cls, weight_int8: Tensor, weight_scale: Tensor, bias: Tensor | None,
                       weight_bound: int | None = None) -> Int8Linear:
        """A layer over weights quantized ahead of time (`oasr quantize`): no rounding work here.
        `weight_bound`: the range they were rounded into (an upper bound of max |w|), which spares
        scanning them for it (an int8 abs().max() over tiny.en's layers: ~0.3 s of CPU)."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._hold(weight_int8, weight_scale.float(), bias, weight_bound)
        return layer

    def _hold(self, weight_int8: Tensor, weight_scale: Tensor, bias: Tensor | None,
              weight_bound: int | None = None) -> None:
        if weight_int8.dtype != torch.int8 or weight_int8.dim() != 2 or weight_scale.shape != weight_int8.shape[:1]:
            raise ValueError(f"int8 weight (N, K) with (N,) scales expected, got {weight_int8.dtype} "
                             f"{tuple(weight_int8.shape)} and {tuple(weight_scale.shape)}")
        self.register_buffer("weight_int8", weight_int8)
        self.register_buffer("weight_scale", weight_scale)
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.out_features, self.in_features = weight_int8.shape
        # the int8 weights as float32, for CPUs without int8 dot products (see the module doc); the
        # results are bitwise those of the int8 GEMM either way, so this choice is speed only
        emulate = host_cpu_facts().int8_dot_product is None and torch.get_float32_matmul_precision() == "highest"
        self.register_buffer("weight_as_float", self.weight_int8.float() if emulate else None, persistent=False)
        # oneDNN's packed weight (AMX tiles) where that sums exactly; plain attributes, not buffers:
        # derived from weight_int8, never saved, and opaque to everything but oneDNN
        self.weight_packed: Tensor | None = None
        if not emulate and amx_int8_available() and _amx_sums_exact(weight_int8):
            n = weight_int8.shape[0]
            self.weight_packed = torch.ops.onednn.qlinear_prepack(weight_int8, None)
            self._unit_scales, self._zero_points = torch.ones(n), torch.zeros(n, dtype=torch.long)
        self.rows_linear: RowsLinear | None = None  # see `serve_few_rows`
        # a bound on max |w| for `_sums_exact_in_float`; per-channel rounding puts each nonzero
        # row's largest weight at exactly the range, so the range is the value, not just a bound
        self.weight_int8_max = weight_bound if weight_bound is not None else (
            int(self.weight_int8.abs().max()) if weight_int8.numel() else 0)

    def serve_few_rows(self) -> None:
        """Run calls of up to RowsLinear.MAX_ROWS rows (a decoder step's) in one kernel call on a
        CPU with AVX-512 VNNI, bitwise what the paths below give: oneDNN's matmul costs ~30 us a
        call whatever the rows. Keeps one more copy of the weight (packed for that kernel), so
        only for layers that see few rows (the decoder's)."""
        if self.weight_as_float is None:  # RowsLinear.for_weight checks the device, CPU and shape
            self.rows_linear = RowsLinear.for_weight(self.weight_int8, self.weight_scale, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, self.in_features).float()  # (M, K)
        if rows.shape[0] == 0:
            return x.new_zeros(*lead, self.out_features)
        if self.rows_linear is not None and rows.shape[0] <= RowsLinear.MAX_ROWS:
            return self.rows_linear(rows.contiguous()).reshape(*lead, self.out_features).to(x.dtype)
        acc, row_scale, float_sums = self._sums(rows)
        dequantize = dequantize_rows_reference if float_sums else dequantize_rows
        return dequantize(acc, row_scale, self.weight_scale, self.bias).reshape(*lead, self.out_features).to(x.dtype)

    def integer_sums(self, x: Tensor) -> tuple[Tensor, Tensor] | None:
        """x's rows (M, K) as this layer's exact integer sums (M, N) (int32, or float32 holding
        integers) and their row scales (M, 1): the layer's output is `dequantize_rows` of them with
        `weight_scale` and `bias`. None where a few rows take the one-call kernel (RowsLinear)."""
        rows = x.reshape(-1, self.in_features).float()
        if rows.shape[0] == 0 or (self.rows_linear is not None and rows.shape[0] <= RowsLinear.MAX_ROWS):
            return None
        acc, row_scale, _ = self._sums(rows)
        return acc, row_scale

    def _sums(self, rows: Tensor) -> tuple[Tensor, Tensor, bool]:
        """The exact integer sums of rows (M, K), their row scales, and whether they were summed as
        float32 (dequantized by the torch reference then, the same operations)."""
        if self.weight_packed is not None:
            q_u8, row_scale = quantize_rows_u8(rows.contiguous())
            return _amx_product(q_u8, self.weight_packed, self._unit_scales, self._zero_points), row_scale, False
        q, row_scale = quantize_rows(rows.contiguous())
        if self.weight_as_float is not None and self._sums_exact_in_float(q):
            return q.float() @ self.weight_as_float.t(), row_scale, True  # integers, exactly the int8 GEMM's
        # (N, K) row-major passed transposed: measured faster than a contiguous (K, N) copy
        return torch._int_mm(q, self.weight_int8.t()), row_scale, False  # (M, N) int32, exact

    def _sums_exact_in_float(self, q: Tensor) -> bool:
        """Every partial sum of a row's products is at most Σ|q|·max|w| in magnitude."""
        if ACTIVATION_MAX * self.in_features * self.weight_int8_max < FLOAT_EXACT_LIMIT:
            return True
        return int(q.abs().sum(dim=1, dtype=torch.int32).max()) * self.weight_int8_max < FLOAT_EXACT_LIMIT

    def extra_repr(self) -> str:
        kernel = ("float32 (exact integer sums)" if self.weight_as_float is not None
                  else "amx" if self.weight_packed is not None else int8_gemm_kind())
        return f"in_features={self.in_features}, out_features={self.out_features}, kernel={kernel}"


def serve_few_rows(module: nn.Module) -> None:
    """`Int8Linear.serve_few_rows` for every int8 layer below `module`, the fused projections an
    attention keeps outside the module tree (model.py `fuse_int8_projections`) included."""
    for child in module.modules():
        for layer in (child, *vars(child).values()):
            if isinstance(layer, Int8Linear):
                layer.serve_few_rows()


def fuse_int8_layers(layers: Sequence[Int8Linear]) -> Int8Linear:
    """One int8 layer whose outputs are `layers`' side by side (their weights stacked along N), for
    layers that read the same input (an attention's query, key and value): one activation
    quantization and one GEMM instead of one per layer. Bitwise the layers' own outputs: a row's
    q and scale are the same for each, an output column's integer sum and dequantization depend on
    its own weight channel only, and a layer without bias gets +0.0, which changes no output (a
    dequantized value is never -0.0: its scales are positive and at least 1e-12 / 127 each)."""
    if not layers or any(layer.in_features != layers[0].in_features for layer in layers):
        raise ValueError("fused int8 layers must share their input size")
    biases = [layer.bias if layer.bias is not None else layer.weight_scale.new_zeros(layer.out_features)
              for layer in layers]
    has_bias = any(layer.bias is not None for layer in layers)
    return Int8Linear.from_quantized(torch.cat([layer.weight_int8 for layer in layers]),
                                     torch.cat([layer.weight_scale for layer in layers]),
                                     torch.cat(biases) if has_bias else None,
                                     max(layer.weight_int8_max for layer in layers))


def exact_integer_decoder(decoder: nn.Module) -> bool:
    """Whether every GEMM of a decoder step is an exact int8 one (Int8Linear, int8 logits): its
    numbers then do not depend on the threads it runs on (every other op of a step computes each
    output element on one thread)."""
    linears = [m for m in decoder.modules() if isinstance(m, (nn.Linear, Int8Linear))]
    projection = getattr(decoder, "output_projection", None)
    return (bool(linears) and all(isinstance(m, Int8Linear) for m in linears)
            and isinstance(projection, Int8Linear))


def linear_layer_paths(module: nn.Module) -> list[str]:
    """Module paths of every nn.Linear below `module` (the layers int8 may replace)."""
    return [name for name, child in module.named_modules() if isinstance(child, nn.Linear)]


def quantize_linear_layers(module: nn.Module, keep: Callable[[str], bool] = lambda path: False,
                           prefix: str = "") -> nn.Module:
    """Replace every nn.Linear below `module` by an Int8Linear, except those whose module path
    `keep` accepts (in place; returns `module`)."""
    for name, child in module.named_children():
        path = f"{prefix}{name}"
        if isinstance(child, nn.Linear):
            if not keep(path):
                setattr(module, name, Int8Linear.from_linear(child))
        else:
            quantize_linear_layers(child, keep, f"{path}.")
    return module
