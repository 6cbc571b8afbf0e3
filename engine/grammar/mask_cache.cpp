// MaskCache: the context-independent verdicts of every token from one terminal position.
#include "engine/grammar/mask_cache.h"

#include <climits>

#include "engine/grammar/stack_walker.h"

namespace inflight::engine::grammar::detail {

PositionMask compute_position_mask(const Grammar& grammar, const TokenVocab& vocab, const MaskKey& key) {
  StackWalker walker;
  walker.reset(grammar);
  int32_t node = key.back();  // kBottom or kOpen
  for (size_t i = key.size() - 1; i-- > 1;) node = walker.intern(key[i], node, i == 1 ? uint32_t(key[0]) : 0);
  StackSet start;
  walker.begin_step();
  walker.expand(node, start);
  TokenWalk walk;
  PositionMask mask;
  std::vector<int32_t> accepted;
  int32_t lcp_since_uncertain = INT32_MAX;  // min of the prefix lengths since the last uncertain token
  const int n = vocab.num_sorted();
  walk_tokens(
      walker, start, vocab, n, true, walk, [&](int k) { return std::pair<int32_t, int32_t>(k, vocab.sorted_lcp(k)); },
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

size_t MaskCache::KeyHash::operator()(const MaskKey& key) const {
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (const int32_t v : key) h = (h ^ uint32_t(v)) * 0xff51afd7ed558ccdULL;
  return size_t(h ^ (h >> 32));
}

size_t MaskCache::num_entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t MaskCache::num_bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

bool MaskCache::full() const {
  std::lock_guard lock(mutex_);
  return bytes_ >= max_bytes_;
}

std::shared_ptr<const PositionMask> MaskCache::find(const MaskKey& key) const {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second;
  if (bytes_ >= max_bytes_)
    if (auto it = entries_.find(MaskKey{key[0], key[1], kOpen}); it != entries_.end()) return it->second;
  return nullptr;
}

std::shared_ptr<const PositionMask> MaskCache::insert(const MaskKey& key, std::shared_ptr<const PositionMask> entry) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end()) return it->second;
  if (bytes_ >= max_bytes_) return entry;
  bytes_ += entry->num_bytes();
  return entries_.emplace(key, std::move(entry)).first->second;
}

std::shared_ptr<const PositionMask> MaskCache::get(const Grammar& grammar, const TokenVocab& vocab, const MaskKey& key) {
  if (auto entry = find(key)) return entry;
  // Computed outside the lock: a walk over the whole vocabulary.
  return insert(key, std::make_shared<const PositionMask>(compute_position_mask(grammar, vocab, key)));
}

std::shared_ptr<MaskCache> MaskCache::of(const Grammar& grammar, const std::shared_ptr<const TokenVocab>& vocab) {
  std::shared_ptr<void> state = grammar.vocab_state(
      std::static_pointer_cast<const void>(vocab),
      [](const Grammar&, const void*) -> std::shared_ptr<void> { return std::make_shared<MaskCache>(); });
  return std::static_pointer_cast<MaskCache>(state);
}

}  // namespace inflight::engine::grammar::detail
