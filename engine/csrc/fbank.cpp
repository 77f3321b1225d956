// Kaldi fbank: the operator (checks, dispatch to the device's kernel) and the CPU kernel: frames
// in parallel, each through the per-frame steps of fbank.h with one lane. The engine keeps
// torch's batched fbank on CPU (pocketfft + GEMM measure ~8x faster, benchmarks/kernels.py);
// this kernel is what the CUDA kernel's arithmetic is tested through.
#include "fbank.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

namespace oasr::fbank {

namespace {
constexpr const char* kOp = "oasr::kaldi_fbank";
}

Params check_args(const Args& a) {
  const at::Device dev = a.waveform.device();
  check_arg(kOp, "waveform", a.waveform, at::kFloat, {-1}, dev);
  check_arg(kOp, "frame_starts", a.frame_starts, at::kLong, {-1}, dev);
  check_arg(kOp, "window", a.window, at::kFloat, {-1}, dev);
  const int64_t W = a.window.size(0);
  TORCH_CHECK(W >= 1, kOp, ": window is empty");
  check_arg(kOp, "twiddle", a.twiddle, at::kFloat, {-1, 2}, dev);
  const int64_t P = 2 * a.twiddle.size(0);
  int64_t bits = 0;
  while ((int64_t{1} << bits) < P) ++bits;
  TORCH_CHECK(P >= 2 && (int64_t{1} << bits) == P && P >= W, kOp, ": twiddle must hold P/2 rows for a power-of-two FFT size P >= ",
              W, " (window size), got ", a.twiddle.size(0), " rows");
  check_arg(kOp, "mel_banks", a.mel_banks, at::kFloat, {P / 2, -1}, dev);
  TORCH_CHECK(std::isfinite(a.preemph), kOp, ": preemph must be finite");
  const int64_t N = a.waveform.size(0);
  if (a.frame_starts.numel() > 0) {
    const at::Tensor starts = a.frame_starts.to(at::kCPU).contiguous();
    check_range(kOp, "frame_starts", starts, 0, N - W);
  }
  return Params{W, P, bits, a.mel_banks.size(1), static_cast<float>(a.preemph), nullptr, nullptr, nullptr};
}

namespace {

void run_cpu(const Launch& l) {
  const Params& p = l.p;
  const int64_t F = l.frame_starts.numel();
  const float* samples = l.waveform.data_ptr<float>();
  const int64_t* st = l.frame_starts.data_ptr<int64_t>();
  float* o = l.out.data_ptr<float>();
  at::parallel_for(0, F, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> re(p.fft_size), im(p.fft_size);
    for (int64_t f = begin; f < end; ++f) {
      const float* x = samples + st[f];
      float sum = 0.f;
      for (int64_t i = 0; i < p.window_size; ++i) sum += x[i];
      prepare(x, sum / static_cast<float>(p.window_size), p, re.data(), im.data(), 0, 1);
      for (int64_t half = 1; half < p.fft_size; half *= 2) fft_stage(re.data(), im.data(), p, half, 0, 1);
      power(re.data(), im.data(), p, 0, 1);
      log_mel(re.data(), p, o + f * p.num_mel, 0, 1);
    }
  });
}

at::Tensor kaldi_fbank(const at::Tensor& waveform, const at::Tensor& frame_starts, const at::Tensor& window,
                       const at::Tensor& mel_banks, const at::Tensor& twiddle, double preemph) {
  const Params sizes = check_args(Args{waveform, frame_starts, window, mel_banks, twiddle, preemph});
  Launch l{waveform.contiguous(), frame_starts.contiguous(), window.contiguous(), mel_banks.contiguous(),
           twiddle.contiguous(), at::empty({frame_starts.numel(), sizes.num_mel}, waveform.options()), sizes};
  l.p.window = l.window.data_ptr<float>();
  l.p.banks = l.mel_banks.data_ptr<float>();
  l.p.twiddle = l.twiddle.data_ptr<float>();
  if (waveform.is_cuda()) {
#if OASR_WITH_CUDA
    if (l.out.size(0) > 0) launch_cuda(l);
#endif
  } else {
    run_cpu(l);
  }
  return l.out;
}

}  // namespace
}  // namespace oasr::fbank

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("kaldi_fbank", &oasr::fbank::kaldi_fbank); }
#if OASR_WITH_CUDA
TORCH_LIBRARY_IMPL(oasr, CUDA, m) { m.impl("kaldi_fbank", &oasr::fbank::kaldi_fbank); }
#endif
