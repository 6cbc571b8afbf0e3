// Helpers of the loader tests (test_gguf, test_safetensors, test_model_loader, test_builtin_model):
// catching LoadError messages, patching bytes, rewriting GGUF and safetensors files with changes.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/gguf.h"
#include "engine/load_error.h"
#include "engine/safetensors.h"
#include "test_support.h"

namespace inflight::test {

// The message of the LoadError `f` throws; fails the test when it throws nothing or something else.
template <class F>
std::string load_error_message(F&& f) {
  try {
    f();
  } catch (const engine::LoadError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a LoadError, got: " << e.what());
  }
  FAIL("expected a LoadError, nothing was thrown");
  return {};
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Offset of the first occurrence of `needle` in `bytes`; fails the test when absent.
inline size_t find_bytes(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  REQUIRE_MESSAGE(it != bytes.end(), "bytes lack " << needle);
  return size_t(it - bytes.begin());
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// Where the fields of the tensor info of `name` (an n_dims-dimensional tensor) lie in a GGUF image.
struct TensorInfoOffsets {
  size_t n_dims, ne, type, offset;
};
inline TensorInfoOffsets tensor_info_offsets(const std::vector<uint8_t>& bytes, const std::string& name, int n_dims) {
  const size_t at = find_bytes(bytes, name) + name.size();
  return {at, at + 4, at + 4 + 8 * size_t(n_dims), at + 4 + 8 * size_t(n_dims) + 4};
}

// A GgufWriter holding `g`'s metadata and tensors (bytes copied from g, which must outlive the
// writer's output) minus the keys and tensors named in `drop`.
inline engine::GgufWriter rewrite_gguf(const engine::GgufFile& g, const std::set<std::string>& drop = {}) {
  engine::GgufWriter w;
  for (const auto& [key, value] : g.metadata())
    if (!drop.count(key)) w.set(key, value);
  for (const engine::GgufTensorInfo& t : g.tensors()) {
    if (drop.count(t.name)) continue;
    w.add_tensor(t.name, t.ne, t.dtype, [&t](uint8_t* dst) { std::memcpy(dst, t.data, size_t(t.nbytes)); });
  }
  return w;
}

struct RawTensor {
  std::string name;
  std::string dtype;            // safetensors dtype name
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// All tensors of a safetensors file, bytes copied.
inline std::vector<RawTensor> read_raw_tensors(const std::string& path) {
  const engine::SafetensorsFile f = engine::SafetensorsFile::open(path);
  std::vector<RawTensor> out;
  for (const engine::SafetensorsTensor& t : f.tensors())
    out.push_back({t.name, t.dtype_name, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  return out;
}

// A safetensors image: u64 header length, JSON header padded with spaces to 8 bytes, packed data.
inline std::vector<uint8_t> safetensors_bytes(const std::vector<RawTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t len = text.size();
  std::vector<uint8_t> out(8 + text.size());  // sized up front: growing it from 8 draws a false GCC 12 -Warray-bounds
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  for (const RawTensor& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

// A copy of the stories260K HF folder in `dir` (config.json, tokenizer.model, model.safetensors).
inline void copy_stories_hf(const std::filesystem::path& dir) {
  for (const char* name : {"config.json", "tokenizer.model", "model.safetensors"})
    std::filesystem::copy_file(stories_dir() / "hf" / name, dir / name);
}

}  // namespace inflight::test
