// Rows of float32 keys or values packed as int8 with a float32 scale each (engine/ops/int8_kv.py):
// Whisper's cross K/V on the CPU int8 path, packed at every prefill. One pass a row (its largest
// magnitude, then its values), where the torch reference makes six over the whole store (16
// windows' prefill: ~125 ms of it). Bitwise the reference: scale = max|x| / 127 in float32, values
// x / scale rounded half to even and clamped to ±127 (round_half_even and the NaN-winning peak of
// row_kernels.h, as the int8 activations); a row of zeros (or one holding NaN) gets values 0.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <vector>

#include "common.h"
#include "int8_kv.h"
#include "row_kernels.h"

namespace oasr::int8_kv {

namespace {
constexpr char kOp[] = "pack_int8_kv";
constexpr int64_t kRowsPerTask = 256;

// One row x (D) packed into out (D + kScaleBytes): scale = max|x| / 127, values x / scale rounded
// half to even and clamped to ±127; a row of zeros (or one holding NaN) gets values 0.
OASR_ROW_KERNEL
void pack_row(const float* __restrict x, int64_t D, int8_t* __restrict out) {
  const float scale = peak_magnitude(x, D) / 127.f;  // NaN wins, as torch's amax
  if (scale > 0.f) {
    for (int64_t d = 0; d < D; ++d) {
      const float q = round_half_even(x[d] / scale);
      out[d] = static_cast<int8_t>(static_cast<int32_t>(q < -127.f ? -127.f : (q > 127.f ? 127.f : q)));
    }
  } else {
    std::memset(out, 0, D);
  }
  set_packed_scale(out, D, scale);
}
}  // namespace

// x (..., D) float32 -> (..., D + 4) int8: each row's values, then its scale's 4 bytes. Rows are
// read where they are (a (B, H, S, D) view of projected K/V, heads strided) when x has four
// dimensions and contiguous rows.
at::Tensor pack_int8_kv(const at::Tensor& x_in) {
  TORCH_CHECK(x_in.defined() && x_in.dim() >= 1 && x_in.size(-1) > 0, kOp, ": x must be rows of values, got shape ",
              x_in.sizes());
  TORCH_CHECK(x_in.scalar_type() == at::kFloat, kOp, ": x must be Float, got ", x_in.scalar_type());
  TORCH_CHECK(x_in.device().is_cpu(), kOp, ": x must be on the CPU");
  const at::Tensor x = x_in.dim() == 4 && x_in.stride(3) == 1 ? x_in : x_in.contiguous().view({1, 1, -1, x_in.size(-1)});
  const int64_t B = x.size(0), H = x.size(1), S = x.size(2), D = x.size(3);
  std::vector<int64_t> sizes = x_in.sizes().vec();
  sizes.back() = D + kScaleBytes;
  at::Tensor out = at::empty(sizes, x.options().dtype(at::kChar));
  const float* src = x.data_ptr<float>();
  int8_t* dst = out.data_ptr<int8_t>();
  const int64_t sb = x.stride(0), sh = x.stride(1), ss = x.stride(2);
  at::parallel_for(0, B * H * S, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (H * S), h = (r / S) % H, s = r % S;
      pack_row(src + b * sb + h * sh + s * ss, D, dst + r * (D + kScaleBytes));
    }
  });
  return out;
}

// The packed key and value rows of a fused key-value int8 projection straight from its integer
// sums: acc (B * S, 2 * H * D) (int32, or float32 holding integers: oneDNN's), its row scales
// (B * S, 1), column scales and bias (2 * H * D) -> k, v (B, H, S, D + 4) int8. Each head's D
// values are dequantized by dequantize_rows' own row loop (row_kernels.h: the same floats) and
// packed as pack_int8_kv packs them, without the float32 output between the two (a prefill of 16 windows wrote and read 37 MB
// of it a layer).
template <typename Acc>
void dequantize_pack(const Acc* acc, const float* row_scale, const float* col_scale, const float* bias, int64_t B,
                     int64_t S, int64_t H, int64_t D, int8_t* k, int8_t* v) {
  const int64_t N = 2 * H * D, width = D + kScaleBytes;
  at::parallel_for(0, B * S, kRowsPerTask / 8, [&](int64_t begin, int64_t end) {
    std::vector<float> values(D);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / S, s = r % S;
      for (int64_t part = 0; part < 2 * H; ++part) {  // keys' heads, then values'
        const int64_t col = part * D, h = part % H;
        dequantize_row(acc + r * N + col, row_scale[r], col_scale + col, bias == nullptr ? nullptr : bias + col,
                       values.data(), D);
        pack_row(values.data(), D, (part < H ? k : v) + ((b * H + h) * S + s) * width);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> dequantize_pack_kv(const at::Tensor& acc_in, const at::Tensor& row_scale,
                                                      const at::Tensor& col_scale, const std::optional<at::Tensor>& bias,
                                                      int64_t batch, int64_t heads) {
  constexpr char op[] = "dequantize_pack_kv";
  const at::Device cpu(at::kCPU);
  TORCH_CHECK(acc_in.scalar_type() == at::kInt || acc_in.scalar_type() == at::kFloat, op,
              ": acc must be Int or Float, got ", acc_in.scalar_type());
  check_arg(op, "acc", acc_in, acc_in.scalar_type(), {-1, -1}, cpu);
  const int64_t M = acc_in.size(0), N = acc_in.size(1);
  TORCH_CHECK(batch > 0 && heads > 0 && M % batch == 0 && N % (2 * heads) == 0, op, ": acc of shape ",
              acc_in.sizes(), " is not ", batch, " items' rows of keys and values in ", heads, " heads");
  check_arg(op, "row_scale", row_scale, at::kFloat, {M, 1}, cpu);
  check_arg(op, "col_scale", col_scale, at::kFloat, {N}, cpu);
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) check_arg(op, "bias", *bias, at::kFloat, {N}, cpu);
  const at::Tensor acc = acc_in.contiguous(), rs = row_scale.contiguous(), cs = col_scale.contiguous();
  const at::Tensor bs = has_bias ? bias->contiguous() : at::Tensor();
  const int64_t S = M / batch, D = N / (2 * heads);
  at::Tensor k = at::empty({batch, heads, S, D + kScaleBytes}, acc.options().dtype(at::kChar));
  at::Tensor v = at::empty_like(k);
  const float* bp = has_bias ? bs.data_ptr<float>() : nullptr;
  if (acc.scalar_type() == at::kInt) {
    dequantize_pack(acc.data_ptr<int32_t>(), rs.data_ptr<float>(), cs.data_ptr<float>(), bp, batch, S, heads, D,
                    k.data_ptr<int8_t>(), v.data_ptr<int8_t>());
  } else {
    dequantize_pack(acc.data_ptr<float>(), rs.data_ptr<float>(), cs.data_ptr<float>(), bp, batch, S, heads, D,
                    k.data_ptr<int8_t>(), v.data_ptr<int8_t>());
  }
  return {k, v};
}

TORCH_LIBRARY_IMPL(oasr, CPU, m) {
  m.impl("pack_int8_kv", &pack_int8_kv);
  m.impl("dequantize_pack_kv", &dequantize_pack_kv);
}

}  // namespace oasr::int8_kv
