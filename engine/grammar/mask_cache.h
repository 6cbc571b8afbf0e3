// MaskCache: XGrammar's adaptive token-mask cache, per (grammar, vocabulary) (internal to engine/grammar).
//
// For a terminal position p (at a code point boundary) the vocabulary is walked once from the stack {p} over
// an unknown rest (kOpen). A token is
//   accepted   when some parse consumes it all without popping below p's alternative (or pops exactly at its
//              last byte): it is allowed whatever the rest of the stack;
//   rejected   when every parse dies inside the alternative: it is refused whatever the rest;
//   uncertain  otherwise (a parse pops below p with bytes left): decided at run time with the real stacks.
// At run time a stack with top p contributes accepted(p) plus whichever uncertain(p) tokens its full stack
// takes. Entries are computed on first use and never change; the cache is shared by every matcher of the pair.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_vocab.h"

namespace inflight::engine::grammar::detail {

struct PositionMask {
  // The accepted tokens as a bitmask of (vocab + 31) / 32 words when many, else as a list of ids.
  std::vector<uint32_t> accepted_bits;
  std::vector<int32_t> accepted_ids;
  // The uncertain tokens in sorted order: sorted indices, and each one's common prefix length with the one
  // before it in this list (0 for the first).
  std::vector<int32_t> uncertain;
  std::vector<int32_t> uncertain_lcp;
};

class MaskCache {
 public:
  explicit MaskCache(const Grammar& grammar);
  // The entry of terminal position `pos` for `vocab` (the vocabulary this cache was made for).
  std::shared_ptr<const PositionMask> get(const Grammar& grammar, const TokenVocab& vocab, int32_t pos);

  // The cache of (grammar, vocab), made on first use and kept with the grammar.
  static std::shared_ptr<MaskCache> of(const Grammar& grammar, const std::shared_ptr<const TokenVocab>& vocab);

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<const PositionMask>> entries_;  // [num elements], null until computed
};

// Computes one entry (exposed for the benchmark and tests).
PositionMask compute_position_mask(const Grammar& grammar, const TokenVocab& vocab, int32_t pos);

}  // namespace inflight::engine::grammar::detail
