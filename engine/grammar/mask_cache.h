// MaskCache: XGrammar's adaptive token-mask cache, per (grammar, vocabulary) (internal to engine/grammar).
//
// The key of a stack is the top's UTF-8 state, its top kKeyDepth positions (top first), then kBottom when that is
// the whole stack, else kOpen. For a key, the vocabulary is walked once from those positions over
// an unknown rest (kOpen). A token is
//   accepted   when some parse consumes it all without popping below the key (or pops exactly at its last
//              byte): it is allowed whatever the rest of the stack;
//   rejected   when every parse dies above the rest: it is refused whatever the rest;
//   uncertain  otherwise (a parse pops below the key with bytes left): decided at run time with the real stacks.
// At run time a stack contributes accepted(key) plus whichever uncertain(key) tokens its full stack takes.
// XGrammar keys by the top position alone; a key of one position is blind past the end of a small rule (in
// `string ::= "\"" char* "\""` every token longer than one character leaves `char`), so most of a vocabulary
// comes out uncertain; three positions see the enclosing loop and its closing quote. Entries are computed on
// first use and never change; the cache is shared by every matcher of the pair and holds at most max_bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
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

  size_t num_bytes() const {
    return sizeof(PositionMask) + 4 * (accepted_bits.size() + accepted_ids.size() + uncertain.size() + uncertain_lcp.size());
  }
};

inline constexpr int kKeyDepth = 3;

// {top's UTF-8 state, positions top first..., kBottom or kOpen}.
using MaskKey = std::vector<int32_t>;

class MaskCache {
 public:
  // A dense entry is 16 KiB on a 128k vocabulary; a JSON grammar's document needs about 60 entries, ~1 MiB.
  static constexpr size_t kMaxBytes = size_t(16) << 20;
  explicit MaskCache(size_t max_bytes = kMaxBytes) : max_bytes_(max_bytes) {}

  // The entry of `key`, or past max_bytes that of the key cut to its top position; null when neither is kept.
  std::shared_ptr<const PositionMask> find(const MaskKey& key) const;
  // Keeps `entry` as key's when the budget allows (else it is returned, not kept); a racing insert's entry wins.
  std::shared_ptr<const PositionMask> insert(const MaskKey& key, std::shared_ptr<const PositionMask> entry);
  bool full() const;
  // find(), else the entry computed (compute_position_mask) and inserted.
  std::shared_ptr<const PositionMask> get(const Grammar& grammar, const TokenVocab& vocab, const MaskKey& key);
  size_t num_entries() const;
  size_t num_bytes() const;

  // The cache of (grammar, vocab), made on first use and kept with the grammar.
  static std::shared_ptr<MaskCache> of(const Grammar& grammar, const std::shared_ptr<const TokenVocab>& vocab);

 private:
  struct KeyHash {
    size_t operator()(const MaskKey& key) const;
  };
  size_t max_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<MaskKey, std::shared_ptr<const PositionMask>, KeyHash> entries_;
  size_t bytes_ = 0;  // the entries' num_bytes()
};

// Computes one entry (exposed for the benchmark and tests).
PositionMask compute_position_mask(const Grammar& grammar, const TokenVocab& vocab, const MaskKey& key);

}  // namespace inflight::engine::grammar::detail
