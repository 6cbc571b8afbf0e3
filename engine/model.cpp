// The Llama-family forward pass, read top to bottom as in llama2.c, over a packed batch of T tokens.
#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>
#include <utility>

#if INFLIGHT_CUDA
#include "engine/model_cuda.h"
#include "kernels/cuda/attention.h"
#endif
#include "kernels/attention_params.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace inflight::engine {

#if !INFLIGHT_CUDA
class CudaModel {};  // a build without the CUDA backend: Model never makes one
#endif

using kernels::matmul;

void interleave_matrices(ModelWeights& w, bool in_place) {
  auto padded_bytes = [](const kernels::WeightMatrix& m) {
    return (size_t(m.rows * kernels::row_bytes(m.dtype, m.cols)) + 63) / 64 * 64;
  };
  std::vector<kernels::WeightMatrix*> todo;
  for (LayerWeights& l : w.layers) {
    for (kernels::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (kernels::interleaving_pays(*m)) todo.push_back(m);
  }
  if (kernels::interleaving_pays(w.output)) todo.push_back(&w.output);
  if (todo.empty()) return;
  size_t total = 0;
  for (const kernels::WeightMatrix* m : todo) total += padded_bytes(*m);
  kernels::HugePageMemory buffer;
  if (!in_place) {
    buffer = kernels::allocate_huge_pages(total);
    if (buffer.data == nullptr) throw std::bad_alloc();
  }
  const void* output_data = w.output.data;
  // Plain bytes -> their interleaved view: tensors a file lets share bytes are interleaved once.
  std::vector<std::pair<const void*, kernels::WeightMatrix>> done;
  size_t used = 0;
  for (kernels::WeightMatrix* m : todo) {
    const auto it = std::find_if(done.begin(), done.end(), [&](const auto& d) { return d.first == m->data; });
    if (it != done.end()) {
      *m = it->second;
      continue;
    }
    void* out = in_place ? const_cast<void*>(m->data) : buffer.data + used;
    used += padded_bytes(*m);
    done.emplace_back(m->data, kernels::interleave_rows(*m, out));
    *m = done.back().second;
  }
  if (w.token_embd.data == output_data && w.output.interleaved) w.token_embd = w.output;  // tied
  if (buffer.owner) w.storage.push_back(std::move(buffer.owner));
}

const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

bool resolve_device(const std::string& name, Device* out, std::string* why) {
  if (name != "auto" && name != "cpu" && name != "cuda") {
    *why = "unknown device '" + name + "' (auto, cpu, cuda)";
    return false;
  }
  if (name == "cpu") {
    *out = Device::Cpu;
    *why = "asked for";
    return true;
  }
#if INFLIGHT_CUDA
  std::string missing;
  if (kernels::cuda::device_available(&missing)) {
    *out = Device::Cuda;
    *why = name == "auto" ? "auto: a CUDA device is present" : "asked for";
    return true;
  }
#else
  const std::string missing = "this build has no CUDA backend (built with INFLIGHT_CUDA=OFF)";
#endif
  if (name == "cuda") {
    *why = "--device cuda: " + missing;
    return false;
  }
  *out = Device::Cpu;
  *why = "auto: " + missing;
  return true;
}

Model::Model(ModelWeights weights, Device device) : w_(std::move(weights)), device_(device) {
  if (device_ == Device::Cpu) {
    interleave_matrices(w_, false);
    return;
  }
#if INFLIGHT_CUDA
  std::string why;
  if (!kernels::cuda::device_available(&why)) throw std::runtime_error("--device cuda: " + why);
  cuda_ = std::make_unique<CudaModel>(w_);
#else
  throw std::runtime_error("--device cuda: this build has no CUDA backend (built with INFLIGHT_CUDA=OFF)");
#endif
}

Model::~Model() = default;

GpuMemory gpu_memory() {
  GpuMemory m;
#if INFLIGHT_CUDA
  size_t free = 0, total = 0;
  if (kernels::cuda::device_available(nullptr) && cudaMemGetInfo(&free, &total) == cudaSuccess) {
    m.free = int64_t(free);
    m.total = int64_t(total);
  }
#endif
  return m;
}

int64_t Model::activation_bytes(int max_tokens, int max_logits_rows) const {
  const ModelConfig& c = w_.config;
  // f32 [T, *] (CudaModel's): x and xb, q / k / v, the attention output, gate / up, SiLU * up; the half copy of
  // a GEMM's input; metadata; the logits rows and their normed inputs; and 64 MiB for cuBLAS and the attention
  // kernels' split-K states.
  const int64_t per_token = 4 * (2 * int64_t(c.dim) + 2 * c.q_dim() + 2 * c.kv_dim() + 3 * int64_t(c.ffn_dim)) +
                            2 * std::max<int64_t>({c.dim, c.q_dim(), c.ffn_dim}) + 64;
  return per_token * max_tokens + 4 * int64_t(max_logits_rows) * (c.vocab_size + c.dim) + (int64_t(64) << 20);
}

int64_t Model::device_weight_bytes() const {
#if INFLIGHT_CUDA
  if (cuda_) return cuda_->weight_bytes();
#endif
  return 0;
}

void Model::ensure_scratch(int num_tokens) {
  if (num_tokens <= scratch_tokens_) return;
  // One block on 2 MiB pages, carved into the arrays of model.h. On 4 KiB pages a 256-token pass's first touch
  // of its scratch (about 1,400 pages for SmolLM, 5,000 for TinyLlama) took 15-20 ms of a 360 ms SmolLM
  // prefill on a Zen 5 VM, where a page fault costs about 10 us (bench/RESULTS.md).
  const ModelConfig& c = w_.config;
  const int64_t t = num_tokens;
  const int64_t widths[] = {c.dim, c.dim, c.q_dim(), c.kv_dim(), c.kv_dim(), c.q_dim(), c.ffn_dim, c.ffn_dim};
  float** arrays[] = {&x_, &xb_, &qkv_q_, &qkv_k_, &qkv_v_, &att_, &hb_, &hb2_};
  int64_t floats = 0;
  for (int64_t w : widths) floats += (t * w + 15) / 16 * 16;  // each array 64-byte aligned
  kernels::HugePageMemory memory = kernels::allocate_huge_pages(size_t(floats) * sizeof(float));
  if (memory.data == nullptr) throw std::bad_alloc();
  float* p = reinterpret_cast<float*>(memory.data);
  for (size_t i = 0; i < std::size(arrays); ++i) {
    *arrays[i] = p;
    p += (t * widths[i] + 15) / 16 * 16;
  }
  scratch_ = std::move(memory);
  scratch_tokens_ = num_tokens;
}

void Model::forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits) {
#if INFLIGHT_CUDA
  if (cuda_) {
    cuda_->forward(batch, kv, logits);
    last_num_passes_ = 1;
    return;
  }
#endif
  if (kv.on_device()) throw std::logic_error("Model::forward: a CPU model with a KV cache in GPU memory");
  const int T = batch.num_tokens(), max_pass = max_pass_tokens_;
  // One pass where slices cannot be: beams (their rows index the whole batch), logits rows out of token
  // order, or a per-tensor KV scale still to be calibrated from this step's keys and values.
  const bool calibrating =
      kernels::kv_has_static_scale(kv.config().dtype) && kv.static_scale(w_.config.num_layers - 1, 0) == 0.0f;
  if (max_pass <= 0 || T <= max_pass || !batch.cache_indir.empty() || calibrating ||
      !std::is_sorted(batch.logits_rows.begin(), batch.logits_rows.end())) {
    forward_pass(batch, kv, logits);
    last_num_passes_ = 1;
    return;
  }
  // Zen 5, 2 threads (bench/RESULTS.md): passes of 96-256 tokens prefilled 500-1500-token prompts of SmolLM
  // f16 / q8_0 and TinyLlama q8_0 2-10 % faster than one pass, TinyLlama f16 level to 3 %; 256 did as well as any.
  const int passes = (T + max_pass - 1) / max_pass, per_pass = (T + passes - 1) / passes;
  int64_t rows_done = 0;
  for (int t0 = 0; t0 < T; t0 += per_pass) {
    const ScheduledBatch part = batch.token_range(t0, std::min(T, t0 + per_pass));
    forward_pass(part, kv, logits + rows_done * w_.config.vocab_size);
    rows_done += int64_t(part.logits_rows.size());
  }
  last_num_passes_ = passes;
}

void Model::forward_pass(const ScheduledBatch& batch, cache::KvCache& kv, float* logits) {
  const ModelConfig& c = w_.config;
  const int T = batch.num_tokens();
  ensure_scratch(T);
  const int64_t dim = c.dim;

  for (int t = 0; t < T; ++t) {
    const int64_t id = batch.token_ids[size_t(t)];
    kernels::matrix_row(w_.token_embd, id, &x_[size_t(t) * dim]);
  }

  kernels::AttentionParams ap = c.attention_params();  // RoPE and the K/V append are fused into the call
  ap.q = qkv_q_;
  ap.q_stride = c.q_dim();
  ap.out = att_;
  ap.num_seqs = batch.num_seqs();
  ap.q_start = batch.q_start.data();
  ap.past_len = batch.past_len.data();
  if (!batch.cache_indir.empty()) {
    ap.cache_indir = batch.cache_indir.data();
    ap.cache_indir_stride = batch.cache_indir_stride;
    ap.beam_row0 = batch.beam_row0.data();
  }
  ap.positions = batch.positions.data();
  ap.k = qkv_k_;
  ap.k_stride = c.kv_dim();
  ap.v = qkv_v_;
  ap.v_stride = c.kv_dim();
  ap.slot_mapping = batch.slot_mapping.data();
  const kernels::KvDType kv_dtype = kv.config().dtype;

  // The last layer computes its queries, attention, output projection and MLP only for the rows that need
  // logits (llama.cpp's inp_out_ids): no later layer reads the others, and every row's K and V still go
  // into the cache. A prompt's prefill thus skips most of a layer. Each kept row attends as a sequence of
  // one query (the generation kernel), which gives the context kernel's bits (kernels/cpu/attention_tile.h),
  // and the matrix products' rows do not depend on the batch, so the logits are the same bits. Not for
  // beams (their block-table rows index the whole batch) or a per-tensor KV scale still to be calibrated.
  const int R = int(batch.logits_rows.size());
  bool prune = R < T && batch.cache_indir.empty() &&
               !(kernels::kv_has_static_scale(kv_dtype) && kv.static_scale(c.num_layers - 1, 0) == 0.0f);
  for (int r = 0; prune && r < R; ++r)
    prune = batch.logits_rows[size_t(r)] >= 0 && batch.logits_rows[size_t(r)] < T &&
            (r == 0 || batch.logits_rows[size_t(r)] > batch.logits_rows[size_t(r) - 1]);

  int n = T;  // rows the layer carries past its attention: T, or R in a pruned last layer
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = w_.layers[size_t(l)];
    const bool pruned = prune && l + 1 == c.num_layers;
    // Attention block. Every later layer's first norm comes with the residual add that ends the layer before.
    if (l == 0) kernels::rms_norm(x_, L.attn_norm.data(), xb_, T, dim, c.rms_eps);
    if (!pruned) {
      const kernels::MatmulTarget qkv[] = {{&L.wq, qkv_q_}, {&L.wk, qkv_k_}, {&L.wv, qkv_v_}};
      kernels::matmul(qkv, xb_, T);
    } else {
      const kernels::MatmulTarget kv_targets[] = {{&L.wk, qkv_k_}, {&L.wv, qkv_v_}};
      kernels::matmul(kv_targets, xb_, T);
      // The kept rows, moved to the front of the residual stream and of its normed copy (rows ascend, so
      // each moves up or stays).
      for (int r = 0; r < R; ++r) {
        const size_t from = size_t(batch.logits_rows[size_t(r)]) * dim, to = size_t(r) * dim;
        if (from == to) continue;
        std::copy(&x_[from], &x_[from] + dim, &x_[to]);
        std::copy(&xb_[from], &xb_[from] + dim, &xb_[to]);
      }
      n = R;
      matmul(L.wq, xb_, qkv_q_, n);
    }
    if (c.qkv_bias) {
      kernels::add_bias(qkv_q_, L.bq.data(), n, c.q_dim());
      kernels::add_bias(qkv_k_, L.bk.data(), T, c.kv_dim());
      kernels::add_bias(qkv_v_, L.bv.data(), T, c.kv_dim());
    }
    if (c.qk_norm) {  // every head [head_dim] of q and k is a row; RoPE (fused below) comes after
      kernels::rms_norm(qkv_q_, L.q_norm.data(), qkv_q_, int64_t(n) * c.num_q_heads, c.head_dim, c.rms_eps);
      kernels::rms_norm(qkv_k_, L.k_norm.data(), qkv_k_, int64_t(T) * c.num_kv_heads, c.head_dim, c.rms_eps);
    }
    if (kernels::kv_has_static_scale(kv_dtype) && kv.static_scale(l, 0) == 0.0f) {
      // Per-tensor scale not given: calibrated once, from the first step that reaches this layer.
      float amax[2];
      kernels::kv_append_amax(ap, amax);
      kv.calibrate_static_scales(l, amax);
    }
    ap.kv = kv.layer_view(l);
    ap.kv.block_tables = batch.block_tables.data();
    ap.kv.max_blocks_per_seq = batch.max_blocks_per_seq;
    if (!pruned) {
      kernels::cpu::attention(ap);
    } else {
      kernels::cpu::append_kv(ap);  // every row's K (rotated) and V
      if (n == 0) break;            // a prompt's chunk before its last: only its K/V were wanted
      kernels::cpu::attention(kept_rows_attention(batch, ap));
    }

    matmul(L.wo, att_, xb_, n);

    // SwiGLU MLP block.
    kernels::add_rms_norm(x_, xb_, L.ffn_norm.data(), xb_, n, dim, c.rms_eps);
    const kernels::MatmulTarget gate_up[] = {{&L.w_gate, hb_}, {&L.w_up, hb2_}};
    kernels::matmul(gate_up, xb_, n);
    kernels::silu_mul(hb_, hb2_, hb_, n, c.ffn_dim);
    matmul(L.w_down, hb_, xb_, n);
    if (l + 1 < c.num_layers)
      kernels::add_rms_norm(x_, xb_, w_.layers[size_t(l) + 1].attn_norm.data(), xb_, n, dim, c.rms_eps);
    else
      kernels::add_inplace(x_, xb_, int64_t(n) * dim);
  }

  // Final norm and LM head, only for the rows that need logits (already the first R rows when pruned).
  rows_.resize(size_t(R) * dim);
  for (int r = 0; r < R; ++r) {
    const float* src = &x_[size_t(prune ? r : batch.logits_rows[size_t(r)]) * dim];
    std::copy(src, src + dim, &rows_[size_t(r) * dim]);
  }
  kernels::rms_norm(rows_.data(), w_.output_norm.data(), rows_.data(), R, dim, c.rms_eps);
  matmul(w_.output, rows_.data(), logits, R);
}

kernels::AttentionParams Model::kept_rows_attention(const ScheduledBatch& batch, const kernels::AttentionParams& ap) {
  // Kept row r (token t of sequence s) becomes sequence r: one query at position past_len[s] + (t - q_start[s]),
  // the keys before it and itself (already in the cache), read through sequence s's block table.
  const int R = int(batch.logits_rows.size()), B = batch.max_blocks_per_seq;
  kept_.q_start.resize(size_t(R) + 1);
  kept_.past_len.resize(size_t(R));
  kept_.positions.resize(size_t(R));
  kept_.block_tables.resize(size_t(R) * size_t(B));
  for (int r = 0; r <= R; ++r) kept_.q_start[size_t(r)] = r;
  for (int r = 0; r < R; ++r) {
    const int t = batch.logits_rows[size_t(r)];
    const int s = int(std::upper_bound(batch.q_start.begin(), batch.q_start.end(), t) - batch.q_start.begin()) - 1;
    kept_.past_len[size_t(r)] = batch.past_len[size_t(s)] + (t - batch.q_start[size_t(s)]);
    kept_.positions[size_t(r)] = batch.positions[size_t(t)];
    std::copy_n(&batch.block_tables[size_t(s) * size_t(B)], B, &kept_.block_tables[size_t(r) * size_t(B)]);
  }
  kernels::AttentionParams p = ap;
  p.num_seqs = R;
  p.q_start = kept_.q_start.data();
  p.past_len = kept_.past_len.data();
  p.positions = kept_.positions.data();
  p.kv.block_tables = kept_.block_tables.data();
  p.k = p.v = nullptr;  // appended already
  p.slot_mapping = nullptr;
  return p;
}

}  // namespace inflight::engine
