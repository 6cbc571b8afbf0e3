// ONNX Runtime GroupQueryAttention golden cases (tests/data/golden/gqa, and the folder named by
// INFLIGHT_GQA_GOLDEN): the decomposed-graph oracle reproduces ORT's output and present K/V, and the
// paged kernels (reference and fused, every ISA, several block sizes) reproduce ORT's output with the
// sequences mapped onto the paged cache (README rule 7), their cache rows matching ORT's present.
#include <doctest/doctest.h>

#include "gqa_golden_support.h"

using namespace inflight;
using namespace inflight::test::gqa_golden;

TEST_SUITE("gqa_golden") {
  TEST_CASE("the decomposed GQA graph reproduces ONNX Runtime on every golden case") {
    for (const GoldenCase& c : load_cases()) {
      CAPTURE(c.name);
      check_oracle(c);
    }
  }

  TEST_CASE("reference and fused paged kernels reproduce ONNX Runtime on every golden case, every ISA") {
    test::IsaGuard guard;
    for (const GoldenCase& c : load_cases()) {
      CAPTURE(c.name);
      for (int block_size : {1, 4, 16}) {
        CAPTURE(block_size);
        check_paged(c, block_size, [](const kernels::AttentionParams& p) { kernels::reference::attention(p); });
        for (kernels::cpu::Isa isa : test::supported_isas()) {
          CAPTURE(kernels::cpu::isa_name(isa));
          kernels::cpu::set_active_isa(isa);
          check_paged(c, block_size, [](const kernels::AttentionParams& p) { kernels::cpu::attention(p); });
        }
      }
    }
  }
}
