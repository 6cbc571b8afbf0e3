#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace inflight::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

namespace {

// Whether sampling `token` ends a choice: EOS (unless ignored) or a stop token id.
bool ends_choice(const StopConditions& stop, int32_t token, int32_t eos) {
  return (!stop.ignore_eos && token == eos) ||
         std::find(stop.stop_token_ids.begin(), stop.stop_token_ids.end(), token) != stop.stop_token_ids.end();
}

// log_softmax of one row of logits, into `out`.
void log_softmax(const float* logits, int vocab, std::vector<float>& out) {
  out.resize(size_t(vocab));
  const float max = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i] - max));
  const float lse = max + float(std::log(sum));
  for (int i = 0; i < vocab; ++i) out[size_t(i)] = logits[i] - lse;
}

std::invalid_argument bad_request(const std::string& what) { return std::invalid_argument(what); }

// The text of a beam's generated tokens: decoded after the prompt, less the prompt's `prompt_chars`
// (so the first word reads as it does after the prompt).
std::string beam_text(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt, size_t prompt_chars,
                      const std::vector<int32_t>& generated) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), generated.begin(), generated.end());
  std::string text = tokenizer.decode(all);
  return text.size() > prompt_chars ? text.substr(prompt_chars) : std::string();
}

// Where the first of `stops` starts in text; npos when none occurs.
size_t first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t first = std::string::npos;
  for (const std::string& s : stops) first = std::min(first, text.find(s));
  return first;
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer& tokenizer, cache::KvCache& kv, EngineConfig config)
    : model_(model),
      tokenizer_(tokenizer),
      kv_(kv),
      config_(config),
      scheduler_({.max_num_seqs = config.max_num_seqs,
                  .max_num_batched_tokens = config.max_num_batched_tokens,
                  .enable_prefix_caching = config.enable_prefix_caching,
                  .max_step_ms = config.max_step_ms,
                  .prefill_order = config.prefill_order},
                 kv) {
  if (config_.max_model_len <= 0 || config_.max_model_len > model.config().max_seq_len)
    config_.max_model_len = model.config().max_seq_len;
  stats_.kv_blocks_total = kv.config().num_blocks;
  block_states_.assign(size_t(kv.config().num_blocks), cache::BlockState::Free);
  if (config_.fixed_step_cost) scheduler_.set_step_cost(*config_.fixed_step_cost);
  stats_.step_cost = scheduler_.step_cost();
  stats_.max_step_ms = config_.max_step_ms;
  stats_.prefill_order = config_.prefill_order;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Engine::submit(Request request) {
  const ModelConfig& c = model_.config();
  const int num_prompt = int(request.prompt_ids.size());
  if (num_prompt == 0) throw bad_request("the prompt is empty");
  for (int32_t id : request.prompt_ids)
    if (id < 0 || id >= c.vocab_size)
      throw bad_request("prompt token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(c.vocab_size) + ")");
  if (num_prompt >= config_.max_model_len)
    throw bad_request("the prompt has " + std::to_string(num_prompt) + " tokens, but this model's context is " +
                      std::to_string(config_.max_model_len) + " tokens (prompt + at least one generated token)");
  StopConditions& stop = request.stop;
  if (stop.max_tokens < 1) throw bad_request("max_tokens must be at least 1");
  if (stop.min_tokens < 0 || stop.min_tokens > stop.max_tokens)
    throw bad_request("min_tokens must be in [0, max_tokens]");
  if (request.n < 1 || request.n > 128) throw bad_request("n must be in [1, 128]");
  if (request.beam_width < 1 || request.beam_width > 8) throw bad_request("beam width must be in [1, 8]");
  if (request.beam_width > 1 && request.n > request.beam_width)
    throw bad_request("n must not exceed the beam width for beam search");
  if (request.logprobs < -1 || request.logprobs > 20) throw bad_request("logprobs must be in [0, 20]");
  if (const std::string err = validate(request.sampling); !err.empty()) throw bad_request(err);
  if (request.grammar && request.beam_width > 1)
    throw bad_request("structured output (a grammar, a JSON schema, a regex or a choice) does not work with beam search");
  for (int32_t id : stop.stop_token_ids)
    if (id < 0 || id >= c.vocab_size) throw bad_request("stop_token_ids: " + std::to_string(id) + " is outside the vocabulary");

  // Fits / later / never: a request that could not run even alone in the whole cache is refused.
  const int64_t max_len = std::min<int64_t>(int64_t(num_prompt) + stop.max_tokens, config_.max_model_len);
  const int num_blocks = kv_.config().num_blocks;
  if (request.beam_width > 1) {
    const int64_t need = scheduler_.beam_blocks_needed(num_prompt, int(max_len - num_prompt), request.beam_width);
    if (need > num_blocks)
      throw bad_request("beam search of width " + std::to_string(request.beam_width) + " needs up to " +
                        std::to_string(need) + " KV cache blocks; the cache has " + std::to_string(num_blocks));
  } else if (!scheduler_.can_ever_fit(max_len)) {
    throw bad_request("the prompt and max_tokens need " + std::to_string(max_len) + " tokens of KV cache; the cache holds " +
                      std::to_string(int64_t(num_blocks) * kv_.config().block_size));
  }

  auto r = std::make_unique<RequestState>();
  r->request = std::move(request);
  auto root = std::make_unique<Sequence>();
  root->request = r.get();
  root->tokens = r->request.prompt_ids;
  root->table = cache::BlockTable(kv_.config().block_size);
  if (r->request.grammar) root->matcher.emplace(r->request.grammar, grammar_vocab());
  r->seqs.push_back(std::move(root));
  r->usage.prompt_tokens = num_prompt;
  r->submitted_at = std::chrono::steady_clock::now();

  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw QueueFullError("the engine is shutting down");
    if (dead_) throw EngineDeadError("the engine thread has stopped");
    if (num_queued_ >= config_.max_queue)
      throw QueueFullError("the waiting queue is full (" + std::to_string(config_.max_queue) + " requests)");
    id = next_id_++;
    r->id = id;
    ++num_queued_;
    incoming_.push_back(std::move(r));
  }
  cv_.notify_one();
  return id;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<cache::BlockState> Engine::block_states() const {
  std::lock_guard<std::mutex> lock(block_states_mu_);
  return block_states_;
}

void Engine::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.kv_blocks_peak = 0;
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !incoming_.empty() || !cancels_.empty() || !requests_.empty(); });
      if (stopping_) break;
    }
    try {
      step();
    } catch (const EngineFault& e) {
      spdlog::critical("engine fault, the engine thread stops: {}", e.what());
      fail_all(std::string("engine fault: ") + e.what());
      return;
    } catch (const std::exception& e) {
      // A failed step fails the requests in it; the engine goes on with new ones.
      spdlog::error("engine step failed: {}", e.what());
      std::vector<RequestState*> all;
      for (auto& [id, r] : requests_) all.push_back(r.get());
      for (RequestState* r : all) {
        emit(r, {ErrorEvent{std::string("internal error: ") + e.what()}, true});
        for (auto& s : r->seqs) scheduler_.remove(s.get());
        requests_.erase(r->id);
      }
      publish_block_states(/*force=*/true);
    }
  }
  // Shutdown: every request still here ends as cancelled.
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : incoming_) requests_.emplace(r->id, std::move(r));
    incoming_.clear();
  }
  std::vector<RequestState*> left;
  for (auto& [id, r] : requests_) left.push_back(r.get());
  for (RequestState* r : left) finish_request(r, FinishReason::Cancelled);
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;
  }
  alive_ = false;
}

void Engine::fail_all(const std::string& message) {
  // NOTE: the scheduler and the KV pool may be mid-step and inconsistent: only the requests are touched.
  std::vector<std::unique_ptr<RequestState>> incoming;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;  // from here submit() refuses, so no request can arrive unanswered
    incoming.swap(incoming_);
    num_queued_ = 0;
  }
  for (auto& r : incoming) requests_.emplace(r->id, std::move(r));
  std::map<uint64_t, std::unique_ptr<RequestState>> failed;
  failed.swap(requests_);
  {
    // The gauges say so before any request hears of it.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.finished_by_reason["error"] += failed.size();
    publish_gauges();
  }
  alive_ = false;
  for (auto& [id, r] : failed) emit(r.get(), {ErrorEvent{message}, true});
}

void Engine::admit_and_cancel() {
  std::vector<std::unique_ptr<RequestState>> incoming;
  std::vector<uint64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    incoming.swap(incoming_);
    cancels.swap(cancels_);
  }
  for (auto& r : incoming) {
    r->arrival = next_arrival_++;
    Sequence* root = r->seqs[0].get();
    const uint64_t id = r->id;
    requests_.emplace(id, std::move(r));
    scheduler_.add(root);
  }
  for (uint64_t id : cancels) {
    auto it = requests_.find(id);
    if (it != requests_.end()) finish_request(it->second.get(), FinishReason::Cancelled);
  }
}

void Engine::step() {
  const auto started = std::chrono::steady_clock::now();
  admit_and_cancel();
  SchedulerOutput out;
  if (!scheduler_.schedule(&out)) {
    // Nothing to run, e.g. the last request was just cancelled: its blocks are free now, and the gauges
    // say so within this step.
    {
      std::lock_guard<std::mutex> lock(mu_);
      publish_gauges();
    }
    publish_block_states(/*force=*/true);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.kv_blocks_peak = std::max(stats_.kv_blocks_peak, kv_.pool().num_used());
    if (config_.debug_fault_at_step > 0 && stats_.num_steps + 1 == config_.debug_fault_at_step)
      throw EngineFault("the test hook's fault at step " + std::to_string(config_.debug_fault_at_step));
  }

  uint64_t prompt_tokens = 0;
  for (const ScheduledSeq& s : out.seqs) {
    RequestState* r = s.seq->request;
    if (!r->started) {
      r->started = true;
      r->queue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r->submitted_at).count();
      std::lock_guard<std::mutex> lock(mu_);
      --num_queued_;
    }
    prompt_tokens += uint64_t(std::max(0, std::min(s.seq->num_computed + s.num_tokens, r->num_prompt()) - s.seq->num_computed));
  }
  const int vocab = model_.config().vocab_size;
  logits_.resize(out.batch.logits_rows.size() * size_t(vocab));
  model_.forward(out.batch, kv_, logits_.data());
  scheduler_.on_step_done(out);
  process_outputs(out);
  // The whole step (schedule -> forward -> sample -> emit) is what a decoding stream waits between tokens.
  step_cost_model_.observe(step_shape(out.batch),
                           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  if (!config_.fixed_step_cost) scheduler_.set_step_cost(step_cost_model_.cost());

  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.num_steps++;
    stats_.prompt_tokens += prompt_tokens;
    publish_gauges();
    stats_.num_preemptions = scheduler_.counters().preemptions;
    stats_.prefix_query_tokens = scheduler_.counters().prefix_query_tokens;
    stats_.prefix_hit_tokens = scheduler_.counters().prefix_hit_tokens;
    stats_.step_cost = scheduler_.step_cost();
  }
  record_step(out, started);
  publish_block_states(/*force=*/requests_.empty());
  if (config_.debug_step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(config_.debug_step_delay_ms));
}

void Engine::record_step(const SchedulerOutput& out, std::chrono::steady_clock::time_point started) {
  const ScheduledBatch& b = out.batch;
  StepRecord r;
  r.finished_at = std::chrono::steady_clock::now();
  r.step = stats_.num_steps;  // written by this thread only
  r.num_context_seqs = b.num_context_seqs;
  r.num_generation_seqs = b.num_seqs() - b.num_context_seqs;
  r.num_context_tokens = b.q_start[size_t(b.num_context_seqs)];  // context sequences come first
  r.num_generation_tokens = b.num_tokens() - r.num_context_tokens;
  r.num_kv_blocks_used = kv_.pool().num_used();
  r.duration_seconds = std::chrono::duration<double>(r.finished_at - started).count();
  r.predicted_seconds = out.predicted_ms / 1000.0;
  step_log_.record(r);
}

void Engine::publish_block_states(bool force) {
  // NOTE: O(num_blocks) bytes, so at most every 100 ms while busy; always when going idle, so a view
  // of an idle engine is exact.
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - block_states_at_ < std::chrono::milliseconds(100)) return;
  block_states_at_ = now;
  kv_.pool().block_states(&block_states_next_);
  std::lock_guard<std::mutex> lock(block_states_mu_);
  block_states_.swap(block_states_next_);
}

void Engine::publish_gauges() {
  int running = 0;
  for (auto& [id, r] : requests_) running += r->started;
  stats_.num_running = running;
  stats_.num_waiting = int(requests_.size()) - running + int(incoming_.size());
  stats_.kv_blocks_used = kv_.pool().num_used();
}

void Engine::process_outputs(const SchedulerOutput& out) {
  const int vocab = model_.config().vocab_size;
  // Beam rows are gathered per request (beams of a request are consecutive, in index order).
  std::vector<std::pair<RequestState*, std::vector<const float*>>> beam_rows;
  for (size_t row = 0; row < out.logits_owner.size(); ++row) {
    Sequence* seq = out.seqs[size_t(out.logits_owner[row])].seq;
    RequestState* r = seq->request;
    const float* logits = logits_.data() + row * size_t(vocab);
    if (r->is_beam()) {
      if (beam_rows.empty() || beam_rows.back().first != r) beam_rows.push_back({r, {}});
      beam_rows.back().second.push_back(logits);
      continue;
    }
    if (!r->forked) fork(r);  // the prompt is computed: n samples share its blocks from here
    if (seq == r->seqs[0].get() && seq->num_generated() == 0) {
      // The root's first logits serve every sample.
      for (auto& s : r->seqs)
        if (!s->finished) sample_sequence(s.get(), logits);
    } else if (!seq->finished) {
      sample_sequence(seq, logits);
    }
  }
  for (auto& [r, rows] : beam_rows) step_beams(r, rows);
  // Requests whose every choice has finished are gone.
  for (auto it = requests_.begin(); it != requests_.end();) {
    RequestState* r = it->second.get();
    const bool done = r->num_finished >= r->num_choices();
    it = done ? requests_.erase(it) : std::next(it);
  }
}

void Engine::fork(RequestState* r) {
  r->forked = true;
  Sequence* root = r->seqs[0].get();
  const SamplingParams& sp = r->request.sampling;
  for (int i = 0; i < r->request.n; ++i) {
    Sequence* s = root;
    if (i > 0) {
      r->seqs.push_back(std::make_unique<Sequence>());
      s = r->seqs.back().get();
      s->request = r;
      s->index = i;
      s->tokens = root->tokens;
      s->num_computed = root->num_computed;
      s->table = root->table.fork(kv_.pool());
      s->block_hashes = root->block_hashes;
      s->num_cached_blocks = root->num_cached_blocks;
      s->matcher = root->matcher;
      scheduler_.add_running_after(root, s);
    }
    SamplingParams p = sp;
    if (p.seed) p.seed = *p.seed + uint64_t(i);  // each sample its own stream
    s->sampler = std::make_unique<Sampler>(p);
    s->detokenizer.emplace(tokenizer_, r->request.prompt_ids);
    s->stop_checker = StopChecker(r->request.stop.stop);
  }
}

void Engine::sample_sequence(Sequence* seq, const float* logits) {
  RequestState* r = seq->request;
  const Request& req = r->request;
  const int vocab = model_.config().vocab_size;
  const int32_t eos = model_.config().eos_id;
  std::span<const float> l(logits, size_t(vocab));
  // Before min_tokens, the end tokens cannot be chosen (in a copy: the row may serve other samples).
  if (seq->num_generated() < req.stop.min_tokens) {
    masked_row_.assign(logits, logits + vocab);
    if (!req.stop.ignore_eos && eos >= 0 && eos < vocab) masked_row_[size_t(eos)] = -INFINITY;
    for (int32_t id : req.stop.stop_token_ids) masked_row_[size_t(id)] = -INFINITY;
    l = masked_row_;
  }
  std::span<const int32_t> prompt(seq->tokens.data(), size_t(r->num_prompt()));
  std::span<const int32_t> output(seq->tokens.data() + r->num_prompt(), size_t(seq->num_generated()));
  int32_t token = -1;
  const auto grammar_start = std::chrono::steady_clock::now();
  if (seq->matcher) {
    // Sample first and mask only when the grammar refuses the choice (llama.cpp's fast path): the same
    // distribution as masking first wherever sampling does not truncate it (greedy, or no top-k / top-p /
    // min-p), since the refused mass then goes to the allowed tokens in proportion. Logprobs are of the
    // masked row, so they always mask first.
    const SamplingParams& sp = req.sampling;
    const bool truncates = sp.temperature != 0.0f && (sp.top_k > 0 || sp.top_p < 1.0f || sp.min_p > 0.0f);
    if (req.logprobs < 0 && !truncates) {
      token = seq->sampler->sample(l, prompt, output);
      if (!grammar_allows(*seq, token)) token = -1;
    }
    if (token < 0) {
      if (mask_grammar(*seq, l) == 0) {
        // Complete, and no end token may come (ignore_eos, min_tokens): the answer is whole. Otherwise no
        // token of the vocabulary continues the grammar: a dead end, never a silent stop.
        const bool complete = seq->matcher->can_end();
        if (!complete) spdlog::error("request {}: no token of the vocabulary continues its grammar", r->id);
        std::string tail = seq->stop_checker.push(seq->detokenizer->flush());
        tail += seq->stop_checker.flush();
        finish_sequence(seq, complete ? FinishReason::Stop : FinishReason::Error, std::move(tail));
        return;
      }
      l = masked_row_;
      token = seq->sampler->sample(l, prompt, output);
    }
  } else {
    token = seq->sampler->sample(l, prompt, output);
  }
  const bool end_token = ends_choice(req.stop, token, eos);
  if (seq->matcher && !end_token && !seq->matcher->accept_token(token)) {  // a broken invariant of the mask
    spdlog::error("request {}: sampled token {}, which its grammar refuses", r->id, token);
    finish_sequence(seq, FinishReason::Error);
    return;
  }
  if (seq->matcher && config_.observe_grammar_time)
    config_.observe_grammar_time(std::chrono::duration<double>(std::chrono::steady_clock::now() - grammar_start).count());
  seq->tokens.push_back(token);
  r->usage.completion_tokens++;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.generated_tokens++;
  }

  TokenEvent ev;
  ev.index = seq->index;
  ev.token_id = token;
  if (req.logprobs >= 0) {
    // With a grammar, of the masked row: the alternatives are tokens the grammar allowed.
    std::vector<float> lp;
    log_softmax(seq->matcher ? l.data() : logits, vocab, lp);
    ev.logprob = lp[size_t(token)];
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) ids[size_t(i)] = i;
    const size_t k = std::min<size_t>(size_t(req.logprobs), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + int64_t(k), ids.end(),
                      [&](int32_t a, int32_t b) { return lp[size_t(a)] > lp[size_t(b)] || (lp[size_t(a)] == lp[size_t(b)] && a < b); });
    for (size_t i = 0; i < k; ++i)
      if (std::isfinite(lp[size_t(ids[i])])) ev.top_logprobs.push_back({ids[i], lp[size_t(ids[i])]});
  }

  if (end_token) {
    // The end token gives no text; what was held back is final now.
    std::string tail = seq->stop_checker.push(seq->detokenizer->flush());
    tail += seq->stop_checker.flush();
    ev.text = {};
    emit(r, {ev, false});
    finish_sequence(seq, FinishReason::Stop, std::move(tail));
    return;
  }
  ev.text = seq->stop_checker.push(seq->detokenizer->push(token));
  emit(r, {ev, false});
  if (seq->stop_checker.stopped()) {
    finish_sequence(seq, FinishReason::Stop);
  } else if (seq->num_generated() >= req.stop.max_tokens || int(seq->tokens.size()) >= config_.max_model_len) {
    std::string tail = seq->stop_checker.push(seq->detokenizer->flush());
    if (seq->stop_checker.stopped()) {
      finish_sequence(seq, FinishReason::Stop, std::move(tail));
      return;
    }
    tail += seq->stop_checker.flush();
    finish_sequence(seq, FinishReason::Length, std::move(tail));
  }
}

std::shared_ptr<const grammar::TokenVocab> Engine::grammar_vocab() {
  std::call_once(grammar_vocab_once_, [this] { grammar_vocab_ = std::make_shared<grammar::TokenVocab>(tokenizer_); });
  return grammar_vocab_;
}

bool Engine::grammar_allows(const Sequence& seq, int32_t token) const {
  const int32_t eos = model_.config().eos_id;
  if (ends_choice(seq.request->request.stop, token, eos)) return seq.matcher->can_end();
  return token != eos && token < seq.matcher->vocab().size() && seq.matcher->allows(token);
}

int Engine::mask_grammar(const Sequence& seq, std::span<const float> logits) {
  const int vocab = int(logits.size());
  const grammar::Matcher& m = *seq.matcher;
  const int matcher_vocab = std::min(vocab, m.vocab().size());  // a padded embedding's extra rows: never
  grammar_mask_.assign(size_t(m.vocab().size() + 31) / 32, 0);
  m.fill_mask(grammar_mask_);
  if (masked_row_.data() != logits.data()) masked_row_.assign(logits.begin(), logits.end());
  const StopConditions& stop = seq.request->request.stop;
  const int32_t eos = model_.config().eos_id;
  int num_allowed = 0;
  for (int t = 0; t < vocab; ++t) {
    const bool allowed = t < matcher_vocab && t != eos && ((grammar_mask_[size_t(t) / 32] >> (t % 32)) & 1);
    if (allowed) ++num_allowed;
    else masked_row_[size_t(t)] = -INFINITY;
  }
  if (m.can_end()) {  // the end tokens, where min_tokens has not masked them
    auto allow_end = [&](int32_t id) {
      if (id < 0 || id >= vocab || logits[size_t(id)] == -INFINITY) return;
      if (masked_row_[size_t(id)] == -INFINITY) ++num_allowed;
      masked_row_[size_t(id)] = logits[size_t(id)];
    };
    if (!stop.ignore_eos) allow_end(eos);
    for (int32_t id : stop.stop_token_ids) allow_end(id);
  }
  return num_allowed;
}

void Engine::step_beams(RequestState* r, const std::vector<const float*>& rows) {
  const Request& req = r->request;
  const ModelConfig& c = model_.config();
  const int vocab = c.vocab_size;
  if (!r->beam) {
    BeamParams p;
    p.width = req.beam_width;
    p.length_penalty = req.length_penalty;
    p.early_stopping = req.early_stopping;
    p.num_prompt = r->num_prompt();
    p.max_tokens = std::min(req.stop.max_tokens, config_.max_model_len - r->num_prompt());
    p.min_tokens = req.stop.min_tokens;
    p.end_ids = req.stop.stop_token_ids;
    if (!req.stop.ignore_eos) p.end_ids.push_back(c.eos_id);
    if (!req.stop.stop.empty()) {
      const size_t prompt_chars = tokenizer_.decode(req.prompt_ids).size();
      p.ends_text = [this, &req, prompt_chars](const std::vector<int32_t>& generated) {
        return first_stop(beam_text(tokenizer_, req.prompt_ids, prompt_chars, generated), req.stop.stop) !=
               std::string::npos;
      };
    }
    r->beam = std::make_unique<BeamSearch>(std::move(p));
  }
  const int num_live = int(rows.size());
  std::vector<float> logprobs(size_t(num_live) * vocab), row_lp;
  std::vector<double> cumulative(static_cast<size_t>(num_live));
  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(num_live));
  std::vector<const std::vector<int32_t>*> generated_ptrs;
  for (int b = 0; b < num_live; ++b) {
    log_softmax(rows[size_t(b)], vocab, row_lp);
    std::copy(row_lp.begin(), row_lp.end(), logprobs.begin() + int64_t(b) * vocab);
    const Sequence* s = r->seqs[size_t(b)].get();
    cumulative[size_t(b)] = s->cumulative_logprob;
    generated[size_t(b)].assign(s->tokens.begin() + r->num_prompt(), s->tokens.end());
    generated_ptrs.push_back(&generated[size_t(b)]);
  }
  const std::vector<BeamCandidate> next = r->beam->step(logprobs, vocab, cumulative, generated_ptrs);

  if (r->beam->done()) {
    const std::vector<BeamHypothesis> best = r->beam->best(req.n);
    for (auto& s : r->seqs) scheduler_.remove(s.get());
    r->usage.completion_tokens = 0;
    for (const BeamHypothesis& h : best) r->usage.completion_tokens += int(h.tokens.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.generated_tokens += uint64_t(r->usage.completion_tokens);
    }
    const size_t prompt_chars = tokenizer_.decode(req.prompt_ids).size();
    for (size_t i = 0; i < best.size(); ++i) {
      const BeamHypothesis& h = best[i];
      FinishedEvent fe;
      fe.index = int(i);
      fe.reason = h.end == BeamEnd::Length ? FinishReason::Length : FinishReason::Stop;
      fe.usage = r->usage;
      fe.token_ids = h.tokens;
      std::vector<int32_t> text_ids = h.tokens;
      if (h.end == BeamEnd::Token) text_ids.pop_back();  // the end token gives no text
      fe.text = beam_text(tokenizer_, req.prompt_ids, prompt_chars, text_ids);
      if (h.end == BeamEnd::Text) fe.text.resize(first_stop(fe.text, req.stop.stop));  // the text never holds it
      fe.cumulative_logprob = h.cumulative_logprob;
      r->num_finished++;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.finished_by_reason[finish_reason_name(fe.reason)]++;
      }
      emit(r, {fe, r->num_finished >= r->num_choices()});
    }
    if (r->num_finished < r->num_choices()) {  // fewer hypotheses than n: close the rest
      for (int i = r->num_finished; i < r->num_choices(); ++i) {
        FinishedEvent fe;
        fe.index = i;
        fe.reason = FinishReason::Length;
        fe.usage = r->usage;
        r->num_finished++;
        emit(r, {fe, r->num_finished >= r->num_choices()});
      }
    }
    return;
  }

  if (!r->forked) {
    // First step: the prompt's sequence becomes beam 0; the other beams share its blocks.
    r->forked = true;
    Sequence* root = r->seqs[0].get();
    std::vector<std::unique_ptr<Sequence>> beams;
    for (int i = 0; i < int(next.size()); ++i) {
      auto s = std::make_unique<Sequence>();
      s->request = r;
      s->index = i;
      s->tokens = root->tokens;
      s->num_computed = root->num_computed;
      s->table = i == 0 ? std::move(root->table) : beams[0]->table.fork(kv_.pool());
      s->block_hashes = root->block_hashes;
      s->num_cached_blocks = root->num_cached_blocks;
      s->cache_indir.assign(root->tokens.size(), 0);
      beams.push_back(std::move(s));
    }
    for (auto& b : beams) scheduler_.add_running_after(root, b.get());
    scheduler_.remove(root);
    r->seqs = std::move(beams);
  }
  // Beam i continues beam next[i].parent: it takes that history (tokens and indirection) and keeps its
  // own blocks, which the indirection row now points through.
  std::vector<std::vector<int32_t>> tokens(next.size()), indir(next.size());
  for (size_t i = 0; i < next.size(); ++i) {
    const Sequence* parent = r->seqs[size_t(next[i].parent)].get();
    tokens[i] = parent->tokens;
    tokens[i].push_back(next[i].token);
    indir[i] = parent->cache_indir;
  }
  for (size_t i = 0; i < next.size(); ++i) {
    Sequence* s = r->seqs[i].get();
    s->tokens = std::move(tokens[i]);
    s->cache_indir = std::move(indir[i]);
    s->cumulative_logprob = next[i].cumulative_logprob;
  }
}

void Engine::finish_sequence(Sequence* seq, FinishReason reason, std::string tail) {
  RequestState* r = seq->request;
  seq->finished = true;
  scheduler_.remove(seq);
  r->num_finished++;
  FinishedEvent fe;
  fe.index = seq->index;
  fe.reason = reason;
  fe.usage = r->usage;
  fe.text = std::move(tail);
  fe.token_ids.assign(seq->tokens.begin() + r->num_prompt(), seq->tokens.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.finished_by_reason[finish_reason_name(reason)]++;
  }
  emit(r, {fe, r->num_finished >= r->num_choices()});
}

void Engine::finish_request(RequestState* r, FinishReason reason) {
  if (!r->started) {
    r->started = true;
    std::lock_guard<std::mutex> lock(mu_);
    --num_queued_;
  }
  if (!r->forked || r->is_beam()) {
    // Nothing forked yet (or beams, which report whole choices): every choice ends here.
    for (auto& s : r->seqs) scheduler_.remove(s.get());
    for (int i = r->num_finished; i < r->num_choices(); ++i) {
      FinishedEvent fe;
      fe.index = i;
      fe.reason = reason;
      fe.usage = r->usage;
      r->num_finished++;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.finished_by_reason[finish_reason_name(reason)]++;
      }
      emit(r, {fe, r->num_finished >= r->num_choices()});
    }
  } else {
    for (auto& s : r->seqs)
      if (!s->finished) finish_sequence(s.get(), reason);
  }
  requests_.erase(r->id);
}

void Engine::emit(RequestState* r, Event ev) {
  if (!r->request.sink) return;
  if (auto* f = std::get_if<FinishedEvent>(&ev.value)) f->queue_seconds = r->queue_seconds;
  try {
    r->request.sink(ev);
  } catch (const std::exception& e) {
    spdlog::error("request {}: event sink threw: {}", r->id, e.what());
  }
}

}  // namespace inflight::engine
