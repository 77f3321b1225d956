// Row loops shared by the int8 kernels (int8_rows.cpp: activations and GEMM outputs; int8_kv.cpp:
// packed cross K/V): one definition of each arithmetic the kernels promise to do as their torch
// references do (a float32 division, round half to even, float32 products and the bias, in that
// order), so that results agree bit for bit wherever they are computed.
//
// The row loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time: the
// extension is built for any x86-64, and at SSE2 width these loops cost more than the int8 GEMM
// they feed (measured: 6x torch's own AVX-512 elementwise ops). Every lane computes what the
// scalar code would, so the clones agree bit for bit. Internal linkage (an unnamed namespace):
// each kernel file gets its own clones.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#define OASR_ROW_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OASR_ROW_KERNEL
#endif

namespace oasr {
namespace {

// Round half to even of |v| <= 2^22, as torch.round: adding and taking back 1.5 * 2^23 leaves
// no fraction bits, so the float addition rounds in the current (nearest-even) mode. Plain
// arithmetic vectorizes; std::nearbyint is a libm call per element without SSE4.1.
inline float round_half_even(float v) {
  constexpr float kShift = 12582912.f;  // 1.5 * 2^23
  return (v + kShift) - kShift;
}

// The largest |x| of a row, NaN if it holds one (as torch's amax): compared as integers, since
// non-negative floats order like their bit patterns and an integer max reduction vectorizes where
// a float one (NaN rules) does not.
inline float peak_magnitude(const float* __restrict row, int64_t n) {
  int32_t peak_bits = 0;
  for (int64_t k = 0; k < n; ++k) {
    int32_t bits;
    std::memcpy(&bits, row + k, sizeof bits);
    bits &= 0x7fffffff;
    peak_bits = bits > peak_bits ? bits : peak_bits;
  }
  float peak;
  std::memcpy(&peak, &peak_bits, sizeof peak);
  return peak;
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

}  // namespace
}  // namespace oasr
