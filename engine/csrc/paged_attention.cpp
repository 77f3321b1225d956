// Paged attention: the operator (checks, dispatch to the device's kernel) and the CPU kernel:
// (row, head) pairs in parallel on torch's OpenMP pool. The inner
// loops work on 16 queries or 16 head dims at once (vector extension types, no horizontal
// reductions); target_clones builds AVX2/FMA and AVX-512 variants picked at load time.
#include "paged_attention.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OASR_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define OASR_CLONES
#endif

namespace oasr::paged {

namespace {
constexpr const char* kOp = "oasr::paged_attention";
}

void check_args(const Args& a) {
  const at::Device dev = a.query.device();
  TORCH_CHECK(a.query.dim() == 4, kOp, ": query must be (batch, chunk, heads, head_dim), got shape ",
              a.query.sizes());
  const int64_t B = a.query.size(0), C = a.query.size(1), H = a.query.size(2), D = a.query.size(3);
  const at::ScalarType dt = a.query.scalar_type();
  TORCH_CHECK(dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16, kOp,
              ": query must be float32, float16 or bfloat16, got ", dt);
  check_arg(kOp, "key", a.key, dt, {B, C, H, D}, dev);
  check_arg(kOp, "value", a.value, dt, {B, C, H, D}, dev);
  TORCH_CHECK(a.key_pool.dim() == 3, kOp, ": key_pool must be (slots, heads, head_dim), got shape ",
              a.key_pool.sizes());
  const int64_t S = a.key_pool.size(0);
  check_arg(kOp, "key_pool", a.key_pool, dt, {S, H, D}, dev);
  check_arg(kOp, "value_pool", a.value_pool, dt, {S, H, D}, dev);
  TORCH_CHECK(a.block_size >= 1 && S % a.block_size == 0, kOp, ": block_size ", a.block_size,
              " does not divide the pool's ", S, " slots");
  TORCH_CHECK(a.block_table.dim() == 2, kOp, ": block_table must be (batch, blocks), got shape ",
              a.block_table.sizes());
  const int64_t M = a.block_table.size(1);
  check_arg(kOp, "block_table", a.block_table, at::kLong, {B, M}, dev);
  check_arg(kOp, "context_start", a.context_start, at::kLong, {B}, dev);
  check_arg(kOp, "context_lens", a.context_lens, at::kLong, {B}, dev);
  check_arg(kOp, "chunk_lens", a.chunk_lens, at::kLong, {B}, dev);
  TORCH_CHECK(std::isfinite(a.scale), kOp, ": scale must be finite, got ", a.scale);
  const auto host = [](const at::Tensor& t) { return t.to(at::kCPU).contiguous(); };
  const at::Tensor start = host(a.context_start), lens = host(a.context_lens), table = host(a.block_table);
  check_range(kOp, "chunk_lens", host(a.chunk_lens), 0, C);
  check_range(kOp, "context_start", start, 0, M * a.block_size);
  const int64_t* st = start.data_ptr<int64_t>();
  const int64_t* ln = lens.data_ptr<int64_t>();
  const int64_t* bt = table.data_ptr<int64_t>();
  const int64_t num_blocks = S / a.block_size;
  int64_t max_context = 0;
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(ln[b] >= 0 && st[b] + ln[b] <= M * a.block_size, kOp, ": row ", b, " reads context frames [",
                st[b], ", ", st[b] + ln[b], ") past its ", M, " blocks of ", a.block_size);
    max_context = std::max(max_context, ln[b]);
    if (ln[b] == 0) continue;
    for (int64_t i = st[b] / a.block_size; i <= (st[b] + ln[b] - 1) / a.block_size; ++i) {
      TORCH_CHECK(bt[b * M + i] >= 0 && bt[b * M + i] < num_blocks, kOp, ": block_table[", b, ", ", i, "] = ",
                  bt[b * M + i], " is not a block of the pool (", num_blocks, " blocks)");
    }
  }
  if (a.score_bias.has_value()) {
    const at::Tensor& bias = *a.score_bias;
    TORCH_CHECK(bias.dim() == 4 && bias.size(3) >= C, kOp,
                ": score_bias must be (batch, heads, chunk, context + chunk), got shape ", bias.sizes());
    check_arg(kOp, "score_bias", bias, dt, {B, H, C, bias.size(3)}, dev);
    TORCH_CHECK(bias.size(3) - C >= max_context, kOp, ": score_bias has ", bias.size(3) - C,
                " context columns, a row reads ", max_context);
  }
}

namespace {

// One (row, head): C queries against n_ctx pool keys and n_chunk chunk keys.
struct HeadTask {
  const float* q;        // query row b, head h: element (i, k) at q[i * stride + k]
  const float* key;      // chunk keys, same layout
  const float* value;
  const float* kpool;    // pool + h * D: slot s at kpool[s * stride_pool]
  const float* vpool;
  const int64_t* slots;  // [n_ctx]
  const float* bias;     // (C, Tb) for (b, h) or nullptr: element (i, col) at bias[i * bias_i + col * bias_j]
  float* out;            // out row b, head h: (i, k) at out[i * stride + k]
  int64_t n_ctx, n_chunk, C, D, stride, stride_pool, bias_i, bias_j, bias_ctx;
  float scale;
};

// 16 floats in one value (GCC/Clang vector extension): one AVX-512 register, two AVX2 or four
// SSE registers in the respective target_clones variants. Plain loops over 16 lanes get fully
// unrolled into scalar code instead, which is 16x slower.
typedef float Vec __attribute__((vector_size(64)));
typedef int32_t IVec __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;  // queries scored together / head dims accumulated together

// Always inlined: a Vec passed between functions compiled for different targets would change ABI.
#define OASR_VEC_INLINE static inline __attribute__((always_inline))

OASR_VEC_INLINE Vec load(const float* p) {
  Vec v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

OASR_VEC_INLINE void store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof(v)); }

OASR_VEC_INLINE Vec splat(float x) {
  Vec v = {};
  return v + x;
}

// exp(x) for x <= 0 (scores minus their row's maximum): 2^n * 2^f with a degree-7 Taylor
// polynomial of 2^f on [-1/2, 1/2] (relative error < 1e-7); libm's expf does not vectorize.
OASR_VEC_INLINE Vec exp_nonpositive(Vec x) {
  x = x < splat(-87.0f) ? splat(-87.0f) : x;
  const Vec t = x * 1.44269504088896341f;
  const Vec n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (|t| < 2^22)
  const Vec f = (t - n) * 0.693147180559945309f;
  Vec p = splat(1.0f / 5040.0f);
  p = p * f + 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  const IVec bits = (__builtin_convertvector(n, IVec) + 127) << 23;
  return p * reinterpret_cast<Vec>(bits);  // a bit cast between vectors of one size
}

OASR_CLONES void attend_head(const HeadTask& t, float* work) {
  const int64_t C = t.C, D = t.D, n = t.n_ctx + t.n_chunk;
  float* qt = work;                  // [D][kLanes]: the query tile, transposed
  float* scores = qt + D * kLanes;   // [n][kLanes]
  const auto key_row = [&](int64_t j) {
    return j < t.n_ctx ? t.kpool + t.slots[j] * t.stride_pool : t.key + (j - t.n_ctx) * t.stride;
  };
  const auto value_row = [&](int64_t j) {
    return j < t.n_ctx ? t.vpool + t.slots[j] * t.stride_pool : t.value + (j - t.n_ctx) * t.stride;
  };
  for (int64_t q0 = 0; q0 < C; q0 += kLanes) {
    const int64_t nq = std::min(kLanes, C - q0);
    for (int64_t k = 0; k < D; ++k) {
      for (int64_t i = 0; i < kLanes; ++i) qt[k * kLanes + i] = i < nq ? t.q[(q0 + i) * t.stride + k] : 0.f;
    }
    Vec row_max = splat(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < n; ++j) {  // the tile's scores against every key
      const float* kj = key_row(j);
      Vec acc = {};
      for (int64_t k = 0; k < D; ++k) acc += kj[k] * load(qt + k * kLanes);
      if (t.bias != nullptr) {
        const int64_t col = j < t.n_ctx ? j : t.bias_ctx + (j - t.n_ctx);
        for (int64_t i = 0; i < nq; ++i) acc[i] += t.bias[(q0 + i) * t.bias_i + col * t.bias_j];
      }
      acc *= t.scale;
      row_max = acc > row_max ? acc : row_max;
      store(scores + j * kLanes, acc);
    }
    Vec row_sum = {};
    for (int64_t j = 0; j < n; ++j) {
      const Vec p = exp_nonpositive(load(scores + j * kLanes) - row_max);
      row_sum += p;
      store(scores + j * kLanes, p);
    }
    for (int64_t i = 0; i < nq; ++i) {
      const float inv = row_sum[i] > 0.f ? 1.f / row_sum[i] : 0.f;  // no key at all: zeros, like the reference
      float* out = t.out + (q0 + i) * t.stride;
      int64_t d0 = 0;
      for (; d0 + kLanes <= D; d0 += kLanes) {
        Vec acc = {};
        for (int64_t j = 0; j < n; ++j) acc += scores[j * kLanes + i] * load(value_row(j) + d0);
        store(out + d0, acc * inv);
      }
      for (; d0 < D; ++d0) {
        float acc = 0.f;
        for (int64_t j = 0; j < n; ++j) acc += scores[j * kLanes + i] * value_row(j)[d0];
        out[d0] = acc * inv;
      }
    }
  }
}

void run_cpu(const Launch& l) {
  const int64_t B = l.q.size(0), C = l.q.size(1), H = l.q.size(2), D = l.q.size(3);
  const int64_t block_size = l.block_size;
  const at::Tensor &q = l.q, &k = l.k, &v = l.v, &kp = l.key_pool, &vp = l.value_pool, &bias = l.bias, &out = l.out;
  const at::Tensor &bt = l.block_table, &st = l.context_start, &cl = l.context_lens, &nl = l.chunk_lens;
  const int64_t M = bt.size(1);
  const int64_t* btp = bt.data_ptr<int64_t>();
  const int64_t* stp = st.data_ptr<int64_t>();
  const int64_t* clp = cl.data_ptr<int64_t>();
  const int64_t* nlp = nl.data_ptr<int64_t>();
  const int64_t max_ctx = B ? *std::max_element(clp, clp + B) : 0;
  const int64_t Tb = bias.defined() ? bias.size(3) : 0;
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots(max_ctx);
    std::vector<float> work(D * kLanes + (max_ctx + C) * kLanes);
    int64_t slots_row = -1;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      if (b != slots_row) {  // slot of each context frame of row b, shared by its heads
        for (int64_t p = 0; p < clp[b]; ++p) {
          const int64_t pos = stp[b] + p;
          slots[p] = btp[b * M + pos / block_size] * block_size + pos % block_size;
        }
        slots_row = b;
      }
      HeadTask t;
      t.q = q.data_ptr<float>() + b * C * H * D + h * D;
      t.key = k.data_ptr<float>() + b * C * H * D + h * D;
      t.value = v.data_ptr<float>() + b * C * H * D + h * D;
      t.kpool = kp.data_ptr<float>() + h * D;
      t.vpool = vp.data_ptr<float>() + h * D;
      t.slots = slots.data();
      t.bias = bias.defined() ? bias.data_ptr<float>() + (b * H + h) * C * Tb : nullptr;
      t.out = out.data_ptr<float>() + b * C * H * D + h * D;
      t.n_ctx = clp[b];
      t.n_chunk = nlp[b];
      t.C = C;
      t.D = D;
      t.stride = H * D;
      t.stride_pool = H * D;
      t.bias_i = Tb;
      t.bias_j = 1;
      t.bias_ctx = Tb - C;
      t.scale = static_cast<float>(l.scale);
      attend_head(t, work.data());
    }
  });
}

at::Tensor paged_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const at::Tensor& key_pool, const at::Tensor& value_pool, const at::Tensor& block_table,
                           const at::Tensor& context_start, const at::Tensor& context_lens,
                           const at::Tensor& chunk_lens, const c10::optional<at::Tensor>& score_bias, double scale,
                           int64_t block_size) {
  check_args(Args{query, key, value, key_pool, value_pool, block_table, context_start, context_lens, chunk_lens,
                  score_bias, scale, block_size});
  const Launch l{query.contiguous(),
                 key.contiguous(),
                 value.contiguous(),
                 key_pool.contiguous(),
                 value_pool.contiguous(),
                 block_table.contiguous(),
                 context_start.contiguous(),
                 context_lens.contiguous(),
                 chunk_lens.contiguous(),
                 score_bias.has_value() ? score_bias->contiguous() : at::Tensor(),
                 at::empty(query.sizes(), query.options()),
                 scale,
                 block_size};
  if (query.is_cuda()) {
#if OASR_WITH_CUDA
    if (query.numel() > 0) launch_cuda(l);
#endif
  } else {
    TORCH_CHECK(query.scalar_type() == at::kFloat, kOp, ": the CPU kernel takes float32, got ", query.scalar_type());
    run_cpu(l);
  }
  return l.out;
}

}  // namespace
}  // namespace oasr::paged

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("paged_attention", &oasr::paged::paged_attention); }
#if OASR_WITH_CUDA
TORCH_LIBRARY_IMPL(oasr, CUDA, m) { m.impl("paged_attention", &oasr::paged::paged_attention); }
#endif
