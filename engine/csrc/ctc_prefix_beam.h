// CTC prefix beam search: the per-frame step shared by the CPU and CUDA kernels.
//
// The semantics are those of the Python reference (engine/ops/ctc_reference.py), which follows
// WeNet's runtime: on each frame only the `k = min(beam, V)` most likely units (ties: lower id
// first) extend a prefix; a prefix's probability is split into paths ending in blank and paths
// ending in its last token; candidates are ranked by log P(prefix) + context bonus, ties kept in
// the order the candidates were first reached, and the `beam` best survive. A prefix's alignment
// (frame and log-prob of each token's spike) is that of its most likely contributing path.
//
// The planning part (`plan_frame`) is serial per row; `write_beam` copies one new hypothesis
// and can be split across lanes (CUDA threads). All arithmetic is in double, in the reference's
// order, so CPU results equal the reference bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "common.h"

namespace oasr::ctc {

// One row's hypotheses, `cap` token slots each.
struct Beams {
  int64_t* tokens;    // [K][cap]
  int64_t* frames;    // [K][cap]: absolute frame of each token's spike
  float* logprobs;    // [K][cap]: log-prob of each token at its spike
  int64_t* lengths;   // [K]
  double* scores;     // [K][3]: log P(prefix, ends in blank), log P(prefix, ends in its last token), bonus
  int64_t* context;   // [K]: trie node, relative to the row's root
  int64_t cap;
};

// A forest of keyword tries (engine/ops/context_biasing.py): nodes [N][2] = (first edge, edge count),
// edges [E][2] = (token, child node) sorted by token within a node, scores [N][2] = (score, keep).
struct Trie {
  const int64_t* nodes = nullptr;
  const int64_t* edges = nullptr;
  const double* scores = nullptr;
};

// Per-row scratch for one frame: E = K + K * k candidate prefixes.
struct Work {
  double* blank;       // [E]
  double* nonblank;    // [E]
  double* best;        // [E]: log-prob of the best contributing path
  double* bonus;       // [E]
  double* chosen_key;  // [beam]
  int64_t* node;       // [E]
  int32_t* parent;     // [E]: hypothesis whose alignment the entry continues
  int32_t* append;     // [E]: rank of the unit appended to the parent, -1 for none
  int32_t* order;      // [E]: when the entry was first reached, -1 for never
  int32_t* touched;    // [E]: entries in the order they were first reached
  int32_t* child;      // [K][k]: hypothesis equal to hypothesis h extended by unit r, or -1
  int32_t* chosen;     // [beam]: entry kept at each rank
};

OASR_HD inline int64_t work_entries(int64_t K, int64_t k) { return K + K * k; }

OASR_HD inline int64_t work_bytes(int64_t K, int64_t k, int64_t beam) {
  const int64_t E = work_entries(K, k);
  return 8 * (4 * E + beam) + 8 * E + 4 * (4 * E + K * k + beam);
}

OASR_HD inline Work make_work(char* base, int64_t K, int64_t k, int64_t beam) {
  const int64_t E = work_entries(K, k);
  Work w;
  double* d = reinterpret_cast<double*>(base);
  w.blank = d;
  w.nonblank = d + E;
  w.best = d + 2 * E;
  w.bonus = d + 3 * E;
  w.chosen_key = d + 4 * E;
  w.node = reinterpret_cast<int64_t*>(d + 4 * E + beam);
  int32_t* i = reinterpret_cast<int32_t*>(w.node + E);
  w.parent = i;
  w.append = i + E;
  w.order = i + 2 * E;
  w.touched = i + 3 * E;
  w.child = i + 4 * E;
  w.chosen = i + 4 * E + K * k;
  return w;
}

OASR_HD inline double neg_inf() { return -INFINITY; }

// log(exp(a) + exp(b)), exactly as the reference computes it.
OASR_HD inline double log_add(double a, double b) {
  if (a == neg_inf()) return b;
  if (b == neg_inf()) return a;
  const double m = a > b ? a : b;
  return m + log1p(exp(-fabs(a - b)));
}

// Child of global node `node` along `token`, or -1 (binary search over its sorted edges).
OASR_HD inline int64_t trie_child(const Trie& t, int64_t node, int64_t token) {
  int64_t lo = t.nodes[2 * node], hi = lo + t.nodes[2 * node + 1];
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t tok = t.edges[2 * mid];
    if (tok == token) return t.edges[2 * mid + 1];
    if (tok < token) lo = mid + 1; else hi = mid;
  }
  return -1;
}

// Feeds `token` to the trie at global `node` (row root `root`); returns the bonus change and
// stores the next node. A token that leaves a partial keyword gives back the part of its bonus
// that was not a whole keyword and starts over at the root; a completed keyword with nothing
// longer behind it returns to the root keeping its bonus.
OASR_HD inline double trie_step(const Trie& t, int64_t root, int64_t node, int64_t token, int64_t* next) {
  int64_t child = trie_child(t, node, token);
  double delta = 0.0;
  if (child < 0) {
    delta = -(t.scores[2 * node] - t.scores[2 * node + 1]);
    node = root;
    child = trie_child(t, root, token);
    if (child < 0) {
      *next = root;
      return delta;
    }
  }
  delta += t.scores[2 * child] - t.scores[2 * node];
  *next = t.nodes[2 * child + 1] == 0 ? root : child;
  return delta;
}

OASR_HD inline double rank_key(const Work& w, int64_t e) {
  const double key = log_add(w.blank[e], w.nonblank[e]) + w.bonus[e];
  return key == key ? key : neg_inf();  // NaN ranks last instead of breaking the order
}

OASR_HD inline void add_path(Work& w, int32_t& counter, int64_t e, double blank, double nonblank,
                             int32_t parent, int32_t append) {
  w.blank[e] = log_add(w.blank[e], blank);
  w.nonblank[e] = log_add(w.nonblank[e], nonblank);
  const double contrib = nonblank > blank ? nonblank : blank;
  if (w.order[e] < 0) {
    w.order[e] = counter;
    w.touched[counter++] = static_cast<int32_t>(e);
  } else if (!(contrib > w.best[e])) {
    return;
  }
  w.best[e] = contrib;
  w.parent[e] = parent;
  w.append[e] = append;
}

// Plans one frame for one row: which new hypotheses survive (w.chosen) and from what. `count`
// hypotheses in `cur`; top_ids/top_lps: the frame's k best units. Returns the new count.
OASR_HD inline int64_t plan_frame(const Beams& cur, int64_t count, const int64_t* top_ids,
                                  const float* top_lps, int64_t k, int64_t blank, const Trie& trie,
                                  int64_t root, Work& w, int64_t beam) {
  const int64_t E = count + count * k;
  for (int64_t e = 0; e < E; ++e) {
    w.blank[e] = w.nonblank[e] = w.best[e] = neg_inf();
    w.order[e] = -1;
  }
  for (int64_t h = 0; h < count; ++h) {
    w.bonus[h] = cur.scores[3 * h + 2];
    w.node[h] = cur.context[h];
    for (int64_t r = 0; r < k; ++r) w.child[h * k + r] = -1;
  }
  // Hypothesis h2 is hypothesis h extended by one unit: both reach the same prefix.
  for (int64_t h = 0; h < count; ++h) {
    const int64_t n = cur.lengths[h];
    for (int64_t h2 = 0; h2 < count; ++h2) {
      if (cur.lengths[h2] != n + 1) continue;
      const int64_t* a = cur.tokens + h * cur.cap;
      const int64_t* b = cur.tokens + h2 * cur.cap;
      int64_t i = 0;
      while (i < n && a[i] == b[i]) ++i;
      if (i < n) continue;
      for (int64_t r = 0; r < k; ++r) {
        if (top_ids[r] == b[n]) w.child[h * k + r] = static_cast<int32_t>(h2);
      }
    }
  }
  int32_t counter = 0;
  for (int64_t r = 0; r < k; ++r) {
    const int64_t tok = top_ids[r];
    const double lp = static_cast<double>(top_lps[r]);
    for (int64_t h = 0; h < count; ++h) {
      const double p_blank = cur.scores[3 * h], p_nonblank = cur.scores[3 * h + 1];
      const double score = log_add(p_blank, p_nonblank);
      if (tok == blank) {
        add_path(w, counter, h, score + lp, neg_inf(), static_cast<int32_t>(h), -1);
        continue;
      }
      const int64_t n = cur.lengths[h];
      double gain;
      if (n > 0 && cur.tokens[h * cur.cap + n - 1] == tok) {
        // A repeat collapses onto the same prefix; after a blank it is a new token.
        add_path(w, counter, h, neg_inf(), p_nonblank + lp, static_cast<int32_t>(h), -1);
        gain = p_blank + lp;
      } else {
        gain = score + lp;
      }
      int64_t e = w.child[h * k + r];
      if (e < 0) {
        e = count + h * k + r;
        if (w.order[e] < 0) {
          int64_t node = cur.context[h];
          double bonus = cur.scores[3 * h + 2];
          if (root >= 0) {
            int64_t next;
            bonus += trie_step(trie, root, root + node, tok, &next);
            node = next - root;
          }
          w.bonus[e] = bonus;
          w.node[e] = node;
        }
      }
      add_path(w, counter, e, neg_inf(), gain, static_cast<int32_t>(h), static_cast<int32_t>(r));
    }
  }
  // The `beam` best by rank key, stable in the order entries were first reached.
  int64_t kept = 0;
  for (int32_t i = 0; i < counter; ++i) {
    const int32_t e = w.touched[i];
    const double key = rank_key(w, e);
    int64_t pos = kept < beam ? kept : beam;
    while (pos > 0 && w.chosen_key[pos - 1] < key) --pos;
    if (pos >= beam) continue;
    const int64_t last = kept < beam ? kept : beam - 1;
    for (int64_t j = last; j > pos; --j) {
      w.chosen[j] = w.chosen[j - 1];
      w.chosen_key[j] = w.chosen_key[j - 1];
    }
    w.chosen[pos] = e;
    w.chosen_key[pos] = key;
    if (kept < beam) ++kept;
  }
  return kept;
}

// Writes new hypothesis `p` (planned by plan_frame) into `nxt`; lanes split the token copy.
OASR_HD inline void write_beam(const Beams& cur, const Beams& nxt, const Work& w, int64_t p,
                               const int64_t* top_ids, const float* top_lps, int64_t frame,
                               int64_t lane, int64_t lanes) {
  const int32_t e = w.chosen[p];
  const int32_t parent = w.parent[e], append = w.append[e];
  const int64_t n = cur.lengths[parent];
  const int64_t* src_t = cur.tokens + parent * cur.cap;
  const int64_t* src_f = cur.frames + parent * cur.cap;
  const float* src_l = cur.logprobs + parent * cur.cap;
  int64_t* dst_t = nxt.tokens + p * nxt.cap;
  int64_t* dst_f = nxt.frames + p * nxt.cap;
  float* dst_l = nxt.logprobs + p * nxt.cap;
  for (int64_t i = lane; i < n; i += lanes) {
    dst_t[i] = src_t[i];
    dst_f[i] = src_f[i];
    dst_l[i] = src_l[i];
  }
  if (lane == 0) {
    if (append >= 0) {
      dst_t[n] = top_ids[append];
      dst_f[n] = frame;
      dst_l[n] = top_lps[append];
    }
    nxt.lengths[p] = n + (append >= 0 ? 1 : 0);
    nxt.scores[3 * p] = w.blank[e];
    nxt.scores[3 * p + 1] = w.nonblank[e];
    nxt.scores[3 * p + 2] = w.bonus[e];
    nxt.context[p] = w.node[e];
  }
}

// Host-side argument checks shared by the CPU and CUDA kernels (throw RuntimeError).
struct Args {
  at::Tensor log_probs, lengths, frame_offset, num_hyps, hyp_tokens, hyp_frames, hyp_token_logprobs,
      hyp_lengths, hyp_scores, hyp_context;
  c10::optional<at::Tensor> trie_nodes, trie_edges, trie_scores, trie_roots;
  int64_t beam, blank;
};

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

void check_args(const Args& a);

// Output state of shape (B, beam, L_in + T) on the inputs' device: padding (tokens 0, scores
// -inf) with the incoming state copied in, and a second buffer of the same shape to ping-pong.
struct Buffers {
  at::Tensor num_hyps, tokens, frames, logprobs, lengths, scores, context;
};
Buffers allocate_state(const Args& a);

// A checked call's inputs as the kernels read them (contiguous, with raw trie pointers).
struct Launch {
  at::Tensor log_probs, lengths, frame_offset, nodes, edges, trie_scores, roots;
  Trie trie;
  int64_t beam, blank, k;
};

#if OASR_WITH_CUDA
// ctc_prefix_beam.cu: one thread block per row; `out` holds the incoming state and receives the result.
void launch_cuda(const Launch& l, const Buffers& out, const Buffers& spare);
#endif

}  // namespace oasr::ctc
