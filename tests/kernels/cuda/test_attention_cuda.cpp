// The CUDA attention (kernels/cuda/attention.cu: the span routine for decode rows; context.cu: the tensor-core
// prompt kernel) against reference::attention and the CPU kernels, on the
// CPU tests' batches (attention_test_support.h): every KV dtype, head dims 64/128, GQA groups 1/3/4/8,
// block sizes 1/16/64, KV lengths 1/54/97/2049 and 32k, mixed prefill/chunk/decode batches, fused RoPE
// (both styles, partial rotary), masks, band, softcap, beam cache indirection, ONNX Runtime's golden cases;
// append codes equal to the CPU's; and a row's bits alone vs in a batch of 64, one block vs split-K.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "../gqa_golden_support.h"
#include "cuda_backend.h"

using namespace inflight;
using kernels::KvDType;
using test::Run;
using test::run_step;
using test::set_rope;
using test::kReference;
using test::kNoTweak;

namespace {

// GPU vs reference on the same stored values. Decode rows (the span routine): the softmax sums in another
// order and dequantizes with the same formulas (no int16 / bf16 rounding of queries as the CPU's VNNI / BF16
// routines do), so every dtype has the float tolerance of the CPU's scalar path, with margin for expf.
double cuda_tolerance(KvDType) { return 5e-5; }
// Prompt rows (the tensor-core kernel) round Q, K, V and P to f16, or to bf16 for a bf16 cache: the
// tolerance of the CPU test's f16 / bf16 KV against f32 KV (quantization_tolerance).
double prompt_tolerance(KvDType t) { return t == KvDType::BF16 ? 2e-2 : 3e-3; }

// The largest |got - want| over the decode rows (sequences with one row) and over the prompt rows.
struct RowErrors {
  double decode = 0.0, prompt = 0.0;
};
RowErrors row_errors(const test::PagedBatch& b, const std::vector<float>& got, const std::vector<float>& want) {
  RowErrors e;
  const size_t width = size_t(b.num_q_heads) * b.head_dim;
  for (size_t s = 0; s + 1 < b.q_start.size(); ++s) {
    const size_t r0 = size_t(b.q_start[s]), r1 = size_t(b.q_start[s + 1]);
    const std::vector<float> g(got.begin() + r0 * width, got.begin() + r1 * width);
    const std::vector<float> w(want.begin() + r0 * width, want.begin() + r1 * width);
    double& worst = r1 - r0 == 1 ? e.decode : e.prompt;
    worst = std::max(worst, test::max_abs_diff(g, w));
  }
  return e;
}
// Decode rows within cuda_tolerance, prompt rows within prompt_tolerance.
void check_rows(const test::PagedBatch& b, const Run& gpu, const Run& ref, KvDType dtype) {
  const RowErrors e = row_errors(b, gpu.out, ref.out);
  CHECK(e.decode <= cuda_tolerance(dtype));
  CHECK(e.prompt <= prompt_tolerance(dtype));
}

const auto kCuda = [](const kernels::AttentionParams& p) { test::cuda_attention(p); };
const auto kCudaSpan = [](const kernels::AttentionParams& p) { test::cuda_attention(p, {}, false); };
const auto kCpu = [](const kernels::AttentionParams& p) { kernels::cpu::append_kv(p); };

}  // namespace

TEST_SUITE("attention_cuda") {
  TEST_CASE("every KV dtype, head dim 64/128, group 1/3/4/8, mixed batch, fused RoPE: cuda == reference, "
            "append codes == the CPU's") {
    const std::vector<test::SeqSpec> specs{{0, 54}, {43, 54}, {96, 1}, {0, 1}, {53, 1}, {700, 1}};
    for (KvDType dtype : kernels::kAllKvDTypes)
      for (int head_dim : {64, 128})
        for (int group : {1, 3, 4, 8}) {
          CAPTURE(kernels::kv_dtype_name(dtype));
          CAPTURE(head_dim);
          CAPTURE(group);
          const test::PagedBatch b = test::make_batch(specs, 2 * group, 2, head_dim, 16, dtype, 11 + group + head_dim,
                                                      dtype == KvDType::Int8 && head_dim == 128 ? 32 : 0);
          auto tweak = [&](kernels::AttentionParams& p) {
            if (head_dim == 128) set_rope(p, kernels::RopeStyle::NeoX, 64);  // partial rotary
            else set_rope(p, kernels::RopeStyle::GptJ, 64);
          };
          const Run gpu = run_step(b, kCuda, tweak);
          const Run span = run_step(b, kCudaSpan, tweak);
          const Run ref = run_step(b, kReference, tweak);
          const Run cpu_append = run_step(b, kCpu, tweak);
          const RowErrors e = row_errors(b, gpu.out, ref.out);
          const double span_err = test::max_abs_diff(span.out, ref.out);
          MESSAGE(kernels::kv_dtype_name(dtype) << " D" << head_dim << " G" << group << ": max |cuda - ref| = "
                  << span_err << " (span routine, every row), prompt kernel " << e.prompt << ", decode " << e.decode);
          CHECK(span_err <= cuda_tolerance(dtype));
          check_rows(b, gpu, ref, dtype);
          CHECK(gpu.batch.data == cpu_append.batch.data);
          CHECK(gpu.batch.scales == cpu_append.batch.scales);
        }
  }

  TEST_CASE("scaled RoPE (Llama 3 factors, yarn, linear): cuda == reference, append codes == the CPU's") {
    test::for_each_scaled_rope_case([](const test::PagedBatch& b, auto tweak, auto, KvDType dtype) {
      const Run gpu = run_step(b, kCuda, tweak);
      const Run cpu_append = run_step(b, kCpu, tweak);
      check_rows(b, gpu, run_step(b, kReference, tweak), dtype);
      CHECK(gpu.batch.data == cpu_append.batch.data);
      CHECK(gpu.batch.scales == cpu_append.batch.scales);
    });
  }

  TEST_CASE("block size 1/16/64, KV length 1/54/97/2049 and 32k: cuda == reference") {
    const std::vector<test::SeqSpec> specs{{0, 1}, {53, 1}, {96, 1}, {2048, 1}, {2032, 17}};
    for (int block_size : {1, 16, 64})
      for (KvDType dtype : kernels::kAllKvDTypes) {
        CAPTURE(block_size);
        CAPTURE(kernels::kv_dtype_name(dtype));
        const test::PagedBatch b = test::make_batch(specs, 8, 2, 64, block_size, dtype, 3 + block_size);
        const Run gpu = run_step(b, kCuda, kNoTweak), ref = run_step(b, kReference, kNoTweak);
        check_rows(b, gpu, ref, dtype);
      }
    for (KvDType dtype : {KvDType::F16, KvDType::Int8, KvDType::Fp8E4M3}) {
      CAPTURE(kernels::kv_dtype_name(dtype));
      const test::PagedBatch b = test::make_batch({{32767, 1}}, 32, 8, 128, 16, dtype, 5);
      const Run gpu = run_step(b, kCuda, kNoTweak), ref = run_step(b, kReference, kNoTweak);
      CHECK(test::max_abs_diff(gpu.out, ref.out) <= cuda_tolerance(dtype));
    }
  }

  TEST_CASE("masks with (Sq,Skv), (N,Sq,Skv), (B,N,Sq,Skv) broadcast, band pre/next tokens, softcap, q_scaling") {
    test::for_each_mask_case([&](const test::PagedBatch& b, const auto& tweak, KvDType dtype) {
      const Run gpu = run_step(b, kCuda, tweak), ref = run_step(b, kReference, tweak);
      const RowErrors e = row_errors(b, gpu.out, ref.out);
      MESSAGE(kernels::kv_dtype_name(dtype) << " masks: prompt kernel " << e.prompt << ", decode " << e.decode);
      check_rows(b, gpu, ref, dtype);
      CHECK(test::max_abs_diff(run_step(b, kCudaSpan, tweak).out, ref.out) <= cuda_tolerance(dtype));
    });
  }

  TEST_CASE("beam cache indirection: each position is read from the beam that wrote it") {
    const std::vector<test::SeqSpec> specs{{600, 1}, {600, 1}, {600, 1}, {0, 6}};
    for (KvDType dtype : {KvDType::F32, KvDType::Fp8E4M3}) {
      const test::PagedBatch b = test::make_batch(specs, 8, 2, 64, 16, dtype, 21);
      std::mt19937 rng(4);
      const int64_t stride = 601;
      std::vector<int32_t> indir(4 * stride, 0), row0{0, 0, 0, 3};
      for (int s = 0; s < 3; ++s)
        for (int j = 0; j < 600; ++j) indir[size_t(s * stride + j)] = int32_t(rng() % 3);
      for (int s = 0; s < 3; ++s) indir[size_t(s * stride + 600)] = s;
      auto tweak = [&](kernels::AttentionParams& p) {
        p.cache_indir = indir.data();
        p.cache_indir_stride = stride;
        p.beam_row0 = row0.data();
      };
      const Run gpu = run_step(b, kCuda, tweak), ref = run_step(b, kReference, tweak);
      CAPTURE(kernels::kv_dtype_name(dtype));
      check_rows(b, gpu, ref, dtype);
      const Run plain = run_step(b, kCuda, kNoTweak);
      CHECK(test::max_abs_diff(gpu.out, plain.out) > 1e-3);
    }
  }

  TEST_CASE("a row's bits: alone == in a batch of 64, prefill chunked or not, one block == split-K") {
    for (KvDType dtype : {KvDType::F16, KvDType::BF16, KvDType::Int8, KvDType::Fp8E4M3}) {
      CAPTURE(kernels::kv_dtype_name(dtype));
      // Sequence 0: a prefill of 600 rows over 1000 cached keys; then 63 decode rows of assorted lengths.
      std::vector<test::SeqSpec> specs{{1000, 600}};
      for (int s = 1; s < 64; ++s) specs.push_back({37 * s + 5 * (s % 7), 1});
      test::PagedBatch b = test::make_batch(specs, 8, 2, 128, 16, dtype, 41);
      std::vector<float> full(size_t(b.num_tokens()) * 8 * 128);
      kernels::AttentionParams p = b.params(full.data());
      set_rope(p, kernels::RopeStyle::NeoX, 128);
      test::cuda_attention(p, {.spans_per_block = -1});  // appends, then one block per row
      const int64_t row_elems = 8 * 128;
      // The same rows with split-K plans, the cache already holding the step's K/V.
      for (int spb : {1, 3}) {
        std::vector<float> split(full.size());
        kernels::AttentionParams q = b.params(split.data());
        set_rope(q, kernels::RopeStyle::NeoX, 128);
        q.k = q.v = nullptr;
        q.slot_mapping = nullptr;
        test::cuda_attention(q, {.spans_per_block = spb});
        CAPTURE(spb);
        CHECK(split == full);
      }
      // Each decode row alone, and the prefill's second half as a chunk of its own.
      auto alone = [&](int s, int r0, int r1) {
        std::vector<float> out(size_t(r1 - r0) * row_elems);
        kernels::AttentionParams a = b.params(out.data());
        const int64_t row0 = b.q_start[size_t(s)] + r0;
        std::vector<int32_t> qs{0, r1 - r0}, past{b.past[size_t(s)] + r0};
        a.q = b.q.data() + row0 * a.q_stride;
        a.num_seqs = 1;
        a.q_start = qs.data();
        a.past_len = past.data();
        a.kv.block_tables = b.tables.data() + size_t(s) * b.max_blocks;
        a.positions = b.positions.data() + row0;
        a.k = a.v = nullptr;
        a.slot_mapping = nullptr;
        set_rope(a, kernels::RopeStyle::NeoX, 128);
        test::cuda_attention(a);  // auto plan: split-K for a lone row
        return out;
      };
      auto rows_of = [&](int s, int r0, int r1) {
        const int64_t at = (b.q_start[size_t(s)] + r0) * row_elems;
        return std::vector<float>(full.begin() + at, full.begin() + at + (r1 - r0) * row_elems);
      };
      CHECK(alone(0, 300, 600) == rows_of(0, 300, 600));
      for (int s : {1, 17, 63}) {
        CAPTURE(s);
        CHECK(alone(s, 0, 1) == rows_of(s, 0, 1));
      }
    }
  }

  TEST_CASE("ONNX Runtime's GroupQueryAttention golden cases through the paged CUDA kernels") {
    using namespace test::gqa_golden;
    for (const GoldenCase& c : load_cases()) {
      CAPTURE(c.name);
      for (int block_size : {1, 4, 16}) {
        CAPTURE(block_size);
        check_paged(c, block_size, kCudaSpan);  // f32 throughout: ORT's f32 tolerance
      }
    }
  }
}
