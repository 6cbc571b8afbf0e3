// parse_gbnf: GBNF text → Grammar. A recursive-descent parser builds rules of alternatives of element
// sequences; groups and repetitions become helper rules, named `<rule>-<n>` once every user rule is known (so
// they never collide with one, and Grammar::to_gbnf prints a grammar that parses); then the checks that keep the matcher finite: every reference defined, no left recursion.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "engine/grammar/grammar.h"

namespace inflight::engine::grammar {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kMaxRepetitionBound = 100'000;
constexpr int kMaxGroupDepth = 1000;  // nested ( ): the parser recurses once per level

using Sequence = std::vector<Element>;

struct RuleDraft {
  std::string name;
  std::vector<Sequence> alternatives;
  bool defined = false;
  size_t where = 0;  // byte offset of the definition (or the group / repetition of a helper rule)
  size_t first_reference = std::string::npos;
  std::string helper_of;  // helper rules: the rule whose definition made it
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

}  // namespace

// Builds the Grammar's flattened arrays from drafts; a friend of Grammar.
class GrammarBuilder {
 public:
  GrammarBuilder(std::string_view text, std::string_view root) : text_(text), root_name_(root) {}

  std::shared_ptr<const Grammar> run() {
    if (text_.size() > kMaxGrammarBytes)
      throw GrammarError("grammar too large: " + std::to_string(text_.size()) + " bytes (the limit is " +
                         std::to_string(kMaxGrammarBytes) + ")");
    skip_space();
    if (at_end()) throw GrammarError("empty grammar: expected a rule `name ::= ...` at 1:1");
    while (!at_end()) {
      parse_rule();
      skip_space();
    }
    for (const RuleDraft& r : rules_)
      if (!r.defined) throw error_at(r.first_reference, "undefined rule '" + r.name + "'");
    auto root = ids_.find(std::string(root_name_));
    if (root == ids_.end()) throw GrammarError("no rule named '" + std::string(root_name_) + "' (the start rule)");
    root_ = root->second;
    factor_alternatives();
    name_helpers();
    compute_nullable();
    check_left_recursion();
    return flatten();
  }

 private:
  std::string_view text_;
  std::string_view root_name_;
  size_t pos_ = 0;
  std::vector<RuleDraft> rules_;
  std::unordered_map<std::string, int> ids_;
  std::vector<CharClass> classes_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, int32_t> class_ids_;
  size_t num_elements_ = 0;
  int root_ = 0;
  std::vector<uint8_t> nullable_;

  // ---- errors and positions ----
  std::string line_column(size_t offset) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') ++line, column = 1;
      else ++column;
    }
    return std::to_string(line) + ":" + std::to_string(column);
  }
  GrammarError error_at(size_t offset, const std::string& what) const {
    return GrammarError(what + " at " + line_column(offset));
  }
  std::string describe_here() const {
    if (at_end()) return "the end of the grammar";
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\n') return "a newline";
    if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "0x%02X", c);
      return std::string("byte ") + buf;
    }
    return std::string("'") + char(c) + "'";
  }
  GrammarError expected(const std::string& what) const {
    return error_at(pos_, "expected " + what + ", found " + describe_here());
  }

  // ---- lexing ----
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  void skip_space() {
    while (!at_end()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++pos_;
      else if (c == '#') {
        while (!at_end() && text_[pos_] != '\n') ++pos_;
      } else break;
    }
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(text_[pos_])) ++pos_;
    if (pos_ == start) throw expected("a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }
  // Whether a rule definition `name ::=` starts at pos_.
  bool at_rule_definition() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }
  // One UTF-8 code point of the text.
  uint32_t decode_code_point() {
    const size_t start = pos_;
    const auto b0 = static_cast<unsigned char>(text_[pos_]);
    int len = b0 < 0x80 ? 1 : (b0 & 0xE0) == 0xC0 ? 2 : (b0 & 0xF0) == 0xE0 ? 3 : (b0 & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || pos_ + size_t(len) > text_.size()) throw error_at(start, "invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + size_t(i)]);
      if ((b & 0xC0) != 0x80) throw error_at(start, "invalid UTF-8 in the grammar");
      cp = (cp << 6) | (b & 0x3Fu);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      throw error_at(start, "invalid UTF-8 in the grammar");
    pos_ += size_t(len);
    return cp;
  }
  uint32_t parse_hex(int digits) {
    const size_t start = pos_ - 2;  // at the backslash
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char c = peek();
      const int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) throw expected(std::to_string(digits) + " hex digits in the escape at " + line_column(start));
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      throw error_at(start, "escape names no Unicode scalar value");
    return v;
  }
  // One character of a literal or class: an escape or a UTF-8 code point.
  uint32_t parse_char() {
    if (peek() != '\\') return decode_code_point();
    const size_t start = pos_;
    ++pos_;
    if (at_end()) throw expected("an escape character");
    const char c = text_[pos_++];
    switch (c) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '\\': return '\\';
      case '"': return '"';
      case '[': return '[';
      case ']': return ']';
      case '-': return '-';
      case '^': return '^';
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default:
        pos_ = start;
        throw error_at(start, std::string("unknown escape '\\") + c + "'");
    }
  }

  // ---- building ----
  int rule_id(const std::string& name, size_t where_referenced) {
    auto [it, inserted] = ids_.try_emplace(name, int(rules_.size()));
    if (inserted) {
      if (rules_.size() >= kMaxGrammarRules)
        throw error_at(where_referenced, "grammar too large: more than " + std::to_string(kMaxGrammarRules) + " rules");
      rules_.push_back(RuleDraft{name, {}, false, 0, where_referenced});
    }
    return it->second;
  }
  // A helper rule; its name, a placeholder that no user name can be (they hold no '_'), comes later.
  int new_helper(const std::string& base, size_t where) {
    const int id = rule_id("_" + std::to_string(rules_.size()), where);
    rules_[size_t(id)].defined = true;
    rules_[size_t(id)].where = where;
    rules_[size_t(id)].helper_of = base;
    return id;
  }
  void name_helpers() {
    size_t next = 1;
    for (RuleDraft& r : rules_) {
      if (r.helper_of.empty()) continue;
      std::string name;
      do name = r.helper_of + "-" + std::to_string(next++);
      while (ids_.count(name));
      r.name = name;
    }
  }
  void count_elements(size_t n, size_t where) {
    num_elements_ += n;
    if (num_elements_ > kMaxGrammarElements)
      throw error_at(where, "grammar too large: more than " + std::to_string(kMaxGrammarElements) +
                                " elements after expanding repetitions");
  }
  Element class_element(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
      else merged.push_back(r);
    }
    if (negated) {
      std::vector<std::pair<uint32_t, uint32_t>> complement;
      uint32_t next = 0;
      for (const auto& [lo, hi] : merged) {
        if (lo > next) complement.emplace_back(next, lo - 1);
        next = hi + 1;
      }
      if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
      merged = std::move(complement);
    }
    auto [it, inserted] = class_ids_.try_emplace(merged, int32_t(classes_.size()));
    if (inserted) {
      CharClass c;
      c.ranges = merged;
      for (const auto& [lo, hi] : merged)
        for (uint32_t cp = lo; cp <= std::min(hi, 0x7Fu); ++cp) c.ascii[cp >> 6] |= uint64_t(1) << (cp & 63);
      classes_.push_back(std::move(c));
    }
    return Element{ElementKind::kClass, it->second};
  }

  // ---- grammar ----
  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    skip_space();
    if (text_.substr(pos_, 3) != "::=") throw expected("'::=' after the rule name '" + name + "'");
    pos_ += 3;
    const int id = rule_id(name, start);
    if (rules_[size_t(id)].defined)
      throw error_at(start, "rule '" + name + "' defined twice (first at " + line_column(rules_[size_t(id)].where) + ")");
    rules_[size_t(id)].defined = true;
    rules_[size_t(id)].where = start;
    std::vector<Sequence> alternatives = parse_alternatives(name, 0);
    rules_[size_t(id)].alternatives = std::move(alternatives);
  }

  std::vector<Sequence> parse_alternatives(const std::string& base, int depth) {
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(base, depth));
    while (peek() == '|') {
      ++pos_;
      alternatives.push_back(parse_sequence(base, depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(const std::string& base, int depth) {
    Sequence sequence;
    for (;;) {
      skip_space();
      const char c = peek();
      if (at_end() || c == '|') break;
      if (c == ')') {
        if (depth == 0) throw error_at(pos_, "unmatched ')'");
        break;
      }
      if (is_name_char(c) && at_rule_definition()) {
        if (depth > 0) throw expected("')'");
        break;
      }
      const size_t start = pos_;
      Sequence atom = parse_atom(base, depth);
      skip_space();
      while (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{') {
        const size_t op = pos_;
        auto [min, max] = parse_repetition();
        atom = repeat(base, std::move(atom), min, max, op);
        skip_space();
      }
      count_elements(atom.size(), start);
      sequence.insert(sequence.end(), atom.begin(), atom.end());
    }
    return sequence;
  }

  Sequence parse_atom(const std::string& base, int depth) {
    const size_t start = pos_;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      Sequence literal;
      while (peek() != '"') {
        if (at_end()) throw error_at(start, "unterminated literal");
        if (peek() == '\n') throw error_at(start, "unterminated literal (a newline inside \"...\")");
        const uint32_t cp = parse_char();
        literal.push_back(class_element({{cp, cp}}, false));
      }
      ++pos_;
      return literal;
    }
    if (c == '[') {
      ++pos_;
      bool negated = false;
      if (peek() == '^') negated = true, ++pos_;
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      while (peek() != ']') {
        if (at_end()) throw error_at(start, "unterminated character class");
        const size_t item = pos_;
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
          ++pos_;
          if (at_end()) throw error_at(start, "unterminated character class");
          hi = parse_char();
          if (hi < lo) throw error_at(item, "character range out of order");
        }
        ranges.emplace_back(lo, hi);
      }
      ++pos_;
      return {class_element(std::move(ranges), negated)};
    }
    if (c == '.') {
      ++pos_;
      return {class_element({{0, kMaxCodePoint}}, false)};
    }
    if (c == '(') {
      if (depth >= kMaxGroupDepth)
        throw error_at(start, "groups nested too deep (the limit is " + std::to_string(kMaxGroupDepth) + ")");
      ++pos_;
      std::vector<Sequence> alternatives = parse_alternatives(base, depth + 1);
      if (peek() != ')') throw expected("')' closing the group at " + line_column(start));
      ++pos_;
      if (alternatives.size() == 1) return std::move(alternatives[0]);
      const int helper = new_helper(base, start);
      rules_[size_t(helper)].alternatives = std::move(alternatives);
      return {Element{ElementKind::kRule, helper}};
    }
    if (is_name_char(c)) {
      const std::string name = parse_name();
      return {Element{ElementKind::kRule, rule_id(name, start)}};
    }
    throw expected("a literal, a character class, '.', '(' or a rule name");
  }

  uint32_t parse_bound() {
    uint64_t v = 0;
    const size_t start = pos_;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + uint64_t(peek() - '0');
      if (v > kMaxRepetitionBound)
        throw error_at(start, "repetition bound too large (the limit is " + std::to_string(kMaxRepetitionBound) + ")");
      ++pos_;
    }
    return uint32_t(v);
  }
  // {min, max}; max = UINT32_MAX for no bound.
  std::pair<uint32_t, uint32_t> parse_repetition() {
    const char op = text_[pos_++];
    if (op == '*') return {0, UINT32_MAX};
    if (op == '+') return {1, UINT32_MAX};
    if (op == '?') return {0, 1};
    const size_t start = pos_ - 1;
    skip_space();
    const bool has_min = peek() >= '0' && peek() <= '9';
    const uint32_t min = has_min ? parse_bound() : 0;
    skip_space();
    uint32_t max = min;
    if (peek() == ',') {
      ++pos_;
      skip_space();
      max = (peek() >= '0' && peek() <= '9') ? parse_bound() : UINT32_MAX;
      skip_space();
    } else if (!has_min) {
      throw expected("a number in the repetition at " + line_column(start));
    }
    if (peek() != '}') throw expected("'}' closing the repetition at " + line_column(start));
    ++pos_;
    if (max < min) throw error_at(start, "repetition {m,n} with n < m");
    return {min, max};
  }

  // atom{min,max} as llama.cpp expands it: `min` copies, then either a helper `h ::= atom h | ""` (no upper
  // bound) or max-min nested optional helpers `h_k ::= atom h_(k-1) | ""`.
  Sequence repeat(const std::string& base, Sequence atom, uint32_t min, uint32_t max, size_t where) {
    if (atom.size() != 1) {
      const int helper = new_helper(base, where);
      rules_[size_t(helper)].alternatives = {std::move(atom)};
      atom = {Element{ElementKind::kRule, helper}};
    }
    const Element item = atom[0];
    const uint64_t optional = max == UINT32_MAX ? 1 : uint64_t(max - min);
    count_elements(size_t(min) + size_t(optional) * 2, where);
    Sequence out(min, item);
    if (max == UINT32_MAX) {
      const int star = new_helper(base, where);
      rules_[size_t(star)].alternatives = {{item, Element{ElementKind::kRule, star}}, {}};
      out.push_back(Element{ElementKind::kRule, star});
    } else if (max > min) {
      int inner = -1;
      for (uint32_t k = 0; k < max - min; ++k) {
        const int helper = new_helper(base, where);
        Sequence first{item};
        if (inner >= 0) first.push_back(Element{ElementKind::kRule, inner});
        rules_[size_t(helper)].alternatives = {std::move(first), {}};
        inner = helper;
      }
      out.push_back(Element{ElementKind::kRule, inner});
    }
    return out;
  }

  // ---- left factoring ----
  // Alternatives of a rule that begin with the same terminal share it: `a ::= "x" t1 | "x" t2 | u` becomes
  // `a ::= "x" a-N | u` with `a-N ::= t1 | t2`, down the rule's shared prefixes. The language is the same, but a
  // long flat alternation (a choice list of 50k strings) no longer starts 50k parses at once: its first step
  // fans out to at most one parse per distinct first character. Terminals only, so no new left recursion (no
  // rule begins with a new helper).
  void factor_alternatives() {
    std::vector<int> pending;
    for (int r = 0; r < int(rules_.size()); ++r) pending.push_back(r);
    while (!pending.empty()) {
      const int r = pending.back();
      pending.pop_back();
      if (rules_[size_t(r)].alternatives.size() < 2) continue;
      std::vector<Sequence> alternatives = std::move(rules_[size_t(r)].alternatives);
      std::map<int32_t, std::vector<size_t>> by_first;  // class index -> alternatives beginning with it
      for (size_t i = 0; i < alternatives.size(); ++i)
        if (!alternatives[i].empty() && alternatives[i][0].kind == ElementKind::kClass)
          by_first[alternatives[i][0].value].push_back(i);
      std::vector<Sequence> factored;
      for (size_t i = 0; i < alternatives.size(); ++i) {
        if (alternatives[i].empty() || alternatives[i][0].kind != ElementKind::kClass) {
          factored.push_back(std::move(alternatives[i]));
          continue;
        }
        const std::vector<size_t>& group = by_first[alternatives[i][0].value];
        if (group.size() == 1) {
          factored.push_back(std::move(alternatives[i]));
          continue;
        }
        if (group[0] != i) continue;  // moved with its group's first
        const Element first = alternatives[i][0];
        std::vector<Sequence> tails;
        for (const size_t j : group) tails.emplace_back(alternatives[j].begin() + 1, alternatives[j].end());
        const std::string base = rules_[size_t(r)].helper_of.empty() ? rules_[size_t(r)].name : rules_[size_t(r)].helper_of;
        const int helper = new_helper(base, rules_[size_t(r)].where);
        rules_[size_t(helper)].alternatives = std::move(tails);
        factored.push_back(Sequence{first, Element{ElementKind::kRule, helper}});
        pending.push_back(helper);
      }
      rules_[size_t(r)].alternatives = std::move(factored);
    }
  }

  // ---- checks ----
  bool element_nullable(const Element& e) const {
    return e.kind == ElementKind::kRule && nullable_[size_t(e.value)];
  }
  void compute_nullable() {
    nullable_.assign(rules_.size(), 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (nullable_[r]) continue;
        for (const Sequence& alt : rules_[r].alternatives)
          if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) { return element_nullable(e); })) {
            nullable_[r] = 1;
            changed = true;
            break;
          }
      }
    }
  }
  // A cycle in "rule A may begin with rule B" (B at a position where everything before it can match nothing).
  void check_left_recursion() {
    std::vector<std::vector<int>> begins(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Sequence& alt : rules_[r].alternatives)
        for (const Element& e : alt) {
          if (e.kind == ElementKind::kRule) begins[r].push_back(e.value);
          if (!element_nullable(e)) break;
        }
    std::vector<uint8_t> color(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<int> path;
    // Iterative DFS: (rule, next edge index).
    for (size_t start = 0; start < rules_.size(); ++start) {
      if (color[start]) continue;
      std::vector<std::pair<int, size_t>> dfs{{int(start), 0}};
      color[start] = 1;
      while (!dfs.empty()) {
        auto& [r, i] = dfs.back();
        if (i == begins[size_t(r)].size()) {
          color[size_t(r)] = 2;
          dfs.pop_back();
          continue;
        }
        const int next = begins[size_t(r)][i++];
        if (color[size_t(next)] == 1) {
          std::string cycle;
          bool on = false;
          for (const auto& [rule, _] : dfs) {
            if (rule == next) on = true;
            if (on) cycle += rules_[size_t(rule)].name + " -> ";
          }
          cycle += rules_[size_t(next)].name;
          throw error_at(rules_[size_t(next)].where,
                         "left recursion (" + cycle + "): a rule reaches itself without consuming input");
        }
        if (color[size_t(next)] == 0) {
          color[size_t(next)] = 1;
          dfs.emplace_back(next, 0);
        }
      }
    }
  }

  std::shared_ptr<const Grammar> flatten() {
    auto g = std::make_shared<Grammar>();
    g->root_ = root_;
    g->classes_ = std::move(classes_);
    g->nullable_ = nullable_;
    g->alt_offsets_.push_back(0);
    for (size_t r = 0; r < rules_.size(); ++r) {
      g->rule_names_.push_back(rules_[r].name);
      for (const Sequence& alt : rules_[r].alternatives) {
        g->alt_starts_.push_back(int32_t(g->elements_.size()));
        g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
        g->elements_.push_back(Element{ElementKind::kEnd, int32_t(r)});
      }
      g->alt_offsets_.push_back(int32_t(g->alt_starts_.size()));
    }
    return g;
  }
};

std::shared_ptr<const Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  return GrammarBuilder(text, root).run();
}

}  // namespace inflight::engine::grammar
