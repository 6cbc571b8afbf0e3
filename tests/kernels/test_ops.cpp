// Layer ops against hand-computed and double-precision values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/ops.h"
#include "isa_test_support.h"

using namespace inflight::kernels;

namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Rotates (a, b) by `angle` in double.
void rotate(double angle, float& a, float& b) {
  const double c = std::cos(angle), s = std::sin(angle);
  const double a0 = a, b0 = b;
  a = float(a0 * c - b0 * s);
  b = float(a0 * s + b0 * c);
}

}  // namespace

TEST_CASE("rope GptJ rotates adjacent pairs with angle pos * theta^(-2i/rotary_dim)") {
  // One head of 4: pairs (0,1) at angle pos, (2,3) at pos * 10000^(-1/2) = pos / 100.
  RopeParams rope{RopeStyle::GptJ, 4, 4, 10000.0f};
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t pos = 3;
  apply_rope(rope, x, 4, 1, &pos, 1);
  float want[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  rotate(3.0, want[0], want[1]);
  rotate(0.03, want[2], want[3]);
  for (int i = 0; i < 4; ++i) CHECK(x[i] == doctest::Approx(want[i]).epsilon(1e-5));
  // Hand values for pair (0,1): cos 3 = -0.9899925, sin 3 = 0.1411200.
  CHECK(x[0] == doctest::Approx(1.0 * -0.9899925 - 2.0 * 0.1411200).epsilon(1e-5));
  CHECK(x[1] == doctest::Approx(1.0 * 0.1411200 + 2.0 * -0.9899925).epsilon(1e-5));
}

TEST_CASE("rope NeoX rotates (x[i], x[i + rotary_dim/2])") {
  RopeParams rope{RopeStyle::NeoX, 4, 4, 10000.0f};
  float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const int32_t pos = 3;
  apply_rope(rope, x, 4, 1, &pos, 1);
  float want[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  rotate(3.0, want[0], want[2]);
  rotate(0.03, want[1], want[3]);
  for (int i = 0; i < 4; ++i) CHECK(x[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

TEST_CASE("rope at position 0 is the identity") {
  for (RopeStyle style : {RopeStyle::GptJ, RopeStyle::NeoX}) {
    RopeParams rope{style, 8, 8, 10000.0f};
    auto x = random_values(16, 1);
    const auto before = x;
    const int32_t pos = 0;
    apply_rope(rope, x.data(), 16, 2, &pos, 1);
    CHECK(std::memcmp(x.data(), before.data(), 16 * 4) == 0);
  }
}

TEST_CASE("rope with partial rotary dim, several heads, tokens and a row stride with padding") {
  for (RopeStyle style : {RopeStyle::GptJ, RopeStyle::NeoX}) {
    CAPTURE(int(style));
    const int head_dim = 8, rotary_dim = 4, num_heads = 3;
    const int64_t row_stride = num_heads * head_dim + 5;  // 5 trailing floats rope must not touch
    const float theta = 500000.0f;
    RopeParams rope{style, head_dim, rotary_dim, theta};
    const int32_t positions[2] = {7, 1234};
    auto x = random_values(size_t(2 * row_stride), 2);
    auto want = x;
    apply_rope(rope, x.data(), row_stride, num_heads, positions, 2);
    for (int t = 0; t < 2; ++t) {
      for (int h = 0; h < num_heads; ++h) {
        float* v = want.data() + t * row_stride + h * head_dim;
        for (int i = 0; i < rotary_dim / 2; ++i) {
          const double angle = positions[t] * std::pow(double(theta), -2.0 * i / rotary_dim);
          if (style == RopeStyle::GptJ) rotate(angle, v[2 * i], v[2 * i + 1]);
          else rotate(angle, v[i], v[i + rotary_dim / 2]);
        }
      }
    }
    // float angles at pos 1234 carry ~1e-4 absolute error, as run.c's do
    for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == doctest::Approx(want[i]).epsilon(2e-4).scale(1.0));
    for (int t = 0; t < 2; ++t) {
      for (int h = 0; h < num_heads; ++h) {
        for (int i = rotary_dim; i < head_dim; ++i) {
          const size_t k = size_t(t * row_stride + h * head_dim + i);
          CHECK(x[k] == want[k]);  // untouched past rotary_dim: bit-identical
        }
      }
      for (int64_t i = num_heads * head_dim; i < row_stride; ++i)
        CHECK(x[size_t(t * row_stride + i)] == want[size_t(t * row_stride + i)]);
    }
  }
}

TEST_CASE("rope scaling: linear, yarn and Llama 3 frequencies against their formulas in double") {
  const int rotary_dim = 64;
  const double theta = 10000.0;
  auto base = [&](int i) { return std::pow(theta, -2.0 * i / rotary_dim); };
  std::vector<float> freq(rotary_dim / 2);
  RopeParams rope{RopeStyle::NeoX, rotary_dim, rotary_dim, float(theta)};

  rope.scaling = RopeScaling::Linear;
  rope.factor = 4.0f;
  rope_frequencies(rope, freq.data());
  for (int i = 0; i < rotary_dim / 2; ++i) CHECK(freq[size_t(i)] == doctest::Approx(base(i) / 4.0).epsilon(1e-6));

  // Yarn, original context 512: corr dim(r) = 64 ln(512 / (2 pi r)) / (2 ln 10000); low = floor(dim(32)) = 3,
  // high = ceil(dim(1)) = 16. Pairs <= 3 keep their frequency, pairs >= 16 are divided by the factor, the
  // ones between blend linearly.
  rope.scaling = RopeScaling::Yarn;
  rope.original_context = 512;
  rope_frequencies(rope, freq.data());
  const double low = 3, high = 16;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const double extrapolate = 1.0 - std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double want = base(i) / 4.0 * (1.0 - extrapolate) + base(i) * extrapolate;
    CAPTURE(i);
    CHECK(freq[size_t(i)] == doctest::Approx(want).epsilon(1e-5));
  }
  CHECK(freq[0] == doctest::Approx(base(0)).epsilon(1e-6));
  CHECK(freq[20] == doctest::Approx(base(20) / 4.0).epsilon(1e-6));

  // Llama 3 (factor 8, low / high freq factors 1 / 4, original context 64): wavelengths 2 pi / base(i) under
  // 16 keep 1, above 64 get 8, between get 1 / ((1 - s) / 8 + s) with s = (64 / wavelength - 1) / 3.
  std::vector<float> factors(rotary_dim / 2);
  llama3_rope_freq_factors(float(theta), rotary_dim, 8.0f, 1.0f, 4.0f, 64, factors.data());
  int num_blend = 0;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const double wavelength = 2.0 * M_PI / base(i);
    const double s = (64.0 / wavelength - 1.0) / 3.0;
    const double want = wavelength < 16 ? 1.0 : wavelength > 64 ? 8.0 : 1.0 / ((1.0 - s) / 8.0 + s);
    num_blend += wavelength >= 16 && wavelength <= 64;
    CAPTURE(i);
    CHECK(factors[size_t(i)] == doctest::Approx(want).epsilon(1e-6));
  }
  CHECK(num_blend >= 2);
  rope = RopeParams{RopeStyle::NeoX, rotary_dim, rotary_dim, float(theta)};
  rope.freq_factors = factors.data();
  rope_frequencies(rope, freq.data());
  for (int i = 0; i < rotary_dim / 2; ++i) CHECK(freq[size_t(i)] == doctest::Approx(base(i) / factors[size_t(i)]).epsilon(1e-6));
}

TEST_CASE("rope attn_factor scales the rotation's cos and sin; off, the table is the unscaled one") {
  RopeParams rope{RopeStyle::GptJ, 4, 4, 10000.0f};
  float freq[2], plain[4], scaled[4];
  rope_frequencies(rope, freq);
  rope_cos_sin(rope, freq, 5.0f, plain);
  rope.attn_factor = 1.25f;
  rope_cos_sin(rope, freq, 5.0f, scaled);
  for (int i = 0; i < 4; ++i) CHECK(scaled[i] == doctest::Approx(1.25 * plain[i]).epsilon(1e-6));
  CHECK(plain[0] == std::cos(5.0f));  // no scaling: the same bits as before scaling existed
}

TEST_CASE("rms_norm matches x / sqrt(mean(x^2) + eps) * w, also in place") {
  const int64_t num_tokens = 3, dim = 172;
  const float eps = 1e-5f;
  const auto x = random_values(size_t(num_tokens * dim), 3);
  const auto w = random_values(size_t(dim), 4);
  std::vector<float> out(x.size());
  rms_norm(x.data(), w.data(), out.data(), num_tokens, dim, eps);
  for (int64_t t = 0; t < num_tokens; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(t * dim + i)]) * x[size_t(t * dim + i)];
    const double scale = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i)
      CHECK(out[size_t(t * dim + i)] == doctest::Approx(w[size_t(i)] * scale * x[size_t(t * dim + i)]).epsilon(1e-5));
  }
  auto in_place = x;
  rms_norm(in_place.data(), w.data(), in_place.data(), num_tokens, dim, eps);
  CHECK(std::memcmp(in_place.data(), out.data(), out.size() * 4) == 0);
}

TEST_CASE("rms_norm over many tokens (pool path) equals one token at a time") {
  const int64_t num_tokens = 300, dim = 2048;
  const auto x = random_values(size_t(num_tokens * dim), 5);
  const auto w = random_values(size_t(dim), 6);
  std::vector<float> all(x.size()), one(static_cast<size_t>(dim));
  rms_norm(x.data(), w.data(), all.data(), num_tokens, dim, 1e-6f);
  for (int64_t t : {0, 150, 299}) {
    rms_norm(x.data() + t * dim, w.data(), one.data(), 1, dim, 1e-6f);
    CHECK(std::memcmp(one.data(), all.data() + t * dim, size_t(dim) * 4) == 0);
  }
}

TEST_CASE("add_rms_norm gives the bits of add_inplace then rms_norm, with out aliasing y, on the pool too") {
  for (const int64_t num_tokens : {int64_t(1), int64_t(3), int64_t(300)}) {
    const int64_t dim = 576;  // 300 rows take the pool (more than its grain of 56)
    const auto x0 = random_values(size_t(num_tokens * dim), 8);
    const auto y = random_values(size_t(num_tokens * dim), 9);
    const auto w = random_values(size_t(dim), 10);
    auto x_ref = x0;
    std::vector<float> out_ref(x0.size());
    add_inplace(x_ref.data(), y.data(), int64_t(x_ref.size()));
    rms_norm(x_ref.data(), w.data(), out_ref.data(), num_tokens, dim, 1e-5f);

    auto x = x0;
    std::vector<float> out(x0.size());
    add_rms_norm(x.data(), y.data(), w.data(), out.data(), num_tokens, dim, 1e-5f);
    CHECK(std::memcmp(x.data(), x_ref.data(), x.size() * 4) == 0);
    CHECK(std::memcmp(out.data(), out_ref.data(), out.size() * 4) == 0);

    auto x2 = x0;
    auto y_out = y;  // out written over y, as the model's forward pass does with its scratch row
    add_rms_norm(x2.data(), y_out.data(), w.data(), y_out.data(), num_tokens, dim, 1e-5f);
    CHECK(std::memcmp(x2.data(), x_ref.data(), x2.size() * 4) == 0);
    CHECK(std::memcmp(y_out.data(), out_ref.data(), y_out.size() * 4) == 0);
  }
}

TEST_CASE("softmax sums to one, matches double, and survives large logits") {
  auto x = random_values(1000, 7, -10.0f, 10.0f);
  x[17] = 1000.0f;
  x[18] = 999.0f;
  std::vector<double> want(x.size());
  double max_val = -1e300, sum = 0;
  for (float v : x) max_val = std::max(max_val, double(v));
  for (size_t i = 0; i < x.size(); ++i) sum += want[i] = std::exp(double(x[i]) - max_val);
  softmax(x.data(), int64_t(x.size()));
  double total = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(x[i] == doctest::Approx(want[i] / sum).epsilon(1e-5).scale(1e-7));
    total += x[i];
  }
  CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(x[17] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-5));
}

TEST_CASE("exp_approx: within 2 ulp of e^x over the normal range, 0 below it") {
  int max_ulp = 0;
  for (float x = -87.3f; x <= 88.0f; x = std::nextafter(x + 1e-4f * std::fabs(x) + 1e-7f, 100.0f)) {
    const float want = float(std::exp(double(x)));
    const float got = exp_approx(x);
    int32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    max_ulp = std::max(max_ulp, std::abs(a - b));
  }
  CHECK(max_ulp <= 2);
  CHECK(exp_approx(0.0f) == 1.0f);
  CHECK(exp_approx(-88.0f) == 0.0f);
  CHECK(exp_approx(-1e30f) == 0.0f);
  CHECK(exp_approx(1e30f) == exp_approx(88.0f));
  CHECK(std::isfinite(exp_approx(88.0f)));
}

TEST_CASE("silu_mul and add_inplace") {
  inflight::test::IsaGuard restore;
  const int64_t num_tokens = 2, dim = 172;
  auto g = random_values(size_t(num_tokens * dim), 8, -8.0f, 8.0f);
  g[3] = -100.0f;  // e^100 clamped to e^88
  g[11] = 90.0f;   // e^-90 below the normal range: 0
  g[12] = 87.5f;
  const auto u = random_values(size_t(num_tokens * dim), 9);
  for (cpu::Isa isa : inflight::test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    std::vector<float> out(g.size());
    silu_mul(g.data(), u.data(), out.data(), num_tokens, dim);
    for (size_t i = 0; i < g.size(); ++i) {
      const double silu = g[i] / (1.0 + std::exp(-double(g[i])));
      CHECK(out[i] == doctest::Approx(silu * u[i]).epsilon(1e-5).scale(1e-6));
    }
    for (size_t i = 0; i < g.size(); ++i) {  // the vectorised body gives the scalar formula's bits
      float val = g[i];
      val *= 1.0f / (1.0f + exp_approx(-val));
      CHECK(out[i] == val * u[i]);
    }
    auto aliased = g;
    silu_mul(aliased.data(), u.data(), aliased.data(), num_tokens, dim);
    CHECK(std::memcmp(aliased.data(), out.data(), out.size() * 4) == 0);
  }

  auto x = random_values(37, 10);
  const auto y = random_values(37, 11);
  const auto x0 = x;
  add_inplace(x.data(), y.data(), 37);
  for (size_t i = 0; i < x.size(); ++i) CHECK(x[i] == x0[i] + y[i]);
}

TEST_CASE("argmax is std::max_element's index under every ISA: ties, NaNs, infinities, signed zeros") {
  inflight::test::IsaGuard restore;
  const float nan = std::nanf(""), inf = __builtin_inff();
  std::mt19937 rng(12);
  std::vector<std::vector<float>> cases;
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 49152}) {
    auto v = random_values(size_t(n), uint32_t(n));
    for (float& f : v) f = std::round(f * 4.0f) / 4.0f;  // few distinct values: many ties
    cases.push_back(v);
    auto top_at_end = v;  // the maximum only in the scalar tail
    top_at_end.back() = 9.0f;
    cases.push_back(top_at_end);
    auto with_nans = v;  // NaNs anywhere but first are passed over, even where they are most of the row
    for (size_t i = 1; i < with_nans.size(); ++i)
      if (rng() % 3 != 0) with_nans[i] = nan;
    cases.push_back(with_nans);
    auto nan_first = v;  // a NaN at 0 is kept
    nan_first[0] = nan;
    cases.push_back(nan_first);
    cases.push_back(std::vector<float>(size_t(n), -inf));
    auto zeros = std::vector<float>(size_t(n), -1.0f);  // -0 and +0 tie
    zeros[size_t(n) / 2] = 0.0f;
    zeros[size_t(n) / 3] = -0.0f;
    cases.push_back(zeros);
    auto top_inf = v;
    top_inf[size_t(n) * 2 / 3] = inf;
    cases.push_back(top_inf);
  }
  for (cpu::Isa isa : inflight::test::supported_isas()) {
    CAPTURE(cpu::isa_name(isa));
    REQUIRE(cpu::set_active_isa(isa));
    for (const auto& v : cases) {
      CAPTURE(v.size());
      CHECK(argmax(v.data(), int64_t(v.size())) == std::max_element(v.begin(), v.end()) - v.begin());
    }
  }
}
