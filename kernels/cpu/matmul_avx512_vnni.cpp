// Q8_0 and Q4_0 .. Q6_K matmuls with AVX-512 VNNI (vpdpbusd on 256-bit vectors). Compiled with -mavx512vnni; reached
// only when active_isa() is Avx512Vnni. Integer sums are exact, so results
// equal matmul_rows_avx512's bit for bit.
#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_int8.h"

namespace inflight::kernels::cpu {

void matmul_rows_avx512_vnni(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.dtype == DType::Q8_0) run_tiled<Block32Kernel<Q8Format, VnniDot, 32>>(a, row_begin, row_end);
  else run_quant<VnniDot, VnniScaledDot, 32>(a, row_begin, row_end);
}

}  // namespace inflight::kernels::cpu
