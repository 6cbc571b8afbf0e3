// Matcher: one sequence's position in a grammar, and the mask of the tokens that may come next.
//
// API (other files code against exactly this):
//   class TokenVocab (token_vocab.h)    a tokenizer's vocabulary as byte strings, built once per tokenizer
//   class Matcher {
//     Matcher(std::shared_ptr<const Grammar>, std::shared_ptr<const TokenVocab>, int max_rollback_tokens = 16);
//     bool accept_token(int32_t id);        // false (state unchanged) if not allowed; EOS only when can_end()
//     bool accept_bytes(std::string_view);  // the same for raw bytes (tests, jump-forward)
//     bool can_end() const;                 // the input so far is a complete sentence
//     bool is_terminated() const;           // EOS accepted
//     void fill_mask(std::span<uint32_t> bitmask) const;           // bit id%32 of word id/32: id may come next
//     void fill_mask_uncached(std::span<uint32_t> bitmask) const;  // the same without the mask cache (oracle)
//     bool allows(int32_t id) const;        // one token (the sample-first fast path)
//     void rollback(int num_tokens);        // undo the last accepted tokens / byte strings
//     int num_rollback_tokens() const;      // how many rollback() can undo now
//     std::string forced_bytes() const;     // bytes every continuation starts with (jump-forward); may end
//                                           // inside a UTF-8 character; empty if none or if EOS may come next
//   };
//
// A Matcher is cheap to copy: its states are immutable and shared (history included), so a fork for n > 1
// or a beam is a copy that then diverges. Each accept_* keeps one history entry, up to max_rollback_tokens.
// The grammar decides over bytes: a token may end inside a multi-byte character, and a character class then
// matches the rest of the code point with the next token's bytes. Special tokens (TokenVocab::is_special) are
// never allowed, EOS aside.
//
// Errors: the constructor, the mask and the accept calls throw GrammarError where a grammar is too ambiguous for
// the stack limits (stack_walker.h), leaving the state as it was; rollback past the kept history and a bitmask
// too short abort (caller bugs).
//
// Speed: fill_mask starts from a per-(grammar, vocabulary) cache (mask_cache.h): for the top three positions of
// each stack, the tokens accepted or rejected whatever lies below them, computed once on first use; only the
// rest (tokens that pop below those positions with bytes left) are walked with the full stacks.
// fill_mask_uncached walks the whole vocabulary in sorted byte order, reusing the stacks of shared prefixes and
// skipping at once every token whose first byte no stack takes.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_vocab.h"

namespace inflight::engine::grammar {

namespace detail {
class MaskCache;
struct MatcherState;
}  // namespace detail

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
          int max_rollback_tokens = 16);

  bool accept_token(int32_t id);
  bool accept_bytes(std::string_view bytes);
  bool can_end() const;
  bool is_terminated() const;
  // bitmask.size() >= (vocab size + 31) / 32 words; every word is written.
  void fill_mask(std::span<uint32_t> bitmask) const;
  void fill_mask_uncached(std::span<uint32_t> bitmask) const;
  bool allows(int32_t id) const;
  void rollback(int num_tokens);
  int num_rollback_tokens() const { return int(history_.size()) - 1; }
  std::string forced_bytes() const;

  const Grammar& grammar() const { return *grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  // Number of parses alive (distinct stacks); for tests and metrics.
  int num_stacks() const;

 private:
  void push_state(std::shared_ptr<const detail::MatcherState> state);
  const detail::MatcherState& state() const { return *history_.back(); }

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<detail::MaskCache> mask_cache_;
  int max_rollback_tokens_;
  std::vector<std::shared_ptr<const detail::MatcherState>> history_;  // oldest first; back() is the current
};

}  // namespace inflight::engine::grammar
