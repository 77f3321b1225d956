// RNN-T / TDT greedy label loop, CUDA: the loop of rnnt_greedy.h with the per-row bookkeeping as
// one kernel launch per step (one thread per row) instead of a dozen torch.where launches; the
// joint and prediction network run through ATen's CUDA kernels. Whether any row still advances
// is read back once per step, as the reference's `bool(active.any())` does.
// Compiled by `make cuda-check`; not yet run on a GPU (tests/engine/ops/test_rnnt_cuda.py compares
// it with the CPU kernel where a GPU exists).
#include "rnnt_greedy.h"

#include <ATen/ops/max.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace oasr::rnnt {
namespace {

constexpr int kThreads = 128;

__global__ void start_kernel(Rows r, int64_t B, int* any) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B) return;
  r.active[i] = r.time[i] < r.lengths[i];
  if (r.active[i]) *any = 1;
}

__global__ void joint_kernel(Rows r, int64_t B, bool first, const int64_t* labels, const float* scores,
                             const int64_t* duration, bool tdt, int64_t blank, int* any) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B) return;
  after_joint(r, i, first, labels[i], scores[i], duration[i], tdt, blank);
  if (r.advance[i]) *any = 1;
}

__global__ void emit_kernel(Rows r, int64_t B, bool tdt, int64_t max_symbols, int* any) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B) return;
  emit(r, i, tdt, max_symbols);
  if (r.active[i]) *any = 1;
}

struct CudaBookkeeper {
  RowStorage s;
  Rows r;
  int64_t B;
  at::Tensor flag;
  unsigned blocks;

  explicit CudaBookkeeper(const Args& a)
      : s(a), r(s.rows()), B(a.f.size(0)), flag(at::zeros({1}, a.lengths.options().dtype(at::kInt))),
        blocks(static_cast<unsigned>((B + kThreads - 1) / kThreads)) {}

  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(); }
  int* reset() {
    flag.zero_();
    return flag.data_ptr<int>();
  }
  bool read() const { return flag.item<int>() != 0; }

  bool start(bool) {
    if (B == 0) return false;
    start_kernel<<<blocks, kThreads, 0, stream()>>>(r, B, reset());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return read();
  }
  at::Tensor time() const { return s.time; }
  at::Tensor labels() const { return s.labels; }
  at::Tensor found() const { return s.found; }

  bool joint(bool first, const at::Tensor& labels, const at::Tensor& scores, const at::Tensor& duration, bool tdt,
             int64_t blank) {
    const at::Tensor sc = scores.to(at::kFloat).contiguous();
    joint_kernel<<<blocks, kThreads, 0, stream()>>>(r, B, first, labels.data_ptr<int64_t>(), sc.data_ptr<float>(),
                                                    duration.data_ptr<int64_t>(), tdt, blank, reset());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return read();
  }
  bool emit(bool tdt, int64_t max_symbols) {
    emit_kernel<<<blocks, kThreads, 0, stream()>>>(r, B, tdt, max_symbols, reset());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return read();
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> emissions() {
    return s.emissions(B ? s.counts.max().item<int64_t>() : 0);
  }
};

}  // namespace

Result run_cuda(const Args& a) {
  const c10::cuda::CUDAGuard guard(a.f.device());
  CudaBookkeeper book(a);
  return greedy_label_loop(a, book);
}

}  // namespace oasr::rnnt
