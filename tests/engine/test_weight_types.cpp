// WeightTypes: which dtype each matrix of a written model gets (one type, or the llama.cpp-style mixes with
// their 32-block fallbacks), and the refusals.
#include <doctest/doctest.h>

#include <stdexcept>

#include "engine/weight_types.h"

using namespace inflight;
using engine::WeightTypes;
using kernels::DType;

TEST_CASE("weight types: one dtype for every matrix, refused where its block does not divide the columns") {
  const WeightTypes q6 = engine::parse_weight_types("q6_k");
  CHECK(q6.base == DType::Q6_K);
  CHECK(q6.mix == WeightTypes::Mix::None);
  CHECK(q6.name() == "q6_k");
  CHECK(q6.file_type() == 18);
  CHECK(q6.matrix_dtype("blk.0.attn_q.weight", 4, 512) == DType::Q6_K);
  CHECK_THROWS_WITH_AS(q6.matrix_dtype("blk.0.attn_q.weight", 4, 576),
                       "--dtype q6_k: tensor blk.0.attn_q.weight has 576 columns, not a multiple of the q6_k block size 256",
                       std::invalid_argument);
  CHECK(engine::parse_weight_types("q4_0").matrix_dtype("output.weight", 4, 96) == DType::Q4_0);
  CHECK_THROWS_AS(engine::parse_weight_types("q4_0").matrix_dtype("output.weight", 4, 100), std::invalid_argument);
  CHECK(engine::parse_weight_types("f16").matrix_dtype("output.weight", 4, 7) == DType::F16);
  CHECK_THROWS_WITH_AS(engine::parse_weight_types("q3_k"),
                       "--dtype: unknown weight dtype 'q3_k' (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, "
                       "q4_k_m, q5_k_m)",
                       std::invalid_argument);
}

TEST_CASE("weight types: q4_k_m / q5_k_m give output, and attn_v / ffn_down of llama.cpp's layers, Q6_K") {
  const WeightTypes m = engine::parse_weight_types("q4_k_m");
  CHECK(m.name() == "q4_k_m");
  CHECK(m.file_type() == 15);
  CHECK(engine::parse_weight_types("q5_k_m").file_type() == 17);
  CHECK(m.matrix_dtype("token_embd.weight", 22, 2048) == DType::Q4_K);
  CHECK(m.matrix_dtype("output.weight", 22, 2048) == DType::Q6_K);
  // 22 layers: more bits for i < 2, i >= 19, and (i - 2) % 3 == 2
  for (int i = 0; i < 22; ++i) {
    CAPTURE(i);
    const bool more = i < 2 || i >= 19 || (i - 2) % 3 == 2;
    const std::string p = "blk." + std::to_string(i) + ".";
    CHECK(m.matrix_dtype(p + "attn_v.weight", 22, 2048) == (more ? DType::Q6_K : DType::Q4_K));
    CHECK(m.matrix_dtype(p + "ffn_down.weight", 22, 5632) == (more ? DType::Q6_K : DType::Q4_K));
    CHECK(m.matrix_dtype(p + "attn_q.weight", 22, 2048) == DType::Q4_K);
    CHECK(m.matrix_dtype(p + "ffn_up.weight", 22, 2048) == DType::Q4_K);
  }
  const WeightTypes m5 = engine::parse_weight_types("q5_k_m");
  CHECK(m5.matrix_dtype("blk.5.attn_k.weight", 22, 2048) == DType::Q5_K);
  CHECK(m5.matrix_dtype("blk.0.ffn_down.weight", 22, 5632) == DType::Q6_K);
}

TEST_CASE("weight types: the mixes fall back to 32-block types where 256 does not divide the columns") {
  const WeightTypes m = engine::parse_weight_types("q4_k_m");
  CHECK(m.matrix_dtype("blk.3.attn_q.weight", 30, 576) == DType::Q5_0);     // Q4_K -> Q5_0
  CHECK(m.matrix_dtype("output.weight", 30, 576) == DType::Q8_0);           // Q6_K -> Q8_0
  CHECK(m.matrix_dtype("blk.3.ffn_down.weight", 30, 1536) == DType::Q4_K);  // 1536 = 6 * 256
  CHECK(engine::parse_weight_types("q5_k_m").matrix_dtype("blk.3.attn_q.weight", 30, 576) == DType::Q5_1);
  CHECK_THROWS_AS(m.matrix_dtype("blk.3.attn_q.weight", 30, 100), std::invalid_argument);
}

TEST_CASE("weight types: --embedding-dtype sets token_embd alone") {
  WeightTypes m = engine::parse_weight_types("q4_0");
  m.embedding = engine::parse_single_dtype("f32");
  REQUIRE(m.embedding);
  CHECK(m.matrix_dtype("token_embd.weight", 4, 256) == DType::F32);
  CHECK(m.matrix_dtype("output.weight", 4, 256) == DType::Q4_0);
  CHECK_FALSE(engine::parse_single_dtype("q4_k_m"));
}
