// Paged attention, CUDA kernel: one thread block per (row, head, tile of 16 queries). Keys are
// visited in tiles of 64 with an online softmax (running max and sum per query), so the
// history length is unbounded; K/V rows are read from the pool through the block table.
// Compiled by `make cuda-check`; not yet run on a GPU (tests/engine/ops/test_paged_attention_cuda.py
// compares it with the CPU kernel where a GPU exists).
#include "paged_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace oasr::paged {
namespace {

constexpr int kThreads = 128;
constexpr int kQueries = 16;  // queries per block
constexpr int kKeys = 64;     // keys per tile

template <typename scalar_t>
__global__ void paged_attention_kernel(const scalar_t* __restrict__ query, const scalar_t* __restrict__ key,
                                       const scalar_t* __restrict__ value, const scalar_t* __restrict__ key_pool,
                                       const scalar_t* __restrict__ value_pool,
                                       const int64_t* __restrict__ block_table, const int64_t* __restrict__ context_start,
                                       const int64_t* __restrict__ context_lens,
                                       const int64_t* __restrict__ chunk_lens, const scalar_t* __restrict__ bias,
                                       scalar_t* __restrict__ out, int64_t C, int64_t H, int64_t D, int64_t M,
                                       int64_t Tb, float scale, int64_t block_size) {
  extern __shared__ float smem[];
  const int64_t b = blockIdx.x, h = blockIdx.y, q0 = static_cast<int64_t>(blockIdx.z) * kQueries;
  const int64_t nq = min(static_cast<int64_t>(kQueries), C - q0);
  float* q_s = smem;                 // [kQueries][D]
  float* acc = q_s + kQueries * D;   // [kQueries][D]
  float* s = acc + kQueries * D;     // [kQueries][kKeys]
  float* row_max = s + kQueries * kKeys;
  float* row_sum = row_max + kQueries;
  int64_t* slot_s = reinterpret_cast<int64_t*>(row_sum + kQueries);  // [kKeys], 8-byte aligned by layout
  const int64_t row_stride = H * D;
  const int64_t n_ctx = context_lens[b], n = n_ctx + chunk_lens[b];
  for (int64_t x = threadIdx.x; x < kQueries * D; x += blockDim.x) {
    const int64_t i = x / D, k = x % D;
    q_s[x] = i < nq ? static_cast<float>(query[((b * C + q0 + i) * H + h) * D + k]) : 0.f;
    acc[x] = 0.f;
  }
  if (threadIdx.x < kQueries) {
    row_max[threadIdx.x] = -INFINITY;
    row_sum[threadIdx.x] = 0.f;
  }
  __syncthreads();
  for (int64_t j0 = 0; j0 < n; j0 += kKeys) {
    const int64_t nk = min(static_cast<int64_t>(kKeys), n - j0);
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
      const int64_t p = j0 + j;
      if (p < n_ctx) {
        const int64_t pos = context_start[b] + p;
        slot_s[j] = block_table[b * M + pos / block_size] * block_size + pos % block_size;
      } else {
        slot_s[j] = -1 - (p - n_ctx);  // chunk frame (p - n_ctx), read from key/value
      }
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < kQueries * kKeys; x += blockDim.x) {
      const int64_t i = x / kKeys, j = x % kKeys;
      float dot = -INFINITY;
      if (i < nq && j < nk) {
        const int64_t slot = slot_s[j];
        const scalar_t* kr = slot >= 0 ? key_pool + (slot * H + h) * D : key + ((b * C - 1 - slot) * H + h) * D;
        float sum = 0.f;
        for (int64_t k = 0; k < D; ++k) sum += q_s[i * D + k] * static_cast<float>(kr[k]);
        if (bias != nullptr) {
          const int64_t p = j0 + j;
          const int64_t col = p < n_ctx ? p : Tb - C + (p - n_ctx);
          sum += static_cast<float>(bias[((b * H + h) * C + q0 + i) * Tb + col]);
        }
        dot = sum * scale;
      }
      s[i * kKeys + j] = dot;
    }
    __syncthreads();
    if (threadIdx.x < nq) {  // online softmax bookkeeping, one thread per query
      const int64_t i = threadIdx.x;
      float m = row_max[i];
      for (int64_t j = 0; j < nk; ++j) m = fmaxf(m, s[i * kKeys + j]);
      const float correction = m == -INFINITY ? 1.f : expf(row_max[i] - m);
      float sum = row_sum[i] * correction;
      for (int64_t j = 0; j < nk; ++j) {
        const float p = m == -INFINITY ? 0.f : expf(s[i * kKeys + j] - m);
        s[i * kKeys + j] = p;
        sum += p;
      }
      row_max[i] = m;
      row_sum[i] = sum;
      for (int64_t k = 0; k < D; ++k) acc[i * D + k] *= correction;
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < nq * D; x += blockDim.x) {
      const int64_t i = x / D, k = x % D;
      float a = acc[x];
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t slot = slot_s[j];
        const scalar_t* vr = slot >= 0 ? value_pool + (slot * H + h) * D : value + ((b * C - 1 - slot) * H + h) * D;
        a += s[i * kKeys + j] * static_cast<float>(vr[k]);
      }
      acc[x] = a;
    }
    __syncthreads();
  }
  for (int64_t x = threadIdx.x; x < nq * D; x += blockDim.x) {
    const int64_t i = x / D, k = x % D;
    const float inv = row_sum[i] > 0.f ? 1.f / row_sum[i] : 0.f;
    out[((b * C + q0 + i) * H + h) * D + k] = static_cast<scalar_t>(acc[x] * inv);
  }
}

}  // namespace

void launch_cuda(const Launch& l) {
  const c10::cuda::CUDAGuard guard(l.q.device());
  const int64_t B = l.q.size(0), C = l.q.size(1), H = l.q.size(2), D = l.q.size(3);
  const int64_t Tb = l.bias.defined() ? l.bias.size(3) : 0;
  const size_t shared = sizeof(float) * (2 * kQueries * D + kQueries * kKeys + 2 * kQueries) + sizeof(int64_t) * kKeys;
  TORCH_CHECK(shared <= 48 * 1024, "oasr::paged_attention: head_dim ", D, " needs ", shared,
              " bytes of shared memory per block; the CUDA kernel supports up to 48 KiB (head_dim <= 320)");
  const dim3 grid(static_cast<unsigned>(B), static_cast<unsigned>(H), static_cast<unsigned>((C + kQueries - 1) / kQueries));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, l.q.scalar_type(), "oasr_paged_attention", [&] {
    paged_attention_kernel<scalar_t><<<grid, kThreads, shared, c10::cuda::getCurrentCUDAStream()>>>(
        l.q.data_ptr<scalar_t>(), l.k.data_ptr<scalar_t>(), l.v.data_ptr<scalar_t>(), l.key_pool.data_ptr<scalar_t>(),
        l.value_pool.data_ptr<scalar_t>(), l.block_table.data_ptr<int64_t>(), l.context_start.data_ptr<int64_t>(),
        l.context_lens.data_ptr<int64_t>(), l.chunk_lens.data_ptr<int64_t>(),
        l.bias.defined() ? l.bias.data_ptr<scalar_t>() : nullptr, l.out.data_ptr<scalar_t>(), C, H, D,
        l.block_table.size(1), Tb, static_cast<float>(l.scale), l.block_size);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace oasr::paged
