// Row-wise int8 quantisation around an int32 GEMM (engine/models/whisper/int8.py), each in one
// pass over memory instead of torch's four or five elementwise ops: measured to take three times
// the GEMM's own time in the int8 encoder of tiny.en on a CPU (py-spy, benchmarks/offline.py).
// The arithmetic is the reference's, in its order (engine/ops/int8_rows.py), so results are
// bitwise equal: a float32 division, round half to even, then float32 products and the bias.
// CPU only: the engine's int8 path is for CPUs.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "common.h"

namespace oasr::int8_rows {

namespace {

constexpr float kActivationMax = 127.f;
constexpr float kMinScale = 1e-12f;
constexpr int64_t kRowsPerTask = 16;

std::tuple<at::Tensor, at::Tensor> quantize_rows(const at::Tensor& x) {
  constexpr const char* op = "oasr::quantize_rows";
  check_arg(op, "x", x, at::kFloat, {-1, -1}, at::Device(at::kCPU));
  const at::Tensor in = x.contiguous();
  const int64_t M = in.size(0), K = in.size(1);
  at::Tensor q = at::empty({M, K}, in.options().dtype(at::kChar));
  at::Tensor scale = at::empty({M, 1}, in.options());
  const float* src = in.data_ptr<float>();
  int8_t* dst = q.data_ptr<int8_t>();
  float* sc = scale.data_ptr<float>();
  at::parallel_for(0, M, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = src + r * K;
      float peak = 0.f;
      for (int64_t k = 0; k < K; ++k) peak = std::fmax(peak, std::fabs(row[k]));
      const float s = std::fmax(peak, kMinScale) / kActivationMax;
      sc[r] = s;
      int8_t* out = dst + r * K;
      for (int64_t k = 0; k < K; ++k) out[k] = static_cast<int8_t>(std::nearbyint(row[k] / s));
    }
  });
  return {q, scale};
}

at::Tensor dequantize_rows(const at::Tensor& acc, const at::Tensor& row_scale, const at::Tensor& col_scale,
                           const c10::optional<at::Tensor>& bias) {
  constexpr const char* op = "oasr::dequantize_rows";
  const at::Device cpu(at::kCPU);
  check_arg(op, "acc", acc, at::kInt, {-1, -1}, cpu);
  const int64_t M = acc.size(0), N = acc.size(1);
  check_arg(op, "row_scale", row_scale, at::kFloat, {M, 1}, cpu);
  check_arg(op, "col_scale", col_scale, at::kFloat, {N}, cpu);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) check_arg(op, "bias", *bias, at::kFloat, {N}, cpu);
  const at::Tensor a = acc.contiguous(), rs = row_scale.contiguous(), cs = col_scale.contiguous();
  const at::Tensor b = has_bias ? bias->contiguous() : at::Tensor();
  at::Tensor out = at::empty({M, N}, a.options().dtype(at::kFloat));
  const int32_t* src = a.data_ptr<int32_t>();
  const float* rsp = rs.data_ptr<float>();
  const float* csp = cs.data_ptr<float>();
  const float* bp = has_bias ? b.data_ptr<float>() : nullptr;
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, M, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t* row = src + r * N;
      float* o = dst + r * N;
      const float s = rsp[r];
      if (bp != nullptr) {
        for (int64_t n = 0; n < N; ++n) {
          const float scaled = static_cast<float>(row[n]) * s * csp[n];  // the reference's order
          o[n] = scaled + bp[n];
        }
      } else {
        for (int64_t n = 0; n < N; ++n) o[n] = static_cast<float>(row[n]) * s * csp[n];
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(oasr, CPU, m) {
  m.impl("quantize_rows", &quantize_rows);
  m.impl("dequantize_rows", &dequantize_rows);
}

}  // namespace oasr::int8_rows
