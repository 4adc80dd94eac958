// Fused tensor statistics: one pass over a tensor's memory for every stat.
//
// The inner loop runs over contiguous runs of the innermost dimension with
// branch-free accumulators (counts as 0/1 adds, min/max as selects) so the
// compiler vectorises it; strided tensors are walked one innermost run at a
// time. Accumulation is in double; the variance uses sums shifted by the
// first element, which keeps it exact for constant tensors and accurate for
// data far from zero (the AVX-512 kernel reads each block's M2 off its sums
// of x and x² where that is as accurate, see its comment). Contiguous
// float32 tensors take SIMD kernels (AVX-512 or AVX2, still double
// accumulation) and, when large, several threads over
// fixed chunks combined in a fixed order (see "chunks and threads").
//
// Owns: the stats kernels and their combine. Must not touch: series, the engine, or
// which stats a rule reads (tensor_feed decides).
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <bit>
#include <cmath>
#include <cstring>
#include <charconv>
#include <initializer_list>
#include <utility>
#include <fmt/format.h>
#include <iterator>
#include <limits>
#include <string>

#include "vigil/tensor.hpp"
#include "interp/tensor_stats.hpp"

#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace vigil {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

constexpr std::array<std::string_view, stat_count> names = {
    "norm",      "sum",       "abs_sum",   "mean",      "abs_mean",  "var",       "std",
    "min",       "max",       "abs_max",   "frac_zero", "frac_pos",  "frac_neg",  "frac_nan",
    "frac_inf",  "nan_count", "inf_count", "numel",     "update_norm", "update_ratio"};

double half_to_double(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
  double v;
  if (exp == 0)
    v = std::ldexp(static_cast<double>(frac), -24);  // zero and subnormals
  else if (exp == 31)
    v = frac ? nan : inf;
  else
    v = std::ldexp(static_cast<double>(frac | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

double bf16_to_double(std::uint16_t b) {
  return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16));
}

template <DType D>
struct Element;
template <>
struct Element<DType::float32> {
  using type = float;
  static double get(const float* p) { return *p; }
};
template <>
struct Element<DType::float64> {
  using type = double;
  static double get(const double* p) { return *p; }
};
template <>
struct Element<DType::float16> {
  using type = std::uint16_t;
  static double get(const std::uint16_t* p) { return half_to_double(*p); }
};
template <>
struct Element<DType::bfloat16> {
  using type = std::uint16_t;
  static double get(const std::uint16_t* p) { return bf16_to_double(*p); }
};

/// The single-pass accumulators. Elements are converted to double a block
/// at a time into a small buffer that stays in L1 cache, then every stat of
/// the block is accumulated in one loop over it.
struct Acc {
  static constexpr std::int64_t block = 1024;
  double n = 0, sum = 0, abs_sum = 0, sumsq = 0;
  bool shifted = false;
  double shift = 0, s1 = 0, s2 = 0;  // sums of (x - shift), (x - shift)^2
  double mn = inf, mx = -inf, amx = 0;
  double zero = 0, pos = 0, neg = 0, nans = 0, infs = 0;

  template <class Get, class T>
  void run(const T* p, std::int64_t count, std::int64_t stride, Get get) {
    alignas(64) double buf[block];
    for (std::int64_t start = 0; start < count; start += block) {
      const std::int64_t m = std::min(block, count - start);
      const T* q = p + start * stride;
      if (stride == 1)
        for (std::int64_t i = 0; i < m; ++i) buf[i] = get(q + i);
      else
        for (std::int64_t i = 0; i < m; ++i) buf[i] = get(q + i * stride);
      reduce(buf, m);
    }
  }

  // Compiled twice, for AVX2 and for the baseline ISA; the loader picks the
  // one the CPU runs (GCC function multi-versioning).
  __attribute__((target_clones("avx2", "default"))) void reduce(const double* buf,
                                                                 std::int64_t m) {
    if (!shifted) {
      // The first element, once for the whole tensor. A non-finite one makes
      // the variance NaN anyway; 0 then keeps the sums meaningful.
      shift = std::isfinite(buf[0]) ? buf[0] : 0;
      shifted = true;
    }
    // Every stat in one loop over the block, in `lanes` independent
    // partial accumulators: the lanes map onto SIMD registers (the compiler
    // may not reorder one floating-point chain, but it may run eight).
    constexpr int lanes = 8;
    double l_sum[lanes] = {}, l_abs[lanes] = {}, l_sq[lanes] = {}, l_s1[lanes] = {}, l_s2[lanes] = {};
    double l_mn[lanes], l_mx[lanes], l_amx[lanes] = {};
    double l_zero[lanes] = {}, l_pos[lanes] = {}, l_neg[lanes] = {}, l_nan[lanes] = {}, l_inf[lanes] = {};
    for (int j = 0; j < lanes; ++j) l_mn[j] = inf, l_mx[j] = -inf;
    const double k = shift;
    const std::int64_t full = m / lanes * lanes;
    for (std::int64_t i = 0; i < full; i += lanes) {
      for (int j = 0; j < lanes; ++j) {
        const double x = buf[i + j], a = std::abs(x), d = x - k;
        l_sum[j] += x;
        l_abs[j] += a;
        l_sq[j] += x * x;
        l_s1[j] += d;
        l_s2[j] += d * d;
        l_mn[j] = x < l_mn[j] ? x : l_mn[j];
        l_mx[j] = x > l_mx[j] ? x : l_mx[j];
        l_amx[j] = a > l_amx[j] ? a : l_amx[j];
        l_zero[j] += x == 0 ? 1.0 : 0.0;
        l_pos[j] += x > 0 ? 1.0 : 0.0;
        l_neg[j] += x < 0 ? 1.0 : 0.0;
        l_nan[j] += x != x ? 1.0 : 0.0;
        l_inf[j] += a == inf ? 1.0 : 0.0;
      }
    }
    for (std::int64_t i = full; i < m; ++i) {  // the tail, into lane 0
      const double x = buf[i], a = std::abs(x), d = x - k;
      l_sum[0] += x, l_abs[0] += a, l_sq[0] += x * x, l_s1[0] += d, l_s2[0] += d * d;
      l_mn[0] = x < l_mn[0] ? x : l_mn[0];
      l_mx[0] = x > l_mx[0] ? x : l_mx[0];
      l_amx[0] = a > l_amx[0] ? a : l_amx[0];
      l_zero[0] += x == 0, l_pos[0] += x > 0, l_neg[0] += x < 0, l_nan[0] += x != x, l_inf[0] += a == inf;
    }
    for (int j = 0; j < lanes; ++j) {
      sum += l_sum[j], abs_sum += l_abs[j], sumsq += l_sq[j], s1 += l_s1[j], s2 += l_s2[j];
      mn = std::min(mn, l_mn[j]), mx = std::max(mx, l_mx[j]), amx = std::max(amx, l_amx[j]);
      zero += l_zero[j], pos += l_pos[j], neg += l_neg[j], nans += l_nan[j], infs += l_inf[j];
    }
    n += static_cast<double>(m);
  }
};

/// Calls `run(offset_in_elements, count, stride)` for each innermost run of
/// the view, in row-major order.
template <class Run>
void for_each_run(const TensorView& t, Run run) {
  const auto rank = t.shape.size();
  if (rank == 0) {
    run(0, 1, 1);
    return;
  }
  std::array<std::int64_t, 16> stride_buf{};
  std::span<const std::int64_t> strides = t.strides;
  if (strides.empty()) {  // contiguous row-major
    std::int64_t s = 1;
    for (std::size_t d = rank; d-- > 0;) {
      stride_buf[d] = s;
      s *= t.shape[d];
    }
    strides = std::span<const std::int64_t>(stride_buf.data(), rank);
  }
  if (t.numel() == 0) return;  // an empty extent anywhere: no elements at all
  if (t.contiguous()) {
    run(0, t.numel(), 1);
    return;
  }
  std::array<std::int64_t, 16> index{};
  const std::int64_t inner = t.shape[rank - 1], inner_stride = strides[rank - 1];
  while (true) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d + 1 < rank; ++d) offset += index[d] * strides[d];
    run(offset, inner, inner_stride);
    std::size_t d = rank - 1;
    while (d-- > 0) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

bool valid(const TensorView& t) {
  if (t.data == nullptr || t.shape.size() > 16) return false;
  if (!t.strides.empty() && t.strides.size() != t.shape.size()) return false;
  for (auto e : t.shape)
    if (e < 0) return false;
  return true;
}

template <DType D>
void accumulate(const TensorView& t, Acc& acc) {
  using E = Element<D>;
  const auto* base = static_cast<const typename E::type*>(t.data);
  for_each_run(t, [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
    acc.run(base + offset, count, stride, [](const typename E::type* p) { return E::get(p); });
  });
}

void accumulate_any(const TensorView& t, Acc& acc) {
  switch (t.dtype) {
    case DType::float32: accumulate<DType::float32>(t, acc); break;
    case DType::float64: accumulate<DType::float64>(t, acc); break;
    case DType::float16: accumulate<DType::float16>(t, acc); break;
    case DType::bfloat16: accumulate<DType::bfloat16>(t, acc); break;
  }
}

// ---- the float32 fast path ----------------------------------------------------
//
// A contiguous float32 tensor (what a trainer's parameters and gradients are)
// is reduced by an AVX-512 or AVX2 kernel specialised for the stats asked for: a rule set
// that reads only `grad_norm` pays for one square-and-add per element, not for
// eighteen stats. The sums keep today's accuracy: each float is converted to
// double before it is added (the float lanes are only used where float is
// exact: min, max, abs_max, the sign counts and the non-finite check).
//
// Non-finite values are the rare case: a block that holds one (the check lane
// turns NaN) is reduced again by the general double path, which counts NaN and
// Inf and keeps their IEEE semantics. Sums alone need no check: NaN and Inf
// propagate through double sums exactly as in the general path.

enum Need : unsigned {
  need_sum = 1,     // sum, mean (and abs_sum, abs_mean in the AVX2 kernel)
  need_sq = 2,      // norm
  need_var = 4,     // var, std (shifted sums)
  need_ext = 8,     // min, max
  need_amx = 16,    // abs_max
  need_zero = 32,   // frac_zero (the AVX2 kernel counts all three signs for it)
  need_check = 64,  // NaN/Inf counts; implied by var and the extremes
  need_abs = 128,   // abs_sum, abs_mean (the AVX2 kernel counts it as need_sum)
  need_sign = 256,  // frac_pos, frac_neg (with need_zero: neg is numel - zero - pos)
  need_all = 511,
};

// Blocks of 32 KiB: a block redone by the general path (or by the
// variance's second pass) is still in L1.
constexpr std::int64_t fast_block = 8192;

unsigned needs_of(StatMask mask) {
  auto any = [&](std::initializer_list<Stat> ss) {
    for (Stat s : ss)
      if (mask & stat_bit(s)) return true;
    return false;
  };
  unsigned n = 0;
  if (any({Stat::sum, Stat::mean})) n |= need_sum;
  if (any({Stat::abs_sum, Stat::abs_mean})) n |= need_abs;
  if (any({Stat::norm})) n |= need_sq;
  if (any({Stat::var, Stat::std})) n |= need_var | need_check;
  if (any({Stat::min, Stat::max})) n |= need_ext | need_check;
  if (any({Stat::abs_max})) n |= need_amx | need_check;
  if (any({Stat::frac_zero})) n |= need_zero;
  if (any({Stat::frac_pos, Stat::frac_neg})) n |= need_sign | need_zero;
  if (any({Stat::frac_nan, Stat::frac_inf, Stat::nan_count, Stat::inf_count})) n |= need_check;
  return n;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define VIGIL_FAST_STATS 1

__attribute__((target("avx2,fma"))) inline double hsum(__m256d v) {
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
__attribute__((target("avx2,fma"))) inline std::int64_t hsum_epi32(__m256i v) {
  alignas(32) std::int32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), v);
  std::int64_t s = 0;
  for (std::int32_t x : l) s += x;
  return s;
}

template <int C>
__attribute__((target("avx2,fma"))) inline double fold(const __m256d* v) {
  __m256d s = v[0];
  for (int j = 1; j < C; ++j) s = _mm256_add_pd(s, v[j]);
  return hsum(s);
}

/// Reduces `m` floats (a multiple of 32, at most 2^20) into `acc` with the
/// accumulators `N` names. False, with `acc` untouched, if `N` has need_check
/// and the block holds a NaN or an infinity.
template <unsigned N>
__attribute__((target("avx2,fma"))) bool reduce_block(const float* p, std::int64_t m, Acc& acc) {
  // C independent double accumulators per sum (one per 4 elements of a
  // step), enough to hide the add latency: 8 when there are few sums (the
  // registers allow it), 4 otherwise. F float vectors per step for the
  // float-side accumulators, each its own chain too.
  constexpr int sums = 2 * ((N & need_sum) != 0) + ((N & need_sq) != 0) + 2 * ((N & need_var) != 0);
  constexpr int C = sums <= 2 ? 8 : 4, F = C / 2, step = 4 * C;
  __m256d sum[C], ab[C], sq[C], s1[C], s2[C];
  for (int j = 0; j < C; ++j) sum[j] = ab[j] = sq[j] = s1[j] = s2[j] = _mm256_setzero_pd();
  const __m256 inf_f = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 mn[F], mx[F], amx[F], bad[F];
  __m256i zero[F], pos[F], neg[F];
  for (int h = 0; h < F; ++h) {
    mn[h] = inf_f, mx[h] = _mm256_sub_ps(_mm256_setzero_ps(), inf_f);
    amx[h] = bad[h] = _mm256_setzero_ps();
    zero[h] = pos[h] = neg[h] = _mm256_setzero_si256();
  }
  const __m256 abs_f = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256d abs_d = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffff));
  const __m256d k = _mm256_set1_pd(acc.shift);
  const __m256 fzero = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < m; i += step) {
    if constexpr ((N & (need_ext | need_amx | need_zero | need_check)) != 0) {
      for (int h = 0; h < F; ++h) {
        const __m256 x = _mm256_loadu_ps(p + i + 8 * h);
        const __m256 a = _mm256_and_ps(x, abs_f);
        // |x| >= Inf or unordered: an infinity or a NaN.
        if constexpr ((N & need_check) != 0)
          bad[h] = _mm256_or_ps(bad[h], _mm256_cmp_ps(a, inf_f, _CMP_NLT_UQ));
        if constexpr ((N & need_ext) != 0) {
          mn[h] = _mm256_min_ps(mn[h], x);
          mx[h] = _mm256_max_ps(mx[h], x);
        }
        if constexpr ((N & need_amx) != 0) amx[h] = _mm256_max_ps(amx[h], a);
        if constexpr ((N & need_zero) != 0) {
          // A true comparison is all ones: -1 as an integer.
          zero[h] = _mm256_sub_epi32(zero[h], _mm256_castps_si256(_mm256_cmp_ps(x, fzero, _CMP_EQ_OQ)));
          pos[h] = _mm256_sub_epi32(pos[h], _mm256_castps_si256(_mm256_cmp_ps(x, fzero, _CMP_GT_OQ)));
          neg[h] = _mm256_sub_epi32(neg[h], _mm256_castps_si256(_mm256_cmp_ps(x, fzero, _CMP_LT_OQ)));
        }
      }
    }
    if constexpr (sums > 0) {
      for (int j = 0; j < C; ++j) {
        const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(p + i + 4 * j));
        if constexpr ((N & need_sum) != 0) {
          sum[j] = _mm256_add_pd(sum[j], d);
          ab[j] = _mm256_add_pd(ab[j], _mm256_and_pd(d, abs_d));
        }
        if constexpr ((N & need_sq) != 0) sq[j] = _mm256_fmadd_pd(d, d, sq[j]);
        if constexpr ((N & need_var) != 0) {
          const __m256d e = _mm256_sub_pd(d, k);
          s1[j] = _mm256_add_pd(s1[j], e);
          s2[j] = _mm256_fmadd_pd(e, e, s2[j]);
        }
      }
    }
  }
  if constexpr ((N & need_check) != 0) {
    __m256 any = bad[0];
    for (int h = 1; h < F; ++h) any = _mm256_or_ps(any, bad[h]);
    if (_mm256_movemask_ps(any) != 0) return false;
  }
  if constexpr ((N & need_sum) != 0) acc.sum += fold<C>(sum), acc.abs_sum += fold<C>(ab);
  if constexpr ((N & need_sq) != 0) acc.sumsq += fold<C>(sq);
  if constexpr ((N & need_var) != 0) acc.s1 += fold<C>(s1), acc.s2 += fold<C>(s2);
  if constexpr ((N & (need_ext | need_amx)) != 0) {
    for (int h = 0; h < F; ++h) {
      alignas(32) float a[8], b[8], c[8];
      _mm256_store_ps(a, mn[h]);
      _mm256_store_ps(b, mx[h]);
      _mm256_store_ps(c, amx[h]);
      for (int j = 0; j < 8; ++j) {
        if constexpr ((N & need_ext) != 0)
          acc.mn = std::min<double>(acc.mn, a[j]), acc.mx = std::max<double>(acc.mx, b[j]);
        if constexpr ((N & need_amx) != 0) acc.amx = std::max<double>(acc.amx, c[j]);
      }
    }
  }
  if constexpr ((N & need_zero) != 0) {
    for (int h = 0; h < F; ++h) {
      acc.zero += static_cast<double>(hsum_epi32(zero[h]));
      acc.pos += static_cast<double>(hsum_epi32(pos[h]));
      acc.neg += static_cast<double>(hsum_epi32(neg[h]));
    }
  }
  acc.n += static_cast<double>(m);
  return true;
}

using BlockKernel = bool (*)(const float*, std::int64_t, Acc&);

/// The AVX2 kernel's accumulators for a set of needs: it sums x and |x|
/// together, and counts zero, positive and negative elements together.
constexpr unsigned avx2_needs(std::size_t n) {
  unsigned r = static_cast<unsigned>(n) & (need_sum | need_sq | need_var | need_ext | need_amx | need_check);
  if ((n & need_abs) != 0) r |= need_sum;
  if ((n & (need_zero | need_sign)) != 0) r |= need_zero;
  return r;
}

template <std::size_t... I>
constexpr std::array<BlockKernel, sizeof...(I)> make_kernels(std::index_sequence<I...>) {
  return {&reduce_block<avx2_needs(I)>...};
}
constexpr auto block_kernels = make_kernels(std::make_index_sequence<need_all + 1>{});

// The same reduction in 512-bit registers (AVX-512 F/DQ/BW/VL: 16 floats,
// 8 doubles per register). Every sum still converts each float to double
// before adding it, in double lanes (the accuracy of the general path). On
// one core the pass is bound by the vector operations per element more than
// by the adds' latency, so the kernel does as few of them as it can:
// - Zero and positive counts are integer tests of the float's bits (±0 has
//   no bit set but the sign; a positive float is a positive int32), mask
//   registers to popcount; the negative count is what a NaN-free block
//   leaves.
// - abs_max alone is the unsigned maximum of |x|'s bits (for non-negative
//   floats the bits are ordered like the numbers, and Inf and NaN lie above
//   every finite value, so it is the block's non-finite check too); with min
//   and max at hand it is max(|min|, |max|).
// - The variance adds no operation per element: a block's M2 = Σx² - Σx·mean
//   comes from the sums of x and x² (which norm and mean need anyway) and
//   enters the shifted sums as M2 + m (mean - shift)². That difference loses
//   accuracy only when the block's mean is large against its spread, so a
//   block whose Σx² exceeds var_condition · M2 takes Σ(x - shift)² instead,
//   a second pass over the block while it is in L1 (data far from zero, a
//   constant block). The relative error of a block's M2 then stays within
//   about 3 var_condition γ, γ the rounding bound of one 256-term double lane
//   (256 u ≈ 2.8e-14): below 6e-12.
// - When some double sum runs, the non-finite check is that sum itself, once
//   per block (a NaN or an infinity leaves it non-finite, and floats summed
//   in double cannot overflow in a block), so it costs nothing per element.
// - The conversions read their 8 floats from memory (the load folded into
//   the instruction) rather than taking halves of the float side's 16-float
//   register apart: one instruction fewer per 16 floats, measured as fast on
//   a 64 MiB stream and faster in cache.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*, which its
// flow analysis reports as uninitialised (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define VIGIL_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

template <int C>
VIGIL_AVX512 inline double fold512(const __m512d* v) {
  __m512d s = v[0];
  for (int j = 1; j < C; ++j) s = _mm512_add_pd(s, v[j]);
  return _mm512_reduce_add_pd(s);
}

/// A block's M2 is read off its sums when Σx² <= var_condition · M2, i.e.
/// when its mean is within sqrt(var_condition - 1) ≈ 7.9 standard deviations
/// of zero.
constexpr double var_condition = 64;

/// Σ(x - k)² over `m` floats (a multiple of 64), each converted to double:
/// the shifted squares of a block whose M2 cannot be read off its sums.
VIGIL_AVX512 __attribute__((noinline)) double shifted_squares512(const float* p, std::int64_t m, double k) {
  __m512d s[8];
  for (auto& v : s) v = _mm512_setzero_pd();
  const __m512d kk = _mm512_set1_pd(k);
  for (std::int64_t i = 0; i < m; i += 64)
    for (int j = 0; j < 8; ++j) {
      const __m512d e = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(p + i + 8 * j)), kk);
      s[j] = _mm512_fmadd_pd(e, e, s[j]);
    }
  return fold512<8>(s);
}

/// The accumulators the AVX-512 kernel runs for a set of needs: the variance
/// from Σx and Σx², abs_max from min and max when those run, and a block
/// check wherever a NaN or an infinity would spoil a stat (the negative count
/// is what the others leave, so it needs one too).
constexpr unsigned avx512_needs(std::size_t n) {
  const bool var = (n & need_var) != 0, ext = (n & need_ext) != 0, sign = (n & need_sign) != 0;
  unsigned r = static_cast<unsigned>(n) & (need_sum | need_sq | need_var | need_ext | need_abs | need_sign);
  if (var) r |= need_sum | need_sq;
  if ((n & need_amx) != 0 && !ext) r |= need_amx;
  if ((n & need_zero) != 0 || sign) r |= need_zero;
  if ((n & (need_check | need_amx)) != 0 || var || ext || sign) r |= need_check;
  return r;
}

/// As reduce_block, `m` a multiple of 64 (`p` best 64-byte aligned), `N`
/// as avx512_needs gives it.
template <unsigned N>
VIGIL_AVX512 bool reduce_block512(const float* p, std::int64_t m, Acc& acc) {
  constexpr bool want_sum = (N & need_sum) != 0, want_abs = (N & need_abs) != 0,
                 want_sq = (N & need_sq) != 0, want_var = (N & need_var) != 0,
                 want_ext = (N & need_ext) != 0, want_amx = (N & need_amx) != 0,
                 want_zero = (N & need_zero) != 0, want_sign = (N & need_sign) != 0,
                 want_check = (N & need_check) != 0;
  constexpr int sums = want_sum + want_abs + want_sq;
  // C double registers per sum and step (independent add chains that hide
  // the latency), F float registers per step for the float side.
  constexpr int C = sums <= 2 ? 8 : 4, F = C / 2, step = 8 * C;
  // x * 0 accumulated: NaN exactly when a NaN or an infinity went in.
  constexpr bool fma_check = want_check && sums == 0 && !want_amx;
  constexpr bool float_side = want_ext || want_amx || want_zero || fma_check;
  __m512d sum[C], ab[C], sq[C];
  for (int j = 0; j < C; ++j) sum[j] = ab[j] = sq[j] = _mm512_setzero_pd();
  __m512 mn[F], mx[F], chk[F];
  __m512i amx[F];
  for (int h = 0; h < F; ++h) {
    if constexpr (want_ext) {
      mn[h] = _mm512_set1_ps(std::numeric_limits<float>::infinity());
      mx[h] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    }
    if constexpr (fma_check) chk[h] = _mm512_setzero_ps();
    if constexpr (want_amx) amx[h] = _mm512_setzero_si512();
  }
  const __m512i abs_bits = _mm512_set1_epi32(0x7fffffff);
  std::int64_t zero_n = 0, pos_n = 0;
  for (std::int64_t i = 0; i < m; i += step) {
    if constexpr (float_side) {
      for (int h = 0; h < F; ++h) {
        __m512 x = _mm512_loadu_ps(p + i + 16 * h);
        // One load for the float side's several uses, not one folded into
        // each: repeated loads of a line still in flight from memory fill
        // the load queue.
        asm("" : "+v"(x));
        const __m512i bits = _mm512_castps_si512(x);
        if constexpr (want_ext) {
          mn[h] = _mm512_min_ps(mn[h], x);
          mx[h] = _mm512_max_ps(mx[h], x);
        }
        if constexpr (want_amx) amx[h] = _mm512_max_epu32(amx[h], _mm512_and_si512(bits, abs_bits));
        if constexpr (want_zero)
          zero_n += std::popcount(static_cast<unsigned>(_mm512_testn_epi32_mask(bits, abs_bits)));
        if constexpr (want_sign)
          pos_n += std::popcount(static_cast<unsigned>(_mm512_cmpgt_epi32_mask(bits, _mm512_setzero_si512())));
        if constexpr (fma_check) chk[h] = _mm512_fmadd_ps(x, _mm512_setzero_ps(), chk[h]);
      }
    }
    if constexpr (sums > 0) {
      for (int j = 0; j < C; ++j) {
        const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(p + i + 8 * j));
        if constexpr (want_sum) sum[j] = _mm512_add_pd(sum[j], d);
        if constexpr (want_abs) ab[j] = _mm512_add_pd(ab[j], _mm512_abs_pd(d));
        if constexpr (want_sq) sq[j] = _mm512_fmadd_pd(d, d, sq[j]);
      }
    }
  }
  const double b_sum = want_sum ? fold512<C>(sum) : 0, b_abs = want_abs ? fold512<C>(ab) : 0,
               b_sq = want_sq ? fold512<C>(sq) : 0;
  std::uint32_t amx_bits = 0;
  if constexpr (want_amx) {
    __m512i a = amx[0];
    for (int h = 1; h < F; ++h) a = _mm512_max_epu32(a, amx[h]);
    amx_bits = _mm512_reduce_max_epu32(a);
  }
  if constexpr (want_check) {
    if constexpr (sums > 0) {
      if (!std::isfinite(want_sq ? b_sq : want_abs ? b_abs : b_sum)) return false;
    } else if constexpr (want_amx) {
      if (amx_bits >= 0x7f800000u) return false;  // the bits of +Inf; NaN's lie above
    } else {
      __m512 any = chk[0];
      for (int h = 1; h < F; ++h) any = _mm512_add_ps(any, chk[h]);
      if (_mm512_cmp_ps_mask(any, any, _CMP_UNORD_Q) != 0) return false;
    }
  }
  const double n = static_cast<double>(m);
  if constexpr (want_sum) acc.sum += b_sum;
  if constexpr (want_abs) acc.abs_sum += b_abs;
  if constexpr (want_sq) acc.sumsq += b_sq;
  if constexpr (want_var) {
    // sum(x - k) = sum(x) - m k: the rounding of the block's sum is u sum|x|,
    // far below what s1^2 / n can feel.
    acc.s1 += b_sum - n * acc.shift;
    const double mean = b_sum / n, m2 = b_sq - b_sum * mean, off = mean - acc.shift;
    if (m2 * var_condition >= b_sq)
      acc.s2 += m2 + n * off * off;
    else
      acc.s2 += shifted_squares512(p, m, acc.shift);
  }
  if constexpr (want_ext) {
    __m512 a = mn[0], b = mx[0];
    for (int h = 1; h < F; ++h) a = _mm512_min_ps(a, mn[h]), b = _mm512_max_ps(b, mx[h]);
    const double lo = _mm512_reduce_min_ps(a), hi = _mm512_reduce_max_ps(b);
    acc.mn = std::min(acc.mn, lo), acc.mx = std::max(acc.mx, hi);
    acc.amx = std::max({acc.amx, std::abs(lo), std::abs(hi)});
  }
  if constexpr (want_amx) acc.amx = std::max<double>(acc.amx, std::bit_cast<float>(amx_bits));
  if constexpr (want_zero) acc.zero += static_cast<double>(zero_n);
  if constexpr (want_sign) {
    acc.pos += static_cast<double>(pos_n);
    acc.neg += static_cast<double>(m - zero_n - pos_n);
  }
  acc.n += n;
  return true;
}

template <std::size_t... I>
constexpr std::array<BlockKernel, sizeof...(I)> make_kernels512(std::index_sequence<I...>) {
  return {&reduce_block512<avx512_needs(I)>...};
}
constexpr auto block_kernels512 = make_kernels512(std::make_index_sequence<need_all + 1>{});
#pragma GCC diagnostic pop

std::atomic<detail::StatsKernel> forced_kernel{detail::StatsKernel::best};

/// The kernels this CPU runs (AVX-512, else AVX2+FMA), or null for none.
const std::array<BlockKernel, need_all + 1>* cpu_kernels() {
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (forced_kernel.load(std::memory_order_relaxed)) {
    case detail::StatsKernel::general: return nullptr;
    case detail::StatsKernel::avx2: return avx2 ? &block_kernels : nullptr;
    case detail::StatsKernel::best: break;
  }
  static const auto* table = []() -> const std::array<BlockKernel, need_all + 1>* {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      return &block_kernels512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &block_kernels;
    return nullptr;
  }();
  return table;
}


/// Reduces `count` floats from `p` into `acc` (whose shift is set): whole
/// blocks through `kernel` (a block it refuses, through the general path),
/// the tail of fewer than 64 elements through the general path.
void reduce_range(const float* p, std::int64_t count, BlockKernel kernel, Acc& acc) {
  auto general = [&](const float* q, std::int64_t n) {
    acc.run(q, n, 1, [](const float* e) { return static_cast<double>(*e); });
  };
  // A head up to the next 64-byte boundary through the general path: the
  // kernels' loads then never straddle two cache lines, which halves the
  // speed of a 512-bit stream. (Chunks are whole blocks, so every chunk of a
  // tensor starts at the same alignment and the split stays a function of
  // the tensor alone.)
  const auto misalign = reinterpret_cast<std::uintptr_t>(p) % 64;
  const std::int64_t head =
      std::min<std::int64_t>(count, misalign % 4 == 0 ? static_cast<std::int64_t>((64 - misalign) % 64 / 4) : 0);
  if (head > 0) general(p, head);
  p += head, count -= head;
  std::int64_t start = 0;
  for (; start + 64 <= count; start += fast_block) {
    const std::int64_t m = std::min(fast_block, count - start) / 64 * 64;
    if (!kernel(p + start, m, acc)) general(p + start, m);
    if (m < fast_block) {
      start += m;
      break;
    }
  }
  if (start < count) general(p + start, count - start);
}

#endif  // VIGIL_FAST_STATS

// ---- chunks and threads -------------------------------------------------------
//
// A large tensor is cut into chunks whose length depends only on its length
// (at least 2^18 elements, 32 blocks; at most max_chunks chunks); each chunk is reduced into
// a partial Acc of its own, and the partials are added in chunk order. The
// sequential path does exactly the same, so the stats are bit-identical
// whether one thread or many reduced the chunks, and in whatever order.

constexpr std::int64_t min_chunk = std::int64_t{1} << 18;  // elements
constexpr std::int64_t max_chunks = 64;

std::int64_t chunk_length(std::int64_t n) {
  const std::int64_t len = std::max(min_chunk, (n + max_chunks - 1) / max_chunks);
  return (len + fast_block - 1) / fast_block * fast_block;  // whole blocks, so chunks cut no block
}

/// Adds a chunk's partial sums into the running total (same shift).
void merge(Acc& into, const Acc& part) {
  into.n += part.n, into.sum += part.sum, into.abs_sum += part.abs_sum, into.sumsq += part.sumsq;
  into.s1 += part.s1, into.s2 += part.s2;
  into.mn = std::min(into.mn, part.mn), into.mx = std::max(into.mx, part.mx);
  into.amx = std::max(into.amx, part.amx);
  into.zero += part.zero, into.pos += part.pos, into.neg += part.neg;
  into.nans += part.nans, into.infs += part.infs;
}

std::atomic<unsigned> threading_threads{0};
std::atomic<std::size_t> threading_min_bytes{std::size_t{4} << 20};
// Set while a detail::StatsOnCallingThread lives on this thread.
thread_local bool calling_thread_only = false;

/// Persistent workers for chunked reductions. One job at a time: a caller
/// that finds the pool busy does its chunks alone (same result).
class Pool {
 public:
  using Fn = void (*)(void*, std::int64_t);

  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  /// Runs fn(ctx, i) for every i in [0, count) on the caller and up to
  /// `helpers` workers; false (nothing run) if the pool is busy or this is a
  /// forked child whose workers do not exist.
  bool run(unsigned helpers, std::int64_t count, Fn fn, void* ctx) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy.owns_lock() || ::getpid() != pid_) return false;
    {
      std::unique_lock lock(m_);
      // A worker that woke late may still be inside the previous job (it
      // will find no chunk left): the counter is not reset under it.
      done_.wait(lock, [&] { return inside_ == 0; });
      // Warm-up: the only allocation, when more workers are asked for.
      while (workers_.size() < helpers) {
        const unsigned index = static_cast<unsigned>(workers_.size());
        workers_.emplace_back([this, index] { work(index); });
      }
      fn_ = fn, ctx_ = ctx, count_ = count, helpers_ = helpers;
      next_.store(0, std::memory_order_relaxed);
      ++generation_;
    }
    wake_.notify_all();
    claim(fn, ctx, count);
    // Every chunk is claimed; the workers still inside the job finish theirs.
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return inside_ == 0; });
    return true;
  }

  ~Pool() {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_)
      if (w.joinable()) w.join();
  }

 private:
  Pool() : pid_(::getpid()) {}

  void claim(Fn fn, void* ctx, std::int64_t count) {
    for (std::int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < count;) fn(ctx, i);
  }

  void work(unsigned index) {
    std::unique_lock lock(m_);
    std::uint64_t seen = generation_;
    while (true) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= helpers_) continue;  // not needed for this job
      // The job's parameters are read, and this worker counted in, under
      // the lock: the caller cannot start the next job while it is inside.
      const Fn fn = fn_;
      void* const ctx = ctx_;
      const std::int64_t count = count_;
      ++inside_;
      lock.unlock();
      claim(fn, ctx, count);
      lock.lock();
      if (--inside_ == 0) done_.notify_all();
    }
  }

  std::mutex busy_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::int64_t count_ = 0;
  unsigned helpers_ = 0;
  int inside_ = 0;
  std::atomic<std::int64_t> next_{0};
  const pid_t pid_;
};

#ifdef VIGIL_FAST_STATS
struct ChunkJob {
  const float* p;
  std::int64_t count, len;
  BlockKernel kernel;
  Acc* parts;
};

void reduce_chunk(void* ctx, std::int64_t i) {
  auto& job = *static_cast<ChunkJob*>(ctx);
  const std::int64_t first = i * job.len;
  reduce_range(job.p + first, std::min(job.len, job.count - first), job.kernel, job.parts[i]);
}

/// The fast path for a contiguous float32 tensor; false if this CPU has
/// neither AVX-512 nor AVX2 (the caller then takes the general path).
bool accumulate_float32_fast(const float* p, std::int64_t count, unsigned needs, Acc& acc) {
  const auto* kernels = cpu_kernels();
  if (kernels == nullptr || count == 0) return false;
  // The shift the general path would take (the first element), so that a
  // block it redoes uses the same one, in every chunk.
  acc.shift = std::isfinite(p[0]) ? p[0] : 0;
  acc.shifted = true;
  const BlockKernel kernel = (*kernels)[needs & need_all];
  const std::int64_t len = chunk_length(count), chunks = (count + len - 1) / len;
  std::array<Acc, max_chunks> parts;
  for (std::int64_t i = 0; i < chunks; ++i) {
    parts[static_cast<std::size_t>(i)].shift = acc.shift;
    parts[static_cast<std::size_t>(i)].shifted = true;
  }
  ChunkJob job{p, count, len, kernel, parts.data()};
  unsigned threads = threading_threads.load(std::memory_order_relaxed);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const bool parallel =
      chunks > 1 && threads > 1 && !calling_thread_only &&
      static_cast<std::size_t>(count) * sizeof(float) >= threading_min_bytes.load(std::memory_order_relaxed) &&
      Pool::instance().run(static_cast<unsigned>(std::min<std::int64_t>(threads - 1, chunks - 1)),
                           chunks, &reduce_chunk, &job);
  if (!parallel)
    for (std::int64_t i = 0; i < chunks; ++i) reduce_chunk(&job, i);
  for (std::int64_t i = 0; i < chunks; ++i) merge(acc, parts[static_cast<std::size_t>(i)]);
  return true;
}
#endif


double element(const TensorView& t, std::int64_t offset) {
  switch (t.dtype) {
    case DType::float32: return static_cast<const float*>(t.data)[offset];
    case DType::float64: return static_cast<const double*>(t.data)[offset];
    case DType::float16: return half_to_double(static_cast<const std::uint16_t*>(t.data)[offset]);
    case DType::bfloat16: return bf16_to_double(static_cast<const std::uint16_t*>(t.data)[offset]);
  }
  return nan;
}

/// Offsets of every element in row-major order, for walking two views of
/// the same shape side by side (the update stats).
template <class Visit>
void for_each_offset(const TensorView& t, Visit visit) {
  for_each_run(t, [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
    for (std::int64_t i = 0; i < count; ++i) visit(offset + i * stride);
  });
}

/// Memory offset of the i-th element (row-major) of a strided view.
std::int64_t offset_of(const TensorView& t, std::int64_t i) {
  std::int64_t offset = 0;
  for (std::size_t d = t.shape.size(); d-- > 0;) {
    const std::int64_t extent = std::max<std::int64_t>(t.shape[d], 1);
    offset += (i % extent) * t.strides[d];
    i /= extent;
  }
  return offset;
}

// ---- parameterised stats ------------------------------------------------------

constexpr std::array<std::string_view, param_stat_count> param_names = {
    "frac_outside", "frac_changed", "frac_dead_units"};
constexpr std::array<std::size_t, param_stat_count> param_arity = {2, 2, 1};
constexpr std::array<std::string_view, param_stat_count> param_params = {
    "lo, hi", "rtol, atol", "threshold_inactivity"};

/// Calls `visit(x)` for every element of `t` in row-major order, dispatching
/// on the dtype once per tensor so the loop body is inlined per dtype.
template <DType D, class Visit>
void each_value_as(const TensorView& t, Visit& visit) {
  using E = Element<D>;
  const auto* base = static_cast<const typename E::type*>(t.data);
  for_each_run(t, [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
    const auto* p = base + offset;
    for (std::int64_t i = 0; i < count; ++i) visit(E::get(p + i * stride));
  });
}
template <class Visit>
void each_value(const TensorView& t, Visit visit) {
  switch (t.dtype) {
    case DType::float32: each_value_as<DType::float32>(t, visit); break;
    case DType::float64: each_value_as<DType::float64>(t, visit); break;
    case DType::float16: each_value_as<DType::float16>(t, visit); break;
    case DType::bfloat16: each_value_as<DType::bfloat16>(t, visit); break;
  }
}

double frac_outside(const TensorView& t, double lo, double hi) {
  std::int64_t outside = 0;
  // NaN compares false both ways: neither below nor above.
  each_value(t, [&](double x) { outside += (x < lo) | (x > hi); });
  return static_cast<double>(outside) / static_cast<double>(t.numel());
}

double frac_changed(const TensorView& t, const TensorView& prev, double rtol, double atol) {
  std::int64_t changed = 0, i = 0;
  const bool packed = prev.contiguous();
  each_value(t, [&](double x) {
    const double p = element(prev, packed ? i : offset_of(prev, i));
    ++i;
    // numpy.isclose(x, p, rtol, atol, equal_nan=False): non-finite values
    // are close only when equal (so +Inf to +Inf is unchanged, NaN changed).
    const bool close = std::isfinite(x) && std::isfinite(p)
                           ? std::abs(x - p) <= atol + rtol * std::abs(p)
                           : x == p;
    changed += !close;
  });
  return static_cast<double>(changed) / static_cast<double>(t.numel());
}

template <DType D>
double frac_dead_units_as(const TensorView& t, double threshold) {
  using E = Element<D>;
  const auto* base = static_cast<const typename E::type*>(t.data);
  const auto rank = t.shape.size();
  if (rank == 0) {  // one unit, one batch entry
    const double active = E::get(base) > 0 ? 100.0 : 0.0;
    return active < threshold ? 1.0 : 0.0;
  }
  std::array<std::int64_t, 16> stride_buf{};
  std::span<const std::int64_t> strides = t.strides;
  if (strides.empty()) {
    std::int64_t s = 1;
    for (std::size_t d = rank; d-- > 0;) {
      stride_buf[d] = s;
      s *= t.shape[d];
    }
    strides = std::span<const std::int64_t>(stride_buf.data(), rank);
  }
  const std::int64_t batch = t.shape[0], batch_stride = strides[0];
  // The units: the view without its batch dimension (offsets still into
  // the same memory). A 1-d tensor leaves a 0-d view: one unit at offset 0.
  const TensorView units{t.data, t.dtype, t.shape.subspan(1), strides.subspan(1)};
  std::int64_t dead = 0, count = 0;
  // Units in blocks, the batch outer: each batch entry reads a block of
  // neighbouring units (a contiguous stretch for a row-major tensor) instead
  // of one element per row, and the counters stay on the stack.
  constexpr std::int64_t block = 2048;
  std::array<std::int64_t, block> active;
  for_each_run(units, [&](std::int64_t offset, std::int64_t n, std::int64_t stride) {
    for (std::int64_t first = 0; first < n; first += block) {
      const std::int64_t m = std::min(block, n - first);
      std::fill_n(active.begin(), m, 0);
      const auto* p = base + offset + first * stride;
      for (std::int64_t b = 0; b < batch; ++b, p += batch_stride)
        for (std::int64_t u = 0; u < m; ++u) active[static_cast<std::size_t>(u)] += E::get(p + u * stride) > 0;
      for (std::int64_t u = 0; u < m; ++u)
        dead += 100.0 * static_cast<double>(active[static_cast<std::size_t>(u)]) /
                    static_cast<double>(batch) <
                threshold;
    }
    count += n;
  });
  return static_cast<double>(dead) / static_cast<double>(count);
}

double frac_dead_units(const TensorView& t, double threshold) {
  switch (t.dtype) {
    case DType::float32: return frac_dead_units_as<DType::float32>(t, threshold);
    case DType::float64: return frac_dead_units_as<DType::float64>(t, threshold);
    case DType::float16: return frac_dead_units_as<DType::float16>(t, threshold);
    case DType::bfloat16: return frac_dead_units_as<DType::bfloat16>(t, threshold);
  }
  return nan;
}

/// Parses one argument of a canonical name (as fmt `{}` prints a double,
/// plus `inf`/`nan` which fmt also prints).
bool parse_arg(std::string_view text, double& out) {
  if (text.empty()) return false;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

void detail::force_stats_kernel(StatsKernel kernel) {
#ifdef VIGIL_FAST_STATS
  forced_kernel.store(kernel, std::memory_order_relaxed);
#else
  (void)kernel;
#endif
}

detail::StatsOnCallingThread::StatsOnCallingThread() : saved_(calling_thread_only) {
  calling_thread_only = true;
}
detail::StatsOnCallingThread::~StatsOnCallingThread() { calling_thread_only = saved_; }

void set_stats_threading(const StatsThreading& options) {
  threading_threads.store(options.threads, std::memory_order_relaxed);
  threading_min_bytes.store(options.min_bytes, std::memory_order_relaxed);
}

StatsThreading stats_threading() {
  return {threading_threads.load(std::memory_order_relaxed),
          threading_min_bytes.load(std::memory_order_relaxed)};
}

std::string_view param_stat_name(ParamStat s) { return param_names[static_cast<std::size_t>(s)]; }
std::size_t param_stat_arity(ParamStat s) { return param_arity[static_cast<std::size_t>(s)]; }
std::string_view param_stat_params(ParamStat s) {
  return param_params[static_cast<std::size_t>(s)];
}

bool parse_param_stat(std::string_view name, ParamStat& out) {
  for (std::size_t i = 0; i < param_names.size(); ++i)
    if (param_names[i] == name) {
      out = static_cast<ParamStat>(i);
      return true;
    }
  return false;
}

std::string param_stat_suffix(ParamStat s, std::span<const double> args) {
  std::string out(param_stat_name(s));
  out += '(';
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", args[i]);
  }
  out += ')';
  return out;
}

bool parse_param_stat_series(std::string_view name, ParamStatRef& out) {
  if (name.empty() || name.back() != ')') return false;
  const auto open = name.rfind('(');
  if (open == std::string_view::npos) return false;
  const std::string_view head = name.substr(0, open);
  for (std::size_t i = 0; i < param_names.size(); ++i) {
    const std::string_view stat = param_names[i];
    if (head.size() < stat.size() + 2 || !head.ends_with(stat) ||
        head[head.size() - stat.size() - 1] != '_')
      continue;
    out.tensor = head.substr(0, head.size() - stat.size() - 1);
    out.stat = static_cast<ParamStat>(i);
    out.nargs = 0;
    std::string_view rest = name.substr(open + 1, name.size() - open - 2);
    while (true) {
      const auto comma = rest.find(',');
      if (out.nargs == param_arity[i] || !parse_arg(rest.substr(0, comma), out.args[out.nargs]))
        return false;
      ++out.nargs;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    return out.nargs == param_arity[i];
  }
  return false;
}

double compute_param_stat(ParamStat s, std::span<const double> args, const TensorView& t,
                          const TensorView* previous) {
  if (args.size() != param_stat_arity(s) || !valid(t) || t.numel() == 0) return nan;
  switch (s) {
    case ParamStat::frac_outside: return frac_outside(t, args[0], args[1]);
    case ParamStat::frac_changed:
      if (previous == nullptr || !valid(*previous) || previous->shape.size() != t.shape.size() ||
          !std::equal(t.shape.begin(), t.shape.end(), previous->shape.begin()))
        return nan;
      return frac_changed(t, *previous, args[0], args[1]);
    case ParamStat::frac_dead_units: return frac_dead_units(t, args[0]);
  }
  return nan;
}

std::int64_t TensorView::numel() const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

bool TensorView::contiguous() const {
  if (strides.empty()) return true;
  std::int64_t expect = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

bool pack_tensor(const TensorView& t, std::vector<std::byte>& out) {
  out.clear();
  if (!valid(t)) return false;
  const std::size_t size = t.dtype == DType::float64   ? 8
                           : t.dtype == DType::float32 ? 4
                                                       : 2;
  out.resize(static_cast<std::size_t>(t.numel()) * size);
  std::byte* dst = out.data();
  const auto* src = static_cast<const std::byte*>(t.data);
  for_each_run(t, [&](std::int64_t offset, std::int64_t count, std::int64_t stride) {
    if (stride == 1) {
      std::memcpy(dst, src + offset * static_cast<std::int64_t>(size), static_cast<std::size_t>(count) * size);
      dst += static_cast<std::size_t>(count) * size;
      return;
    }
    for (std::int64_t i = 0; i < count; ++i, dst += size)
      std::memcpy(dst, src + (offset + i * stride) * static_cast<std::int64_t>(size), size);
  });
  return true;
}

std::string_view stat_name(Stat s) { return names[static_cast<std::size_t>(s)]; }

bool parse_stat(std::string_view suffix, Stat& out) {
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == suffix) {
      out = static_cast<Stat>(i);
      return true;
    }
  return false;
}

TensorStats compute_stats(const TensorView& t, const TensorView* previous) {
  return compute_stats(t, ~StatMask{0}, previous);
}

TensorStats compute_stats(const TensorView& t, StatMask wanted, const TensorView* previous) {
  TensorStats out;
  auto set = [&](Stat s, double v) { out.values[static_cast<std::size_t>(s)] = v; };
  std::fill(std::begin(out.values), std::end(out.values), nan);
  if (!valid(t)) {
    set(Stat::numel, 0);
    return out;
  }
  Acc a;
  const unsigned needs = needs_of(wanted);
  bool done = false;
#ifdef VIGIL_FAST_STATS
  if (t.dtype == DType::float32 && t.contiguous())
    done = accumulate_float32_fast(static_cast<const float*>(t.data), t.numel(), needs, a);
#endif
  if (!done) accumulate_any(t, a);
  const double n = a.n;
  set(Stat::numel, n);
  set(Stat::nan_count, a.nans);
  set(Stat::inf_count, a.infs);
  // What was not asked for is NaN (its accumulators may not have run).
  auto drop_unwanted = [&] {
    for (std::size_t i = 0; i < stat_count; ++i)
      if ((wanted & stat_bit(static_cast<Stat>(i))) == 0 && static_cast<Stat>(i) != Stat::numel)
        out.values[i] = nan;
  };
  if (n == 0) {  // empty tensor: the counts asked for are 0, the rest undefined (NaN)
    drop_unwanted();
    return out;
  }
  const bool has_nan = a.nans > 0;
  set(Stat::norm, std::sqrt(a.sumsq));
  set(Stat::sum, a.sum);
  set(Stat::abs_sum, a.abs_sum);
  set(Stat::mean, a.sum / n);
  set(Stat::abs_mean, a.abs_sum / n);
  // Shifted sums: var = (s2 - s1^2/n) / n, clamped at 0 against rounding.
  double var = a.nans + a.infs > 0 ? nan : std::max(0.0, (a.s2 - a.s1 * a.s1 / n) / n);
  set(Stat::var, var);
  set(Stat::std, std::sqrt(var));
  set(Stat::min, has_nan ? nan : a.mn);
  set(Stat::max, has_nan ? nan : a.mx);
  set(Stat::abs_max, has_nan ? nan : a.amx);
  set(Stat::frac_zero, a.zero / n);
  set(Stat::frac_pos, a.pos / n);
  set(Stat::frac_neg, a.neg / n);
  set(Stat::frac_nan, a.nans / n);
  set(Stat::frac_inf, a.infs / n);
  drop_unwanted();
  if ((wanted & (stat_bit(Stat::update_norm) | stat_bit(Stat::update_ratio))) != 0 &&
      previous != nullptr && valid(*previous) && previous->shape.size() == t.shape.size() &&
      std::equal(t.shape.begin(), t.shape.end(), previous->shape.begin())) {
    // Walk both in row-major order: element i of `t` against element i of
    // `previous` (the engine keeps previous copies packed, so that side is
    // usually a plain index).
    // long double: squares of tiny (denormal) differences underflow in
    // double, and the ratio of two underflowed sums would be 0/0.
    long double diff_sq = 0, prev_sq = 0;
    std::int64_t i = 0;
    const bool packed = previous->contiguous();
    for_each_offset(t, [&](std::int64_t offset) {
      const double p = element(*previous, packed ? i : offset_of(*previous, i));
      const long double d = static_cast<long double>(element(t, offset)) - p;
      diff_sq += d * d;
      prev_sq += static_cast<long double>(p) * p;
      ++i;
    });
    set(Stat::update_norm, static_cast<double>(std::sqrt(diff_sq)));
    set(Stat::update_ratio, static_cast<double>(std::sqrt(diff_sq) / std::sqrt(prev_sq)));
  }
  return out;
}

TensorStats combine_stats(std::span<const TensorStats> parts, double previous_norm) {
  TensorStats out;
  auto get = [](const TensorStats& s, Stat k) { return s.values[static_cast<std::size_t>(k)]; };
  auto set = [&](Stat k, double v) { out.values[static_cast<std::size_t>(k)] = v; };
  std::fill(std::begin(out.values), std::end(out.values), nan);
  double n = 0, nans = 0, infs = 0;
  for (const auto& p : parts) {
    n += get(p, Stat::numel);
    nans += get(p, Stat::nan_count);
    infs += get(p, Stat::inf_count);
  }
  set(Stat::numel, n);
  set(Stat::nan_count, nans);
  set(Stat::inf_count, infs);
  if (!(n > 0)) return out;  // as compute_stats of an empty tensor
  // NaN-propagating extremes (compute_stats' min/max are NaN with a NaN inside).
  auto extreme = [](double a, double b, bool larger) {
    if (std::isnan(a) || std::isnan(b)) return nan;
    return larger ? std::max(a, b) : std::min(a, b);
  };
  double sum = 0, abs_sum = 0, sumsq = 0, upd_sq = 0;
  double mn = 0, mx = 0, amx = 0, zero = 0, pos = 0, neg = 0;
  bool first = true;
  for (const auto& p : parts) {
    const double k = get(p, Stat::numel);
    if (!(k > 0)) continue;
    sum += get(p, Stat::sum);
    abs_sum += get(p, Stat::abs_sum);
    sumsq += get(p, Stat::norm) * get(p, Stat::norm);
    upd_sq += get(p, Stat::update_norm) * get(p, Stat::update_norm);
    mn = first ? get(p, Stat::min) : extreme(mn, get(p, Stat::min), false);
    mx = first ? get(p, Stat::max) : extreme(mx, get(p, Stat::max), true);
    amx = first ? get(p, Stat::abs_max) : extreme(amx, get(p, Stat::abs_max), true);
    zero += get(p, Stat::frac_zero) * k;
    pos += get(p, Stat::frac_pos) * k;
    neg += get(p, Stat::frac_neg) * k;
    first = false;
  }
  const double mean = sum / n;
  // Parallel variance: the parts' spread around their means plus the spread
  // of their means around the whole's.
  double m2 = 0;
  for (const auto& p : parts) {
    const double k = get(p, Stat::numel);
    if (!(k > 0)) continue;
    const double d = get(p, Stat::mean) - mean;
    m2 += k * (get(p, Stat::var) + d * d);
  }
  const double var = nans + infs > 0 ? nan : std::max(0.0, m2 / n);
  set(Stat::norm, std::sqrt(sumsq));
  set(Stat::sum, sum);
  set(Stat::abs_sum, abs_sum);
  set(Stat::mean, mean);
  set(Stat::abs_mean, abs_sum / n);
  set(Stat::var, var);
  set(Stat::std, std::sqrt(var));
  set(Stat::min, mn);
  set(Stat::max, mx);
  set(Stat::abs_max, amx);
  set(Stat::frac_zero, zero / n);
  set(Stat::frac_pos, pos / n);
  set(Stat::frac_neg, neg / n);
  set(Stat::frac_nan, nans / n);
  set(Stat::frac_inf, infs / n);
  set(Stat::update_norm, std::sqrt(upd_sq));
  set(Stat::update_ratio, std::sqrt(upd_sq) / previous_norm);
  return out;
}

double combine_param_stat(ParamStat, std::span<const double> values, std::span<const double> numels) {
  double weighted = 0, n = 0;
  for (std::size_t i = 0; i < values.size() && i < numels.size(); ++i) {
    if (!(numels[i] > 0)) continue;
    weighted += values[i] * numels[i];
    n += numels[i];
  }
  return n > 0 ? weighted / n : nan;
}

}  // namespace vigil
