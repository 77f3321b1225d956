// Row-wise int8 quantisation around an int32 GEMM (engine/models/whisper/int8.py), each in one
// pass over memory instead of torch's four or five elementwise ops: measured to take three times
// the GEMM's own time in the int8 encoder of tiny.en on a CPU (py-spy, benchmarks/offline.py).
// The arithmetic is the reference's, in its order (engine/ops/int8_rows.py), so results are
// bitwise equal: a float32 division, round half to even, then float32 products and the bias.
// CPU only: the engine's int8 path is for CPUs.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "common.h"

namespace oasr::int8_rows {

namespace {

constexpr float kActivationMax = 127.f;
constexpr float kMinScale = 1e-12f;
constexpr int64_t kRowsPerTask = 16;

// Round half to even of |v| <= 2^22, as torch.round: adding and taking back 1.5 * 2^23 leaves
// no fraction bits, so the float addition rounds in the current (nearest-even) mode. Plain
// arithmetic vectorizes; std::nearbyint is a libm call per element without SSE4.1.
inline float round_half_even(float v) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23
  return (v + kShift) - kShift;
}

// The row loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time:
// the extension is built for any x86-64, and at SSE2 width these loops cost more than the int8
// GEMM they feed (measured: 6x torch's own AVX-512 elementwise ops). Every lane computes what
// the scalar code would, so the clones agree bit for bit.
#if defined(__x86_64__) && defined(__GNUC__)
#define OASR_ROW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OASR_ROW_KERNEL
#endif

// Out is int8_t (q) or uint8_t (q + 128: the unsigned activations of oneDNN's AMX int8 matmul,
// engine/models/whisper/int8.py); q is the same either way.
template <typename Out>
OASR_ROW_KERNEL
void quantize_row(const float* __restrict row, Out* __restrict out, float* __restrict scale, int64_t K) {
  constexpr int32_t offset = std::is_same_v<Out, uint8_t> ? 128 : 0;
  // the peak |x| compared as integers: non-negative floats order like their bit patterns, and an
  // integer max reduction vectorizes where a float one (NaN rules) does not; NaN still wins
  int32_t peak_bits = 0;
  for (int64_t k = 0; k < K; ++k) {
    int32_t bits;
    std::memcpy(&bits, row + k, sizeof bits);
    bits &= 0x7fffffff;
    peak_bits = bits > peak_bits ? bits : peak_bits;
  }
  float peak;
  std::memcpy(&peak, &peak_bits, sizeof peak);
  const float s = std::fmax(peak, kMinScale) / kActivationMax;
  *scale = s;
  for (int64_t k = 0; k < K; ++k) out[k] = static_cast<Out>(static_cast<int32_t>(round_half_even(row[k] / s)) + offset);
}

// Acc is int32_t (torch._int_mm) or float (oneDNN's int8 matmul with float32 output, whose sums are
// integers below 2^24, so the conversion below is exact either way).
template <typename Acc>
OASR_ROW_KERNEL
void dequantize_row(const Acc* __restrict row, float s, const float* __restrict col_scale,
                    const float* __restrict bias, float* __restrict out, int64_t N) {
  if (bias != nullptr) {
    for (int64_t n = 0; n < N; ++n) {
      const float scaled = static_cast<float>(row[n]) * s * col_scale[n];  // the reference's order
      out[n] = scaled + bias[n];
    }
  } else {
    for (int64_t n = 0; n < N; ++n) out[n] = static_cast<float>(row[n]) * s * col_scale[n];
  }
}

template <typename Out>
std::tuple<at::Tensor, at::Tensor> quantize_rows_as(const at::Tensor& x, const char* op) {
  check_arg(op, "x", x, at::kFloat, {-1, -1}, at::Device(at::kCPU));
  const at::Tensor in = x.contiguous();
  const int64_t M = in.size(0), K = in.size(1);
  at::Tensor q = at::empty({M, K}, in.options().dtype(std::is_same_v<Out, uint8_t> ? at::kByte : at::kChar));
  at::Tensor scale = at::empty({M, 1}, in.options());
  const float* src = in.data_ptr<float>();
  Out* dst = q.data_ptr<Out>();
  float* sc = scale.data_ptr<float>();
  at::parallel_for(0, M, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) quantize_row(src + r * K, dst + r * K, sc + r, K);
  });
  return {q, scale};
}

std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x) {
  return quantize_rows_as<int8_t>(x, "oasr::quantize_rows");
}

std::tuple<at::Tensor, at::Tensor> quantize_rows_u8(const at::Tensor& x) {
  return quantize_rows_as<uint8_t>(x, "oasr::quantize_rows_u8");
}

at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& row_scale, const at::Tensor& col_scale,
                           const c10::optional<at::Tensor>& bias) {
  constexpr const char* op = "oasr::dequantize_rows";
  const at::Device cpu(at::kCPU);
  TORCH_CHECK(acc.scalar_type() == at::kInt || acc.scalar_type() == at::kFloat, op,
              ": acc must be Int or Float, got ", acc.scalar_type());
  check_arg(op, "acc", acc, acc.scalar_type(), {-1, -1}, cpu);
  const int64_t M = acc.size(0), N = acc.size(1);
  check_arg(op, "row_scale", row_scale, at::kFloat, {M, 1}, cpu);
  check_arg(op, "col_scale", col_scale, at::kFloat, {N}, cpu);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) check_arg(op, "bias", *bias, at::kFloat, {N}, cpu);
  const at::Tensor a = acc.contiguous(), rs = row_scale.contiguous(), cs = col_scale.contiguous();
  const at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor out = at::empty({M, N}, a.options().dtype(at::kFloat));
  const float* rsp = rs.data_ptr<float>();
  const float* csp = cs.data_ptr<float>();
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* dst = out.data_ptr<float>();
  AT_DISPATCH_SWITCH(a.scalar_type(), op,
    AT_DISPATCH_CASE(at::kInt, [&] {
      const int32_t* src = a.data_ptr<int32_t>();
      at::parallel_for(0, M, kRowsPerTask, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) dequantize_row(src + r * N, rsp[r], csp, bp, dst + r * N, N);
      });
    })
    AT_DISPATCH_CASE(at::kFloat, [&] {
      const float* src = a.data_ptr<float>();
      at::parallel_for(0, M, kRowsPerTask, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) dequantize_row(src + r * N, rsp[r], csp, bp, dst + r * N, N);
      });
    }));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(oasr, CPU, m) {
  m.impl("quantize_rows", &quantize_rows);
  m.impl("quantize_rows_u8", &quantize_rows_u8);
  m.impl("dequantize_rows", &dequantize_rows);
}

}  // namespace oasr::int8_rows
