// The packed int8 K/V row (engine/ops/int8_kv.py): D int8 values, then the row's float32 scale
// in kScaleBytes more bytes (value = scale * int8). Written by int8_kv.cpp, read by
// half_kv_attention.cpp.
#pragma once

#include <cstdint>
#include <cstring>

namespace oasr {

constexpr int64_t kScaleBytes = 4;

// A packed row's scale (after its D values).
inline float packed_scale(const int8_t* row, int64_t D) {
  float scale;
  std::memcpy(&scale, row + D, sizeof scale);
  return scale;
}

inline void set_packed_scale(int8_t* row, int64_t D, float scale) { std::memcpy(row + D, &scale, sizeof scale); }

}  // namespace oasr
