// NSA selected attention on the GPU (kernels/cuda/nsa.h) against the reference, over the CPU test's cases:
// D 192/128, G up to 32, block sizes 16..128, counts up to 32, sparse modes 0 and 2, f32 / f16 / bf16.
#include <doctest/doctest.h>

#include <algorithm>

#include "cuda_backend.h"
#include "kernels/cuda/nsa.h"
#include "nsa_test_support.h"

using namespace inflight;
using kernels::KvDType;

TEST_SUITE("cuda_nsa") {
  TEST_CASE("cuda NSA == reference: D 192/128, G 1..32, block 16..128, count up to 32, modes 0/2, dtypes") {
    struct Shape {
      int nq, nkv, bs, count;
    };
    for (const Shape& s : {Shape{2, 2, 16, 4}, Shape{16, 2, 64, 3}, Shape{32, 1, 128, 2}, Shape{8, 1, 16, 32}})
      for (int mode : {0, 2})
        for (KvDType dtype : {KvDType::F32, KvDType::BF16, KvDType::F16}) {
          CAPTURE(s.nq);
          CAPTURE(s.bs);
          CAPTURE(s.count);
          CAPTURE(mode);
          CAPTURE(kernels::kv_dtype_name(dtype));
          const int kv_len = std::max(s.bs * s.count, 512);
          test::NsaCase ref = test::make_nsa_case({6, 3}, {kv_len, kv_len}, s.nq, s.nkv, 192, 128, s.bs, s.count,
                                                  mode, dtype, 17, s.count >= 3);
          test::NsaCase gpu = ref;
          kernels::reference::nsa_selected_attention(ref.p);

          test::DeviceCopy q(gpu.qs.data(), gpu.qs.size()), k(gpu.ks.data(), gpu.ks.size());
          test::DeviceCopy v(gpu.vs.data(), gpu.vs.size());
          test::DeviceCopy topk(gpu.topk.data(), gpu.topk.size() * 4);
          test::DeviceCopy cu_q(gpu.cu_q.data(), gpu.cu_q.size() * 4), cu_kv(gpu.cu_kv.data(), gpu.cu_kv.size() * 4);
          test::DeviceCopy out(gpu.out_store.data(), gpu.out_store.size());
          test::DeviceCopy mx(gpu.mx.data(), gpu.mx.size() * 4), sum(gpu.sum.data(), gpu.sum.size() * 4);
          kernels::NsaParams p = gpu.p;
          p.q = q.as<void>();
          p.k = k.as<void>();
          p.v = v.as<void>();
          p.topk_indices = topk.as<int32_t>();
          p.cu_seqlens_q = cu_q.as<int32_t>();
          p.cu_seqlens_kv = cu_kv.as<int32_t>();
          p.out = out.as<void>();
          p.softmax_max = mx.as<float>();
          p.softmax_sum = sum.as<float>();
          kernels::cuda::nsa_selected_attention(p, gpu.cu_q.back(), nullptr);
          test::cuda_ok(cudaDeviceSynchronize(), "cuda nsa");
          out.copy_back(gpu.out_store.data());
          mx.copy_back(gpu.mx.data());
          sum.copy_back(gpu.sum.data());
          // As the CPU kernel's bound: float agreement to 2e-5 before the one rounding to the dtype.
          const double step = dtype == KvDType::F32 ? 0.0 : dtype == KvDType::BF16 ? 0x1p-7 : 0x1p-10;
          CHECK(test::max_excess(gpu.out(), ref.out(), 2e-5, step) <= 0.0);
          CHECK(test::max_diff(gpu.mx, ref.mx) < 2e-5);
          CHECK(test::max_diff(gpu.sum, ref.sum) < 1e-4);
        }
  }
}
