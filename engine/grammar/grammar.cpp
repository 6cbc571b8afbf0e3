// Grammar's accessors, its printing as GBNF, the per-vocabulary state and the cache of compiled grammars.
#include "engine/grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <list>
#include <unordered_map>

namespace inflight::engine::grammar {

bool CharClass::contains(uint32_t cp) const {
  if (cp < 0x80) return contains_ascii(uint8_t(cp));
  return intersects(cp, cp);
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  // The first range ending at or after lo; it intersects iff it starts at or before hi.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
  return it != ranges.end() && it->first <= hi;
}

namespace {

void append_escaped(std::string& out, uint32_t cp, bool in_class) {
  char buf[16];
  switch (cp) {
    case '\n': out += "\\n"; return;
    case '\t': out += "\\t"; return;
    case '\r': out += "\\r"; return;
    case '\\': out += "\\\\"; return;
    case '"': out += "\\\""; return;
    default: break;
  }
  if (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^')) {
    std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
    out += buf;
    return;
  }
  if (cp >= 0x20 && cp < 0x7F) {
    out += char(cp);
    return;
  }
  if (cp < 0x100) std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
  else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(cp));
  else std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(cp));
  out += buf;
}

void append_class(std::string& out, const CharClass& c) {
  if (c.ranges.size() == 1 && c.ranges[0].first == c.ranges[0].second) {
    out += '"';
    append_escaped(out, c.ranges[0].first, false);
    out += '"';
    return;
  }
  if (c.ranges.size() == 1 && c.ranges[0].first == 0 && c.ranges[0].second == 0x10FFFF) {
    out += '.';
    return;
  }
  out += '[';
  for (const auto& [lo, hi] : c.ranges) {
    append_escaped(out, lo, true);
    if (hi != lo) {
      out += '-';
      append_escaped(out, hi, true);
    }
  }
  out += ']';
}

}  // namespace

std::string Grammar::to_gbnf() const {
  std::string out;
  std::vector<int> order{root_};
  for (int r = 0; r < num_rules(); ++r)
    if (r != root_) order.push_back(r);
  for (int r : order) {
    out += rule_names_[size_t(r)] + " ::=";
    bool first = true;
    for (int32_t start : alternatives(r)) {
      out += first ? " " : " | ";
      first = false;
      if (elements_[size_t(start)].kind == ElementKind::kEnd) out += "\"\"";
      for (int32_t p = start; elements_[size_t(p)].kind != ElementKind::kEnd; ++p) {
        if (p != start) out += ' ';
        const Element& e = elements_[size_t(p)];
        if (e.kind == ElementKind::kRule) out += rule_names_[size_t(e.value)];
        else append_class(out, classes_[size_t(e.value)]);
      }
    }
    out += '\n';
  }
  return out;
}

std::shared_ptr<void> Grammar::vocab_state(const std::shared_ptr<const void>& vocab,
                                           std::shared_ptr<void> (*create)(const Grammar&, const void*)) const {
  {
    std::lock_guard lock(vocab_states_mutex_);
    for (const auto& [key, state] : vocab_states_)
      if (!key.owner_before(vocab) && !vocab.owner_before(key) && !key.expired()) return state;
  }
  // Created outside the lock (it may be slow); a racing creator's state wins and this one is dropped.
  std::shared_ptr<void> created = create(*this, vocab.get());
  std::lock_guard lock(vocab_states_mutex_);
  std::erase_if(vocab_states_, [](const auto& entry) { return entry.first.expired(); });
  for (const auto& [key, state] : vocab_states_)
    if (!key.owner_before(vocab) && !vocab.owner_before(key)) return state;
  vocab_states_.emplace_back(vocab, created);
  return created;
}

std::shared_ptr<const Grammar> compile_cached(std::string_view gbnf_text) {
  // Most recently used first; the map points into the list.
  struct Cache {
    std::mutex mutex;
    std::list<std::pair<std::string, std::shared_ptr<const Grammar>>> entries;
    std::unordered_map<std::string_view, decltype(entries)::iterator> index;
  };
  static Cache cache;
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.index.find(gbnf_text); it != cache.index.end()) {
      cache.entries.splice(cache.entries.begin(), cache.entries, it->second);
      return it->second->second;
    }
  }
  std::shared_ptr<const Grammar> grammar = parse_gbnf(gbnf_text);  // outside the lock: may take a while
  std::lock_guard lock(cache.mutex);
  if (auto it = cache.index.find(gbnf_text); it != cache.index.end()) return it->second->second;
  cache.entries.emplace_front(std::string(gbnf_text), grammar);
  cache.index.emplace(cache.entries.front().first, cache.entries.begin());
  while (cache.entries.size() > kGrammarCacheEntries) {
    cache.index.erase(cache.entries.back().first);
    cache.entries.pop_back();
  }
  return grammar;
}

}  // namespace inflight::engine::grammar
