// TokenVocab: the token byte strings, the special tokens, and the sorted order with shared-prefix lengths.
#include "engine/grammar/token_vocab.h"

#include <algorithm>
#include <numeric>

#include "engine/tokenizer.h"

namespace inflight::engine::grammar {

TokenVocab::TokenVocab(const Tokenizer& tokenizer) : eos_id_(tokenizer.eos_id()) {
  const int n = tokenizer.vocab_size();
  bytes_.resize(size_t(n));
  special_.assign(size_t(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    bytes_[size_t(id)] = tokenizer.token_bytes(id);
    // Control tokens decode to nothing (a lone space piece may too: sentencepiece drops a leading space);
    // sentencepiece's <unk> decodes to " ⁇ " but stands for no text. BOS is special where it is a control
    // token: a vocabulary without one (Qwen) may still name an ordinary token as BOS (id 1, '"').
    const std::string& bytes = bytes_[size_t(id)];
    const bool control = bytes.find_first_not_of(' ') != std::string::npos &&
                         tokenizer.decode(std::span<const int32_t>(&id, 1)).empty();
    if (bytes.empty() || control || tokenizer.piece(id) == "<unk>")
      special_[size_t(id)] = 1;
  }
  if (eos_id_ >= n) eos_id_ = -1;
  if (eos_id_ >= 0) special_[size_t(eos_id_)] = 1;
  index();
}

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, int32_t eos_id, std::span<const int32_t> special_ids)
    : bytes_(std::move(token_bytes)), eos_id_(eos_id) {
  special_.assign(bytes_.size(), 0);
  for (size_t id = 0; id < bytes_.size(); ++id)
    if (bytes_[id].empty()) special_[id] = 1;
  for (int32_t id : special_ids)
    if (id >= 0 && size_t(id) < bytes_.size()) special_[size_t(id)] = 1;
  if (eos_id_ >= int32_t(bytes_.size())) eos_id_ = -1;
  if (eos_id_ >= 0) special_[size_t(eos_id_)] = 1;
  index();
}

void TokenVocab::index() {
  order_.clear();
  for (size_t id = 0; id < bytes_.size(); ++id)
    if (!special_[id]) order_.push_back(int32_t(id));
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });
  lcp_.assign(order_.size(), 0);
  for (size_t k = 1; k < order_.size(); ++k) {
    const std::string& a = bytes_[size_t(order_[k - 1])];
    const std::string& b = bytes_[size_t(order_[k])];
    const size_t n = std::min(a.size(), b.size());
    size_t i = 0;
    while (i < n && a[i] == b[i]) ++i;
    lcp_[k] = int32_t(i);
  }
  size_t k = 0;
  for (int b = 0; b < 256; ++b) {
    while (k < order_.size() && uint8_t(bytes_[size_t(order_[k])][0]) == b) ++k;
    first_byte_end_[b] = int(k);
  }
}

}  // namespace inflight::engine::grammar
