// engine/grammar/matcher.h: UTF-8 across tokens, EOS, rollback, forks, jump-forward bytes, the ambiguity limit,
// and fill_mask against the brute-force mask (every token tried with accept_token on a copy) over stories260K's
// sentencepiece vocabulary and a synthetic byte-level one, with and without the mask cache; a JSON grammar
// against valid and invalid documents.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "engine/grammar/mask_cache.h"
#include "engine/grammar/stack_walker.h"
#include "grammar_test_support.h"
#include "tiny_tokenizer.h"

using namespace inflight;
using engine::grammar::GrammarError;
using engine::grammar::parse_gbnf;
using test::Matcher;
using test::TokenVocab;

namespace {

// Single bytes plus a few multi-byte tokens (two of them duplicates of single bytes); EOS is the last id.
std::shared_ptr<const TokenVocab> small_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
    for (const char* t : {"ab", "abc", "\xC3\xA9", "x\xC3", "\xA9y", "\xCE\xB2\xCE", "\xB3", "hello", "\":", "{\"", "}", "!"})
      tokens.emplace_back(t);
    tokens.emplace_back("<eos>");
    return std::make_shared<const TokenVocab>(std::move(tokens), int32_t(tokens.size()) - 1);
  }();
  return vocab;
}
int32_t id_of(const TokenVocab& vocab, const std::string& bytes) {
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.token_bytes(id) == bytes && !vocab.is_special(id)) return id;
  FAIL("no token " << bytes);
  return -1;
}
bool bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[size_t(id) / 32] >> (id % 32)) & 1; }

// Random walks through `gbnf` over `vocab`: at every step the cached mask, the uncached mask and the
// brute-force mask (when `brute` says so) agree, allows() agrees with the mask, and so do the forced bytes.
// Under AddressSanitizer a quarter of the random walks and grammars: their brute-force masks took minutes there
// (scripts/sanitize.sh); the Release run checks them all.
#ifdef __SANITIZE_ADDRESS__
constexpr int kWalkDivisor = 4;
#else
constexpr int kWalkDivisor = 1;
#endif

void check_masks_on_random_walks(const std::string& gbnf, const std::shared_ptr<const TokenVocab>& vocab,
                                 int num_walks, int num_steps, bool brute, uint32_t seed) {
  num_walks = std::max(1, num_walks / kWalkDivisor);
  const auto grammar = parse_gbnf(gbnf);
  std::mt19937 rng(seed);
  int num_checked = 0;
  for (int walk = 0; walk < num_walks; ++walk) {
    Matcher m(grammar, vocab);
    for (int step = 0; step < num_steps; ++step) {
      const std::vector<uint32_t> cached = test::mask_of(m, true);
      const std::vector<uint32_t> uncached = test::mask_of(m, false);
      CAPTURE(walk);
      CAPTURE(step);
      REQUIRE(cached == uncached);
      if (brute) REQUIRE(cached == test::brute_force_mask(m));
      for (int k = 0; k < 20; ++k) {
        const auto id = int32_t(rng() % uint32_t(vocab->size()));
        REQUIRE(m.allows(id) == bit(cached, id));
      }
      // Every allowed token agrees with the forced bytes (one is a prefix of the other), and they are accepted.
      const std::string forced = m.forced_bytes();
      if (!forced.empty()) {
        for (const int32_t id : test::allowed_ids(cached)) {
          REQUIRE(id != vocab->eos_id());
          const std::string& t = vocab->token_bytes(id);
          REQUIRE(forced.compare(0, std::min(forced.size(), t.size()), t, 0, std::min(forced.size(), t.size())) == 0);
        }
        Matcher copy = m;
        REQUIRE(copy.accept_bytes(forced));
      }
      ++num_checked;
      if (!test::step_randomly(m, rng)) break;
    }
  }
  CHECK(num_checked > num_walks);
}

}  // namespace

TEST_SUITE("grammar matcher") {
  TEST_CASE("UTF-8: a class matches a whole code point, also across tokens") {
    const auto vocab = small_vocab();
    Matcher m(parse_gbnf("root ::= \"x\" [\xC3\xA0-\xC3\xBF] \"y\""), vocab);  // x [à-ÿ] y
    // "x\xC3" ends inside é; "\xA9y" finishes it.
    CHECK(m.accept_token(id_of(*vocab, "x\xC3")));
    CHECK(!m.can_end());
    CHECK(m.allows(id_of(*vocab, "\xB3")));  // 0xC3 0xB3 = ó, in the class too
    CHECK(!m.allows(id_of(*vocab, "y")));    // not a continuation byte
    for (const bool cached : {true, false}) {  // inside a character: the bytes 0xA0-0xBF, "\xB3" again, "\xA9y"
      const auto mask = test::mask_of(m, cached);
      CHECK(mask == test::brute_force_mask(m));
      CHECK(test::allowed_ids(mask).size() == 34);
    }
    CHECK(m.accept_token(id_of(*vocab, "\xA9y")));
    CHECK(m.can_end());

    Matcher greek(parse_gbnf("root ::= [α-ω]+"), vocab);
    CHECK(!greek.accept_bytes("\xC3"));  // no Greek letter starts with 0xC3: refused at the first byte
    CHECK(greek.accept_token(id_of(*vocab, "\xCE\xB2\xCE")));  // β and half of the next letter
    CHECK(!greek.can_end());
    CHECK(greek.accept_token(id_of(*vocab, "\xB3")));  // γ
    CHECK(greek.can_end());

    Matcher any(parse_gbnf("root ::= .+"), vocab);
    CHECK(!any.accept_bytes("\xC0\x80"));      // overlong
    CHECK(!any.accept_bytes("\xED\xA0\x80"));  // a surrogate
    CHECK(!any.accept_bytes("\xE0\x80"));      // overlong three-byte form, refused at its second byte
    CHECK(!any.accept_bytes("\x80"));          // a lone continuation byte
    CHECK(!any.accept_bytes("\xF5"));          // past U+10FFFF
    CHECK(any.accept_bytes("\xF0\x9F\x98"));
    CHECK(!any.can_end());
    CHECK(!any.accept_bytes("a"));  // the character is not finished
    CHECK(any.accept_bytes("\x80"));
    CHECK(any.can_end());
  }

  TEST_CASE("EOS only where the grammar is complete; nothing after it") {
    const auto vocab = small_vocab();
    const int32_t eos = vocab->eos_id();
    Matcher m(parse_gbnf("root ::= \"ab\" \"c\"?"), vocab);
    CHECK(!m.allows(eos));
    CHECK(!m.accept_token(eos));
    CHECK(m.accept_token(id_of(*vocab, "ab")));
    CHECK(m.can_end());
    auto mask = test::mask_of(m);
    CHECK(bit(mask, eos));
    CHECK(bit(mask, id_of(*vocab, "c")));
    CHECK(test::allowed_ids(mask).size() == 2);
    CHECK(m.accept_token(eos));
    CHECK(m.is_terminated());
    CHECK(!m.can_end());
    CHECK(test::allowed_ids(test::mask_of(m)).empty());
    CHECK(!m.accept_token(id_of(*vocab, "c")));
    CHECK(!m.accept_token(eos));
    m.rollback(1);
    CHECK(!m.is_terminated());
    CHECK(m.accept_token(id_of(*vocab, "c")));
  }

  TEST_CASE("tokens with the same bytes get the same verdict (sorted neighbours in the walk)") {
    const auto vocab = small_vocab();
    std::vector<int32_t> braces, bangs;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (vocab->token_bytes(id) == "}") braces.push_back(id);
      if (vocab->token_bytes(id) == "!") bangs.push_back(id);
    }
    REQUIRE(braces.size() == 2);
    REQUIRE(bangs.size() == 2);
    // "}" completes the sentence (nothing may follow it): no token longer than it survives its first byte.
    Matcher m(parse_gbnf("root ::= \"{\" [a-z]* \"}\" | \"!\" \"x\""), vocab);
    CHECK(m.accept_bytes("{ab"));
    for (const bool cached : {true, false}) {
      const auto mask = test::mask_of(m, cached);
      CHECK(mask == test::brute_force_mask(m));
      CHECK(bit(mask, braces[0]));
      CHECK(bit(mask, braces[1]));
    }
    Matcher start(parse_gbnf("root ::= \"{\" [a-z]* \"}\" | \"!\" \"x\""), vocab);
    for (const bool cached : {true, false}) {
      const auto mask = test::mask_of(start, cached);
      CHECK(mask == test::brute_force_mask(start));
      CHECK(bit(mask, bangs[0]));
      CHECK(bit(mask, bangs[1]));
    }
  }

  TEST_CASE("special tokens are never allowed") {
    const auto vocab = test::stories_vocab();
    Matcher m(parse_gbnf("root ::= .*"), vocab);
    const auto mask = test::mask_of(m);
    CHECK(vocab->is_special(0));  // <unk>
    CHECK(vocab->is_special(1));  // <s>
    CHECK(!bit(mask, 0));
    CHECK(!bit(mask, 1));
    CHECK(bit(mask, vocab->eos_id()));
    CHECK(!m.accept_token(1));
    // All but <unk>, <s> and the byte tokens that cannot begin a UTF-8 character (0x80-0xC1, 0xF5-0xFF).
    CHECK(int(test::allowed_ids(mask).size()) == vocab->size() - 2 - 66 - 11);
  }

  TEST_CASE("rollback undoes accepted tokens; the history is bounded") {
    const auto vocab = small_vocab();
    const auto g = parse_gbnf("root ::= [a-c]+ \"!\"");
    Matcher m(g, vocab, 3);
    CHECK(m.num_rollback_tokens() == 0);
    const auto start = test::mask_of(m);
    CHECK(m.accept_token(id_of(*vocab, "a")));
    const auto after_a = test::mask_of(m);
    CHECK(m.accept_token(id_of(*vocab, "b")));
    CHECK(m.accept_token(id_of(*vocab, "!")));
    CHECK(m.can_end());
    m.rollback(2);
    CHECK(test::mask_of(m) == after_a);
    CHECK(!m.can_end());
    m.rollback(1);
    CHECK(test::mask_of(m) == start);
    // Only the last 3 are kept.
    for (const char* t : {"a", "b", "c", "a", "b"}) CHECK(m.accept_token(id_of(*vocab, t)));
    CHECK(m.num_rollback_tokens() == 3);
    m.rollback(3);
    CHECK(m.num_rollback_tokens() == 0);
    CHECK(m.accept_token(id_of(*vocab, "!")));  // "ab" then "!"
    CHECK(m.can_end());
  }

  TEST_CASE("fork: a copy diverges from the original") {
    const auto vocab = small_vocab();
    Matcher a(parse_gbnf("root ::= \"x\" ( \"1\" | \"2\" ) \"y\""), vocab);
    CHECK(a.accept_bytes("x"));
    Matcher b = a;
    CHECK(a.accept_bytes("1"));
    CHECK(b.accept_bytes("2"));
    CHECK(!a.allows(id_of(*vocab, "1")));
    CHECK(a.accept_bytes("y"));
    CHECK(a.can_end());
    CHECK(!b.can_end());
    CHECK(b.accept_bytes("y"));
    CHECK(b.can_end());
    b.rollback(2);
    CHECK(b.accept_bytes("1y"));
  }

  TEST_CASE("forced_bytes: what every continuation starts with") {
    const auto vocab = small_vocab();
    Matcher m(parse_gbnf("root ::= \"{\\\"name\\\": \\\"\" [a-z]+ \"\\\", \\\"\xC3\xA9t\xC3\xA9\\\": \" ( \"1\" | \"2\" ) \"}\""),
              vocab);
    CHECK(m.forced_bytes() == "{\"name\": \"");
    CHECK(m.accept_bytes("{\"name\": \"bob"));
    CHECK(m.forced_bytes().empty());  // more letters or the quote
    CHECK(m.accept_bytes("\""));
    CHECK(m.forced_bytes() == ", \"\xC3\xA9t\xC3\xA9\": ");
    CHECK(m.accept_bytes(", \"\xC3"));  // inside é: the forced bytes finish it
    CHECK(m.forced_bytes() == "\xA9t\xC3\xA9\": ");
    CHECK(m.accept_bytes("\xA9t\xC3\xA9\": 2"));
    CHECK(m.forced_bytes() == "}");
    CHECK(m.accept_bytes("}"));
    CHECK(m.forced_bytes().empty());  // complete: EOS may come
  }

  TEST_CASE("ambiguous grammars: stacks are deduplicated; a grammar whose parses multiply hits the limit") {
    const auto vocab = small_vocab();
    Matcher m(parse_gbnf("root ::= ( \"a\" | \"a\" | [a-z] | x )*\nx ::= \"a\" | \"a\" \"a\""), vocab);
    for (int i = 0; i < 200; ++i) REQUIRE(m.accept_bytes("a"));
    CHECK(m.num_stacks() <= 8);
    CHECK(m.can_end());
    // Every 'a' pushes one of two continuations: 2^n distinct stacks, each with 2 tops (the next "a", shared by
    // both alternatives once factored, or the continuation once root matches nothing).
    Matcher blowup(parse_gbnf("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"\""), vocab);
    CHECK(blowup.accept_bytes(std::string(10, 'a')));
    CHECK(blowup.num_stacks() == 2 * 1024);
    std::string message;
    try {
      blowup.accept_bytes(std::string(10, 'a'));
    } catch (const GrammarError& e) {
      message = e.what();
    }
    CHECK(message == "grammar too ambiguous: more than 20000 parses alive at once");
    CHECK(blowup.num_stacks() == 2 * 1024);  // unchanged
    // The walk cut short leaves nothing behind for the next one on this thread.
    Matcher other(parse_gbnf("root ::= \"x\" [a-c]"), vocab);
    CHECK(other.num_stacks() == 1);
    CHECK(test::mask_of(other) == test::brute_force_mask(other));
    CHECK(other.accept_bytes("xb"));
    CHECK(other.can_end());
  }

  TEST_CASE("JSON grammar: valid documents accepted, invalid ones refused") {
    const auto vocab = small_vocab();
    const auto g = parse_gbnf(test::json_gbnf());
    auto accepts = [&](const std::string& doc) {
      Matcher m(g, vocab);
      return m.accept_bytes(doc) && m.can_end();
    };
    for (const char* doc :
         {"{}", "[]", "0", "-0.5e+10", "\"\"", "true", " null ", "{\"a\":1}", "{ \"a\" : [ 1 , 2 , {\"b\": false} ] }",
          "[\"\\u00e9\\n\\\"\", \"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"]", "\n[\t1,\r2 ]\n", "123.456E-7",
          "{\"k\": {\"k\": {\"k\": [[[[]]]]}}}"}) {
      CAPTURE(doc);
      CHECK(accepts(doc));
    }
    for (const char* doc : {"{", "{\"a\"}", "{\"a\":}", "{a:1}", "[1,]", "[,1]", "01", "1.", ".5", "-", "1e", "tru",
                            "\"\\x\"", "\"\\u12G4\"", "\"a\nb\"", "{\"a\":1,}", "[1 2]", "nul", "\"\xC3\"", "{}{}"}) {
      CAPTURE(doc);
      CHECK(!accepts(doc));
    }
  }

  TEST_CASE("fill_mask equals brute force: stories260K's sentencepiece vocabulary") {
    const auto vocab = test::stories_vocab();
    REQUIRE(vocab->size() == 512);
    const std::vector<std::string> grammars = {
        test::json_gbnf(),
        "root ::= \"Once upon a time\" ( \" there was a \" [a-z]+ \".\" )+",
        "root ::= ( [A-Z] [a-z]* \" \" )* [a-z]{2,5} \"!\"",
        "root ::= ( \"é\" | \"€\" | [α-ω] | \"x\" )+ \"\\n\"",  // multi-byte: only through byte tokens
        "root ::= [^\\n]* \"\\n\" ( \"yes\" | \"no\" )",
    };
    for (size_t i = 0; i < grammars.size(); ++i) {
      CAPTURE(grammars[i]);
      check_masks_on_random_walks(grammars[i], vocab, 4, 25, true, uint32_t(100 + i));
    }
  }

  TEST_CASE("fill_mask equals brute force: a byte-level vocabulary") {
    const auto vocab = test::byte_level_vocab(3000, 7);
    const std::vector<std::string> grammars = {
        test::json_gbnf(),
        "root ::= \"{\\\"a\\\": \" [0-9]+ ( \", \\\"b\\\": \\\"\" [^\"]* \"\\\"\" )? \"}\"",
        "root ::= ( [a-z]+ | \" \" | \"é\" | \"€\" | \"😀\" )* \".\"",
        "root ::= \"true\" | \"false\" | \"null\" | [0-9]{1,3}",
    };
    for (size_t i = 0; i < grammars.size(); ++i) {
      CAPTURE(grammars[i]);
      check_masks_on_random_walks(grammars[i], vocab, 3, 20, true, uint32_t(200 + i));
    }
  }

  TEST_CASE("the cached mask equals the uncached one over many random states") {
    const auto vocab = test::byte_level_vocab(20000, 11);
    check_masks_on_random_walks(test::json_gbnf(), vocab, 30, 40, false, 300);
    // The cache's verdicts from one position, checked against the walk itself.
    const auto g = parse_gbnf(test::json_gbnf());
    size_t num_uncertain = 0, num_entries = 0;
    for (int32_t pos = 0; pos < int32_t(g->elements().size()); ++pos) {
      if (g->element(pos).kind != engine::grammar::ElementKind::kClass) continue;
      const auto entry = engine::grammar::detail::compute_position_mask(*g, *vocab, {0, pos, engine::grammar::detail::kOpen});
      num_uncertain += entry.uncertain.size();
      ++num_entries;
    }
    MESSAGE("JSON grammar, keys of one position: " << num_entries << " terminal positions, on average "
                             << num_uncertain / std::max<size_t>(num_entries, 1) << " uncertain tokens of "
                             << vocab->size());
  }

  TEST_CASE("mask cache: past its byte budget, the top position's entry or one not kept") {
    using engine::grammar::detail::compute_position_mask;
    using engine::grammar::detail::kOpen;
    using engine::grammar::detail::MaskCache;
    using engine::grammar::detail::MaskKey;
    using engine::grammar::detail::PositionMask;
    const auto vocab = test::byte_level_vocab(500, 3);
    const auto g = parse_gbnf(test::json_gbnf());
    std::vector<int32_t> class_positions;
    for (int32_t pos = 0; pos < int32_t(g->elements().size()); ++pos)
      if (g->element(pos).kind == engine::grammar::ElementKind::kClass) class_positions.push_back(pos);
    REQUIRE(class_positions.size() >= 3);
    auto same = [](const PositionMask& a, const PositionMask& b) {
      return a.accepted_bits == b.accepted_bits && a.accepted_ids == b.accepted_ids && a.uncertain == b.uncertain &&
             a.uncertain_lcp == b.uncertain_lcp;
    };
    // Keys of two positions over kOpen (not necessarily stacks the grammar makes; the walk does not care).
    const MaskKey k0{0, class_positions[0], class_positions[1], kOpen};
    const MaskKey k1{0, class_positions[1], class_positions[2], kOpen};
    const MaskKey k2{0, class_positions[2], class_positions[0], kOpen};
    const MaskKey cut2{0, class_positions[2], kOpen};
    MaskCache cache(compute_position_mask(*g, *vocab, k0).num_bytes() + compute_position_mask(*g, *vocab, cut2).num_bytes());
    CHECK(same(*cache.get(*g, *vocab, k0), compute_position_mask(*g, *vocab, k0)));
    CHECK(same(*cache.get(*g, *vocab, cut2), compute_position_mask(*g, *vocab, cut2)));
    CHECK(cache.num_entries() == 2);
    CHECK(cache.num_bytes() == cache.get(*g, *vocab, k0)->num_bytes() + cache.get(*g, *vocab, cut2)->num_bytes());
    // Full: k2 gets its top position's entry; k1's top position has none, so k1's own, not kept.
    CHECK(cache.full());
    CHECK(cache.find(k2) == cache.find(cut2));
    CHECK(cache.find(k1) == nullptr);
    CHECK(same(*cache.get(*g, *vocab, k1), compute_position_mask(*g, *vocab, k1)));
    CHECK(cache.get(*g, *vocab, k1) != cache.get(*g, *vocab, k1));
    CHECK(cache.num_entries() == 2);
  }

  TEST_CASE("TokenVocab from real tokenizers: token bytes and special tokens") {
    // stories260K: sentencepiece pieces with U+2581 for spaces, <0xNN> byte tokens, <unk> <s> </s>.
    const auto stories = test::stories_vocab();
    int num_with_space = 0, num_single_bytes = 0;
    for (int32_t id = 0; id < stories->size(); ++id) {
      const std::string& b = stories->token_bytes(id);
      if (!stories->is_special(id) && b[0] == ' ') ++num_with_space;
      if (!stories->is_special(id) && b.size() == 1) ++num_single_bytes;
      CHECK(b.find("\xE2\x96\x81") == std::string::npos);  // no U+2581 left
    }
    CHECK(num_with_space > 50);  // 92 of its 512
    CHECK(num_single_bytes >= 256);
    CHECK(stories->is_special(stories->eos_id()));

    // A byte-level BPE tokenizer.json: <|endoftext|>, <|im_start|>, <|im_end|> are special; <tool_call> (added,
    // not special) is text.
    test::TempDir dir("grammar-bpe");
    test::write_tiny_byte_level_tokenizer(dir.path);
    const engine::Tokenizer tokenizer = engine::Tokenizer::from_tokenizer_json(dir / "tokenizer.json", dir / "tokenizer_config.json");
    const auto vocab = std::make_shared<const TokenVocab>(tokenizer);
    REQUIRE(vocab->size() == tokenizer.vocab_size());
    for (int32_t id = 0; id < vocab->size(); ++id) {
      const std::string piece = tokenizer.piece(id);
      CAPTURE(piece);
      CHECK(vocab->is_special(id) == (piece == "<|endoftext|>" || piece == "<|im_start|>" || piece == "<|im_end|>"));
      if (piece == "\xC4\xA0the") CHECK(vocab->token_bytes(id) == " the");  // "Ġthe"
    }
    Matcher m(parse_gbnf(test::json_gbnf()), vocab);
    CHECK(m.accept_bytes("{\"a\": \""));
    CHECK(test::mask_of(m) == test::brute_force_mask(m));
    check_masks_on_random_walks(test::json_gbnf(), vocab, 3, 30, true, 400);
  }

  TEST_CASE("matchers on several threads share a grammar and its mask cache") {
    const auto vocab = test::byte_level_vocab(5000, 5);
    const auto grammar = engine::grammar::compile_cached(test::json_gbnf());
    std::vector<int> num_bad(4, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        std::mt19937 rng(uint32_t(500 + t));
        for (int walk = 0; walk < 3; ++walk) {
          Matcher m(engine::grammar::compile_cached(test::json_gbnf()), vocab);
          for (int step = 0; step < 30; ++step) {
            if (test::mask_of(m, true) != test::mask_of(m, false)) ++num_bad[size_t(t)];
            if (!test::step_randomly(m, rng)) break;
          }
        }
      });
    for (std::thread& th : threads) th.join();
    CHECK(num_bad == std::vector<int>(4, 0));
    CHECK(engine::grammar::compile_cached(test::json_gbnf()) == grammar);
  }

  TEST_CASE("random grammars: cached, uncached and brute-force masks agree along random paths") {
    const std::vector<std::string> pieces = {"a", "b", "x", " ", "|", "(", ")", "*", "+", "?", "{2}", "{1,3}", "{,2}",
                                             "\"ab\"", "[a-c]", "[^x]", ".", "\"\"", "\nx ::= ", "\na ::= ",
                                             "\"\xC3\xA9\"", "[\xC3\xA0-\xC3\xBF]"};
    const auto vocab = small_vocab();
    std::mt19937 rng(23);
    int num_grammars = 0;
    for (int i = 0; i < 6000 && num_grammars < 150 / kWalkDivisor; ++i) {
      std::string text = "root ::= ";
      for (int n = 1 + int(rng() % 12); n > 0; --n) text += pieces[rng() % pieces.size()];
      std::shared_ptr<const engine::grammar::Grammar> g;
      try {
        g = parse_gbnf(text);
      } catch (const GrammarError&) {
        continue;
      }
      ++num_grammars;
      CAPTURE(text);
      Matcher m(g, vocab);
      for (int step = 0; step < 5; ++step) {
        const auto cached = test::mask_of(m, true);
        REQUIRE(cached == test::mask_of(m, false));
        REQUIRE(cached == test::brute_force_mask(m));
        const std::vector<int32_t> ids = test::allowed_ids(cached);
        if (ids.empty()) break;
        REQUIRE(m.accept_token(ids[rng() % ids.size()]));
        if (m.is_terminated()) break;
      }
    }
    CHECK(num_grammars >= 100 / kWalkDivisor);
  }

  TEST_CASE("a fresh grammar's cache fills a few entries per mask; the other stacks share one whole walk") {
    const auto vocab = test::byte_level_vocab(2000, 9);
    const auto g = parse_gbnf(test::json_gbnf());
    const auto cache = engine::grammar::detail::MaskCache::of(*g, vocab);
    Matcher m(g, vocab);
    REQUIRE(m.num_stacks() > 4);  // ws, {, [, ", -, digits, t, f, n: more keys than one call computes
    const auto brute = test::brute_force_mask(m);
    size_t last = 0;
    for (int call = 0; call < 4; ++call) {
      CHECK(test::mask_of(m) == brute);
      CHECK(cache->num_entries() <= last + 4);
      last = cache->num_entries();
    }
    CHECK(last >= size_t(m.num_stacks()) - 1);  // every key computed by now
  }
}
