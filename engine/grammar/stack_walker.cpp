// StackWalker: hash-consed stack nodes, expansion of rule references, one byte's step, and the interned sets of
// stacks with their memoised transitions (the lazy DFA of walk_tokens).
#include "engine/grammar/stack_walker.h"

#include <algorithm>

namespace inflight::engine::grammar::detail {

namespace {

// The code points a UTF-8 sequence of `length` bytes may encode: shorter forms are overlong.
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
constexpr uint32_t kMaxOfLength[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

bool class_has_scalar(const CharClass& c, uint32_t lo, uint32_t hi) {
  // [lo, hi] minus the surrogates.
  if (lo <= std::min(hi, 0xD7FFu) && c.intersects(lo, std::min(hi, 0xD7FFu))) return true;
  const uint32_t from = std::max(lo, 0xE000u);
  return from <= hi && c.intersects(from, hi);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}
size_t node_hash(int32_t pos, int32_t parent, uint32_t partial) {
  return size_t(mix((uint64_t(uint32_t(pos)) << 32 | uint32_t(parent)) ^ (uint64_t(partial) * 0x9E3779B97F4A7C15ULL)));
}

}  // namespace

ClassStep step_class(const CharClass& c, uint32_t partial, uint8_t byte) {
  uint32_t value = 0, length = 0, remaining = 0;
  if (partial == 0) {
    if (byte < 0x80) return {c.contains_ascii(byte) ? ClassStep::kComplete : ClassStep::kReject, 0};
    if (byte >= 0xC2 && byte <= 0xDF) length = 2, value = byte & 0x1Fu;
    else if (byte >= 0xE0 && byte <= 0xEF) length = 3, value = byte & 0x0Fu;
    else if (byte >= 0xF0 && byte <= 0xF4) length = 4, value = byte & 0x07u;
    else return {ClassStep::kReject, 0};
    remaining = length - 1;
  } else {
    if ((byte & 0xC0) != 0x80) return {ClassStep::kReject, 0};
    value = ((partial >> 4) << 6) | (byte & 0x3Fu);
    length = ((partial >> 2) & 3) + 1;
    remaining = (partial & 3) - 1;
    if (remaining == 0) {
      const bool valid = value >= kMinOfLength[length] && value <= kMaxOfLength[length] &&
                         !(value >= 0xD800 && value <= 0xDFFF);
      return {valid && c.contains(value) ? ClassStep::kComplete : ClassStep::kReject, 0};
    }
  }
  // Viable while some valid code point of the class starts with the bytes so far.
  const uint32_t shift = 6 * remaining;
  const uint32_t lo = std::max(value << shift, kMinOfLength[length]);
  const uint32_t hi = std::min((value << shift) | ((1u << shift) - 1), kMaxOfLength[length]);
  if (lo > hi || !class_has_scalar(c, lo, hi)) return {ClassStep::kReject, 0};
  return {ClassStep::kPartial, value << 4 | (length - 1) << 2 | remaining};
}

void StackWalker::reset(const Grammar& grammar) {
  grammar_ = &grammar;
  nodes_.clear();
  work_.clear();  // a walk cut short by a GrammarError leaves its pending nodes
  stamps_.clear();
  generation_ = 1;
  // A table grown by one huge walk is not kept for every later small one.
  if (table_.size() > (size_t(1) << 20) || table_.empty()) table_.assign(size_t(1) << 10, -1);
  else std::fill(table_.begin(), table_.end(), -1);
  sets_.clear();
  set_hashes_.clear();
  if (set_table_.size() > (size_t(1) << 16) || set_table_.empty()) set_table_.assign(size_t(1) << 8, -1);
  else std::fill(set_table_.begin(), set_table_.end(), -1);
  if (transition_keys_.size() > (size_t(1) << 18) || transition_keys_.empty()) {
    transition_keys_.assign(size_t(1) << 10, ~uint64_t(0));
    transition_targets_.assign(size_t(1) << 10, -1);
  } else {
    std::fill(transition_keys_.begin(), transition_keys_.end(), ~uint64_t(0));
  }
  num_transitions_ = 0;
}

void StackWalker::grow_table() {
  table_.assign(table_.size() * 2, -1);
  const size_t mask = table_.size() - 1;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const StackNode& n = nodes_[id];
    size_t h = node_hash(n.pos, n.parent, n.partial) & mask;
    while (table_[h] >= 0) h = (h + 1) & mask;
    table_[h] = int32_t(id);
  }
}

int32_t StackWalker::intern(int32_t pos, int32_t parent, uint32_t partial) {
  if ((nodes_.size() + 1) * 2 > table_.size()) grow_table();
  const size_t mask = table_.size() - 1;
  size_t h = node_hash(pos, parent, partial) & mask;
  for (;; h = (h + 1) & mask) {
    const int32_t id = table_[h];
    if (id < 0) break;
    const StackNode& n = nodes_[size_t(id)];
    if (n.pos == pos && n.parent == parent && n.partial == partial) return id;
  }
  if (nodes_.size() >= kMaxStackNodes)
    throw GrammarError("grammar too ambiguous: more than " + std::to_string(kMaxStackNodes) + " parse stack nodes");
  const auto id = int32_t(nodes_.size());
  nodes_.push_back(StackNode{pos, parent, partial});
  stamps_.push_back(0);
  table_[h] = id;
  return id;
}

void StackWalker::pop_into(int32_t parent, StackSet& out) {
  if (parent == kBottom) out.can_end = true;
  else if (parent == kOpen) out.escaped = true;
  else work_.push_back(parent);
}

void StackWalker::drain(StackSet& out) {
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (stamps_[size_t(id)] == generation_) continue;
    stamps_[size_t(id)] = generation_;
    const StackNode n = nodes_[size_t(id)];  // a copy: intern() below may move nodes_
    const Element& e = grammar_->element(n.pos);
    switch (e.kind) {
      case ElementKind::kClass:
        out.tops.push_back(id);
        if (out.tops.size() > kMaxLiveStacks)
          throw GrammarError("grammar too ambiguous: more than " + std::to_string(kMaxLiveStacks) +
                             " parses alive at once");
        break;
      case ElementKind::kEnd:  // an empty alternative
        pop_into(n.parent, out);
        break;
      case ElementKind::kRule: {
        const int32_t after = n.pos + 1;
        const int32_t cont =
            grammar_->element(after).kind == ElementKind::kEnd ? n.parent : intern(after, n.parent, 0);
        for (int32_t start : grammar_->alternatives(e.value)) work_.push_back(intern(start, cont, 0));
        break;
      }
    }
  }
}

void StackWalker::expand(int32_t id, StackSet& out) {
  work_.push_back(id);
  drain(out);
}

void StackWalker::advance(const StackSet& in, uint8_t byte, StackSet& out) {
  out.clear();
  begin_step();
  for (const int32_t id : in.tops) {
    const StackNode n = nodes_[size_t(id)];
    const ClassStep step = step_class(grammar_->char_class(grammar_->element(n.pos).value), n.partial, byte);
    if (step.kind == ClassStep::kReject) continue;
    if (step.kind == ClassStep::kPartial) {
      const int32_t next = intern(n.pos, n.parent, step.partial);
      if (stamps_[size_t(next)] != generation_) {
        stamps_[size_t(next)] = generation_;
        out.tops.push_back(next);
      }
      continue;
    }
    if (grammar_->element(n.pos + 1).kind == ElementKind::kEnd) pop_into(n.parent, out);
    else work_.push_back(intern(n.pos + 1, n.parent, 0));
    drain(out);
  }
}

namespace {
size_t set_hash(const StackSet& s) {
  uint64_t h = uint64_t(s.can_end) * 2 + uint64_t(s.escaped) + 0x9E3779B97F4A7C15ULL;
  for (const int32_t id : s.tops) h = mix(h ^ uint32_t(id)) + 0x9E3779B97F4A7C15ULL;
  return size_t(h);
}
}  // namespace

void StackWalker::grow_set_table() {
  set_table_.assign(set_table_.size() * 2, -1);
  const size_t mask = set_table_.size() - 1;
  for (size_t id = 0; id < sets_.size(); ++id) {
    size_t h = set_hashes_[id] & mask;
    while (set_table_[h] >= 0) h = (h + 1) & mask;
    set_table_[h] = int32_t(id);
  }
}

int32_t StackWalker::intern_set(StackSet set) {
  std::sort(set.tops.begin(), set.tops.end());
  if ((sets_.size() + 1) * 2 > set_table_.size()) grow_set_table();
  const size_t hash = set_hash(set);
  const size_t mask = set_table_.size() - 1;
  size_t h = hash & mask;
  for (;; h = (h + 1) & mask) {
    const int32_t id = set_table_[h];
    if (id < 0) break;
    const StackSet& other = sets_[size_t(id)];
    if (set_hashes_[size_t(id)] == hash && other.can_end == set.can_end && other.escaped == set.escaped &&
        other.tops == set.tops)
      return id;
  }
  const auto id = int32_t(sets_.size());
  sets_.push_back(std::move(set));
  set_hashes_.push_back(hash);
  set_table_[h] = id;
  return id;
}

void StackWalker::grow_transitions() {
  std::vector<uint64_t> keys(transition_keys_.size() * 2, ~uint64_t(0));
  std::vector<int32_t> targets(keys.size(), -1);
  const size_t mask = keys.size() - 1;
  for (size_t i = 0; i < transition_keys_.size(); ++i) {
    if (transition_keys_[i] == ~uint64_t(0)) continue;
    size_t h = size_t(mix(transition_keys_[i])) & mask;
    while (keys[h] != ~uint64_t(0)) h = (h + 1) & mask;
    keys[h] = transition_keys_[i];
    targets[h] = transition_targets_[i];
  }
  transition_keys_ = std::move(keys);
  transition_targets_ = std::move(targets);
}

int32_t StackWalker::step(int32_t set_id, uint8_t byte) {
  const uint64_t key = uint64_t(uint32_t(set_id)) << 8 | byte;
  size_t mask = transition_keys_.size() - 1;
  for (size_t h = size_t(mix(key)) & mask; transition_keys_[h] != ~uint64_t(0); h = (h + 1) & mask)
    if (transition_keys_[h] == key) return transition_targets_[h];
  advance(sets_[size_t(set_id)], byte, scratch_);
  const int32_t target = intern_set(scratch_);
  if ((num_transitions_ + 1) * 2 > transition_keys_.size()) grow_transitions();
  mask = transition_keys_.size() - 1;
  size_t h = size_t(mix(key)) & mask;
  while (transition_keys_[h] != ~uint64_t(0)) h = (h + 1) & mask;
  transition_keys_[h] = key;
  transition_targets_[h] = target;
  ++num_transitions_;
  return target;
}

}  // namespace inflight::engine::grammar::detail
