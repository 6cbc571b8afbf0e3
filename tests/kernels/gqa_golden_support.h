// ONNX Runtime GroupQueryAttention golden cases (tests/data/golden/gqa, and the folder named by
// INFLIGHT_GQA_GOLDEN): loading them, the decomposed-graph oracle check, and check_paged, which maps a case
// onto the paged cache (README rule 7) and runs it through any attention backend (reference, CPU, CUDA).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_test_support.h"
#include "kernels/reference/gqa_attention.h"
#include "test_support.h"

namespace inflight::test::gqa_golden {

using kernels::KvDType;

struct GoldenCase {
  std::string name;
  nlohmann::json meta;
  std::filesystem::path dir;

  bool has(const std::string& tensor) const { return meta["tensors"].contains(tensor); }
  std::vector<float> f32(const std::string& tensor) const {
    const std::vector<uint8_t> bytes = test::read_bytes(dir / meta["tensors"][tensor]["file"].get<std::string>());
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  std::vector<int32_t> i32(const std::string& tensor) const {
    const std::vector<uint8_t> bytes = test::read_bytes(dir / meta["tensors"][tensor]["file"].get<std::string>());
    std::vector<int32_t> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  int attr_int(const char* name, int fallback) const {
    return meta["attributes"].contains(name) ? meta["attributes"][name].get<int>() : fallback;
  }
  float attr_float(const char* name) const {
    return meta["attributes"].contains(name) ? meta["attributes"][name].get<float>() : 0.0f;
  }
};

inline std::vector<GoldenCase> load_cases() {
  std::vector<std::filesystem::path> roots{test::data_dir() / "golden" / "gqa"};
  if (const char* env = std::getenv("INFLIGHT_GQA_GOLDEN")) roots.emplace_back(env);
  std::vector<GoldenCase> cases;
  for (const auto& root : roots) {
    REQUIRE_MESSAGE(std::filesystem::is_directory(root), "missing GQA golden folder " << root);
    std::vector<std::filesystem::path> dirs;
    for (const auto& e : std::filesystem::directory_iterator(root))
      if (std::filesystem::exists(e.path() / "case.json")) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) {
      std::ifstream f(d / "case.json");
      cases.push_back({d.filename().string(), nlohmann::json::parse(f), d});
    }
  }
  REQUIRE(!cases.empty());
  return cases;
}

// |got - want| <= atol + rtol * |want| over the rows [0, rows_b) of each batch entry of a
// [B, rows, width] tensor; returns the worst excess ratio (<= 1 passes).
inline double worst_ratio(const std::vector<float>& got, const std::vector<float>& want, int B, int64_t rows, int64_t width,
                   const std::vector<int64_t>& valid_rows, double atol, double rtol) {
  double worst = 0.0;
  for (int b = 0; b < B; ++b)
    for (int64_t r = 0; r < valid_rows[size_t(b)]; ++r)
      for (int64_t i = 0; i < width; ++i) {
        const size_t at = size_t((b * rows + r) * width + i);
        const double ratio = std::fabs(double(got[at]) - want[at]) / (atol + rtol * std::fabs(want[at]));
        if (!(ratio <= worst)) worst = ratio;
      }
  return worst;
}

struct Dims {
  int B, S, N, Nkv, H, P, T, rotary_dim;
  bool packed;
};

inline Dims dims_of(const GoldenCase& c) {
  const auto& d = c.meta["dims"];
  return {d["batch"], d["seq_len"], d["num_heads"], d["kv_num_heads"], d["head_size"], d["past_buffer_len"],
          c.meta["total_sequence_length"], d["rotary_dim"], d["packed_qkv"]};
}

inline void check_oracle(const GoldenCase& c) {
  const Dims D = dims_of(c);
  const std::vector<float> query = c.f32("query");
  std::vector<float> key, value, past_key, past_value, cos_cache, sin_cache;
  if (c.has("key")) key = c.f32("key"), value = c.f32("value");
  if (c.has("past_key")) past_key = c.f32("past_key"), past_value = c.f32("past_value");
  if (c.has("cos_cache")) cos_cache = c.f32("cos_cache"), sin_cache = c.f32("sin_cache");
  const std::vector<int32_t> seqlens = c.i32("seqlens_k");

  kernels::reference::GqaParams p;
  p.num_heads = D.N;
  p.kv_num_heads = D.Nkv;
  p.scale = c.attr_float("scale");
  p.softcap = c.attr_float("softcap");
  p.local_window_size = c.attr_int("local_window_size", -1);
  p.do_rotary = c.attr_int("do_rotary", 0) != 0;
  p.rotary_interleaved = c.attr_int("rotary_interleaved", 0) != 0;
  p.batch = D.B;
  p.seq_len = D.S;
  p.head_size = D.H;
  p.past_buffer_len = past_key.empty() ? 0 : D.P;
  p.total_sequence_length = D.T;
  p.rotary_half = D.rotary_dim / 2;
  p.query = query.data();
  p.key = key.empty() ? nullptr : key.data();
  p.value = value.empty() ? nullptr : value.data();
  p.past_key = past_key.empty() ? nullptr : past_key.data();
  p.past_value = past_value.empty() ? nullptr : past_value.data();
  p.seqlens_k = seqlens.data();
  p.cos_cache = cos_cache.empty() ? nullptr : cos_cache.data();
  p.sin_cache = sin_cache.empty() ? nullptr : sin_cache.data();
  std::vector<float> out(size_t(D.B) * D.S * D.N * D.H);
  std::vector<float> present_k(size_t(D.B) * D.Nkv * p.present_len() * D.H), present_v(present_k.size());
  p.output = out.data();
  p.present_key = present_k.data();
  p.present_value = present_v.data();
  kernels::reference::gqa_attention(p);

  std::vector<int64_t> valid, meaningful;
  for (const auto& pb : c.meta["per_batch"]) {
    valid.push_back(pb["output_valid_rows"]);
    meaningful.push_back(pb["present_meaningful_rows"]);
  }
  const auto& tol = c.meta["tolerance"];
  CHECK(worst_ratio(out, c.f32("output"), D.B, D.S, int64_t(D.N) * D.H, valid, tol["output"]["atol"],
                    tol["output"]["rtol"]) <= 1.0);
  // present: [B, Nkv, L, H]; rows [0, meaningful_b) of every head.
  std::vector<int64_t> rows_per_head;
  const int64_t L = p.present_len();
  for (int b = 0; b < D.B; ++b)
    for (int h = 0; h < D.Nkv; ++h) rows_per_head.push_back(meaningful[size_t(b)]);
  const double pa = tol["present"]["atol"], pr = tol["present"]["rtol"];
  CHECK(worst_ratio(present_k, c.f32("present_key"), D.B * D.Nkv, L, D.H, rows_per_head, pa, pr) <= 1.0);
  CHECK(worst_ratio(present_v, c.f32("present_value"), D.B * D.Nkv, L, D.H, rows_per_head, pa, pr) <= 1.0);
}

// The case mapped onto a paged cache (README rule 7) and run by `backend`.
template <class Backend>
void check_paged(const GoldenCase& c, int block_size, Backend backend) {
  const Dims D = dims_of(c);
  std::vector<test::SeqSpec> specs;
  for (const auto& pb : c.meta["per_batch"]) specs.push_back({pb["past_len"].get<int>(), pb["output_valid_rows"].get<int>()});
  test::PagedBatch b = test::make_batch(specs, D.N, D.Nkv, D.H, block_size, KvDType::F32, 7);

  // Past rows come from past_key / past_value (BNSH), already rotated.
  const std::vector<float> query = c.f32("query");
  const int64_t kv_width = int64_t(D.Nkv) * D.H, q_width = D.packed ? int64_t(D.N + 2 * D.Nkv) * D.H : int64_t(D.N) * D.H;
  kernels::PagedKvView kv = b.view();
  if (c.has("past_key")) {
    const std::vector<float> pk = c.f32("past_key"), pv = c.f32("past_value");
    for (int s = 0; s < D.B; ++s)
      for (int pos = 0; pos < specs[size_t(s)].past; ++pos) {
        std::vector<float> krow(static_cast<size_t>(kv_width)), vrow(static_cast<size_t>(kv_width));
        for (int h = 0; h < D.Nkv; ++h)
          for (int e = 0; e < D.H; ++e) {
            krow[size_t(h * D.H + e)] = pk[((size_t(s) * D.Nkv + h) * D.P + pos) * D.H + e];
            vrow[size_t(h * D.H + e)] = pv[((size_t(s) * D.Nkv + h) * D.P + pos) * D.H + e];
          }
        const int64_t slot = int64_t(b.tables[size_t(s) * b.max_blocks + pos / block_size]) * block_size + pos % block_size;
        kernels::append_kv(kv, krow.data(), kv_width, vrow.data(), kv_width, &slot, 1);
      }
  }
  // New rows: the valid rows of each sequence, packed.
  std::vector<float> q, k, v;
  const std::vector<float> key = c.has("key") ? c.f32("key") : std::vector<float>{};
  const std::vector<float> value = c.has("value") ? c.f32("value") : std::vector<float>{};
  for (int s = 0; s < D.B; ++s)
    for (int i = 0; i < specs[size_t(s)].q_len; ++i) {
      const float* row = &query[(size_t(s) * D.S + i) * q_width];
      q.insert(q.end(), row, row + q_width);
      const float* kr = D.packed ? row + int64_t(D.N) * D.H : &key[(size_t(s) * D.S + i) * kv_width];
      const float* vr = D.packed ? row + int64_t(D.N + D.Nkv) * D.H : &value[(size_t(s) * D.S + i) * kv_width];
      k.insert(k.end(), kr, kr + kv_width);
      v.insert(v.end(), vr, vr + kv_width);
    }
  std::vector<float> out(size_t(b.num_tokens()) * D.N * D.H, NAN);
  kernels::AttentionParams p = b.params(out.data());
  p.q = q.data();
  p.q_stride = q_width;
  p.k = D.packed ? q.data() + int64_t(D.N) * D.H : k.data();
  p.v = D.packed ? q.data() + int64_t(D.N + D.Nkv) * D.H : v.data();
  p.k_stride = p.v_stride = D.packed ? q_width : kv_width;
  p.scale = c.attr_float("scale");
  p.softcap = c.attr_float("softcap");
  const int window = c.attr_int("local_window_size", -1);
  p.pre_tokens = window > 0 ? window - 1 : -1;
  if (c.attr_int("do_rotary", 0) != 0) {
    p.rope.style = c.attr_int("rotary_interleaved", 0) != 0 ? kernels::RopeStyle::GptJ : kernels::RopeStyle::NeoX;
    p.rope.head_dim = D.H;
    p.rope.rotary_dim = D.rotary_dim;
    p.rope.theta = c.meta["dims"]["rope_theta"].get<float>();
  }
  backend(p);

  // Output rows against ORT's valid rows.
  const std::vector<float> want = c.f32("output");
  const auto& tol = c.meta["tolerance"];
  const double atol = tol["output"]["atol"], rtol = tol["output"]["rtol"];
  double worst = 0.0;
  int64_t row = 0;
  for (int s = 0; s < D.B; ++s)
    for (int i = 0; i < specs[size_t(s)].q_len; ++i, ++row)
      for (int64_t e = 0; e < int64_t(D.N) * D.H; ++e) {
        const double w = want[(size_t(s) * D.S + i) * D.N * D.H + e];
        worst = std::max(worst, std::fabs(out[size_t(row * D.N * D.H + e)] - w) / (atol + rtol * std::fabs(w)));
      }
  CHECK(worst <= 1.0);

  // The cache against ORT's present rows [0, tot_b).
  const std::vector<float> pk = c.f32("present_key"), pv = c.f32("present_value");
  const int64_t L = c.meta["dims"]["present_len"];
  const double pa = tol["present"]["atol"], pr = tol["present"]["rtol"];
  double worst_present = 0.0;
  for (int s = 0; s < D.B; ++s)
    for (int pos = 0; pos < specs[size_t(s)].past + specs[size_t(s)].q_len; ++pos)
      for (int h = 0; h < D.Nkv; ++h)
        for (int kvi = 0; kvi < 2; ++kvi) {
          const int64_t block = kv.block_of(s, pos);
          const float* got = static_cast<const float*>(kv.row(block, kvi, h, pos % block_size));
          const std::vector<float>& want_present = kvi == 0 ? pk : pv;
          for (int e = 0; e < D.H; ++e) {
            const double w = want_present[((size_t(s) * D.Nkv + h) * L + pos) * D.H + e];
            worst_present = std::max(worst_present, std::fabs(got[e] - w) / (pa + pr * std::fabs(w)));
          }
        }
  CHECK(worst_present <= 1.0);
}


}  // namespace inflight::test::gqa_golden
