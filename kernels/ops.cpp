// Element-wise and row-wise ops. Formulas follow llama2.c's run.c operation for operation (the golden
// tests compare logits with it; silu's e^x is a 2-ulp polynomial instead of libm's expf, vectorised), and
// every row is computed the same way whatever the batch.
#include "kernels/ops.h"

#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start from an uninitialised __Y (_mm512_undefined_ps) and warn about it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/thread_pool.h"

namespace inflight::kernels {
namespace {

// Least elements per pool task; below this the rows run on the calling thread.
constexpr int64_t kMinElemsPerTask = int64_t(1) << 15;

// Runs fn(row) for row < num_rows, on the pool when the rows are many enough to pay for it.
template <class Fn>
void for_each_row(int64_t num_rows, int64_t row_elems, const Fn& fn) {
  const int64_t grain = std::max<int64_t>(1, kMinElemsPerTask / std::max<int64_t>(1, row_elems));
  if (num_rows <= grain) {
    for (int64_t r = 0; r < num_rows; ++r) fn(r);
    return;
  }
  compute_pool().parallel_for(num_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) fn(r);
  });
}

[[noreturn]] void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: %s\n", file, line, what);
  std::abort();
}

}  // namespace

// The sum of x[i]^2 in f32: element i adds to running sum i % 16, in order, then the 16 sums halve pairwise
// (l + 8, then + 4, + 2, + 1). The same bits whatever the vector width the compiler gives the 16 sums,
// and no chain of n dependent adds: one sum at a time, as run.c, took about 2300 cycles for a 576-wide row.
static float sum_of_squares(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l] * x[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += x[i + l] * x[i + l];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

static void rms_norm_row(const float* x, const float* weight, float* out, int64_t dim, float eps) {
  float ss = sum_of_squares(x, dim);
  ss /= float(dim);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int64_t i = 0; i < dim; ++i) out[i] = weight[i] * (ss * x[i]);
}

void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim, float eps) {
  for_each_row(num_tokens, dim, [&](int64_t t) { rms_norm_row(x + t * dim, weight, out + t * dim, dim, eps); });
}

void add_rms_norm(float* x, const float* y, const float* weight, float* out, int64_t num_tokens, int64_t dim,
                  float eps) {
  for_each_row(num_tokens, dim, [&](int64_t t) {
    float* xt = x + t * dim;
    const float* yt = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) xt[i] += yt[i];  // the whole row before out's row (out may be y)
    rms_norm_row(xt, weight, out + t * dim, dim, eps);
  });
}

void rope_frequencies(const RopeParams& rope, float* freq) {
  const int num_pairs = rope.rotary_dim / 2;
  for (int i = 0; i < num_pairs; ++i) {
    freq[i] = 1.0f / std::pow(rope.theta, float(2 * i) / float(rope.rotary_dim));
    if (rope.freq_factors != nullptr) freq[i] /= rope.freq_factors[i];
  }
  if (rope.scaling == RopeScaling::None) return;
  const float freq_scale = 1.0f / rope.factor;
  if (rope.scaling == RopeScaling::Linear) {
    for (int i = 0; i < num_pairs; ++i) freq[i] *= freq_scale;
    return;
  }
  // Yarn: the pair index where a frequency makes `rotations` turns over original_context; pairs below
  // `low` keep their frequency (extrapolate), above `high` are divided by factor (interpolate).
  const float n_dims = float(rope.rotary_dim);
  auto corr_dim = [&](float rotations) {
    return n_dims * std::log(float(rope.original_context) / (rotations * 2.0f * float(M_PI))) /
           (2.0f * std::log(rope.theta));
  };
  const float low = std::max(0.0f, std::floor(corr_dim(rope.beta_fast)));
  const float high = std::min(n_dims - 1.0f, std::ceil(corr_dim(rope.beta_slow)));
  for (int i = 0; i < num_pairs; ++i) {
    const float y = (float(i) - low) / std::max(0.001f, high - low);
    const float extrapolate = 1.0f - std::min(1.0f, std::max(0.0f, y));  // 1 below low, 0 above high
    freq[i] = freq[i] * freq_scale * (1.0f - extrapolate) + freq[i] * extrapolate;
  }
}

void llama3_rope_freq_factors(float theta, int rotary_dim, float factor, float low_freq_factor,
                              float high_freq_factor, int original_context, float* out) {
  const double low_wavelen = double(original_context) / low_freq_factor;
  const double high_wavelen = double(original_context) / high_freq_factor;
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const double freq = 1.0 / std::pow(double(theta), double(2 * i) / rotary_dim);
    const double wavelen = 2.0 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      out[i] = factor;
    } else {
      const double smooth = (double(original_context) / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      out[i] = float(1.0 / ((1.0 - smooth) / factor + smooth));
    }
  }
}

void apply_rope(const RopeParams& rope, float* x, int64_t row_stride, int num_heads, const int32_t* positions,
                int64_t num_tokens) {
  const int rotary_dim = rope.rotary_dim;
  if (rotary_dim <= 0) return;
  if (rotary_dim % 2 != 0 || rotary_dim > rope.head_dim) fail(__FILE__, __LINE__, "rope: bad rotary_dim");
  const int num_pairs = rotary_dim / 2;
  std::vector<float> freq(size_t(num_pairs), 0.0f);  // [num_pairs] radians per position
  rope_frequencies(rope, freq.data());

  for_each_row(num_tokens, int64_t(num_heads) * rope.head_dim, [&](int64_t t) {
    // [num_pairs, 2] cos/sin of this token's angles, shared by all heads
    thread_local std::vector<float> cos_sin;
    cos_sin.resize(size_t(2 * num_pairs));
    rope_cos_sin(rope, freq.data(), float(positions[t]), cos_sin.data());
    for (int h = 0; h < num_heads; ++h) rotate_head(rope, cos_sin.data(), x + t * row_stride + int64_t(h) * rope.head_dim);
  });
}

void add_bias(float* x, const float* bias, int64_t num_tokens, int64_t dim) {
  for_each_row(num_tokens, dim, [&](int64_t t) {
    float* xt = x + t * dim;
    for (int64_t i = 0; i < dim; ++i) xt[i] += bias[i];
  });
}

namespace {

// exp_inline's constants, shared with silu_mul_row_avx2's vector copy of its steps.
constexpr float kExpLo = -87.3f, kExpHi = 88.0f;
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kRoundEven = 12582912.0f;  // 1.5 * 2^23
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};  // highest degree first

// e^x within 2 ulp (tests/kernels/test_ops.cpp): x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts),
// e^r by Cephes' degree-6 polynomial, times 2^n built in the exponent bits; 0 below -87.3 (where 2^n
// leaves the normal range), e^88 above 88. Plain float operations with no FMA contraction (the kernels
// build with -ffp-contract=off), so the per-ISA functions below give the scalar bits.
[[gnu::always_inline]] inline float exp_inline(float x) {
  const float xc = x < kExpLo ? kExpLo : x > kExpHi ? kExpHi : x;
  const float n = (xc * kLog2e + kRoundEven) - kRoundEven;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = kExpPoly[0];
  for (int k = 1; k < 6; ++k) p = p * r + kExpPoly[k];
  const float er = (p * r * r + r) + 1.0f;
  const float two_n = std::bit_cast<float>((int32_t(n) + 127) << 23);
  return x < kExpLo ? 0.0f : er * two_n;
}

// One row of silu_mul, vectorised by the compiler once per ISA and picked by active_isa(). (Not
// target_clones: its ifunc resolver runs before ThreadSanitizer's runtime is up and crashes TSan builds.)
[[gnu::always_inline]] inline void silu_mul_row(const float* g, const float* u, float* o, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i) {
    float val = g[i];
    val *= 1.0f / (1.0f + exp_inline(-val));  // silu(x) = x * sigmoid(x), written as run.c does
    o[i] = val * u[i];
  }
}
[[gnu::target("avx512f")]] void silu_mul_row_avx512(const float* g, const float* u, float* o, int64_t dim) {
  silu_mul_row(g, u, o, dim);
}
// AVX2 by hand: GCC leaves silu_mul_row scalar there, since under -ftrapping-math it may not compute
// e^x's product for the lanes the final select drops (AVX-512 masks them instead). exp_inline's steps in
// its order, one rounding each, so the same bits; the tail runs the scalar body.
[[gnu::target("avx2")]] void silu_mul_row_avx2(const float* g, const float* u, float* o, int64_t dim) {
  const __m256 lo = _mm256_set1_ps(kExpLo), hi = _mm256_set1_ps(kExpHi), round = _mm256_set1_ps(kRoundEven);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m256 val = _mm256_loadu_ps(g + i);
    const __m256 x = _mm256_xor_ps(val, _mm256_set1_ps(-0.0f));  // -val
    const __m256 below = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 xc = _mm256_blendv_ps(x, lo, below);
    xc = _mm256_blendv_ps(xc, hi, _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), round), round);
    const __m256 r = _mm256_sub_ps(_mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi))),
                                   _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
    __m256 p = _mm256_set1_ps(kExpPoly[0]);
    for (int k = 1; k < 6; ++k) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kExpPoly[k]));
    const __m256 er = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), one);
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_andnot_ps(below, _mm256_mul_ps(er, _mm256_castsi256_ps(bits)));  // 0 below kExpLo
    const __m256 silu = _mm256_mul_ps(val, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
  }
  silu_mul_row(g + i, u + i, o + i, dim - i);
}
void silu_mul_row_baseline(const float* g, const float* u, float* o, int64_t dim) { silu_mul_row(g, u, o, dim); }

// argmax: the largest value by a vector max (a NaN lane of x keeps the running max, as operator< passes NaNs
// over), then the first index holding it (-0 and +0 are equal there, as they are to operator<). x[0] NaN:
// std::max_element keeps index 0.
[[gnu::target("avx512f")]] int64_t argmax_avx512(const float* x, int64_t n) {
  if (n < 16 || std::isnan(x[0])) return std::max_element(x, x + n) - x;
  __m512 m = _mm512_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
  float best = _mm512_reduce_max_ps(m);
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m512 b = _mm512_set1_ps(best);
  for (i = 0; i + 16 <= n; i += 16)
    if (const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), b, _CMP_EQ_OQ)) return i + __builtin_ctz(eq);
  while (x[i] != best) ++i;
  return i;
}
[[gnu::target("avx2")]] int64_t argmax_avx2(const float* x, int64_t n) {
  if (n < 8 || std::isnan(x[0])) return std::max_element(x, x + n) - x;
  __m256 m = _mm256_set1_ps(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  const __m256 b = _mm256_set1_ps(best);
  for (i = 0; i + 8 <= n; i += 8) {
    const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), b, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(unsigned(eq));
  }
  while (x[i] != best) ++i;
  return i;
}

}  // namespace

float exp_approx(float x) { return exp_inline(x); }

int64_t argmax(const float* x, int64_t n) {
  const cpu::Isa isa = cpu::active_isa();
  if (isa >= cpu::Isa::Avx512) return argmax_avx512(x, n);
  if (isa == cpu::Isa::Avx2) return argmax_avx2(x, n);
  return std::max_element(x, x + n) - x;
}

void silu_mul(const float* gate, const float* up, float* out, int64_t num_tokens, int64_t dim) {
  const cpu::Isa isa = cpu::active_isa();
  const auto row = isa >= cpu::Isa::Avx512 ? silu_mul_row_avx512 : isa == cpu::Isa::Avx2 ? silu_mul_row_avx2 : silu_mul_row_baseline;
  for_each_row(num_tokens, dim, [&](int64_t t) { row(gate + t * dim, up + t * dim, out + t * dim, dim); });
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max_val = x[0];
  for (int64_t i = 1; i < n; ++i) max_val = x[i] > max_val ? x[i] : max_val;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_val);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

}  // namespace inflight::kernels
