#include "engine/scheduler.h"

#include <algorithm>
#include <numeric>

namespace inflight::engine {

Scheduler::Scheduler(const SchedulerConfig& config, cache::KvCache& kv) : config_(config), kv_(kv) {
  if (!config_.enable_prefix_caching) kv_.pool().clear_cache();
}

bool Scheduler::can_ever_fit(int64_t num_tokens) const {
  const int bs = kv_.config().block_size;
  return (num_tokens + bs - 1) / bs <= kv_.config().num_blocks;
}

int64_t Scheduler::beam_blocks_needed(int num_prompt, int max_tokens, int beam_width) const {
  const int bs = kv_.config().block_size;
  return int64_t(num_prompt) / bs + int64_t(beam_width) * ((max_tokens + bs - 1) / bs + 1);
}

void Scheduler::add(Sequence* seq) { waiting_.push_back(seq); }

void Scheduler::add_running_after(const Sequence* parent, Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), parent);
  // After the parent and the siblings already forked from it, so beams stay consecutive and in order.
  while (it != running_.end() && (*it)->request == parent->request) ++it;
  running_.insert(it, seq);
}

void Scheduler::remove(Sequence* seq) {
  seq->table.release(kv_.pool());
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

bool Scheduler::allocate(Sequence* seq, int num_tokens) {
  const int64_t end = int64_t(seq->num_computed) + num_tokens;
  if (!seq->table.reserve(kv_.pool(), end)) return false;
  return kv_.make_writable(seq->table, seq->num_computed, end);  // copy-on-write of shared blocks
}

void Scheduler::preempt(Sequence* victim) {
  ++counters_.preemptions;
  RequestState* r = victim->request;
  if (r->is_beam() && r->forked) {
    // Beams share history through the cache indirection: the whole group restarts from its prompt.
    // Beam search emits nothing before it ends, so a restart is invisible.
    for (auto& s : r->seqs) remove(s.get());
    r->seqs.clear();
    auto root = std::make_unique<Sequence>();
    root->request = r;
    root->tokens = r->request.prompt_ids;
    root->table = cache::BlockTable(kv_.config().block_size);
    r->seqs.push_back(std::move(root));
    r->forked = false;
    waiting_.push_front(r->seqs.back().get());
    return;
  }
  victim->table.release(kv_.pool());
  victim->num_computed = 0;
  victim->num_cached_blocks = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  waiting_.push_front(victim);
}

int Scheduler::match_prefix(Sequence* seq) {
  if (!config_.enable_prefix_caching || seq->num_computed > 0 || seq->table.num_blocks() > 0) return -1;
  const int bs = kv_.config().block_size;
  // At least the last token is computed, so a fully cached sequence still yields logits.
  const int max_blocks = (int(seq->tokens.size()) - 1) / bs;
  uint64_t parent = 0;
  int matched = 0;
  for (int i = 0; i < max_blocks; ++i) {
    std::span<const int32_t> toks(seq->tokens.data() + size_t(i) * bs, size_t(bs));
    if (int(seq->block_hashes.size()) <= i) seq->block_hashes.push_back(cache::hash_block(parent, toks));
    parent = seq->block_hashes[size_t(i)];
    const int32_t b = kv_.pool().lookup(parent, toks);
    if (b < 0) break;
    kv_.pool().retain(b);
    seq->table.mutable_blocks().push_back(b);
    ++matched;
  }
  seq->num_computed = matched * bs;
  seq->num_cached_blocks = matched;
  return matched * bs;
}

namespace {

// A sequence in the generation phase: its one uncomputed token is the last one sampled.
bool is_decoding(const Sequence* seq) { return seq->num_uncomputed() == 1 && seq->num_generated() > 0; }

}  // namespace

Scheduler::PrefillAllowance Scheduler::plan_allowance() const {
  PrefillAllowance a;
  if (config_.max_step_ms <= 0) return a;
  StepShape decode;
  for (const Sequence* seq : running_) {
    if (!is_decoding(seq)) continue;
    ++decode.num_decode_seqs;
    decode.attention_kpairs += attention_kpairs(seq->num_computed, 1);
  }
  a.num_decode_left = decode.num_decode_seqs;
  a.limited = decode.num_decode_seqs > 0 && step_cost_.known();
  a.ms = config_.max_step_ms - step_cost_.predict_ms(decode);
  return a;
}

int Scheduler::prefill_chunk(const Sequence* seq, int token_cap, const PrefillAllowance& a) const {
  const int cap = std::min(seq->num_uncomputed(), token_cap);
  if (cap <= 0 || !a.limited) return std::max(cap, 0);
  int lo = largest_chunk_within(step_cost_, seq->num_computed, cap, a.ms);
  if (!a.any_prefill) lo = std::max(lo, std::min(config_.min_prefill_chunk, cap));
  return lo;
}

void Scheduler::plan_prefill(const PrefillAllowance& a) {
  planned_running_.clear();
  planned_admissions_.clear();
  std::vector<PrefillCandidate> cands;  // running prompts in admission order, then waiting ones
  std::vector<Sequence*> seqs;          // [cands.size()]
  int num_tokens = config_.max_num_batched_tokens, num_seqs = config_.max_num_seqs;
  for (Sequence* s : running_) {
    if ((s->request->is_beam() && s->request->forked) || is_decoding(s)) {  // served before any prompt
      num_tokens -= s->num_uncomputed();
      num_seqs -= 1;
      continue;
    }
    cands.push_back({s->num_computed, s->num_uncomputed(), false});
    seqs.push_back(s);
  }
  const int num_admissions = std::max(0, config_.max_num_seqs - int(running_.size()));
  // A waiting sequence passes older prompts only while the pool holds what every running sequence, every
  // older waiting one and itself may still take: passing then never causes a preemption.
  // NOTE: only the oldest max_num_seqs waiting sequences are looked at, so a step's plan costs the same
  // however long the queue grows.
  int64_t need_blocks = 0;
  for (const Sequence* s : running_) need_blocks += blocks_to_finish(s);
  for (size_t i = 0; num_admissions > 0 && i < waiting_.size() && i < size_t(config_.max_num_seqs); ++i) {
    Sequence* s = waiting_[i];
    need_blocks += blocks_to_finish(s);
    cands.push_back({s->num_computed, s->num_uncomputed(), true, need_blocks <= kv_.pool().num_free()});
    seqs.push_back(s);
  }
  // Oldest first by arrival: running prompts admitted out of order (short-first) keep their place.
  std::vector<size_t> by_arrival(cands.size());
  std::iota(by_arrival.begin(), by_arrival.end(), size_t(0));
  std::stable_sort(by_arrival.begin(), by_arrival.end(),
                   [&](size_t a, size_t b) { return seqs[a]->request->arrival < seqs[b]->request->arrival; });
  std::vector<PrefillCandidate> sorted_cands;
  std::vector<Sequence*> sorted_seqs;
  for (size_t k : by_arrival) {
    sorted_cands.push_back(cands[k]);
    sorted_seqs.push_back(seqs[k]);
  }
  cands.swap(sorted_cands);
  seqs.swap(sorted_seqs);
  const PrefillBudget budget{.num_tokens = std::max(num_tokens, 0),
                             .num_seqs = std::max(num_seqs, 0),
                             .num_admissions = num_admissions,
                             .timed = a.limited,
                             .ms = a.ms,
                             .min_chunk = config_.min_prefill_chunk};
  const PrefillPlan plan = plan_short_first(cands, budget, step_cost_);
  for (int idx : plan.order) {
    const int n = plan.num_tokens[size_t(idx)];
    if (cands[size_t(idx)].waiting) planned_admissions_.emplace_back(seqs[size_t(idx)], n);
    else planned_running_.emplace_back(seqs[size_t(idx)], n);
  }
}

int Scheduler::planned_tokens(const Sequence* seq) const {
  for (const auto& [s, n] : planned_running_)
    if (s == seq) return n;
  return 0;
}

int64_t Scheduler::blocks_to_finish(const Sequence* seq) const {
  const int bs = kv_.config().block_size;
  const RequestState* r = seq->request;
  const int64_t max_tokens = r->request.stop.max_tokens;
  const int64_t own = std::max<int64_t>((r->num_prompt() + max_tokens + bs - 1) / bs - seq->table.num_blocks(), 0);
  const int width = r->is_beam() ? r->request.beam_width : r->num_choices();
  if (width <= 1) return own;
  // A forked sequence copies the shared last prompt block when it first writes it; a root not forked
  // yet becomes `width` sequences, each with its own generated blocks.
  if (r->forked) return own + 1;
  return own + int64_t(width - 1) * ((max_tokens + bs - 1) / bs + 1);
}

bool Scheduler::schedule(SchedulerOutput* out) {
  *out = SchedulerOutput{};
  int budget = config_.max_num_batched_tokens;
  bool preempted = false;
  // Budget 0: no allowance limits prompt chunks and no tokens are held back for decoding sequences.
  PrefillAllowance allowance = plan_allowance();
  const bool short_first = config_.prefill_order == PrefillOrder::kShortFirst;
  if (short_first) plan_prefill(allowance);
  auto take_prefill = [&](const Sequence* seq, int n) {
    allowance.ms -= step_cost_.prefill_ms(seq->num_computed, n);
    allowance.any_prefill = true;
  };

  // Running sequences first, oldest first.
  size_t i = 0;
  while (i < running_.size() && budget > 0 && int(out->seqs.size()) < config_.max_num_seqs) {
    Sequence* seq = running_[i];
    // A beam group (consecutive in running_) is scheduled whole or not at all.
    const bool whole = seq->request->is_beam() && seq->request->forked;
    size_t group_end = i + 1;
    if (whole)
      while (group_end < running_.size() && running_[group_end]->request == seq->request) ++group_end;
    int need_tokens = 0;
    for (size_t j = i; j < group_end; ++j) need_tokens += running_[j]->num_uncomputed();
    if (whole && (need_tokens > budget || int(out->seqs.size() + (group_end - i)) > config_.max_num_seqs)) break;
    const bool decoding = !whole && is_decoding(seq);
    int num_tokens = 0;
    if (!whole) {
      if (decoding) num_tokens = std::min(seq->num_uncomputed(), budget);
      else if (short_first) num_tokens = std::max(0, std::min(planned_tokens(seq), budget - allowance.num_decode_left));
      else num_tokens = prefill_chunk(seq, budget - allowance.num_decode_left, allowance);
      if (num_tokens == 0) {  // out of step time: the prompt goes on next step, decoders still run
        i = group_end;
        continue;
      }
    }

    bool ok = true;
    for (size_t j = i; j < group_end && ok; ++j) {
      Sequence* s = running_[j];
      while (!allocate(s, whole ? s->num_uncomputed() : num_tokens)) {
        Sequence* victim = running_.back();
        const bool self = victim->request == seq->request && (whole || victim == seq);
        preempt(victim);
        preempted = true;
        if (self) {
          ok = false;
          break;
        }
      }
    }
    if (!ok) break;  // this sequence (group) itself was preempted: everything after it is newer
    for (size_t j = i; j < group_end; ++j) {
      Sequence* s = running_[j];
      const int n = whole ? s->num_uncomputed() : num_tokens;
      if (is_decoding(s)) allowance.num_decode_left = std::max(0, allowance.num_decode_left - 1);
      else take_prefill(s, n);
      out->seqs.push_back({s, n, s->num_computed + n == int(s->tokens.size())});
      budget -= n;
    }
    i = group_end;
  }

  // Then waiting sequences, unless this step had to preempt.
  auto can_admit = [&] {
    return !preempted && budget > 0 && int(out->seqs.size()) < config_.max_num_seqs &&
           int(running_.size()) < config_.max_num_seqs;
  };
  // Admits `seq` with its planned chunk, at most (-1: the chunk fcfs gives, sized after the prefix cache
  // lookup); false (and `seq` left waiting) when it gets none or its blocks do not fit.
  auto admit = [&](Sequence* seq, int planned) {
    const int matched = match_prefix(seq);
    const int token_cap = budget - allowance.num_decode_left;
    const int n = planned < 0 ? prefill_chunk(seq, token_cap, allowance)
                              : std::min({planned, seq->num_uncomputed(), token_cap});
    if (n <= 0 || !allocate(seq, n)) {  // later: step time left next step, or blocks freed by others
      seq->table.release(kv_.pool());
      seq->num_computed = 0;
      seq->num_cached_blocks = 0;
      return false;
    }
    if (matched >= 0) {
      counters_.prefix_query_tokens += uint64_t(seq->tokens.size());
      counters_.prefix_hit_tokens += uint64_t(matched);
      if (seq->index == 0 && !seq->request->forked) seq->request->usage.cached_tokens = matched;
    }
    take_prefill(seq, n);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
    running_.push_back(seq);
    out->seqs.push_back({seq, n, seq->num_computed + n == int(seq->tokens.size())});
    budget -= n;
    return true;
  };
  if (!short_first) {
    // First come, first served: the first that gets no chunk stops the queue.
    while (can_admit() && !waiting_.empty()) {
      if (!admit(waiting_.front(), -1)) break;
    }
  } else {
    for (const auto& [seq, n] : planned_admissions_)
      if (!can_admit() || !admit(seq, n)) break;
  }

  if (out->seqs.empty()) return false;
  build_batch(out);
  if (step_cost_.known()) out->predicted_ms = step_cost_.predict_ms(step_shape(out->batch));
  return true;
}

void Scheduler::build_batch(SchedulerOutput* out) {
  // Context sequences (more than one token, or a prompt chunk) first, then generation sequences.
  auto is_generation = [](const ScheduledSeq& s) {
    return s.num_tokens == 1 && s.seq->num_generated() > 0 && s.seq->num_computed + 1 == int(s.seq->tokens.size());
  };
  std::stable_partition(out->seqs.begin(), out->seqs.end(), [&](const ScheduledSeq& s) { return !is_generation(s); });

  ScheduledBatch& b = out->batch;
  const int bs = kv_.config().block_size;
  bool any_beam = false;
  int64_t max_len = 0;
  for (const ScheduledSeq& s : out->seqs) {
    Sequence* q = s.seq;
    if (!is_generation(s)) ++b.num_context_seqs;
    b.add_sequence(q->tokens.data() + q->num_computed, s.num_tokens, q->num_computed, q->table.blocks().data(),
                   q->table.num_blocks(), bs, s.wants_logits);
    if (s.wants_logits) out->logits_owner.push_back(int(&s - out->seqs.data()));
    if (q->request->is_beam() && q->request->forked) any_beam = true;
    max_len = std::max<int64_t>(max_len, int64_t(q->tokens.size()));
  }
  if (!any_beam) return;

  // Cache indirection rows: beams read each position from the beam that wrote it; everyone else
  // reads its own row (beam_row0 = itself, indirection 0).
  b.cache_indir_stride = max_len;
  b.cache_indir.assign(out->seqs.size() * size_t(max_len), 0);
  b.beam_row0.resize(out->seqs.size());
  for (size_t r = 0; r < out->seqs.size(); ++r) {
    Sequence* q = out->seqs[r].seq;
    b.beam_row0[r] = int32_t(r);
    if (!(q->request->is_beam() && q->request->forked)) continue;
    b.beam_row0[r] = int32_t(r) - q->index;  // beams of a group are consecutive, in index order
    q->cache_indir.resize(q->tokens.size(), int32_t(q->index));
    for (int pos = q->num_computed; pos < int(q->tokens.size()); ++pos) q->cache_indir[size_t(pos)] = q->index;
    std::copy(q->cache_indir.begin(), q->cache_indir.end(), b.cache_indir.begin() + int64_t(r) * max_len);
  }
}

void Scheduler::register_full_blocks(Sequence* seq) {
  if (!config_.enable_prefix_caching) return;
  const int bs = kv_.config().block_size;
  // Beams' generated blocks mix histories through the indirection: only their prompt blocks are shared.
  const int limit = seq->request->is_beam() ? seq->num_prompt() : int(seq->tokens.size());
  const int num_full = std::min(seq->num_computed, limit) / bs;
  for (int i = seq->num_cached_blocks; i < num_full; ++i) {
    std::span<const int32_t> toks(seq->tokens.data() + size_t(i) * bs, size_t(bs));
    if (int(seq->block_hashes.size()) <= i)
      seq->block_hashes.push_back(cache::hash_block(i > 0 ? seq->block_hashes[size_t(i) - 1] : 0, toks));
    kv_.pool().cache_block(seq->table.blocks()[size_t(i)], seq->block_hashes[size_t(i)], toks);
  }
  seq->num_cached_blocks = std::max(seq->num_cached_blocks, num_full);
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.seqs) {
    s.seq->num_computed += s.num_tokens;
    register_full_blocks(s.seq);
  }
}

}  // namespace inflight::engine
