// CPU attention throughput. Decode: one query row per sequence, 32 query / 8 KV heads, head dim 128,
// KV lengths 512..16k, batch 1..32, per KV dtype, in GB/s of KV read (K, V and scales), next to a STREAM
// triad measured in the same binary right before and after each case: bw_share = KV GB/s / triad GB/s
// (each side the median of 3 passes). Context: one prefill of S rows over S keys, in GFLOP/s (QK and PV, causal);
// context_model: the same as the model calls it at SmolLM's shape (fused K/V append and RoPE included).
//
//   ./bench_attention                                     # active ISA = best detected, all threads
//   ./bench_attention --benchmark_filter='decode/.*/kv8192/' --benchmark_repetitions=3
//
// Decode cycles over enough copies of the cache (the layers of a cache::KvCache, allocated like the
// engine's) to exceed the last-level cache (>= 512 MiB touched per cycle), so its numbers are DRAM
// numbers, as in a model whose layers' KV do not fit in cache. INFLIGHT_BENCH_KV_HOT=1 keeps one copy (the
// KV stays in cache as far as it fits): the kernels' compute cost without DRAM.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/attention_params.h"
#include "kernels/cpu/attention_driver.h"
#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/isa.h"
#include "kernels/thread_pool.h"

namespace {

using namespace inflight::kernels;
namespace cache = inflight::cache;

constexpr int kNumQHeads = 32, kNumKvHeads = 8, kHeadDim = 128, kBlockSize = 16;
constexpr int64_t kColdBytes = int64_t(512) << 20;

// One triad array: 128 MiB, 2 MiB aligned and advised as transparent huge pages, as cache::KvCache
// allocates the KV (on 4 KiB pages this machine's triad measured 15-20 % lower, which would flatter the
// kernels' share).
struct TriadArray {
  static constexpr size_t kFloats = size_t(32) << 20;
  float* p;
  explicit TriadArray(float fill) : p(static_cast<float*>(std::aligned_alloc(size_t(2) << 20, kFloats * sizeof(float)))) {
    if (p == nullptr) std::abort();
#ifdef MADV_HUGEPAGE
    madvise(p, kFloats * sizeof(float), MADV_HUGEPAGE);
#endif
    std::fill(p, p + kFloats, fill);
  }
  ~TriadArray() { std::free(p); }
  TriadArray(const TriadArray&) = delete;
  TriadArray& operator=(const TriadArray&) = delete;
};

// STREAM triad a = b + s * c over 3 x 128 MiB on the compute pool; GB/s counting 3 arrays per pass.
double triad_once(TriadArray& a, const TriadArray& b, const TriadArray& c) {
  const int64_t n = int64_t(TriadArray::kFloats);
  const auto t0 = std::chrono::steady_clock::now();
  compute_pool().parallel_for(n, int64_t(1) << 16, [&](int64_t begin, int64_t end) {
    float* pa = a.p;
    const float* pb = b.p;
    const float* pc = c.p;
    for (int64_t i = begin; i < end; ++i) pa[i] = pb[i] + 3.0f * pc[i];
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 3.0 * double(n) * sizeof(float) / s / 1e9;
}

// The triad's arrays, allocated once.
struct Triad {
  TriadArray a{0.0f}, b{1.0f}, c{2.0f};
};
Triad& triad_arrays() {
  static Triad t;
  return t;
}

// The median of 3 triad passes now: the bandwidth the machine gives at this moment (on a shared host it
// drifts with the neighbours' load, up to 1.7x within minutes, so each case is set against its own).
double triad_now() {
  Triad& t = triad_arrays();
  double runs[3];
  for (double& r : runs) r = triad_once(t.a, t.b, t.c);
  std::sort(runs, runs + 3);
  return runs[1];
}

void run_triad(benchmark::State& state) {
  Triad& t = triad_arrays();
  for (auto _ : state) {
    triad_once(t.a, t.b, t.c);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * int64_t(TriadArray::kFloats) * int64_t(sizeof(float)));
}

// A cache of `num_copies` layers, each holding `batch` sequences of `kv_len` tokens in consecutive blocks
// (cache::KvCache, allocated as the engine allocates it), filled with valid codes.
struct DecodeSetup {
  KvDType dtype;
  int64_t kv_len = 0;
  int batch = 0;
  int num_copies = 0;
  int max_blocks = 0;
  std::unique_ptr<cache::KvCache> kv;
  std::vector<int32_t> tables;      // [batch, max_blocks]
  std::vector<float> q, out;        // [batch, Nq * H]
  std::vector<int32_t> q_start, past;
  int64_t kv_bytes = 0;             // bytes of K, V and scales one decode call reads

  PagedKvView view(int copy) const {
    PagedKvView v = kv->layer_view(copy);
    v.block_tables = tables.data();
    v.max_blocks_per_seq = max_blocks;
    for (int i = 0; i < 2; ++i) v.quant_orig_scale[i] = 0.01f, v.orig_quant_scale[i] = 100.0f;
    return v;
  }
};

// Fills n bytes with a repeated 64 KiB pattern of valid codes (values in about [-2, 2]).
void fill_codes(KvDType dtype, uint8_t* dst, int64_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint8_t> pattern(size_t(1) << 16);
  for (size_t i = 0; i < pattern.size(); i += size_t(kv_elem_bytes(dtype))) {
    const float x = dist(rng);
    KvRowScales s;
    s.orig_quant = 50.0f;
    kv_quantize_row(dtype == KvDType::Int8 ? KvDType::Int8Static : dtype, &x, 1, &pattern[i], s);
  }
  for (int64_t at = 0; at < n; at += int64_t(pattern.size()))
    std::memcpy(dst + at, pattern.data(), size_t(std::min<int64_t>(int64_t(pattern.size()), n - at)));
}

DecodeSetup& decode_setup(KvDType dtype, int64_t kv_len, int batch) {
  static std::unique_ptr<DecodeSetup> current;
  if (current && current->dtype == dtype && current->kv_len == kv_len && current->batch == batch) return *current;
  current.reset();  // free the previous cache first
  auto s = std::make_unique<DecodeSetup>();
  s->dtype = dtype;
  s->kv_len = kv_len;
  s->batch = batch;
  s->max_blocks = int((kv_len + kBlockSize - 1) / kBlockSize);
  cache::KvCacheConfig config{1, kNumKvHeads, kHeadDim, kBlockSize, batch * s->max_blocks, dtype};
  const int64_t copy_bytes = cache::KvCache(config).total_bytes();  // one layer
  s->num_copies = getenv("INFLIGHT_BENCH_KV_HOT") != nullptr ? 1 : int(std::max<int64_t>(1, (kColdBytes + copy_bytes - 1) / copy_bytes));
  config.num_layers = s->num_copies;
  s->kv = std::make_unique<cache::KvCache>(config);
  const int64_t row_bytes = int64_t(kHeadDim) * kv_elem_bytes(dtype);
  const int64_t layer_data_bytes = int64_t(config.num_blocks) * 2 * kNumKvHeads * kBlockSize * row_bytes;
  for (int l = 0; l < s->num_copies; ++l) {
    const PagedKvView v = s->kv->layer_view(l);
    fill_codes(dtype, static_cast<uint8_t*>(v.data), layer_data_bytes);
    if (v.scales != nullptr) std::fill(v.scales, v.scales + int64_t(config.num_blocks) * 2 * kNumKvHeads * kBlockSize, 0.01f);
  }
  s->tables.resize(size_t(batch) * s->max_blocks);
  for (size_t i = 0; i < s->tables.size(); ++i) s->tables[i] = int32_t(i);  // sequence after sequence
  s->q.assign(size_t(batch) * kNumQHeads * kHeadDim, 0.1f);
  s->out.resize(s->q.size());
  for (int b = 0; b <= batch; ++b) s->q_start.push_back(b);
  s->past.assign(size_t(batch), int32_t(kv_len - 1));
  const int64_t scale_bytes = dtype == KvDType::Int8 ? 2 * int64_t(kNumKvHeads) * 4 : 0;
  s->kv_bytes = int64_t(batch) * kv_len * (2 * kNumKvHeads * row_bytes + scale_bytes);
  current = std::move(s);
  return *current;
}

AttentionParams decode_params(DecodeSetup& s, int copy) {
  AttentionParams p;
  p.q = s.q.data();
  p.q_stride = int64_t(kNumQHeads) * kHeadDim;
  p.out = s.out.data();
  p.num_q_heads = kNumQHeads;
  p.num_kv_heads = kNumKvHeads;
  p.head_dim = p.head_dim_v = kHeadDim;
  p.num_seqs = s.batch;
  p.q_start = s.q_start.data();
  p.past_len = s.past.data();
  p.kv = s.view(copy);
  return p;
}

void run_decode(benchmark::State& state, KvDType dtype, int64_t kv_len, int batch) {
  DecodeSetup& s = decode_setup(dtype, kv_len, batch);
  const double triad_before = triad_now();
  int copy = 0;
  for (auto _ : state) {
    const AttentionParams p = decode_params(s, copy);
    cpu::decode_attention(p, 0, s.batch);
    benchmark::DoNotOptimize(s.out.data());
    copy = copy + 1 == s.num_copies ? 0 : copy + 1;
  }
  const double triad = (triad_before + triad_now()) / 2;  // around the timed loop
  state.SetBytesProcessed(state.iterations() * s.kv_bytes);
  state.counters["bw_share"] = benchmark::Counter(double(s.kv_bytes) / 1e9 / triad,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["triad_GBps"] = triad;
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + ", " + std::to_string(compute_pool().num_threads()) +
                 " threads");
}

// The tile routine alone (kernels/cpu/attention_tile.h): R query heads of one KV head against 64-key tiles
// of head dim kDim (128, or SmolLM's 64), cycling over 16 tiles (K and V of f16 at dim 128 fill 512 KiB,
// within L2) with the next tile prefetched as the drivers do; the routine's compute cost for a GQA group of
// R query heads. Time per iteration = one tile of 64 keys; items = keys.
void run_tile(benchmark::State& state, KvDType dtype, int num_queries, int kDim) {
  using cpu::kKvTile;
  constexpr int kTiles = 16;
  const size_t R = static_cast<size_t>(num_queries);
  const int64_t row_bytes = int64_t(kDim) * kv_elem_bytes(dtype);
  const int64_t tile_bytes = int64_t(kKvTile) * row_bytes;
  std::vector<uint8_t> k(size_t(kTiles * tile_bytes)), v(k.size());
  fill_codes(dtype, k.data(), int64_t(k.size()));
  fill_codes(dtype, v.data(), int64_t(v.size()));
  std::vector<const void*> k_rows(size_t(kTiles) * kKvTile), v_rows(k_rows.size());
  for (size_t j = 0; j < k_rows.size(); ++j) {
    k_rows[j] = k.data() + int64_t(j) * row_bytes;
    v_rows[j] = v.data() + int64_t(j) * row_bytes;
  }
  std::vector<float> row_scales(size_t(kTiles) * kKvTile, 0.01f);
  std::vector<const float*> scale_rows(k_rows.size());
  for (size_t j = 0; j < scale_rows.size(); ++j) scale_rows[j] = &row_scales[j];
  const int pdim = cpu::padded_dim(kDim);
  std::vector<float> q(R * size_t(pdim)), o(q.size()), m(R), d(R);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * float(i % 17);
  std::vector<int16_t> q16(R * 2 * kDim);
  std::vector<float> q16_scale(R);
  const bool use_q16 = cpu::tile_uses_q16(cpu::active_isa() >= cpu::Isa::Avx512Vnni, dtype, kDim, kDim, kDim);
  if (use_q16) cpu::quantize_queries_int16(q.data(), num_queries, kDim, q16.data(), q16_scale.data());
  cpu::Workspace scratch;
  std::vector<int> lo(R, 0), hi(R, kKvTile);
  const char* next[2];
  cpu::TileArgs a;
  a.num_queries = num_queries;
  a.q = q.data();
  a.q16 = use_q16 ? q16.data() : nullptr;
  a.q16_scale = use_q16 ? q16_scale.data() : nullptr;
  a.head_dim = a.head_dim_v = kDim;
  a.scale = 0.1f;
  a.num_keys = kKvTile;
  a.dtype = dtype;
  a.quant_group = kDim;
  a.quant_orig_k = a.quant_orig_v = 0.01f;
  a.lo = lo.data();
  a.hi = hi.data();
  a.o = o.data();
  a.m = m.data();
  a.d = d.data();
  a.scratch = scratch.get(cpu::tile_scratch_floats(num_queries, kDim, kDim));  // 64-byte aligned
  a.prefetch = next;
  a.num_prefetch = 2;
  a.prefetch_bytes = tile_bytes;
  a.prefetch_end = 2 * tile_bytes;
  const cpu::AttendTileFn attend = cpu::attend_tile_fn();
  int t = 0;
  for (auto _ : state) {
    const int t1 = t + 1 == kTiles ? 0 : t + 1;
    a.k_rows = &k_rows[size_t(t) * kKvTile];
    a.v_rows = &v_rows[size_t(t) * kKvTile];
    a.k_scales = &scale_rows[size_t(t) * kKvTile];
    a.v_scales = a.k_scales;
    next[0] = static_cast<const char*>(k_rows[size_t(t1) * kKvTile]);
    next[1] = static_cast<const char*>(v_rows[size_t(t1) * kKvTile]);
    attend(a);
    benchmark::DoNotOptimize(o.data());
    t = t1;
  }
  state.SetItemsProcessed(state.iterations() * kKvTile);  // keys (of one KV head with its R query heads)
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())));
}

// One sequence's prefill of s rows over its own s keys (already cached), causal.
void run_context(benchmark::State& state, KvDType dtype, int64_t len) {
  DecodeSetup& s = decode_setup(dtype, len, 1);
  std::vector<float> q(size_t(len) * kNumQHeads * kHeadDim, 0.1f), out(q.size());
  std::vector<int32_t> q_start{0, int32_t(len)}, past{0};
  for (auto _ : state) {
    AttentionParams p = decode_params(s, 0);
    p.q = q.data();
    p.out = out.data();
    p.num_seqs = 1;
    p.q_start = q_start.data();
    p.past_len = past.data();
    cpu::context_attention(p, 0, 1);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * kHeadDim * kNumQHeads * double(len) * double(len + 1) / 2.0;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + ", " + std::to_string(compute_pool().num_threads()) +
                 " threads");
}

// A prefill's attention call as the model makes it, at SmolLM-135M's shape (9 query / 3 KV heads, head dim 64, f16
// KV in 16-token blocks): K and V appended from the fused QKV rows, q and k rotated (GGUF RoPE), then S rows over
// their S keys, causal. Before each call the QKV rows are rewritten on the pool (as the QKV matmul leaves them) and
// each thread reads 3 MiB of other data, so the call starts as in a forward pass; neither is timed.
void run_context_model(benchmark::State& state, int64_t len) {
  constexpr int kQ = 9, kKv = 3, kDim = 64, kBlock = 16;
  const int n = int(len), num_blocks = int((len + kBlock - 1) / kBlock);
  cache::KvCache kv({1, kKv, kDim, kBlock, num_blocks, KvDType::F16});
  const int64_t stride = int64_t(kQ + 2 * kKv) * kDim;
  std::vector<float> rows(size_t(len * stride)), qkv(rows.size()), out(size_t(len) * kQ * kDim);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : rows) x = dist(rng);
  std::vector<int32_t> positions(static_cast<size_t>(len)), table(static_cast<size_t>(num_blocks)), q_start{0, n},
      past{0};
  std::vector<int64_t> slots(static_cast<size_t>(len));
  for (int i = 0; i < n; ++i) positions[size_t(i)] = i, slots[size_t(i)] = i;
  for (int b = 0; b < num_blocks; ++b) table[size_t(b)] = b;
  ThreadPool& pool = compute_pool();
  std::vector<std::vector<uint8_t>> other(size_t(pool.num_threads()), std::vector<uint8_t>(size_t(3) << 20));
  AttentionParams p;
  p.q = qkv.data();
  p.q_stride = p.k_stride = p.v_stride = stride;
  p.k = qkv.data() + kQ * kDim;
  p.v = p.k + kKv * kDim;
  p.out = out.data();
  p.num_q_heads = kQ;
  p.num_kv_heads = kKv;
  p.head_dim = p.head_dim_v = kDim;
  p.num_seqs = 1;
  p.q_start = q_start.data();
  p.past_len = past.data();
  p.kv = kv.layer_view(0);
  p.kv.block_tables = table.data();
  p.kv.max_blocks_per_seq = num_blocks;
  p.slot_mapping = slots.data();
  p.rope.head_dim = p.rope.rotary_dim = kDim;
  p.positions = positions.data();
  for (auto _ : state) {
    state.PauseTiming();
    pool.parallel_for(len, 8, [&](int64_t begin, int64_t end) {
      std::memcpy(&qkv[size_t(begin * stride)], &rows[size_t(begin * stride)], size_t((end - begin) * stride) * 4);
    });
    pool.run(pool.num_threads(), [&](int64_t t) {
      uint64_t sum = 0;
      for (size_t i = 0; i < other[size_t(t)].size(); i += 64) sum += other[size_t(t)][i];
      benchmark::DoNotOptimize(sum);
    });
    state.ResumeTiming();
    cpu::attention(p);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 4.0 * kDim * kQ * double(len) * double(len + 1) / 2.0;
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cpu::isa_name(cpu::active_isa())) + ", " + std::to_string(pool.num_threads()) +
                 " threads");
}

bool register_all() {
  benchmark::RegisterBenchmark("triad", run_triad)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (KvDType dtype : {KvDType::F16, KvDType::BF16, KvDType::Int8, KvDType::Fp8E4M3, KvDType::Fp8E5M2})
    for (int64_t kv_len : {512, 2048, 8192, 16384})
      for (int batch : {1, 4, 16, 32}) {
        const std::string name = "decode/" + std::string(kv_dtype_name(dtype)) + "/kv" + std::to_string(kv_len) +
                                 "/b" + std::to_string(batch);
        benchmark::RegisterBenchmark(name.c_str(), run_decode, dtype, kv_len, batch)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
  for (KvDType dtype : {KvDType::F16, KvDType::BF16, KvDType::Int8, KvDType::Fp8E4M3, KvDType::Fp8E5M2})
    for (int r : {1, 2, 3, 4, 8, 16}) {
      const std::string name = "tile/" + std::string(kv_dtype_name(dtype)) + "/r" + std::to_string(r);
      benchmark::RegisterBenchmark(name.c_str(), run_tile, dtype, r, kHeadDim)->Unit(benchmark::kNanosecond);
    }
  // SmolLM's context tiles: head dim 64, 16 rows x a GQA group of 3.
  benchmark::RegisterBenchmark("tile/f16/d64/r48", run_tile, KvDType::F16, 48, 64)->Unit(benchmark::kNanosecond);
  for (KvDType dtype : {KvDType::F16, KvDType::Int8, KvDType::Fp8E4M3})
    for (int64_t len : {512, 2048}) {
      const std::string name = "context/" + std::string(kv_dtype_name(dtype)) + "/s" + std::to_string(len);
      benchmark::RegisterBenchmark(name.c_str(), run_context, dtype, len)->UseRealTime()->Unit(benchmark::kMillisecond);
    }
  for (int64_t len : {496, 2048}) {
    const std::string name = "context_model/smollm/f16/s" + std::to_string(len);
    benchmark::RegisterBenchmark(name.c_str(), run_context_model, len)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  return true;
}

const bool registered = register_all();

}  // namespace

BENCHMARK_MAIN();
