// TokenVocab: a tokenizer's vocabulary as byte strings, built once per tokenizer and shared by every matcher,
// with the tokens a grammar may produce in sorted byte order plus shared-prefix lengths (a flattened trie:
// the mask walk visits tokens in this order and reuses the state of the common prefix).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace inflight::engine {
class Tokenizer;
}

namespace inflight::engine::grammar {

class TokenVocab {
 public:
  // Every id's Tokenizer::token_bytes. Special tokens, never allowed by a grammar: those that decode to no text
  // (control tokens: BOS, EOS, <|im_start|>, ...), those with empty bytes, and sentencepiece's <unk>.
  // EOS is allowed exactly where the grammar is complete.
  explicit TokenVocab(const Tokenizer& tokenizer);
  // Ids 0..token_bytes.size()-1; empty strings and `special_ids` are special. eos_id may be -1 (none).
  TokenVocab(std::vector<std::string> token_bytes, int32_t eos_id, std::span<const int32_t> special_ids = {});

  int size() const { return int(bytes_.size()); }
  int32_t eos_id() const { return eos_id_; }
  const std::string& token_bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool is_special(int32_t id) const { return special_[size_t(id)] != 0; }

  // The non-special tokens in byte order: k = 0..num_sorted()-1.
  int num_sorted() const { return int(order_.size()); }
  int32_t sorted_id(int k) const { return order_[size_t(k)]; }
  std::string_view sorted_bytes(int k) const { return bytes_[size_t(order_[size_t(k)])]; }
  // Length of the common prefix of sorted tokens k-1 and k (0 for k = 0).
  int32_t sorted_lcp(int k) const { return lcp_[size_t(k)]; }
  // One past the last sorted index whose first byte is `b` (the sorted tokens starting with b are a run).
  int first_byte_end(uint8_t b) const { return first_byte_end_[b]; }

 private:
  void index();
  std::vector<std::string> bytes_;
  std::vector<uint8_t> special_;
  int32_t eos_id_ = -1;
  std::vector<int32_t> order_;  // [num_sorted] token ids
  std::vector<int32_t> lcp_;    // [num_sorted]
  int first_byte_end_[256] = {};
};

}  // namespace inflight::engine::grammar
