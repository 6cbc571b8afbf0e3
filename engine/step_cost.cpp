#include "engine/step_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/batch.h"

namespace inflight::engine {

StepShape step_shape(const ScheduledBatch& b) {
  StepShape s;
  for (int i = 0; i < b.num_seqs(); ++i) {
    const int n = b.q_start[size_t(i) + 1] - b.q_start[size_t(i)];
    if (i < b.num_context_seqs) s.num_prefill_tokens += n;
    else s.num_decode_seqs += 1;
    s.attention_kpairs += attention_kpairs(b.past_len[size_t(i)], n);
  }
  return s;
}

StepCost parse_step_cost(const std::string& text) {
  std::istringstream in(text);
  std::string field;
  std::vector<double> v;
  while (std::getline(in, field, ',')) {
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != field.size() || !std::isfinite(x) || x < 0)
      throw std::invalid_argument("step cost '" + text + "': '" + field + "' is not a number >= 0");
    v.push_back(x);
  }
  if (v.size() != 4)
    throw std::invalid_argument("step cost '" + text +
                                "': want 4 numbers (ms): fixed,prefill_token,decode_seq,attention_kpair");
  return {v[0], v[1], v[2], v[3]};
}

namespace {

constexpr int kN = 4;
using Vec = std::array<double, kN>;

// Solves the weighted ridge least squares over the features in `active` ([kN] flags); the others are 0.
// Gaussian elimination with partial pivoting on the (at most 4x4) normal equations.
Vec solve_active(const std::vector<Vec>& x, const std::vector<double>& y, const std::vector<double>& w,
                 const std::array<bool, kN>& active) {
  int idx[kN];
  int m = 0;
  for (int j = 0; j < kN; ++j)
    if (active[size_t(j)]) idx[m++] = j;
  double a[kN][kN + 1] = {};  // [m, m + 1] the normal equations with the right-hand side
  for (size_t i = 0; i < x.size(); ++i)
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < m; ++c) a[r][c] += w[i] * x[i][size_t(idx[r])] * x[i][size_t(idx[c])];
      a[r][m] += w[i] * x[i][size_t(idx[r])] * y[i];
    }
  // NOTE: a ridge relative to each feature's own scale: collinear features (every decode-only step of
  // one batch size) share the cost instead of taking opposite infinite values.
  for (int r = 0; r < m; ++r) a[r][r] = a[r][r] * (1 + 1e-4) + 1e-12;
  for (int c = 0; c < m; ++c) {
    int p = c;
    for (int r = c + 1; r < m; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    for (int k = 0; k <= m; ++k) std::swap(a[c][k], a[p][k]);
    for (int r = c + 1; r < m; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k <= m; ++k) a[r][k] -= f * a[c][k];
    }
  }
  Vec beta{};
  for (int r = m - 1; r >= 0; --r) {
    double s = a[r][m];
    for (int c = r + 1; c < m; ++c) s -= a[r][c] * beta[size_t(idx[c])];
    beta[size_t(idx[r])] = s / a[r][r];
  }
  return beta;
}

// Non-negative fit: of the supports within `allowed` whose least-squares coefficients are all >= 0, the one
// with the least weighted squared error (the non-negative least-squares optimum; 4 features make at most 16
// supports). The full support is tried first and usually is the answer. Dropping the most negative
// coefficient one at a time instead can end on a support that leaves out a feature the optimum keeps.
Vec solve_non_negative(const std::vector<Vec>& x, const std::vector<double>& y, const std::vector<double>& w,
                       const std::array<bool, kN>& allowed) {
  auto feasible = [](const Vec& beta) {
    for (double b : beta)
      if (b < 0) return false;
    return true;
  };
  const Vec full = solve_active(x, y, w, allowed);
  if (feasible(full)) return full;
  Vec best{};
  double best_err = std::numeric_limits<double>::infinity();
  for (unsigned mask = 0; mask < (1u << kN); ++mask) {
    std::array<bool, kN> active{};
    bool subset = true;
    for (int j = 0; j < kN; ++j) {
      active[size_t(j)] = (mask >> j) & 1u;
      subset = subset && (!active[size_t(j)] || allowed[size_t(j)]);
    }
    if (!subset) continue;
    const Vec beta = solve_active(x, y, w, active);
    if (!feasible(beta)) continue;
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      double r = y[i];
      for (int j = 0; j < kN; ++j) r -= beta[size_t(j)] * x[i][size_t(j)];
      err += w[i] * r * r;
    }
    if (err < best_err) {
      best_err = err;
      best = beta;
    }
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + int64_t(mid), v.end());
  return v[mid];
}

}  // namespace

StepCostModel::StepCostModel(int window) : window_(std::max(window, 4)) {}

void StepCostModel::observe(const StepShape& shape, double ms) {
  if (!std::isfinite(ms) || ms < 0) return;
  const Sample s{{1.0, double(shape.num_prefill_tokens), double(shape.num_decode_seqs), shape.attention_kpairs}, ms};
  std::vector<Sample>& ring = shape.num_prefill_tokens > 0 ? with_prefill_ : decode_only_;
  size_t& next = shape.num_prefill_tokens > 0 ? next_with_prefill_ : next_decode_only_;
  const bool first_of_kind = ring.empty();
  if (int(ring.size()) < window_) {
    ring.push_back(s);
  } else {
    ring[next] = s;
    next = (next + 1) % ring.size();
  }
  ++num_observed_;
  if (num_observed_ <= window_ || first_of_kind || num_observed_ % kRefitEvery == 0) refit();
}

void StepCostModel::refit() {
  std::vector<Vec> x;
  std::vector<double> y;
  for (const auto* ring : {&with_prefill_, &decode_only_})
    for (const Sample& s : *ring) {
      x.push_back(s.x);
      y.push_back(s.ms);
    }
  if (x.empty()) return;
  // A feature that never varies from 0 in the window (no prompt tokens yet) stays out of the fit.
  std::array<bool, kN> active{};
  for (const Vec& xi : x)
    for (int j = 0; j < kN; ++j) active[size_t(j)] = active[size_t(j)] || xi[size_t(j)] != 0;

  // Huber IRLS: residuals beyond k robust standard deviations (1.4826 MAD) weigh k * s / |r|.
  constexpr double kHuber = 1.345;
  double mean_y = 0;
  for (double v : y) mean_y += v / double(y.size());
  std::vector<double> w(x.size(), 1.0), abs_r(x.size());
  Vec beta{};
  for (int iter = 0; iter < 6; ++iter) {
    beta = solve_non_negative(x, y, w, active);
    for (size_t i = 0; i < x.size(); ++i) {
      double pred = 0;
      for (int j = 0; j < kN; ++j) pred += beta[size_t(j)] * x[i][size_t(j)];
      abs_r[i] = std::fabs(y[i] - pred);
    }
    const double scale = std::max(1.4826 * median(abs_r), 1e-3 * mean_y + 1e-9);
    for (size_t i = 0; i < x.size(); ++i)
      w[i] = abs_r[i] <= kHuber * scale ? 1.0 : kHuber * scale / abs_r[i];
  }
  cost_ = {beta[0], beta[1], beta[2], beta[3]};
  if (!active[1]) cost_.prefill_token_ms = cost_.decode_seq_ms;
  if (!active[2]) cost_.decode_seq_ms = cost_.prefill_token_ms;
}

}  // namespace inflight::engine
