// GGUF v2/v3: a reader over the file read into memory and a streaming writer.
// Format: magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv pairs, tensor infos
// (name, n_dims, ne[n_dims] (ne[0] fastest), ggml type, offset), padding to general.alignment (32),
// then tensor data.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kernels/dtype.h"

namespace inflight::engine {

// Value types as stored on disk (gguf_type). Readers widen them: U8/U16/U32/U64 -> uint64_t,
// I8/I16/I32/I64 -> int64_t, F32/F64 -> double.
enum class GgufType : uint32_t { U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, Bool = 7,
                                 String = 8, Array = 9, U64 = 10, I64 = 11, F64 = 12 };

struct GgufArray;
using GgufValue = std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>>;
struct GgufArray {
  std::vector<GgufValue> items;
  // On-disk type of every item. The reader sets it; for the writer, nullopt means the widest default
  // type of the items (see GgufWriter::set; I32 when empty).
  std::optional<GgufType> type;
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
  // Parses a GGUF image held in memory; `name` stands for the path in errors.
  static GgufFile from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name);
  // The same over bytes that outlive every use (the executable's read-only data: the default model).
  static GgufFile from_static(std::span<const uint8_t> bytes, const std::string& name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }

  const GgufValue* find(const std::string& key) const;
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
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
  // Whether the bytes are this file's own private copy (open(), engine/mapped_file.h), which the loader may
  // rearrange in place before anything else views it; not so for the other sources.
  bool private_copy() const { return private_copy_; }

 private:
  std::string path_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::shared_ptr<const void> storage_;
  bool private_copy_ = false;
  friend class GgufParser;
};

// Writes a GGUF v3 file: metadata first, then tensors whose bytes are produced one at a time by a
// callback, so multi-GB files never sit in memory.
class GgufWriter {
 public:
  // Scalars get llama.cpp's usual types: uint64_t -> U32 (U64 past 2^32-1), int64_t -> I32 (I64 out of
  // range), double -> F32, bool, string; arrays use GgufArray::type. Setting a key again replaces it.
  // "general.alignment" (a power of two) sets the alignment of the tensor data; default 32.
  void set(const std::string& key, GgufValue value);
  // The same with the on-disk type forced (for an array: the item type). Throws std::invalid_argument
  // when the value does not fit the type.
  void set(const std::string& key, GgufValue value, GgufType type);
  // ne in GGML order (ne[0] fastest), 1 to 4 dims. fill(dst) writes row_bytes(dtype, ne[0]) * rows
  // bytes; it runs once per write_file / write_memory call, when that tensor's turn comes. Throws
  // std::invalid_argument for a duplicate name, a bad shape, or a block type with ne[0] not a multiple of its
  // block size (32, or 256 for the K-quants).
  void add_tensor(const std::string& name, std::vector<int64_t> ne, kernels::DType dtype,
                  std::function<void(uint8_t* dst)> fill);
  // Writes path + ".tmp", then renames it over path. Throws std::runtime_error naming path on I/O error.
  void write_file(const std::string& path) const;
  std::vector<uint8_t> write_memory() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    kernels::DType dtype;
    std::function<void(uint8_t*)> fill;
  };
  template <class Sink> void write_to(Sink& sink) const;
  struct Entry {
    std::string key;
    GgufValue value;
    std::optional<GgufType> type;  // nullopt: the default type of the value
  };
  std::vector<Entry> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace inflight::engine
