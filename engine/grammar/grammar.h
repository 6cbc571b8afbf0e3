// Grammar: the one representation every structured-output form compiles to (JSON Schema, regex and choice
// lists are first written as GBNF text, then parsed here), and the GBNF parser.
//
// API (other files code against exactly this):
//   struct GrammarError : std::invalid_argument      bad input; the message says what and where (line:column)
//   class Grammar                                     the compiled IR, immutable, shared by every matcher
//   std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");
//   std::shared_ptr<const Grammar> compile_cached(std::string_view gbnf_text);   // LRU by text, thread-safe
//   std::string Grammar::to_gbnf() const;              // the IR printed back as GBNF (helper rules included)
//
// GBNF as llama.cpp reads it: rules `name ::= alternatives`, names [a-zA-Z0-9-]+; literals "..." with the
// escapes \n \t \r \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (each names a code point); character classes [a-z0-9],
// [^...] with the same escapes; `.` any code point; ( ) grouping; | alternation; postfix * + ? {m} {m,} {m,n}
// {,n}; # comments to the end of the line. Whitespace, newlines included, separates elements anywhere: a rule
// ends where the next `name ::=` begins (a superset of llama.cpp, which also ends a top-level rule at a newline).
// Code points are matched as their UTF-8 bytes. Refused with a GrammarError: left recursion (direct, indirect
// or behind a part that can match nothing, e.g. `("a"?)*`), undefined rules, rules defined twice, and inputs
// past the size limits below.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inflight::engine::grammar {

struct GrammarError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Size limits of parse_gbnf: past one, a GrammarError names the limit.
inline constexpr size_t kMaxGrammarBytes = size_t(1) << 20;   // GBNF text
inline constexpr size_t kMaxGrammarRules = 100'000;           // rules, helper rules of groups and repetitions included
inline constexpr size_t kMaxGrammarElements = 1'000'000;      // terminals and rule references, after expansion

// A set of Unicode code points: sorted, disjoint, non-adjacent inclusive ranges. A literal character is a
// class of one code point.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint64_t ascii[2] = {0, 0};  // bit c of the 128: whether code point c < 0x80 is in the set (the fast path)

  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // any code point of [lo, hi] in the set
  bool contains_ascii(uint8_t c) const { return (ascii[c >> 6] >> (c & 63)) & 1; }
};

enum class ElementKind : uint8_t {
  kClass,  // a terminal: one code point of char_class(value)
  kRule,   // a reference to rule `value`
  kEnd,    // the end of an alternative
};
struct Element {
  ElementKind kind;
  int32_t value;  // class index (kClass), rule index (kRule), rule index of the alternative (kEnd)
};

// Rules of alternatives of sequences of elements, flattened: every alternative is a run of elements in
// elements() closed by a kEnd element, and a grammar position is an index into elements(). Invariants: no
// left recursion (a rule never reaches itself without consuming a byte), every kRule names a defined rule.
class Grammar {
 public:
  int num_rules() const { return int(rule_names_.size()); }
  int root_rule() const { return root_; }
  const std::string& rule_name(int rule) const { return rule_names_[size_t(rule)]; }
  // The start positions of `rule`'s alternatives.
  std::span<const int32_t> alternatives(int rule) const {
    const auto begin = size_t(alt_offsets_[size_t(rule)]), end = size_t(alt_offsets_[size_t(rule) + 1]);
    return std::span<const int32_t>(alt_starts_).subspan(begin, end - begin);
  }
  std::span<const Element> elements() const { return elements_; }
  const Element& element(int32_t pos) const { return elements_[size_t(pos)]; }
  const CharClass& char_class(int32_t index) const { return classes_[size_t(index)]; }
  int num_classes() const { return int(classes_.size()); }
  // Whether `rule` can match the empty string.
  bool nullable(int rule) const { return nullable_[size_t(rule)] != 0; }
  // The grammar printed as GBNF: every rule, helper rules of groups and repetitions included, root first.
  std::string to_gbnf() const;

  // Per-vocabulary state kept with the grammar (the matcher's token-mask cache, mask_cache.h): created by
  // `create` once per (grammar, live vocabulary) pair on first use, shared by every matcher of the pair; keyed
  // by the vocabulary's ownership, so a new vocabulary at a freed one's address gets a state of its own.
  // Thread-safe.
  std::shared_ptr<void> vocab_state(const std::shared_ptr<const void>& vocab,
                                    std::shared_ptr<void> (*create)(const Grammar&, const void* vocab)) const;

 private:
  friend class GrammarBuilder;
  std::vector<std::string> rule_names_;
  std::vector<int32_t> alt_offsets_;  // [num_rules + 1] into alt_starts_
  std::vector<int32_t> alt_starts_;   // start positions of the alternatives, rule by rule
  std::vector<Element> elements_;
  std::vector<CharClass> classes_;
  std::vector<uint8_t> nullable_;  // [num_rules]
  int root_ = 0;

  mutable std::mutex vocab_states_mutex_;
  mutable std::vector<std::pair<std::weak_ptr<const void>, std::shared_ptr<void>>> vocab_states_;
};

// Parses GBNF text (see the top of this file) with `root` as the start rule. Throws GrammarError.
std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root = "root");

// parse_gbnf(gbnf_text) through a process-wide cache keyed by the text (root rule `root`): thread-safe, least
// recently used first out past kGrammarCacheEntries. A text that fails to parse throws each time.
inline constexpr size_t kGrammarCacheEntries = 64;  // each also keeps its mask caches (up to 16 MiB per vocabulary)
std::shared_ptr<const Grammar> compile_cached(std::string_view gbnf_text);

}  // namespace inflight::engine::grammar
