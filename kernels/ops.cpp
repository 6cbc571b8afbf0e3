// Element-wise and row-wise ops. Formulas follow llama2.c's run.c operation for operation (the golden
// tests compare logits with it), and every row is computed the same way whatever the batch.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

void rms_norm(const float* x, const float* weight, float* out, int64_t num_tokens, int64_t dim, float eps) {
  for_each_row(num_tokens, dim, [&](int64_t t) {
    const float* xt = x + t * dim;
    float* ot = out + t * dim;
    float ss = 0.0f;  // sequential f32 sum, as run.c
    for (int64_t i = 0; i < dim; ++i) ss += xt[i] * xt[i];
    ss /= float(dim);
    ss += eps;
    ss = 1.0f / std::sqrt(ss);
    for (int64_t i = 0; i < dim; ++i) ot[i] = weight[i] * (ss * xt[i]);
  });
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

void silu_mul(const float* gate, const float* up, float* out, int64_t num_tokens, int64_t dim) {
  for_each_row(num_tokens, dim, [&](int64_t t) {
    const float* g = gate + t * dim;
    const float* u = up + t * dim;
    float* o = out + t * dim;
    for (int64_t i = 0; i < dim; ++i) {
      float val = g[i];
      val *= 1.0f / (1.0f + std::exp(-val));  // silu(x) = x * sigmoid(x), written as run.c does
      o[i] = val * u[i];
    }
  });
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
