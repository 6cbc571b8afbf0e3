#include "engine/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "engine/load_error.h"
#include "engine/mapped_file.h"

static_assert(std::endian::native == std::endian::little, "safetensors is read little-endian in place");

namespace inflight::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the format's own limit

// Element bytes of every dtype the format defines; 0 when unknown.
int element_bytes(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::optional<kernels::DType> engine_dtype(const std::string& dtype) {
  if (dtype == "F32") return kernels::DType::F32;
  if (dtype == "F16") return kernels::DType::F16;
  if (dtype == "BF16") return kernels::DType::BF16;
  return std::nullopt;
}

// A JSON value that must be a non-negative integer representable as uint64_t.
std::optional<uint64_t> as_count(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_load_error(path.string(), "cannot open");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw_load_error(path.string(), std::string("bad JSON: ") + e.what());
  }
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile m = map_file(path);
  SafetensorsFile f = parse(path, m);
  f.private_copy_ = true;
  return f;
}

SafetensorsFile SafetensorsFile::from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name) {
  if (!bytes) throw_load_error(name, "no bytes");
  MappedFile m{bytes->data(), bytes->size(), nullptr};
  m.owner = std::shared_ptr<const void>(std::move(bytes));
  return parse(name, m);
}

SafetensorsFile SafetensorsFile::parse(const std::string& path, const MappedFile& m) {
  SafetensorsFile f;
  f.path_ = path;
  f.storage_ = m.owner;
  if (m.size < 8) throw_load_error(path, "truncated file: " + std::to_string(m.size) + " bytes, no header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, m.data, 8);
  if (header_len > m.size - 8)
    throw_load_error(path, "truncated file: header length " + std::to_string(header_len) + " exceeds the " +
                               std::to_string(m.size - 8) + " bytes after it");
  if (header_len > kMaxHeaderBytes) throw_load_error(path, "absurd header length " + std::to_string(header_len));
  const char* text = reinterpret_cast<const char*>(m.data + 8);
  json header;
  try {
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    throw_load_error(path, std::string("bad JSON header: ") + e.what());
  }
  if (!header.is_object()) throw_load_error(path, "bad JSON header: not an object");

  const uint8_t* data = m.data + 8 + header_len;
  const uint64_t data_size = m.size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) per tensor, in tensors_ order
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_load_error(path, "__metadata__ is not an object");
      for (auto m_it = entry.begin(); m_it != entry.end(); ++m_it)
        if (m_it.value().is_string()) f.metadata_[m_it.key()] = m_it.value().get<std::string>();
      continue;
    }
    auto fail = [&](const std::string& what) { throw_load_error(path, "tensor " + name + ": " + what); };
    if (!entry.is_object()) fail("header entry is not an object");
    SafetensorsTensor t;
    t.name = name;
    t.file = path;
    auto dtype_it = entry.find("dtype");
    if (dtype_it == entry.end() || !dtype_it->is_string()) fail("missing or non-string dtype");
    t.dtype_name = dtype_it->get<std::string>();
    const int elem = element_bytes(t.dtype_name);
    if (elem == 0) fail("unknown dtype " + t.dtype_name);
    t.dtype = engine_dtype(t.dtype_name);

    auto shape_it = entry.find("shape");
    if (shape_it == entry.end() || !shape_it->is_array()) fail("missing or non-array shape");
    uint64_t num_elements = 1;
    for (const json& d : *shape_it) {
      auto n = as_count(d);
      if (!n || *n > uint64_t(std::numeric_limits<int64_t>::max())) fail("bad shape entry " + d.dump());
      if (__builtin_mul_overflow(num_elements, *n, &num_elements)) fail("absurd shape: element count overflows");
      t.shape.push_back(int64_t(*n));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(num_elements, uint64_t(elem), &nbytes)) fail("absurd shape: byte count overflows");

    auto off_it = entry.find("data_offsets");
    if (off_it == entry.end() || !off_it->is_array() || off_it->size() != 2) fail("data_offsets is not [begin, end]");
    const auto begin = as_count((*off_it)[0]);
    const auto end = as_count((*off_it)[1]);
    if (!begin || !end || *begin > *end) fail("bad data_offsets " + off_it->dump());
    if (*end > data_size)
      fail("truncated file: data_offsets " + off_it->dump() + " reach past the data section of " +
           std::to_string(data_size) + " bytes");
    if (*end - *begin != nbytes)
      fail("data_offsets " + off_it->dump() + " hold " + std::to_string(*end - *begin) + " bytes, but shape " +
           shape_it->dump() + " of " + t.dtype_name + " needs " + std::to_string(nbytes));
    t.data = data + *begin;
    t.nbytes = int64_t(nbytes);
    f.index_.emplace(name, f.tensors_.size());
    f.tensors_.push_back(std::move(t));
    ranges.emplace_back(*begin, *end);
  }
  std::vector<size_t> order(ranges.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t k = 1; k < order.size(); ++k)
    if (ranges[order[k - 1]].second > ranges[order[k]].first)
      throw_load_error(path, "tensors " + f.tensors_[order[k - 1]].name + " and " + f.tensors_[order[k]].name +
                                 " overlap");
  return f;
}

const SafetensorsTensor* SafetensorsFile::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

SafetensorsModel SafetensorsModel::open_folder(const std::string& folder) {
  SafetensorsModel model;
  model.folder_ = folder;
  const fs::path dir(folder);
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> listed;  // (tensor, shard file name) from the index

  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const json index = read_json_file(index_path);
    auto map_it = index.is_object() ? index.find("weight_map") : index.end();
    if (map_it == index.end() || !map_it->is_object())
      throw_load_error(index_path.string(), "missing or non-object weight_map");
    std::set<std::string> shards;
    for (auto it = map_it->begin(); it != map_it->end(); ++it) {
      if (!it.value().is_string()) throw_load_error(index_path.string(), "tensor " + it.key() + ": shard is not a string");
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
        throw_load_error(index_path.string(), "tensor " + it.key() + ": bad shard file name \"" + shard + "\"");
      shards.insert(shard);
      listed.emplace_back(it.key(), shard);
    }
    if (shards.empty()) throw_load_error(index_path.string(), "weight_map lists no tensors");
    for (const std::string& shard : shards) model.files_.push_back(SafetensorsFile::open((dir / shard).string()));
  } else if (fs::exists(dir / "model.safetensors", ec)) {
    model.files_.push_back(SafetensorsFile::open((dir / "model.safetensors").string()));
  } else {
    std::vector<std::string> paths;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    if (paths.empty())
      throw_load_error(folder, "no model.safetensors, model.safetensors.index.json or *.safetensors");
    std::sort(paths.begin(), paths.end());
    for (const std::string& p : paths) model.files_.push_back(SafetensorsFile::open(p));
  }

  for (size_t fi = 0; fi < model.files_.size(); ++fi) {
    const auto& tensors = model.files_[fi].tensors();
    for (size_t ti = 0; ti < tensors.size(); ++ti) {
      auto [it, inserted] = model.index_.emplace(tensors[ti].name, std::make_pair(fi, ti));
      if (!inserted)
        throw_load_error(model.files_[fi].path(), "tensor " + tensors[ti].name + " is also in " +
                                                      model.files_[it->second.first].path());
    }
  }
  for (const auto& [name, shard] : listed) {
    const SafetensorsTensor* t = model.find_tensor(name);
    if (t == nullptr || fs::path(t->file).filename() != shard)
      throw_load_error(index_path.string(), "tensor " + name + " is listed in shard " + shard + " but is not in it");
  }
  return model;
}

const SafetensorsTensor* SafetensorsModel::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &files_[it->second.first].tensors()[it->second.second];
}

const SafetensorsTensor& SafetensorsModel::require(const std::string& name) const {
  const SafetensorsTensor* t = find_tensor(name);
  if (t == nullptr) throw_load_error(folder_, "missing tensor " + name);
  if (!t->dtype)
    throw_load_error(t->file, "tensor " + name + " has unsupported dtype " + t->dtype_name +
                                  " (supported: F32, F16, BF16)");
  return *t;
}

std::vector<std::shared_ptr<const void>> SafetensorsModel::storage() const {
  std::vector<std::shared_ptr<const void>> out;
  for (const SafetensorsFile& f : files_) out.push_back(f.storage());
  return out;
}

}  // namespace inflight::engine
