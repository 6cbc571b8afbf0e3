// The tensor-core prompt kernel (context.cu), which attend() (attention.cu) runs for the sequences of a step
// with two or more query rows: FlashAttention-2 over the paged cache.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention_params.h"
#include "kernels/cuda/attention.h"

namespace inflight::kernels::cuda {

inline constexpr int kContextRows = 64;  // query rows per tile (4 warps x 16)
inline constexpr int kContextKeys = 64;  // keys per step of the loop; key tiles start at multiples of it

// A tile of kContextRows query rows of one sequence: rows [row0, row0 + 64) of sequence seq (past its q_len:
// none).
struct ContextTile {
  int seq;
  int row0;
};

// True when the prompt kernel serves p (head dim 64 or 128, 16-byte aligned rows); else every row goes
// through the span routine.
bool context_supported(const AttentionParams& p);

// Attention of every row of the given tiles (device array of num_tiles), for every query head. Q and P are
// rounded to f16 (bf16 when the cache is bf16) for the tensor cores; sums and softmax are f32. A row's output
// does not depend on the other rows of its tile or on where its chunk of the prompt starts: key tiles are
// aligned at absolute key positions, and a key tile the row does not see leaves its state unchanged.
void attend_context(const AttentionParams& p, const BatchShape& shape, const ContextTile* tiles, int num_tiles,
                    cudaStream_t stream);

}  // namespace inflight::kernels::cuda
