#include "server/status.h"

#include <algorithm>
#include <string>

namespace inflight::server {

using nlohmann::json;

json status_json(const ModelContext& model, const engine::EngineStats& stats,
                 const std::vector<engine::StepRecord>& steps, const std::vector<cache::BlockState>& block_states,
                 std::chrono::steady_clock::time_point now) {
  // The block map as one digit per block: compact enough for a poll several times a second.
  std::string map(block_states.size(), '0');
  int count[4] = {0, 0, 0, 0};  // by BlockState
  for (size_t b = 0; b < block_states.size(); ++b) {
    const int s = int(block_states[b]);
    map[b] = char('0' + s);
    ++count[s];
  }
  const int total = int(block_states.size());

  json records = json::array();
  double window_prompt = 0, window_generation = 0, window_steps = 0;
  double window_seconds = 0;  // from the start of the window's oldest step to now
  int second_steps = 0, second_context = 0, second_generation = 0;
  for (const engine::StepRecord& r : steps) {
    const double age = std::chrono::duration<double>(now - r.finished_at).count();
    records.push_back({{"step", r.step},
                       {"age_ms", std::max(0.0, age * 1000.0)},
                       {"duration_ms", r.duration_seconds * 1000.0},
                       {"predicted_ms", r.predicted_seconds * 1000.0},
                       {"context_tokens", r.num_context_tokens},
                       {"generation_tokens", r.num_generation_tokens},
                       {"context_seqs", r.num_context_seqs},
                       {"generation_seqs", r.num_generation_seqs},
                       {"kv_blocks_used", r.num_kv_blocks_used}});
    if (age <= kStatusWindowSeconds) {
      window_seconds = std::max(window_seconds, age + r.duration_seconds);
      window_prompt += r.num_context_tokens;
      window_generation += r.num_generation_tokens;
      window_steps += 1;
    }
    if (age <= 1.0) {
      ++second_steps;
      second_context += r.num_context_tokens;
      second_generation += r.num_generation_tokens;
    }
  }

  json finished = json::object();
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    auto it = stats.finished_by_reason.find(reason);
    finished[reason] = it == stats.finished_by_reason.end() ? 0 : it->second;
  }
  const int used = count[int(cache::BlockState::Used)] + count[int(cache::BlockState::Shared)];
  // NOTE: a rate over the time the recent steps span, so a generation that started 1 s ago is not
  // diluted over the whole window; an idle engine's rates fall to 0 as its steps age out.
  auto rate = [&](double amount) { return window_seconds > 0 ? amount / window_seconds : 0.0; };
  return {
      {"object", "server.status"},
      {"model", model.served_model_name},
      {"device", model.device},
      {"kv_cache_dtype", model.kv_cache_dtype},
      {"kv_block_size", model.kv_block_size},
      {"max_model_len", model.max_model_len},
      {"requests", {{"running", stats.num_running}, {"waiting", stats.num_waiting}}},
      {"kv_cache",
       {{"blocks_total", total},
        {"blocks_used", used},
        {"blocks_free", count[int(cache::BlockState::Free)]},
        {"blocks_cached", count[int(cache::BlockState::Cached)]},
        {"blocks_shared", count[int(cache::BlockState::Shared)]},
        {"usage", total > 0 ? double(used) / total : 0.0},
        {"block_states", map}}},
      {"throughput",
       {{"window_seconds", window_seconds},
        {"prompt_tokens_per_second", rate(window_prompt)},
        {"generation_tokens_per_second", rate(window_generation)},
        {"steps_per_second", rate(window_steps)}}},
      {"last_second", {{"steps", second_steps}, {"context_tokens", second_context}, {"generation_tokens", second_generation}}},
      {"counters",
       {{"steps", stats.num_steps},
        {"prompt_tokens", stats.prompt_tokens},
        {"generation_tokens", stats.generated_tokens},
        {"preemptions", stats.num_preemptions},
        {"prefix_cache_queries", stats.prefix_query_tokens},
        {"prefix_cache_hits", stats.prefix_hit_tokens},
        {"requests_finished", finished}}},
      {"step_budget",
       {{"max_step_ms", stats.max_step_ms},
        {"prefill_order", engine::prefill_order_name(stats.prefill_order)},
        {"fixed_ms", stats.step_cost.fixed_ms},
        {"prefill_token_ms", stats.step_cost.prefill_token_ms},
        {"decode_seq_ms", stats.step_cost.decode_seq_ms},
        {"attention_kpair_ms", stats.step_cost.attention_kpair_ms}}},
      {"steps", records},
  };
}

}  // namespace inflight::server
