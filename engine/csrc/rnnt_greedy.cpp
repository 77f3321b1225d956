// RNN-T / TDT greedy label loop: the operator (checks, dispatch by device) and the CPU version:
// the loop of rnnt_greedy.h with the per-row bookkeeping as plain loops over the rows (one pass
// where the reference runs a dozen torch.where ops).
#include "rnnt_greedy.h"

#include <torch/library.h>

#include <algorithm>

namespace oasr::rnnt {

namespace {
constexpr const char* kOp = "oasr::rnnt_greedy_label_loop";
}

void check_args(const Args& a) {
  const at::Device dev = a.f.device();
  TORCH_CHECK(a.f.dim() == 3, kOp, ": f must be (batch, frames, joint_hidden), got shape ", a.f.sizes());
  const int64_t B = a.f.size(0), T = a.f.size(1), J = a.f.size(2);
  const at::ScalarType dt = a.f.scalar_type();
  TORCH_CHECK(at::isFloatingType(dt), kOp, ": f must be floating point, got ", dt);
  TORCH_CHECK(a.embed.dim() == 2 && a.embed.size(0) >= 2, kOp,
              ": embed must be (vocab + 1, pred_hidden) with blank as its last row, got shape ", a.embed.sizes());
  const int64_t V1 = a.embed.size(0), H = a.embed.size(1);
  check_arg(kOp, "embed", a.embed, dt, {V1, H}, dev);
  TORCH_CHECK(!a.lstm.empty() && a.lstm.size() % 4 == 0, kOp,
              ": lstm must hold weight_ih, weight_hh, bias_ih, bias_hh per layer, got ", a.lstm.size(), " tensors");
  const int64_t L = static_cast<int64_t>(a.lstm.size()) / 4;
  for (int64_t l = 0; l < L; ++l) {
    check_arg(kOp, "lstm weight_ih", a.lstm[4 * l], dt, {4 * H, H}, dev);
    check_arg(kOp, "lstm weight_hh", a.lstm[4 * l + 1], dt, {4 * H, H}, dev);
    check_arg(kOp, "lstm bias_ih", a.lstm[4 * l + 2], dt, {4 * H}, dev);
    check_arg(kOp, "lstm bias_hh", a.lstm[4 * l + 3], dt, {4 * H}, dev);
  }
  check_arg(kOp, "lengths", a.lengths, at::kLong, {B}, dev);
  check_arg(kOp, "h", a.h, dt, {L, B, H}, dev);
  check_arg(kOp, "c", a.c, dt, {L, B, H}, dev);
  check_arg(kOp, "pred", a.pred, dt, {B, J}, dev);
  check_arg(kOp, "time_jump", a.time_jump, at::kLong, {B}, dev);
  check_arg(kOp, "frames_decoded", a.frames_decoded, at::kLong, {B}, dev);
  check_arg(kOp, "pred_weight", a.pred_weight, dt, {J, H}, dev);
  check_arg(kOp, "pred_bias", a.pred_bias, dt, {J}, dev);
  check_arg(kOp, "durations", a.durations, at::kLong, {-1}, dev);
  const int64_t outputs = V1 + a.durations.numel();
  check_arg(kOp, "out_weight", a.out_weight, dt, {outputs, J}, dev);
  check_arg(kOp, "out_bias", a.out_bias, dt, {outputs}, dev);
  TORCH_CHECK(a.activation == "relu" || a.activation == "tanh" || a.activation == "sigmoid", kOp,
              ": activation must be relu, tanh or sigmoid, got '", a.activation, "'");
  TORCH_CHECK(a.max_symbols >= 1, kOp, ": max_symbols must be >= 1, got ", a.max_symbols);
  TORCH_CHECK(B * T * a.max_symbols <= (int64_t{1} << 28), kOp, ": batch x frames x max_symbols = ",
              B * T * a.max_symbols, " is too many label slots");
  const auto host = [](const at::Tensor& t) { return t.to(at::kCPU).contiguous(); };
  check_range(kOp, "lengths", host(a.lengths), 0, T);
  check_range(kOp, "time_jump", host(a.time_jump), 0, INT64_MAX / 2);
  if (a.durations.numel() > 0) check_range(kOp, "durations", host(a.durations), 0, INT64_MAX / 4);
}

namespace {

struct CpuBookkeeper {
  RowStorage s;
  Rows r;
  int64_t B;

  explicit CpuBookkeeper(const Args& a) : s(a), r(s.rows()), B(a.f.size(0)) {}

  bool start(bool) {
    bool any = false;
    for (int64_t i = 0; i < B; ++i) any |= (r.active[i] = r.time[i] < r.lengths[i]);
    return any;
  }
  at::Tensor time() const { return s.time; }
  at::Tensor labels() const { return s.labels; }
  at::Tensor found() const { return s.found; }

  bool joint(bool first, const at::Tensor& labels, const at::Tensor& scores, const at::Tensor& duration, bool tdt,
             int64_t blank) {
    const at::Tensor sc = scores.to(at::kFloat);
    const int64_t* lb = labels.data_ptr<int64_t>();
    const float* sp = sc.data_ptr<float>();
    const int64_t* du = duration.data_ptr<int64_t>();
    bool any = false;
    for (int64_t i = 0; i < B; ++i) {
      after_joint(r, i, first, lb[i], sp[i], du[i], tdt, blank);
      any |= r.advance[i];
    }
    return any;
  }
  bool emit(bool tdt, int64_t max_symbols) {
    bool any = false;
    for (int64_t i = 0; i < B; ++i) {
      oasr::rnnt::emit(r, i, tdt, max_symbols);
      any |= r.active[i];
    }
    return any;
  }
  std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> emissions() {
    const int64_t* n = r.out_counts;
    return s.emissions(B ? *std::max_element(n, n + B) : 0);
  }
};

Result rnnt_greedy_label_loop(const at::Tensor& f, const at::Tensor& lengths, const at::Tensor& h,
                              const at::Tensor& c, const at::Tensor& pred, const at::Tensor& time_jump,
                              const at::Tensor& frames_decoded, const at::Tensor& embed, at::TensorList lstm,
                              const at::Tensor& pred_weight, const at::Tensor& pred_bias,
                              const at::Tensor& out_weight, const at::Tensor& out_bias, const at::Tensor& durations,
                              c10::string_view activation, int64_t max_symbols) {
  const Args a{f,           lengths,   h,        c,          pred,      time_jump, frames_decoded, embed, lstm.vec(),
               pred_weight, pred_bias, out_weight, out_bias, durations, std::string(activation), max_symbols};
  check_args(a);
#if OASR_WITH_CUDA
  if (f.is_cuda()) return run_cuda(a);
#endif
  CpuBookkeeper book(a);
  return greedy_label_loop(a, book);
}

}  // namespace
}  // namespace oasr::rnnt

TORCH_LIBRARY_IMPL(oasr, CPU, m) { m.impl("rnnt_greedy_label_loop", &oasr::rnnt::rnnt_greedy_label_loop); }
#if OASR_WITH_CUDA
TORCH_LIBRARY_IMPL(oasr, CUDA, m) { m.impl("rnnt_greedy_label_loop", &oasr::rnnt::rnnt_greedy_label_loop); }
#endif
