// The Q4_0 .. Q6_K x int8-activation kernels shared by the AVX2, AVX-512 and AVX-512 VNNI files
// (256-bit integer ops; each file instantiates them under its own -m flags, see matmul_kernels.h).
//
// Weights are unpacked in registers, 32 at a time, and multiplied with the int8 activations exactly in
// int32 lanes of 4 products:
// - Q4_0 .. Q5_1 as signed quants (u - 8, u - 16, or u) on Q8_0's kernel (matmul_q8_int8.h);
// - the K-quants as unsigned quants u (0 .. 63) with maddubs (pair sums <= 2 * 63 * 127, no saturation)
//   and a multiply-add with the sub-block scales; their mins and Q6_K's offset 32 go through the
//   activation sums xs, as llama.cpp's vec_dot does.
// matmul_quant_formula.h says how the lanes become floats: the same integers and the same float
// expression as the scalar path, so results are identical on every ISA. Nothing in the per-output
// sequence depends on R or T.
//
// NOTE: anonymous namespace on purpose; include only from the per-ISA .cpp files. No dtype.h helper is
// called here (they have external linkage).
#pragma once
#include <immintrin.h>

#include "kernels/cpu/matmul_q8_int8.h"
#include "kernels/cpu/matmul_quant_formula.h"
#include "kernels/cpu/matmul_tiling.h"

namespace inflight::kernels::cpu {
namespace {

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i high_nibbles(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }

// 16 bytes of nibbles -> 32 quants: low nibbles are elements 0..15, high nibbles 16..31.
inline __m256i unpack_nibbles16(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return low_nibbles(_mm256_set_m128i(_mm_srli_epi16(q, 4), q));
}

// Bit i of the 32 bits at qh -> 16 in byte i, else 0.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  __builtin_memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i mask = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask), _mm256_set1_epi8(16));
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 on Block32Kernel (matmul_q8_int8.h): kHasMin (Q4_1, Q5_1), kHasHigh (Q5_0,
// Q5_1); the quants come signed, u - 8 (Q4_0) or u - 16 (Q5_0), so the offset is exact inside the dot.
template <bool kMin, bool kHasHigh>
struct LegacyFormat {
  static constexpr int kBytes = 2 + (kMin ? 2 : 0) + (kHasHigh ? 4 : 0) + 16;
  static constexpr bool kHasMin = kMin;
  static constexpr bool kUnsigned = false;  // quants() signed; UnsignedLegacy reads unsigned_quants()
  static __m256i quants(const uint8_t* blk) {
    const uint8_t* p = blk + (kMin ? 4 : 2);
    if constexpr (!kHasHigh) {
      const __m256i u = unpack_nibbles16(p);
      return kMin ? u : _mm256_sub_epi8(u, _mm256_set1_epi8(8));
    }
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    // The 32 fifth bits as a byte mask: add 16 where set (Q5_1), or subtract 16 where clear (Q5_0: u - 16).
    uint32_t bits;
    __builtin_memcpy(&bits, p, 4);
    const __m256i nib = unpack_nibbles16(p + 4);
    if constexpr (kMin) return _mm256_mask_add_epi8(nib, __mmask32(bits), nib, _mm256_set1_epi8(16));
    return _mm256_mask_sub_epi8(nib, __mmask32(~bits), nib, _mm256_set1_epi8(16));
#else
    const __m256i u = _mm256_or_si256(unpack_nibbles16(p + 4), fifth_bits(p));
    return kMin ? u : _mm256_sub_epi8(u, _mm256_set1_epi8(16));
#endif
  }
  static float min(const uint8_t* blk) { return f16_at(blk + 2); }
  // The quants unsigned, u = quants + kUnsignedOffset (0 .. 15 or 0 .. 31), for Block32Kernel's unsigned path.
  static constexpr int kUnsignedOffset = kMin ? 0 : kHasHigh ? 16 : 8;
  static __m256i unsigned_quants(const uint8_t* blk) {
    const uint8_t* p = blk + (kMin ? 4 : 2);
    if constexpr (!kHasHigh) return unpack_nibbles16(p);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    uint32_t bits;
    __builtin_memcpy(&bits, p, 4);
    const __m256i nib = unpack_nibbles16(p + 4);
    return _mm256_mask_add_epi8(nib, __mmask32(bits), nib, _mm256_set1_epi8(16));
#else
    return _mm256_or_si256(unpack_nibbles16(p + 4), fifth_bits(p));
#endif
  }
};

// A legacy format read as its unsigned quants (Block32Kernel's kUnsigned path; needs MatmulArgs::xo).
template <class Format>
struct UnsignedLegacy : Format {
  static constexpr bool kUnsigned = true;
  static __m256i quants(const uint8_t* blk) { return Format::unsigned_quants(blk); }
};

// What a Q4_0 .. Q5_1 block unpacks to for a prefill: its f16 scale (and min) as stored, then its 32 signed
// quants as int8 (a Q8_0 block, plus the min).
template <class Format>
struct UnpackedLegacy {
  static constexpr int kWeights = 32;
  static constexpr int kBytes = 2 + (Format::kHasMin ? 2 : 0) + 32;
  static constexpr bool kHasMin = Format::kHasMin;
  static constexpr bool kUnsigned = false;
  static __m256i quants(const uint8_t* blk) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kBytes - 32)); }
  static float min(const uint8_t* blk) { return f16_at(blk + 2); }
  static void unpack(const uint8_t* src, uint8_t* dst) {
    __builtin_memcpy(dst, src, kBytes - 32);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kBytes - 32), Format::quants(src));
  }
};

// Runs Kernel<Format> on the rows, or, with more than one token tile, Kernel<Unpacked> on the rows unpacked
// (Unpacked::unpack per block) a few at a time into a scratch buffer on the stack, so each block is unpacked
// once instead of once per token tile. Both compute the same integers and floats.
template <template <class> class Kernel, class Format, class Unpacked>
void run_unpacking(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int64_t kScratchBytes = 64 << 10;
  const int64_t num_blocks = a.cols / Unpacked::kWeights;
  const int64_t unpacked_row_bytes = num_blocks * Unpacked::kBytes;
  const int64_t fit = kScratchBytes / unpacked_row_bytes;  // no std:: templates here (see matmul_kernels.h)
  const int64_t rows_per_pass = fit < kRowBlock ? fit : kRowBlock;
  if (a.num_tokens <= kTokenTile || rows_per_pass == 0) {
    if constexpr (requires { Format::kUnsignedOffset; }) {
      if (a.xo != nullptr) {
        run_tiled<Kernel<UnsignedLegacy<Format>>>(a, row_begin, row_end);
        return;
      }
    }
    run_tiled<Kernel<Format>>(a, row_begin, row_end);
    return;
  }
  alignas(64) uint8_t scratch[kScratchBytes];
  MatmulArgs u = a;
  u.w = scratch;
  u.w_row_bytes = unpacked_row_bytes;
  for (int64_t r0 = row_begin; r0 < row_end; r0 += rows_per_pass) {
    const int64_t num_rows = row_end - r0 < rows_per_pass ? row_end - r0 : rows_per_pass;
    prefetch_ahead(a, r0, rows_per_pass, row_begin, row_end);
    for (int64_t r = 0; r < num_rows; ++r) {
      const uint8_t* src = a.w + (r0 + r) * a.w_row_bytes;
      uint8_t* dst = scratch + r * unpacked_row_bytes;
      for (int64_t b = 0; b < num_blocks; ++b, src += Format::kBytes, dst += Unpacked::kBytes) Unpacked::unpack(src, dst);
    }
    u.y = a.y + r0;  // row r of the scratch is output row r0 + r; the row stride of y stays a.rows
    run_tiled<Kernel<Unpacked>>(u, 0, num_rows);
  }
}

// Q4_K / Q5_K super-block of 256: chunk k (32 quants) is sub-block k with 6-bit scale sc_k and min m_k.
template <bool kFiveBit>
struct Q45KFormat {
  static constexpr int kBytes = kFiveBit ? 176 : 144;
  static constexpr int kScaleAt = 0, kScaleBytes = 4;  // f16 d, dmin
  struct Scales {
    __m256i bytes;  // sc_0..7, m_0..7 as bytes, the same 16 bytes in both 128-bit halves
  };
  // The 12 packed bytes (kquant_scale_min) unpacked four at a time: bytes j < 4 hold sc_j and m_j in
  // their low 6 bits; bytes 8..11 hold the low 4 bits of sc_4..7 and m_4..7, whose high 2 bits are the top
  // bits of bytes 0..3 and 4..7.
  static Scales scales(const uint8_t* blk) {
    uint32_t w[3];
    __builtin_memcpy(w, blk + 4, 12);
    const uint32_t sc_lo = w[0] & 0x3f3f3f3f, m_lo = w[1] & 0x3f3f3f3f;
    const uint32_t sc_hi = (w[2] & 0x0f0f0f0f) | ((w[0] >> 2) & 0x30303030);
    const uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0f) | ((w[1] >> 2) & 0x30303030);
    return {_mm256_broadcastsi128_si256(_mm_setr_epi32(int(sc_lo), int(sc_hi), int(m_lo), int(m_hi)))};
  }
  static void store(const Scales& s, uint8_t* p16) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p16), _mm256_castsi256_si128(s.bytes)); }
  static Scales load(const uint8_t* p16) { return {_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p16)))}; }
  static __m256i quants(const uint8_t* blk, int k) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (kFiveBit ? 48 : 16) + 32 * (k / 2)));
    const __m256i u = k % 2 == 0 ? low_nibbles(q) : high_nibbles(q);
    if constexpr (!kFiveBit) return u;
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
    const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, k), _mm256_set1_epi8(1));
    return _mm256_or_si256(u, _mm256_slli_epi16(bit, 4));
  }
  // 16 int16 lanes of sc_k.
  static __m256i chunk_scale(const Scales& s, int k) {
    return _mm256_shuffle_epi8(s.bytes, _mm256_set1_epi16(short(0x8000 | k)));
  }
  // What finish needs of one row's super-block.
  struct Row {
    __m256 d, dmin;
    __m256i mins;  // int16 lanes 2l, 2l + 1: m_l
  };
  static Row row(const uint8_t* blk, const Scales& s) { return row_at(blk + kScaleAt, s); }
  static Row row_at(const uint8_t* d, const Scales& s) {  // d: the f16 d, then dmin
    const __m256i pick = _mm256_setr_epi16(  // byte 8 + l of the scales, zero-extended
        short(0x8008), short(0x8008), short(0x8009), short(0x8009), short(0x800a), short(0x800a), short(0x800b),
        short(0x800b), short(0x800c), short(0x800c), short(0x800d), short(0x800d), short(0x800e), short(0x800e),
        short(0x800f), short(0x800f));
    return {_mm256_set1_ps(f16_at(d)), _mm256_set1_ps(f16_at(d + 2)), _mm256_shuffle_epi8(s.bytes, pick)};
  }
  // acc += isum * (d * dx) - msum * (dmin * dx) lane-wise; msum lane l = m_l * (xs_2l + xs_2l+1).
  static __m256 finish(__m256 acc, const Row& w, __m256 dx, __m256i isum, const int16_t* xs) {
    const __m256i msum = _mm256_madd_epi16(w.mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(w.d, dx), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(w.dmin, dx), acc);
  }
};

// Q6_K super-block: chunk k = 32 quants of half k / 4; lanes 0..3 belong to group 2k, 4..7 to 2k + 1.
struct Q6KFormat {
  static constexpr int kBytes = 210;
  static constexpr int kScaleAt = 208, kScaleBytes = 2;  // f16 d
  struct Scales {
    __m128i sc8;  // the 16 int8 group scales
  };
  static Scales scales(const uint8_t* blk) { return load(blk + 192); }
  static void store(const Scales& s, uint8_t* p16) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p16), s.sc8); }
  static Scales load(const uint8_t* p16) { return {_mm_loadu_si128(reinterpret_cast<const __m128i*>(p16))}; }
  static __m256i quants(const uint8_t* blk, int k) {
    const int h = k / 4, kk = k % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32 * (kk % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i lo = kk < 2 ? low_nibbles(ql) : high_nibbles(ql);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * kk), _mm256_set1_epi8(3));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
  }
  // int16 lanes 0..7: sc_2k, 8..15: sc_2k+1.
  static __m256i chunk_scale(const Scales& s, int k) {
    const char g0 = char(2 * k), g1 = char(2 * k + 1);
    return _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(s.sc8, _mm_setr_epi8(g0, g0, g0, g0, g0, g0, g0, g0, g1, g1, g1, g1, g1, g1, g1, g1)));
  }
  struct Row {
    __m256 d;
    __m256i sc16;  // the 16 group scales as int16
  };
  static Row row(const uint8_t* blk, const Scales& s) { return row_at(blk + kScaleAt, s); }
  static Row row_at(const uint8_t* d, const Scales& s) { return {_mm256_set1_ps(f16_at(d)), _mm256_cvtepi8_epi16(s.sc8)}; }
  // acc += (isum - 32 * off) * (d * dx) lane-wise; off lane l = sc_2l * xs_2l + sc_2l+1 * xs_2l+1.
  static __m256 finish(__m256 acc, const Row& w, __m256 dx, __m256i isum, const int16_t* xs) {
    const __m256i off = _mm256_madd_epi16(w.sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs)));
    const __m256i lanes = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(w.d, dx), acc);
  }
};

// What a K-quant super-block unpacks to for a prefill: its 16 scale bytes as Format::Scales holds them, its
// f16 scale(s) as stored, then its 256 unsigned quants as bytes, chunk k at 32 + 32k.
template <class Format>
struct UnpackedK {
  static constexpr int kWeights = 256;
  static constexpr int kBytes = 32 + 256;
  using Scales = typename Format::Scales;
  using Row = typename Format::Row;
  static Scales scales(const uint8_t* blk) { return Format::load(blk); }
  static __m256i quants(const uint8_t* blk, int k) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * k)); }
  static __m256i chunk_scale(const Scales& s, int k) { return Format::chunk_scale(s, k); }
  static Row row(const uint8_t* blk, const Scales& s) { return Format::row_at(blk + 16, s); }
  static __m256 finish(__m256 acc, const Row& w, __m256 dx, __m256i isum, const int16_t* xs) {
    return Format::finish(acc, w, dx, isum, xs);
  }
  static void unpack(const uint8_t* src, uint8_t* dst) {
    Format::store(Format::scales(src), dst);
    __builtin_memcpy(dst + 16, src + Format::kScaleAt, Format::kScaleBytes);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 + 32 * k), Format::quants(src, k));
  }
};

// isum += sc * (u . x) in 8 int32 lanes of 4 products: maddubs gives the pair sums (|u| <= 63, |x| <= 127:
// at most 16002, no saturation), then a multiply-add of pairs with the int16 scale lanes.
struct MaddScaledDot {
  static __m256i first(__m256i u, __m256i x, __m256i scale) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scale); }
  static __m256i acc(__m256i isum, __m256i u, __m256i x, __m256i scale) {
    return _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scale));
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
struct VnniScaledDot {  // the same with the multiply-add and the accumulation in one vpdpwssd
  static __m256i first(__m256i u, __m256i x, __m256i scale) { return MaddScaledDot::first(u, x, scale); }
  static __m256i acc(__m256i isum, __m256i u, __m256i x, __m256i scale) {
    return _mm256_dpwssd_epi32(isum, _mm256_maddubs_epi16(u, x), scale);
  }
};
#endif

// Lane-wise, as matmul_quant_formula.h defines for the K-quants: per super-block, 8 exact int32 lanes of
// scaled sub-block dots; then Format::finish folds them into 8 f32 lanes with the super-block's scales, in
// block order; one fixed-order reduction at the end.
template <class Format, class Dot, int kNumRegs>
struct KQuantKernel {
  static constexpr int64_t kDecodeAheadBytes = 4096;

  // Budget: 2*R*T accumulators (int per super-block, float across them) + T activation chunks + quants,
  // scales and temporaries.
  template <int T>
  static constexpr int rows_per_tile() {
    if constexpr (T == 1) return 1;
    if constexpr (kNumRegs >= 32) return T == 2 ? 4 : 2;
    return T == 2 ? 2 : 1;
  }

  template <int R, int T>
  static void tile(const MatmulArgs& a, int64_t r0, int64_t t0) {
    // One output: two chains of integer sums (even and odd chunks) hide the accumulation latency.
    constexpr int kChains = R * T == 1 ? 2 : 1;
    const int64_t num_blocks = a.cols / 256;
    const uint8_t* w = a.w + r0 * a.w_row_bytes;    // [R, w_row_bytes]
    const int8_t* xq = a.xq + t0 * a.cols;          // [T, cols]
    const float* xd = a.xd + t0 * num_blocks;       // [T, num_blocks]
    const int16_t* xs = a.xs + t0 * (a.cols / 16);  // [T, cols / 16]
    __m256 acc[R][T];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < num_blocks; ++b) {
#if !defined(__AVX512F__)
      // The AVX2 file's decode asks for the bytes 4 KiB ahead into L2 (Zen 3: TinyLlama Q4_K_M decode 1.18x,
      // SmolLM level to 1.08x; 2 KiB ahead alike, into L1 2 blocks ahead 1.06x). Unmeasured under AVX-512.
      if constexpr (R * T == 1) prefetch_bytes(w + b * Format::kBytes + kDecodeAheadBytes, Format::kBytes);
#endif
      typename Format::Scales sc[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sc[r] = Format::scales(w + r * a.w_row_bytes + b * Format::kBytes);
      __m256i isum[R][T][kChains];  // chain c: the chunks k with k % kChains == c
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        __m256i xv[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
          xv[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + t * a.cols + b * 256 + 32 * k));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const uint8_t* blk = w + r * a.w_row_bytes + b * Format::kBytes;
          const __m256i u = Format::quants(blk, k);
          const __m256i scale = Format::chunk_scale(sc[r], k);
#pragma GCC unroll 4
          for (int t = 0; t < T; ++t) {
            __m256i& s = isum[r][t][k % kChains];
            s = k < kChains ? Dot::first(u, xv[t], scale) : Dot::acc(s, u, xv[t], scale);
          }
        }
      }
      __m256 dx[T];
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) dx[t] = _mm256_broadcast_ss(xd + t * num_blocks + b);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const typename Format::Row row = Format::row(w + r * a.w_row_bytes + b * Format::kBytes, sc[r]);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
          __m256i lanes = isum[r][t][0];
          if constexpr (kChains == 2) lanes = _mm256_add_epi32(lanes, isum[r][t][1]);
          acc[r][t] = Format::finish(acc[r][t], row, dx[t], lanes, xs + t * (a.cols / 16) + 16 * b);
        }
      }
    }
    float* y = a.y + t0 * a.rows + r0;  // [T, rows]
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) y[t * a.rows + r] = reduce_add_256(acc[r][t]);
  }
};

// The kernels with their dot product and register count bound, as templates of the format alone.
template <class Dot, int kNumRegs>
struct Block32 {
  template <class Format>
  using Kernel = Block32Kernel<Format, Dot, kNumRegs>;
};
template <class ScaledDot, int kNumRegs>
struct KQuant {
  template <class Format>
  using Kernel = KQuantKernel<Format, ScaledDot, kNumRegs>;
};

// Runs the kernel of a.dtype (Q4_0 .. Q6_K): the legacy types with Block32Kernel's dot product Dot (MaddubsDot,
// VnniDot), the K-quants with ScaledDot.
template <class Dot, class ScaledDot, int kNumRegs>
void run_quant(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  using Q4_0 = LegacyFormat<false, false>;
  using Q4_1 = LegacyFormat<true, false>;
  using Q5_0 = LegacyFormat<false, true>;
  using Q5_1 = LegacyFormat<true, true>;
  using Q4_K = Q45KFormat<false>;
  using Q5_K = Q45KFormat<true>;
  switch (a.dtype) {
    case DType::Q4_0: run_unpacking<Block32<Dot, kNumRegs>::template Kernel, Q4_0, UnpackedLegacy<Q4_0>>(a, row_begin, row_end); return;
    case DType::Q4_1: run_unpacking<Block32<Dot, kNumRegs>::template Kernel, Q4_1, UnpackedLegacy<Q4_1>>(a, row_begin, row_end); return;
    case DType::Q5_0: run_unpacking<Block32<Dot, kNumRegs>::template Kernel, Q5_0, UnpackedLegacy<Q5_0>>(a, row_begin, row_end); return;
    case DType::Q5_1: run_unpacking<Block32<Dot, kNumRegs>::template Kernel, Q5_1, UnpackedLegacy<Q5_1>>(a, row_begin, row_end); return;
    case DType::Q4_K: run_unpacking<KQuant<ScaledDot, kNumRegs>::template Kernel, Q4_K, UnpackedK<Q4_K>>(a, row_begin, row_end); return;
    case DType::Q5_K: run_unpacking<KQuant<ScaledDot, kNumRegs>::template Kernel, Q5_K, UnpackedK<Q5_K>>(a, row_begin, row_end); return;
    case DType::Q6_K: run_unpacking<KQuant<ScaledDot, kNumRegs>::template Kernel, Q6KFormat, UnpackedK<Q6KFormat>>(a, row_begin, row_end); return;
    default: return;
  }
}

}  // namespace
}  // namespace inflight::kernels::cpu
