// Rows of float32 keys or values packed as int8 with a float32 scale each (engine/ops/int8_kv.py):
// Whisper's cross K/V on the CPU int8 path, packed at every prefill. One pass a row (its largest
// magnitude, then its values), where the torch reference makes six over the whole store (16
// windows' prefill: ~125 ms of it). Bitwise the reference: scale = max|x| / 127 in float32, values
// x / scale rounded half to even (std::nearbyint in the default rounding mode) and clamped to
// ±127; a row of zeros (or one holding NaN) gets values 0.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OASR_INT8_KV_VECTOR 1
#endif

#include "common.h"

namespace oasr::int8_kv {

namespace {
constexpr char kOp[] = "pack_int8_kv";
constexpr int64_t kScaleBytes = 4;  // the scale after a row's values
constexpr int64_t kRowsPerTask = 256;

void pack_row(const float* x, int64_t D, int8_t* out) {
  float top = 0.f;
  for (int64_t d = 0; d < D; ++d) {
    const float a = std::fabs(x[d]);
    top = (a > top || std::isnan(a)) && !std::isnan(top) ? a : top;  // NaN wins, as torch's amax
  }
  const float scale = top / 127.f;
  for (int64_t d = 0; d < D; ++d) {
    const float q = scale > 0.f ? std::nearbyint(x[d] / scale) : 0.f;
    out[d] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, q)));
  }
  std::memcpy(out + D, &scale, sizeof scale);
}

#ifdef OASR_INT8_KV_VECTOR
// pack_row for D a multiple of 8 on AVX2: the same maximum (NaN found apart: the vector max drops
// it), the same float32 division, rounding half to even (_mm256_round_ps) and clamp.
__attribute__((target("avx2"))) void pack_row_avx2(const float* x, int64_t D, int8_t* out) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 top8 = _mm256_setzero_ps(), nan8 = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 v = _mm256_loadu_ps(x + d);
    top8 = _mm256_max_ps(top8, _mm256_andnot_ps(sign, v));
    nan8 = _mm256_or_ps(nan8, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top8);
  float top = 0.f;
  for (float a : lanes) top = std::max(top, a);
  if (_mm256_movemask_ps(nan8) != 0) top = std::nanf("");
  const float scale = top / 127.f;
  if (!(scale > 0.f)) {
    std::memset(out, 0, D);
  } else {
    const __m256 scale8 = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
    alignas(32) int32_t q[8];
    for (int64_t d = 0; d < D; d += 8) {
      __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + d), scale8),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm256_min_ps(hi, _mm256_max_ps(lo, v));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_cvtps_epi32(v));
      for (int i = 0; i < 8; ++i) out[d + i] = static_cast<int8_t>(q[i]);
    }
  }
  std::memcpy(out + D, &scale, sizeof scale);
}

bool vector_path(int64_t D) {
  static const bool cpu = __builtin_cpu_supports("avx2");
  return cpu && D % 8 == 0;
}
#else
bool vector_path(int64_t) { return false; }
#endif
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
  const bool vector = vector_path(D);
  at::parallel_for(0, B * H * S, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (H * S), h = (r / S) % H, s = r % S;
      const float* row = src + b * sb + h * sh + s * ss;
      int8_t* packed = dst + r * (D + kScaleBytes);
#ifdef OASR_INT8_KV_VECTOR
      if (vector) {
        pack_row_avx2(row, D, packed);
        continue;
      }
#endif
      pack_row(row, D, packed);
    }
  });
  (void)vector;
  return out;
}

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("pack_int8_kv", &pack_int8_kv); }

}  // namespace oasr::int8_kv
