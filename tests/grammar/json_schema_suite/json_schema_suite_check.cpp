// ctest json_schema_suite, the C++ side: reads the cases make_cases.mjs wrote ({group, description, schema,
// instance, valid} with ajv's verdict as `valid`), compiles each group's schema with json_schema_to_gbnf +
// parse_gbnf, runs the instance's bytes through Matcher::accept_bytes + can_end, and compares with ajv.
// A schema the compiler refuses fails each of its cases (the keyword filter kept it: it should compile), except
// in the random groups (`may_refuse`), whose refusals are counted apart and printed with the compiler's reason.
//   json_schema_suite_check <cases.json> [<samples.json>]
// Each instance runs through two grammars of its schema, compact and JsonSchemaOptions::any_whitespace (each
// counts as a case). Prints each disagreement, then "N passed, N failed"; exit 1 when any failed.
// With <samples.json>: also walks each compiled grammar at random through fill_mask (single-byte tokens) and
// writes the texts it completes, {group, schema, text}, for validate_samples.mjs to put before ajv: the other
// direction, whether everything the grammar lets a model write is valid.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

using namespace inflight::engine::grammar;

namespace {

// One random completion of `grammar` over single-byte tokens, or "" when none ends within `max_bytes`. Leans
// toward closing: a '"', ']' or '}' the mask allows is taken often, and the walk stops where it may.
std::string random_text(const std::shared_ptr<const Grammar>& grammar, const std::shared_ptr<const TokenVocab>& vocab,
                        std::mt19937& rng, size_t max_bytes) {
  Matcher m(grammar, vocab, 1);
  std::vector<uint32_t> mask(vocab->size() / 32 + 1);
  std::string text;
  while (text.size() < max_bytes) {
    if (m.can_end() && (text.size() > 0 && rng() % 3 == 0)) return text;
    std::fill(mask.begin(), mask.end(), 0u);
    m.fill_mask(mask);
    std::vector<int> allowed, closing;
    for (int b = 0; b < 256; ++b) {
      if (!((mask[size_t(b) / 32] >> (b % 32)) & 1)) continue;
      allowed.push_back(b);
      if (b == '"' || b == ']' || b == '}') closing.push_back(b);
    }
    if (allowed.empty()) return m.can_end() ? text : "";
    const std::vector<int>& from = !closing.empty() && rng() % 4 == 0 ? closing : allowed;
    const int b = from[rng() % from.size()];
    if (!m.accept_token(b)) return "";
    text += char(b);
  }
  return m.can_end() ? text : "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: json_schema_suite_check <cases.json> [<samples.json>]\n");
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  // ordered_json: the schemas' property order is the grammar's key order.
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(text.str());

  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  const auto vocab = std::make_shared<const TokenVocab>(std::move(bytes), -1);

  std::map<std::string, std::shared_ptr<const Grammar>> grammars;  // by group
  // The same schemas with JsonSchemaOptions::any_whitespace: the compact instances must get the same answers, and
  // their completions (with whitespace) go before ajv too.
  std::map<std::string, std::shared_ptr<const Grammar>> spaced;
  JsonSchemaOptions any_whitespace;
  any_whitespace.any_whitespace = true;
  std::map<std::string, std::string> refusals;                    // group -> the compiler's error
  int passed = 0, failed = 0, refused_random = 0;
  std::map<std::string, int> refusal_reasons;  // random groups: the compiler's reason -> groups
  for (const auto& c : cases) {
    const std::string group = c["group"].get<std::string>();
    if (grammars.count(group) == 0 && refusals.count(group) == 0) {
      try {
        grammars[group] = parse_gbnf(json_schema_to_gbnf(c["schema"]));
        spaced[group] = parse_gbnf(json_schema_to_gbnf(c["schema"], any_whitespace));
      } catch (const GrammarError& e) {
        refusals[group] = e.what();
        if (c.value("may_refuse", false)) {
          std::string reason = e.what();
          reason = reason.substr(0, reason.rfind(" at "));  // the reason without its pointer
          ++refusal_reasons[reason];
        } else {
          std::printf("REFUSED %s: %s\n", group.c_str(), e.what());
        }
      }
    }
    const std::string instance = c["instance"].get<std::string>();
    const bool want = c["valid"].get<bool>();
    if (refusals.count(group) != 0) {
      if (c.value("may_refuse", false)) {
        ++refused_random;
      } else {
        ++failed;
      }
      continue;
    }
    for (const auto* which : {&grammars, &spaced}) {
      Matcher m(which->at(group), vocab);
      const bool got = m.accept_bytes(instance) && m.can_end();
      if (got == want) {
        ++passed;
      } else {
        ++failed;
        std::printf("FAILED %s / %s: %s: ajv says %s, the grammar%s %s\n", group.c_str(),
                    c["description"].get<std::string>().c_str(), instance.c_str(), want ? "valid" : "invalid",
                    which == &spaced ? " (any_whitespace)" : "", got ? "accepts" : "rejects");
      }
    }
  }
  if (argc == 3) {
    nlohmann::ordered_json samples = nlohmann::ordered_json::array();
    std::mt19937 rng(12345);
    std::map<std::string, nlohmann::ordered_json> schemas;
    for (const auto& c : cases) schemas.emplace(c["group"].get<std::string>(), c["schema"]);
    for (const auto& [group, grammar] : grammars) {
      for (int walk = 0, kept = 0; walk < 120 && kept < 40; ++walk) {
        const std::string text = random_text(walk % 2 ? spaced.at(group) : grammar, vocab, rng, 400);
        if (text.empty()) continue;
        samples.push_back({{"group", group}, {"schema", schemas[group]}, {"text", text}});
        ++kept;
      }
    }
    std::ofstream(argv[2]) << samples.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    std::printf("json_schema_suite: %zu random completions written for ajv\n", samples.size());
  }
  for (const auto& [reason, n] : refusal_reasons) std::printf("random groups refused (%d): %s\n", n, reason.c_str());
  std::printf("json_schema_suite: %zu groups compiled, %zu refused; %d cases of refused random groups not run\n",
              grammars.size(), refusals.size(), refused_random);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
