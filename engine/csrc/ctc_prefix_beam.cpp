// CTC prefix beam search: the operator (checks, state buffers, dispatch to the device's kernel)
// and the CPU kernel: rows in parallel on torch's OpenMP pool, frames in order.
#include "ctc_prefix_beam.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace oasr::ctc {

namespace {
constexpr const char* kOp = "oasr::ctc_prefix_beam_search";
}

void check_args(const Args& a) {
  const at::Device dev = a.log_probs.device();
  TORCH_CHECK(a.log_probs.dim() == 3, kOp, ": log_probs must be (batch, frames, vocab), got shape ",
              a.log_probs.sizes());
  const int64_t B = a.log_probs.size(0), T = a.log_probs.size(1), V = a.log_probs.size(2);
  check_arg(kOp, "log_probs", a.log_probs, at::kFloat, {B, T, V}, dev);
  TORCH_CHECK(a.beam >= 1, kOp, ": beam must be >= 1, got ", a.beam);
  TORCH_CHECK(a.blank >= 0 && a.blank < V, kOp, ": blank must be a unit id in [0, ", V, "), got ", a.blank);
  check_arg(kOp, "lengths", a.lengths, at::kLong, {B}, dev);
  check_arg(kOp, "frame_offset", a.frame_offset, at::kLong, {B}, dev);
  check_arg(kOp, "num_hyps", a.num_hyps, at::kLong, {B}, dev);
  TORCH_CHECK(a.hyp_tokens.dim() == 3 && a.hyp_tokens.size(0) == B, kOp,
              ": hyp_tokens must be (batch, hyps, tokens), got shape ", a.hyp_tokens.sizes());
  const int64_t K = a.hyp_tokens.size(1), L = a.hyp_tokens.size(2);
  TORCH_CHECK(K <= a.beam, kOp, ": the incoming state holds ", K, " hypotheses per row, more than beam=", a.beam);
  check_arg(kOp, "hyp_tokens", a.hyp_tokens, at::kLong, {B, K, L}, dev);
  check_arg(kOp, "hyp_frames", a.hyp_frames, at::kLong, {B, K, L}, dev);
  check_arg(kOp, "hyp_token_logprobs", a.hyp_token_logprobs, at::kFloat, {B, K, L}, dev);
  check_arg(kOp, "hyp_lengths", a.hyp_lengths, at::kLong, {B, K}, dev);
  check_arg(kOp, "hyp_scores", a.hyp_scores, at::kDouble, {B, K, 3}, dev);
  check_arg(kOp, "hyp_context", a.hyp_context, at::kLong, {B, K}, dev);
  // Value checks read the small index tensors on the host (one copy when they live on a GPU).
  const auto host = [](const at::Tensor& t) { return t.to(at::kCPU).contiguous(); };
  check_range(kOp, "lengths", host(a.lengths), 0, T);
  check_range(kOp, "num_hyps", host(a.num_hyps), 0, K);
  check_range(kOp, "hyp_lengths", host(a.hyp_lengths), 0, L);
  const int given = a.trie_nodes.has_value() + a.trie_edges.has_value() + a.trie_scores.has_value() +
                    a.trie_roots.has_value();
  TORCH_CHECK(given == 0 || given == 4, kOp,
              ": trie_nodes, trie_edges, trie_scores and trie_roots come together (", given, " of 4 given)");
  if (given == 0) return;
  const at::Tensor& nodes_t = *a.trie_nodes;
  TORCH_CHECK(nodes_t.dim() == 2 && nodes_t.size(0) >= 1, kOp, ": trie_nodes must be (nodes, 2), got shape ",
              nodes_t.sizes());
  const int64_t N = nodes_t.size(0);
  const int64_t E = a.trie_edges->dim() == 2 ? a.trie_edges->size(0) : -1;
  check_arg(kOp, "trie_nodes", nodes_t, at::kLong, {N, 2}, dev);
  check_arg(kOp, "trie_edges", *a.trie_edges, at::kLong, {E, 2}, dev);
  check_arg(kOp, "trie_scores", *a.trie_scores, at::kDouble, {N, 2}, dev);
  check_arg(kOp, "trie_roots", *a.trie_roots, at::kLong, {B}, dev);
  const at::Tensor nodes = host(nodes_t), edges = host(*a.trie_edges), roots = host(*a.trie_roots);
  const at::Tensor context = host(a.hyp_context), num_hyps = host(a.num_hyps);
  const int64_t* n = nodes.data_ptr<int64_t>();
  const int64_t* ed = edges.data_ptr<int64_t>();
  for (int64_t i = 0; i < N; ++i) {
    TORCH_CHECK(n[2 * i] >= 0 && n[2 * i + 1] >= 0 && n[2 * i] + n[2 * i + 1] <= E, kOp, ": trie node ", i,
                " names edges [", n[2 * i], ", ", n[2 * i] + n[2 * i + 1], ") outside [0, ", E, ")");
    for (int64_t j = n[2 * i]; j < n[2 * i] + n[2 * i + 1]; ++j) {
      TORCH_CHECK(ed[2 * j + 1] >= 0 && ed[2 * j + 1] < N, kOp, ": trie edge ", j, " leads to node ",
                  ed[2 * j + 1], " outside [0, ", N, ")");
      TORCH_CHECK(j == n[2 * i] || ed[2 * (j - 1)] < ed[2 * j], kOp, ": the edges of trie node ", i,
                  " are not sorted by token");
    }
  }
  const int64_t* r = roots.data_ptr<int64_t>();
  const int64_t* ctx = context.data_ptr<int64_t>();
  const int64_t* nh = num_hyps.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(r[b] >= -1 && r[b] < N, kOp, ": trie_roots[", b, "] = ", r[b], " is not a node (or -1)");
    for (int64_t h = 0; h < nh[b] && r[b] >= 0; ++h) {
      TORCH_CHECK(ctx[b * K + h] >= 0 && r[b] + ctx[b * K + h] < N, kOp, ": hyp_context[", b, ", ", h,
                  "] = ", ctx[b * K + h], " is not a node of row ", b, "'s trie");
    }
  }
}

Buffers allocate_state(const Args& a) {
  const int64_t B = a.log_probs.size(0), T = a.log_probs.size(1);
  const int64_t K = a.hyp_tokens.size(1), L = a.hyp_tokens.size(2);
  const int64_t cap = L + T;
  const auto opts = a.log_probs.options();
  Buffers s;
  s.num_hyps = a.num_hyps.clone();
  s.tokens = at::zeros({B, a.beam, cap}, opts.dtype(at::kLong));
  s.frames = at::zeros({B, a.beam, cap}, opts.dtype(at::kLong));
  s.logprobs = at::zeros({B, a.beam, cap}, opts.dtype(at::kFloat));
  s.lengths = at::zeros({B, a.beam}, opts.dtype(at::kLong));
  s.scores = at::full({B, a.beam, 3}, -INFINITY, opts.dtype(at::kDouble));
  s.context = at::zeros({B, a.beam}, opts.dtype(at::kLong));
  s.tokens.narrow(1, 0, K).narrow(2, 0, L).copy_(a.hyp_tokens);
  s.frames.narrow(1, 0, K).narrow(2, 0, L).copy_(a.hyp_frames);
  s.logprobs.narrow(1, 0, K).narrow(2, 0, L).copy_(a.hyp_token_logprobs);
  s.lengths.narrow(1, 0, K).copy_(a.hyp_lengths);
  s.scores.narrow(1, 0, K).copy_(a.hyp_scores);
  s.context.narrow(1, 0, K).copy_(a.hyp_context);
  return s;
}

namespace {

Beams row_view(const Buffers& s, int64_t b) {
  const int64_t K = s.tokens.size(1), cap = s.tokens.size(2);
  return Beams{s.tokens.data_ptr<int64_t>() + b * K * cap, s.frames.data_ptr<int64_t>() + b * K * cap,
               s.logprobs.data_ptr<float>() + b * K * cap, s.lengths.data_ptr<int64_t>() + b * K,
               s.scores.data_ptr<double>() + b * K * 3,    s.context.data_ptr<int64_t>() + b * K,
               cap};
}

// The k best units of one frame, best first, ties to the lower id (a partial insertion sort:
// most of a large vocabulary fails the first comparison).
void top_k(const float* lp, int64_t V, int64_t k, int64_t* ids, float* vals) {
  int64_t n = 0;
  for (int64_t v = 0; v < V; ++v) {
    const float x = lp[v];
    int64_t pos;
    if (n < k) {
      pos = n++;
    } else if (x > vals[k - 1]) {
      pos = k - 1;
    } else {
      continue;
    }
    while (pos > 0 && vals[pos - 1] < x) {
      vals[pos] = vals[pos - 1];
      ids[pos] = ids[pos - 1];
      --pos;
    }
    vals[pos] = x;
    ids[pos] = v;
  }
}

void copy_row(const Beams& from, const Beams& to, int64_t count) {
  for (int64_t h = 0; h < count; ++h) {
    const int64_t n = from.lengths[h];
    std::memcpy(to.tokens + h * to.cap, from.tokens + h * from.cap, n * sizeof(int64_t));
    std::memcpy(to.frames + h * to.cap, from.frames + h * from.cap, n * sizeof(int64_t));
    std::memcpy(to.logprobs + h * to.cap, from.logprobs + h * from.cap, n * sizeof(float));
    to.lengths[h] = n;
    std::memcpy(to.scores + 3 * h, from.scores + 3 * h, 3 * sizeof(double));
    to.context[h] = from.context[h];
  }
}

void run_cpu(const Launch& l, const Buffers& out, const Buffers& spare) {
  const int64_t B = l.log_probs.size(0), T = l.log_probs.size(1), V = l.log_probs.size(2);
  const int64_t beam = l.beam, blank = l.blank, k = l.k;
  const Trie trie = l.trie;
  const float* lp_data = l.log_probs.data_ptr<float>();
  const int64_t* len_data = l.lengths.data_ptr<int64_t>();
  const int64_t* off_data = l.frame_offset.data_ptr<int64_t>();
  const int64_t* root_data = l.roots.defined() ? l.roots.data_ptr<int64_t>() : nullptr;
  int64_t* counts = out.num_hyps.data_ptr<int64_t>();
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<char> scratch(work_bytes(beam, k, beam));
    std::vector<int64_t> ids(k);
    std::vector<float> vals(k);
    for (int64_t b = begin; b < end; ++b) {
      Beams cur = row_view(out, b), nxt = row_view(spare, b);
      const Beams home = cur;
      Work w = make_work(scratch.data(), beam, k, beam);
      const int64_t root = root_data != nullptr ? root_data[b] : -1;
      int64_t count = counts[b];
      for (int64_t t = 0; t < len_data[b]; ++t) {
        top_k(lp_data + (b * T + t) * V, V, k, ids.data(), vals.data());
        const int64_t kept = plan_frame(cur, count, ids.data(), vals.data(), k, blank, trie, root, w, beam);
        for (int64_t p = 0; p < kept; ++p) {
          write_beam(cur, nxt, w, p, ids.data(), vals.data(), off_data[b] + t, 0, 1);
        }
        std::swap(cur, nxt);
        count = kept;
      }
      if (cur.tokens != home.tokens) copy_row(cur, home, count);
      for (int64_t p = count; p < beam; ++p) {  // slots past the last hypothesis read as empty
        home.lengths[p] = 0;
        home.scores[3 * p] = home.scores[3 * p + 1] = home.scores[3 * p + 2] = -INFINITY;
        home.context[p] = 0;
      }
      counts[b] = count;
    }
  });
}

Result ctc_prefix_beam_search(const at::Tensor& log_probs, const at::Tensor& lengths,
                              const at::Tensor& frame_offset, const at::Tensor& num_hyps,
                              const at::Tensor& hyp_tokens, const at::Tensor& hyp_frames,
                              const at::Tensor& hyp_token_logprobs, const at::Tensor& hyp_lengths,
                              const at::Tensor& hyp_scores, const at::Tensor& hyp_context, int64_t beam, int64_t blank,
                              const c10::optional<at::Tensor>& trie_nodes, const c10::optional<at::Tensor>& trie_edges,
                              const c10::optional<at::Tensor>& trie_scores,
                              const c10::optional<at::Tensor>& trie_roots) {
  const Args a{log_probs,  lengths,    frame_offset, num_hyps,   hyp_tokens, hyp_frames, hyp_token_logprobs,
               hyp_lengths, hyp_scores, hyp_context,  trie_nodes, trie_edges, trie_scores, trie_roots,
               beam,        blank};
  check_args(a);
  const Buffers out = allocate_state(a);
  const Buffers spare = allocate_state(a);  // every hypothesis is rewritten each frame: ping-pong
  Launch l{log_probs.contiguous(), lengths.contiguous(), frame_offset.contiguous(), {}, {}, {}, {}, {}, beam, blank,
           std::min(beam, log_probs.size(2))};
  if (trie_nodes.has_value()) {
    l.nodes = trie_nodes->contiguous();
    l.edges = trie_edges->contiguous();
    l.trie_scores = trie_scores->contiguous();
    l.roots = trie_roots->contiguous();
    l.trie = Trie{l.nodes.data_ptr<int64_t>(), l.edges.data_ptr<int64_t>(), l.trie_scores.data_ptr<double>()};
  }
  if (log_probs.is_cuda()) {
#if OASR_WITH_CUDA
    if (log_probs.size(0) > 0) launch_cuda(l, out, spare);
#endif
  } else {
    run_cpu(l, out, spare);
  }
  return {out.num_hyps, out.tokens, out.frames, out.logprobs, out.lengths, out.scores, out.context};
}

}  // namespace

}  // namespace oasr::ctc

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("ctc_prefix_beam_search", &oasr::ctc::ctc_prefix_beam_search); }
#if OASR_WITH_CUDA
TORCH_LIBRARY_IMPL(oasr, CUDA, m) { m.impl("ctc_prefix_beam_search", &oasr::ctc::ctc_prefix_beam_search); }
#endif
