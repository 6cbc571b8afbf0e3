// Matcher: states as flat lists of stacks between calls; each call loads them into a thread-local StackWalker,
// steps bytes there, and stores the result as a new immutable state.
#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/grammar/mask_cache.h"
#include "engine/grammar/stack_walker.h"

namespace inflight::engine::grammar {

namespace detail {

// The stacks between calls, bottom first, one after another.
struct MatcherState {
  std::vector<int32_t> positions;  // every stack's positions, bottom to top
  std::vector<uint32_t> ends;      // [num_stacks] end of each stack in positions
  std::vector<uint32_t> partials;  // [num_stacks] the top's UTF-8 state
  bool can_end = false;
  bool terminated = false;  // EOS accepted
};

}  // namespace detail

namespace {

using detail::MatcherState;
using detail::StackSet;
using detail::StackWalker;

[[noreturn]] void invariant_failed(const char* what) {
  std::fprintf(stderr, "%s:%d: grammar matcher invariant broken: %s\n", __FILE__, __LINE__, what);
  std::abort();
}

// One walker per thread, reset by every call: its arena lives only for that call.
StackWalker& thread_walker(const Grammar& grammar) {
  thread_local StackWalker walker;
  walker.reset(grammar);
  return walker;
}

void load(const MatcherState& state, StackWalker& walker, StackSet& out) {
  out.clear();
  out.can_end = state.can_end;
  uint32_t begin = 0;
  for (size_t s = 0; s < state.ends.size(); ++s) {
    int32_t parent = detail::kBottom;
    for (uint32_t i = begin; i < state.ends[s]; ++i)
      parent = walker.intern(state.positions[i], parent, i + 1 == state.ends[s] ? state.partials[s] : 0);
    out.tops.push_back(parent);
    begin = state.ends[s];
  }
}

std::shared_ptr<const MatcherState> store(const StackSet& set, const StackWalker& walker) {
  auto state = std::make_shared<MatcherState>();
  state->can_end = set.can_end;
  std::vector<int32_t> stack;
  for (const int32_t top : set.tops) {
    stack.clear();
    for (int32_t id = top; id >= 0; id = walker.node(id).parent) stack.push_back(walker.node(id).pos);
    state->positions.insert(state->positions.end(), stack.rbegin(), stack.rend());
    state->ends.push_back(uint32_t(state->positions.size()));
    state->partials.push_back(walker.node(top).partial);
  }
  return state;
}

// Feeds `bytes` to `set`; false (and `set` unspecified) when no parse survives.
bool feed(StackWalker& walker, StackSet& set, std::string_view bytes) {
  StackSet next;
  for (const char c : bytes) {
    if (set.tops.empty()) return false;
    walker.advance(set, uint8_t(c), next);
    std::swap(set, next);
  }
  return !set.tops.empty() || set.can_end;
}

void check_mask_size(std::span<uint32_t> bitmask, const TokenVocab& vocab) {
  if (bitmask.size() < (size_t(vocab.size()) + 31) / 32) invariant_failed("fill_mask: bitmask shorter than the vocabulary");
}

void set_bit(std::span<uint32_t> bitmask, int32_t id) { bitmask[size_t(id) / 32] |= 1u << (id % 32); }
bool test_bit(std::span<const uint32_t> bitmask, int32_t id) { return (bitmask[size_t(id) / 32] >> (id % 32)) & 1; }

// The start of either mask: every bit cleared, EOS set where the sentence may end, the live stacks loaded into
// `set`. False when no byte can come next (terminated, or no stack left): the mask is then complete.
bool start_mask(const MatcherState& state, const TokenVocab& vocab, std::span<uint32_t> bitmask, StackWalker& walker,
                StackSet& set) {
  check_mask_size(bitmask, vocab);
  std::fill(bitmask.begin(), bitmask.end(), 0u);
  if (state.terminated) return false;
  if (state.can_end && vocab.eos_id() >= 0) set_bit(bitmask, vocab.eos_id());
  load(state, walker, set);
  return !set.tops.empty();
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                 int max_rollback_tokens)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), max_rollback_tokens_(std::max(0, max_rollback_tokens)) {
  if (!grammar_ || !vocab_) invariant_failed("Matcher needs a grammar and a vocabulary");
  mask_cache_ = detail::MaskCache::of(*grammar_, vocab_);
  StackWalker& walker = thread_walker(*grammar_);
  StackSet start;
  walker.begin_step();
  for (const int32_t alt : grammar_->alternatives(grammar_->root_rule()))
    walker.expand(walker.intern(alt, detail::kBottom, 0), start);
  history_.push_back(store(start, walker));
}

void Matcher::push_state(std::shared_ptr<const MatcherState> state) {
  history_.push_back(std::move(state));
  if (history_.size() > size_t(max_rollback_tokens_) + 1) history_.erase(history_.begin());
}

bool Matcher::can_end() const { return state().can_end && !state().terminated; }
bool Matcher::is_terminated() const { return state().terminated; }
int Matcher::num_stacks() const { return int(state().ends.size()); }

bool Matcher::accept_bytes(std::string_view bytes) {
  if (state().terminated) return false;
  StackWalker& walker = thread_walker(*grammar_);
  StackSet set;
  load(state(), walker, set);
  if (!feed(walker, set, bytes)) return false;
  push_state(store(set, walker));
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (id < 0 || id >= vocab_->size() || state().terminated) return false;
  if (id == vocab_->eos_id()) {
    if (!state().can_end) return false;
    auto next = std::make_shared<MatcherState>(state());
    next->terminated = true;
    push_state(std::move(next));
    return true;
  }
  if (vocab_->is_special(id)) return false;
  return accept_bytes(vocab_->token_bytes(id));
}

bool Matcher::allows(int32_t id) const {
  if (id < 0 || id >= vocab_->size() || state().terminated) return false;
  if (id == vocab_->eos_id()) return state().can_end;
  if (vocab_->is_special(id)) return false;
  StackWalker& walker = thread_walker(*grammar_);
  StackSet set;
  load(state(), walker, set);
  return feed(walker, set, vocab_->token_bytes(id));
}

void Matcher::rollback(int num_tokens) {
  if (num_tokens < 0 || num_tokens > num_rollback_tokens()) invariant_failed("rollback past the kept history");
  history_.resize(history_.size() - size_t(num_tokens));
}

void Matcher::fill_mask_uncached(std::span<uint32_t> bitmask) const {
  StackWalker& walker = thread_walker(*grammar_);
  StackSet set;
  if (!start_mask(state(), *vocab_, bitmask, walker, set)) return;
  detail::TokenWalk walk;
  detail::walk_tokens(
      walker, set, *vocab_, vocab_->num_sorted(), true, walk,
      [&](int k) { return std::pair<int32_t, int32_t>(k, vocab_->sorted_lcp(k)); }, [](int) { return false; },
      [&](int k, detail::Verdict v) {
        if (v == detail::Verdict::kAccept) set_bit(bitmask, vocab_->sorted_id(k));
      });
}

void Matcher::fill_mask(std::span<uint32_t> bitmask) const {
  StackWalker& walker = thread_walker(*grammar_);
  StackSet set;
  if (!start_mask(state(), *vocab_, bitmask, walker, set)) return;

  // Stacks grouped by their key (mask_cache.h).
  std::vector<std::pair<detail::MaskKey, int32_t>> by_key;  // (key, top node id)
  for (const int32_t top : set.tops) {
    detail::MaskKey key{int32_t(walker.node(top).partial)};
    int32_t id = top;
    for (; id >= 0 && int(key.size()) <= detail::kKeyDepth; id = walker.node(id).parent) key.push_back(walker.node(id).pos);
    key.push_back(id == detail::kBottom ? detail::kBottom : detail::kOpen);
    by_key.emplace_back(std::move(key), top);
  }
  std::sort(by_key.begin(), by_key.end());

  // Each call computes at most kMaxNewEntries cache entries (a whole-vocabulary walk each); the stacks of keys
  // without one (not yet computed, or the cache is full) share one whole-vocabulary walk instead. A state with
  // thousands of distinct keys (an ambiguous grammar) thus costs about two walks, not thousands.
  constexpr int kMaxNewEntries = 4;
  int num_new_entries = 0;
  thread_local detail::TokenWalk walk;
  StackSet group, leftover;
  const std::span<const uint32_t> done(bitmask.data(), bitmask.size());
  for (size_t i = 0; i < by_key.size();) {
    const detail::MaskKey& key = by_key[i].first;
    group.clear();
    for (; i < by_key.size() && by_key[i].first == key; ++i) group.tops.push_back(by_key[i].second);
    std::shared_ptr<const detail::PositionMask> entry = mask_cache_->find(key);
    if (!entry && num_new_entries < kMaxNewEntries && !mask_cache_->full()) {
      ++num_new_entries;
      entry = mask_cache_->insert(key, std::make_shared<const detail::PositionMask>(
                                           detail::compute_position_mask(*grammar_, *vocab_, key)));
    }
    if (!entry) {
      leftover.tops.insert(leftover.tops.end(), group.tops.begin(), group.tops.end());
      continue;
    }
    if (!entry->accepted_bits.empty()) {
      for (size_t w = 0; w < entry->accepted_bits.size(); ++w) bitmask[w] |= entry->accepted_bits[w];
    } else {
      for (const int32_t id : entry->accepted_ids) set_bit(bitmask, id);
    }
    if (entry->uncertain.empty()) continue;
    detail::walk_tokens(
        walker, group, *vocab_, int(entry->uncertain.size()), false, walk,
        [&](int k) { return std::pair<int32_t, int32_t>(entry->uncertain[size_t(k)], entry->uncertain_lcp[size_t(k)]); },
        [&](int k) { return test_bit(done, vocab_->sorted_id(entry->uncertain[size_t(k)])); },
        [&](int k, detail::Verdict v) {
          if (v == detail::Verdict::kAccept) set_bit(bitmask, vocab_->sorted_id(entry->uncertain[size_t(k)]));
        });
  }
  if (leftover.tops.empty()) return;
  detail::walk_tokens(
      walker, leftover, *vocab_, vocab_->num_sorted(), true, walk,
      [&](int k) { return std::pair<int32_t, int32_t>(k, vocab_->sorted_lcp(k)); },
      [&](int k) { return test_bit(done, vocab_->sorted_id(k)); },
      [&](int k, detail::Verdict v) {
        if (v == detail::Verdict::kAccept) set_bit(bitmask, vocab_->sorted_id(k));
      });
}

std::string Matcher::forced_bytes() const {
  constexpr size_t kMaxForcedBytes = 256;
  std::string forced;
  if (state().terminated || state().can_end) return forced;
  StackWalker& walker = thread_walker(*grammar_);
  StackSet set, next;
  load(state(), walker, set);
  while (forced.size() < kMaxForcedBytes && !set.tops.empty() && !set.can_end) {
    // A byte some top's terminal takes always leaves a parse alive (its stack moves on or pops), so the bytes
    // allowed next are those the tops' classes take.
    int num_allowed = 0;
    int allowed = -1;
    for (int b = 0; b < 256 && num_allowed < 2; ++b)
      for (const int32_t id : set.tops) {
        const detail::StackNode& n = walker.node(id);
        const CharClass& c = grammar_->char_class(grammar_->element(n.pos).value);
        if (detail::step_class(c, n.partial, uint8_t(b)).kind != detail::ClassStep::kReject) {
          ++num_allowed;
          allowed = b;
          break;
        }
      }
    if (num_allowed != 1) break;
    forced += char(allowed);
    walker.advance(set, uint8_t(allowed), next);
    std::swap(set, next);
  }
  return forced;
}

}  // namespace inflight::engine::grammar
