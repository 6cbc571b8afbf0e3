// GgufFile / GgufWriter: round trips of every metadata type and tensor dtype, stories260K, and malformed
// files (truncated, corrupted, absurd) that must each be a LoadError naming the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/gguf.h"
#include "kernels/dtype.h"
#include "kernels/thread_pool.h"
#include "loader_test_support.h"

using namespace inflight;
using engine::GgufArray;
using engine::GgufFile;
using engine::GgufType;
using engine::GgufValue;
using engine::GgufWriter;
using kernels::DType;

namespace {

std::shared_ptr<GgufArray> array_of(std::vector<GgufValue> items, std::optional<GgufType> type = std::nullopt) {
  auto a = std::make_shared<GgufArray>();
  a->items = std::move(items);
  a->type = type;
  return a;
}

GgufFile parse(std::vector<uint8_t> bytes, const std::string& name = "mem.gguf") {
  return GgufFile::from_memory(std::make_shared<const std::vector<uint8_t>>(std::move(bytes)), name);
}

// Values exactly representable in f16 and bf16.
const std::vector<float> kExact = {0.0f, 1.0f, -2.5f, 0.125f, 96.0f, -0.375f, 3.0f, 1024.0f};

// A small GGUF: a few keys, F32 "tensor_f32" ne {8, 2} and Q8_0 "tensor_q8" ne {32, 2}.
GgufWriter small_writer() {
  GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("test.count", uint64_t(7));
  w.set("test.list", array_of({std::string("x"), std::string("yz")}));
  w.add_tensor("tensor_f32", {8, 2}, DType::F32, [](uint8_t* dst) {
    for (int i = 0; i < 16; ++i) {
      const float v = float(i);
      std::memcpy(dst + 4 * i, &v, 4);
    }
  });
  w.add_tensor("tensor_q8", {32, 2}, DType::Q8_0, [](uint8_t* dst) {
    std::memset(dst, 0, 2 * kernels::kQ8BlockBytes);
    const uint16_t one = kernels::f32_to_f16(1.0f);
    for (int b = 0; b < 2; ++b) std::memcpy(dst + b * kernels::kQ8BlockBytes, &one, 2);
  });
  return w;
}

// The LoadError message of parsing `bytes` as a file named `name` in `dir`, written to disk.
std::string open_error(const test::TempDir& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir / name;
  test::write_bytes(path, bytes);
  const std::string msg = test::load_error_message([&] { GgufFile::open(path); });
  CHECK_MESSAGE(test::contains(msg, path), msg);
  return msg;
}

}  // namespace

TEST_SUITE("gguf") {

TEST_CASE("gguf metadata of every value type round-trips, nested arrays included") {
  GgufWriter w;
  w.set("t.u8", uint64_t(200), GgufType::U8);
  w.set("t.i8", int64_t(-100), GgufType::I8);
  w.set("t.u16", uint64_t(60000), GgufType::U16);
  w.set("t.i16", int64_t(-30000), GgufType::I16);
  w.set("t.u32", uint64_t(4000000000u));
  w.set("t.i32", int64_t(-2000000000));
  w.set("t.u64", uint64_t(1) << 40);
  w.set("t.i64", -(int64_t(1) << 40));
  w.set("t.f32", 0.25);
  w.set("t.f64", 0.1, GgufType::F64);
  w.set("t.bool", true);
  w.set("t.string", std::string("héllo ▁"));
  w.set("t.strings", array_of({std::string("a"), std::string(""), std::string("ccc")}));
  w.set("t.floats", array_of({1.5, -2.0}, GgufType::F32));
  w.set("t.ints", array_of({int64_t(-1), int64_t(5)}), GgufType::I16);
  w.set("t.nested", array_of({GgufValue(array_of({uint64_t(1), uint64_t(2)}, GgufType::U8)),
                              GgufValue(array_of({}, GgufType::U8))}));
  w.set("t.empty", array_of({}, GgufType::String));
  w.set("t.replaced", uint64_t(1));
  w.set("t.replaced", std::string("second"));
  const GgufFile g = parse(w.write_memory());

  CHECK(g.version() == 3);
  CHECK(g.metadata().size() == 18);
  CHECK(g.get_int("t.u8") == 200);
  CHECK(g.get_int("t.i8") == -100);
  CHECK(g.get_int("t.u16") == 60000);
  CHECK(g.get_int("t.i16") == -30000);
  CHECK(g.get_int("t.u32") == 4000000000ll);
  CHECK(g.get_int("t.i32") == -2000000000);
  CHECK(g.get_int("t.u64") == int64_t(1) << 40);
  CHECK(g.get_int("t.i64") == -(int64_t(1) << 40));
  CHECK(std::holds_alternative<uint64_t>(*g.find("t.u8")));
  CHECK(std::holds_alternative<int64_t>(*g.find("t.i8")));
  CHECK(g.get_float("t.f32") == 0.25);
  CHECK(g.get_float("t.f64") == 0.1);  // F64 keeps every bit
  CHECK(g.get_bool("t.bool") == true);
  CHECK(g.get_string("t.string") == "héllo ▁");
  CHECK(g.get_string("t.replaced") == "second");
  CHECK(g.get_string_array("t.strings") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(g.get_float_array("t.floats") == std::vector<double>{1.5, -2.0});
  CHECK(g.get_int_array("t.ints") == std::vector<int64_t>{-1, 5});
  const auto& ints = std::get<std::shared_ptr<GgufArray>>(*g.find("t.ints"));
  CHECK(ints->type == GgufType::I16);
  const auto& nested = std::get<std::shared_ptr<GgufArray>>(*g.find("t.nested"));
  REQUIRE(nested->items.size() == 2);
  CHECK(nested->type == GgufType::Array);
  const auto& inner = std::get<std::shared_ptr<GgufArray>>(nested->items[0]);
  CHECK(inner->type == GgufType::U8);
  CHECK(std::get<uint64_t>(inner->items[1]) == 2);
  CHECK(std::get<std::shared_ptr<GgufArray>>(nested->items[1])->items.empty());
  CHECK(g.get_string_array("t.empty").empty());
  CHECK_FALSE(g.get_int("t.absent"));
  CHECK(g.get_string_array("t.absent").empty());

  // Getters of the wrong type name the key.
  CHECK(test::contains(test::load_error_message([&] { g.get_int("t.string"); }), "t.string"));
  CHECK(test::contains(test::load_error_message([&] { g.get_string("t.u8"); }), "mem.gguf"));
  CHECK(test::contains(test::load_error_message([&] { g.get_string_array("t.floats"); }), "t.floats"));
  CHECK(test::contains(test::load_error_message([&] { g.get_bool("t.i8"); }), "t.i8"));

  // Forced types that do not fit are rejected at set().
  CHECK_THROWS_AS(w.set("bad", uint64_t(256), GgufType::U8), std::invalid_argument);
  CHECK_THROWS_AS(w.set("bad", std::string("x"), GgufType::I32), std::invalid_argument);
  CHECK_THROWS_AS(w.set("bad", array_of({int64_t(-1)}), GgufType::U32), std::invalid_argument);
}

TEST_CASE("gguf tensors of F32, F16, BF16 and Q8_0 round-trip") {
  GgufWriter w;
  const int64_t n = int64_t(kExact.size());
  w.add_tensor("f32", {n, 3}, DType::F32, [&](uint8_t* dst) {
    for (int r = 0; r < 3; ++r) std::memcpy(dst + r * n * 4, kExact.data(), size_t(n) * 4);
  });
  w.add_tensor("f16", {n}, DType::F16, [&](uint8_t* dst) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = kernels::f32_to_f16(kExact[size_t(i)]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  });
  w.add_tensor("bf16", {n, 1, 1}, DType::BF16, [&](uint8_t* dst) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = kernels::f32_to_bf16(kExact[size_t(i)]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  });
  // Q8_0, 2 rows of 64: block b has scale 0.5 * (b + 1) and q[i] = i - 16.
  w.add_tensor("q8_0", {64, 2}, DType::Q8_0, [](uint8_t* dst) {
    for (int b = 0; b < 4; ++b) {
      uint8_t* block = dst + b * kernels::kQ8BlockBytes;
      const uint16_t d = kernels::f32_to_f16(0.5f * float(b + 1));
      std::memcpy(block, &d, 2);
      for (int i = 0; i < 32; ++i) block[2 + i] = uint8_t(int8_t(i - 16));
    }
  });
  const auto bytes = std::make_shared<const std::vector<uint8_t>>(w.write_memory());
  const GgufFile g = GgufFile::from_memory(bytes, "mem.gguf");
  REQUIRE(g.tensors().size() == 4);
  CHECK(g.tensors()[0].name == "f32");  // file order kept

  const auto* f32 = g.find_tensor("f32");
  REQUIRE(f32 != nullptr);
  CHECK(f32->ne == std::vector<int64_t>{n, 3});
  CHECK(f32->dtype == DType::F32);
  CHECK(f32->nbytes == n * 3 * 4);
  CHECK(std::memcmp(f32->data + n * 4, kExact.data(), size_t(n) * 4) == 0);

  for (const char* name : {"f16", "bf16"}) {
    const auto* t = g.find_tensor(name);
    REQUIRE(t != nullptr);
    CHECK(t->nbytes == n * 2);
    std::vector<float> row(kExact.size());
    kernels::dequantize_row(t->dtype, t->data, row.data(), n);
    CHECK(row == kExact);
  }
  CHECK(g.find_tensor("f16")->dtype == DType::F16);
  CHECK(g.find_tensor("bf16")->dtype == DType::BF16);
  CHECK(g.find_tensor("bf16")->ne == std::vector<int64_t>{n, 1, 1});

  const auto* q8 = g.find_tensor("q8_0");
  REQUIRE(q8 != nullptr);
  CHECK(q8->dtype == DType::Q8_0);
  CHECK(q8->nbytes == 4 * kernels::kQ8BlockBytes);
  std::vector<float> row(64);
  kernels::dequantize_row(DType::Q8_0, q8->data + kernels::row_bytes(DType::Q8_0, 64), row.data(), 64);
  CHECK(row[0] == 1.5f * -16.0f);   // block 2
  CHECK(row[63] == 2.0f * 15.0f);   // block 3
  for (const auto& t : g.tensors()) {
    CHECK((t.data - bytes->data()) % 32 == 0);  // default alignment
    CHECK(t.data + t.nbytes <= bytes->data() + bytes->size());
  }
  CHECK_FALSE(g.find_tensor("absent"));
  CHECK_THROWS_AS(w.add_tensor("q8_bad", {48}, DType::Q8_0, [](uint8_t*) {}), std::invalid_argument);
  CHECK_THROWS_AS(w.add_tensor("f32", {4}, DType::F32, [](uint8_t*) {}), std::invalid_argument);
}

TEST_CASE("gguf general.alignment is honored when writing and reading") {
  GgufWriter w = small_writer();
  w.set("general.alignment", uint64_t(256));
  const auto bytes = std::make_shared<const std::vector<uint8_t>>(w.write_memory());
  const GgufFile g = GgufFile::from_memory(bytes, "mem.gguf");
  for (const auto& t : g.tensors()) CHECK((t.data - bytes->data()) % 256 == 0);
  CHECK(g.find_tensor("tensor_f32")->data[4] == 0);
  float v;
  std::memcpy(&v, g.find_tensor("tensor_f32")->data + 4 * 9, 4);
  CHECK(v == 9.0f);

  GgufWriter bad = small_writer();
  bad.set("general.alignment", uint64_t(24));
  CHECK_THROWS_AS(bad.write_memory(), std::invalid_argument);
}

TEST_CASE("gguf write_file matches write_memory, and v2 files are read") {
  test::TempDir dir("gguf");
  const GgufWriter w = small_writer();
  const std::string path = dir / "small.gguf";
  w.write_file(path);
  const auto bytes = w.write_memory();
  CHECK(test::read_bytes(path) == bytes);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  const GgufFile g = GgufFile::open(path);
  CHECK(g.path() == path);
  CHECK(g.get_int("test.count") == 7);
  CHECK(g.get_string_array("test.list") == std::vector<std::string>{"x", "yz"});

  auto v2 = bytes;
  test::poke<uint32_t>(v2, 4, 2);
  CHECK(parse(v2).version() == 2);
  CHECK(parse(v2).tensors().size() == 2);

  CHECK_THROWS_AS(w.write_file((dir.path / "no-such-dir" / "x.gguf").string()), std::runtime_error);
}

TEST_CASE("gguf stories260K opens with its 48 F32 tensors") {
  const GgufFile g = GgufFile::open(test::stories_gguf());
  CHECK(g.version() == 3);
  CHECK(g.get_string("general.architecture") == "llama");
  CHECK(g.get_int("llama.block_count") == 5);
  CHECK(g.get_string_array("tokenizer.ggml.tokens").size() == 512);
  CHECK(g.tensors().size() == 48);
  const auto* embd = g.find_tensor("token_embd.weight");
  REQUIRE(embd != nullptr);
  CHECK(embd->ne == std::vector<int64_t>{64, 512});
  for (const auto& t : g.tensors()) CHECK(t.dtype == DType::F32);
  CHECK(g.find_tensor("blk.0.ffn_gate.weight")->ne == std::vector<int64_t>{64, 172});
}

TEST_CASE("gguf tensors of Q4_0 .. Q6_K round-trip, and each cut inside a block names the tensor") {
  using kernels::block_size;
  using kernels::row_bytes;
  test::TempDir dir("gguf-quant");
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(kernels::dtype_name(t));
    const int64_t cols = 2 * block_size(t);
    std::vector<float> values(size_t(3 * cols));
    for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(float(i) * 0.37f);
    std::vector<uint8_t> quantized(size_t(3 * row_bytes(t, cols)));
    kernels::quantize_row(t, values.data(), quantized.data(), 3 * cols);
    GgufWriter w;
    w.set("general.architecture", std::string("llama"));
    w.add_tensor("blk.0.ffn_down.weight", {cols, 3}, t,
                 [&](uint8_t* dst) { std::memcpy(dst, quantized.data(), quantized.size()); });
    const auto shared = std::make_shared<const std::vector<uint8_t>>(w.write_memory());
    const std::vector<uint8_t>& bytes = *shared;
    const GgufFile g = GgufFile::from_memory(shared, "mem.gguf");
    const auto* q = g.find_tensor("blk.0.ffn_down.weight");
    REQUIRE(q != nullptr);
    CHECK(q->dtype == t);
    CHECK(q->nbytes == int64_t(quantized.size()));
    CHECK(std::memcmp(q->data, quantized.data(), quantized.size()) == 0);
    // Cut inside the last block, and inside the first: a LoadError naming the tensor.
    const size_t data_end = size_t(q->data - bytes.data()) + quantized.size();
    for (size_t len : {data_end - 1, data_end - size_t(kernels::block_bytes(t) / 2), data_end - quantized.size() + 1}) {
      CAPTURE(len);
      const std::string msg = open_error(dir, "cut.gguf", std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(len)));
      CHECK_MESSAGE(test::contains(msg, "blk.0.ffn_down.weight"), msg);
      CHECK_MESSAGE(test::contains(msg, "truncated"), msg);
    }
    // A row that is not a whole number of blocks.
    auto bad = bytes;
    test::poke<int64_t>(bad, test::tensor_info_offsets(bad, "blk.0.ffn_down.weight", 2).ne, cols - 16);
    const std::string msg = open_error(dir, "row.gguf", bad);
    CHECK_MESSAGE(test::contains(msg, "blk.0.ffn_down.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, "multiple of its block size " + std::to_string(block_size(t))), msg);
    CHECK_THROWS_AS(w.add_tensor("bad", {cols - 16}, t, [](uint8_t*) {}), std::invalid_argument);
  }
}

TEST_CASE("gguf a file of several read chunks is read byte for byte by the parallel read") {
  // map_file reads 32 MiB chunks on the compute pool's threads: a 70 MiB tensor spans three chunks, its
  // bytes a pattern no chunk could take for another's.
  const int64_t n = int64_t(70) << 18;  // f32 values: 70 MiB
  GgufWriter w = small_writer();
  w.add_tensor("big", {n}, DType::F32, [n](uint8_t* dst) {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t v = uint32_t(i) * 2654435761u;
      std::memcpy(dst + 4 * i, &v, 4);
    }
  });
  test::TempDir dir("gguf-chunks");
  const std::string path = dir / "big.gguf";
  w.write_file(path);
  const int saved_threads = kernels::compute_pool().num_threads();
  for (int threads : {1, 2, 3}) {
    kernels::set_num_threads(threads);
    const GgufFile g = GgufFile::open(path);
    kernels::set_num_threads(saved_threads);
    const engine::GgufTensorInfo* t = g.find_tensor("big");
    REQUIRE(t != nullptr);
    REQUIRE(t->nbytes == 4 * n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(t->data) + 4 * i, 4);
      wrong += v != uint32_t(i) * 2654435761u;
    }
    CHECK_MESSAGE(wrong == 0, threads << " threads");
    REQUIRE(g.find_tensor("tensor_f32") != nullptr);
    CHECK(g.find_tensor("tensor_f32")->nbytes == 64);
  }
}

TEST_CASE("gguf truncated at any length is a LoadError naming the file") {
  test::TempDir dir("gguf-trunc");
  const auto small = small_writer().write_memory();
  for (size_t len = 0; len < small.size(); ++len) {
    CAPTURE(len);
    open_error(dir, "small.gguf", std::vector<uint8_t>(small.begin(), small.begin() + long(len)));
  }
  const auto stories = test::read_bytes(test::stories_gguf());
  for (size_t len : {size_t(0), size_t(3), size_t(4), size_t(23), size_t(24), size_t(1000), size_t(30000),
                     size_t(100000), stories.size() / 2, stories.size() - 4096, stories.size() - 1}) {
    CAPTURE(len);
    const std::string msg =
        open_error(dir, "stories-cut.gguf", std::vector<uint8_t>(stories.begin(), stories.begin() + long(len)));
    CHECK_MESSAGE(test::contains(msg, "truncated"), msg);
  }
  // Cut inside the data: the message names the tensor whose data is missing.
  const std::string msg =
      open_error(dir, "stories-cut.gguf", std::vector<uint8_t>(stories.begin(), stories.end() - 100));
  CHECK_MESSAGE(test::contains(msg, "output.weight"), msg);
}

TEST_CASE("gguf corrupted headers are LoadErrors naming the file and the key or tensor") {
  test::TempDir dir("gguf-bad");
  const auto good = small_writer().write_memory();

  SUBCASE("bad magic") {
    auto b = good;
    b[0] = 'X';
    CHECK(test::contains(open_error(dir, "m.gguf", b), "magic"));
  }
  SUBCASE("unsupported versions") {
    for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
      auto b = good;
      test::poke<uint32_t>(b, 4, v);
      const std::string msg = open_error(dir, "v.gguf", b);
      CHECK_MESSAGE(test::contains(msg, "version " + std::to_string(v)), msg);
    }
  }
  SUBCASE("unknown or unsupported tensor types name the tensor and the type number") {
    for (uint32_t type : {10u, 11u, 28u, 99u}) {
      auto b = good;
      test::poke<uint32_t>(b, test::tensor_info_offsets(b, "tensor_f32", 2).type, type);
      const std::string msg = open_error(dir, "t.gguf", b);
      CHECK_MESSAGE(test::contains(msg, "tensor_f32"), msg);
      CHECK_MESSAGE(test::contains(msg, "type " + std::to_string(type)), msg);
    }
  }
  SUBCASE("absurd counts and lengths") {
    auto b = good;
    test::poke<uint64_t>(b, 8, uint64_t(1) << 60);  // tensor count
    CHECK(test::contains(open_error(dir, "c.gguf", b), "absurd tensor count"));
    b = good;
    test::poke<uint64_t>(b, 16, ~uint64_t(0));  // metadata count
    CHECK(test::contains(open_error(dir, "c.gguf", b), "absurd metadata count"));
    b = good;
    test::poke<uint64_t>(b, 24, uint64_t(1) << 62);  // first key's length
    CHECK(test::contains(open_error(dir, "c.gguf", b), "absurd length"));
    b = good;
    const size_t list = test::find_bytes(b, "test.list") + 9;  // type, item type, count
    test::poke<uint64_t>(b, list + 8, uint64_t(1) << 50);
    std::string msg = open_error(dir, "c.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "absurd array count"), msg);
    CHECK_MESSAGE(test::contains(msg, "test.list"), msg);
    b = good;
    test::poke<uint64_t>(b, test::find_bytes(b, "yz") - 8, uint64_t(1) << 40);  // a string in the array
    msg = open_error(dir, "c.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "test.list"), msg);
    b = good;
    test::poke<uint32_t>(b, list + 4, 77);  // array item type
    CHECK(test::contains(open_error(dir, "c.gguf", b), "item type 77"));
    b = good;
    test::poke<uint32_t>(b, list, 13);  // value type
    CHECK(test::contains(open_error(dir, "c.gguf", b), "value type 13"));
  }
  SUBCASE("deeply nested arrays") {
    GgufWriter w;
    auto deep = array_of({}, GgufType::U8);
    for (int i = 0; i < 7; ++i) deep = array_of({GgufValue(deep)});
    w.set("deep", deep);
    CHECK_NOTHROW(parse(w.write_memory()));
    // Each extra level is 12 bytes; patch a chain of 100 levels by hand.
    std::vector<uint8_t> b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
    auto put = [&](auto v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      b.insert(b.end(), p, p + sizeof(v));
    };
    put(uint64_t(0));
    put(uint64_t(1));
    put(uint64_t(4));
    b.insert(b.end(), {'d', 'e', 'e', 'p'});
    put(uint32_t(9));
    for (int i = 0; i < 100; ++i) {
      put(uint32_t(9));
      put(uint64_t(1));
    }
    put(uint32_t(0));
    put(uint64_t(0));
    CHECK(test::contains(open_error(dir, "deep.gguf", b), "nested"));
  }
  SUBCASE("bad shapes") {
    auto b = good;
    const auto at = test::tensor_info_offsets(b, "tensor_f32", 2);
    test::poke<uint32_t>(b, at.n_dims, 5);
    CHECK(test::contains(open_error(dir, "s.gguf", b), "dimension count 5"));
    b = good;
    test::poke<int64_t>(b, at.ne, -8);
    CHECK(test::contains(open_error(dir, "s.gguf", b), "negative dimension"));
    b = good;
    test::poke<int64_t>(b, at.ne, int64_t(1) << 40);
    test::poke<int64_t>(b, at.ne + 8, int64_t(1) << 40);
    std::string msg = open_error(dir, "s.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "tensor_f32"), msg);
    b = good;
    test::poke<int64_t>(b, test::tensor_info_offsets(b, "tensor_q8", 2).ne, 16);
    msg = open_error(dir, "s.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "Q8_0"), msg);
    CHECK_MESSAGE(test::contains(msg, "tensor_q8"), msg);
  }
  SUBCASE("misaligned, overlapping and out-of-file offsets") {
    auto b = good;
    const size_t q8 = test::tensor_info_offsets(b, "tensor_q8", 2).offset;
    test::poke<uint64_t>(b, q8, 4);
    std::string msg = open_error(dir, "o.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "alignment"), msg);
    CHECK_MESSAGE(test::contains(msg, "tensor_q8"), msg);
    b = good;
    test::poke<uint64_t>(b, q8, 32);  // tensor_f32 holds [0, 64)
    msg = open_error(dir, "o.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "overlap"), msg);
    b = good;
    test::poke<uint64_t>(b, q8, uint64_t(1) << 62);
    msg = open_error(dir, "o.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "past the end"), msg);
    CHECK_MESSAGE(test::contains(msg, "tensor_q8"), msg);
    b = good;
    test::poke<uint64_t>(b, q8, ~uint64_t(31));  // offset + size wraps around
    CHECK(test::contains(open_error(dir, "o.gguf", b), "tensor_q8"));
  }
  SUBCASE("bad alignment and duplicate names") {
    GgufWriter w = small_writer();
    w.set("general.alignment", uint64_t(64));
    auto b = w.write_memory();
    const size_t key = test::find_bytes(b, "general.alignment") + std::strlen("general.alignment");
    test::poke<uint32_t>(b, key + 4, 48);
    CHECK(test::contains(open_error(dir, "a.gguf", b), "general.alignment"));
    test::poke<uint32_t>(b, key, uint32_t(GgufType::String));
    test::poke<uint32_t>(b, key + 4, 0);
    CHECK(test::contains(open_error(dir, "a.gguf", b), "general.alignment"));


    GgufWriter d;
    d.set("test.k1", uint64_t(1));
    d.set("test.k2", uint64_t(2));
    d.add_tensor("tensor_a1", {4}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 16); });
    d.add_tensor("tensor_a2", {4}, DType::F32, [](uint8_t* dst) { std::memset(dst, 0, 16); });
    const auto dup = d.write_memory();
    CHECK_NOTHROW(parse(dup));
    b = dup;
    std::memcpy(b.data() + test::find_bytes(b, "test.k2"), "test.k1", 7);
    std::string msg = open_error(dir, "d.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "duplicate key"), msg);
    CHECK_MESSAGE(test::contains(msg, "test.k1"), msg);
    b = dup;
    std::memcpy(b.data() + test::find_bytes(b, "tensor_a2"), "tensor_a1", 9);
    msg = open_error(dir, "d.gguf", b);
    CHECK_MESSAGE(test::contains(msg, "duplicate tensor"), msg);
  }
  SUBCASE("missing file") {
    const std::string path = dir / "absent.gguf";
    CHECK(test::contains(test::load_error_message([&] { GgufFile::open(path); }), path));
    CHECK(test::contains(test::load_error_message([&] { GgufFile::open(dir.path.string()); }), dir.path.string()));
  }
}

TEST_CASE("gguf randomly corrupted headers parse or throw LoadError, never crash") {
  const auto stories = test::read_bytes(test::stories_gguf());
  // The small file whole, and the metadata part of stories260K (its tensor data then lies past the end).
  const std::vector<std::vector<uint8_t>> seeds = {small_writer().write_memory(),
                                                   std::vector<uint8_t>(stories.begin(), stories.begin() + 40000)};
  std::mt19937_64 rng(1234);
  int num_loaded = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = seeds[size_t(iter % 2)];
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) {
      const size_t at = size_t(rng() % b.size());
      switch (rng() % 3) {
        case 0: b[at] = uint8_t(rng()); break;
        case 1: b[at] ^= uint8_t(1u << (rng() % 8)); break;
        default: b[at] = rng() % 2 ? 0xFF : 0x00; break;
      }
    }
    if (rng() % 4 == 0) b.resize(size_t(rng() % b.size()));
    CAPTURE(iter);
    try {
      const GgufFile g = parse(std::move(b));
      for (const auto& t : g.tensors()) CHECK(t.nbytes >= 0);
      ++num_loaded;
    } catch (const engine::LoadError&) {
    }
  }
  CHECK(num_loaded > 0);
}

}  // TEST_SUITE
