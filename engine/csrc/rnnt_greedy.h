// Batched greedy transducer decoding by label looping (RNN-T and TDT), NeMo's algorithm
// (engine/ops/rnnt.py holds the Python reference). The loop and the per-row bookkeeping are
// compiled; the joint and the prediction network run through the same ATen calls as the
// reference (at::linear, at::lstm, log_softmax, argmax) on the same full-batch shapes, so the
// tokens and log-probs are the reference's bit for bit.
//
// Per-row bookkeeping (what the reference does with torch.where over the batch) is three
// host/device functions, run by a CPU loop or one CUDA thread per row (`Bookkeeper`).
#pragma once

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/lstm.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>

#include <string>
#include <tuple>
#include <vector>

#include "common.h"

namespace oasr::rnnt {

// Per-row loop state (device arrays on CUDA).
struct Rows {
  int64_t* time;
  int64_t* label_time;
  int64_t* last_nb_time;
  int64_t* last_nb_count;
  int64_t* labels;
  float* scores;
  uint8_t* active;
  uint8_t* active_before;
  uint8_t* blank;
  uint8_t* advance;
  uint8_t* found;
  const int64_t* lengths;
  // emissions: [B][cap]
  int64_t* out_tokens;
  int64_t* out_frames;
  float* out_logprobs;
  int64_t* out_counts;
  const int64_t* frames_decoded;
  int64_t cap;
};

// A TDT jump: the predicted duration, at least one frame after a blank.
OASR_HD inline int64_t jump_of(bool is_blank, int64_t duration) { return is_blank && duration == 0 ? 1 : duration; }

// After a joint evaluation: the first of an outer iteration, or a further one for the rows that met a blank.
OASR_HD inline void first_joint(const Rows& r, int64_t i, int64_t label, float score, int64_t duration, bool tdt,
                                int64_t blank) {
  r.active_before[i] = r.active[i];
  r.labels[i] = label;
  r.scores[i] = score;
  const bool is_blank = label == blank;
  r.blank[i] = is_blank;
  r.label_time[i] = r.time[i];
  if (tdt) {
    r.time[i] += jump_of(is_blank, duration) * r.active[i];
  } else {
    r.time[i] += is_blank;
  }
  r.active[i] = r.time[i] < r.lengths[i];
  r.advance[i] = r.active[i] && is_blank;
}

OASR_HD inline void more_joint(const Rows& r, int64_t i, int64_t label, float score, int64_t duration, bool tdt,
                               int64_t blank) {
  const bool advance = r.advance[i];
  if (advance) {
    r.label_time[i] = r.time[i];
    r.labels[i] = label;
    r.scores[i] = score;
  }
  const bool is_blank = r.labels[i] == blank;
  r.blank[i] = is_blank;
  if (tdt) {
    if (advance) r.time[i] += jump_of(is_blank, duration);
  } else {
    r.time[i] += is_blank;
  }
  r.active[i] = r.time[i] < r.lengths[i];
  r.advance[i] = r.active[i] && is_blank;
}

OASR_HD inline void after_joint(const Rows& r, int64_t i, bool first, int64_t label, float score, int64_t duration,
                                bool tdt, int64_t blank) {
  if (first) {
    first_joint(r, i, label, score, duration, tdt, blank);
  } else {
    more_joint(r, i, label, score, duration, tdt, blank);
  }
}

// Emit a found label, count labels per frame, force the row on after max_symbols.
OASR_HD inline void emit(const Rows& r, int64_t i, bool tdt, int64_t max_symbols) {
  const bool found = (tdt ? r.active_before[i] : r.active[i]) && !r.blank[i];
  r.found[i] = found;
  if (found) {
    r.last_nb_count[i] = r.last_nb_time[i] == r.label_time[i] ? r.last_nb_count[i] + 1 : 1;
    r.last_nb_time[i] = r.label_time[i];
    const int64_t n = r.out_counts[i]++;
    r.out_tokens[i * r.cap + n] = r.labels[i];
    r.out_frames[i * r.cap + n] = r.label_time[i] + r.frames_decoded[i];
    r.out_logprobs[i * r.cap + n] = r.scores[i];
  }
  const bool force = r.active[i] && !r.blank[i] && r.last_nb_count[i] >= max_symbols && r.last_nb_time[i] == r.time[i];
  r.time[i] += force;
  r.active[i] = r.time[i] < r.lengths[i];
}

struct Args {
  at::Tensor f, lengths, h, c, pred, time_jump, frames_decoded, embed;
  std::vector<at::Tensor> lstm;
  at::Tensor pred_weight, pred_bias, out_weight, out_bias, durations;
  std::string activation;
  int64_t max_symbols;
};

using Result = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                          at::Tensor, at::Tensor>;

void check_args(const Args& a);

#if OASR_WITH_CUDA
// rnnt_greedy.cu: the loop with one bookkeeping kernel launch per step.
Result run_cuda(const Args& a);
#endif

inline at::Tensor activate(const at::Tensor& x, const std::string& name) {
  if (name == "relu") return at::relu(x);
  if (name == "tanh") return at::tanh(x);
  return at::sigmoid(x);
}

// The label loop. `Bookkeeper` runs the per-row functions over all rows and answers whether any
// row is still advancing / active: `joint` (after_joint), `emit` (see rnnt_greedy.cpp / .cu).
template <class Bookkeeper>
Result greedy_label_loop(const Args& a, Bookkeeper& book) {
  const at::NoGradGuard no_grad;
  const int64_t B = a.f.size(0), T = a.f.size(1);
  const int64_t blank = a.embed.size(0) - 1, vocab = blank + 1;
  const bool tdt = a.durations.numel() > 0;
  const int64_t layers = static_cast<int64_t>(a.lstm.size()) / 4;
  const at::Tensor f_rows = a.f.reshape({B * T, a.f.size(2)});
  const at::Tensor row_base = at::arange(B, a.lengths.options()) * T;
  const at::Tensor last_t = at::clamp_min(a.lengths - 1, 0);
  at::Tensor h = a.h, c = a.c, pred = a.pred;
  // One joint for every row at its current frame -> labels, token log-probs, durations.
  const auto joint = [&](const at::Tensor& time) {
    const at::Tensor frames = at::index_select(f_rows, 0, at::minimum(time, last_t) + row_base);
    const at::Tensor logits = at::linear(activate(frames + pred, a.activation), a.out_weight, a.out_bias);
    const at::Tensor full = at::log_softmax(logits, -1);
    const at::Tensor labels = at::argmax(full.slice(1, 0, vocab), -1);
    const at::Tensor token_lp = at::log_softmax(logits.slice(1, 0, vocab), -1).gather(1, labels.unsqueeze(1)).select(1, 0);
    const at::Tensor duration = tdt ? at::index_select(a.durations, 0, at::argmax(full.slice(1, vocab), -1))
                                    : at::zeros_like(labels);
    return std::make_tuple(labels.contiguous(), token_lp.contiguous(), duration.contiguous());
  };
  bool any_active = book.start(tdt);
  while (any_active) {
    bool first = true, advancing = true;
    while (advancing) {  // the first joint of the step, then again for rows that met a blank
      auto [labels, scores, duration] = joint(book.time());
      advancing = book.joint(first, labels, scores, duration, tdt, blank);
      first = false;
    }
    any_active = book.emit(tdt, a.max_symbols);
    // The prediction network on every row's label (as the reference: same shapes, same results),
    // kept where a label was found.
    const at::Tensor y = at::embedding(a.embed, book.labels()).unsqueeze(0);
    auto [g, new_h, new_c] = at::lstm(y, {h, c}, a.lstm, true, layers, 0.0, false, false, false);
    const at::Tensor new_pred = at::linear(g.select(0, 0), a.pred_weight, a.pred_bias);
    const at::Tensor keep = book.found().to(at::kBool).unsqueeze(1);
    pred = at::where(keep, new_pred, pred);
    h = at::where(keep.unsqueeze(0), new_h, h);
    c = at::where(keep.unsqueeze(0), new_c, c);
  }
  auto [tokens, frames, logprobs, counts] = book.emissions();
  const at::Tensor time_jump = tdt ? book.time() - a.lengths : at::zeros_like(a.lengths);
  return {tokens, frames, logprobs, counts, h, c, pred, time_jump, a.frames_decoded + a.lengths};
}

}  // namespace oasr::rnnt

namespace oasr::rnnt {

// The per-row arrays of a decode, as tensors on the decode's device.
struct RowStorage {
  at::Tensor time, label_time, last_nb_time, last_nb_count, labels, scores, active, active_before, blank, advance,
      found, tokens, frames, logprobs, counts;
  at::Tensor lengths, frames_decoded;
  int64_t cap;

  RowStorage(const Args& a) : lengths(a.lengths.contiguous()), frames_decoded(a.frames_decoded.contiguous()) {
    const int64_t B = a.f.size(0);
    cap = a.f.size(1) * a.max_symbols;  // at most max_symbols labels per frame
    const auto i64 = a.lengths.options();
    const auto u8 = i64.dtype(at::kByte);
    time = a.durations.numel() > 0 ? a.time_jump.clone().contiguous() : at::zeros({B}, i64);
    label_time = at::zeros({B}, i64);
    last_nb_time = at::full({B}, -1, i64);
    last_nb_count = at::zeros({B}, i64);
    labels = at::zeros({B}, i64);
    scores = at::zeros({B}, i64.dtype(at::kFloat));
    active = at::zeros({B}, u8);
    active_before = at::zeros({B}, u8);
    blank = at::zeros({B}, u8);
    advance = at::zeros({B}, u8);
    found = at::zeros({B}, u8);
    tokens = at::zeros({B, cap}, i64);
    frames = at::zeros({B, cap}, i64);
    logprobs = at::zeros({B, cap}, i64.dtype(at::kFloat));
    counts = at::zeros({B}, i64);
  }

  Rows rows() {
    return Rows{time.data_ptr<int64_t>(),          label_time.data_ptr<int64_t>(), last_nb_time.data_ptr<int64_t>(),
                last_nb_count.data_ptr<int64_t>(), labels.data_ptr<int64_t>(),     scores.data_ptr<float>(),
                active.data_ptr<uint8_t>(),        active_before.data_ptr<uint8_t>(), blank.data_ptr<uint8_t>(),
                advance.data_ptr<uint8_t>(),       found.data_ptr<uint8_t>(),      lengths.data_ptr<int64_t>(),
                tokens.data_ptr<int64_t>(),        frames.data_ptr<int64_t>(),     logprobs.data_ptr<float>(),
                counts.data_ptr<int64_t>(),        frames_decoded.data_ptr<int64_t>(), cap};
  }

  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> emissions(int64_t width) {
    return {tokens.narrow(1, 0, width).clone(), frames.narrow(1, 0, width).clone(),
            logprobs.narrow(1, 0, width).clone(), counts};
  }
};

}  // namespace oasr::rnnt
