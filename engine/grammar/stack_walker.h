// StackWalker: the pushdown recogniser under Matcher and the mask cache (internal to engine/grammar).
//
// A parse is a stack of grammar positions: the top is the next terminal to match, each node below is the
// position to continue at once the rule above it ends. Stacks are nodes {pos, parent, partial} hash-consed in
// the walker's arena, so equal stacks are equal ids and a set of stacks is a list of distinct top ids.
// Normalised stacks have a kClass element on top; `partial` is the UTF-8 state of a code point begun but not
// finished (a token may end inside a character). Tail positions are never pushed (a reference that ends its
// alternative continues straight at the parent), so right recursion such as `x ::= "a" x | ""` keeps a
// bounded stack.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/token_vocab.h"

namespace inflight::engine::grammar::detail {

inline constexpr int32_t kBottom = -1;  // parent of the outermost rule: popping it completes the sentence
inline constexpr int32_t kOpen = -2;    // parent standing for an unknown rest of the stack (the mask cache)

// Live stacks past this in one set, or stack nodes past kMaxStackNodes in one walk, throw GrammarError (an
// ambiguous grammar whose parses multiply): bounded time and memory rather than a runaway.
inline constexpr size_t kMaxLiveStacks = 20'000;
inline constexpr size_t kMaxStackNodes = size_t(1) << 22;

// UTF-8 state of a terminal: 0 at a code point boundary; else value << 4 | (length - 1) << 2 | remaining, with
// `value` the bits decoded so far, `length` the character's byte count (2..4), `remaining` bytes to come (1..3).
struct ClassStep {
  enum Kind : uint8_t { kReject, kPartial, kComplete } kind;
  uint32_t partial;  // kPartial: the new state
};
// Feeds one byte to a terminal of class `c` in UTF-8 state `partial`. A partial character survives only while
// some valid code point (no overlong form, no surrogate) of the class still starts with its bytes.
ClassStep step_class(const CharClass& c, uint32_t partial, uint8_t byte);

struct StackNode {
  int32_t pos;       // grammar position (an index into Grammar::elements())
  int32_t parent;    // node id, kBottom or kOpen
  uint32_t partial;  // UTF-8 state (only a top's is ever nonzero)
};

// The stacks after some input.
struct StackSet {
  std::vector<int32_t> tops;  // distinct node ids, each with a kClass element on top
  bool can_end = false;       // some parse popped kBottom: the input is a complete sentence
  bool escaped = false;       // some parse popped kOpen on the last byte (the mask cache's walk)
  void clear() {
    tops.clear();
    can_end = escaped = false;
  }
};

class StackWalker {
 public:
  // Forgets every node; the walker then works on `grammar`.
  void reset(const Grammar& grammar);
  int32_t intern(int32_t pos, int32_t parent, uint32_t partial);
  const StackNode& node(int32_t id) const { return nodes_[size_t(id)]; }
  size_t num_nodes() const { return nodes_.size(); }

  // The stacks of node `id` expanded until each top is a terminal, into `out` (not cleared), deduplicated against
  // what this step already added. Call begin_step() first for a fresh step.
  void begin_step() { ++generation_; }
  void expand(int32_t id, StackSet& out);
  // The stacks after one more byte: `out` is cleared first.
  void advance(const StackSet& in, uint8_t byte, StackSet& out);

  // Sets of stacks interned as ids (tops sorted) with their byte transitions memoised: walk_tokens runs on these,
  // a DFA built lazily as the walk meets its states (a trie edge of a warm state costs one table lookup).
  int32_t intern_set(StackSet set);
  const StackSet& set(int32_t id) const { return sets_[size_t(id)]; }
  int32_t step(int32_t set_id, uint8_t byte);

 private:
  void drain(StackSet& out);
  void pop_into(int32_t parent, StackSet& out);
  void grow_table();
  void grow_set_table();
  void grow_transitions();

  const Grammar* grammar_ = nullptr;
  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;      // open addressing over nodes_: node id or -1; size a power of two
  std::vector<uint32_t> stamps_;    // [num_nodes] the step that last added the node (deduplication)
  uint32_t generation_ = 1;
  std::vector<int32_t> work_;       // expand's pending nodes

  std::vector<StackSet> sets_;
  std::vector<size_t> set_hashes_;           // [num sets]
  std::vector<int32_t> set_table_;           // open addressing over sets_: set id or -1
  std::vector<uint64_t> transition_keys_;    // open addressing: set id << 8 | byte, or ~0 when empty
  std::vector<int32_t> transition_targets_;  // the set after the byte
  size_t num_transitions_ = 0;
  StackSet scratch_;
};

enum class Verdict : uint8_t { kReject, kAccept, kUncertain };

// Per-walk scratch of walk_tokens: levels[d] the set of stacks (an interned id) after the current token's first d
// bytes.
struct TokenWalk {
  std::vector<int32_t> levels;
  std::vector<uint8_t> escaped_within;  // [d]: some parse popped kOpen within the first d bytes
};

// Feeds the tokens of a list in sorted byte order, each from `start`, reusing the stacks of the prefix it
// shares with the previous token, and never stepping past a prefix with no live stack (a rejected subtree of
// the trie costs one comparison per token). `next(i)` gives the i-th token of the list as {sorted index,
// common prefix length with the (i-1)-th}; `skip(i)` true leaves it out (no verdict); `visit(i, verdict)`.
// kUncertain only arises from kOpen stacks: the token pops below the start with bytes left. With `whole_vocab`
// (the list is every sorted token: i is the sorted index), a first byte after which nothing lives skips its whole
// run of tokens, which get no verdict (they are rejected).
template <class Next, class Skip, class Visit>
void walk_tokens(StackWalker& walker, const StackSet& start, const TokenVocab& vocab, int count, bool whole_vocab,
                 TokenWalk& walk, Next next, Skip skip, Visit visit) {
  auto& levels = walk.levels;
  auto& escaped = walk.escaped_within;
  levels.assign(std::max<size_t>(levels.size(), 1), -1);
  escaped.assign(std::max<size_t>(escaped.size(), 1), 0);
  levels[0] = walker.intern_set(start);
  int computed = 0;  // levels[0..computed] hold the stacks of the last fed token's prefix
  for (int i = 0; i < count; ++i) {
    const auto [sorted, lcp] = next(i);
    computed = std::min(computed, int(lcp));
    if (skip(i)) continue;
    const std::string_view bytes = vocab.sorted_bytes(sorted);
    const int length = int(bytes.size());
    int d = computed;
    while (d < length && !walker.set(levels[size_t(d)]).tops.empty()) {
      if (levels.size() <= size_t(d) + 1) {
        levels.resize(size_t(d) + 2);
        escaped.resize(size_t(d) + 2);
      }
      levels[size_t(d) + 1] = walker.step(levels[size_t(d)], uint8_t(bytes[size_t(d)]));
      escaped[size_t(d) + 1] = escaped[size_t(d)] || walker.set(levels[size_t(d) + 1]).escaped;
      ++d;
    }
    computed = d;
    const StackSet& last = walker.set(levels[size_t(d)]);
    if (d == length && (!last.tops.empty() || last.can_end || last.escaped)) visit(i, Verdict::kAccept);
    else visit(i, escaped[size_t(d)] ? Verdict::kUncertain : Verdict::kReject);
    if (whole_vocab && d == 1 && last.tops.empty() && !last.can_end && !escaped[1]) i = vocab.first_byte_end(uint8_t(bytes[0])) - 1;
  }
}

}  // namespace inflight::engine::grammar::detail
