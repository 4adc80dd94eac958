// Fused tensor statistics against a naive reference, and their path through
// the engine (derived series, only the stats rules read, update stats).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"

namespace {

using vigil::DType;
using vigil::Stat;

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

void store(Tensor& t, std::int64_t offset, double v) {
  std::byte* p = t.memory.data() + offset * static_cast<std::int64_t>(t.elem_size());
  switch (t.dtype) {
    case DType::float32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::float64: std::memcpy(p, &v, 8); break;
    case DType::float16:
    case DType::bfloat16: {  // any 16-bit pattern: NaNs, Infs, denormals included
      std::uint16_t b = static_cast<std::uint16_t>(*rc::gen::inRange(0, 65536));
      std::memcpy(p, &b, 2);
      break;
    }
  }
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
  for (std::int64_t off = 0; off < s; ++off) store(t, off, gen_value(dt));
  return t;
}

DType gen_dtype() {
  return *rc::gen::element(DType::float32, DType::float64, DType::float16, DType::bfloat16);
}

std::vector<std::int64_t> gen_shape() {
  return *rc::gen::container<std::vector<std::int64_t>>(*rc::gen::inRange(0, 5),
                                                         rc::gen::inRange<std::int64_t>(0, 6));
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

}  // namespace
