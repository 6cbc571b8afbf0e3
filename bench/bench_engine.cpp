// Offline engine throughput: N requests submitted at once (random-token prompts, fixed output length,
// ignore_eos). Usage:
//   bench_engine MODEL [--concurrency 1,8,32] [--input-len 128] [--output-len 128] [--threads N]
//                [--kv-block-size 16] [--kv-dtype f16] [--rounds 3] [--device auto|cpu|cuda]
// MODEL: a GGUF file or Hugging Face folder, or preset:NAME:DTYPE (a random-weight model of `inflight
// make-model`'s presets, e.g. preset:tinyllama-1.1b:f16, written to the temp folder first).
// Two figures per level, as llama-batched-bench gives them: output tokens per second over the whole run
// (submission to the last request's end, prefills included: its B * TG / T), and generation only (the
// tokens after each request's first, over the time after the last request's first token: its S_TG).
// Rounds alternate over the concurrency levels so drift in machine speed touches every level alike;
// the table gives the median of the rounds.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <condition_variable>
#include <mutex>

#include "engine/builtin_model.h"
#include "engine/engine.h"
#include "engine/model_loader.h"
#include "kernels/kv_dtype.h"
#include "kernels/thread_pool.h"

using namespace inflight;

namespace {

// A flag's value as a positive integer, or an error naming the flag.
int int_flag(const std::string& flag, const std::string& value) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || n <= 0) throw std::runtime_error(flag + " takes a positive integer, not '" + value + "'");
  return n;
}

std::vector<int> parse_list(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(int_flag(flag, item));
  if (out.empty()) throw std::runtime_error(flag + " takes a comma-separated list of positive integers");
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Rates {
  double whole = 0.0;       // output tokens / s, whole run
  double generation = 0.0;  // tokens after the first / s, after the last first token
};

// Runs `num` requests at once.
Rates run_once(engine::Engine& eng, const engine::ModelConfig& c, int num, int input_len, int output_len,
                std::mt19937& rng) {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<bool> started(size_t(num), false);
  std::chrono::steady_clock::time_point last_first;
  std::uniform_int_distribution<int32_t> token(3, c.vocab_size - 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < num; ++i) {
    engine::Request r;
    r.prompt_ids.push_back(c.bos_id);
    for (int k = 1; k < input_len; ++k) r.prompt_ids.push_back(token(rng));
    r.sampling.temperature = 0.0f;
    r.stop.max_tokens = output_len;
    r.stop.ignore_eos = true;
    r.sink = [&, i](const engine::Event& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (!started[size_t(i)]) {
        started[size_t(i)] = true;
        last_first = std::chrono::steady_clock::now();
      }
      if (!ev.last) return;
      ++done;
      cv.notify_all();
    };
    eng.submit(std::move(r));
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == num; });
  const auto end = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(end - t0).count();
  const double g = std::chrono::duration<double>(end - last_first).count();
  return {double(num) * output_len / s, double(num) * (output_len - 1) / g};
}

}  // namespace

int run(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr, "usage: %s MODEL [--concurrency 1,8,32] [--input-len 128] [--output-len 128] [--threads N] "
                 "[--kv-block-size 16] [--kv-dtype f16] [--rounds 3] [--device auto|cpu|cuda]\n", argv[0]);
    return 2;
  }
  std::string model_path = argv[1];
  std::vector<int> levels{1, 8, 32};
  int input_len = 128, output_len = 128, threads = 0, block_size = 16, rounds = 3;
  kernels::KvDType kv_dtype = kernels::KvDType::F16;  // the server's default
  std::string device_name = "auto";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--concurrency") levels = parse_list(flag, value);
    else if (flag == "--input-len") input_len = int_flag(flag, value);
    else if (flag == "--output-len") output_len = int_flag(flag, value);
    else if (flag == "--threads") threads = int_flag(flag, value);
    else if (flag == "--kv-block-size") block_size = int_flag(flag, value);
    else if (flag == "--rounds") rounds = int_flag(flag, value);
    else if (flag == "--device") device_name = value;
    else if (flag == "--kv-dtype") {
      if (!kernels::parse_kv_dtype(value, &kv_dtype)) {
        std::fprintf(stderr, "unknown --kv-dtype %s\n", value.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (threads > 0) kernels::set_num_threads(threads);
  engine::Device device;
  std::string why;
  if (!engine::resolve_device(device_name, &device, &why)) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 1;
  }
  if (model_path.rfind("preset:", 0) == 0) {  // preset:NAME:DTYPE
    const std::string spec = model_path.substr(7), name = spec.substr(0, spec.find(':'));
    const engine::ModelShape* shape = engine::find_preset(name);
    if (shape == nullptr || spec.find(':') == std::string::npos) {
      std::fprintf(stderr, "MODEL preset:NAME:DTYPE: unknown preset in '%s'\n", model_path.c_str());
      return 2;
    }
    model_path = (std::filesystem::temp_directory_path() / ("bench_engine-" + name + ".gguf")).string();
    engine::write_random_model(model_path, *shape, engine::parse_weight_types(spec.substr(spec.find(':') + 1)), 1);
  }
  engine::LoadedModel loaded = engine::load_model(model_path);
  engine::Model model(std::move(loaded.weights), device);
  const engine::ModelConfig& c = model.config();
  std::printf("device %s (%s)%s\n", engine::device_name(device), why.c_str(),
              device == engine::Device::Cuda
                  ? (", weights " + std::to_string(model.device_weight_bytes()) + " bytes on the GPU").c_str()
                  : "");
  const int max_level = *std::max_element(levels.begin(), levels.end());
  const int per_seq_blocks = (input_len + output_len + block_size - 1) / block_size;
  cache::KvCacheConfig kv_config{c.num_layers, c.num_kv_heads, c.head_dim, block_size, per_seq_blocks * max_level + 8,
                                 kv_dtype};
  if (device == engine::Device::Cuda) kv_config.device = cache::KvDevice::Cuda;
  cache::KvCache kv(kv_config);
  engine::Engine eng(model, loaded.tokenizer, kv,
                     {.max_num_seqs = max_level, .max_num_batched_tokens = 2048, .enable_prefix_caching = false});
  std::mt19937 rng(1);
  std::vector<std::vector<double>> results(levels.size()), generation(levels.size());
  run_once(eng, c, 1, 16, 4, rng);  // warm-up
  for (int round = 0; round < rounds; ++round)
    for (size_t l = 0; l < levels.size(); ++l) {
      const Rates r = run_once(eng, c, levels[l], input_len, output_len, rng);
      results[l].push_back(r.whole);
      generation[l].push_back(r.generation);
    }

  std::printf("model %s, input %d, output %d tokens, %d compute threads, KV %s, %d rounds (median)\n",
              model_path.c_str(), input_len, output_len, kernels::compute_pool().num_threads(),
              std::string(kernels::kv_dtype_name(kv_dtype)).c_str(), rounds);
  std::printf("| concurrency | output tok/s | vs 1 sequence | generation-only tok/s |\n|---:|---:|---:|---:|\n");
  const double base = median(results[0]);
  for (size_t l = 0; l < levels.size(); ++l)
    std::printf("| %d | %.1f | %.2fx | %.1f |\n", levels[l], median(results[l]), median(results[l]) / base,
                median(generation[l]));
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // a model that does not load, a flag value that is not a number
    std::fprintf(stderr, "bench_engine: %s\n", e.what());
    return 1;
  }
}
