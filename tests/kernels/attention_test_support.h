// Builds packed, paged attention batches for the attention tests: sequences with a cached past and
// new rows, blocks shuffled over the pool, random Q/K/V, and the AttentionParams of a fused step.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/attention_params.h"
#include "kernels/cpu/isa.h"
#include "isa_test_support.h"

namespace inflight::test {

struct SeqSpec {
  int past = 0;   // tokens already cached
  int q_len = 0;  // new rows this step
};

struct PagedBatch {
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 16, quant_group = 0;
  kernels::KvDType dtype = kernels::KvDType::F32;
  std::vector<SeqSpec> seqs;
  int num_blocks = 0, max_blocks = 0;
  std::vector<uint8_t> data;       // [num_blocks, 2, Nkv, block_size, head_dim] of dtype
  std::vector<float> scales;       // [num_blocks, 2, Nkv, block_size, head_dim / quant_group] (Int8)
  float quant_orig = 1.0f;         // Int8Static / Fp8*
  std::vector<int32_t> tables;     // [num_seqs, max_blocks]
  std::vector<int32_t> q_start{0}, past;
  std::vector<int64_t> slots;      // [T]
  std::vector<int32_t> positions;  // [T]
  std::vector<float> q, k, v;      // [T, Nq * D], [T, Nkv * D], [T, Nkv * D]; k before RoPE

  int num_tokens() const { return q_start.back(); }

  kernels::PagedKvView view() {
    kernels::PagedKvView kv;
    kv.data = data.data();
    kv.dtype = dtype;
    kv.num_blocks = num_blocks;
    kv.block_size = block_size;
    kv.num_kv_heads = num_kv_heads;
    kv.head_dim = head_dim;
    kv.block_tables = tables.data();
    kv.max_blocks_per_seq = max_blocks;
    if (kernels::kv_has_group_scales(dtype)) {
      kv.scales = scales.data();
      kv.quant_group = quant_group;
    }
    for (int i = 0; i < 2; ++i) {
      kv.quant_orig_scale[i] = quant_orig * (i == 0 ? 1.0f : 1.25f);  // distinct K and V scales
      kv.orig_quant_scale[i] = 1.0f / kv.quant_orig_scale[i];
    }
    return kv;
  }

  // The fused step: append k/v (no RoPE unless the caller sets rope), attend every row.
  kernels::AttentionParams params(float* out) {
    kernels::AttentionParams p;
    p.q = q.data();
    p.q_stride = int64_t(num_q_heads) * head_dim;
    p.out = out;
    p.num_q_heads = num_q_heads;
    p.num_kv_heads = num_kv_heads;
    p.head_dim = p.head_dim_v = head_dim;
    p.num_seqs = int(seqs.size());
    p.q_start = q_start.data();
    p.past_len = past.data();
    p.kv = view();
    p.k = k.data();
    p.k_stride = int64_t(num_kv_heads) * head_dim;
    p.v = v.data();
    p.v_stride = p.k_stride;
    p.slot_mapping = slots.data();
    p.positions = positions.data();
    return p;
  }
};

// Sequences `specs` over a pool of shuffled blocks; the past of each sequence is appended (random
// values, no RoPE), the step's q/k/v are random. Static dtypes get the scale of amax 5.
inline PagedBatch make_batch(const std::vector<SeqSpec>& specs, int num_q_heads, int num_kv_heads, int head_dim,
                             int block_size, kernels::KvDType dtype, uint32_t seed, int quant_group = 0) {
  PagedBatch b;
  b.num_q_heads = num_q_heads;
  b.num_kv_heads = num_kv_heads;
  b.head_dim = head_dim;
  b.block_size = block_size;
  b.dtype = dtype;
  b.quant_group = quant_group > 0 ? quant_group : head_dim;
  b.seqs = specs;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (const SeqSpec& s : specs) {
    const int nb = (s.past + s.q_len + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, nb);
    b.num_blocks += nb;
  }
  b.num_blocks += 1;  // one spare block nobody owns
  std::vector<int32_t> perm(size_t(b.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int64_t row_elems = int64_t(num_kv_heads) * head_dim;
  b.data.assign(size_t(b.num_blocks) * 2 * row_elems * block_size * kernels::kv_elem_bytes(dtype), 0);
  b.scales.assign(size_t(b.num_blocks) * 2 * num_kv_heads * block_size * (head_dim / b.quant_group), 0.0f);
  if (kernels::kv_has_static_scale(dtype)) b.quant_orig = kernels::kv_static_scale_for_amax(dtype, 5.0f);
  b.tables.assign(specs.size() * size_t(b.max_blocks), -1);
  int next = 0;
  for (size_t s = 0; s < specs.size(); ++s) {
    const int total = specs[s].past + specs[s].q_len;
    for (int i = 0; i < (total + block_size - 1) / block_size; ++i) b.tables[s * b.max_blocks + i] = perm[size_t(next++)];
    b.past.push_back(specs[s].past);
    b.q_start.push_back(b.q_start.back() + specs[s].q_len);
  }
  kernels::PagedKvView kv = b.view();
  for (size_t s = 0; s < specs.size(); ++s) {
    auto slot = [&](int pos) { return int64_t(b.tables[s * b.max_blocks + pos / block_size]) * block_size + pos % block_size; };
    std::vector<float> pk(size_t(specs[s].past * row_elems)), pv(pk.size());
    for (float& x : pk) x = normal(rng);
    for (float& x : pv) x = normal(rng);
    std::vector<int64_t> past_slots;
    for (int pos = 0; pos < specs[s].past; ++pos) past_slots.push_back(slot(pos));
    kernels::append_kv(kv, pk.data(), row_elems, pv.data(), row_elems, past_slots.data(), specs[s].past);
    for (int i = 0; i < specs[s].q_len; ++i) {
      b.slots.push_back(slot(specs[s].past + i));
      b.positions.push_back(specs[s].past + i);
    }
  }
  const int T = b.num_tokens();
  b.q.resize(size_t(T) * num_q_heads * head_dim);
  b.k.resize(size_t(T) * row_elems);
  b.v.resize(size_t(T) * row_elems);
  for (float& x : b.q) x = normal(rng);
  for (float& x : b.k) x = normal(rng);
  for (float& x : b.v) x = normal(rng);
  return b;
}

// RoPE fused into the step: `style` pairs, the first `rotary_dim` features, theta 10000.
inline void set_rope(kernels::AttentionParams& p, kernels::RopeStyle style, int rotary_dim) {
  p.rope.style = style;
  p.rope.head_dim = p.head_dim;
  p.rope.rotary_dim = rotary_dim;
  p.rope.theta = 10000.0f;
}

// The RoPE scalings of the model families on top of set_rope: 0 Llama 3 (per-pair frequency divisors in
// `factors`, which must outlive the params), 1 yarn (factor 4 over 256 positions, attn_factor 1 + 0.1 ln 4),
// 2 linear (factor 2).
inline void set_rope_scaling(kernels::AttentionParams& p, int kind, std::vector<float>& factors) {
  kernels::RopeParams& r = p.rope;
  if (kind == 0) {
    factors.resize(size_t(r.rotary_dim / 2));
    kernels::llama3_rope_freq_factors(r.theta, r.rotary_dim, 8.0f, 1.0f, 4.0f, 64, factors.data());
    r.freq_factors = factors.data();
  } else if (kind == 1) {
    r.scaling = kernels::RopeScaling::Yarn;
    r.factor = 4.0f;
    r.original_context = 256;
    r.attn_factor = 1.0f + 0.1f * std::log(4.0f);
  } else {
    r.scaling = kernels::RopeScaling::Linear;
    r.factor = 2.0f;
  }
}

struct Run {
  std::vector<float> out;
  PagedBatch batch;  // the cache after the step
};

// Runs the step of `b` (a copy) with `backend`; `tweak` edits the params first.
template <class Backend, class Tweak>
Run run_step(const PagedBatch& b, Backend backend, Tweak tweak) {
  Run r{std::vector<float>(size_t(b.num_tokens()) * b.num_q_heads * b.head_dim, NAN), b};
  kernels::AttentionParams p = r.batch.params(r.out.data());
  tweak(p);
  backend(p);
  return r;
}

inline const auto kReference = [](const kernels::AttentionParams& p) { kernels::reference::attention(p); };
inline const auto kNoTweak = [](kernels::AttentionParams&) {};

// The scaled-RoPE sweep every backend runs: each scaling of set_rope_scaling over f32 and int8 KV, head dims
// 64 (GPT-J pairs) and 128 (NeoX). check(batch, tweak, plain) runs the backend under test and the reference
// with `tweak` applied to the step's params and compares them; `plain` sets the same RoPE unscaled.
template <class Check>
void for_each_scaled_rope_case(Check check) {
  const std::vector<test::SeqSpec> specs{{0, 54}, {43, 9}, {300, 1}, {700, 1}};
  for (int kind = 0; kind < 3; ++kind)
    for (kernels::KvDType dtype : {kernels::KvDType::F32, kernels::KvDType::Int8})
      for (int head_dim : {64, 128}) {
        CAPTURE(kind);
        CAPTURE(kernels::kv_dtype_name(dtype));
        CAPTURE(head_dim);
        const PagedBatch b = make_batch(specs, 8, 2, head_dim, 16, dtype, 5 + kind + head_dim, 0);
        auto plain = [head_dim](kernels::AttentionParams& p) {
          set_rope(p, head_dim == 128 ? kernels::RopeStyle::NeoX : kernels::RopeStyle::GptJ, head_dim);
        };
        std::vector<float> factors;
        auto tweak = [&](kernels::AttentionParams& p) {
          plain(p);
          set_rope_scaling(p, kind, factors);
        };
        check(b, tweak, plain, dtype);
      }
}

// The mask sweep every backend runs: bool and additive masks in the (Sq,Skv), (N,Sq,Skv) and (B,N,Sq,Skv)
// broadcasts, band pre/next tokens, softcap and q_scaling, f32 and int8 KV. check(batch, tweak, dtype) runs
// the backend under test and the reference with `tweak` applied to the step's params and compares them.
template <class Check>
void for_each_mask_case(Check check) {
  const std::vector<test::SeqSpec> specs{{0, 9}, {30, 7}, {12, 1}};
  const int Nq = 4, Sq = 9, Skv = 37;
  std::mt19937 rng(3);
  std::vector<uint8_t> bool_mask(size_t(specs.size()) * Nq * Sq * Skv);
  std::vector<float> add_mask(bool_mask.size());
  for (size_t i = 0; i < bool_mask.size(); ++i) {
    bool_mask[i] = rng() % 5 == 0;
    add_mask[i] = rng() % 7 == 0 ? -INFINITY : float(int(rng() % 200) - 100) / 50.0f;
  }
  struct Shape {
    int64_t seq_stride, head_stride;
  };
  const Shape shapes[] = {{0, 0}, {0, int64_t(Sq) * Skv}, {int64_t(Nq) * Sq * Skv, int64_t(Sq) * Skv}};
  for (kernels::KvDType dtype : {kernels::KvDType::F32, kernels::KvDType::Int8})
    for (kernels::MaskKind kind : {kernels::MaskKind::Bool, kernels::MaskKind::Additive})
      for (const Shape& shape : shapes)
        for (auto [pre, next] : {std::pair{-1, 0}, {5, 0}, {-1, -1}, {4, 3}}) {
          CAPTURE(kernels::kv_dtype_name(dtype));
          CAPTURE(int(kind));
          CAPTURE(shape.seq_stride);
          CAPTURE(shape.head_stride);
          CAPTURE(pre);
          CAPTURE(next);
          const test::PagedBatch b = make_batch(specs, Nq, 2, 64, 16, dtype, 9);
          auto tweak = [&](kernels::AttentionParams& p) {
            p.mask.kind = kind;
            p.mask.data = kind == kernels::MaskKind::Bool ? static_cast<const void*>(bool_mask.data()) : add_mask.data();
            p.mask.seq_stride = shape.seq_stride;
            p.mask.head_stride = shape.head_stride;
            p.mask.row_stride = Skv;
            p.pre_tokens = pre;
            p.next_tokens = next;
            p.softcap = 2.5f;
            p.scale = 0.0f;
            p.q_scaling = 1.5f;
          };
          check(b, tweak, dtype);
        }
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= m)) m = d;  // NaN wins
  }
  return m;
}

}  // namespace inflight::test
