// SafetensorsFile / SafetensorsModel: stories260K's HF file, sharded folders, and malformed files that
// must each be a LoadError naming the file (and the tensor).
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "engine/model_loader.h"
#include "engine/safetensors.h"
#include "loader_test_support.h"

using namespace inflight;
using engine::SafetensorsFile;
using engine::SafetensorsModel;
using kernels::DType;

namespace {

std::string stories_safetensors() { return (test::stories_dir() / "hf" / "model.safetensors").string(); }

test::RawTensor f32_tensor(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> bytes(size_t(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = float(i) * 0.5f;
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  }
  return {name, "F32", std::move(shape), std::move(bytes)};
}

std::string open_error(const test::TempDir& dir, const std::vector<uint8_t>& bytes) {
  const std::string path = dir / "bad.safetensors";
  test::write_bytes(path, bytes);
  const std::string msg = test::load_error_message([&] { SafetensorsFile::open(path); });
  CHECK_MESSAGE(test::contains(msg, path), msg);
  return msg;
}

// Replaces the header of a safetensors image (keeping its data) with `header`.
std::vector<uint8_t> with_header(const std::vector<uint8_t>& bytes, const std::string& header) {
  uint64_t old_len;
  std::memcpy(&old_len, bytes.data(), 8);
  const uint64_t len = header.size();
  std::vector<uint8_t> out(8 + header.size());  // sized up front (see safetensors_bytes)
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  out.insert(out.end(), bytes.begin() + 8 + long(old_len), bytes.end());
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Writes the stories tensors to `dir` as two shards + model.safetensors.index.json.
void write_sharded_stories(const test::TempDir& dir) {
  const auto tensors = test::read_raw_tensors(stories_safetensors());
  const size_t half = tensors.size() / 2;
  const std::vector<test::RawTensor> first(tensors.begin(), tensors.begin() + long(half));
  const std::vector<test::RawTensor> second(tensors.begin() + long(half), tensors.end());
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::safetensors_bytes(first));
  test::write_bytes(dir / "model-00002-of-00002.safetensors", test::safetensors_bytes(second));
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (const auto& t : first) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : second) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_text(dir / "model.safetensors.index.json", index.dump(2));
}

}  // namespace

TEST_SUITE("safetensors") {

TEST_CASE("safetensors stories260K: 48 F32 tensors (the README counts __metadata__ too) with HF [out, in] shapes") {
  const SafetensorsFile f = SafetensorsFile::open(stories_safetensors());
  CHECK(f.tensors().size() == 48);
  CHECK(f.metadata().at("format") == "pt");
  const auto* q = f.find_tensor("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK(q->shape == std::vector<int64_t>{64, 64});
  CHECK(q->dtype == DType::F32);
  CHECK(q->dtype_name == "F32");
  CHECK(q->nbytes == 64 * 64 * 4);
  CHECK(q->file == stories_safetensors());
  CHECK(f.find_tensor("model.layers.4.self_attn.k_proj.weight")->shape == std::vector<int64_t>{32, 64});
  CHECK(f.find_tensor("model.layers.4.mlp.down_proj.weight")->shape == std::vector<int64_t>{64, 172});
  CHECK(f.find_tensor("model.embed_tokens.weight")->shape == std::vector<int64_t>{512, 64});
  CHECK(f.find_tensor("model.norm.weight")->shape == std::vector<int64_t>{64});
  CHECK_FALSE(f.find_tensor("absent"));

  const SafetensorsModel m = SafetensorsModel::open_folder(test::stories_hf());
  CHECK(m.files().size() == 1);
  CHECK(m.require("lm_head.weight").shape == std::vector<int64_t>{512, 64});
  const std::string msg = test::load_error_message([&] { m.require("model.layers.9.mlp.up_proj.weight"); });
  CHECK(test::contains(msg, "model.layers.9.mlp.up_proj.weight"));
  CHECK(test::contains(msg, test::stories_hf()));
}

TEST_CASE("safetensors unsupported dtypes are listed, and a LoadError naming tensor and dtype when used") {
  test::TempDir dir("st-dtype");
  test::RawTensor ids{"position_ids", "I64", {1, 4}, std::vector<uint8_t>(32, 0)};
  const auto bytes = test::safetensors_bytes({f32_tensor("w", {2, 3}), ids});
  test::write_bytes(dir / "model.safetensors", bytes);
  const SafetensorsModel m = SafetensorsModel::open_folder(dir.path.string());
  CHECK(m.require("w").dtype == DType::F32);
  const auto* t = m.find_tensor("position_ids");
  REQUIRE(t != nullptr);
  CHECK_FALSE(t->dtype);
  const std::string msg = test::load_error_message([&] { m.require("position_ids"); });
  CHECK_MESSAGE(test::contains(msg, "position_ids"), msg);
  CHECK_MESSAGE(test::contains(msg, "I64"), msg);
  CHECK_MESSAGE(test::contains(msg, dir / "model.safetensors"), msg);

  // A dtype the format does not define is rejected when the file is opened.
  auto unknown = with_header(bytes, R"({"w":{"dtype":"Q4","shape":[2,3],"data_offsets":[0,24]}})");
  const std::string msg2 = open_error(dir, unknown);
  CHECK_MESSAGE(test::contains(msg2, "tensor w"), msg2);
  CHECK_MESSAGE(test::contains(msg2, "Q4"), msg2);
}

TEST_CASE("safetensors truncated at several lengths is a LoadError naming the file") {
  test::TempDir dir("st-trunc");
  const auto bytes = test::read_bytes(stories_safetensors());
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  for (size_t len : {size_t(0), size_t(5), size_t(8), size_t(9), size_t(200), size_t(8 + header_len - 1),
                     size_t(8 + header_len + 10), bytes.size() / 2, bytes.size() - 1}) {
    CAPTURE(len);
    open_error(dir, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(len)));
  }
  const std::string msg = open_error(dir, std::vector<uint8_t>(bytes.begin(), bytes.end() - 4));
  CHECK_MESSAGE(test::contains(msg, "truncated"), msg);
  CHECK_MESSAGE(test::contains(msg, "tensor "), msg);
}

TEST_CASE("safetensors malformed headers are LoadErrors naming the file and tensor") {
  test::TempDir dir("st-bad");
  const auto bytes = test::safetensors_bytes({f32_tensor("a", {2, 3}), f32_tensor("b", {4})});
  SUBCASE("bad JSON") {
    CHECK(test::contains(open_error(dir, with_header(bytes, R"({"a": {"dtype": "F32",)")), "bad JSON header"));
    CHECK(test::contains(open_error(dir, with_header(bytes, "[1, 2]")), "not an object"));
    CHECK(test::contains(open_error(dir, with_header(bytes, "")), "bad JSON header"));
  }
  SUBCASE("absurd header length") {
    auto b = bytes;
    test::poke<uint64_t>(b, 0, ~uint64_t(0));
    CHECK(test::contains(open_error(dir, b), "header length"));
  }
  SUBCASE("data_offsets inconsistent with shape * dtype size") {
    std::string msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,24]}})"));
    CHECK_MESSAGE(test::contains(msg, "tensor a"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})"));
    CHECK_MESSAGE(test::contains(msg, "tensor a"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})"));
    CHECK_MESSAGE(test::contains(msg, "shape"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,24]}})"));
    CHECK_MESSAGE(test::contains(msg, "overflow"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[2,3]}})"));
    CHECK_MESSAGE(test::contains(msg, "data_offsets"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[100],"data_offsets":[0,400]}})"));
    CHECK_MESSAGE(test::contains(msg, "past the data section"), msg);
    msg = open_error(dir, with_header(bytes, R"({"a":7})"));
    CHECK_MESSAGE(test::contains(msg, "tensor a"), msg);
  }
  SUBCASE("overlapping tensors") {
    const std::string msg = open_error(
        dir, with_header(bytes, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})"));
    CHECK_MESSAGE(test::contains(msg, "overlap"), msg);
  }
  SUBCASE("missing or empty folder") {
    const std::string msg = test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); });
    CHECK_MESSAGE(test::contains(msg, dir.path.string()), msg);
  }
  SUBCASE("a tensor in two files") {
    test::write_bytes(dir / "x-1.safetensors", bytes);
    test::write_bytes(dir / "x-2.safetensors", bytes);
    const std::string msg = test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); });
    CHECK_MESSAGE(test::contains(msg, "also in"), msg);
  }
}

TEST_CASE("safetensors sharded stories260K loads like the single file") {
  test::TempDir dir("st-shards");
  write_sharded_stories(dir);
  std::filesystem::copy_file(test::stories_dir() / "hf" / "config.json", dir.path / "config.json");
  std::filesystem::copy_file(test::stories_dir() / "hf" / "tokenizer.model", dir.path / "tokenizer.model");

  const SafetensorsModel m = SafetensorsModel::open_folder(dir.path.string());
  CHECK(m.files().size() == 2);
  CHECK(m.storage().size() == 2);
  const auto* last = m.find_tensor("model.norm.weight");
  REQUIRE(last != nullptr);
  CHECK(test::contains(last->file, "00002-of-00002"));

  const engine::LoadedModel sharded = engine::load_model(dir.path.string());
  const engine::LoadedModel single = engine::load_model(test::stories_hf());
  const auto& a = sharded.weights;
  const auto& b = single.weights;
  auto same = [](const kernels::WeightMatrix& x, const kernels::WeightMatrix& y) {
    return x.rows == y.rows && x.cols == y.cols && x.dtype == y.dtype &&
           std::memcmp(x.data, y.data, size_t(x.rows * kernels::row_bytes(x.dtype, x.cols))) == 0;
  };
  CHECK(same(a.token_embd, b.token_embd));
  CHECK(same(a.output, b.output));
  CHECK(a.output_norm == b.output_norm);
  REQUIRE(a.layers.size() == 5);
  for (size_t i = 0; i < a.layers.size(); ++i) {
    CAPTURE(i);
    const auto& x = a.layers[i];
    const auto& y = b.layers[i];
    CHECK(x.attn_norm == y.attn_norm);
    CHECK(x.ffn_norm == y.ffn_norm);
    CHECK(same(x.wq, y.wq));
    CHECK(same(x.wk, y.wk));
    CHECK(same(x.wv, y.wv));
    CHECK(same(x.wo, y.wo));
    CHECK(same(x.w_gate, y.w_gate));
    CHECK(same(x.w_up, y.w_up));
    CHECK(same(x.w_down, y.w_down));
  }
  CHECK(a.config.tied_embeddings == b.config.tied_embeddings);
}

TEST_CASE("safetensors missing shard, or a tensor not in its shard, is a LoadError") {
  test::TempDir dir("st-missing");
  write_sharded_stories(dir);
  SUBCASE("missing shard") {
    std::filesystem::remove(dir.path / "model-00002-of-00002.safetensors");
    const std::string msg = test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); });
    CHECK_MESSAGE(test::contains(msg, "model-00002-of-00002.safetensors"), msg);
  }
  SUBCASE("tensor listed in the wrong shard") {
    nlohmann::json index = nlohmann::json::parse(std::ifstream(dir / "model.safetensors.index.json"));
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
    write_text(dir / "model.safetensors.index.json", index.dump());
    const std::string msg = test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); });
    CHECK_MESSAGE(test::contains(msg, "model.norm.weight"), msg);
    CHECK_MESSAGE(test::contains(msg, "model.safetensors.index.json"), msg);
  }
  SUBCASE("bad index") {
    write_text(dir / "model.safetensors.index.json", "{\"weight_map\": [");
    const std::string msg = test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); });
    CHECK_MESSAGE(test::contains(msg, "model.safetensors.index.json"), msg);
    write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"x": "../etc/passwd"}})");
    CHECK(test::contains(test::load_error_message([&] { SafetensorsModel::open_folder(dir.path.string()); }),
                         "bad shard file name"));
  }
}

}  // TEST_SUITE
