// Kaldi-compatible log-mel filterbank of single frames (engine/fbank.py's computation): DC
// removal, pre-emphasis, window, zero padding to a power of two, radix-2 FFT, power spectrum
// without the Nyquist bin, mel weights, log with Kaldi's FLT_EPSILON floor. float32 throughout,
// like Kaldi. Every step is a loop over `lane`, `lane + lanes`, ...: CUDA threads of a block run
// the lanes together (synchronising between steps), the CPU kernel runs one lane.
#pragma once

#include <cmath>
#include <cstdint>

#include "common.h"

namespace oasr::fbank {

constexpr float kFloor = 1.1920928955078125e-07f;  // FLT_EPSILON

struct Params {
  int64_t window_size;   // W samples per frame
  int64_t fft_size;      // P, a power of two >= W
  int64_t log2_fft;
  int64_t num_mel;       // M
  float preemph;
  const float* window;   // [W]
  const float* banks;    // [P/2][M]
  const float* twiddle;  // [P/2][2]: cos and sin of -2 pi k / P
};

OASR_HD inline int64_t bit_reverse(int64_t i, int64_t bits) {
  int64_t r = 0;
  for (int64_t b = 0; b < bits; ++b) r |= ((i >> b) & 1) << (bits - 1 - b);
  return r;
}

// DC-removed, pre-emphasised, windowed frame, zero padded to P, stored in bit-reversed order.
OASR_HD inline void prepare(const float* samples, float mean, const Params& p, float* re, float* im, int64_t lane,
                            int64_t lanes) {
  for (int64_t i = lane; i < p.fft_size; i += lanes) {
    float v = 0.f;
    if (i < p.window_size) {
      const float x = samples[i] - mean;
      const float prev = i > 0 ? samples[i - 1] - mean : x;  // Kaldi: the first sample is its own predecessor
      v = (x - p.preemph * prev) * p.window[i];
    }
    const int64_t r = bit_reverse(i, p.log2_fft);
    re[r] = v;
    im[r] = 0.f;
  }
}

// One radix-2 stage: butterflies spanning `half` (1, 2, 4, ... P/2).
OASR_HD inline void fft_stage(float* re, float* im, const Params& p, int64_t half, int64_t lane, int64_t lanes) {
  const int64_t step = p.fft_size / (2 * half);
  for (int64_t j = lane; j < p.fft_size / 2; j += lanes) {
    const int64_t pos = j % half;
    const int64_t i0 = (j / half) * 2 * half + pos, i1 = i0 + half;
    const float wr = p.twiddle[2 * pos * step], wi = p.twiddle[2 * pos * step + 1];
    const float tr = wr * re[i1] - wi * im[i1];
    const float ti = wr * im[i1] + wi * re[i1];
    re[i1] = re[i0] - tr;
    im[i1] = im[i0] - ti;
    re[i0] += tr;
    im[i0] += ti;
  }
}

// Power spectrum of bins 0..P/2-1, into re.
OASR_HD inline void power(float* re, const float* im, const Params& p, int64_t lane, int64_t lanes) {
  for (int64_t k = lane; k < p.fft_size / 2; k += lanes) re[k] = re[k] * re[k] + im[k] * im[k];
}

// log(max(mel energy, FLT_EPSILON)) of each mel bin, from the power spectrum.
OASR_HD inline void log_mel(const float* pow, const Params& p, float* out, int64_t lane, int64_t lanes) {
  for (int64_t m = lane; m < p.num_mel; m += lanes) {
    float e = 0.f;
    for (int64_t k = 0; k < p.fft_size / 2; ++k) e += pow[k] * p.banks[k * p.num_mel + m];
    out[m] = logf(e > kFloor ? e : kFloor);
  }
}

struct Args {
  at::Tensor waveform, frame_starts, window, mel_banks, twiddle;
  double preemph;
};

// Shapes, dtypes, devices, and that every frame lies inside the waveform. Returns the Params
// sizes (pointers are filled by the kernels).
Params check_args(const Args& a);

// A checked call's inputs, contiguous, the Params pointing into them, and the output (F, M).
struct Launch {
  at::Tensor waveform, frame_starts, window, mel_banks, twiddle, out;
  Params p;
};

#if OASR_WITH_CUDA
// fbank.cu: one thread block per frame.
void launch_cuda(const Launch& l);
#endif

}  // namespace oasr::fbank
