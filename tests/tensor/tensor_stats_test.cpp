// Fused tensor statistics against a naive reference, and their path through
// the engine (derived series, only the stats rules read, update stats).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "interp/tensor_stats.hpp"
#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"

namespace {

using vigil::DType;
using vigil::Stat;
using vigil::StatMask;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// ---- an independent reference ----------------------------------------------

// IEEE half -> double by the definition (sign, biased exponent, fraction),
// written separately from the library's conversion.
double ref_half(std::uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, frac = h & 1023;
  const double s = sign ? -1.0 : 1.0;
  if (exp == 31) return frac ? nan : s * INFINITY;
  if (exp == 0) return s * frac * std::pow(2.0, -24);
  return s * (1.0 + frac / 1024.0) * std::pow(2.0, exp - 15);
}
double ref_bf16(std::uint16_t b) {
  std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Tensor {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape, strides;
  std::vector<std::byte> memory;

  vigil::TensorView view() const { return {memory.data(), dtype, shape, strides}; }
  std::size_t elem_size() const {
    return dtype == DType::float64 ? 8 : dtype == DType::float32 ? 4 : 2;
  }
  double at(std::int64_t offset) const {
    const std::byte* p = memory.data() + offset * static_cast<std::int64_t>(elem_size());
    switch (dtype) {
      case DType::float32: { float f; std::memcpy(&f, p, 4); return f; }
      case DType::float64: { double d; std::memcpy(&d, p, 8); return d; }
      case DType::float16: { std::uint16_t h; std::memcpy(&h, p, 2); return ref_half(h); }
      case DType::bfloat16: { std::uint16_t b; std::memcpy(&b, p, 2); return ref_bf16(b); }
    }
    return nan;
  }
  // Elements in row-major index order, by explicit multi-index arithmetic.
  std::vector<double> elements() const {
    std::int64_t n = 1;
    for (auto e : shape) n *= e;
    std::vector<double> out;
    for (std::int64_t i = 0; i < n; ++i) {
      std::int64_t rest = i, offset = 0;
      for (std::size_t d = shape.size(); d-- > 0;) {
        offset += (rest % shape[d]) * strides[d];
        rest /= shape[d];
      }
      out.push_back(at(offset));
    }
    return out;
  }
};

struct Ref {
  double v[vigil::stat_count];
  double operator[](Stat s) const { return v[static_cast<int>(s)]; }
};

Ref naive(const std::vector<double>& x, const std::vector<double>* prev) {
  Ref r;
  std::fill(std::begin(r.v), std::end(r.v), nan);
  auto set = [&](Stat s, double v) { r.v[static_cast<int>(s)] = v; };
  const double n = static_cast<double>(x.size());
  long double sum = 0, abs_sum = 0, sq = 0;
  double nans = 0, infs = 0, zero = 0, pos = 0, neg = 0;
  for (double v : x) {
    sum += v, abs_sum += std::fabs(v), sq += static_cast<long double>(v) * v;
    nans += std::isnan(v), infs += std::isinf(v), zero += v == 0, pos += v > 0, neg += v < 0;
  }
  set(Stat::numel, n);
  set(Stat::nan_count, nans);
  set(Stat::inf_count, infs);
  if (x.empty()) return r;
  set(Stat::sum, static_cast<double>(sum));
  set(Stat::abs_sum, static_cast<double>(abs_sum));
  set(Stat::norm, static_cast<double>(std::sqrt(sq)));
  set(Stat::mean, static_cast<double>(sum / n));
  set(Stat::abs_mean, static_cast<double>(abs_sum / n));
  if (nans + infs == 0) {
    long double m = sum / n, acc = 0;
    for (double v : x) acc += (v - m) * (v - m);  // two-pass
    set(Stat::var, static_cast<double>(acc / n));
    set(Stat::std, static_cast<double>(std::sqrt(acc / n)));
  }
  if (nans == 0) {
    double mn = x[0], mx = x[0], amx = 0;
    for (double v : x) mn = std::min(mn, v), mx = std::max(mx, v), amx = std::max(amx, std::fabs(v));
    set(Stat::min, mn);
    set(Stat::max, mx);
    set(Stat::abs_max, amx);
  }
  set(Stat::frac_zero, zero / n);
  set(Stat::frac_pos, pos / n);
  set(Stat::frac_neg, neg / n);
  set(Stat::frac_nan, nans / n);
  set(Stat::frac_inf, infs / n);
  if (prev) {
    long double d2 = 0, p2 = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      long double d = static_cast<long double>(x[i]) - (*prev)[i];
      d2 += d * d, p2 += static_cast<long double>((*prev)[i]) * (*prev)[i];
    }
    set(Stat::update_norm, static_cast<double>(std::sqrt(d2)));
    set(Stat::update_ratio, static_cast<double>(std::sqrt(d2) / std::sqrt(p2)));
  }
  return r;
}

bool close(double got, double want, double scale) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-9 * std::max({std::abs(want), scale, 1e-300});
}

// ---- generators ------------------------------------------------------------

double gen_value(DType dt) {
  const int kind = *rc::gen::inRange(0, 12);
  const bool wide = dt == DType::float64;
  switch (kind) {
    case 0: return nan;
    case 1: return *rc::gen::element(INFINITY, -INFINITY);
    case 2: return -0.0;
    case 3: return wide ? 4.9e-320 : 1.4e-43;  // denormals
    case 4: return 0.0;
    default: return *rc::gen::inRange(-100000, 100000) / 64.0;
  }
}

// Writes v at element `offset`; for the 16-bit types `bits` instead (any
// pattern: NaNs, Infs and denormals included).
void store(Tensor& t, std::int64_t offset, double v, std::uint16_t bits) {
  std::byte* p = t.memory.data() + offset * static_cast<std::int64_t>(t.elem_size());
  switch (t.dtype) {
    case DType::float32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::float64: std::memcpy(p, &v, 8); break;
    case DType::float16:
    case DType::bfloat16: std::memcpy(p, &bits, 2); break;
  }
}

// gen_value's distribution from a seeded engine, for buffers too large to
// draw element by element through RapidCheck (their values then do not
// shrink; their shapes still do).
double seeded_value(std::mt19937_64& rng, DType dt) {
  const bool wide = dt == DType::float64;
  switch (rng() % 12) {
    case 0: return nan;
    case 1: return rng() % 2 ? INFINITY : -INFINITY;
    case 2: return -0.0;
    case 3: return wide ? 4.9e-320 : 1.4e-43;
    case 4: return 0.0;
    default: return static_cast<double>(static_cast<std::int64_t>(rng() % 200000) - 100000) / 64.0;
  }
}

// Fills elements [0, n) of t's buffer.
void fill(Tensor& t, std::int64_t n) {
  if (n <= 2048) {
    for (std::int64_t off = 0; off < n; ++off)
      store(t, off, gen_value(t.dtype),
            static_cast<std::uint16_t>(*rc::gen::inRange(0, 65536)));
    return;
  }
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  for (std::int64_t off = 0; off < n; ++off)
    store(t, off, seeded_value(rng, t.dtype), static_cast<std::uint16_t>(rng()));
}

/// A random view: shape, then strides of a (possibly transposed, padded)
/// layout inside a larger buffer.
Tensor gen_tensor(DType dt, std::vector<std::int64_t> shape) {
  Tensor t;
  t.dtype = dt;
  t.shape = std::move(shape);
  const auto rank = t.shape.size();
  std::vector<std::size_t> order(rank);
  for (std::size_t i = 0; i < rank; ++i) order[i] = i;
  if (rank > 1 && *rc::gen::arbitrary<bool>()) std::swap(order[0], order[rank - 1]);
  t.strides.assign(rank, 1);
  std::int64_t s = 1;
  for (std::size_t k = rank; k-- > 0;) {
    const auto d = order[k];
    t.strides[d] = s * (*rc::gen::inRange(1, 3));  // gaps between elements
    s = t.strides[d] * std::max<std::int64_t>(t.shape[d], 1);
  }
  t.memory.assign(static_cast<std::size_t>(s) * t.elem_size() + 16, std::byte{0x7f});
  fill(t, s);
  return t;
}

DType gen_dtype() {
  return *rc::gen::element(DType::float32, DType::float64, DType::float16, DType::bfloat16);
}

// Small shapes of any rank, and (one case in three) shapes whose elements or
// units cross the kernels' blocks (1024 elements for the fused stats, 2048
// units for frac_dead_units): exact multiples, one off either side, odd
// tails, several blocks. At most 5 rows, so frac_dead_units' batch stays small.
std::vector<std::int64_t> gen_shape() {
  if (*rc::gen::inRange(0, 3) != 0)
    return *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange(0, 5),
                                                           rc::gen::inRange<std::int64_t>(0, 6));
  const std::int64_t n = *rc::gen::oneOf(
      rc::gen::element<std::int64_t>(1023, 1024, 1025, 2047, 2048, 2049, 3 * 1024 + 7, 4097),
      rc::gen::inRange<std::int64_t>(1, 9000));
  if (*rc::gen::arbitrary<bool>()) return {n};
  return {*rc::gen::inRange<std::int64_t>(1, 6), n};
}

RC_GTEST_PROP(TensorStats, EveryStatEqualsANaiveReference, ()) {
  const auto shape = gen_shape();
  const Tensor t = gen_tensor(gen_dtype(), shape);
  const bool with_prev = *rc::gen::arbitrary<bool>();
  const Tensor p = gen_tensor(gen_dtype(), shape);
  const auto x = t.elements(), px = p.elements();
  const auto pv = p.view();
  const auto got = vigil::compute_stats(t.view(), with_prev ? &pv : nullptr);
  const auto want = naive(x, with_prev ? &px : nullptr);
  double scale = 0;
  for (double v : x)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v) * static_cast<double>(x.size()));
  for (std::size_t i = 0; i < vigil::stat_count; ++i) {
    const auto s = static_cast<Stat>(i);
    // var is a difference of sums: judge it against the scale of the squares.
    const double sc = (s == Stat::var || s == Stat::std) ? scale * scale : scale;
    if (!close(got[s], want[s], s == Stat::std ? scale : sc))
      RC_FAIL(std::string(vigil::stat_name(s)) + ": got " + std::to_string(got[s]) + " want " +
              std::to_string(want[s]) + " (numel " + std::to_string(x.size()) + ")");
  }
}

// Selects a kernel for the rest of a test (and back to the best after it).
struct ForcedKernel {
  explicit ForcedKernel(vigil::detail::StatsKernel k) { vigil::detail::force_stats_kernel(k); }
  ~ForcedKernel() { vigil::detail::force_stats_kernel(vigil::detail::StatsKernel::best); }
};

// The float32 fast path (contiguous tensors, only the stats asked for):
// every requested stat equals the naive long-double reference, whatever the
// kernel (AVX-512, AVX2 or the general path, as far as the CPU has them),
// the alignment (every 4-byte phase of a 64-byte line: the unaligned head),
// length (blocks of 8192 and 4096, 64-element steps, tails), the mask, and how often
// NaN/Inf occur (never: the SIMD blocks; rarely: some blocks redone by the
// general path; often: most of them), with -0, denormals, wide magnitudes
// and data far from zero. What was not asked for is NaN.
RC_GTEST_PROP(TensorStats, MaskedFloat32StatsEqualANaiveReference, ()) {
  const ForcedKernel kernel(*rc::gen::element(vigil::detail::StatsKernel::best,
                                              vigil::detail::StatsKernel::avx2,
                                              vigil::detail::StatsKernel::general));
  const std::int64_t n = *rc::gen::oneOf(
      rc::gen::element<std::int64_t>(1, 15, 16, 17, 63, 64, 65, 79, 80, 4095, 4096, 4097,
                                     8191, 8192, 8193, 8192 + 64, 8192 + 79, 8192 * 3 + 16, 10000),
      rc::gen::inRange<std::int64_t>(0, 40000));
  const std::size_t misalign = *rc::gen::inRange<std::size_t>(0, 16);
  const int nonfinite_every = *rc::gen::element(0, 5000, 13);
  // k/64; wide magnitudes; far from zero (each block's M2 from its shifted
  // squares); a few deviations from zero (M2 read off the block's sums).
  const int spread = *rc::gen::element(0, 1, 2, 3);
  const StatMask mask = *rc::gen::arbitrary<std::uint32_t>() & ((StatMask{1} << vigil::stat_count) - 1);
  std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
  std::vector<float> buf(static_cast<std::size_t>(n) + misalign);
  float* data = buf.data() + misalign;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    float v = 0;
    if (nonfinite_every != 0 && rng() % nonfinite_every == 0) {
      v = rng() % 3 == 0 ? NAN : rng() % 2 ? INFINITY : -INFINITY;
    } else if (rng() % 50 == 0) {
      v = rng() % 2 ? 0.0f : -0.0f;
    } else if (rng() % 100 == 0) {
      v = (rng() % 2 ? 1.0f : -1.0f) * std::ldexp(1.0f, -140);  // denormal
    } else if (spread == 0) {
      v = static_cast<float>(static_cast<std::int64_t>(rng() % 200000) - 100000) / 64.0f;
    } else if (spread == 1) {
      v = normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 120) - 60);
    } else if (spread == 2) {
      v = 1000.0f + normal(rng) * 0.01f;
    } else {
      v = 3.0f + normal(rng);
    }
    data[i] = v;
  }
  const std::int64_t shape[] = {n};
  const auto got = vigil::compute_stats({data, DType::float32, shape, {}}, mask);
  const std::vector<double> x(data, data + n);
  const auto want = naive(x, nullptr);
  double scale = 0;
  for (double v : x)
    if (std::isfinite(v)) scale = std::max(scale, std::abs(v) * static_cast<double>(x.size()));
  for (std::size_t i = 0; i < vigil::stat_count; ++i) {
    const auto s = static_cast<Stat>(i);
    if (s == Stat::update_norm || s == Stat::update_ratio) {
      RC_ASSERT(std::isnan(got[s]));
      continue;
    }
    if ((mask & vigil::stat_bit(s)) == 0 && s != Stat::numel) {
      if (!std::isnan(got[s])) RC_FAIL(std::string(vigil::stat_name(s)) + " computed unasked");
      continue;
    }
    // Counts, fractions and extremes are exact in every kernel.
    const bool exact = s == Stat::min || s == Stat::max || s == Stat::abs_max ||
                       s == Stat::frac_zero || s == Stat::frac_pos || s == Stat::frac_neg ||
                       s == Stat::frac_nan || s == Stat::frac_inf || s == Stat::nan_count ||
                       s == Stat::inf_count || s == Stat::numel;
    const double sc = (s == Stat::var || s == Stat::std) ? scale * scale : scale;
    if (exact ? !(got[s] == want[s] || (std::isnan(got[s]) && std::isnan(want[s])))
              : !close(got[s], want[s], s == Stat::std ? scale : sc))
      RC_FAIL(std::string(vigil::stat_name(s)) + ": got " + fmt::format("{}", got[s]) + " want " +
              fmt::format("{}", want[s]) + " (numel " + std::to_string(n) + ")");
  }
}

// The variance keeps the relative accuracy of double shifted sums in every
// kernel, whatever each block's mean against its spread: centred data and a
// few deviations off zero (the AVX-512 kernel reads a block's M2 off its
// sums), data far from zero (it takes the block's shifted squares), blocks
// of both kinds in one tensor, and a constant tensor, whose variance is
// exactly 0.
TEST(TensorStats, VarianceKeepsItsRelativeAccuracy) {
  using K = vigil::detail::StatsKernel;
  const std::int64_t n = 3 * 8192 + 100;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  struct Case {
    const char* name;
    std::function<float(std::int64_t)> value;
  };
  const Case cases[] = {
      {"centred", [&](std::int64_t) { return static_cast<float>(normal(rng)); }},
      {"3 sd off zero", [&](std::int64_t) { return static_cast<float>(3 + normal(rng)); }},
      {"7.8 sd off zero", [&](std::int64_t) { return static_cast<float>(7.8 + normal(rng)); }},
      {"8 sd off zero", [&](std::int64_t) { return static_cast<float>(8 + normal(rng)); }},
      {"1000 +- 0.01", [&](std::int64_t) { return static_cast<float>(1000 + 0.01 * normal(rng)); }},
      {"-1e6 +- 1", [&](std::int64_t) { return static_cast<float>(-1e6 + normal(rng)); }},
      {"blocks both ways", [&](std::int64_t i) {
         return static_cast<float>((i / 8192) % 2 == 0 ? normal(rng) : 100 + normal(rng));
       }},
      {"tiny", [&](std::int64_t) { return static_cast<float>(1e-30 * normal(rng)); }},
  };
  for (const auto& c : cases)
    for (const std::size_t misalign : {0, 5})
      for (const K k : {K::best, K::avx2, K::general}) {
        const ForcedKernel kernel(k);
        std::vector<float> buf(static_cast<std::size_t>(n) + misalign);
        for (std::int64_t i = 0; i < n; ++i) buf[misalign + static_cast<std::size_t>(i)] = c.value(i);
        const std::int64_t shape[] = {n};
        const auto got = vigil::compute_stats({buf.data() + misalign, DType::float32, shape, {}},
                                              vigil::stat_bit(Stat::var) | vigil::stat_bit(Stat::std));
        const auto want = naive(std::vector<double>(buf.begin() + static_cast<std::ptrdiff_t>(misalign), buf.end()), nullptr);
        EXPECT_LE(std::abs(got[Stat::var] - want[Stat::var]), 1e-10 * want[Stat::var])
            << c.name << " kernel " << static_cast<int>(k) << " got " << got[Stat::var] << " want " << want[Stat::var];
        EXPECT_LE(std::abs(got[Stat::std] - want[Stat::std]), 1e-10 * want[Stat::std]) << c.name;
      }
  for (const float v : {0.3f, -7.0f, 0.0f, 1e30f})
    for (const K k : {K::best, K::avx2, K::general}) {
      const ForcedKernel kernel(k);
      const std::vector<float> buf(static_cast<std::size_t>(n), v);
      const std::int64_t shape[] = {n};
      const auto got = vigil::compute_stats({buf.data(), DType::float32, shape, {}});
      EXPECT_EQ(got[Stat::var], 0.0) << v << " kernel " << static_cast<int>(k);
      EXPECT_EQ(got[Stat::std], 0.0) << v;
      EXPECT_EQ(got[Stat::mean], static_cast<double>(v)) << v;
    }
}

// ---- several threads per tensor -------------------------------------------

// A large float32 tensor in the layout the chunking cares about: `n`
// elements starting `offset` floats into the buffer (every chunk then starts
// at that phase of a cache line), normal values, and optionally a few NaN,
// Inf, -0 and denormals in scattered blocks.
struct Big {
  std::vector<float> buf;
  std::int64_t n;
  std::size_t offset;
  Big(std::int64_t n_, std::size_t offset_, bool special, std::uint64_t seed)
      : buf(static_cast<std::size_t>(n_) + offset_), n(n_), offset(offset_) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.5f, 2.0f);
    for (auto& x : buf) x = normal(rng);
    if (special)
      for (int i = 0; i < 40; ++i) {
        const auto at = offset + rng() % static_cast<std::uint64_t>(n);
        const float v[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, std::ldexp(1.0f, -140)};
        buf[at] = v[rng() % 6];
      }
  }
  std::int64_t shape[1] = {n};
  vigil::TensorView view() const { return {buf.data() + offset, DType::float32, shape, {}}; }
};

bool bit_equal(const vigil::TensorStats& a, const vigil::TensorStats& b) {
  return std::memcmp(a.values, b.values, sizeof a.values) == 0;
}

// Restores the process-wide threading setting after a test.
struct Threading {
  vigil::StatsThreading saved = vigil::stats_threading();
  explicit Threading(vigil::StatsThreading t) { vigil::set_stats_threading(t); }
  ~Threading() { vigil::set_stats_threading(saved); }
};

// The chunks (at least 2^18 elements, at most 64 of them) and the order of
// their partial sums depend on the length alone: any number of threads, and
// a threshold that turns them off, give the same bits, and those equal the
// long-double reference to the usual bound. Lengths: just over one chunk, a
// whole number of chunks, an odd tail, and over 64 minimum chunks (the chunk
// length grows); with and without NaN/Inf blocks; aligned and not.
TEST(TensorStats, ThreadCountNeverChangesABit) {
  constexpr std::int64_t chunk = std::int64_t{1} << 18;
  const std::int64_t lengths[] = {chunk + 1, 3 * chunk, 5 * chunk + 8192 * 3 + 17,
                                  64 * chunk + 3 * 8192 + 4096 + 5};
  std::uint64_t seed = 1;
  for (const std::int64_t n : lengths)
    for (const bool special : {false, true}) {
      const Big big(n, static_cast<std::size_t>(seed % 16), special, seed);
      ++seed;
      const StatMask all = ~StatMask{0};
      vigil::TensorStats one;
      {
        const Threading off({1, 0});
        one = vigil::compute_stats(big.view(), all);
      }
      for (const unsigned threads : {2u, 3u, 8u}) {
        const Threading on({threads, 0});
        EXPECT_TRUE(bit_equal(vigil::compute_stats(big.view(), all), one))
            << "n " << n << " threads " << threads << " special " << special;
      }
      {
        const Threading above({2, std::size_t{1} << 40});  // threshold not reached
        EXPECT_TRUE(bit_equal(vigil::compute_stats(big.view(), all), one));
      }
      if (n > 4 * chunk) continue;  // the reference is slow; the small ones suffice
      const std::vector<double> x(big.buf.begin() + static_cast<std::ptrdiff_t>(big.offset), big.buf.end());
      const auto want = naive(x, nullptr);
      double scale = 0;
      for (double v : x)
        if (std::isfinite(v)) scale = std::max(scale, std::abs(v) * static_cast<double>(x.size()));
      for (std::size_t i = 0; i + 2 < vigil::stat_count; ++i) {  // not update_*
        const auto s = static_cast<Stat>(i);
        const double sc = (s == Stat::var || s == Stat::std) ? scale * scale : scale;
        EXPECT_TRUE(close(one[s], want[s], s == Stat::std ? scale : sc))
            << vigil::stat_name(s) << " got " << one[s] << " want " << want[s];
      }
    }
}

// Several host threads reducing large tensors at once share one pool: the
// one that finds it busy reduces its chunks alone, with the same bits.
TEST(TensorStats, ConcurrentCallersGetTheSameBits) {
  const Big big(std::int64_t{3} << 19, 3, true, 99);
  vigil::TensorStats one;
  {
    const Threading off({1, 0});
    one = vigil::compute_stats(big.view());
  }
  const Threading on({2, 0});
  std::atomic<int> mismatches{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int i = 0; i < 6; ++i)
        if (!bit_equal(vigil::compute_stats(big.view()), one)) ++mismatches;
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A child forked after the pool started has none of its workers: it
// reduces alone instead of waiting for them.
TEST(TensorStats, AForkedChildReducesWithoutThePool) {
  const Big big(std::int64_t{1} << 20, 0, false, 7);
  const Threading on({2, 0});
  const auto parent = vigil::compute_stats(big.view());  // starts the pool
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(bit_equal(vigil::compute_stats(big.view()), parent) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(TensorStats, ThreadingSettingRoundTrips) {
  const Threading t({3, 12345});
  EXPECT_EQ(vigil::stats_threading().threads, 3u);
  EXPECT_EQ(vigil::stats_threading().min_bytes, 12345u);
}

// An empty tensor returns early: its counts are 0 when asked for and, like
// every stat not asked for, NaN when not (was: 0 whatever the mask).
TEST(TensorStats, EmptyTensorHonoursTheMask) {
  const float none[1] = {0};
  const std::int64_t shape[] = {0};
  const auto counts = vigil::compute_stats({none, DType::float32, shape, {}},
                                           vigil::stat_bit(Stat::nan_count));
  EXPECT_EQ(counts[Stat::numel], 0);
  EXPECT_EQ(counts[Stat::nan_count], 0);
  EXPECT_TRUE(std::isnan(counts[Stat::inf_count]));
  EXPECT_TRUE(std::isnan(counts[Stat::norm]));
  const auto norm = vigil::compute_stats({none, DType::float32, shape, {}}, vigil::stat_bit(Stat::norm));
  EXPECT_EQ(norm[Stat::numel], 0);
  EXPECT_TRUE(std::isnan(norm[Stat::nan_count]));
  EXPECT_TRUE(std::isnan(norm[Stat::inf_count]));
  EXPECT_TRUE(std::isnan(norm[Stat::norm]));
}

TEST(TensorStats, MaskedStatsEqualTheFullPassOnEveryDtype) {
  // The general path (other dtypes, strided views) honours the mask too.
  const double v[] = {1.5, -2, 0, 4, NAN, 3};
  const std::int64_t shape[] = {6};
  const StatMask mask = vigil::stat_bit(Stat::norm) | vigil::stat_bit(Stat::frac_nan);
  const auto all = vigil::compute_stats({v, DType::float64, shape, {}});
  const auto some = vigil::compute_stats({v, DType::float64, shape, {}}, mask);
  EXPECT_EQ(some[Stat::frac_nan], all[Stat::frac_nan]);
  EXPECT_TRUE(std::isnan(some[Stat::norm]));  // a NaN inside: the norm is NaN
  EXPECT_TRUE(std::isnan(some[Stat::sum]));   // not asked for
  EXPECT_EQ(some[Stat::numel], 6.0);
}

TEST(TensorStats, ThreeEqualValuesHaveZeroVariance) {
  const float data[] = {0.1f, 0.1f, 0.1f};
  const std::int64_t shape[] = {3};
  auto s = vigil::compute_stats({data, DType::float32, shape, {}});
  EXPECT_EQ(s[Stat::var], 0.0);
  EXPECT_EQ(s[Stat::std], 0.0);
  EXPECT_DOUBLE_EQ(s[Stat::mean], static_cast<double>(0.1f));
}

TEST(TensorStats, InvalidViewsGiveNaNNotACrash) {
  const std::int64_t shape[] = {4};
  const std::int64_t negative[] = {-1};
  auto a = vigil::compute_stats({nullptr, DType::float32, shape, {}});
  EXPECT_EQ(a[Stat::numel], 0.0);
  EXPECT_TRUE(std::isnan(a[Stat::norm]));
  const float x[4] = {1, 2, 3, 4};
  auto b = vigil::compute_stats({x, DType::float32, negative, {}});
  EXPECT_EQ(b[Stat::numel], 0.0);
  const std::int64_t wrong_strides[] = {1, 1};
  auto c = vigil::compute_stats({x, DType::float32, shape, wrong_strides});
  EXPECT_EQ(c[Stat::numel], 0.0);
}

TEST(TensorStats, StatNamesRoundTrip) {
  for (std::size_t i = 0; i < vigil::stat_count; ++i) {
    Stat s;
    ASSERT_TRUE(vigil::parse_stat(vigil::stat_name(static_cast<Stat>(i)), s));
    EXPECT_EQ(static_cast<std::size_t>(s), i);
  }
  Stat s;
  EXPECT_FALSE(vigil::parse_stat("median", s));
}

// ---- parameterised stats ---------------------------------------------------

using vigil::ParamStat;

// Naive references over the row-major element list, counting in integers and
// dividing in long double.
double ref_frac_outside(const std::vector<double>& x, double lo, double hi) {
  if (x.empty()) return nan;
  long double out = 0;
  for (double v : x) out += (v < lo || v > hi) ? 1 : 0;
  return static_cast<double>(out / x.size());
}

double ref_frac_changed(const std::vector<double>& x, const std::vector<double>& p, double rtol,
                        double atol) {
  if (x.empty()) return nan;
  long double changed = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    // The test is numpy's, in double: long double would decide near-ties
    // (|a - b| within rounding of atol + rtol |b|) differently.
    const double a = x[i], b = p[i];
    bool close;
    if (std::isnan(a) || std::isnan(b))
      close = false;  // equal_nan = false
    else if (std::isinf(a) || std::isinf(b))
      close = a == b;  // numpy: infinities are close only to themselves
    else
      close = std::fabs(a - b) <= atol + rtol * std::fabs(b);
    changed += close ? 0 : 1;
  }
  return static_cast<double>(changed / x.size());
}

double ref_frac_dead_units(const std::vector<double>& x, const std::vector<std::int64_t>& shape,
                           double threshold) {
  if (x.empty()) return nan;
  const std::int64_t batch = shape.empty() ? 1 : shape[0];
  const std::int64_t units = static_cast<std::int64_t>(x.size()) / batch;
  long double dead = 0;
  for (std::int64_t u = 0; u < units; ++u) {
    long double active = 0;
    for (std::int64_t b = 0; b < batch; ++b) active += x[b * units + u] > 0 ? 1 : 0;
    dead += 100 * active / batch < threshold ? 1 : 0;
  }
  return static_cast<double>(dead / units);
}

bool same(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  // Counts divided in double vs long double: at most one rounding apart.
  return std::abs(got - want) <= 4 * std::numeric_limits<double>::epsilon() * std::abs(want);
}

RC_GTEST_PROP(ParamStats, FracOutsideEqualsANaiveReference, ()) {
  const auto shape = gen_shape();
  const Tensor t = gen_tensor(gen_dtype(), shape);
  const double a = *rc::gen::element(-INFINITY, -10.0, -1.0, -0.0, 0.0, 0.5, 3.0, 1e4, INFINITY);
  const double b = *rc::gen::element(-5.0, 0.0, 1.0, 9.4999, 16.99999, 1e4, INFINITY);
  const double args[] = {a, b};
  const double got = vigil::compute_param_stat(ParamStat::frac_outside, args, t.view());
  const double want = ref_frac_outside(t.elements(), a, b);
  RC_ASSERT(same(got, want));
}

RC_GTEST_PROP(ParamStats, FracChangedEqualsANaiveReference, ()) {
  const auto shape = gen_shape();
  const Tensor t = gen_tensor(gen_dtype(), shape);
  // The previous copy: the same values in another dtype/layout, then some changed.
  Tensor p = gen_tensor(gen_dtype(), shape);
  const bool from_t = *rc::gen::arbitrary<bool>();
  if (from_t) {
    const auto x = t.elements();
    std::int64_t i = 0;
    p.dtype = DType::float64;
    p.memory.assign(x.size() * 8 + 16, std::byte{0});
    p.strides.assign(shape.size(), 1);
    for (std::size_t d = shape.size(); d-- > 1;) p.strides[d - 1] = p.strides[d] * shape[d];
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    for (double v : x) {
      const double changed =
          rng() % 4 == 0 ? v + static_cast<double>(static_cast<int>(rng() % 7) - 3) / 64.0 : v;
      std::memcpy(p.memory.data() + 8 * i++, &changed, 8);
    }
  }
  // Tolerances that make ties exact in double and long double alike, or
  // unreachable on these values.
  const double rtol = *rc::gen::element(0.0, 1e-5, 0.5, 1.0 / 64);
  const double atol = *rc::gen::element(0.0, 1e-8, 1.0 / 64, 1.0);
  const double args[] = {rtol, atol};
  const auto pv = p.view();
  const double got = vigil::compute_param_stat(ParamStat::frac_changed, args, t.view(), &pv);
  const double want = ref_frac_changed(t.elements(), p.elements(), rtol, atol);
  RC_ASSERT(same(got, want));
  // Without a previous value: NaN.
  RC_ASSERT(std::isnan(vigil::compute_param_stat(ParamStat::frac_changed, args, t.view())));
}

RC_GTEST_PROP(ParamStats, FracDeadUnitsEqualsANaiveReference, ()) {
  const auto shape = gen_shape();
  const Tensor t = gen_tensor(gen_dtype(), shape);
  // Whole-number thresholds: 100 * active / batch (batch <= 5) is never
  // within rounding of one unless equal.
  const double threshold = *rc::gen::element(-1.0, 0.0, 1.0, 20.0, 50.0, 60.0, 100.0, 101.0);
  const double args[] = {threshold};
  const double got = vigil::compute_param_stat(ParamStat::frac_dead_units, args, t.view());
  const double want = ref_frac_dead_units(t.elements(), shape, threshold);
  RC_ASSERT(same(got, want));
}

TEST(ParamStats, HandWorkedValues) {
  // 3 batch entries x 4 units; unit 0 always active, unit 1 once (33 %),
  // units 2 and 3 never (3 has a NaN, which is not active).
  const float x[] = {1, 2, 0, nan,
                     5, 0, -1, 0,
                     7, 0, 0, -2};
  const std::int64_t shape[] = {3, 4};
  const vigil::TensorView v{x, DType::float32, shape, {}};
  const double below_50[] = {50}, below_30[] = {30}, none[] = {0};
  EXPECT_DOUBLE_EQ(vigil::compute_param_stat(ParamStat::frac_dead_units, below_50, v), 0.75);
  EXPECT_DOUBLE_EQ(vigil::compute_param_stat(ParamStat::frac_dead_units, below_30, v), 0.5);
  EXPECT_DOUBLE_EQ(vigil::compute_param_stat(ParamStat::frac_dead_units, none, v), 0.0);
  const double bounds[] = {-1, 1};  // outside: 2 5 7 -2 (NaN is neither)
  EXPECT_DOUBLE_EQ(vigil::compute_param_stat(ParamStat::frac_outside, bounds, v), 4.0 / 12);
  const float prev[] = {1, 2, 0, nan,
                        5, 0, -1, 0,
                        7, 1e-6f, 0, -2.5f};
  const vigil::TensorView pv{prev, DType::float32, shape, {}};
  const double tol[] = {0, 1e-5};  // 1e-6 is within atol; -2.5 vs -2 and the NaN are not
  EXPECT_DOUBLE_EQ(vigil::compute_param_stat(ParamStat::frac_changed, tol, v, &pv), 2.0 / 12);
  const std::int64_t other_shape[] = {4, 3};
  const vigil::TensorView reshaped{prev, DType::float32, other_shape, {}};
  EXPECT_TRUE(std::isnan(vigil::compute_param_stat(ParamStat::frac_changed, tol, v, &reshaped)));
  const double one_arg[] = {1};
  EXPECT_TRUE(std::isnan(vigil::compute_param_stat(ParamStat::frac_outside, one_arg, v)));
}

TEST(ParamStats, CanonicalNamesRoundTrip) {
  const double a[] = {-9.4999, 9.4999};
  EXPECT_EQ(vigil::param_stat_suffix(ParamStat::frac_outside, a), "frac_outside(-9.4999,9.4999)");
  const double b[] = {1e-5, 1e-8};
  EXPECT_EQ(vigil::param_stat_suffix(ParamStat::frac_changed, b), "frac_changed(1e-05,1e-08)");
  vigil::ParamStatRef ref;
  ASSERT_TRUE(vigil::parse_param_stat_series("weight_frac_changed(1e-05,1e-08)", ref));
  EXPECT_EQ(ref.tensor, "weight");
  EXPECT_EQ(ref.stat, ParamStat::frac_changed);
  ASSERT_EQ(ref.nargs, 2u);
  EXPECT_EQ(ref.args[0], 1e-5);
  EXPECT_EQ(ref.args[1], 1e-8);
  ASSERT_TRUE(vigil::parse_param_stat_series("my_act_frac_dead_units(1)", ref));
  EXPECT_EQ(ref.tensor, "my_act");
  EXPECT_EQ(ref.nargs, 1u);
  for (const char* bad : {"weight_frac_changed(1)", "weight_frac_changed(1,2,3)", "frac_outside(1,2)",
                          "w_frac_outside(1,)", "w_frac_outside(a,b)", "w_norm(1)", "w_frac_outside"})
    EXPECT_FALSE(vigil::parse_param_stat_series(bad, ref)) << bad;
}

// ---- through the engine ----------------------------------------------------

TEST(EngineTensors, OnlyTheStatsRulesReadAreDerived) {
  auto r = vigil::compile_string(
      "rule exploding: when grad_norm{layer=~\"conv.*\"} > 10 do skip_step\n"
      "rule dead: when grad_frac_zero > 0.5 do log\n"
      "rule jumpy: when weight_update_ratio > 0.5 do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto conv = *e.tensor("grad{layer=\"conv1\"}");
  const auto w = *e.tensor("weight{layer=\"conv1\"}");
  const auto other = *e.tensor("activation{layer=\"conv1\"}");
  EXPECT_EQ(e.tensor_stats_used(conv), vigil::stat_bit(Stat::norm) | vigil::stat_bit(Stat::frac_zero));
  EXPECT_EQ(e.tensor_stats_used(w), vigil::stat_bit(Stat::update_ratio));
  EXPECT_EQ(e.tensor_stats_used(other), 0u);

  const std::int64_t shape[] = {2, 2};
  std::vector<float> g = {3, 4, 0, 0}, weights = {1, 1, 1, 1};
  auto step = [&](std::int64_t s) {
    std::vector<vigil::TensorSample> ts = {{conv, {g.data(), DType::float32, shape, {}}},
                                           {w, {weights.data(), DType::float32, shape, {}}},
                                           {other, {g.data(), DType::float32, shape, {}}}};
    std::vector<std::string> fired;
    for (const auto& f : e.observe(s, {}, ts)) fired.push_back(f.rule_name());
    return fired;
  };
  EXPECT_EQ(step(1), (std::vector<std::string>{}));  // norm 5, frac_zero exactly 0.5
  g = {30, 40, 0, 0};
  weights = {1, 1, 1, 3};  // update norm 2, previous norm 2: ratio 1
  EXPECT_EQ(step(2), (std::vector<std::string>{"exploding", "jumpy"}));
  g = {0, 0, 0, 1};  // frac_zero 0.75
  EXPECT_EQ(step(3), (std::vector<std::string>{"dead"}));
}

TEST(EngineTensors, RestoreKeepsPreviousTensorsAndHostIds) {
  auto r = vigil::compile_string("when w_update_norm > 1 do log\nwhen loss > 1 do log\n", "t.rules");
  ASSERT_TRUE(r.ok());
  const std::int64_t shape[] = {3};
  std::vector<double> w = {0, 0, 0};
  vigil::Engine a(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto wa = *a.tensor("w");
  const auto la = *a.series("loss");
  const vigil::Sample zero_loss[] = {{la, 0}};
  const vigil::TensorSample ta[] = {{wa, {w.data(), DType::float64, shape, {}}}};
  a.observe(1, zero_loss, ta);
  const std::string state = a.save_state();

  // A host that interns in another order gets its own ids, which restore keeps.
  vigil::Engine b(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto lb = *b.series("loss");
  const auto wb = *b.tensor("w");
  b.restore_state(state);
  w = {2, 0, 0};  // update norm 2 against the restored previous value
  const vigil::Sample high_loss[] = {{lb, 5}};
  const vigil::TensorSample tb[] = {{wb, {w.data(), DType::float64, shape, {}}}};
  auto fs = b.observe(2, high_loss, tb);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(*fs[0].value, 2.0);
  EXPECT_EQ(*fs[1].value, 5.0);
}

// A tensor fed through the engine yields the canonical derived series (as
// record() writes it), and a rule on it fires.
TEST(EngineParamStats, DerivedSeriesAndFiring) {
  auto r = vigil::compile_string(
      "rule saturated: when activation{layer=~\"fc.*\"}.frac_outside(-9.4999, 9.4999) > 0.5 do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto fc1 = *e.tensor("activation{layer=\"fc1\"}");
  EXPECT_EQ(e.tensor_stats_used(fc1), vigil::param_stats_bit);  // no plain stat is read
  std::vector<std::pair<std::string, double>> recorded;
  e.record([&](const vigil::Observation& o) {
    for (const auto& kv : o.values) recorded.push_back(kv);
  });
  const std::int64_t shape[] = {4};
  std::vector<float> x = {0, 10, -3, 1};
  const vigil::TensorSample ts[] = {{fc1, {x.data(), DType::float32, shape, {}}}};
  EXPECT_TRUE(e.observe(1, {}, ts).empty());  // 1 of 4 outside
  ASSERT_EQ(recorded.size(), 1u);
  EXPECT_EQ(recorded[0].first, "activation_frac_outside(-9.4999,9.4999){layer=\"fc1\"}");
  EXPECT_EQ(recorded[0].second, 0.25);
  x = {-10, 10, 20, 1};  // 3 of 4
  auto fs = e.observe(2, {}, ts);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].rule_name(), "saturated");
  EXPECT_EQ(*fs[0].value, 0.75);
  // The recorded key is an ordinary series key: interning it reaches the same series.
  EXPECT_TRUE(e.series("activation_frac_outside(-9.4999,9.4999){layer=\"fc1\"}").has_value());
}

TEST(EngineParamStats, TemplateTakesTheTensorAndTheArguments) {
  auto r = vigil::compile_string(
      "rule dead(tensor = activation, threshold_inactivity = 1.0, threshold_layer = 50):\n"
      "    when tensor.frac_dead_units(threshold_inactivity) * 100 > threshold_layer do log\n"
      "use dead(tensor = act{layer=\"r1\"}, threshold_inactivity = 2 * 25,\n"
      "    threshold_layer = 30) as half_dead\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto r1 = *e.tensor("act{layer=\"r1\"}");
  const auto r2 = *e.tensor("act{layer=\"r2\"}");  // matched by name; no rule selects r2
  EXPECT_NE(e.tensor_stats_used(r1), 0u);
  const std::int64_t shape[] = {2, 3};  // batch 2, 3 units: active 100 %, 50 %, 0 %
  const float x[] = {1, 1, 0,
                     1, 0, 0};
  const vigil::TensorSample ts[] = {{r1, {x, DType::float32, shape, {}}},
                                    {r2, {x, DType::float32, shape, {}}}};
  auto fs = e.observe(1, {}, ts);
  ASSERT_EQ(fs.size(), 1u);  // active below 50 %: only unit 2 (unit 1 is at 50 %); 1/3 > 30 %
  EXPECT_EQ(fs[0].rule_name(), "half_dead");
  EXPECT_DOUBLE_EQ(*fs[0].value, 100.0 / 3);
}

TEST(EngineParamStats, FracChangedAcrossObservationsAndRestore) {
  auto r = vigil::compile_string("rule frozen: when not (w.frac_changed(0, 1e-3) > 0) do log\n",
                                 "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  const std::int64_t shape[] = {2, 2};
  std::vector<double> w = {1, 2, 3, 4};
  vigil::Engine a(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto wa = *a.tensor("w");
  std::vector<double> seen;
  a.record([&](const vigil::Observation& o) { seen.push_back(o.values.at(0).second); });
  const vigil::TensorSample ta[] = {{wa, {w.data(), DType::float64, shape, {}}}};
  // First sample: no previous copy, NaN, which `not (... > 0)` counts as unchanged.
  EXPECT_EQ(a.observe(1, {}, ta).size(), 1u);
  w = {1, 2, 3, 4.5};
  EXPECT_TRUE(a.observe(2, {}, ta).empty());
  w = {1, 2.0005, 3, 4.5};  // within atol
  EXPECT_EQ(a.observe(3, {}, ta).size(), 1u);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_TRUE(std::isnan(seen[0]));
  EXPECT_EQ(seen[1], 0.25);
  EXPECT_EQ(seen[2], 0.0);

  // A fresh engine restored from the state compares with the saved copy.
  const std::string state = a.save_state();
  vigil::Engine b(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto wb = *b.tensor("w");
  b.restore_state(state);
  std::vector<double> moved = {1, 2.0005, 3, 9};
  const vigil::TensorSample tb[] = {{wb, {moved.data(), DType::float64, shape, {}}}};
  std::vector<double> after;
  b.record([&](const vigil::Observation& o) { after.push_back(o.values.at(0).second); });
  EXPECT_TRUE(b.observe(4, {}, tb).empty());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0], 0.25);  // against {1, 2.0005, 3, 4.5}, not NaN
  // Without the restore the same tensor would have no previous copy.
  vigil::Engine c(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto wc = *c.tensor("w");
  const vigil::TensorSample tc[] = {{wc, {moved.data(), DType::float64, shape, {}}}};
  EXPECT_EQ(c.observe(4, {}, tc).size(), 1u);
}

// The stdlib template end to end on a real tensor: a compile-time string
// parameter picks the bounds, and only that stat is computed and recorded.
TEST(EngineParamStats, SaturatedActivationComputesOnlyTheChosenBounds) {
  auto r = vigil::compile_string(
      "use std.saturated_activation(activation = \"sigmoid\", threshold_layer = 30)\n", "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto act = *e.tensor("activation{layer=\"s1\"}");
  std::vector<std::string> keys;
  e.record([&](const vigil::Observation& o) {
    for (const auto& kv : o.values) keys.push_back(kv.first);
  });
  const std::int64_t shape[] = {5};
  const double x[] = {-30, 17, 12, 0, nan};  // outside [-23, 16.99999]: -30, 17 (12 is tanh-saturated only)
  const vigil::TensorSample ts[] = {{act, {x, DType::float64, shape, {}}}};
  auto fs = e.observe(1, {}, ts);
  EXPECT_EQ(keys, (std::vector<std::string>{"activation_frac_outside(-23,16.99999){layer=\"s1\"}"}));
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_DOUBLE_EQ(*fs[0].value, 40.0);  // 2 of 5 saturated, in percent
}

// ---- combining the stats of parts (multi-process jobs) ------------------------

/// Whether a combined stat equals the whole's up to rounding of the
/// different summation orders (`scale`: the magnitude the stat is made of).
bool close_to(double got, double want, double scale) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-9 * (1 + std::abs(want) + scale);
}

RC_GTEST_PROP(CombineStats, PartsCombineToTheWhole, ()) {
  // A tensor and its previous value, cut into parts at random points (empty
  // parts included), as the shards of a data-parallel job.
  const auto n = *rc::gen::inRange<std::size_t>(1, 60);
  auto value = [] {
    switch (*rc::gen::inRange(0, 20)) {
      case 0: return nan;
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return 0.0;
      default: return *rc::gen::inRange(-4000, 4000) / 40.0;
    }
  };
  std::vector<double> x(n), prev(n);
  for (auto& v : x) v = value();
  for (std::size_t i = 0; i < n; ++i) prev[i] = *rc::gen::inRange(0, 3) == 0 ? x[i] : value();
  auto cuts = *rc::gen::container<std::vector<std::size_t>>(
      *rc::gen::inRange(0, 5), rc::gen::inRange<std::size_t>(0, n + 1));
  cuts.push_back(0);
  cuts.push_back(n);
  std::sort(cuts.begin(), cuts.end());

  std::vector<vigil::TensorStats> parts;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::int64_t shape[] = {static_cast<std::int64_t>(cuts[c + 1] - cuts[c])};
    const vigil::TensorView part{x.data() + cuts[c], DType::float64, shape, {}};
    const vigil::TensorView before{prev.data() + cuts[c], DType::float64, shape, {}};
    parts.push_back(vigil::compute_stats(part, &before));
  }
  const std::int64_t shape[] = {static_cast<std::int64_t>(n)};
  const vigil::TensorView whole{x.data(), DType::float64, shape, {}};
  const vigil::TensorView whole_prev{prev.data(), DType::float64, shape, {}};
  const auto want = vigil::compute_stats(whole, &whole_prev);
  const double prev_norm = vigil::compute_stats(whole_prev)[Stat::norm];
  const auto got = vigil::combine_stats(parts, prev_norm);
  // The magnitudes the stats are made of (finite elements; the old ones too
  // for the update stats): rounding differs with the summation order.
  double big = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (double v : {x[i], prev[i]})
      if (std::isfinite(v)) big = std::max(big, std::abs(v));
  for (std::size_t k = 0; k < vigil::stat_count; ++k) {
    const auto stat = static_cast<Stat>(k);
    const double scale = static_cast<double>(n) * (stat == Stat::var ? big * big : big);
    if (!close_to(got[stat], want[stat], scale))
      RC_FAIL(fmt::format("{}: combined {} vs whole {}", vigil::stat_name(stat), got[stat], want[stat]));
  }

  // frac_outside of the whole is the numel-weighted mean of the parts'.
  const double bounds[] = {-10, 10};
  std::vector<double> fracs, numels;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::int64_t part_shape[] = {static_cast<std::int64_t>(cuts[c + 1] - cuts[c])};
    const vigil::TensorView part{x.data() + cuts[c], DType::float64, part_shape, {}};
    fracs.push_back(vigil::compute_param_stat(ParamStat::frac_outside, bounds, part));
    numels.push_back(static_cast<double>(part_shape[0]));
  }
  RC_ASSERT(close_to(vigil::combine_param_stat(ParamStat::frac_outside, fracs, numels),
                     vigil::compute_param_stat(ParamStat::frac_outside, bounds, whole), 0));
}

TEST(CombineStats, EmptyPartsAndNoParts) {
  const double x[] = {1, -3};
  const std::int64_t two[] = {2}, none[] = {0};
  const vigil::TensorStats parts[] = {vigil::compute_stats({x, DType::float64, none, {}}),
                                      vigil::compute_stats({x, DType::float64, two, {}})};
  const auto got = vigil::combine_stats(parts);
  EXPECT_EQ(got[Stat::numel], 2);
  EXPECT_EQ(got[Stat::min], -3);
  EXPECT_EQ(got[Stat::var], 4);
  EXPECT_TRUE(std::isnan(got[Stat::update_ratio]));
  const auto empty = vigil::combine_stats({});
  EXPECT_EQ(empty[Stat::numel], 0);
  EXPECT_TRUE(std::isnan(empty[Stat::mean]));
}

// Two processes of a data-parallel job, simulated in one: B's allgather hands
// its buffer over (and fails, so B uses its own stats); A's returns both
// buffers. A then sees the stats of the concatenated tensor.
TEST(CombineStats, EngineCombinesGatheredStatsOfEveryProcess) {
  auto r = vigil::compile_string(
      "rule big: when activation.abs_max > 5 do log\n"
      "rule mean: when activation.mean > -100 cooldown 1 samples do log\n"
      "rule outside: when activation.frac_outside(-2, 2) >= 0 cooldown 1 samples do log\n"
      "rule ratio: when weight.update_ratio >= 0 cooldown 1 samples do log\n",
      "dp.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  std::vector<double> from_b;
  vigil::EngineOptions ob{.unbound = vigil::UnboundActions::record};
  ob.allgather = [&](std::span<const double> local, std::vector<double>&) {
    from_b.assign(local.begin(), local.end());
    return false;
  };
  vigil::EngineOptions oa{.unbound = vigil::UnboundActions::record};
  oa.allgather = [&](std::span<const double> local, std::vector<double>& all) {
    all.assign(local.begin(), local.end());
    all.insert(all.end(), from_b.begin(), from_b.end());
    return true;
  };
  vigil::Engine a(*r.program, oa), b(*r.program, ob);
  const auto act_a = *a.tensor("activation"), w_a = *a.tensor("weight");
  const auto act_b = *b.tensor("activation"), w_b = *b.tensor("weight");
  const std::int64_t three[] = {3}, two[] = {2};
  auto values = [](std::span<const vigil::Firing> fs) {
    std::map<std::string, double> out;
    for (const auto& f : fs) out[f.rule_name()] = f.value.value_or(nan);
    return out;
  };
  // Step 1: A holds {1, 2, 3}, B {10, -4}; weights A {3, 4}, B {0, 0}.
  const double xa[] = {1, 2, 3}, xb[] = {10, -4}, wa[] = {3, 4}, wb[] = {0, 0};
  const vigil::TensorSample sb[] = {{act_b, {xb, DType::float64, two, {}}},
                                    {w_b, {wb, DType::float64, two, {}}}};
  const auto fb = values(b.observe(1, {}, sb));
  EXPECT_TRUE(fb.count("big"));  // B alone: |10| > 5
  EXPECT_EQ(b.stats().gather_failures, 1u);
  const vigil::TensorSample sa[] = {{act_a, {xa, DType::float64, three, {}}},
                                    {w_a, {wa, DType::float64, two, {}}}};
  const auto fa = values(a.observe(1, {}, sa));
  ASSERT_TRUE(fa.count("big"));  // A's own max is 3: only the whole fires
  EXPECT_EQ(fa.at("big"), 10);
  EXPECT_DOUBLE_EQ(fa.at("mean"), 12.0 / 5);
  EXPECT_DOUBLE_EQ(fa.at("outside"), 3.0 / 5);  // 3, 10, -4
  EXPECT_EQ(a.stats().gather_failures, 0u);
  // Step 2: weights A {6, 8}, B {0, 0}: the whole moved by 5 from a norm of 5.
  const double wa2[] = {6, 8};
  const vigil::TensorSample sb2[] = {{w_b, {wb, DType::float64, two, {}}}};
  (void)b.observe(2, {}, sb2);
  const vigil::TensorSample sa2[] = {{w_a, {wa2, DType::float64, two, {}}}};
  const auto fa2 = values(a.observe(2, {}, sa2));
  ASSERT_TRUE(fa2.count("ratio"));
  EXPECT_DOUBLE_EQ(fa2.at("ratio"), 1.0);
  // The previous whole norm is engine state: it survives save/restore.
  vigil::Engine a2(*r.program, oa);
  a2.restore_state(a.save_state());
  (void)b.observe(3, {}, sb2);
  const double wa3[] = {9, 12};
  const vigil::TensorSample sa3[] = {{*a2.tensor("weight"), {wa3, DType::float64, two, {}}}};
  const auto fa3 = values(a2.observe(3, {}, sa3));
  ASSERT_TRUE(fa3.count("ratio"));
  EXPECT_DOUBLE_EQ(fa3.at("ratio"), 0.5);  // moved by 5 from a norm of 10
}

}  // namespace
