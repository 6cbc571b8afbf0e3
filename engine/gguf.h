// GGUF v2/v3: a memory-mapped reader and a streaming writer.
// Format: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv pairs, tensor infos
// (name, n_dims, ne[n_dims] (ne[0] fastest), ggml type, offset), padding to general.alignment (32),
// then tensor data.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "kernels/dtype.h"

namespace inflight::engine {

struct GgufArray;
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>>;
struct GgufArray {
  std::vector<GgufValue> items;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGML order: ne[0] is the fastest-varying (columns of a matrix)
  kernels::DType dtype = kernels::DType::F32;
  const uint8_t* data = nullptr;  // into the mapping
  int64_t nbytes = 0;
};

class GgufFile {
 public:
  // Throws LoadError naming the file (and the key or tensor) on any malformed, truncated or
  // unsupported content.
  static GgufFile open(const std::string& path);
  // Parses a GGUF image held in memory (the built-in model); `name` stands for the path in errors.
  static GgufFile from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  const GgufValue* find(const std::string& key) const;
  // Typed getters; nullopt when absent, LoadError when present with the wrong type.
  std::optional<int64_t> get_int(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;  // empty when absent
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Keeps the mapped bytes alive for views handed out.
  std::shared_ptr<const void> storage() const { return storage_; }

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::shared_ptr<const void> storage_;
  friend class GgufParser;
};

// Writes a GGUF v3 file: metadata first, then tensors whose bytes are produced one at a time by a
// callback, so multi-GB files never sit in memory.
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  // ne in GGML order (ne[0] fastest). fill(dst) writes row_bytes(dtype, ne[0]) * rows bytes.
  void add_tensor(const std::string& name, std::vector<int64_t> ne, kernels::DType dtype,
                  std::function<void(uint8_t* dst)> fill);
  void write_file(const std::string& path) const;   // throws std::runtime_error naming path on I/O error
  std::vector<uint8_t> write_memory() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    kernels::DType dtype;
    std::function<void(uint8_t*)> fill;
  };
  template <class Sink> void write_to(Sink& sink) const;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace inflight::engine
