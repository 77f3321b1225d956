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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OASR_ROWS_VNNI 1
#endif

#include "common.h"
#include "row_kernels.h"

namespace oasr::int8_rows {

namespace {

constexpr float kActivationMax = 127.f;
constexpr float kMinScale = 1e-12f;
constexpr int64_t kRowsPerTask = 16;

// Out is int8_t (q) or uint8_t (q + 128: the unsigned activations of oneDNN's AMX int8 matmul,
// engine/models/whisper/int8.py); q is the same either way.
template <typename Out>
OASR_ROW_KERNEL
void quantize_row(const float* __restrict row, Out* __restrict out, float* __restrict scale, int64_t K) {
  constexpr int32_t offset = std::is_same_v<Out, uint8_t> ? 128 : 0;
  const float s = std::fmax(peak_magnitude(row, K), kMinScale) / kActivationMax;  // NaN still wins
  *scale = s;
  for (int64_t k = 0; k < K; ++k) out[k] = static_cast<Out>(static_cast<int32_t>(round_half_even(row[k] / s)) + offset);
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

// ---- A whole int8 linear layer for a few rows (decoder steps, prefills, alignment passes) ----
//
// oneDNN's int8 matmul costs ~30 us a call whatever the rows (80-120 us with quantize and
// dequantize around it, in a loaded engine), while the arithmetic of 16 rows of a 384 x 1536 layer
// is ~2 us on VNNI: at a decoder step's few rows the layer is call overhead. Here one call
// quantizes the rows (quantize_row), sums u8 x s8 products with AVX-512 VNNI into int32 (exact:
// vpdpbusd does not saturate, and |sum| <= 255 * 127 * K) less the offset's 128 * sum(w), and
// dequantizes (dequantize_row): the same integers and the same float operations as the GEMM path,
// so the outputs are bitwise equal to it.

constexpr int64_t kColumnsPerVector = 16;  // int32 sums in a zmm

#ifdef OASR_ROWS_VNNI
#define OASR_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// Rows r0 .. r0 + R of q (u8, K apart) times columns n0 .. n0 + 16 * C of the packed weight
// ((K / 4, N, 4) int8: four consecutive k of a column in one int32 lane), into acc (N apart).
template <int R, int C>
OASR_VNNI void dot_block(const uint8_t* q, int64_t K, const int8_t* w, int64_t N, const int32_t* w_offsets, int64_t n0,
                         int32_t* acc) {
  __m512i sums[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_si512();
  }
  for (int64_t g = 0; g < K / 4; ++g) {
    __m512i cols[C];
    for (int c = 0; c < C; ++c) {
      cols[c] = _mm512_loadu_si512(w + (g * N + n0 + c * kColumnsPerVector) * 4);
    }
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, q + r * K + g * 4, sizeof four);
      const __m512i a = _mm512_set1_epi32(four);
      for (int c = 0; c < C; ++c) sums[r][c] = _mm512_dpbusd_epi32(sums[r][c], a, cols[c]);
    }
  }
  for (int c = 0; c < C; ++c) {
    // the activations carry +128 (u8): take back 128 * sum_k w of each column
    const __m512i offset = _mm512_loadu_si512(w_offsets + n0 + c * kColumnsPerVector);
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_si512(acc + r * N + n0 + c * kColumnsPerVector, _mm512_sub_epi32(sums[r][c], offset));
    }
  }
}

template <int R>
OASR_VNNI void dot_rows(const uint8_t* q, int64_t K, const int8_t* w, int64_t N, const int32_t* w_offsets,
                        int64_t n_begin, int64_t n_end, int32_t* acc) {
  int64_t n = n_begin;
  for (; n + 4 * kColumnsPerVector <= n_end; n += 4 * kColumnsPerVector) dot_block<R, 4>(q, K, w, N, w_offsets, n, acc);
  for (; n < n_end; n += kColumnsPerVector) dot_block<R, 1>(q, K, w, N, w_offsets, n, acc);
}

bool vnni_rows_cpu() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  return cpu;
}
#else
bool vnni_rows_cpu() { return false; }
#endif

// x (M, K) float32; w_packed (K / 4, N, 4) int8 (`pack_int8_rows_weight`); w_offsets (N,) int32
// (128 * sum_k w[n, k]); col_scale (N,), bias (N,) float32 -> (M, N) float32: the int8 linear layer of
// engine/models/whisper/int8.py (quantize_rows, an exact integer GEMM, dequantize_rows), bitwise.
at::Tensor int8_linear_rows(const at::Tensor& x, const at::Tensor& w_packed, const at::Tensor& w_offsets,
                            const at::Tensor& col_scale, const c10::optional<at::Tensor>& bias) {
  constexpr const char* op = "oasr::int8_linear_rows";
  const at::Device cpu(at::kCPU);
  check_arg(op, "x", x, at::kFloat, {-1, -1}, cpu);
  const int64_t M = x.size(0), K = x.size(1);
  TORCH_CHECK(K % 4 == 0, op, ": K must be a multiple of 4, got ", K);
  check_arg(op, "w_packed", w_packed, at::kChar, {K / 4, -1, 4}, cpu);
  const int64_t N = w_packed.size(1);
  TORCH_CHECK(N % kColumnsPerVector == 0, op, ": N must be a multiple of ", kColumnsPerVector, ", got ", N);
  check_arg(op, "w_offsets", w_offsets, at::kInt, {N}, cpu);
  check_arg(op, "col_scale", col_scale, at::kFloat, {N}, cpu);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) check_arg(op, "bias", *bias, at::kFloat, {N}, cpu);
  TORCH_CHECK(vnni_rows_cpu(), op, ": this CPU has no AVX-512 VNNI");
  const at::Tensor in = x.contiguous(), w = w_packed.contiguous(), wo = w_offsets.contiguous();
  const at::Tensor cs = col_scale.contiguous(), b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor out = at::empty({M, N}, in.options());
  if (M == 0) return out;
  std::unique_ptr<uint8_t[]> q(new uint8_t[M * K]);
  std::unique_ptr<float[]> row_scale(new float[M]);
  std::unique_ptr<int32_t[]> acc(new int32_t[M * N]);
  const float* src = in.data_ptr<float>();
  for (int64_t r = 0; r < M; ++r) quantize_row(src + r * K, q.get() + r * K, row_scale.get() + r, K);
#ifdef OASR_ROWS_VNNI
  const int8_t* wp = w.data_ptr<int8_t>();
  const int32_t* wop = wo.data_ptr<int32_t>();
  const float* csp = cs.data_ptr<float>();
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* dst = out.data_ptr<float>();
  // columns in blocks of 64 per task; a small product stays on the calling thread (a parallel
  // region costs more than its arithmetic)
  const int64_t blocks = (N + 63) / 64;
  const int64_t grain = M * N * K < (int64_t{1} << 22) ? blocks : 1;
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    const int64_t n_begin = begin * 64, n_end = std::min(N, end * 64);
    int64_t r = 0;
    for (; r + 4 <= M; r += 4) dot_rows<4>(q.get() + r * K, K, wp, N, wop, n_begin, n_end, acc.get() + r * N);
    switch (M - r) {
      case 3: dot_rows<3>(q.get() + r * K, K, wp, N, wop, n_begin, n_end, acc.get() + r * N); break;
      case 2: dot_rows<2>(q.get() + r * K, K, wp, N, wop, n_begin, n_end, acc.get() + r * N); break;
      case 1: dot_rows<1>(q.get() + r * K, K, wp, N, wop, n_begin, n_end, acc.get() + r * N); break;
      default: break;
    }
    for (int64_t row = 0; row < M; ++row) {
      dequantize_row(acc.get() + row * N + n_begin, row_scale[row], csp + n_begin, bp == nullptr ? nullptr : bp + n_begin,
                     dst + row * N + n_begin, n_end - n_begin);
    }
  });
#endif
  return out;
}

// weight (N, K) int8 -> (K / 4, N, 4): each column's four consecutive k in one int32 lane.
at::Tensor pack_int8_rows_weight(const at::Tensor& weight) {
  constexpr const char* op = "oasr::pack_int8_rows_weight";
  check_arg(op, "weight", weight, at::kChar, {-1, -1}, at::Device(at::kCPU));
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(K % 4 == 0, op, ": K must be a multiple of 4, got ", K);
  return weight.reshape({N, K / 4, 4}).permute({1, 0, 2}).contiguous();
}

}  // namespace

TORCH_LIBRARY_IMPL(oasr, CPU, m) {
  m.impl("quantize_rows", &quantize_rows);
  m.impl("quantize_rows_u8", &quantize_rows_u8);
  m.impl("dequantize_rows", &dequantize_rows);
  m.impl("int8_linear_rows", &int8_linear_rows);
  m.impl("pack_int8_rows_weight", &pack_int8_rows_weight);
}

}  // namespace oasr::int8_rows
