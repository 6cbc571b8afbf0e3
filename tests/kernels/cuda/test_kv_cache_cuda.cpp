// cache::KvCache with its blocks in GPU memory (KvDevice::Cuda) against the same cache on the CPU: the fused
// append through layer_view() stores the CPU cache's bytes, copy-on-write (make_writable) queues block copies
// that flush_copies runs as one batched copy, and attention through the forked table reads the copied block.
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "../attention_test_support.h"
#include "cache/kv_cache.h"
#include "cuda_backend.h"

using namespace inflight;
using kernels::KvDType;

namespace {

// Every layer's data and scales of a cache, on the host.
struct CacheBytes {
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

CacheBytes bytes_of(const cache::KvCache& c) {
  CacheBytes b;
  const cache::KvCacheConfig& cfg = c.config();
  const size_t layer = size_t(cfg.num_blocks) * 2 * cfg.num_kv_heads * cfg.block_size * cfg.head_dim *
                       kernels::kv_elem_bytes(cfg.dtype);
  const kernels::PagedKvView v0 = c.layer_view(0);
  const size_t layer_scales = v0.scales ? size_t(cfg.num_blocks) * 2 * cfg.num_kv_heads * cfg.block_size * v0.num_scale_groups() : 0;
  b.data.resize(layer * cfg.num_layers);
  b.scales.resize(layer_scales * cfg.num_layers);
  for (int l = 0; l < cfg.num_layers; ++l) {
    const kernels::PagedKvView v = c.layer_view(l);
    const cudaMemcpyKind kind = c.on_device() ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
    test::cuda_ok(cudaMemcpy(b.data.data() + layer * l, v.data, layer, kind), "cache data");
    if (layer_scales > 0) test::cuda_ok(cudaMemcpy(b.scales.data() + layer_scales * l, v.scales, layer_scales * 4, kind), "cache scales");
  }
  return b;
}

// One decode row of `table`'s first `len` positions over `layer`, by the CPU reference on a CPU cache or by the
// CUDA span routine on a GPU cache.
std::vector<float> decode_row(const cache::KvCache& c, int layer, const cache::BlockTable& table, int len,
                              const std::vector<float>& q) {
  const cache::KvCacheConfig& cfg = c.config();
  const int num_q_heads = 2 * cfg.num_kv_heads;
  std::vector<float> out(size_t(num_q_heads) * cfg.head_dim);
  std::vector<int32_t> tables(table.blocks().begin(), table.blocks().end()), q_start{0, 1}, past{len - 1};
  kernels::AttentionParams p;
  p.q = q.data();
  p.q_stride = int64_t(num_q_heads) * cfg.head_dim;
  p.out = out.data();
  p.num_q_heads = num_q_heads;
  p.num_kv_heads = cfg.num_kv_heads;
  p.head_dim = p.head_dim_v = cfg.head_dim;
  p.num_seqs = 1;
  p.q_start = q_start.data();
  p.past_len = past.data();
  p.kv = c.layer_view(layer);
  p.kv.block_tables = tables.data();
  p.kv.max_blocks_per_seq = int(tables.size());
  if (!c.on_device()) {
    kernels::reference::attention(p);
    return out;
  }
  test::DeviceCopy dq(q.data(), q.size() * 4), dout(out.data(), out.size() * 4), dtables(tables.data(), tables.size() * 4),
      dqs(q_start.data(), 8), dpast(past.data(), 4);
  p.q = dq.as<float>();
  p.out = dout.as<float>();
  p.q_start = dqs.as<int32_t>();
  p.past_len = dpast.as<int32_t>();
  p.kv.block_tables = dtables.as<int32_t>();
  kernels::cuda::BatchShape shape;
  shape.num_tokens = 1;
  shape.max_kv_len = len;
  kernels::cuda::Workspace ws;
  kernels::cuda::attend(p, shape, {}, ws, nullptr);
  test::cuda_ok(cudaDeviceSynchronize(), "attend");
  dout.copy_back(out.data());
  return out;
}

}  // namespace

TEST_SUITE("kv_cache_cuda") {
  TEST_CASE("a GPU KV cache holds the CPU cache's bytes through append, copy-on-write and batched copies") {
    for (KvDType dtype : {KvDType::F16, KvDType::Int8, KvDType::Fp8E4M3}) {
      CAPTURE(kernels::kv_dtype_name(dtype));
      cache::KvCacheConfig cfg{.num_layers = 2, .num_kv_heads = 2, .head_dim = 64, .block_size = 16, .num_blocks = 8,
                               .dtype = dtype, .quant_group = dtype == KvDType::Int8 ? 32 : 0,
                               .static_amax = dtype == KvDType::Fp8E4M3 ? 4.0f : 0.0f};
      cache::KvCache cpu(cfg);
      cfg.device = cache::KvDevice::Cuda;
      CHECK(cache::kv_config_error(cfg).empty());
      cache::KvCache gpu(cfg);
      CHECK(gpu.on_device());

      // One sequence of 40 tokens: blocks 0..2 in both pools.
      const int len = 40, width = cfg.num_kv_heads * cfg.head_dim;
      cache::BlockTable t_cpu(cfg.block_size), t_gpu(cfg.block_size);
      REQUIRE(t_cpu.reserve(cpu.pool(), len));
      REQUIRE(t_gpu.reserve(gpu.pool(), len));
      REQUIRE(std::vector<int32_t>(t_cpu.blocks().begin(), t_cpu.blocks().end()) ==
              std::vector<int32_t>(t_gpu.blocks().begin(), t_gpu.blocks().end()));
      std::mt19937 rng(9);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<int64_t> slots(len);
      for (int i = 0; i < len; ++i) slots[size_t(i)] = t_cpu.slot(i);
      for (int l = 0; l < cfg.num_layers; ++l) {
        std::vector<float> k(size_t(len) * width), v(size_t(len) * width);
        for (float& x : k) x = normal(rng);
        for (float& x : v) x = normal(rng);
        kernels::append_kv(cpu.layer_view(l), k.data(), width, v.data(), width, slots.data(), len);
        // The GPU side through the CUDA fused append (no RoPE), reading K/V and slots from the device.
        test::DeviceCopy dk(k.data(), k.size() * 4), dv(v.data(), v.size() * 4), ds(slots.data(), slots.size() * 8);
        kernels::AttentionParams p;
        p.num_q_heads = 2 * cfg.num_kv_heads;
        p.num_kv_heads = cfg.num_kv_heads;
        p.head_dim = p.head_dim_v = cfg.head_dim;
        p.kv = gpu.layer_view(l);
        p.k = dk.as<float>();
        p.v = dv.as<float>();
        p.k_stride = p.v_stride = width;
        p.slot_mapping = ds.as<int64_t>();
        kernels::cuda::BatchShape shape;
        shape.num_tokens = len;
        kernels::cuda::append_kv(p, shape, nullptr);
        test::cuda_ok(cudaDeviceSynchronize(), "append");
      }
      CacheBytes want = bytes_of(cpu), got = bytes_of(gpu);
      CHECK(got.data == want.data);
      CHECK(got.scales == want.scales);

      // A fork shares the blocks; making its last block writable copies block 2 (on the GPU: queued).
      cache::BlockTable f_cpu = t_cpu.fork(cpu.pool()), f_gpu = t_gpu.fork(gpu.pool());
      REQUIRE(cpu.make_writable(f_cpu, 32, len));
      REQUIRE(gpu.make_writable(f_gpu, 32, len));
      CHECK(f_gpu.blocks()[2] != t_gpu.blocks()[2]);
      CHECK(gpu.pending_copies() == 1);
      gpu.flush_copies(nullptr);
      CHECK(gpu.pending_copies() == 0);
      test::cuda_ok(cudaDeviceSynchronize(), "flush");
      want = bytes_of(cpu);
      got = bytes_of(gpu);
      CHECK(got.data == want.data);
      CHECK(got.scales == want.scales);

      // Attention through the fork's table reads the copy.
      std::vector<float> q(size_t(2 * width));
      for (float& x : q) x = normal(rng);
      for (int l = 0; l < cfg.num_layers; ++l)
        CHECK(test::max_abs_diff(decode_row(gpu, l, f_gpu, len, q), decode_row(cpu, l, f_cpu, len, q)) <= 5e-5);
      f_cpu.release(cpu.pool());
      f_gpu.release(gpu.pool());
      t_cpu.release(cpu.pool());
      t_gpu.release(gpu.pool());
    }
  }

  TEST_CASE("batched block copies of several pairs in every layer, in one flush") {
    // Int8 with one group of 8: 16-byte data blocks and 8-byte scale blocks, both copy units.
    cache::KvCacheConfig cfg{.num_layers = 3, .num_kv_heads = 1, .head_dim = 8, .block_size = 1, .num_blocks = 6,
                             .dtype = KvDType::Int8, .quant_group = 8, .device = cache::KvDevice::Cuda};
    cache::KvCache gpu(cfg);
    cfg.device = cache::KvDevice::Cpu;
    cache::KvCache cpu(cfg);
    std::vector<float> k(8), v(8);
    for (int l = 0; l < cfg.num_layers; ++l)
      for (int64_t slot = 0; slot < 3; ++slot) {
        for (int e = 0; e < 8; ++e) k[size_t(e)] = float(l * 100 + slot * 10 + e), v[size_t(e)] = -k[size_t(e)];
        kernels::append_kv(cpu.layer_view(l), k.data(), 8, v.data(), 8, &slot, 1);
      }
    // The same bytes into the GPU cache, then copies 0 -> 3, 1 -> 4, 2 -> 5 on both.
    const CacheBytes start = bytes_of(cpu);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const kernels::PagedKvView g = gpu.layer_view(l), h = cpu.layer_view(l);
      const size_t layer = start.data.size() / cfg.num_layers, layer_scales = start.scales.size() / cfg.num_layers;
      test::cuda_ok(cudaMemcpy(g.data, h.data, layer, cudaMemcpyHostToDevice), "upload");
      test::cuda_ok(cudaMemcpy(g.scales, h.scales, layer_scales * 4, cudaMemcpyHostToDevice), "upload");
    }
    for (const auto& [src, dst] : std::vector<std::pair<int, int>>{{0, 3}, {1, 4}, {2, 5}}) {
      cpu.copy_block(src, dst);
      gpu.copy_block(src, dst);
    }
    CHECK(gpu.pending_copies() == 3);
    gpu.flush_copies(nullptr);
    test::cuda_ok(cudaDeviceSynchronize(), "flush");
    const CacheBytes want = bytes_of(cpu), got = bytes_of(gpu);
    CHECK(got.data == want.data);
    CHECK(got.scales == want.scales);
    CHECK(want.data != start.data);
  }
}
