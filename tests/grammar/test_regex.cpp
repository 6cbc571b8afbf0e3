// engine/grammar/regex.cpp and choice.cpp: regular expressions to GBNF, checked against std::regex (ECMAScript
// grammar) as the oracle over hand-picked and random patterns and strings; the refused constructs with their
// offsets; JSON-string mode; the decimal range automata against plain comparison; choice lists.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <random>
#include <regex>

#include "engine/grammar/choice.h"
#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "grammar_test_support.h"

using namespace inflight::engine::grammar;

namespace {

using inflight::test::single_bytes;

bool accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, single_bytes());
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(std::string_view pattern, RegexOptions options = {}) {
  try {
    regex_to_gbnf(pattern, options);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

// Every string over `alphabet` up to `max_len` characters.
std::vector<std::string> all_strings(const std::string& alphabet, size_t max_len) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0, len = 1; len <= max_len; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  return out;
}

// Compares the grammar of `pattern` (whole match, and search) with std::regex on `inputs`; returns the count
// of disagreements and reports the first few.
int compare_with_std_regex(const std::string& pattern, const std::vector<std::string>& inputs) {
  const std::regex oracle(pattern, std::regex::ECMAScript);
  RegexOptions search;
  search.search = true;
  const auto whole = parse_gbnf(regex_to_gbnf(pattern));
  const auto anywhere = parse_gbnf(regex_to_gbnf(pattern, search));
  int bad = 0;
  for (const std::string& s : inputs) {
    const bool want_whole = std::regex_match(s, oracle), want_search = std::regex_search(s, oracle);
    if (accepts(whole, s) != want_whole || accepts(anywhere, s) != want_search) {
      if (++bad <= 3) {
        MESSAGE("pattern /" << pattern << "/ on \"" << s << "\": std::regex match " << want_whole << " search "
                            << want_search);
      }
    }
  }
  return bad;
}

// A random completion of `g` over ASCII bytes through fill_mask (what a model could write), or nullopt when none
// ends within 40 bytes.
std::optional<std::string> random_completion(const std::shared_ptr<const Grammar>& g, std::mt19937& rng) {
  Matcher m(g, single_bytes(), 1);
  std::vector<uint32_t> mask(single_bytes()->size() / 32 + 1);
  std::string text;
  while (text.size() < 40) {
    if (m.can_end() && rng() % 3 == 0) return text;
    std::fill(mask.begin(), mask.end(), 0u);
    m.fill_mask(mask);
    std::vector<int> allowed;
    for (int b = 1; b < 128; ++b) {
      if ((mask[size_t(b) / 32] >> (b % 32)) & 1) allowed.push_back(b);
    }
    if (allowed.empty()) break;
    const int b = allowed[rng() % allowed.size()];
    REQUIRE(m.accept_token(b));
    text += char(b);
  }
  if (m.can_end()) return text;
  return std::nullopt;
}

}  // namespace

TEST_SUITE("regex to GBNF") {
  TEST_CASE("hand-picked patterns agree with std::regex on every short string") {
    const std::vector<std::string> inputs = all_strings("ab1-.", 4);
    const char* patterns[] = {
        "a", "ab", "a|b", "a*", "a+", "a?", "a{2}", "a{1,3}", "a{2,}", "(ab)*", "(?:a|b)+1", "[ab]", "[^ab]",
        "[a-b1]", "\\d", "\\D", "\\w+", "\\W", "\\s*", "\\S{2}", ".", "a.b", "^a", "a$", "^a$", "^ab|b$",
        "a*?", "a+?b", "a??", "a{1,2}?", "\\.", "\\-", "[.]", "[-a]", "[a-]", "[\\d.]", "[^\\d]", "[\\w-]",
        "(a|)b", "(a|b|)", "(a)(b)?", "((a|b)1)+", "a{0}", "a{0,0}b", "-?\\d+(\\.\\d+)?", "",
        "\\x61", "\\u0062", "[\\x61-\\x62]", "a|", "|a", "[^]", "(?:)", "a{3}|b{2,3}", "(a{2}){2}",
        "\\d{2}-\\d", "b]", "a}"};
    for (const char* p : patterns) {
      CAPTURE(p);
      CHECK(compare_with_std_regex(p, inputs) == 0);
    }
  }

  TEST_CASE("random patterns agree with std::regex on random and exhaustive strings") {
    std::mt19937 rng(1234);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    // Atoms over the alphabet "abc"; a group may hold an alternation. Repeating a group that can match nothing
    // with an unbounded quantifier is refused (GBNF cannot loop on it), so such patterns are counted and skipped.
    std::function<std::string(int)> gen = [&](int depth) -> std::string {
      std::string out;
      const int alternatives = depth > 0 && pick(3) == 0 ? 2 : 1;
      for (int a = 0; a < alternatives; ++a) {
        if (a > 0) out += '|';
        const int n = 1 + pick(3);
        for (int i = 0; i < n; ++i) {
          const int k = pick(depth < 2 ? 9 : 7);
          const char* atoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "\\w"};
          std::string atom = k < 7 ? atoms[k] : (pick(2) ? "(" : "(?:") + gen(depth + 1) + ")";
          const char* quantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,2}", "{2,}", "*?"};
          out += atom + quantifiers[pick(11)];
        }
      }
      return out;
    };
    const std::vector<std::string> exhaustive = all_strings("abc", 4);
    int compared = 0, refused = 0, bad_total = 0;
    for (int round = 0; round < 250; ++round) {
      const std::string pattern = gen(0);
      std::vector<std::string> inputs = exhaustive;
      for (int i = 0; i < 40; ++i) {
        std::string s;
        const int len = pick(9);
        for (int c = 0; c < len; ++c) s += "abcd"[pick(4)];
        inputs.push_back(s);
      }
      try {
        regex_to_gbnf(pattern);
      } catch (const GrammarError& e) {
        CHECK(std::string(e.what()).find("can match the empty string") != std::string::npos);
        ++refused;
        continue;
      }
      CAPTURE(pattern);
      bad_total += compare_with_std_regex(pattern, inputs);
      ++compared;
      // The other direction: whatever the grammar lets a model write, std::regex matches.
      const auto g = parse_gbnf(regex_to_gbnf(pattern));
      const std::regex oracle(pattern, std::regex::ECMAScript);
      for (int walk = 0; walk < 10; ++walk) {
        const auto text = random_completion(g, rng);
        if (!text) continue;
        CAPTURE(*text);
        CHECK(std::regex_match(*text, oracle));
      }
    }
    CHECK(bad_total == 0);
    CHECK(compared > 200);
    MESSAGE(compared << " random patterns compared, " << refused << " refused");
  }

  TEST_CASE("ECMAScript's Annex B forms std::regex lacks: named groups, a '{' that is no quantifier") {
    const auto named = parse_gbnf(regex_to_gbnf("(?<x>a)b"));
    CHECK(accepts(named, "ab"));
    CHECK(!accepts(named, "a"));
    const auto brace = parse_gbnf(regex_to_gbnf("a{|a{1|a{,2}"));
    CHECK(accepts(brace, "a{"));
    CHECK(accepts(brace, "a{1"));
    CHECK(accepts(brace, "a{,2}"));
    CHECK(!accepts(brace, "a"));
  }

  TEST_CASE("refused constructs name themselves and their offset") {
    CHECK(error_of("(a)\\1") == "regex: backreference \\1 is not supported at offset 3");
    CHECK(error_of("(?<n>a)\\k<n>") == "regex: backreference \\k<name> is not supported at offset 7");
    CHECK(error_of("a(?=b)") == "regex: lookaround assertion is not supported at offset 1");
    CHECK(error_of("a(?!b)") == "regex: lookaround assertion is not supported at offset 1");
    CHECK(error_of("(?<=a)b") == "regex: lookaround assertion is not supported at offset 0");
    CHECK(error_of("(?<!a)b") == "regex: lookaround assertion is not supported at offset 0");
    CHECK(error_of("a\\bc") == "regex: word boundary \\b is not supported at offset 1");
    CHECK(error_of("a^b") == "regex: anchor '^' inside the pattern is not supported at offset 1");
    CHECK(error_of("a$b") == "regex: anchor '$' inside the pattern is not supported at offset 1");
    CHECK(error_of("(^a)") == "regex: anchor '^' inside the pattern is not supported at offset 1");
    CHECK(error_of("\\p{L}") == "regex: Unicode property escape \\p{...} is not supported at offset 0");
    CHECK(error_of("\\q") == "regex: unknown escape \\q at offset 0");
    CHECK(error_of("*a") == "regex: nothing to repeat at offset 0");
    CHECK(error_of("a**") == "regex: nothing to repeat at offset 2");
    CHECK(error_of("(a") == "regex: missing ')' at offset 2");
    CHECK(error_of("a)") == "regex: unmatched ')' at offset 1");
    CHECK(error_of("[a") == "regex: missing ']' at offset 0");
    CHECK(error_of("[b-a]") == "regex: range out of order in character class at offset 2");
    CHECK(error_of("[]") == "regex: a character class that matches nothing at offset 0");
    CHECK(error_of("a{3,2}") == "regex: quantifier {m,n} with m > n at offset 6");
    CHECK(error_of("a{10001}") == "regex: repetition count above 10000 at offset 8");
    CHECK(error_of("(a?)*") == "regex: a repetition of something that can match the empty string is not supported at offset 5");
    CHECK(error_of("\\x4") == "regex: malformed hexadecimal escape at offset 0");
    CHECK(error_of("\xC3") == "regex: invalid UTF-8");
    // Deep nesting is an error, not a stack overflow.
    CHECK(error_of(std::string(20000, '(') + "a" + std::string(20000, ')')) ==
          "regex: groups nested deeper than 256 at offset 256");
    CHECK(error_of(std::string(256, '(') + "a" + std::string(256, ')')) == "(no error)");
  }

  TEST_CASE("Unicode: classes and '.' are over code points") {
    const auto dot = parse_gbnf(regex_to_gbnf("a.c"));
    CHECK(accepts(dot, "a\xC3\xA9" "c"));          // U+00E9 is one character
    CHECK(accepts(dot, "a\xF0\x9F\x98\x80" "c"));  // U+1F600 too
    CHECK(!accepts(dot, "a\nc"));
    const auto cls = parse_gbnf(regex_to_gbnf("[\\u00e0-\\u00ff]+|\\u{1F600}"));
    CHECK(accepts(cls, "\xC3\xA9\xC3\xA0"));
    CHECK(accepts(cls, "\xF0\x9F\x98\x80"));
    CHECK(!accepts(cls, "e"));
    const auto lit = parse_gbnf(regex_to_gbnf("\xC3\xA9t\xC3\xA9"));
    CHECK(accepts(lit, "\xC3\xA9t\xC3\xA9"));
  }

  TEST_CASE("JSON-string mode matches characters in their JSON spelling") {
    RegexOptions json;
    json.json_string = true;
    const auto quote = parse_gbnf(regex_to_gbnf("a\"b\\\\c/", json));
    CHECK(accepts(quote, "a\\\"b\\\\c/"));
    CHECK(accepts(quote, "a\\\"b\\\\c\\/"));
    CHECK(!accepts(quote, "a\"b\\\\c/"));
    const auto controls = parse_gbnf(regex_to_gbnf("[\\n\\t\\x01]+", json));
    CHECK(accepts(controls, "\\n\\t\\u0001\\u0001"));
    CHECK(!accepts(controls, "\n"));
    const auto any = parse_gbnf(regex_to_gbnf("^[^a]$", json));
    CHECK(accepts(any, "\\\""));
    CHECK(accepts(any, "\\u001f"));
    CHECK(accepts(any, "\\u001F"));
    CHECK(accepts(any, "b"));
    CHECK(!accepts(any, "a"));
    CHECK(!accepts(any, "\""));
    json.search = true;
    const auto search = parse_gbnf(regex_to_gbnf("x", json));
    CHECK(accepts(search, "\\u0041x\\n"));
    CHECK(!accepts(search, "\\u0041\\n"));
  }

  TEST_CASE("the root and helper rule names come from the options") {
    RegexOptions o;
    o.root = "pat";
    o.rule_prefix = "pat";
    o.search = true;
    o.json_string = true;
    const std::string gbnf = regex_to_gbnf("a", o);
    CHECK(gbnf.rfind("pat ::= ", 0) == 0);
    CHECK(gbnf.find("pat-char ::= ") != std::string::npos);
  }
}

TEST_SUITE("decimal ranges") {
  // The range grammars as a root rule, against direct comparison.
  std::shared_ptr<const Grammar> range_grammar(const NumberBounds& b, bool integer) {
    return parse_gbnf("root ::= " + (integer ? integer_range_gbnf(b) : number_range_gbnf(b)) + "\n");
  }

  TEST_CASE("integer ranges accept exactly the integers in range") {
    std::mt19937 rng(7);
    const double edges[] = {-1000, -101, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1234, 4321};
    int checked = 0;
    for (int round = 0; round < 60; ++round) {
      NumberBounds b;
      std::optional<double> lo, hi;
      const int shape = round % 4;
      lo = edges[rng() % 19] + (round % 7 == 0 ? 0.5 : 0);
      hi = edges[rng() % 19] + (round % 5 == 0 ? -0.25 : 0);
      if (*lo > *hi) std::swap(lo, hi);
      if (shape == 1) lo.reset();
      if (shape == 2) hi.reset();
      const bool ex_lo = rng() % 2, ex_hi = rng() % 2;
      (ex_lo ? b.exclusive_minimum : b.minimum) = lo;
      (ex_hi ? b.exclusive_maximum : b.maximum) = hi;
      auto in_range = [&](long v) {
        return (!lo || (ex_lo ? v > *lo : v >= *lo)) && (!hi || (ex_hi ? v < *hi : v <= *hi));
      };
      std::shared_ptr<const Grammar> g;
      try {
        g = range_grammar(b, true);
      } catch (const GrammarError&) {
        bool any = false;
        for (long v = -1200; v <= 5000; ++v) any = any || in_range(v);
        CHECK_MESSAGE(!any, "refused a non-empty range");
        continue;
      }
      for (long v = -1200; v <= 5000; v += (v > -150 && v < 150) ? 1 : 7) {
        CAPTURE(v);
        CAPTURE(integer_range_gbnf(b));
        CHECK(accepts(g, std::to_string(v)) == in_range(v));
        ++checked;
      }
      CHECK(!accepts(g, "007"));
      CHECK(!accepts(g, "1.0"));
    }
    CHECK(checked > 20000);
  }

  TEST_CASE("number ranges accept exactly the decimals in range") {
    const std::vector<std::array<std::optional<double>, 4>> cases = {
        {0.0, std::nullopt, std::nullopt, std::nullopt},   {std::nullopt, 1.5, std::nullopt, std::nullopt},
        {-2.25, 3.75, std::nullopt, std::nullopt},         {std::nullopt, std::nullopt, 0.0, 10.0},
        {std::nullopt, std::nullopt, -1.1, std::nullopt},  {std::nullopt, std::nullopt, std::nullopt, -0.5},
        {1.0, 2.0, std::nullopt, std::nullopt},            {-3.0, -1.0, std::nullopt, std::nullopt},
        {std::nullopt, 0.0, std::nullopt, std::nullopt},   {std::nullopt, std::nullopt, std::nullopt, 0.0},
        {0.05, 12.125, std::nullopt, std::nullopt},        {std::nullopt, std::nullopt, -12.5, -0.05},
        {2.0, 2.0, std::nullopt, std::nullopt},            {-0.0001, 0.0001, std::nullopt, std::nullopt},
        {1.25, 1.5, std::nullopt, std::nullopt},           {std::nullopt, std::nullopt, 0.1, 0.9},
        {-0.9, std::nullopt, std::nullopt, -0.1},          {0.0, std::nullopt, std::nullopt, 0.5},
        {2.5, 2.5, std::nullopt, std::nullopt},            {std::nullopt, 7.125, 7.0, std::nullopt},
        {0.05, 0.055, std::nullopt, std::nullopt},         {std::nullopt, std::nullopt, 3.1, 3.12},
        {0.0, 0.0, std::nullopt, std::nullopt},            {-3.0, -3.0, std::nullopt, std::nullopt}};
    std::vector<std::string> texts;
    for (int i = -1300; i <= 1300; ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f", i / 100.0);
      texts.push_back(buf);
      std::snprintf(buf, sizeof buf, "%d", i / 100);
      texts.push_back(buf);
      std::snprintf(buf, sizeof buf, "%.3f", i / 1000.0 + 0.0005);
      texts.push_back(buf);
    }
    for (const char* t : {"1.25", "1.250", "1.2501", "1.2499", "1.5", "1.50", "1.5001", "0.1", "0.10", "0.1001", "0.9",
                          "0.8999", "-0.1", "-0.9", "-0.90", "-0.9001", "7", "7.0", "7.00001", "7.125", "7.1251",
                          "0.05", "0.055", "0.0550", "0.0551", "0.0549", "3.1", "3.10", "3.1001", "3.12", "3.119",
                          "2.5", "2.50", "2.5001", "0", "-0", "0.0001", "-0.0001", "0.00010", "0.00011", "2.0", "2.000", "2.001", "1.999",
                          "3.75", "3.750", "3.7501", "-2.25", "-2.2500", "-2.2501", "12.125", "12.1251", "0.05",
                          "0.0499", "-0.05", "-0.050", "-12.5", "-12.50", "-12.49"}) {
      texts.push_back(t);
    }
    for (const auto& c : cases) {
      NumberBounds b;
      b.minimum = c[0];
      b.maximum = c[1];
      b.exclusive_minimum = c[2];
      b.exclusive_maximum = c[3];
      const auto g = range_grammar(b, false);
      for (const std::string& t : texts) {
        const double v = std::stod(t);
        const bool want = (!c[0] || v >= *c[0]) && (!c[1] || v <= *c[1]) && (!c[2] || v > *c[2]) && (!c[3] || v < *c[3]);
        CAPTURE(t);
        CAPTURE(number_range_gbnf(b));
        CHECK(accepts(g, t) == want);
      }
      CHECK(!accepts(g, "1e0"));
      CHECK(!accepts(g, "0."));
      CHECK(!accepts(g, "2."));
    }
  }

  TEST_CASE("bounds past 1e18 and empty ranges are refused") {
    NumberBounds huge;
    huge.maximum = 1e19;
    CHECK_THROWS_AS(integer_range_gbnf(huge), GrammarError);
    NumberBounds empty;
    empty.minimum = 5;
    empty.exclusive_maximum = 5;
    CHECK_THROWS_AS(number_range_gbnf(empty), GrammarError);
    CHECK_THROWS_AS(integer_range_gbnf(empty), GrammarError);
    NumberBounds point;  // one value, an end exclusive
    point.minimum = 1.25;
    point.exclusive_maximum = 1.25;
    CHECK_THROWS_AS(number_range_gbnf(point), GrammarError);
  }

  TEST_CASE("js_number writes numbers as JSON.stringify does") {
    CHECK(js_number(1) == "1");
    CHECK(js_number(-0.0) == "0");
    CHECK(js_number(1.5) == "1.5");
    CHECK(js_number(0.1) == "0.1");
    CHECK(js_number(1e21) == "1e+21");
    CHECK(js_number(1e20) == "100000000000000000000");
    CHECK(js_number(1.5e-7) == "1.5e-7");
    CHECK(js_number(0.000001) == "0.000001");
    CHECK(js_number(-2.5e300) == "-2.5e+300");
  }
}

TEST_SUITE("choice") {
  TEST_CASE("exactly one of the choices") {
    const auto g = parse_gbnf(choice_to_gbnf({"yes", "no", "a \"quoted\"\n\\ one", "\xC3\xA9t\xC3\xA9", ""}));
    CHECK(accepts(g, "yes"));
    CHECK(accepts(g, "no"));
    CHECK(accepts(g, "a \"quoted\"\n\\ one"));
    CHECK(accepts(g, "\xC3\xA9t\xC3\xA9"));
    CHECK(accepts(g, ""));
    CHECK(!accepts(g, "ye"));
    CHECK(!accepts(g, "yesno"));
  }

  TEST_CASE("an empty list and invalid UTF-8 are errors") {
    CHECK_THROWS_WITH_AS(choice_to_gbnf({}), "choice: the list of choices is empty", GrammarError);
    CHECK_THROWS_AS(choice_to_gbnf({"\xC3"}), GrammarError);
  }

  TEST_CASE("GBNF helpers escape what GBNF needs") {
    CHECK(gbnf_literal("a\"b\\c\n\x01") == "\"a\\\"b\\\\c\\n\\x01\"");
    CHECK(gbnf_class({{'a', 'z'}}) == "[a-z]");
    CHECK(gbnf_class({{'-', '-'}, {']', '^'}}) == "[\\x2D\\x5D\\x5E]");
    CHECK(gbnf_class({{'a', 'c'}, {0x2028, 0x2029}}) == "[a-c\\u2028\\u2029]");
    CHECK(gbnf_class({{0, 0x60}, {0x62, 0x10FFFF}}) == "[^a]");
    CHECK(gbnf_class({{0, 0x10FFFF}}) == ".");
    CHECK(gbnf_alternation({"\"a\"", "", "\"b\""}) == "(\"a\" | \"b\")?");
  }
}
