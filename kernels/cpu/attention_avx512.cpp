// AVX-512 (F/BW/VL/DQ) + F16C tile routine (16 lanes). Compiled with -mavx512f etc.; reached only when
// active_isa() is Avx512 or above. Intrinsics only, everything in an anonymous namespace (attention_tile.h).
#include "kernels/cpu/attention_avx512_traits.h"

namespace inflight::kernels::cpu {

void attend_tile_avx512(const TileArgs& a) { TileKernel<Avx512>::attend(a); }
void merge_state_avx512(SoftmaxState& a, const SoftmaxState& b, int dim) { TileKernel<Avx512>::merge(a, b, dim); }

}  // namespace inflight::kernels::cpu
