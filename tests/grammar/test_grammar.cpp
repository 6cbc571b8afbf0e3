// engine/grammar/grammar.h and gbnf_parser.cpp: the GBNF parser's errors (each message checked), the IR it
// builds, what the grammar's constructs match (recognised through a Matcher over single-byte tokens), the size
// limits, and compile_cached.
#include <doctest/doctest.h>

#include <random>

#include "engine/grammar/grammar.h"
#include "grammar_test_support.h"

using namespace inflight;
using engine::grammar::compile_cached;
using engine::grammar::GrammarError;
using engine::grammar::parse_gbnf;

namespace {

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

// A vocabulary of the 256 single bytes: accept_bytes then decides exactly the grammar's language.
std::shared_ptr<const test::TokenVocab> bytes_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    return std::make_shared<const test::TokenVocab>(std::move(tokens), -1);
  }();
  return vocab;
}

bool matches(const std::string& gbnf, const std::string& text) {
  test::Matcher m(parse_gbnf(gbnf), bytes_vocab());
  return m.accept_bytes(text) && m.can_end();
}

}  // namespace

TEST_SUITE("grammar parser") {
  TEST_CASE("errors name what was expected and where (line:column)") {
    CHECK(error_of("") == "empty grammar: expected a rule `name ::= ...` at 1:1");
    CHECK(error_of("root ::= \"abc") == "unterminated literal at 1:10");
    CHECK(error_of("root ::= \"ab\ncd\"") == "unterminated literal (a newline inside \"...\") at 1:10");
    CHECK(error_of("root ::= [a-") == "unterminated character class at 1:10");
    CHECK(error_of("root ::= [z-a]") == "character range out of order at 1:11");
    CHECK(error_of("root ::= foo") == "undefined rule 'foo' at 1:10");
    CHECK(error_of("root ::= \"a\" )") == "unmatched ')' at 1:14");
    CHECK(error_of("root ::= (\"a\"") ==
          "expected ')' closing the group at 1:10, found the end of the grammar at 1:14");
    CHECK(error_of("root ::= (\"a\"\nx ::= \"b\")") == "expected ')', found 'x' at 2:1");
    CHECK(error_of("root ::= \"\\q\"") == "unknown escape '\\q' at 1:11");
    CHECK(error_of("root ::= \"\\x4\"") == "expected 2 hex digits in the escape at 1:11, found '\"' at 1:14");
    CHECK(error_of("root ::= \"\\uD800\"") == "escape names no Unicode scalar value at 1:11");
    CHECK(error_of("root \"a\"") == "expected '::=' after the rule name 'root', found '\"' at 1:6");
    CHECK(error_of("root ::= \"a\" | @") ==
          "expected a literal, a character class, '.', '(' or a rule name, found '@' at 1:16");
    CHECK(error_of("::= \"a\"") == "expected a rule name, found ':' at 1:1");
    CHECK(error_of("root ::= \"a\"\nroot ::= \"b\"") == "rule 'root' defined twice (first at 1:1) at 2:1");
    CHECK(error_of("start ::= \"a\"") == "no rule named 'root' (the start rule)");
    CHECK(error_of("root ::= \"a\"{3,1}") == "repetition {m,n} with n < m at 1:13");
    CHECK(error_of("root ::= \"a\"{x}") == "expected a number in the repetition at 1:13, found 'x' at 1:14");
    CHECK(error_of("root ::= \"a\"{2") == "expected '}' closing the repetition at 1:13, found the end of the grammar at 1:15");
    CHECK(error_of("root ::= \"a\"{9999999}") == "repetition bound too large (the limit is 100000) at 1:14");
    CHECK(error_of("root ::= \"\xC3\"") == "invalid UTF-8 in the grammar at 1:11");
    CHECK(error_of("root ::= \"\xC0\x80\"") == "invalid UTF-8 in the grammar at 1:11");
  }

  TEST_CASE("left recursion is refused, direct, indirect and behind parts that can match nothing") {
    CHECK(error_of("root ::= root \"a\" | \"b\"") ==
          "left recursion (root -> root): a rule reaches itself without consuming input at 1:1");
    CHECK(error_of("root ::= x\nx ::= y \"a\"\ny ::= \"b\" | x") ==
          "left recursion (x -> y -> x): a rule reaches itself without consuming input at 2:1");
    CHECK(error_of("root ::= e root \"a\" | \"b\"\ne ::= \"\"") ==
          "left recursion (root -> root): a rule reaches itself without consuming input at 1:1");
    // A repeated part that can match nothing: its helper rule reaches itself.
    CHECK(error_of("root ::= (\"a\"?)*").find("left recursion (root-") == 0);
    // Right recursion is fine.
    CHECK_NOTHROW(parse_gbnf("root ::= \"a\" root | \"\""));
  }

  TEST_CASE("size limits: text, elements after expansion") {
    const std::string big = "root ::= \"" + std::string(engine::grammar::kMaxGrammarBytes, 'a') + "\"";
    CHECK(error_of(big) == "grammar too large: " + std::to_string(big.size()) + " bytes (the limit is 1048576)");
    std::string many = "root ::=";
    for (int i = 0; i < 11; ++i) many += " \"x\"{100000}";
    CHECK(error_of(many).find("grammar too large: more than 1000000 elements after expanding repetitions") == 0);
  }

  TEST_CASE("groups nested past the limit are refused, not a stack overflow") {
    const std::string deep = "root ::= " + std::string(5000, '(') + "\"a\"" + std::string(5000, ')');
    CHECK(error_of(deep) == "groups nested too deep (the limit is 1000) at 1:1010");
    const std::string fine = "root ::= " + std::string(500, '(') + "\"a\"" + std::string(500, ')');
    CHECK(matches(fine, "a"));
  }

  TEST_CASE("alternatives sharing their first characters are factored: a long choice list starts few parses") {
    std::vector<std::string> words;
    std::string gbnf = "root ::= ";
    for (int i = 0; i < 30000; ++i) {
      words.push_back("w" + std::to_string(i * 7919 % 100000));
      gbnf += (i ? " | \"" : "\"") + words.back() + "\"";
    }
    gbnf += " | \"w1\" \"x\" | \"w\"";
    const auto g = parse_gbnf(gbnf);
    test::Matcher m(g, bytes_vocab());
    CHECK(m.num_stacks() == 1);  // all begin with 'w'
    CHECK(m.accept_bytes("w"));
    CHECK(m.can_end());  // "w" itself
    CHECK(m.num_stacks() == 10);  // a digit next
    for (const std::string& w : {words[0], words[123], words[29999], std::string("w1x")}) {
      CAPTURE(w);
      CHECK(matches(gbnf, w));
    }
    CHECK(!matches(gbnf, "w1y"));
    CHECK(!matches(gbnf, "x"));
    // The same language as without factoring, e.g. duplicates and a prefix of another alternative.
    CHECK(matches("root ::= \"ab\" | \"ab\" | \"a\" | \"abc\" [d-e]* | [a-b] \"z\"", "ab"));
    CHECK(matches("root ::= \"ab\" | \"ab\" | \"a\" | \"abc\" [d-e]* | [a-b] \"z\"", "abcde"));
    CHECK(matches("root ::= \"ab\" | \"ab\" | \"a\" | \"abc\" [d-e]* | [a-b] \"z\"", "bz"));
    CHECK(matches("root ::= \"ab\" | \"ab\" | \"a\" | \"abc\" [d-e]* | [a-b] \"z\"", "az"));
    CHECK(!matches("root ::= \"ab\" | \"ab\" | \"a\" | \"abc\" [d-e]* | [a-b] \"z\"", "abz"));
  }

  TEST_CASE("the IR: rules, helper rules for groups and repetitions, shared classes") {
    const auto g = parse_gbnf("root ::= (\"ab\" | [x-z])+ item?\nitem ::= \"a\"");
    CHECK(g->rule_name(g->root_rule()) == "root");
    CHECK(g->num_rules() >= 4);  // root, item, the group, the repetition's helpers
    // 'a' is one class, used by both literals.
    int num_a = 0;
    for (int c = 0; c < g->num_classes(); ++c)
      if (g->char_class(c).ranges == std::vector<std::pair<uint32_t, uint32_t>>{{'a', 'a'}}) ++num_a;
    CHECK(num_a == 1);
    CHECK(!g->nullable(g->root_rule()));
    const std::string printed = g->to_gbnf();
    CHECK(printed.rfind("root ::= ", 0) == 0);
    CHECK(printed.find("item ::= \"a\"") != std::string::npos);
  }

  TEST_CASE("literals, escapes, classes, negation, any") {
    CHECK(matches("root ::= \"abc\"", "abc"));
    CHECK(!matches("root ::= \"abc\"", "ab"));
    CHECK(!matches("root ::= \"abc\"", "abcd"));
    CHECK(matches("root ::= \"\\n\\t\\r\\\\\\\"\"", "\n\t\r\\\""));
    CHECK(matches("root ::= \"\\x41\\u00e9\\U0001F600\"", "A\xC3\xA9\xF0\x9F\x98\x80"));
    CHECK(matches("root ::= \"\xC3\xA9t\xC3\xA9\"", "\xC3\xA9t\xC3\xA9"));  // UTF-8 in the text
    CHECK(matches("root ::= [a-c0-9]", "b"));
    CHECK(matches("root ::= [a-c0-9]", "7"));
    CHECK(!matches("root ::= [a-c0-9]", "d"));
    CHECK(matches("root ::= [-a]", "-"));
    CHECK(matches("root ::= [a-]", "-"));
    CHECK(matches("root ::= [\\]\\[]", "]"));
    CHECK(!matches("root ::= [^a-c]", "b"));
    CHECK(matches("root ::= [^a-c]", "d"));
    CHECK(matches("root ::= [^a-c]", "\xE2\x82\xAC"));  // a negated class holds multi-byte characters
    CHECK(matches("root ::= [α-ω]", "\xCE\xB2"));        // β
    CHECK(!matches("root ::= [α-ω]", "a"));
    CHECK(matches("root ::= .", "\n"));
    CHECK(matches("root ::= .", "\xF0\x9F\x98\x80"));
    CHECK(!matches("root ::= .", "ab"));
    CHECK(!matches("root ::= .", "\xC3"));  // half a character is not a sentence
  }

  TEST_CASE("alternation, grouping, references, comments and layout") {
    const std::string g = R"(# comment
root ::= greeting ( " " name )+   # trailing comment
greeting ::=
  "hi"
  | "hello"
name ::= [A-Z] [a-z]*
)";
    CHECK(matches(g, "hi Bob"));
    CHECK(matches(g, "hello Ann Eve"));
    CHECK(!matches(g, "hello"));
    CHECK(!matches(g, "hey Bob"));
    CHECK(!matches(g, "hi bob"));
    CHECK(matches("root ::= \"\" | \"a\"", ""));
    CHECK(matches("root ::= (\"a\" | \"b\") (\"c\" | \"\")", "a"));
    CHECK(matches("root ::= (\"a\" | \"b\") (\"c\" | \"\")", "bc"));
  }

  TEST_CASE("repetition: * + ? {m} {m,} {m,n} {,n}") {
    CHECK(matches("root ::= \"a\"*", ""));
    CHECK(matches("root ::= \"a\"*", "aaaa"));
    CHECK(!matches("root ::= \"a\"+", ""));
    CHECK(matches("root ::= \"a\"+", "aaa"));
    CHECK(matches("root ::= \"a\"? \"b\"", "b"));
    CHECK(matches("root ::= \"a\"? \"b\"", "ab"));
    CHECK(!matches("root ::= \"a\"? \"b\"", "aab"));
    for (int n = 0; n <= 6; ++n) {
      const std::string text(size_t(n), 'a');
      CAPTURE(n);
      CHECK(matches("root ::= \"a\"{3}", text) == (n == 3));
      CHECK(matches("root ::= \"a\"{3,}", text) == (n >= 3));
      CHECK(matches("root ::= \"a\"{2,4}", text) == (n >= 2 && n <= 4));
      CHECK(matches("root ::= \"a\"{,2}", text) == (n <= 2));
      CHECK(matches("root ::= \"a\"{0}", text) == (n == 0));
    }
    // A repeated literal and group repeat as a whole.
    CHECK(matches("root ::= \"ab\"{2}", "abab"));
    CHECK(!matches("root ::= \"ab\"{2}", "aab"));
    CHECK(matches("root ::= (\"x\" | \"yz\"){2,3}", "yzxyz"));
    CHECK(matches("root ::= [0-9]{1,3} ( \",\" [0-9]{3} )*", "12,345,678"));
    CHECK(!matches("root ::= [0-9]{1,3} ( \",\" [0-9]{3} )*", "12,34"));
  }

  TEST_CASE("to_gbnf prints a grammar that parses to the same language") {
    const auto g = parse_gbnf(test::json_gbnf());
    const std::string printed = g->to_gbnf();
    for (const char* doc : {"{\"a\": [1, 2.5e3, true, null, \"x\\u00e9\"]}", "[]", " \"\xC3\xA9\" "}) {
      CAPTURE(doc);
      CHECK(matches(printed, doc));
      CHECK(matches(test::json_gbnf(), doc));
    }
    CHECK(!matches(printed, "{\"a\" 1}"));
  }

  TEST_CASE("random text: parse_gbnf either builds a grammar or throws GrammarError; what it builds prints and matches") {
    const std::vector<std::string> pieces = {"root", " ::= ", "a", "b", "x", " ", "\n", "|", "(", ")", "*", "+", "?",
                                             "{2}", "{1,3}", "{,2}", "{2,}", "\"", "\"ab\"", "[a-c]", "[^x]", ".",
                                             "\\", "\\x41", "#c\n", "\nx ::= ", "\na ::= ", "\"\"", "[", "]", "-",
                                             "\xC3\xA9", "{", "}", ",", "::="};
    std::mt19937 rng(17);
    int num_parsed = 0;
    for (int i = 0; i < 8000; ++i) {
      std::string text = rng() % 4 ? "root ::= " : "";
      for (int n = 1 + int(rng() % 12); n > 0; --n) text += pieces[rng() % pieces.size()];
      CAPTURE(text);
      std::shared_ptr<const engine::grammar::Grammar> g;
      try {
        g = parse_gbnf(text);
      } catch (const GrammarError&) {
        continue;
      }
      ++num_parsed;
      const auto again = parse_gbnf(g->to_gbnf());
      for (const char* input : {"", "a", "ab", "abab", "x", "\xC3\xA9"}) {
        test::Matcher m1(g, bytes_vocab()), m2(again, bytes_vocab());
        const bool a1 = m1.accept_bytes(input), a2 = m2.accept_bytes(input);
        CHECK(a1 == a2);
        CHECK((a1 && m1.can_end()) == (a2 && m2.can_end()));
      }
    }
    CHECK(num_parsed > 100);
  }

  TEST_CASE("a start rule other than root") {
    const auto g = parse_gbnf("root ::= \"r\"\nstart ::= \"s\"", "start");
    test::Matcher m(g, bytes_vocab());
    CHECK(m.accept_bytes("s"));
    CHECK(m.can_end());
  }

  TEST_CASE("compile_cached: one compiled grammar per text, least recently used out") {
    const auto a = compile_cached("root ::= \"cached-a\"");
    CHECK(compile_cached("root ::= \"cached-a\"") == a);
    CHECK(compile_cached("root ::= \"cached-b\"") != a);
    CHECK_THROWS_AS(compile_cached("root ::= nope"), GrammarError);
    for (size_t i = 0; i < engine::grammar::kGrammarCacheEntries + 1; ++i)
      compile_cached("root ::= \"filler-" + std::to_string(i) + "\"");
    CHECK(compile_cached("root ::= \"cached-a\"") != a);  // evicted, compiled again
  }
}
