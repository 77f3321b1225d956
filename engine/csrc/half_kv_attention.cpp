// Attention of float32 queries over float16 keys and values, with its log-sum-exp: the Whisper
// decoder's cross-attention on a CPU (engine/ops/half_kv_attention.py). A decoder step reads every
// window's cross K/V once (~4 MB a layer for a 28 s window) and does little arithmetic with it:
// the step is bound by memory bandwidth, and float16 storage halves the bytes. Every (item, head)
// is computed by one thread in one fixed order, so results do not depend on the thread count or
// on the other items of the call; the vector path is the same AVX2/F16C/FMA code on every x86 CPU
// that has them (AVX2 and AVX-512 machines alike), so results agree bit for bit between them.
// An item's own positions may go on with a tail every item shares (Whisper's encoded silence after
// a short 'fit' window): it is read from the item's length on, in the same softmax.
// K/V rows are float16 (D values), or int8 (D values, then the row's float32 scale in 4 more bytes:
// value = scale * int8; engine/ops/int8_kv.py packs them), a quarter of float32's bytes. An int8
// row's values convert exactly to float32 and its scale multiplies the row's dot product (keys) or
// its softmax weight (values), in the same order on every path, so the per-query and the blocked
// paths agree bit for bit as they do for float16.
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <limits>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OASR_HALF_KV_VECTOR 1
#endif

#include "common.h"
#include "int8_kv.h"

namespace oasr::half_kv_attention {

namespace {

constexpr char kOp[] = "half_kv_attention";

// Strides (in elements) of one (item, head)'s rows and where its first row starts.
struct Operand {
  const void* base;
  int64_t item_stride, head_stride, row_stride;
  template <typename T>
  const T* rows(int64_t g, int64_t h) const {
    return static_cast<const T*>(base) + g * item_stride + h * head_stride;
  }
};

Operand operand_of(const at::Tensor& t) {
  return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)};
}

template <typename Elem>
constexpr bool kScaled = std::is_same_v<Elem, int8_t>;

// Rows of one (item, head): its own positions, then (n > 0) the shared tail after them.
template <typename Elem>
struct KvRows {
  const Elem* k;
  const Elem* v;
  int64_t k_row, v_row, n;
};

// The scales of `own` then `tail`'s rows (keys: `key`, else values) into scales[0, own.n + tail.n).
template <typename Elem>
void gather_scales(const KvRows<Elem>& own, const KvRows<Elem>& tail, bool key, int64_t D, float* scales) {
  int64_t at = 0;
  for (const KvRows<Elem>* rows : {&own, &tail}) {
    const Elem* base = key ? rows->k : rows->v;
    const int64_t stride = key ? rows->k_row : rows->v_row;
    for (int64_t s = 0; s < rows->n; ++s) scales[at++] = packed_scale(base + s * stride, D);
  }
}

// Softmax weights p[0, len) times their value rows' scales, in place (int8 values).
inline void scale_weights(float* p, const float* scales, int64_t len) {
  for (int64_t s = 0; s < len; ++s) p[s] *= scales[s];
}

// One query's softmax attention over `own` then `tail`: out (D) and the log-sum-exp; the scalar
// reference for CPUs without AVX2/F16C/FMA and for head sizes the vector path does not take.
template <typename Elem>
void attend_scalar(const float* q, const KvRows<Elem>& own, const KvRows<Elem>& tail, int64_t D, float scale,
                   float* scores, float* out, float* lse) {
  float top = -std::numeric_limits<float>::infinity();
  int64_t at = 0;
  for (const KvRows<Elem>* rows : {&own, &tail}) {
    for (int64_t s = 0; s < rows->n; ++s, ++at) {
      const Elem* row = rows->k + s * rows->k_row;
      float dot = 0.f;
      for (int64_t d = 0; d < D; ++d) dot += q[d] * static_cast<float>(row[d]);
      if constexpr (kScaled<Elem>) dot *= packed_scale(row, D);
      scores[at] = dot * scale;
      top = std::max(top, scores[at]);
    }
  }
  float total = 0.f;
  for (int64_t s = 0; s < at; ++s) {
    scores[s] = std::exp(scores[s] - top);
    total += scores[s];
  }
  for (int64_t d = 0; d < D; ++d) out[d] = 0.f;
  at = 0;
  for (const KvRows<Elem>* rows : {&own, &tail}) {
    for (int64_t s = 0; s < rows->n; ++s, ++at) {
      const Elem* row = rows->v + s * rows->v_row;
      float p = scores[at];
      if constexpr (kScaled<Elem>) p *= packed_scale(row, D);
      for (int64_t d = 0; d < D; ++d) out[d] += p * static_cast<float>(row[d]);
    }
  }
  for (int64_t d = 0; d < D; ++d) out[d] /= total;
  *lse = top + std::log(total);
}

#ifdef OASR_HALF_KV_VECTOR
#define OASR_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

constexpr int64_t kMaxChunks = 32;  // head sizes up to 256 on the vector path

OASR_AVX2_F16C inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8 int8 values as float32 (exact).
OASR_AVX2_F16C inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// Rows already converted to float32 (a block of them, for several queries): the same values
// load8 gives from their float16 or int8 (the conversion is exact), so the same scores and sums.
OASR_AVX2_F16C inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }


OASR_AVX2_F16C inline float sum8(__m256 x) {
  // ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)): the order of scores8's transpose of adds,
  // so a row's score does not depend on whether it falls in a block of eight
  const __m256 pairs = _mm256_hadd_ps(x, x);
  const __m256 quads = _mm256_hadd_ps(pairs, pairs);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1)));
}

// exp of 8 floats: 2^n * e^r with r in [-ln2/2, ln2/2] and a degree-6 polynomial for e^r
// (relative error ~2 ulp); inputs below -87 give 0 (a softmax term that small is 0 in float32).
OASR_AVX2_F16C inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(below, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// The scores of 8 consecutive rows: each row's 8-lane partial dot products, summed across lanes
// in one transpose of adds.
template <int64_t kChunks, typename Elem>
OASR_AVX2_F16C inline __m256 scores8(const __m256* q, const Elem* k, int64_t k_row, int64_t runtime_chunks) {
  const int64_t chunks = kChunks > 0 ? kChunks : runtime_chunks;
  __m256 acc[8];  // eight rows' dependency chains interleaved: one row's alone waits on each FMA
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_mul_ps(q[0], load8(k + j * k_row));
  for (int64_t c = 1; c < chunks; ++c) {
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(q[c], load8(k + j * k_row + 8 * c), acc[j]);
  }
  const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// The scaled scores of n rows (k, k_row apart; the first at an 8-row boundary of its segment:
// rows are taken eight at a time from there) into scores[0, n), and their running maximum.
// `row_scales` (int8 rows): each row's dot product is multiplied by its scale first.
template <int64_t kChunks, typename Elem>
OASR_AVX2_F16C void score_rows(const __m256* q, int64_t runtime_chunks, __m256 scale8, const Elem* k, int64_t k_row,
                               int64_t n, float* scores, __m256& top8, const float* row_scales = nullptr) {
  const int64_t chunks = kChunks > 0 ? kChunks : runtime_chunks;
  const int64_t whole = n - n % 8;
  for (int64_t s = 0; s < whole; s += 8) {
    __m256 dots = scores8<kChunks>(q, k + s * k_row, k_row, chunks);
    if (row_scales != nullptr) dots = _mm256_mul_ps(dots, _mm256_loadu_ps(row_scales + s));
    const __m256 sc = _mm256_mul_ps(dots, scale8);
    _mm256_storeu_ps(scores + s, sc);
    top8 = _mm256_max_ps(top8, sc);
  }
  for (int64_t s = whole; s < n; ++s) {
    const Elem* row = k + s * k_row;
    __m256 a = _mm256_mul_ps(q[0], load8(row));
    for (int64_t c = 1; c < chunks; ++c) a = _mm256_fmadd_ps(q[c], load8(row + 8 * c), a);
    float dot = sum8(a);  // sum8 adds as scores8's tree: the same score
    if (row_scales != nullptr) dot *= row_scales[s];
    scores[s] = dot * _mm256_cvtss_f32(scale8);
    top8 = _mm256_max_ps(top8, _mm256_set1_ps(scores[s]));
  }
}

// The horizontal maximum of a running top8.
OASR_AVX2_F16C inline float max8(__m256 top8) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top8);
  float top = -std::numeric_limits<float>::infinity();
  for (float x : lanes) top = std::max(top, x);
  return top;
}

// scores[0, len) -> exp(score - top) in place; returns their sum.
OASR_AVX2_F16C float exp_in_place(float* scores, int64_t len, float top) {
  const int64_t whole = len - len % 8;
  const __m256 top_b = _mm256_set1_ps(top);
  __m256 total8 = _mm256_setzero_ps();
  for (int64_t s = 0; s < whole; s += 8) {
    const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + s), top_b));
    _mm256_storeu_ps(scores + s, p);
    total8 = _mm256_add_ps(total8, p);
  }
  float total = sum8(total8);
  if (whole < len) {
    alignas(32) float rest[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t s = whole; s < len; ++s) rest[s - whole] = scores[s] - top;
    alignas(32) float p[8];
    _mm256_store_ps(p, exp8(_mm256_load_ps(rest)));
    for (int64_t s = whole; s < len; ++s) {
      scores[s] = p[s - whole];
      total += p[s - whole];
    }
  }
  return total;
}

// acc[c] += p[s] * v[s][c] over n rows, in row order.
template <int64_t kChunks, typename Elem>
OASR_AVX2_F16C inline void accumulate_values(__m256* acc, int64_t chunks, const float* p, const Elem* v, int64_t v_row,
                                             int64_t n) {
  for (int64_t s = 0; s < n; ++s) {
    const __m256 ps = _mm256_set1_ps(p[s]);
    const Elem* row = v + s * v_row;
    for (int64_t c = 0; c < (kChunks > 0 ? kChunks : chunks); ++c) acc[c] = _mm256_fmadd_ps(ps, load8(row + 8 * c), acc[c]);
  }
}

// One query's softmax over `own` followed by `tail` (the shared silence after an item's own
// positions; n = 0: none); `scores` holds both. Int8 rows: `k_scales` / `v_scales` hold their
// rows' scales (gather_scales), as `scores` does its scores.
template <int64_t kChunks, typename Elem>
OASR_AVX2_F16C void attend_vector(const float* q_in, const KvRows<Elem>& own, const KvRows<Elem>& tail, int64_t D,
                                  float scale, float* scores, const float* k_scales, const float* v_scales,
                                  float* out, float* lse) {
  const int64_t chunks = kChunks > 0 ? kChunks : D / 8, len = own.n + tail.n;
  __m256 q[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) q[c] = _mm256_loadu_ps(q_in + 8 * c);
  const __m256 scale8 = _mm256_set1_ps(scale);
  __m256 top8 = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  score_rows<kChunks>(q, chunks, scale8, own.k, own.k_row, own.n, scores, top8, k_scales);
  score_rows<kChunks>(q, chunks, scale8, tail.k, tail.k_row, tail.n, scores + own.n, top8,
                      k_scales == nullptr ? nullptr : k_scales + own.n);
  const float top = max8(top8);
  const float total = exp_in_place(scores, len, top);
  if (v_scales != nullptr) scale_weights(scores, v_scales, len);
  __m256 acc[kMaxChunks];
  for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm256_setzero_ps();
  accumulate_values<kChunks>(acc, chunks, scores, own.v, own.v_row, own.n);
  accumulate_values<kChunks>(acc, chunks, scores + own.n, tail.v, tail.v_row, tail.n);
  const __m256 total_b = _mm256_set1_ps(total);
  for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_div_ps(acc[c], total_b));
  *lse = top + std::log(total);
}

// Rows converted to float32 a block at a time: small enough to stay in L1 while every query
// reads it. A multiple of 8, so a segment's rows are taken eight at a time from its start, as
// one query alone takes them.
constexpr int64_t kBlockRows = 64;

// From this many queries of one (item, head) on (a prefill's tokens, an alignment pass), rows are
// converted a block at a time for all of them. Measured, 2 threads, this CPU (Sapphire Rapids):
// 4 items of 300 positions and the 1500-position tail, 60 queries 6.8 -> 4.6 ms, 20 queries
// 2.4 -> 2.1 ms; but 5 queries (beams) over 1500 positions no faster (1.47 -> 1.45 ms, one item
// alone 0.16 -> 0.19 ms): a few queries are bound by reading the rows, not by converting them.
constexpr int64_t kBlockedQueries = 8;

// Buffers of one thread for `attend_queries`.
struct QueryScratch {
  std::unique_ptr<float[]> scores, block, acc, top, totals;
  QueryScratch(int64_t T, int64_t most, int64_t D)
      : scores(new float[T * most]), block(new float[kBlockRows * D]), acc(new float[T * D]), top(new float[T * 8]),
        totals(new float[T]) {}
};

// rows[0, n) of a float16 or int8 segment into `block` as float32, D apart (int8: unscaled).
template <typename Elem>
OASR_AVX2_F16C inline void convert_rows(const Elem* rows, int64_t row_stride, int64_t n, int64_t D, float* block) {
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t d = 0; d < D; d += 8) _mm256_storeu_ps(block + s * D + d, load8(rows + s * row_stride + d));
  }
}

// T queries (D apart) over the same rows: what attend_vector gives each of them, bit for bit
// (the same operations in the same order per query), with every float16 row converted once for
// all queries instead of once per query (the conversion, not the arithmetic, bounds a query).
template <int64_t kChunks, typename Elem>
OASR_AVX2_F16C void attend_queries(const float* q_in, int64_t T, const KvRows<Elem>& own, const KvRows<Elem>& tail,
                                   int64_t D, float scale, QueryScratch& scratch, int64_t most, const float* k_scales,
                                   const float* v_scales, float* out, float* lse) {
  const int64_t chunks = kChunks > 0 ? kChunks : D / 8, len = own.n + tail.n;
  const __m256 scale8 = _mm256_set1_ps(scale);
  float* block = scratch.block.get();
  for (int64_t t = 0; t < T; ++t) {
    _mm256_storeu_ps(scratch.top.get() + 8 * t, _mm256_set1_ps(-std::numeric_limits<float>::infinity()));
  }
  int64_t base = 0;
  for (const KvRows<Elem>* rows : {&own, &tail}) {
    for (int64_t b = 0; b < rows->n; b += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows->n - b);
      convert_rows(rows->k + b * rows->k_row, rows->k_row, n, D, block);
      for (int64_t t = 0; t < T; ++t) {
        __m256 q[kMaxChunks];
        for (int64_t c = 0; c < chunks; ++c) q[c] = _mm256_loadu_ps(q_in + t * D + 8 * c);
        __m256 top8 = _mm256_loadu_ps(scratch.top.get() + 8 * t);
        score_rows<kChunks>(q, chunks, scale8, static_cast<const float*>(block), D, n,
                            scratch.scores.get() + t * most + base + b, top8,
                            k_scales == nullptr ? nullptr : k_scales + base + b);
        _mm256_storeu_ps(scratch.top.get() + 8 * t, top8);
      }
    }
    base += rows->n;
  }
  float* totals = scratch.totals.get();
  for (int64_t t = 0; t < T; ++t) {
    const float top = max8(_mm256_loadu_ps(scratch.top.get() + 8 * t));
    totals[t] = exp_in_place(scratch.scores.get() + t * most, len, top);
    lse[t] = top + std::log(totals[t]);
    if (v_scales != nullptr) scale_weights(scratch.scores.get() + t * most, v_scales, len);
  }
  std::fill(scratch.acc.get(), scratch.acc.get() + T * D, 0.f);
  base = 0;
  for (const KvRows<Elem>* rows : {&own, &tail}) {
    for (int64_t b = 0; b < rows->n; b += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows->n - b);
      convert_rows(rows->v + b * rows->v_row, rows->v_row, n, D, block);
      for (int64_t t = 0; t < T; ++t) {
        __m256 acc[kMaxChunks];
        float* acc_t = scratch.acc.get() + t * D;
        for (int64_t c = 0; c < chunks; ++c) acc[c] = _mm256_loadu_ps(acc_t + 8 * c);
        accumulate_values<kChunks>(acc, chunks, scratch.scores.get() + t * most + base + b,
                                   static_cast<const float*>(block), D, n);
        for (int64_t c = 0; c < chunks; ++c) _mm256_storeu_ps(acc_t + 8 * c, acc[c]);
      }
    }
    base += rows->n;
  }
  for (int64_t t = 0; t < T; ++t) {
    const __m256 total_b = _mm256_set1_ps(totals[t]);
    for (int64_t c = 0; c < chunks; ++c) {
      _mm256_storeu_ps(out + t * D + 8 * c, _mm256_div_ps(_mm256_loadu_ps(scratch.acc.get() + t * D + 8 * c), total_b));
    }
  }
}

bool vector_path(int64_t D) {
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return cpu && D % 8 == 0 && D / 8 <= kMaxChunks;
}
#else
bool vector_path(int64_t) { return false; }
#endif

// Every (item, head) of a call: item g's own rows and the tail's after them, its T queries.
struct Call {
  const float* q;
  const int64_t* lengths;
  float* out;
  float* lse;
  Operand k, v;
  const void* k_tail;
  const void* v_tail;
  int64_t kt_head, kt_row, vt_head, vt_row, S_tail, most, G, H, T, D;
  float scale;
};

template <typename Elem>
void run(const Call& c) {
  const bool vector = vector_path(c.D);
  const int64_t D = c.D, T = c.T, H = c.H;
  const Elem* kt = static_cast<const Elem*>(c.k_tail);
  const Elem* vt = static_cast<const Elem*>(c.v_tail);
  at::parallel_for(0, c.G * H, 1, [&](int64_t begin, int64_t end) {
    std::unique_ptr<float[]> scores_buf(new float[c.most]);
    float* scores = scores_buf.get();
    // int8 rows: their scales, gathered once per (item, head) (float16: none)
    std::unique_ptr<float[]> scale_buf(kScaled<Elem> ? new float[2 * c.most] : nullptr);
    float* k_scales = scale_buf.get();
    float* v_scales = kScaled<Elem> ? k_scales + c.most : nullptr;
    std::unique_ptr<QueryScratch> scratch;
    for (int64_t gh = begin; gh < end; ++gh) {
      const int64_t g = gh / H, h = gh % H, len = c.lengths[g];
      const int64_t tail_n = std::max<int64_t>(0, c.S_tail - len);
      const KvRows<Elem> own{c.k.rows<Elem>(g, h), c.v.rows<Elem>(g, h), c.k.row_stride, c.v.row_stride, len};
      const KvRows<Elem> tail{tail_n ? kt + h * c.kt_head + len * c.kt_row : nullptr,
                              tail_n ? vt + h * c.vt_head + len * c.vt_row : nullptr, c.kt_row, c.vt_row, tail_n};
      if constexpr (kScaled<Elem>) {
        gather_scales(own, tail, true, D, k_scales);
        gather_scales(own, tail, false, D, v_scales);
      }
#ifdef OASR_HALF_KV_VECTOR
      if (vector && T >= kBlockedQueries) {
        if (!scratch) scratch = std::make_unique<QueryScratch>(T, c.most, D);
        const float* q_rows = c.q + gh * T * D;
        if (D == 64) {
          attend_queries<8>(q_rows, T, own, tail, D, c.scale, *scratch, c.most, k_scales, v_scales,
                            c.out + gh * T * D, c.lse + gh * T);
        } else {
          attend_queries<0>(q_rows, T, own, tail, D, c.scale, *scratch, c.most, k_scales, v_scales,
                            c.out + gh * T * D, c.lse + gh * T);
        }
        continue;
      }
      if (vector) {
        for (int64_t t = 0; t < T; ++t) {
          const int64_t at_q = gh * T + t;
          // a head size of 64 (every Whisper model's) is unrolled: its accumulators stay in registers
          if (D == 64) {
            attend_vector<8>(c.q + at_q * D, own, tail, D, c.scale, scores, k_scales, v_scales, c.out + at_q * D,
                             c.lse + at_q);
          } else {
            attend_vector<0>(c.q + at_q * D, own, tail, D, c.scale, scores, k_scales, v_scales, c.out + at_q * D,
                             c.lse + at_q);
          }
        }
        continue;
      }
#endif
      for (int64_t t = 0; t < T; ++t) {
        const int64_t at_q = gh * T + t;
        attend_scalar(c.q + at_q * D, own, tail, D, c.scale, scores, c.out + at_q * D, c.lse + at_q);
      }
    }
  });
  (void)vector;
}

}  // namespace

// q (G, H, T, D) float32; k, v (G, H, S, D) float16, or (G, H, S, D + 4) int8 rows with their
// scales (engine/ops/int8_kv.py), rows contiguous; lengths (G,) int64: item g attends over its
// first lengths[g] rows and, with k_tail / v_tail (H, S_tail, D or D + 4) of the same kind (shared
// by every item: Whisper's encoded silence), over their rows from lengths[g] on, in one softmax.
// Returns out (G, H, T, D) float32 and lse (G, H, T).
std::tuple<at::Tensor, at::Tensor> half_kv_attention(const at::Tensor& q_in, const at::Tensor& k,
                                                     const at::Tensor& v, const at::Tensor& lengths_in,
                                                     double scale, const std::optional<at::Tensor>& k_tail,
                                                     const std::optional<at::Tensor>& v_tail) {
  const at::Device cpu(at::kCPU);
  check_arg(kOp, "q", q_in, at::kFloat, {-1, -1, -1, -1}, cpu);
  const int64_t G = q_in.size(0), H = q_in.size(1), T = q_in.size(2), D = q_in.size(3);
  const bool int8 = k.scalar_type() == at::kChar;
  const at::ScalarType kind = int8 ? at::kChar : at::kHalf;
  const int64_t width = int8 ? D + kScaleBytes : D;  // a stored row's elements
  check_arg(kOp, "k", k, kind, {G, H, -1, width}, cpu);
  check_arg(kOp, "v", v, kind, {G, H, k.size(2), width}, cpu);
  check_arg(kOp, "lengths", lengths_in, at::kLong, {G}, cpu);
  TORCH_CHECK(k.stride(3) == 1 && v.stride(3) == 1, kOp, ": k and v must have contiguous rows");
  TORCH_CHECK(k_tail.has_value() == v_tail.has_value(), kOp, ": k_tail and v_tail come together");
  const bool with_tail = k_tail.has_value();
  int64_t S_tail = 0;
  if (with_tail) {
    check_arg(kOp, "k_tail", *k_tail, kind, {H, -1, width}, cpu);
    check_arg(kOp, "v_tail", *v_tail, kind, {H, k_tail->size(1), width}, cpu);
    TORCH_CHECK(k_tail->stride(2) == 1 && v_tail->stride(2) == 1, kOp, ": k_tail and v_tail must have contiguous rows");
    S_tail = k_tail->size(1);
  }
  const int64_t S = k.size(2);
  check_range(kOp, "lengths", lengths_in, 1, S);
  const at::Tensor q = q_in.contiguous();
  const at::Tensor lengths = lengths_in.contiguous();
  at::Tensor out = at::empty({G, H, T, D}, q.options());
  at::Tensor lse = at::empty({G, H, T}, q.options());
  Call call{q.data_ptr<float>(), lengths.data_ptr<int64_t>(), out.data_ptr<float>(), lse.data_ptr<float>(),
            operand_of(k), operand_of(v),
            with_tail ? k_tail->data_ptr() : nullptr, with_tail ? v_tail->data_ptr() : nullptr,
            with_tail ? k_tail->stride(0) : 0, with_tail ? k_tail->stride(1) : 0,
            with_tail ? v_tail->stride(0) : 0, with_tail ? v_tail->stride(1) : 0,
            S_tail, std::max(S, S_tail), G, H, T, D, static_cast<float>(scale)};
  if (int8) {
    run<int8_t>(call);
  } else {
    run<c10::Half>(call);
  }
  return {out, lse};
}

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("half_kv_attention", &half_kv_attention); }

}  // namespace oasr::half_kv_attention
