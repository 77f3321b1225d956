// Shared by every kernel: host/device qualifiers and argument checks that turn bad input into
// a RuntimeError naming the operator and the argument (never a crash inside a kernel).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define OASR_HD __host__ __device__
#else
#define OASR_HD
#endif

namespace oasr {

// Checks one tensor argument of operator `op`: dtype, rank, device (and sizes, -1 = any).
inline void check_arg(const char* op, const char* name, const at::Tensor& t, at::ScalarType dtype,
                      std::vector<int64_t> sizes, const at::Device& device) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.dim() == static_cast<int64_t>(sizes.size()), op, ": ", name, " must have ", sizes.size(),
              " dimensions, got shape ", t.sizes());
  for (size_t i = 0; i < sizes.size(); ++i) {
    TORCH_CHECK(sizes[i] < 0 || t.size(static_cast<int64_t>(i)) == sizes[i], op, ": ", name,
                " has shape ", t.sizes(), ", expected size ", sizes[i], " in dimension ", i);
  }
  TORCH_CHECK(t.device() == device, op, ": ", name, " is on ", t.device(), ", expected ", device,
              " (every tensor argument must be on the same device)");
}

// Every element of an int64 CPU tensor lies in [lo, hi].
inline void check_range(const char* op, const char* name, const at::Tensor& t, int64_t lo, int64_t hi) {
  const at::Tensor c = t.contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    TORCH_CHECK(p[i] >= lo && p[i] <= hi, op, ": ", name, " holds ", p[i], " at flat index ", i,
                ", outside [", lo, ", ", hi, "]");
  }
}

}  // namespace oasr
