#include "client/prompt_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <random>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace inflight::client {

namespace {

BenchPrompt parse_line(const std::string& line, const std::string& where, int default_output_len) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw std::invalid_argument(where + ": not a JSON object");
  const auto prompt = j.find("prompt");
  if (prompt == j.end()) throw std::invalid_argument(where + ": no \"prompt\" field");
  BenchPrompt p;
  if (prompt->is_string()) {
    p.text = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() &&
             std::all_of(prompt->begin(), prompt->end(), [](const nlohmann::json& x) { return x.is_number_integer(); })) {
    p.ids = prompt->get<std::vector<int32_t>>();
    p.prompt_len = int64_t(p.ids.size());
  } else {
    throw std::invalid_argument(where + ": \"prompt\" must be a string or a non-empty list of token ids");
  }
  p.output_len = default_output_len;
  if (const auto out = j.find("output_len"); out != j.end()) {
    if (!out->is_number_integer() || out->get<int64_t>() < 1 || out->get<int64_t>() > (1 << 30))
      throw std::invalid_argument(where + ": \"output_len\" must be a positive integer");
    p.output_len = out->get<int>();
  }
  return p;
}

// Common, mostly one-token English words: random chat prompts read like text to any tokenizer.
constexpr std::array<const char*, 64> kWords = {
    "the",   "of",    "and",   "to",    "in",    "is",   "you",  "that",  "it",    "he",    "was",  "for",
    "on",    "are",   "as",    "with",  "his",   "they", "at",   "be",    "this",  "have",  "from", "or",
    "one",   "had",   "by",    "word",  "but",   "not",  "what", "all",   "were",  "we",    "when", "your",
    "can",   "said",  "there", "use",   "an",    "each", "which", "she",  "do",    "how",   "their", "if",
    "will",  "up",    "other", "about", "out",   "many", "then", "them",  "these", "so",    "some", "her",
    "would", "make",  "like",  "time"};

}  // namespace

std::vector<BenchPrompt> load_jsonl_prompts(const std::string& path, int num_prompts, int default_output_len,
                                            uint64_t seed) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("--dataset: cannot open " + path);
  std::vector<BenchPrompt> lines;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(parse_line(line, path + ":" + std::to_string(number), default_output_len));
  }
  if (lines.empty()) throw std::invalid_argument("--dataset: " + path + " has no prompts");
  std::mt19937_64 rng(seed);
  std::shuffle(lines.begin(), lines.end(), rng);
  std::vector<BenchPrompt> out;
  out.reserve(size_t(num_prompts));
  for (int i = 0; i < num_prompts; ++i) out.push_back(lines[size_t(i) % lines.size()]);
  return out;
}

std::vector<BenchPrompt> random_token_prompts(int num_prompts, int input_len, int output_len, int vocab_size,
                                              uint64_t seed) {
  if (input_len < 1) throw std::invalid_argument("--input-len must be at least 1");
  if (output_len < 1) throw std::invalid_argument("--output-len must be at least 1");
  if (vocab_size <= kFirstRandomTokenId)
    throw std::invalid_argument("--vocab-size must be more than " + std::to_string(kFirstRandomTokenId));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(kFirstRandomTokenId, vocab_size - 1);
  std::vector<BenchPrompt> out(static_cast<size_t>(num_prompts));
  for (BenchPrompt& p : out) {
    p.ids.resize(size_t(input_len));
    for (int32_t& id : p.ids) id = token(rng);
    p.prompt_len = input_len;
    p.output_len = output_len;
  }
  return out;
}

std::vector<BenchPrompt> mixed_prompts(const std::string& spec, int num_prompts, int vocab_size, bool chat,
                                       uint64_t seed) {
  const std::string prefix = kMixedDatasetPrefix;
  if (spec.rfind(prefix, 0) != 0) throw std::invalid_argument("--dataset " + spec + ": a mix starts with " + prefix);
  struct Class {
    int input_len = 0, output_len = 0;
    double weight = 1;
  };
  std::vector<Class> classes;
  const std::string list = spec.substr(prefix.size());
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, end - start);
    const std::string bad = "--dataset " + spec + ": '" + item + "' is not INPUTxOUTPUT[:WEIGHT] with positive numbers";
    Class c;
    size_t used = 0;
    try {
      c.input_len = std::stoi(item, &used);
      if (used >= item.size() || item[used] != 'x') throw std::invalid_argument(bad);
      size_t more = 0;
      c.output_len = std::stoi(item.substr(used + 1), &more);
      used += 1 + more;
      if (used < item.size()) {
        if (item[used] != ':') throw std::invalid_argument(bad);
        size_t w = 0;
        c.weight = std::stod(item.substr(used + 1), &w);
        used += 1 + w;
      }
    } catch (const std::exception&) {
      throw std::invalid_argument(bad);
    }
    if (used != item.size() || c.input_len < 1 || c.output_len < 1 || !(c.weight > 0) || !std::isfinite(c.weight))
      throw std::invalid_argument(bad);
    classes.push_back(c);
    start = end + 1;
  }
  // Largest remainder: each class gets floor(share), the largest fractions one more.
  double total = 0;
  for (const Class& c : classes) total += c.weight;
  std::vector<int> counts(classes.size());
  std::vector<std::pair<double, size_t>> fractions;
  int assigned = 0;
  for (size_t i = 0; i < classes.size(); ++i) {
    const double share = num_prompts * classes[i].weight / total;
    counts[i] = int(std::floor(share));
    assigned += counts[i];
    fractions.push_back({share - counts[i], i});
  }
  std::stable_sort(fractions.begin(), fractions.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; assigned < num_prompts; ++k, ++assigned) ++counts[fractions[k % fractions.size()].second];

  std::vector<BenchPrompt> out;
  for (size_t i = 0; i < classes.size(); ++i) {
    if (counts[i] == 0) continue;
    const uint64_t class_seed = seed * 1000003 + i;
    std::vector<BenchPrompt> some =
        chat ? random_word_prompts(counts[i], classes[i].input_len, classes[i].output_len, class_seed)
             : random_token_prompts(counts[i], classes[i].input_len, classes[i].output_len, vocab_size, class_seed);
    for (BenchPrompt& p : some) out.push_back(std::move(p));
  }
  std::mt19937_64 rng(seed);
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<BenchPrompt> random_word_prompts(int num_prompts, int input_len, int output_len, uint64_t seed) {
  if (input_len < 1) throw std::invalid_argument("--input-len must be at least 1");
  if (output_len < 1) throw std::invalid_argument("--output-len must be at least 1");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> word(0, kWords.size() - 1);
  std::vector<BenchPrompt> out(static_cast<size_t>(num_prompts));
  for (BenchPrompt& p : out) {
    for (int i = 0; i < input_len; ++i) {
      if (i) p.text.push_back(' ');
      p.text += kWords[word(rng)];
    }
    p.output_len = output_len;
  }
  return out;
}

}  // namespace inflight::client
