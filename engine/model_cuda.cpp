// The Llama-family forward pass on the GPU, step for step as Model::forward_pass (model.cpp) does it on the
// CPU: embedding, then per layer RMSNorm -> Q/K/V (one GEMM) -> RoPE + KV append + attention -> O -> residual
// add and RMSNorm -> gate/up (one GEMM) -> SiLU * up -> down, then the final norm and the LM head over the
// logits rows. A kernel that feeds a GEMM writes its output in the GEMM's element type.
#include "engine/model_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/attention_params.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ops.h"
#include "kernels/matmul.h"

namespace inflight::engine {

namespace {

namespace kc = kernels::cuda;
using kc::Elem;

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS: ") + what + " failed (status " +
                                                           std::to_string(int(s)) + ")");
}

// cudaMalloc that reports a short GPU as an error the caller can show, not an abort.
void* device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("GPU memory: cannot allocate ") + std::to_string(bytes) + " bytes for " +
                             what + " (" + cudaGetErrorString(e) + ")");
  }
  return p;
}

size_t elem_bytes(Elem e) { return e == Elem::F32 ? 4 : 2; }

struct DeviceMatrix {
  Elem elem = Elem::F32;
  void* data = nullptr;
  int64_t rows = 0, cols = 0;
};

struct DeviceLayer {
  DeviceMatrix qkv, wo, gate_up, down;  // qkv: wq, wk, wv stacked; gate_up: w_gate, w_up stacked
  float *attn_norm = nullptr, *ffn_norm = nullptr;
  float *bqkv = nullptr, *q_norm = nullptr, *k_norm = nullptr;  // optional
};

// A device buffer that grows on demand (contents are not kept).
struct Scratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  template <class T>
  T* get(size_t count, const char* what) {
    const size_t need = count * sizeof(T);
    if (need > bytes) {
      if (ptr != nullptr) INFLIGHT_CUDA_CHECK(cudaFree(ptr));
      ptr = nullptr;
      bytes = 0;
      ptr = device_alloc(need, what);
      bytes = need;
    }
    return static_cast<T*>(ptr);
  }
};

// Packs host arrays into one pinned buffer, each at an 8-byte-aligned offset, for one upload.
class MetaPacker {
 public:
  void clear() { used_ = 0; }
  template <class T>
  size_t add(const T* data, size_t count) {
    const size_t at = (used_ + 7) / 8 * 8;
    used_ = at + count * sizeof(T);
    staged_.push_back({at, data, count * sizeof(T)});
    return at;
  }
  // Copies everything staged since clear() to the device buffer; returns its base.
  uint8_t* upload(Scratch& device, cudaStream_t stream) {
    if (used_ > pinned_bytes_) {
      if (pinned_ != nullptr) INFLIGHT_CUDA_CHECK(cudaFreeHost(pinned_));
      pinned_bytes_ = std::max(used_, pinned_bytes_ * 2);
      INFLIGHT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_), pinned_bytes_));
    }
    for (const Staged& s : staged_)
      if (s.bytes > 0) std::memcpy(pinned_ + s.at, s.data, s.bytes);
    staged_.clear();
    uint8_t* base = device.get<uint8_t>(std::max<size_t>(used_, 8), "the step's metadata");
    INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(base, pinned_, used_, cudaMemcpyHostToDevice, stream));
    return base;
  }
  ~MetaPacker() {
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
  }

 private:
  struct Staged {
    size_t at;
    const void* data;
    size_t bytes;
  };
  std::vector<Staged> staged_;
  size_t used_ = 0;
  uint8_t* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
};

}  // namespace

struct CudaModel::Impl {
  ModelConfig config;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> owned;  // weight allocations
  int64_t weight_bytes = 0;
  DeviceMatrix token_embd, output;
  float* output_norm = nullptr;
  std::vector<DeviceLayer> layers;
  kc::Workspace attention_ws;
  MetaPacker meta;
  // Activations, [T, *] f32 (half: a GEMM's input in F16 / BF16); grown on demand.
  Scratch meta_dev, x, xb, qkv, att, gate_up, hb, half, rows, logits;
  Scratch* scratch[10] = {&meta_dev, &x, &xb, &qkv, &att, &gate_up, &hb, &half, &rows, &logits};

  ~Impl() {
    for (void* p : owned) cudaFree(p);
    for (Scratch* s : scratch)
      if (s->ptr != nullptr) cudaFree(s->ptr);
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // The vectors one after another in one buffer (nullptr when all are empty).
  float* upload_vectors(std::initializer_list<const std::vector<float>*> parts, const char* what) {
    std::vector<float> all;
    for (const std::vector<float>* v : parts) all.insert(all.end(), v->begin(), v->end());
    if (all.empty()) return nullptr;
    auto* p = static_cast<float*>(device_alloc(all.size() * 4, what));
    owned.push_back(p);
    weight_bytes += int64_t(all.size() * 4);
    INFLIGHT_CUDA_CHECK(cudaMemcpy(p, all.data(), all.size() * 4, cudaMemcpyHostToDevice));
    return p;
  }

  // The matrices' rows stacked into one (they share cols), so that one GEMM serves them all. F32 when all
  // are F32, BF16 when all are BF16, else F16. Rows are dequantized on the host (matrix_row: any type, plain
  // or interleaved) in chunks and rounded on the GPU.
  DeviceMatrix upload_matrix(std::initializer_list<const kernels::WeightMatrix*> parts, const char* what) {
    DeviceMatrix d;
    auto all = [&](kernels::DType t) {
      return std::all_of(parts.begin(), parts.end(), [t](const kernels::WeightMatrix* w) { return w->dtype == t; });
    };
    d.elem = all(kernels::DType::F32) ? Elem::F32 : all(kernels::DType::BF16) ? Elem::BF16 : Elem::F16;
    d.cols = (*parts.begin())->cols;
    for (const kernels::WeightMatrix* w : parts) d.rows += w->rows;
    const size_t bytes = size_t(d.rows) * size_t(d.cols) * elem_bytes(d.elem);
    d.data = device_alloc(bytes, what);
    owned.push_back(d.data);
    weight_bytes += int64_t(bytes);
    const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(d.cols, 1));
    std::vector<float> host(size_t(chunk_rows * d.cols));
    Scratch staging;
    float* dev = d.elem == Elem::F32 ? nullptr : staging.get<float>(host.size(), what);
    int64_t row0 = 0;  // of d
    for (const kernels::WeightMatrix* w : parts) {
      for (int64_t r0 = 0; r0 < w->rows; r0 += chunk_rows) {
        const int64_t n = std::min(chunk_rows, w->rows - r0);
        for (int64_t r = 0; r < n; ++r) kernels::matrix_row(*w, r0 + r, host.data() + r * d.cols);
        const size_t count = size_t(n * d.cols), at = size_t((row0 + r0) * d.cols);
        if (d.elem == Elem::F32) {
          INFLIGHT_CUDA_CHECK(cudaMemcpy(static_cast<float*>(d.data) + at, host.data(), count * 4,
                                         cudaMemcpyHostToDevice));
        } else {
          INFLIGHT_CUDA_CHECK(cudaMemcpy(dev, host.data(), count * 4, cudaMemcpyHostToDevice));
          kc::convert(dev, d.elem, static_cast<uint8_t*>(d.data) + at * 2, int64_t(count), nullptr);
          INFLIGHT_CUDA_CHECK(cudaDeviceSynchronize());  // before the next chunk overwrites the staging
        }
      }
      row0 += w->rows;
    }
    if (staging.ptr != nullptr) INFLIGHT_CUDA_CHECK(cudaFree(staging.ptr));
    return d;
  }

  // Where a kernel writes the input of a GEMM over w: f32 (the given buffer) or the half buffer.
  void* operand_for(const DeviceMatrix& w, float* f32, int64_t T) {
    return w.elem == Elem::F32 ? static_cast<void*>(f32) : half.get<uint16_t>(size_t(T * w.cols), "a GEMM input");
  }

  // y [T, w.rows] = x [T, w.cols] * w^T in f32, x in w's element type; F32 in plain f32 (no TF32).
  void gemm(const DeviceMatrix& w, const void* x, float* y, int64_t T) {
    if (T == 0) return;
    const cudaDataType_t type = w.elem == Elem::F32 ? CUDA_R_32F : w.elem == Elem::F16 ? CUDA_R_16F : CUDA_R_16BF;
    const cublasComputeType_t compute = w.elem == Elem::F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
    const float alpha = 1.0f, beta = 0.0f;
    // Column-major: y^T [rows, T] = W [cols, rows]^T * x^T [cols, T].
    check_cublas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(w.rows), int(T), int(w.cols), &alpha, w.data, type,
                              int(w.cols), x, type, int(w.cols), &beta, y, CUDA_R_32F, int(w.rows), compute,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
  }
  // The same from an f32 x, rounded to w's type first where that is a half type.
  void gemm_f32(const DeviceMatrix& w, const float* x, float* y, int64_t T) {
    const void* in = x;
    if (w.elem != Elem::F32) {
      void* h = operand_for(w, nullptr, T);
      kc::convert(x, w.elem, h, T * w.cols, stream);
      in = h;
    }
    gemm(w, in, y, T);
  }
};

CudaModel::CudaModel(const ModelWeights& w) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.config = w.config;
  const ModelConfig& c = w.config;
  if (c.num_q_heads % c.num_kv_heads != 0 || c.num_q_heads / c.num_kv_heads > kc::kMaxGroup ||
      c.head_dim > kc::kMaxHeadDim)
    throw std::runtime_error("--device cuda: the CUDA attention kernels serve up to " +
                             std::to_string(kc::kMaxGroup) + " query heads per KV head and head dims up to " +
                             std::to_string(kc::kMaxHeadDim) + "; this model has " + std::to_string(c.num_q_heads) +
                             " / " + std::to_string(c.num_kv_heads) + " heads of " + std::to_string(c.head_dim));
  INFLIGHT_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  check_cublas(cublasCreate(&m.blas), "cublasCreate");
  check_cublas(cublasSetStream(m.blas, m.stream), "cublasSetStream");
  check_cublas(cublasSetMathMode(m.blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");  // no TF32

  m.token_embd = m.upload_matrix({&w.token_embd}, "token_embd");
  m.output = w.output.data == w.token_embd.data ? m.token_embd : m.upload_matrix({&w.output}, "output");
  m.output_norm = m.upload_vectors({&w.output_norm}, "output_norm");
  for (const LayerWeights& l : w.layers) {
    DeviceLayer d;
    d.attn_norm = m.upload_vectors({&l.attn_norm}, "attn_norm");
    d.ffn_norm = m.upload_vectors({&l.ffn_norm}, "ffn_norm");
    d.bqkv = m.upload_vectors({&l.bq, &l.bk, &l.bv}, "q / k / v bias");
    d.q_norm = m.upload_vectors({&l.q_norm}, "q_norm");
    d.k_norm = m.upload_vectors({&l.k_norm}, "k_norm");
    d.qkv = m.upload_matrix({&l.wq, &l.wk, &l.wv}, "wq / wk / wv");
    d.wo = m.upload_matrix({&l.wo}, "wo");
    d.gate_up = m.upload_matrix({&l.w_gate, &l.w_up}, "ffn_gate / ffn_up");
    d.down = m.upload_matrix({&l.w_down}, "ffn_down");
    m.layers.push_back(d);
  }
}

CudaModel::~CudaModel() = default;

int64_t CudaModel::weight_bytes() const { return impl_->weight_bytes; }

int64_t CudaModel::scratch_bytes() const {
  const Impl& m = *impl_;
  int64_t total = 0;
  for (const Scratch* s : m.scratch) total += int64_t(s->bytes);
  return total;
}

void CudaModel::forward(const ScheduledBatch& batch, cache::KvCache& kv, float* logits) {
  Impl& m = *impl_;
  const ModelConfig& c = m.config;
  if (!kv.on_device()) throw std::logic_error("CudaModel::forward: the KV cache is not in GPU memory");
  const int T = batch.num_tokens(), S = batch.num_seqs(), R = int(batch.logits_rows.size());
  const int64_t dim = c.dim;
  cudaStream_t st = m.stream;
  kv.flush_copies(st);
  if (T == 0) return;

  // The step's metadata, in one upload.
  const kernels::RopeParams rope = c.rope();
  std::vector<float> rope_table;
  if (rope.rotary_dim > 0) kc::rope_table(rope, batch.positions.data(), T, &rope_table);
  m.meta.clear();
  const size_t o_ids = m.meta.add(batch.token_ids.data(), size_t(T));
  const size_t o_pos = m.meta.add(batch.positions.data(), size_t(T));
  const size_t o_slots = m.meta.add(batch.slot_mapping.data(), size_t(T));
  const size_t o_qs = m.meta.add(batch.q_start.data(), size_t(S) + 1);
  const size_t o_past = m.meta.add(batch.past_len.data(), size_t(S));
  const size_t o_tables = m.meta.add(batch.block_tables.data(), batch.block_tables.size());
  const size_t o_row0 = m.meta.add(batch.beam_row0.data(), batch.beam_row0.size());
  const size_t o_indir = m.meta.add(batch.cache_indir.data(), batch.cache_indir.size());
  const size_t o_logit_rows = m.meta.add(batch.logits_rows.data(), size_t(R));
  const size_t o_rope = m.meta.add(rope_table.data(), rope_table.size());
  uint8_t* meta = m.meta.upload(m.meta_dev, st);
  auto at = [meta](size_t offset) { return static_cast<void*>(meta + offset); };

  const int64_t qkv_dim = c.q_dim() + 2 * int64_t(c.kv_dim());
  float* x = m.x.get<float>(size_t(T) * dim, "activations");
  float* xb = m.xb.get<float>(size_t(T) * dim, "activations");
  float* qkv = m.qkv.get<float>(size_t(T) * qkv_dim, "activations");
  float* att = m.att.get<float>(size_t(T) * c.q_dim(), "activations");
  float* gate_up = m.gate_up.get<float>(size_t(T) * 2 * c.ffn_dim, "activations");
  float* hb = m.hb.get<float>(size_t(T) * c.ffn_dim, "activations");

  kc::embed_rows(m.token_embd.data, m.token_embd.elem, dim, static_cast<const int32_t*>(at(o_ids)), T, x, st);

  kernels::AttentionParams ap = c.attention_params();
  ap.q = qkv;  // q, k and v of a token side by side, as the one GEMM writes them
  ap.q_stride = qkv_dim;
  ap.out = att;
  ap.num_seqs = S;
  ap.q_start = static_cast<const int32_t*>(at(o_qs));
  ap.past_len = static_cast<const int32_t*>(at(o_past));
  if (!batch.cache_indir.empty()) {
    ap.cache_indir = static_cast<const int32_t*>(at(o_indir));
    ap.cache_indir_stride = batch.cache_indir_stride;
    ap.beam_row0 = static_cast<const int32_t*>(at(o_row0));
  }
  ap.positions = static_cast<const int32_t*>(at(o_pos));
  ap.k = qkv + c.q_dim();
  ap.k_stride = qkv_dim;
  ap.v = qkv + c.q_dim() + c.kv_dim();
  ap.v_stride = qkv_dim;
  ap.slot_mapping = static_cast<const int64_t*>(at(o_slots));
  kc::BatchShape shape;
  shape.num_tokens = T;
  for (int s = 0; s < S; ++s)
    shape.max_kv_len = std::max(shape.max_kv_len, batch.past_len[size_t(s)] + batch.q_start[size_t(s) + 1] -
                                                      batch.q_start[size_t(s)]);
  shape.rope_cos_sin = rope_table.empty() ? nullptr : static_cast<const float*>(at(o_rope));
  shape.host_q_start = batch.q_start.data();
  const kernels::KvDType kv_dtype = kv.config().dtype;

  for (int l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& L = m.layers[size_t(l)];
    void* in = m.operand_for(L.qkv, xb, T);  // the normed input, written by the norm that ends the layer before
    if (l == 0) kc::rms_norm(x, nullptr, L.attn_norm, in, L.qkv.elem, T, dim, c.rms_eps, st);
    m.gemm(L.qkv, in, qkv, T);
    if (c.qkv_bias) kc::add_bias(qkv, L.bqkv, T, qkv_dim, st);
    if (c.qk_norm) {
      kc::head_rms_norm(qkv, L.q_norm, T, c.num_q_heads, c.head_dim, qkv_dim, c.rms_eps, st);
      kc::head_rms_norm(qkv + c.q_dim(), L.k_norm, T, c.num_kv_heads, c.head_dim, qkv_dim, c.rms_eps, st);
    }
    if (kernels::kv_has_static_scale(kv_dtype) && kv.static_scale(l, 0) == 0.0f) {
      // Calibrated once per layer from the first step, by the CPU's own routine on a host copy of K and V.
      std::vector<float> hk(size_t(T) * c.kv_dim()), hv(hk.size());
      const size_t row = size_t(c.kv_dim()) * 4, pitch = size_t(qkv_dim) * 4;
      INFLIGHT_CUDA_CHECK(cudaMemcpy2DAsync(hk.data(), row, ap.k, pitch, row, size_t(T), cudaMemcpyDeviceToHost, st));
      INFLIGHT_CUDA_CHECK(cudaMemcpy2DAsync(hv.data(), row, ap.v, pitch, row, size_t(T), cudaMemcpyDeviceToHost, st));
      INFLIGHT_CUDA_CHECK(cudaStreamSynchronize(st));
      kernels::AttentionParams host = ap;
      host.k = hk.data();
      host.k_stride = c.kv_dim();
      host.v = hv.data();
      host.v_stride = c.kv_dim();
      host.q_start = batch.q_start.data();
      host.past_len = batch.past_len.data();
      host.positions = batch.positions.data();
      float amax[2];
      kernels::kv_append_amax(host, amax);
      kv.calibrate_static_scales(l, amax);
    }
    ap.kv = kv.layer_view(l);
    ap.kv.block_tables = static_cast<const int32_t*>(at(o_tables));
    ap.kv.max_blocks_per_seq = batch.max_blocks_per_seq;
    kc::attention(ap, shape, m.attention_ws, st);

    m.gemm_f32(L.wo, att, xb, T);
    void* ffn_in = m.operand_for(L.gate_up, xb, T);
    kc::rms_norm(x, xb, L.ffn_norm, ffn_in, L.gate_up.elem, T, dim, c.rms_eps, st);
    m.gemm(L.gate_up, ffn_in, gate_up, T);
    void* down_in = m.operand_for(L.down, hb, T);
    kc::silu_mul(gate_up, down_in, L.down.elem, T, c.ffn_dim, st);
    m.gemm(L.down, down_in, xb, T);
    if (l + 1 < c.num_layers) {
      const DeviceMatrix& next = m.layers[size_t(l) + 1].qkv;
      kc::rms_norm(x, xb, m.layers[size_t(l) + 1].attn_norm, m.operand_for(next, xb, T), next.elem, T, dim,
                   c.rms_eps, st);
    } else {
      kc::add(x, xb, int64_t(T) * dim, st);
    }
  }

  if (R > 0) {
    float* rows = m.rows.get<float>(size_t(R) * dim, "activations");
    float* out = m.logits.get<float>(size_t(R) * c.vocab_size, "logits");
    kc::gather_rows(x, static_cast<const int32_t*>(at(o_logit_rows)), R, dim, rows, st);
    void* head_in = m.operand_for(m.output, rows, R);
    kc::rms_norm(rows, nullptr, m.output_norm, head_in, m.output.elem, R, dim, c.rms_eps, st);
    m.gemm(m.output, head_in, out, R);
    INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(logits, out, size_t(R) * c.vocab_size * 4, cudaMemcpyDeviceToHost, st));
  }
  INFLIGHT_CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace inflight::engine
