// The Llama-family forward pass on the GPU, step for step as Model::forward_pass (model.cpp) does it on the
// CPU: embedding, then per layer RMSNorm -> Q/K/V -> RoPE + KV append + attention -> O -> residual add and
// RMSNorm -> gate/up -> SiLU * up -> down, then the final norm and the LM head over the logits rows.
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
  DeviceMatrix wq, wk, wv, wo, gate, up, down;
  float *attn_norm = nullptr, *ffn_norm = nullptr;
  float *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;  // optional
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
  // Activations, [T, *] f32 (operand: the half copy of a GEMM's input); grown on demand.
  Scratch meta_dev, x, xb, q, k, v, att, hb, hb2, operand, rows, logits;

  ~Impl() {
    for (void* p : owned) cudaFree(p);
    for (Scratch* s : {&meta_dev, &x, &xb, &q, &k, &v, &att, &hb, &hb2, &operand, &rows, &logits})
      if (s->ptr != nullptr) cudaFree(s->ptr);
    if (blas != nullptr) cublasDestroy(blas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  float* upload_vector(const std::vector<float>& v, const char* what) {
    if (v.empty()) return nullptr;
    auto* p = static_cast<float*>(device_alloc(v.size() * 4, what));
    owned.push_back(p);
    weight_bytes += int64_t(v.size() * 4);
    INFLIGHT_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return p;
  }

  // Rows dequantized on the host (matrix_row: any type, plain or interleaved) in chunks, rounded on the GPU.
  DeviceMatrix upload_matrix(const kernels::WeightMatrix& w, const char* what) {
    DeviceMatrix d;
    d.elem = w.dtype == kernels::DType::F32 ? Elem::F32 : w.dtype == kernels::DType::BF16 ? Elem::BF16 : Elem::F16;
    d.rows = w.rows;
    d.cols = w.cols;
    const size_t bytes = size_t(w.rows) * size_t(w.cols) * elem_bytes(d.elem);
    d.data = device_alloc(bytes, what);
    owned.push_back(d.data);
    weight_bytes += int64_t(bytes);
    const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(1) << 22) / std::max<int64_t>(w.cols, 1));
    std::vector<float> host(size_t(std::min(chunk_rows, w.rows) * w.cols));
    Scratch staging;
    float* dev = d.elem == Elem::F32 ? nullptr : staging.get<float>(host.size(), what);
    for (int64_t r0 = 0; r0 < w.rows; r0 += chunk_rows) {
      const int64_t n = std::min(chunk_rows, w.rows - r0);
      for (int64_t r = 0; r < n; ++r) kernels::matrix_row(w, r0 + r, host.data() + r * w.cols);
      const size_t count = size_t(n * w.cols);
      if (d.elem == Elem::F32) {
        INFLIGHT_CUDA_CHECK(cudaMemcpy(static_cast<float*>(d.data) + r0 * w.cols, host.data(), count * 4,
                                       cudaMemcpyHostToDevice));
      } else {
        INFLIGHT_CUDA_CHECK(cudaMemcpy(dev, host.data(), count * 4, cudaMemcpyHostToDevice));
        kc::convert(dev, d.elem, static_cast<uint8_t*>(d.data) + size_t(r0 * w.cols) * 2, int64_t(count), nullptr);
      }
    }
    INFLIGHT_CUDA_CHECK(cudaDeviceSynchronize());
    if (staging.ptr != nullptr) INFLIGHT_CUDA_CHECK(cudaFree(staging.ptr));
    return d;
  }

  // y [T, w.rows] = x [T, w.cols] * w^T, for each (w, y) of one input x: x is rounded to a half type once
  // per type the matrices need. F32 matrices multiply in plain f32 (no TF32).
  void matmuls(std::initializer_list<std::pair<const DeviceMatrix*, float*>> targets, const float* x, int64_t T) {
    if (T == 0) return;
    bool have = false;
    Elem have_elem = Elem::F32;
    for (const auto& [w, y] : targets) {
      const void* b = x;
      cudaDataType_t type = CUDA_R_32F;
      cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;
      if (w->elem != Elem::F32) {
        void* half = operand.get<uint16_t>(size_t(T * w->cols), "a GEMM operand");
        if (!have || have_elem != w->elem) kc::convert(x, w->elem, half, T * w->cols, stream);
        have = true;
        have_elem = w->elem;
        b = half;
        type = w->elem == Elem::F16 ? CUDA_R_16F : CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
      }
      const float alpha = 1.0f, beta = 0.0f;
      // Column-major: y^T [rows, T] = W [cols, rows]^T * x^T [cols, T].
      check_cublas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(w->rows), int(T), int(w->cols), &alpha, w->data,
                                type, int(w->cols), b, type, int(w->cols), &beta, y, CUDA_R_32F, int(w->rows),
                                compute, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
    }
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

  m.token_embd = m.upload_matrix(w.token_embd, "token_embd");
  m.output = w.output.data == w.token_embd.data ? m.token_embd : m.upload_matrix(w.output, "output");
  m.output_norm = m.upload_vector(w.output_norm, "output_norm");
  for (const LayerWeights& l : w.layers) {
    DeviceLayer d;
    d.attn_norm = m.upload_vector(l.attn_norm, "attn_norm");
    d.ffn_norm = m.upload_vector(l.ffn_norm, "ffn_norm");
    d.bq = m.upload_vector(l.bq, "q bias");
    d.bk = m.upload_vector(l.bk, "k bias");
    d.bv = m.upload_vector(l.bv, "v bias");
    d.q_norm = m.upload_vector(l.q_norm, "q_norm");
    d.k_norm = m.upload_vector(l.k_norm, "k_norm");
    d.wq = m.upload_matrix(l.wq, "wq");
    d.wk = m.upload_matrix(l.wk, "wk");
    d.wv = m.upload_matrix(l.wv, "wv");
    d.wo = m.upload_matrix(l.wo, "wo");
    d.gate = m.upload_matrix(l.w_gate, "ffn_gate");
    d.up = m.upload_matrix(l.w_up, "ffn_up");
    d.down = m.upload_matrix(l.w_down, "ffn_down");
    m.layers.push_back(d);
  }
}

CudaModel::~CudaModel() = default;

int64_t CudaModel::weight_bytes() const { return impl_->weight_bytes; }

int64_t CudaModel::scratch_bytes() const {
  const Impl& m = *impl_;
  int64_t total = 0;
  for (const Scratch* s : {&m.meta_dev, &m.x, &m.xb, &m.q, &m.k, &m.v, &m.att, &m.hb, &m.hb2, &m.operand, &m.rows,
                           &m.logits})
    total += int64_t(s->bytes);
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

  float* x = m.x.get<float>(size_t(T) * dim, "activations");
  float* xb = m.xb.get<float>(size_t(T) * dim, "activations");
  float* q = m.q.get<float>(size_t(T) * c.q_dim(), "activations");
  float* k = m.k.get<float>(size_t(T) * c.kv_dim(), "activations");
  float* v = m.v.get<float>(size_t(T) * c.kv_dim(), "activations");
  float* att = m.att.get<float>(size_t(T) * c.q_dim(), "activations");
  float* hb = m.hb.get<float>(size_t(T) * c.ffn_dim, "activations");
  float* hb2 = m.hb2.get<float>(size_t(T) * c.ffn_dim, "activations");

  kc::embed_rows(m.token_embd.data, m.token_embd.elem, dim, static_cast<const int32_t*>(at(o_ids)), T, x, st);

  kernels::AttentionParams ap;
  ap.q = q;
  ap.q_stride = c.q_dim();
  ap.out = att;
  ap.num_q_heads = c.num_q_heads;
  ap.num_kv_heads = c.num_kv_heads;
  ap.head_dim = c.head_dim;
  ap.head_dim_v = c.head_dim;
  ap.scale = 1.0f / std::sqrt(float(c.head_dim));
  ap.num_seqs = S;
  ap.q_start = static_cast<const int32_t*>(at(o_qs));
  ap.past_len = static_cast<const int32_t*>(at(o_past));
  if (!batch.cache_indir.empty()) {
    ap.cache_indir = static_cast<const int32_t*>(at(o_indir));
    ap.cache_indir_stride = batch.cache_indir_stride;
    ap.beam_row0 = static_cast<const int32_t*>(at(o_row0));
  }
  ap.rope = rope;
  if (c.sliding_window > 0) ap.pre_tokens = c.sliding_window - 1;
  ap.positions = static_cast<const int32_t*>(at(o_pos));
  ap.k = k;
  ap.k_stride = c.kv_dim();
  ap.v = v;
  ap.v_stride = c.kv_dim();
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
    if (l == 0) kc::rms_norm(x, nullptr, L.attn_norm, xb, T, dim, c.rms_eps, st);
    m.matmuls({{&L.wq, q}, {&L.wk, k}, {&L.wv, v}}, xb, T);
    if (c.qkv_bias) {
      kc::add_bias(q, L.bq, T, c.q_dim(), st);
      kc::add_bias(k, L.bk, T, c.kv_dim(), st);
      kc::add_bias(v, L.bv, T, c.kv_dim(), st);
    }
    if (c.qk_norm) {
      kc::rms_norm(q, nullptr, L.q_norm, q, int64_t(T) * c.num_q_heads, c.head_dim, c.rms_eps, st);
      kc::rms_norm(k, nullptr, L.k_norm, k, int64_t(T) * c.num_kv_heads, c.head_dim, c.rms_eps, st);
    }
    if (kernels::kv_has_static_scale(kv_dtype) && kv.static_scale(l, 0) == 0.0f) {
      // Calibrated once per layer from the first step, by the CPU's own routine on a host copy of K and V.
      std::vector<float> hk(size_t(T) * c.kv_dim()), hv(hk.size());
      INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(hk.data(), k, hk.size() * 4, cudaMemcpyDeviceToHost, st));
      INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(hv.data(), v, hv.size() * 4, cudaMemcpyDeviceToHost, st));
      INFLIGHT_CUDA_CHECK(cudaStreamSynchronize(st));
      kernels::AttentionParams host = ap;
      host.k = hk.data();
      host.v = hv.data();
      host.q_start = batch.q_start.data();
      host.past_len = batch.past_len.data();
      host.positions = batch.positions.data();
      float amax[2];
      kernels::kv_append_amax(host, amax);
      for (int i = 0; i < 2; ++i)
        kv.set_static_scale(l, i, kernels::kv_static_scale_for_amax(kv_dtype, amax[i] * cache::kStaticScaleMargin));
    }
    ap.kv = kv.layer_view(l);
    ap.kv.block_tables = static_cast<const int32_t*>(at(o_tables));
    ap.kv.max_blocks_per_seq = batch.max_blocks_per_seq;
    kc::attention(ap, shape, m.attention_ws, st);

    m.matmuls({{&L.wo, xb}}, att, T);
    kc::rms_norm(x, xb, L.ffn_norm, xb, T, dim, c.rms_eps, st);
    m.matmuls({{&L.gate, hb}, {&L.up, hb2}}, xb, T);
    kc::silu_mul(hb, hb2, hb, int64_t(T) * c.ffn_dim, st);
    m.matmuls({{&L.down, xb}}, hb, T);
    if (l + 1 < c.num_layers) kc::rms_norm(x, xb, m.layers[size_t(l) + 1].attn_norm, xb, T, dim, c.rms_eps, st);
    else kc::add(x, xb, int64_t(T) * dim, st);
  }

  if (R > 0) {
    float* rows = m.rows.get<float>(size_t(R) * dim, "activations");
    float* out = m.logits.get<float>(size_t(R) * c.vocab_size, "logits");
    kc::gather_rows(x, static_cast<const int32_t*>(at(o_logit_rows)), R, dim, rows, st);
    kc::rms_norm(rows, nullptr, m.output_norm, rows, R, dim, c.rms_eps, st);
    m.matmuls({{&m.output, out}}, rows, R);
    INFLIGHT_CUDA_CHECK(cudaMemcpyAsync(logits, out, size_t(R) * c.vocab_size * 4, cudaMemcpyDeviceToHost, st));
  }
  INFLIGHT_CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace inflight::engine
