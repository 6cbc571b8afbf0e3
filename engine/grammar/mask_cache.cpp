// MaskCache: the context-independent verdicts of every token from one terminal position.
#include "engine/grammar/mask_cache.h"

#include <climits>

#include "engine/grammar/stack_walker.h"

namespace inflight::engine::grammar::detail {

PositionMask compute_position_mask(const Grammar& grammar, const TokenVocab& vocab, int32_t pos) {
  StackWalker walker;
  walker.reset(grammar);
  StackSet start;
  walker.begin_step();
  walker.expand(walker.intern(pos, kOpen, 0), start);
  TokenWalk walk;
  PositionMask mask;
  std::vector<int32_t> accepted;
  int32_t lcp_since_uncertain = INT32_MAX;  // min of the prefix lengths since the last uncertain token
  const int n = vocab.num_sorted();
  walk_tokens(
      walker, start, vocab, n, walk, [&](int k) { return std::pair<int32_t, int32_t>(k, vocab.sorted_lcp(k)); },
      [](int) { return false; },
      [&](int k, Verdict v) {
        lcp_since_uncertain = std::min(lcp_since_uncertain, vocab.sorted_lcp(k));
        if (v == Verdict::kAccept) {
          accepted.push_back(vocab.sorted_id(k));
        } else if (v == Verdict::kUncertain) {
          mask.uncertain.push_back(k);
          mask.uncertain_lcp.push_back(mask.uncertain.size() == 1 ? 0 : lcp_since_uncertain);
          lcp_since_uncertain = INT32_MAX;
        }
      });
  const size_t num_words = (size_t(vocab.size()) + 31) / 32;
  if (accepted.size() > num_words) {
    mask.accepted_bits.assign(num_words, 0);
    for (int32_t id : accepted) mask.accepted_bits[size_t(id) / 32] |= 1u << (id % 32);
  } else {
    mask.accepted_ids = std::move(accepted);
  }
  return mask;
}

MaskCache::MaskCache(const Grammar& grammar) : entries_(grammar.elements().size()) {}

std::shared_ptr<const PositionMask> MaskCache::get(const Grammar& grammar, const TokenVocab& vocab, int32_t pos) {
  {
    std::lock_guard lock(mutex_);
    if (entries_[size_t(pos)]) return entries_[size_t(pos)];
  }
  // Computed outside the lock (a walk over the whole vocabulary); a racing computation gives the same entry.
  auto entry = std::make_shared<const PositionMask>(compute_position_mask(grammar, vocab, pos));
  std::lock_guard lock(mutex_);
  if (!entries_[size_t(pos)]) entries_[size_t(pos)] = std::move(entry);
  return entries_[size_t(pos)];
}

std::shared_ptr<MaskCache> MaskCache::of(const Grammar& grammar, const std::shared_ptr<const TokenVocab>& vocab) {
  std::shared_ptr<void> state = grammar.vocab_state(
      std::static_pointer_cast<const void>(vocab),
      [](const Grammar& g, const void*) -> std::shared_ptr<void> { return std::make_shared<MaskCache>(g); });
  return std::static_pointer_cast<MaskCache>(state);
}

}  // namespace inflight::engine::grammar::detail
