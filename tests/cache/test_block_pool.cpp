#include <doctest/doctest.h>

#include "cache/block_pool.h"
#include "cache/kv_cache.h"

using namespace inflight::cache;

TEST_SUITE("block_pool") {
  TEST_CASE("allocate hands out distinct blocks and refuses when short") {
    BlockPool pool(4);
    std::vector<int32_t> got;
    REQUIRE(pool.allocate(3, &got));
    CHECK(got == std::vector<int32_t>{0, 1, 2});
    CHECK(pool.num_free() == 1);
    CHECK_FALSE(pool.allocate(2, &got));
    CHECK(got.size() == 3);  // nothing taken on failure
    CHECK(pool.num_free() == 1);
  }

  TEST_CASE("reference counts: a block is free only when its last owner releases it") {
    BlockPool pool(2);
    std::vector<int32_t> got;
    REQUIRE(pool.allocate(1, &got));
    pool.retain(got[0]);
    CHECK(pool.ref_count(got[0]) == 2);
    pool.release(got[0]);
    CHECK(pool.num_free() == 1);
    pool.release(got[0]);
    CHECK(pool.num_free() == 2);
  }

  TEST_CASE("block table grows by whole blocks and maps positions to slots") {
    BlockPool pool(8);
    BlockTable t(4);
    REQUIRE(t.reserve(pool, 5));
    CHECK(t.num_blocks() == 2);
    CHECK(t.capacity() == 8);
    REQUIRE(t.reserve(pool, 8));
    CHECK(t.num_blocks() == 2);
    CHECK(t.slot(0) == t.blocks()[0] * 4);
    CHECK(t.slot(6) == t.blocks()[1] * 4 + 2);
    CHECK_FALSE(t.reserve(pool, 8 * 4 + 1));
    CHECK(t.num_blocks() == 2);

    BlockTable f = t.fork(pool);
    CHECK(pool.ref_count(t.blocks()[0]) == 2);
    t.release(pool);
    CHECK(pool.num_free() == 6);
    f.release(pool);
    CHECK(pool.num_free() == 8);
  }

  TEST_CASE("block states: free, used, shared by forks, cached prefix after release, free again once evicted") {
    using S = BlockState;
    BlockPool pool(4);
    std::vector<BlockState> states;
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Free, S::Free, S::Free, S::Free});

    BlockTable prompt(2);
    REQUIRE(prompt.reserve(pool, 3));  // blocks 0 and 1
    const std::vector<int32_t> tokens = {7, 8};
    pool.cache_block(0, hash_block(0, tokens), tokens);  // block 0 holds a full prompt block
    BlockTable sample = prompt.fork(pool);
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Shared, S::Shared, S::Free, S::Free});

    sample.release(pool);
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Used, S::Used, S::Free, S::Free});

    prompt.release(pool);  // block 0 stays findable by its hash; block 1 was never cached
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Cached, S::Free, S::Free, S::Free});
    CHECK(pool.num_used() == 0);

    std::vector<int32_t> got;
    REQUIRE(pool.allocate(4, &got));  // the last block handed out evicts the cached one
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Used, S::Used, S::Used, S::Used});
    for (int32_t b : got) pool.release(b);
    pool.block_states(&states);
    CHECK(states == std::vector<S>{S::Free, S::Free, S::Free, S::Free});
  }

  TEST_CASE("kv cache sizes its storage per layer, block, head and dtype") {
    KvCacheConfig c{3, 2, 8, 16, 10, inflight::kernels::KvDType::F16};
    KvCache kv(c);
    CHECK(kv.bytes_per_block() == 3 * 2 * 2 * 16 * 8 * 2);
    CHECK(kv.total_bytes() == kv.bytes_per_block() * 10);
    CHECK(blocks_for_bytes(c, kv.bytes_per_block() * 7 + 1) == 7);
    const auto v0 = kv.layer_view(0), v1 = kv.layer_view(1);
    CHECK(static_cast<uint8_t*>(v1.data) - static_cast<uint8_t*>(v0.data) == kv.total_bytes() / 3);
  }
}
