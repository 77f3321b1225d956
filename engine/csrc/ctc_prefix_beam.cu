// CTC prefix beam search, CUDA kernel: one thread block per row. Per frame the block selects the
// k best units (k block-wide arg-max rounds), thread 0 plans the frame with the step shared with
// the CPU kernel (ctc_prefix_beam.h), and the block copies the surviving hypotheses.
// Compiled by `make cuda-check`; not yet run on a GPU (tests/engine/ops/test_ctc_beam_cuda.py
// compares it with the CPU kernel where a GPU exists).
#include "ctc_prefix_beam.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace oasr::ctc {
namespace {

constexpr int kThreads = 128;  // a power of two (tree reductions)

struct BufferPtrs {
  int64_t* tokens;
  int64_t* frames;
  float* logprobs;
  int64_t* lengths;
  double* scores;
  int64_t* context;
  int64_t K;
  int64_t cap;

  __device__ Beams row(int64_t b) const {
    return Beams{tokens + b * K * cap, frames + b * K * cap, logprobs + b * K * cap, lengths + b * K,
                 scores + b * K * 3,   context + b * K,      cap};
  }
};

BufferPtrs pointers(const Buffers& s) {
  return BufferPtrs{s.tokens.data_ptr<int64_t>(),  s.frames.data_ptr<int64_t>(), s.logprobs.data_ptr<float>(),
                    s.lengths.data_ptr<int64_t>(), s.scores.data_ptr<double>(),  s.context.data_ptr<int64_t>(),
                    s.tokens.size(1),              s.tokens.size(2)};
}

__device__ bool better(float x, int64_t xi, float y, int64_t yi) {
  if (xi < 0) return false;
  if (yi < 0) return true;
  return x > y || (x == y && xi < yi);
}

// The k best units of one frame into ids/vals (shared), best first, ties to the lower id.
__device__ void block_top_k(const float* lp, int64_t V, int64_t k, int64_t* ids, float* vals, float* s_val,
                            int64_t* s_id) {
  for (int64_t r = 0; r < k; ++r) {
    float best = -INFINITY;
    int64_t best_id = -1;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      bool taken = false;
      for (int64_t j = 0; j < r; ++j) taken = taken || ids[j] == v;
      if (!taken && better(lp[v], v, best, best_id)) {
        best = lp[v];
        best_id = v;
      }
    }
    s_val[threadIdx.x] = best;
    s_id[threadIdx.x] = best_id;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
      if (threadIdx.x < stride &&
          better(s_val[threadIdx.x + stride], s_id[threadIdx.x + stride], s_val[threadIdx.x], s_id[threadIdx.x])) {
        s_val[threadIdx.x] = s_val[threadIdx.x + stride];
        s_id[threadIdx.x] = s_id[threadIdx.x + stride];
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      ids[r] = s_id[0];
      vals[r] = s_val[0];
    }
    __syncthreads();
  }
}

__global__ void ctc_prefix_beam_kernel(const float* __restrict__ log_probs, int64_t T, int64_t V,
                                       const int64_t* __restrict__ lengths, const int64_t* __restrict__ offsets,
                                       int64_t* counts, BufferPtrs home_buf, BufferPtrs spare_buf, char* work,
                                       int64_t work_stride, int64_t beam, int64_t k, int64_t blank, Trie trie,
                                       const int64_t* __restrict__ roots) {
  extern __shared__ int64_t smem[];
  int64_t* ids = smem;                                          // [k]
  int64_t* s_id = ids + k;                                      // [blockDim]
  float* vals = reinterpret_cast<float*>(s_id + blockDim.x);    // [k]
  float* s_val = vals + k;                                      // [blockDim]
  __shared__ int64_t count;
  const int64_t row = blockIdx.x;
  Beams cur = home_buf.row(row), nxt = spare_buf.row(row);
  const Beams home = cur;
  Work w = make_work(work + row * work_stride, beam, k, beam);
  const int64_t root = roots != nullptr ? roots[row] : -1;
  if (threadIdx.x == 0) count = counts[row];
  __syncthreads();
  for (int64_t t = 0; t < lengths[row]; ++t) {
    block_top_k(log_probs + (row * T + t) * V, V, k, ids, vals, s_val, s_id);
    if (threadIdx.x == 0) count = plan_frame(cur, count, ids, vals, k, blank, trie, root, w, beam);
    __syncthreads();
    for (int64_t p = 0; p < count; ++p) {
      write_beam(cur, nxt, w, p, ids, vals, offsets[row] + t, threadIdx.x, blockDim.x);
    }
    __syncthreads();
    const Beams tmp = cur;
    cur = nxt;
    nxt = tmp;
  }
  if (cur.tokens != home.tokens) {
    for (int64_t h = 0; h < count; ++h) {
      const int64_t n = cur.lengths[h];
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        home.tokens[h * home.cap + i] = cur.tokens[h * cur.cap + i];
        home.frames[h * home.cap + i] = cur.frames[h * cur.cap + i];
        home.logprobs[h * home.cap + i] = cur.logprobs[h * cur.cap + i];
      }
      if (threadIdx.x == 0) {
        home.lengths[h] = n;
        for (int j = 0; j < 3; ++j) home.scores[3 * h + j] = cur.scores[3 * h + j];
        home.context[h] = cur.context[h];
      }
    }
  }
  if (threadIdx.x == 0) {
    for (int64_t p = count; p < beam; ++p) {
      home.lengths[p] = 0;
      home.scores[3 * p] = home.scores[3 * p + 1] = home.scores[3 * p + 2] = -INFINITY;
      home.context[p] = 0;
    }
    counts[row] = count;
  }
}

}  // namespace

void launch_cuda(const Launch& l, const Buffers& out, const Buffers& spare) {
  const c10::cuda::CUDAGuard guard(l.log_probs.device());
  const int64_t B = l.log_probs.size(0), T = l.log_probs.size(1), V = l.log_probs.size(2);
  const int64_t stride = (work_bytes(l.beam, l.k, l.beam) + 15) / 16 * 16;
  const at::Tensor work = at::empty({B * stride}, l.log_probs.options().dtype(at::kByte));
  const size_t shared = static_cast<size_t>(l.k + kThreads) * (sizeof(int64_t) + sizeof(float));
  ctc_prefix_beam_kernel<<<static_cast<unsigned>(B), kThreads, shared, c10::cuda::getCurrentCUDAStream()>>>(
      l.log_probs.data_ptr<float>(), T, V, l.lengths.data_ptr<int64_t>(), l.frame_offset.data_ptr<int64_t>(),
      out.num_hyps.data_ptr<int64_t>(), pointers(out), pointers(spare), static_cast<char*>(work.data_ptr()), stride,
      l.beam, l.k, l.blank, l.trie, l.roots.defined() ? l.roots.data_ptr<int64_t>() : nullptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace oasr::ctc
