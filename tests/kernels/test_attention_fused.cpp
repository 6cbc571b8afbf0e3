// The fused CPU attention (kernels/cpu/attention_*.cpp) against reference::attention: every KV dtype,
// head dims 64/128, GQA groups 1/4/8, block sizes 1/16/64, KV lengths 1/54/97/2049, batches mixing
// prefill, prefill chunks and decode rows, fused RoPE append (both styles, partial rotary), masks, band,
// softcap, beam cache indirection; and the invariance the engine relies on (same bits alone or batched,
// chunked or not, decode or context kernel, split-K or not).
#include <doctest/doctest.h>

#include <vector>

#include "attention_test_support.h"
#include "kernels/thread_pool.h"

using namespace inflight;
using kernels::KvDType;
using test::Run;
using test::run_step;
using test::set_rope;
using test::kReference;
using test::kNoTweak;

namespace {

// Fused vs reference on the same stored values: only summation order, the exp polynomial and where
// scales are applied differ; with VNNI, int8 also rounds queries and weights to int16 (2^-16 of their max),
// and with BF16, fp8 rounds them to bf16 (2^-9 relative: measured up to 7.5e-3 here, against fp8's own
// 0.1 of quantization_tolerance). Reads the active ISA.
double fused_tolerance(KvDType t) {
  const bool bf16 = kernels::cpu::active_isa() >= kernels::cpu::Isa::Avx512Bf16;
  switch (t) {
    case KvDType::Fp8E4M3:
    case KvDType::Fp8E5M2: return bf16 ? 1.5e-2 : 4e-5;
    case KvDType::F32:
    case KvDType::F16:
    case KvDType::BF16: return 2e-5;
    case KvDType::Int8:
    case KvDType::Int8Static: return 3e-4;
    default: return 4e-5;
  }
}

// Output with quantized KV vs f32 KV (N(0,1) data, |K|, |V| <= ~5, head dim 128); about 1.5-2x what
// was measured (in the comments).
double quantization_tolerance(KvDType t) {
  switch (t) {
    case KvDType::F32: return 2e-5;
    case KvDType::F16: return 3e-3;   // measured 0.9e-3
    case KvDType::BF16: return 2e-2;  // 7.6e-3
    case KvDType::Int8: return 4e-2;  // 1.3e-2 .. 2.3e-2 over groups 8 / 32 / 128
    case KvDType::Int8Static: return 6e-2;  // 3.7e-2
    case KvDType::Fp8E4M3: return 0.2;      // 0.115
    case KvDType::Fp8E5M2: return 0.4;      // 0.24
  }
  return 0.0;
}

const auto kFused = [](const kernels::AttentionParams& p) { kernels::cpu::attention(p); };

// One sequence's rows [r0, r1) of an already appended step, as their own batch (no append).
kernels::AttentionParams sub_params(test::PagedBatch& b, int s, int r0, int r1, float* out,
                                    std::vector<int32_t>& q_start, std::vector<int32_t>& past) {
  kernels::AttentionParams p = b.params(out);
  const int64_t row0 = b.q_start[size_t(s)] + r0;
  p.q = b.q.data() + row0 * p.q_stride;
  q_start = {0, r1 - r0};
  past = {b.past[size_t(s)] + r0};
  p.num_seqs = 1;
  p.q_start = q_start.data();
  p.past_len = past.data();
  p.kv.block_tables = b.tables.data() + size_t(s) * b.max_blocks;
  p.positions = b.positions.data() + row0;
  p.k = p.v = nullptr;
  p.slot_mapping = nullptr;
  return p;
}

}  // namespace

TEST_SUITE("attention_fused") {
  TEST_CASE("every KV dtype, head dim 64/128, group 1/3/4/8, mixed prefill/chunk/decode batch, fused RoPE: "
            "fused == reference") {
    test::IsaGuard guard;
    const std::vector<test::SeqSpec> specs{{0, 54}, {43, 54}, {96, 1}, {0, 1}, {53, 1}};
    for (kernels::cpu::Isa isa : test::supported_isas()) {
      kernels::cpu::set_active_isa(isa);
      for (KvDType dtype : kernels::kAllKvDTypes)
        for (int head_dim : {64, 128})
          for (int group : {1, 3, 4, 8}) {
            CAPTURE(kernels::cpu::isa_name(isa));
            CAPTURE(kernels::kv_dtype_name(dtype));
            CAPTURE(head_dim);
            CAPTURE(group);
            const test::PagedBatch b = test::make_batch(specs, 2 * group, 2, head_dim, 16, dtype, 11 + group + head_dim,
                                                        dtype == KvDType::Int8 && head_dim == 128 ? 32 : 0);
            auto tweak = [&](kernels::AttentionParams& p) {
              if (head_dim == 128) set_rope(p, kernels::RopeStyle::NeoX, 64);  // partial rotary
              else set_rope(p, kernels::RopeStyle::GptJ, 64);
            };
            const Run fused = run_step(b, kFused, tweak);
            const Run ref = run_step(b, kReference, tweak);
            CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
            // The fused append stores exactly what apply_rope + append_kv store.
            CHECK(fused.batch.data == ref.batch.data);
            CHECK(fused.batch.scales == ref.batch.scales);
          }
    }
  }

  TEST_CASE("scaled RoPE (Llama 3 factors, yarn, linear): fused == reference, the same stored codes") {
    test::for_each_scaled_rope_case([](const test::PagedBatch& b, auto tweak, auto plain, KvDType dtype) {
      const Run fused = run_step(b, kFused, tweak);
      const Run ref = run_step(b, kReference, tweak);
      CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
      CHECK(fused.batch.data == ref.batch.data);
      // The scaling changes the result (against the same step without it).
      CHECK(test::max_abs_diff(fused.out, run_step(b, kFused, plain).out) > 1e-3);
    });
  }

  TEST_CASE("quantized KV stays within its dtype's tolerance of f32 KV") {
    const std::vector<test::SeqSpec> specs{{0, 40}, {70, 1}};
    for (KvDType dtype : kernels::kAllKvDTypes)
      for (int quant_group : {8, 32, 128}) {
        if (quant_group != 128 && dtype != KvDType::Int8) continue;
        CAPTURE(kernels::kv_dtype_name(dtype));
        CAPTURE(quant_group);
        const test::PagedBatch q8 = test::make_batch(specs, 8, 2, 128, 16, dtype, 5, quant_group);
        const test::PagedBatch f32 = test::make_batch(specs, 8, 2, 128, 16, KvDType::F32, 5);
        const Run a = run_step(q8, kFused, kNoTweak), b = run_step(f32, kReference, kNoTweak);
        const double err = test::max_abs_diff(a.out, b.out);
        MESSAGE(kernels::kv_dtype_name(dtype) << " group " << quant_group << ": max |out - out_f32| = " << err);
        CHECK(err <= quantization_tolerance(dtype));
      }
  }

  TEST_CASE("block size 1/16/64, KV length 1/54/97/2049: fused == reference") {
    const std::vector<test::SeqSpec> specs{{0, 1}, {53, 1}, {96, 1}, {2048, 1}, {2032, 17}};
    for (int block_size : {1, 16, 64})
      for (KvDType dtype : kernels::kAllKvDTypes) {
        // Every dtype at block 16; a few at the other sizes keep the run short.
        if (block_size != 16 && dtype != KvDType::F16 && dtype != KvDType::Int8 && dtype != KvDType::Fp8E4M3) continue;
        CAPTURE(block_size);
        CAPTURE(kernels::kv_dtype_name(dtype));
        const test::PagedBatch b = test::make_batch(specs, 8, 2, 64, block_size, dtype, 3 + block_size);
        const Run fused = run_step(b, kFused, kNoTweak), ref = run_step(b, kReference, kNoTweak);
        CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
      }
  }

  TEST_CASE("masks with (Sq,Skv), (N,Sq,Skv), (B,N,Sq,Skv) broadcast, band pre/next tokens, softcap, q_scaling") {
    test::for_each_mask_case([&](const test::PagedBatch& b, const auto& tweak, KvDType dtype) {
      const Run fused = run_step(b, kFused, tweak), ref = run_step(b, kReference, tweak);
      CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
    });
    // The band alone (no mask, no softcap): the int8 routine's one-pass range masking.
    for (KvDType dtype : {KvDType::F32, KvDType::Int8, KvDType::Int8Static})
      for (auto [pre, next] : {std::pair{5, 0}, {3, 2}, {20, -1}}) {
        CAPTURE(kernels::kv_dtype_name(dtype));
        CAPTURE(pre);
        CAPTURE(next);
        const test::PagedBatch b = test::make_batch({{0, 9}, {30, 7}, {12, 1}}, 4, 2, 64, 16, dtype, 10);
        auto tweak = [&](kernels::AttentionParams& p) {
          p.pre_tokens = pre;
          p.next_tokens = next;
        };
        const Run fused = run_step(b, kFused, tweak), ref = run_step(b, kReference, tweak);
        CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
      }
  }

  TEST_CASE("beam cache indirection: each position is read from the beam that wrote it") {
    // Rows 0..2 are three beams of one request, row 3 a separate context sequence.
    const std::vector<test::SeqSpec> specs{{600, 1}, {600, 1}, {600, 1}, {0, 6}};
    for (KvDType dtype : {KvDType::F32, KvDType::Fp8E4M3}) {
      const test::PagedBatch b = test::make_batch(specs, 8, 2, 64, 16, dtype, 21);
      std::mt19937 rng(4);
      const int64_t stride = 601;
      std::vector<int32_t> indir(4 * stride, 0), row0{0, 0, 0, 3};
      for (int s = 0; s < 3; ++s)
        for (int j = 0; j < 600; ++j) indir[size_t(s * stride + j)] = int32_t(rng() % 3);
      for (int s = 0; s < 3; ++s) indir[size_t(s * stride + 600)] = s;  // this step's token: own beam
      auto tweak = [&](kernels::AttentionParams& p) {
        p.cache_indir = indir.data();
        p.cache_indir_stride = stride;
        p.beam_row0 = row0.data();
      };
      const Run fused = run_step(b, kFused, tweak), ref = run_step(b, kReference, tweak);
      CAPTURE(kernels::kv_dtype_name(dtype));
      CHECK(test::max_abs_diff(fused.out, ref.out) <= fused_tolerance(dtype));
      // Without indirection the beams' outputs differ: the test reads other beams' K/V.
      const Run plain = run_step(b, kFused, kNoTweak);
      CHECK(test::max_abs_diff(fused.out, plain.out) > 1e-3);
    }
  }

  TEST_CASE("a row's bits do not depend on batching, prefill chunking, decode vs context kernel, or split-K") {
    test::IsaGuard guard;
    kernels::ThreadPool& pool = kernels::compute_pool();
    const int saved_threads = pool.num_threads();
    for (kernels::cpu::Isa isa : test::supported_isas()) {
      kernels::cpu::set_active_isa(isa);
      CAPTURE(kernels::cpu::isa_name(isa));
      // GQA groups of 8, and of 3 (f16: context tiles of 48 queries, decode steps of 3; int8 and fp8: their
      // routines run a last 3 queries as one block).
      const std::pair<KvDType, int> cases[] = {{KvDType::F16, 8},  {KvDType::F16, 3},     {KvDType::BF16, 8},
                                               {KvDType::Int8, 8}, {KvDType::Int8, 3},    {KvDType::Fp8E4M3, 8},
                                               {KvDType::Fp8E4M3, 3}};
      for (const auto& [dtype, nq] : cases) {
        CAPTURE(kernels::kv_dtype_name(dtype));
        CAPTURE(nq);
        // Sequence 1 is a prefill of 600 rows on top of 1500 cached keys (5 spans): its last row alone is a
        // decode step of 2100 key rows, enough for the generation kernel to split it (kMinKeyRowsToSplit).
        test::PagedBatch b = test::make_batch({{5, 3}, {1500, 600}, {77, 1}}, nq, 1, 64, 16, dtype, 31);
        std::vector<float> full(size_t(b.num_tokens()) * nq * 64);
        kernels::AttentionParams p = b.params(full.data());
        set_rope(p, kernels::RopeStyle::NeoX, 64);
        kernels::cpu::attention(p);  // appends, then attends every row
        const int64_t row_elems = nq * 64;
        auto rows_of = [&](int s, int r0, int r1) {
          const int64_t at = (b.q_start[size_t(s)] + r0) * row_elems;
          return std::vector<float>(full.begin() + at, full.begin() + at + (r1 - r0) * row_elems);
        };
        std::vector<int32_t> qs, past;
        // A chunk of the prefill alone (context kernel).
        std::vector<float> chunk(size_t(300) * row_elems);
        kernels::AttentionParams c = sub_params(b, 1, 300, 600, chunk.data(), qs, past);
        set_rope(c, kernels::RopeStyle::NeoX, 64);
        kernels::cpu::context_attention(c, 0, 1);
        CHECK(chunk == rows_of(1, 300, 600));
        // Its last row as a decode step (generation kernel), split-K on 4 threads and not on 1.
        for (int threads : {4, 1}) {
          kernels::set_num_threads(threads);
          std::vector<float> one(static_cast<size_t>(row_elems));
          kernels::AttentionParams d = sub_params(b, 1, 599, 600, one.data(), qs, past);
          set_rope(d, kernels::RopeStyle::NeoX, 64);
          kernels::cpu::decode_attention(d, 0, 1);
          CAPTURE(threads);
          CHECK(one == rows_of(1, 599, 600));
        }
        kernels::set_num_threads(saved_threads);
        // The short sequence alone.
        std::vector<float> alone(size_t(3) * row_elems);
        kernels::AttentionParams a = sub_params(b, 0, 0, 3, alone.data(), qs, past);
        set_rope(a, kernels::RopeStyle::NeoX, 64);
        kernels::cpu::context_attention(a, 0, 1);
        CHECK(alone == rows_of(0, 0, 3));
      }
    }
  }
}
