#include "engine/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "engine/load_error.h"
#include "engine/mapped_file.h"

static_assert(std::endian::native == std::endian::little, "GGUF is read and written little-endian in place");

namespace inflight::engine {

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays deeper than this are rejected (bounds recursion)
constexpr uint32_t kNumGgufTypes = 13;

// ggml_type numbers of the supported tensor types.
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ8_0 = 8, kGgmlBF16 = 30;
constexpr uint32_t kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlQ4_K = 12, kGgmlQ5_K = 13,
                   kGgmlQ6_K = 14;

std::string ggml_type_name(uint32_t t) {
  static const char* const names[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",    "Q4_2", "Q4_3",  "Q5_0",   "Q5_1",  "Q8_0",  "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",    "Q6_K", "Q8_K",  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS",  "I8",   "I16",   "I32",    "I64",   "F64",   "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0"};
  if (t < std::size(names)) return names[t];
  return "unknown";
}

std::optional<kernels::DType> dtype_of_ggml(uint32_t t) {
  switch (t) {
    case kGgmlF32: return kernels::DType::F32;
    case kGgmlF16: return kernels::DType::F16;
    case kGgmlQ8_0: return kernels::DType::Q8_0;
    case kGgmlBF16: return kernels::DType::BF16;
    case kGgmlQ4_0: return kernels::DType::Q4_0;
    case kGgmlQ4_1: return kernels::DType::Q4_1;
    case kGgmlQ5_0: return kernels::DType::Q5_0;
    case kGgmlQ5_1: return kernels::DType::Q5_1;
    case kGgmlQ4_K: return kernels::DType::Q4_K;
    case kGgmlQ5_K: return kernels::DType::Q5_K;
    case kGgmlQ6_K: return kernels::DType::Q6_K;
    default: return std::nullopt;
  }
}

uint32_t ggml_of_dtype(kernels::DType t) {
  switch (t) {
    case kernels::DType::F32: return kGgmlF32;
    case kernels::DType::F16: return kGgmlF16;
    case kernels::DType::BF16: return kGgmlBF16;
    case kernels::DType::Q8_0: return kGgmlQ8_0;
    case kernels::DType::Q4_0: return kGgmlQ4_0;
    case kernels::DType::Q4_1: return kGgmlQ4_1;
    case kernels::DType::Q5_0: return kGgmlQ5_0;
    case kernels::DType::Q5_1: return kGgmlQ5_1;
    case kernels::DType::Q4_K: return kGgmlQ4_K;
    case kernels::DType::Q5_K: return kGgmlQ5_K;
    case kernels::DType::Q6_K: return kGgmlQ6_K;
  }
  throw std::invalid_argument("GgufWriter: unknown dtype");
}

// Bytes one item of `t` takes at least (strings: their u64 length; arrays: type + count).
uint64_t min_item_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::String: return 8;
    case GgufType::Array: return 12;
  }
  return 1;
}

const char* alternative_name(const GgufValue& v) {
  static const char* const names[] = {"unsigned integer", "signed integer", "float", "bool", "string", "array"};
  return names[v.index()];
}

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

std::string format_ne(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Bounds-checked little-endian reads over [data, data + size). Every failure is a LoadError naming
// the file, what was being read and where.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }
  [[noreturn]] void fail(const std::string& what) const {
    throw_load_error(path_, context_.empty() ? what : context_ + ": " + what);
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      fail(std::string("truncated file: ") + what + " at offset " + std::to_string(pos_) + " needs " +
           std::to_string(n) + " bytes, the file has " + std::to_string(size_));
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail(std::string("absurd length ") + std::to_string(len) + " of " + what + " at offset " +
           std::to_string(pos_ - 8) + ": only " + std::to_string(remaining()) +
           " bytes left (file truncated or corrupt)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
  std::string context_;
};

}  // namespace

class GgufParser {
 public:
  static GgufFile parse(std::string path, const uint8_t* data, uint64_t size, std::shared_ptr<const void> owner) {
    GgufFile f;
    f.path_ = std::move(path);
    f.storage_ = std::move(owner);
    ByteReader r(data, size, f.path_);

    char magic[4];
    r.need(4, "magic");
    std::memcpy(magic, data, 4);
    if (std::memcmp(magic, kMagic, 4) != 0) r.fail("bad magic: not a GGUF file");
    r.read<uint32_t>("magic");
    f.version_ = r.read<uint32_t>("version");
    if (f.version_ != 2 && f.version_ != 3)
      r.fail("unsupported GGUF version " + std::to_string(f.version_) + " (supported: 2, 3)");
    const uint64_t num_tensors = r.read<uint64_t>("tensor count");
    const uint64_t num_kv = r.read<uint64_t>("metadata count");
    // Bounds by the smallest possible entry keep absurd counts from driving allocations.
    if (num_kv > r.remaining() / (8 + 4 + 1))
      r.fail("absurd metadata count " + std::to_string(num_kv) + ": the file (" + std::to_string(size) +
             " bytes) is truncated or corrupt");
    if (num_tensors > r.remaining() / (8 + 4 + 8 + 4 + 8))
      r.fail("absurd tensor count " + std::to_string(num_tensors) + ": the file (" + std::to_string(size) +
             " bytes) is truncated or corrupt");

    for (uint64_t i = 0; i < num_kv; ++i) {
      r.set_context("metadata entry " + std::to_string(i));
      std::string key = r.read_string("key");
      r.set_context("key " + key);
      const uint32_t type = r.read<uint32_t>("value type");
      GgufValue value = read_value(r, type, 0);
      if (!f.kv_.emplace(std::move(key), std::move(value)).second) r.fail("duplicate key");
    }

    r.set_context("key general.alignment");
    uint64_t alignment = kDefaultAlignment;
    if (auto it = f.kv_.find("general.alignment"); it != f.kv_.end()) {
      const auto* u = std::get_if<uint64_t>(&it->second);
      const auto* s = std::get_if<int64_t>(&it->second);
      if (u == nullptr && s == nullptr) r.fail("must be an integer");
      const uint64_t a = u ? *u : uint64_t(*s);
      if ((s && *s <= 0) || a == 0 || !std::has_single_bit(a) || a > kMaxAlignment)
        r.fail("alignment " + std::to_string(a) + " is not a power of two up to 2^30");
      alignment = a;
    }

    std::vector<uint64_t> offsets;
    f.tensors_.reserve(size_t(num_tensors));
    offsets.reserve(size_t(num_tensors));
    for (uint64_t i = 0; i < num_tensors; ++i) {
      r.set_context("tensor info " + std::to_string(i));
      GgufTensorInfo t;
      t.name = r.read_string("tensor name");
      r.set_context("tensor " + t.name);
      const uint32_t n_dims = r.read<uint32_t>("dimension count");
      if (n_dims == 0 || n_dims > kMaxDims) r.fail("bad dimension count " + std::to_string(n_dims));
      uint64_t num_elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const int64_t n = r.read<int64_t>("dimension");
        if (n < 0) r.fail("negative dimension " + std::to_string(n));
        if (__builtin_mul_overflow(num_elements, uint64_t(n), &num_elements))
          r.fail("absurd shape: element count overflows");
        t.ne.push_back(n);
      }
      const uint32_t type = r.read<uint32_t>("tensor type");
      const auto dtype = dtype_of_ggml(type);
      if (!dtype)
        r.fail("unsupported ggml tensor type " + std::to_string(type) + " (" + ggml_type_name(type) +
               "); supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
      t.dtype = *dtype;
      if (t.ne[0] % kernels::block_size(t.dtype) != 0)
        r.fail(ggml_type_name(type) + " row of " + std::to_string(t.ne[0]) + " elements is not a multiple of its block size " +
               std::to_string(kernels::block_size(t.dtype)));
      const uint64_t offset = r.read<uint64_t>("tensor data offset");
      if (offset % alignment != 0)
        r.fail("data offset " + std::to_string(offset) + " is not a multiple of the alignment " +
               std::to_string(alignment));
      uint64_t nbytes = 0;
      // NOTE: row_bytes multiplies in int64_t: a first dimension past INT64_MAX / 4 would overflow it.
      if (!t.ne.empty() && t.ne[0] > std::numeric_limits<int64_t>::max() / 4)
        r.fail("absurd shape " + format_ne(t.ne) + ": row byte count overflows");
      const uint64_t rows = t.ne[0] == 0 ? 0 : num_elements / uint64_t(t.ne[0]);
      if (__builtin_mul_overflow(uint64_t(kernels::row_bytes(t.dtype, t.ne[0])), rows, &nbytes) ||
          nbytes > uint64_t(std::numeric_limits<int64_t>::max()))
        r.fail("absurd shape " + format_ne(t.ne) + ": byte count overflows");
      t.nbytes = int64_t(nbytes);
      if (f.tensor_index_.count(t.name)) r.fail("duplicate tensor name");
      f.tensor_index_.emplace(t.name, f.tensors_.size());
      f.tensors_.push_back(std::move(t));
      offsets.push_back(offset);
    }
    r.set_context("");

    // Tensor data starts at the first multiple of the alignment after the tensor infos.
    const uint64_t data_start = align_up(r.offset(), alignment);
    for (size_t i = 0; i < f.tensors_.size(); ++i) {
      GgufTensorInfo& t = f.tensors_[i];
      const uint64_t begin = offsets[i];
      const uint64_t avail = size >= data_start ? size - data_start : 0;
      if (begin > avail || uint64_t(t.nbytes) > avail - begin)
        throw_load_error(f.path_, "tensor " + t.name + ": truncated file: data [" + std::to_string(data_start + begin) +
                                      ", " + std::to_string(data_start + begin + uint64_t(t.nbytes)) +
                                      ") lies past the end of the file (" + std::to_string(size) + " bytes)");
      t.data = data + data_start + begin;
    }
    std::vector<size_t> order(f.tensors_.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
      const size_t prev = order[k - 1], cur = order[k];
      if (offsets[prev] + uint64_t(f.tensors_[prev].nbytes) > offsets[cur])
        throw_load_error(f.path_, "tensors " + f.tensors_[prev].name + " and " + f.tensors_[cur].name +
                                      " overlap (offsets " + std::to_string(offsets[prev]) + " and " +
                                      std::to_string(offsets[cur]) + ")");
    }
    return f;
  }

 private:
  static GgufValue read_value(ByteReader& r, uint32_t type, int depth) {
    switch (GgufType(type)) {
      case GgufType::U8: return uint64_t(r.read<uint8_t>("u8 value"));
      case GgufType::I8: return int64_t(r.read<int8_t>("i8 value"));
      case GgufType::U16: return uint64_t(r.read<uint16_t>("u16 value"));
      case GgufType::I16: return int64_t(r.read<int16_t>("i16 value"));
      case GgufType::U32: return uint64_t(r.read<uint32_t>("u32 value"));
      case GgufType::I32: return int64_t(r.read<int32_t>("i32 value"));
      case GgufType::U64: return r.read<uint64_t>("u64 value");
      case GgufType::I64: return r.read<int64_t>("i64 value");
      case GgufType::F32: return double(r.read<float>("f32 value"));
      case GgufType::F64: return r.read<double>("f64 value");
      case GgufType::Bool: {
        const uint8_t b = r.read<uint8_t>("bool value");
        if (b > 1) r.fail("bad bool value " + std::to_string(b));
        return b == 1;
      }
      case GgufType::String: return r.read_string("string value");
      case GgufType::Array: {
        if (depth >= kMaxArrayDepth) r.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth));
        const uint32_t item_type = r.read<uint32_t>("array item type");
        if (item_type >= kNumGgufTypes) r.fail("unknown array item type " + std::to_string(item_type));
        const uint64_t count = r.read<uint64_t>("array count");
        if (count > r.remaining() / min_item_bytes(GgufType(item_type)))
          r.fail("absurd array count " + std::to_string(count) + ": only " + std::to_string(r.remaining()) +
                 " bytes left (file truncated or corrupt)");
        auto arr = std::make_shared<GgufArray>();
        arr->type = GgufType(item_type);
        arr->items.reserve(size_t(count));
        for (uint64_t i = 0; i < count; ++i) arr->items.push_back(read_value(r, item_type, depth + 1));
        return arr;
      }
    }
    r.fail("unknown value type " + std::to_string(type));
  }
};

GgufFile GgufFile::open(const std::string& path) {
  MappedFile m = map_file(path);
  GgufFile g = GgufParser::parse(path, m.data, m.size, std::move(m.owner));
  g.private_copy_ = true;
  return g;
}

GgufFile GgufFile::from_memory(std::shared_ptr<const std::vector<uint8_t>> bytes, const std::string& name) {
  if (!bytes) throw_load_error(name, "no bytes");
  const uint8_t* data = bytes->data();
  const uint64_t size = bytes->size();
  return GgufParser::parse(name, data, size, std::shared_ptr<const void>(std::move(bytes)));
}

GgufFile GgufFile::from_static(std::span<const uint8_t> bytes, const std::string& name) {
  return GgufParser::parse(name, bytes.data(), bytes.size(), std::shared_ptr<const void>());
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

[[noreturn]] void throw_wrong_type(const std::string& path, const std::string& key, const GgufValue& v,
                                   const char* expected) {
  throw_load_error(path, "key " + key + " is " + alternative_name(v) + ", expected " + expected);
}

std::optional<int64_t> as_int(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(*u);
  }
  if (const auto* s = std::get_if<int64_t>(&v)) return *s;
  return std::nullopt;
}

std::optional<double> as_float(const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return double(*u);
  if (const auto* s = std::get_if<int64_t>(&v)) return double(*s);
  return std::nullopt;
}

const GgufArray& as_array(const std::string& path, const std::string& key, const GgufValue& v, const char* expected) {
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v);
  if (a == nullptr || !*a) throw_wrong_type(path, key, v, expected);
  return **a;
}

}  // namespace

std::optional<int64_t> GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  auto i = as_int(*v);
  if (!i) throw_wrong_type(path_, key, *v, "an integer (up to 2^63-1)");
  return i;
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  auto d = as_float(*v);
  if (!d) throw_wrong_type(path_, key, *v, "a number");
  return d;
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const auto* b = std::get_if<bool>(v);
  if (b == nullptr) throw_wrong_type(path_, key, *v, "a bool");
  return *b;
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  const auto* s = std::get_if<std::string>(v);
  if (s == nullptr) throw_wrong_type(path_, key, *v, "a string");
  return *s;
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  const GgufArray& a = as_array(path_, key, *v, "an array of strings");
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const GgufValue& item : a.items) {
    const auto* s = std::get_if<std::string>(&item);
    if (s == nullptr) throw_wrong_type(path_, key, item, "an array of strings, has an item that");
    out.push_back(*s);
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  const GgufArray& a = as_array(path_, key, *v, "an array of numbers");
  std::vector<double> out;
  out.reserve(a.items.size());
  for (const GgufValue& item : a.items) {
    auto d = as_float(item);
    if (!d) throw_wrong_type(path_, key, item, "an array of numbers, has an item that");
    out.push_back(*d);
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  const GgufArray& a = as_array(path_, key, *v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a.items.size());
  for (const GgufValue& item : a.items) {
    auto i = as_int(item);
    if (!i) throw_wrong_type(path_, key, item, "an array of integers, has an item that");
    out.push_back(*i);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Writer

namespace {

GgufType default_type(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v)) return *u <= UINT32_MAX ? GgufType::U32 : GgufType::U64;
  if (const auto* s = std::get_if<int64_t>(&v))
    return *s >= INT32_MIN && *s <= INT32_MAX ? GgufType::I32 : GgufType::I64;
  if (std::holds_alternative<double>(v)) return GgufType::F32;
  if (std::holds_alternative<bool>(v)) return GgufType::Bool;
  if (std::holds_alternative<std::string>(v)) return GgufType::String;
  return GgufType::Array;
}

// The item type of an array: its own, else the widest default type of its items (I32 when empty).
GgufType item_type(const GgufArray& a) {
  if (a.type) return *a.type;
  if (a.items.empty()) return GgufType::I32;
  GgufType t = default_type(a.items[0]);
  for (const GgufValue& item : a.items) {
    const GgufType ti = default_type(item);
    if (ti == GgufType::U64 && t == GgufType::U32) t = ti;
    if (ti == GgufType::I64 && t == GgufType::I32) t = ti;
  }
  return t;
}

[[noreturn]] void throw_misfit(const std::string& key, const char* why) {
  throw std::invalid_argument("GgufWriter: key " + key + ": " + why);
}

template <class T>
void append_pod(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append_pod<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

template <class T>
void append_int(std::vector<uint8_t>& out, const std::string& key, const GgufValue& v) {
  int64_t lo = 0;
  uint64_t hi = 0;
  bool neg = false;
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    hi = *u;
  } else if (const auto* s = std::get_if<int64_t>(&v)) {
    neg = *s < 0;
    lo = *s;
    hi = neg ? 0 : uint64_t(*s);
  } else {
    throw_misfit(key, "value is not an integer");
  }
  if (neg ? lo < int64_t(std::numeric_limits<T>::min()) : hi > uint64_t(std::numeric_limits<T>::max()))
    throw_misfit(key, "integer out of range of its type");
  append_pod<T>(out, neg ? T(lo) : T(hi));
}

// Appends the payload of `v` as `type` (no type tag). Throws std::invalid_argument when it does not fit.
void append_value(std::vector<uint8_t>& out, const std::string& key, const GgufValue& v, GgufType type, int depth) {
  switch (type) {
    case GgufType::U8: return append_int<uint8_t>(out, key, v);
    case GgufType::I8: return append_int<int8_t>(out, key, v);
    case GgufType::U16: return append_int<uint16_t>(out, key, v);
    case GgufType::I16: return append_int<int16_t>(out, key, v);
    case GgufType::U32: return append_int<uint32_t>(out, key, v);
    case GgufType::I32: return append_int<int32_t>(out, key, v);
    case GgufType::U64: return append_int<uint64_t>(out, key, v);
    case GgufType::I64: return append_int<int64_t>(out, key, v);
    case GgufType::F32:
    case GgufType::F64: {
      const auto* d = std::get_if<double>(&v);
      if (d == nullptr) throw_misfit(key, "value is not a float");
      if (type == GgufType::F32) return append_pod<float>(out, float(*d));
      return append_pod<double>(out, *d);
    }
    case GgufType::Bool: {
      const auto* b = std::get_if<bool>(&v);
      if (b == nullptr) throw_misfit(key, "value is not a bool");
      return append_pod<uint8_t>(out, *b ? 1 : 0);
    }
    case GgufType::String: {
      const auto* s = std::get_if<std::string>(&v);
      if (s == nullptr) throw_misfit(key, "value is not a string");
      return append_string(out, *s);
    }
    case GgufType::Array: {
      const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v);
      if (a == nullptr || !*a) throw_misfit(key, "value is not an array");
      if (depth >= kMaxArrayDepth) throw_misfit(key, "arrays nested too deep");
      const GgufType t = item_type(**a);
      append_pod<uint32_t>(out, uint32_t(t));
      append_pod<uint64_t>(out, (*a)->items.size());
      for (const GgufValue& item : (*a)->items) append_value(out, key, item, t, depth + 1);
      return;
    }
  }
  throw_misfit(key, "unknown type");
}

// Sinks take the header bytes, then each tensor's bytes produced in place by its fill callback.
struct MemorySink {
  std::vector<uint8_t>& out;
  void write(const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); }
  void pad_to(uint64_t offset) { out.resize(size_t(offset), 0); }
  void write_tensor(size_t n, const std::function<void(uint8_t*)>& fill) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n) fill(out.data() + at);
  }
};

struct FileSink {
  std::FILE* file;
  const std::string& path;
  uint64_t written = 0;
  std::vector<uint8_t> buffer;  // one tensor at a time; grows to the largest
  void write(const uint8_t* p, size_t n) {
    if (n && std::fwrite(p, 1, n, file) != n) throw std::runtime_error(path + ": write failed");
    written += n;
  }
  void pad_to(uint64_t offset) {
    static const uint8_t zeros[256] = {};
    while (written < offset) write(zeros, size_t(std::min<uint64_t>(offset - written, sizeof(zeros))));
  }
  void write_tensor(size_t n, const std::function<void(uint8_t*)>& fill) {
    if (n == 0) return;
    if (buffer.size() < n) buffer.resize(n);
    fill(buffer.data());
    write(buffer.data(), n);
  }
};

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (Entry& e : kv_) {
    if (e.key == key) {
      e.value = std::move(value);
      e.type = std::nullopt;
      return;
    }
  }
  kv_.push_back({key, std::move(value), std::nullopt});
}

void GgufWriter::set(const std::string& key, GgufValue value, GgufType type) {
  std::vector<uint8_t> probe;  // fails here, not at write time, when the value does not fit
  if (auto* a = std::get_if<std::shared_ptr<GgufArray>>(&value); a && *a && type != GgufType::Array) {
    auto copy = std::make_shared<GgufArray>(**a);
    copy->type = type;
    value = copy;
    type = GgufType::Array;
  }
  append_value(probe, key, value, type, 0);
  for (Entry& e : kv_) {
    if (e.key == key) {
      e.value = std::move(value);
      e.type = type;
      return;
    }
  }
  kv_.push_back({key, std::move(value), type});
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, kernels::DType dtype,
                            std::function<void(uint8_t* dst)> fill) {
  if (ne.empty() || ne.size() > kMaxDims)
    throw std::invalid_argument("GgufWriter: tensor " + name + ": needs 1 to 4 dimensions");
  for (int64_t n : ne)
    if (n < 0) throw std::invalid_argument("GgufWriter: tensor " + name + ": negative dimension");
  if (ne[0] % kernels::block_size(dtype) != 0)
    throw std::invalid_argument("GgufWriter: tensor " + name + ": " + std::string(kernels::dtype_name(dtype)) +
                                " needs ne[0] % " + std::to_string(kernels::block_size(dtype)) + " == 0");
  for (const Tensor& t : tensors_)
    if (t.name == name) throw std::invalid_argument("GgufWriter: duplicate tensor " + name);
  ggml_of_dtype(dtype);
  tensors_.push_back({name, std::move(ne), dtype, std::move(fill)});
}

template <class Sink>
void GgufWriter::write_to(Sink& sink) const {
  uint64_t alignment = kDefaultAlignment;
  for (const Entry& e : kv_) {
    if (e.key != "general.alignment") continue;
    const auto* u = std::get_if<uint64_t>(&e.value);
    if (u == nullptr || *u == 0 || !std::has_single_bit(*u) || *u > kMaxAlignment)
      throw std::invalid_argument("GgufWriter: general.alignment must be a power of two (uint64_t)");
    alignment = *u;
  }
  std::vector<uint8_t> header;
  header.reserve(1 << 16);  // also keeps GCC 12's -Wstringop-overflow false positive on insert quiet
  header.insert(header.end(), kMagic, kMagic + 4);
  append_pod<uint32_t>(header, 3);
  append_pod<uint64_t>(header, tensors_.size());
  append_pod<uint64_t>(header, kv_.size());
  for (const Entry& e : kv_) {
    append_string(header, e.key);
    const GgufType t = e.type.value_or(default_type(e.value));
    append_pod<uint32_t>(header, uint32_t(t));
    append_value(header, e.key, e.value, t, 0);
  }
  std::vector<uint64_t> nbytes;
  uint64_t offset = 0;  // relative to the start of the data section
  for (const Tensor& t : tensors_) {
    uint64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= uint64_t(t.ne[d]);
    nbytes.push_back(uint64_t(kernels::row_bytes(t.dtype, t.ne[0])) * rows);
    append_string(header, t.name);
    append_pod<uint32_t>(header, uint32_t(t.ne.size()));
    for (int64_t n : t.ne) append_pod<int64_t>(header, n);
    append_pod<uint32_t>(header, ggml_of_dtype(t.dtype));
    offset = align_up(offset, alignment);
    append_pod<uint64_t>(header, offset);
    offset += nbytes.back();
  }
  sink.write(header.data(), header.size());
  const uint64_t data_start = align_up(header.size(), alignment);
  sink.pad_to(data_start);
  offset = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    offset = align_up(offset, alignment);
    sink.pad_to(data_start + offset);
    sink.write_tensor(size_t(nbytes[i]), tensors_[i].fill);
    offset += nbytes[i];
  }
}

std::vector<uint8_t> GgufWriter::write_memory() const {
  std::vector<uint8_t> out;
  MemorySink sink{out};
  write_to(sink);
  return out;
}

void GgufWriter::write_file(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) throw std::runtime_error(path + ": cannot create " + tmp + ": " + std::strerror(errno));
  try {
    FileSink sink{file, path, 0, {}};
    write_to(sink);
    const bool ok = std::fflush(file) == 0;
    if (std::fclose(file) != 0 || !ok) {
      file = nullptr;
      throw std::runtime_error(path + ": write failed");
    }
    file = nullptr;
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw std::runtime_error(path + ": cannot rename " + tmp + ": " + ec.message());
  } catch (...) {
    if (file != nullptr) std::fclose(file);
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
}

}  // namespace inflight::engine
