// ctest json_schema_suite, the C++ side: reads the cases make_cases.mjs wrote ({group, description, schema,
// instance, valid} with ajv's verdict as `valid`), compiles each group's schema with json_schema_to_gbnf +
// parse_gbnf, runs the instance's bytes through Matcher::accept_bytes + can_end, and compares with ajv.
// A schema the compiler refuses fails each of its cases (the keyword filter kept it: it should compile), except
// in the random groups (`may_refuse`), whose refusals are counted apart and printed with the compiler's reason.
//   json_schema_suite_check <cases.json>
// Prints each disagreement, then "N passed, N failed"; exit 1 when any failed.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"

using namespace inflight::engine::grammar;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: json_schema_suite_check <cases.json>\n");
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
  std::map<std::string, std::string> refusals;                    // group -> the compiler's error
  int passed = 0, failed = 0, refused_random = 0;
  std::map<std::string, int> refusal_reasons;  // random groups: the compiler's reason -> groups
  for (const auto& c : cases) {
    const std::string group = c["group"].get<std::string>();
    if (grammars.count(group) == 0 && refusals.count(group) == 0) {
      try {
        grammars[group] = parse_gbnf(json_schema_to_gbnf(c["schema"]));
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
    Matcher m(grammars[group], vocab);
    const bool got = m.accept_bytes(instance) && m.can_end();
    if (got == want) {
      ++passed;
    } else {
      ++failed;
      std::printf("FAILED %s / %s: %s: ajv says %s, the grammar %s\n", group.c_str(),
                  c["description"].get<std::string>().c_str(), instance.c_str(), want ? "valid" : "invalid",
                  got ? "accepts" : "rejects");
    }
  }
  for (const auto& [reason, n] : refusal_reasons) std::printf("random groups refused (%d): %s\n", n, reason.c_str());
  std::printf("json_schema_suite: %zu groups compiled, %zu refused; %d cases of refused random groups not run\n",
              grammars.size(), refusals.size(), refused_random);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
