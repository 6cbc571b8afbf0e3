// The scheduler alone, without a model: requests are driven step by step (a "sampled" token is appended
// where the step asked for logits). With a step-time budget and an injected step cost, a long prompt is
// split into chunks whose predicted step cost stays under the budget while every decoding stream gets a
// token each step; the minimum chunk keeps a prompt moving under any budget; budget 0 is today's schedule.
// With the short-first prefill order a short prompt behind a long one starts at once, the oldest prompt
// still moves every step, and passing a prompt never costs a preemption that fcfs would not make.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_cost.h"

using namespace inflight;
using engine::Scheduler;
using engine::SchedulerConfig;
using engine::SchedulerOutput;

namespace {

// Requests arriving at given steps, run through a Scheduler until all have generated their tokens.
class SchedulerSim {
 public:
  SchedulerSim(const SchedulerConfig& config, int num_blocks, int block_size = 16)
      : kv_(cache::KvCacheConfig{1, 1, 8, block_size, num_blocks, kernels::KvDType::F32}), scheduler_(config, kv_) {}

  Scheduler& scheduler() { return scheduler_; }
  cache::KvCache& kv() { return kv_; }

  // A request of `num_prompt` tokens generating `max_tokens`, submitted before step `at_step` (0-based).
  void add(int id, int num_prompt, int max_tokens, int at_step = 0) {
    auto r = std::make_unique<engine::RequestState>();
    r->id = uint64_t(id);
    r->request.prompt_ids.assign(size_t(num_prompt), 0);
    for (int i = 0; i < num_prompt; ++i) r->request.prompt_ids[size_t(i)] = 3 + (id * 131 + i * 7) % 500;
    r->request.stop.max_tokens = max_tokens;
    auto root = std::make_unique<engine::Sequence>();
    root->request = r.get();
    root->tokens = r->request.prompt_ids;
    root->table = cache::BlockTable(kv_.config().block_size);
    r->seqs.push_back(std::move(root));
    pending_.push_back({at_step, std::move(r)});
  }

  // One step: admits what arrives now, schedules, "computes" and appends a token where logits come back.
  // False when nothing ran.
  bool step(SchedulerOutput* out) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first > num_steps_) {
        ++it;
        continue;
      }
      it->second->arrival = next_arrival_++;
      scheduler_.add(it->second->seqs[0].get());
      running_[int(it->second->id)] = std::move(it->second);
      it = pending_.erase(it);
    }
    ++num_steps_;
    if (!scheduler_.schedule(out)) return false;
    scheduler_.on_step_done(*out);
    for (const engine::ScheduledSeq& s : out->seqs) {
      if (!s.wants_logits) continue;
      engine::Sequence* seq = s.seq;
      seq->request->forked = true;
      seq->tokens.push_back(7);
      if (seq->num_generated() >= seq->request->request.stop.max_tokens) {
        scheduler_.remove(seq);
        auto it = running_.find(int(seq->request->id));
        finished_.push_back(std::move(it->second));  // kept: `out` still points at it
        running_.erase(it);
      }
    }
    return true;
  }

  bool done() const { return running_.empty() && pending_.empty(); }
  int num_steps() const { return num_steps_; }

 private:
  cache::KvCache kv_;
  Scheduler scheduler_;
  std::vector<std::pair<int, std::unique_ptr<engine::RequestState>>> pending_;
  std::map<int, std::unique_ptr<engine::RequestState>> running_;
  std::vector<std::unique_ptr<engine::RequestState>> finished_;
  int num_steps_ = 0;
  uint64_t next_arrival_ = 0;
};

// "id:tokens id:tokens" of one step, in batch order.
std::string describe(const SchedulerOutput& out) {
  std::ostringstream s;
  for (const engine::ScheduledSeq& q : out.seqs) s << (&q == out.seqs.data() ? "" : " ") << q.seq->request->id << ":" << q.num_tokens;
  return s.str();
}

// The mixed scenario: three short streams decoding, then a long prompt, then another short one.
void add_mixed_requests(SchedulerSim& sim) {
  sim.add(1, 10, 12);
  sim.add(2, 20, 12);
  sim.add(3, 5, 12, 1);
  sim.add(4, 300, 4, 2);
  sim.add(5, 30, 6, 3);
}

// A pool too small for everyone: sequences are preempted and recomputed.
void add_crowded_requests(SchedulerSim& sim) {
  sim.add(1, 30, 20);
  sim.add(2, 40, 20);
  sim.add(3, 20, 30, 1);
  sim.add(4, 50, 5, 2);
}

std::string run_trace(SchedulerSim& sim) {
  std::ostringstream all;
  SchedulerOutput out;
  while (!sim.done() && sim.num_steps() < 200)
    if (sim.step(&out)) all << describe(out) << "\n";
  return all.str();
}

// Today's schedules of the two scenarios (recorded before the step budget existed): one line per step,
// "request:tokens" in batch order.
const char* kMixedTrace =
    "1:10 2:20\n3:5 1:1 2:1\n4:61 1:1 2:1 3:1\n4:61 1:1 2:1 3:1\n4:61 1:1 2:1 3:1\n4:61 1:1 2:1 3:1\n"
    "4:56 5:5 1:1 2:1 3:1\n5:25 1:1 2:1 3:1 4:1\n1:1 2:1 3:1 4:1 5:1\n1:1 2:1 3:1 4:1 5:1\n1:1 2:1 3:1 5:1\n"
    "1:1 2:1 3:1 5:1\n3:1 5:1\n";
const char* kCrowdedTrace =
    "1:30 2:2\n2:31 1:1\n2:7 3:20 4:4 1:1\n1:1 2:1 3:1\n1:1 2:1 3:1\n1:1 2:1 3:1\n1:1 2:1 3:1\n1:1 2:1\n"
    "1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n1:1 2:1\n"
    "1:1\n2:32\n2:25 3:7\n3:18 4:13 2:1\n2:1 3:1\n4:31 3:1\n4:19 3:1\n3:1 4:1\n3:1 4:1\n3:1 4:1\n3:1 4:1\n"
    "3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n3:1\n";

// ms: 2 per step, 0.05 per prompt token, 1 per decoding sequence, 0.01 per thousand query-key pairs.
constexpr engine::StepCost kCost{2.0, 0.05, 1.0, 0.01};

// Runs four decoding streams and, from step 3, a 1000-token prompt, under `max_step_ms`; checks every
// step and returns the long prompt's chunks in order.
std::vector<int> run_long_prompt_beside_streams(double max_step_ms, int min_prefill_chunk) {
  SchedulerSim sim({.max_num_seqs = 16, .max_num_batched_tokens = 2048, .max_step_ms = max_step_ms,
                    .min_prefill_chunk = min_prefill_chunk},
                   256);
  sim.scheduler().set_step_cost(kCost);
  for (int id = 1; id <= 4; ++id) sim.add(id, 8, 400);
  sim.add(9, 1000, 2, 3);
  std::vector<int> chunks;
  int num_prompt_done = 0;
  SchedulerOutput out;
  while (!sim.done() && sim.num_steps() < 1000) {
    REQUIRE(sim.step(&out));
    CAPTURE(sim.num_steps());
    const engine::StepShape shape = engine::step_shape(out.batch);
    CHECK(out.predicted_ms == doctest::Approx(kCost.predict_ms(shape)));
    int num_streams = 0, prompt_tokens = 0;
    for (const engine::ScheduledSeq& q : out.seqs) {
      if (q.seq->request->id == 9) {
        if (num_prompt_done < 1000) prompt_tokens = q.num_tokens;
        continue;
      }
      num_streams += 1;
      if (sim.num_steps() > 1) CHECK(q.num_tokens == 1);  // past its prompt, a stream decodes
    }
    if (sim.num_steps() > 1 && num_prompt_done < 1000) CHECK(num_streams == 4);  // a token every step
    if (prompt_tokens == 0) continue;
    CAPTURE(prompt_tokens);
    chunks.push_back(prompt_tokens);
    num_prompt_done += prompt_tokens;
    // Under the budget, or the minimum chunk when the streams alone use up the budget.
    if (prompt_tokens > min_prefill_chunk) CHECK(out.predicted_ms <= max_step_ms + 1e-9);
    if (out.predicted_ms > max_step_ms) CHECK(prompt_tokens <= min_prefill_chunk);
  }
  CHECK(sim.done());
  CHECK(num_prompt_done == 1000);
  return chunks;
}


// A short prompt (id 10, 64 tokens) arriving behind a long one (id 9, 1000 tokens) while four streams
// decode; checks every step and returns the step (1-based) of the short one's first token.
int first_token_step_of_short_behind_long(engine::PrefillOrder order, double max_step_ms, int max_num_batched_tokens) {
  SchedulerSim sim({.max_num_seqs = 16, .max_num_batched_tokens = max_num_batched_tokens, .max_step_ms = max_step_ms,
                    .prefill_order = order},
                   256);
  sim.scheduler().set_step_cost(kCost);
  for (int id = 1; id <= 4; ++id) sim.add(id, 8, 60);
  sim.add(9, 1000, 2, 2);
  sim.add(10, 64, 2, 3);  // arrives before step 4, behind the long one's first chunk
  int short_first_token = 0, long_first_token = 0;
  SchedulerOutput out;
  while ((short_first_token == 0 || long_first_token == 0) && sim.num_steps() < 200) {
    REQUIRE(sim.step(&out));
    CAPTURE(sim.num_steps());
    CAPTURE(describe(out));
    int num_streams = 0, long_tokens = 0;
    for (const engine::ScheduledSeq& q : out.seqs) {
      const uint64_t id = q.seq->request->id;
      if (id <= 4) {
        num_streams += 1;
        if (sim.num_steps() > 1) CHECK(q.num_tokens == 1);  // past its prompt, a stream decodes
      }
      if (id == 9) long_tokens = q.num_tokens;
      if (q.wants_logits && id == 10 && short_first_token == 0) short_first_token = sim.num_steps();
      if (q.wants_logits && id == 9 && long_first_token == 0) long_first_token = sim.num_steps();
    }
    if (sim.num_steps() > 1) CHECK(num_streams == 4);  // a token every step
    // The long prompt never starves: from its first chunk to its last, at least the minimum chunk a step.
    if (sim.num_steps() >= 3 && long_first_token == 0) CHECK(long_tokens >= 32);
    if (max_step_ms > 0) CHECK(out.predicted_ms <= max_step_ms + 1e-9);
  }
  CHECK(short_first_token > 0);
  CHECK(long_first_token > 0);
  return short_first_token;
}
}  // namespace

TEST_SUITE("scheduler") {
  TEST_CASE("without a step budget (0), the schedule is the token budget's, whatever step cost is set") {
    for (bool with_cost : {false, true}) {
      CAPTURE(with_cost);
      SchedulerSim mixed({.max_num_seqs = 8, .max_num_batched_tokens = 64}, 256);
      SchedulerSim crowded({.max_num_seqs = 8, .max_num_batched_tokens = 32, .enable_prefix_caching = false}, 14, 8);
      if (with_cost) {
        mixed.scheduler().set_step_cost(kCost);
        crowded.scheduler().set_step_cost(kCost);
      }
      add_mixed_requests(mixed);
      add_crowded_requests(crowded);
      CHECK(run_trace(mixed) == kMixedTrace);
      CHECK(run_trace(crowded) == kCrowdedTrace);
      CHECK(crowded.scheduler().counters().preemptions == 4);
    }
  }

  TEST_CASE("a step budget cuts a long prompt into chunks under it while every stream gets a token each step") {
    const std::vector<int> chunks = run_long_prompt_beside_streams(20.0, 32);
    int sum = 0;
    for (int c : chunks) sum += c;
    CHECK(sum == 1000);
    REQUIRE(chunks.size() >= 3);
    // 20 ms - (2 fixed + 4 streams) leaves 14 ms: 272 prompt tokens (13.6 ms + 0.37 ms of attention) at
    // first, fewer as the keys before each chunk grow.
    CHECK(chunks[0] == 272);
    for (size_t i = 1; i + 1 < chunks.size(); ++i) CHECK(chunks[i] <= chunks[i - 1]);
    MESSAGE("chunks of the 1000-token prompt: " << chunks.size());
  }

  TEST_CASE("a budget the streams alone exceed still moves the prompt by the minimum chunk each step") {
    const std::vector<int> chunks = run_long_prompt_beside_streams(3.0, 32);
    REQUIRE(chunks.size() == 32);  // ceil(1000 / 32)
    for (size_t i = 0; i + 1 < chunks.size(); ++i) CHECK(chunks[i] == 32);
    CHECK(chunks.back() == 1000 - 31 * 32);
  }

  TEST_CASE("a step with no decoding stream fills the token budget: there is no inter-token gap to keep") {
    SchedulerSim sim({.max_num_seqs = 16, .max_num_batched_tokens = 512, .max_step_ms = 5.0}, 256);
    sim.scheduler().set_step_cost(kCost);
    sim.add(1, 1000, 2);
    SchedulerOutput out;
    REQUIRE(sim.step(&out));
    CHECK(describe(out) == "1:512");
    REQUIRE(sim.step(&out));
    CHECK(describe(out) == "1:488");
    REQUIRE(sim.step(&out));  // decoding now: one token
    CHECK(describe(out) == "1:1");
  }

  TEST_CASE("with an unknown step cost (nothing measured yet) the budget does not cut prompts") {
    SchedulerSim sim({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_step_ms = 1.0}, 256);
    add_mixed_requests(sim);
    CHECK(run_trace(sim) == kMixedTrace);
  }

  TEST_CASE("short-first: a short prompt behind a long one gets its first token in its first step; fcfs makes it wait") {
    // A step-time budget (20 ms: about 270 prompt tokens beside the streams), or the token budget alone.
    for (auto [max_step_ms, max_tokens] : {std::pair{20.0, 2048}, std::pair{0.0, 256}}) {
      CAPTURE(max_step_ms);
      const int fcfs = first_token_step_of_short_behind_long(engine::PrefillOrder::kFcfs, max_step_ms, max_tokens);
      const int short_first =
          first_token_step_of_short_behind_long(engine::PrefillOrder::kShortFirst, max_step_ms, max_tokens);
      MESSAGE("first token of the short prompt (arrives at step 4): fcfs step " << fcfs << ", short-first step "
                                                                                << short_first);
      CHECK(short_first == 4);
      CHECK(fcfs >= 7);  // behind the long prompt's remaining ~730 tokens: at least 3 more steps
    }
  }

  TEST_CASE("short-first: under a steady stream of short prompts the oldest prompt gets the minimum chunk every step") {
    SchedulerSim sim({.max_num_seqs = 32, .max_num_batched_tokens = 2048, .max_step_ms = 20.0,
                      .prefill_order = engine::PrefillOrder::kShortFirst},
                     1024);
    sim.scheduler().set_step_cost(kCost);
    for (int id = 1; id <= 4; ++id) sim.add(id, 8, 80);
    sim.add(9, 1000, 2, 2);
    // Three 90-token prompts a step from step 3 on, more than the budget beside the streams can prefill.
    int next_id = 100;
    for (int step = 2; step < 60; ++step)
      for (int k = 0; k < 3; ++k) sim.add(next_id++, 90, 1, step);
    int long_done = 0, long_chunks = 0, num_short_chunks = 0;
    SchedulerOutput out;
    while (long_done == 0 && sim.num_steps() < 200) {
      REQUIRE(sim.step(&out));
      CAPTURE(sim.num_steps());
      CAPTURE(describe(out));
      int num_streams = 0, long_tokens = 0;
      for (const engine::ScheduledSeq& q : out.seqs) {
        const uint64_t id = q.seq->request->id;
        if (id <= 4) num_streams += 1;
        if (id >= 100) num_short_chunks += 1;
        if (id != 9) continue;
        long_tokens = q.num_tokens;
        if (q.wants_logits) long_done = sim.num_steps();
      }
      if (sim.num_steps() > 1) CHECK(num_streams == 4);
      CHECK(out.predicted_ms <= 20.0 + 1e-9);  // the minimum chunk is set aside, never added on top
      if (sim.num_steps() >= 3 && long_done == 0) CHECK(long_tokens >= 32);
      if (long_tokens > 0) ++long_chunks;
    }
    MESSAGE("the long prompt: " << long_chunks << " chunks, done at step " << long_done << "; " << num_short_chunks
                                << " short prompt chunks meanwhile");
    CHECK(long_done > 0);
    CHECK(long_chunks <= 32);  // ceil(1000 / 32)
    CHECK(num_short_chunks >= 2 * long_chunks);  // the short ones went first
  }

  TEST_CASE("short-first: a short prompt passes a long one only when the pool holds both to their end") {
    // 16-token blocks: the long one needs 13 blocks to finish (200 + 8 tokens), the short one 2 (20 + 4).
    for (int num_blocks : {15, 14}) {
      CAPTURE(num_blocks);
      uint64_t preemptions[2] = {};
      for (auto order : {engine::PrefillOrder::kFcfs, engine::PrefillOrder::kShortFirst}) {
        SchedulerSim sim({.max_num_seqs = 8, .max_num_batched_tokens = 64, .prefill_order = order}, num_blocks);
        sim.add(1, 200, 8);
        sim.add(2, 20, 4);
        SchedulerOutput out;
        REQUIRE(sim.step(&out));
        // Room for both: the short one first, the long one keeps the rest of the token budget; else fcfs.
        if (order == engine::PrefillOrder::kFcfs) CHECK(describe(out) == "1:64");
        else CHECK(describe(out) == (num_blocks == 15 ? "2:20 1:44" : "1:64"));
        while (!sim.done() && sim.num_steps() < 200) sim.step(&out);
        CHECK(sim.done());
        CHECK(sim.kv().pool().num_free() == num_blocks);
        preemptions[order == engine::PrefillOrder::kShortFirst] = sim.scheduler().counters().preemptions;
      }
      MESSAGE("preemptions with " << num_blocks << " blocks: fcfs " << preemptions[0] << ", short-first "
                                  << preemptions[1]);
      CHECK(preemptions[1] <= preemptions[0]);
      if (num_blocks == 15) CHECK(preemptions[1] == 0);
    }
  }

  TEST_CASE("short-first under block pressure: everyone finishes, with no more preemptions than fcfs") {
    for (auto order : {engine::PrefillOrder::kFcfs, engine::PrefillOrder::kShortFirst}) {
      CAPTURE(engine::prefill_order_name(order));
      SchedulerSim crowded(
          {.max_num_seqs = 8, .max_num_batched_tokens = 32, .enable_prefix_caching = false, .prefill_order = order}, 14, 8);
      add_crowded_requests(crowded);
      run_trace(crowded);
      CHECK(crowded.done());
      CHECK(crowded.scheduler().counters().preemptions <= 4);  // fcfs: 4
      CHECK(crowded.kv().pool().num_free() == 14);
    }
  }
}
