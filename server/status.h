// GET /v1/status: the live state of the engine for the web page's server view: requests, the KV cache
// with one state per block, the recent steps from the engine's ring buffer, throughput and counters.
//
// {"object": "server.status", "model", "device", "kv_cache_dtype", "kv_block_size", "max_model_len",
//  "requests": {"running", "waiting"},
//  "kv_cache": {"blocks_total", "blocks_used", "blocks_free", "blocks_cached", "blocks_shared", "usage",
//               "block_states": "0012..." (one character per block: 0 free, 1 in use, 2 cached prefix,
//                                          3 shared by several sequences)},
//  "throughput": {"window_seconds", "prompt_tokens_per_second", "generation_tokens_per_second",
//                 "steps_per_second"},
//  "last_second": {"steps", "context_tokens", "generation_tokens"},
//  "counters": {"steps", "prompt_tokens", "generation_tokens", "preemptions", "prefix_cache_queries",
//               "prefix_cache_hits", "requests_finished": {"stop", "length", "cancelled", "error"}},
//  "step_budget": {"max_step_ms", "prefill_order", "fixed_ms", "prefill_token_ms", "decode_seq_ms", "attention_kpair_ms"}
//                 (the budget and the step cost the scheduler plans with),
//  "steps": [{"step", "age_ms", "duration_ms", "predicted_ms", "context_tokens", "generation_tokens",
//             "context_seqs", "generation_seqs", "kv_blocks_used"}, ...] (oldest first)}
#pragma once
#include <chrono>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/block_pool.h"
#include "engine/engine.h"
#include "server/server_state.h"

namespace inflight::server {

// Rates are over the steps that finished in the last kStatusWindowSeconds (of the engine's last
// kStepLogCapacity), divided by the time from the oldest one's start to now.
constexpr double kStatusWindowSeconds = 5.0;

nlohmann::json status_json(const ModelContext& model, const engine::EngineStats& stats,
                           const std::vector<engine::StepRecord>& steps,
                           const std::vector<cache::BlockState>& block_states,
                           std::chrono::steady_clock::time_point now);

}  // namespace inflight::server
