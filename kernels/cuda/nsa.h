// NSA selected attention on the GPU (kernels/nsa_params.h, seed 001): the same NsaParams, every pointer in it a
// device pointer.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/nsa_params.h"

namespace inflight::kernels::cuda {

// One warp per (query token, query head), walking the selected keys in gather order with an online softmax;
// head_dim_qk and head_dim_v up to 256. num_query_tokens = cu_seqlens_q[batch], as the host knows it. Outputs
// and max / sum as the reference's, within float rounding (out rounded once to the dtype).
void nsa_selected_attention(const NsaParams& p, int64_t num_query_tokens, cudaStream_t stream);

}  // namespace inflight::kernels::cuda
