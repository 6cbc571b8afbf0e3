// The CUDA attention backend: the same kernels::AttentionParams contract as kernels::cpu::attention, with
// every pointer in it (queries, K/V, the paged cache, tables, q_start, past_len, positions, masks,
// cache_indir) a device pointer, plus what only the host knows of the batch (BatchShape).
//
// Two kernels share a step (attend() splits it; see BatchShape::host_q_start):
//   - decode rows, the span routine: a block takes one query row and one KV head, serves all G query heads
//     of the group, reads each K/V row of a 512-key span once (dequantizing int8 / fp8 in registers), and
//     gives one online-softmax state {o, m, d} per head for the span. Spans are aligned at absolute key
//     positions and always folded left to right, so a row's output has the same bits alone or in any batch,
//     and with one block walking all of its spans or one block per span (multi-block / split-K) and a merge;
//   - prompt rows (sequences with two or more rows), the tensor-core kernel of context.h.
// The kernels compile with --fmad=false: no multiply is fused with an add unless written so (an explicit
// fmaf), in either plan (GCC's FMA contraction once broke the same promise on the CPU).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/attention_params.h"

namespace inflight::kernels::cuda {

inline constexpr int kSpanKeys = 512;      // keys per span state; spans start at multiples of it
inline constexpr int kMaxGroup = 8;        // query heads per KV head (GQA group) the kernels serve
inline constexpr int kMaxHeadDim = 256;

// What the host knows of the packed batch (TensorRT-LLM's enqueue parameters): grids are sized from it.
struct BatchShape {
  int num_tokens = 0;   // packed query rows (= q_start[num_seqs])
  int max_kv_len = 0;   // max over sequences of past_len + q_len
  // Device [num_tokens, rotary_dim]: (cos, sin) of pair i of row t at t * rotary_dim + 2i, + 2i + 1, as
  // rope_table computes them on the host (device cos / sin differ from the host's in the last bit, and the
  // stored K codes must equal the CPU's). Required when p.rope_on().
  const float* rope_cos_sin = nullptr;
  // Host [num_seqs + 1], the same values as p.q_start, optional. With it, the rows of sequences with two or more
  // query rows (prompts, chunks of them) go to the tensor-core prompt kernel (context.h), and the span routine
  // serves the rest. Without it, the span routine serves every row.
  const int32_t* host_q_start = nullptr;
};

// How rows are split over blocks.
struct DecodePlan {
  // Spans one block computes; -1: all of a row's spans. 0 (auto): one block per row of 512 keys or fewer,
  // else one span per block and a merge. Results are bit-identical for every value.
  int spans_per_block = 0;
};

// Device scratch for split-K span states, grown on demand, freed with the object.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  // At least num_floats device floats; invalidates what an earlier call returned.
  float* get(int64_t num_floats);
  // A device copy of host ints, in a buffer of its own (stream-ordered; the host array may go at once). The
  // same ints as the last upload (on the same stream) are not copied again: a step's layers all upload its rows.
  int32_t* upload(const std::vector<int32_t>& host, cudaStream_t stream);

 private:
  float* data_ = nullptr;
  int64_t capacity_ = 0;
  int32_t* ints_ = nullptr;
  int64_t ints_capacity_ = 0;
  std::vector<int32_t> uploaded_;  // what ints_ holds
};

// True when a CUDA device can run kernels; otherwise false and *why says why (no driver, no device...).
bool device_available(std::string* why);

// The host half of the fused RoPE: out [num_tokens, rope.rotary_dim], (cos, sin) of each pair of each row
// at positions[t], from kernels::rope_frequencies and rope_cos_sin (the CPU kernels' table).
void rope_table(const RopeParams& rope, const int32_t* positions, int64_t num_tokens, std::vector<float>* out);

// The fused append alone: RoPE on the step's K (p.k, p.v, p.slot_mapping set), quantize to p.kv.dtype, store
// at slot_mapping[t]. Codes and scales equal cpu::append_kv's, bit for bit.
void append_kv(const AttentionParams& p, const BatchShape& shape, cudaStream_t stream);

// Attention of every packed row (prefill chunks and decode rows alike) over the cache, which must already
// hold the step's K/V. Rotates Q as read when p.rope_on(). With shape.host_q_start, prompt rows go to the
// tensor-core kernel (context.h: Q and P rounded to f16 / bf16) and decode rows to the span routine; a row's
// bits then depend only on whether its sequence has one row or more in the step.
void attend(const AttentionParams& p, const BatchShape& shape, const DecodePlan& plan, Workspace& ws,
            cudaStream_t stream);

// The whole step, as cpu::attention: append (when p.k is set), then attend.
void attention(const AttentionParams& p, const BatchShape& shape, Workspace& ws, cudaStream_t stream);

// Aborts with file:line on a broken contract (group > kMaxGroup, head dim, quant group, rotary dim).
void check_params(const AttentionParams& p, const char* file, int line);

}  // namespace inflight::kernels::cuda
