// Kaldi fbank, CUDA kernel: one thread block per frame; the threads run the lanes of each step
// of fbank.h (the arithmetic the CPU kernel runs with one lane), synchronising between steps.
// Compiled by `make cuda-check`; not yet run on a GPU (tests/engine/ops/test_fbank_cuda.py
// compares it with the CPU kernel and engine/fbank.py where a GPU exists).
#include "fbank.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace oasr::fbank {
namespace {

constexpr int kThreads = 128;

__global__ void kaldi_fbank_kernel(const float* __restrict__ samples, const int64_t* __restrict__ starts, Params p,
                                   float* __restrict__ out) {
  extern __shared__ float smem[];
  float* re = smem;              // [P]
  float* im = re + p.fft_size;   // [P]
  float* partial = im + p.fft_size;  // [kThreads]
  const float* x = samples + starts[blockIdx.x];
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < p.window_size; i += blockDim.x) sum += x[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float mean = partial[0] / static_cast<float>(p.window_size);
  prepare(x, mean, p, re, im, threadIdx.x, blockDim.x);
  __syncthreads();
  for (int64_t half = 1; half < p.fft_size; half *= 2) {
    fft_stage(re, im, p, half, threadIdx.x, blockDim.x);
    __syncthreads();
  }
  power(re, im, p, threadIdx.x, blockDim.x);
  __syncthreads();
  log_mel(re, p, out + static_cast<int64_t>(blockIdx.x) * p.num_mel, threadIdx.x, blockDim.x);
}

}  // namespace

void launch_cuda(const Launch& l) {
  const c10::cuda::CUDAGuard guard(l.waveform.device());
  const int64_t F = l.out.size(0);
  TORCH_CHECK(F <= 0x7fffffff, "oasr::kaldi_fbank: too many frames for one launch (", F, ")");
  const size_t shared = sizeof(float) * (2 * l.p.fft_size + kThreads);
  TORCH_CHECK(shared <= 48 * 1024, "oasr::kaldi_fbank: an FFT of ", l.p.fft_size, " points needs ", shared,
              " bytes of shared memory; the CUDA kernel supports up to 48 KiB (P <= 4096)");
  kaldi_fbank_kernel<<<static_cast<unsigned>(F), kThreads, shared, c10::cuda::getCurrentCUDAStream()>>>(
      l.waveform.data_ptr<float>(), l.frame_starts.data_ptr<int64_t>(), l.p, l.out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace oasr::fbank
