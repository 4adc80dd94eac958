// Activation stats taken in Monitor::activation() (MonitorOptions::
// activation_stats_in_forward): the one-pass frac_zero + frac_dead_units
// kernel equals the engine's two kernels bit for bit, and a Monitor taking
// the stats in the forward pass hands the engine exactly the observations
// (every derived value) and gets exactly the firings of one that keeps the
// tensors and reads them after backward, also when the steps jump so that
// the stats taken were not the ones due.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "activation_stats.hpp"
#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"
#include "vigil/torch.hpp"

namespace {

using vigil::Stat;
using vigil::torch::MonitorOptions;

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

TEST(ActivationStatsKernel, EqualsTheEnginesFracZeroAndFracDeadUnits) {
  ::torch::manual_seed(3);
  const std::vector<std::vector<std::int64_t>> shapes = {
      {1, 5}, {2, 1}, {3, 2049}, {7, 4, 33}, {64, 3000}, {16, 12, 16, 16}, {5, 17},
      {3, 16400}, {2, 5, 8001}};  // the last two: more than one block of the kernel
  for (const auto& shape : shapes) {
    auto t = ::torch::relu(::torch::randn(shape) + 0.3).contiguous();
    float* p = t.data_ptr<float>();
    const std::int64_t n = t.numel();
    // Negative zeros, NaN and a whole dead column: the corner cases of both stats.
    for (std::int64_t i = 0; i < n; i += 7) p[i] = -0.0f;
    if (n > 3) p[3] = std::numeric_limits<float>::quiet_NaN();
    if (n > 11) p[n - 2] = std::numeric_limits<float>::infinity();
    const std::int64_t batch = shape[0], units = n / batch;
    for (std::int64_t b = 0; b < batch; ++b) p[b * units] = 0.0f;
    const vigil::TensorView view{p, vigil::DType::float32, shape, {}};
    const double frac_zero = vigil::compute_stats(view, vigil::stat_bit(Stat::frac_zero))[Stat::frac_zero];
    for (double threshold : {0.0, 1.0, 37.5, 50.0, 100.0, 150.0}) {
      std::int64_t zeros = -1, dead = -1;
      vigil::torch::detail::count_zeros_and_dead_units(p, batch, units, threshold, zeros, dead);
      const double args[] = {threshold};
      const double want = vigil::compute_param_stat(vigil::ParamStat::frac_dead_units, args, view);
      const double got = static_cast<double>(dead) / static_cast<double>(units);
      EXPECT_TRUE(same(got, want)) << "dead units, shape of " << n << " threshold " << threshold
                                   << ": " << got << " vs " << want;
      EXPECT_TRUE(same(static_cast<double>(zeros) / static_cast<double>(n), frac_zero))
          << "frac_zero of " << n << ": " << zeros << " zeros vs " << frac_zero;
    }
  }
}

// conv -> ReLU (12 x 16 x 16 = 3072 units per sample), a fully connected ReLU of 19 units (not a multiple of the
// vector width) and a tanh, batch 16.
struct Net : ::torch::nn::Module {
  Net() {
    conv = register_module("conv", ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(3, 12, 3).padding(1)));
    fc1 = register_module("fc1", ::torch::nn::Linear(12 * 8 * 8, 19));
    fc2 = register_module("fc2", ::torch::nn::Linear(19, 4));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x, vigil::torch::Monitor& mon) {
    auto h = mon.activation("relu_conv", ::torch::relu(conv->forward(x)));
    h = ::torch::max_pool2d(h, 2).flatten(1);
    h = mon.activation("relu_fc", ::torch::relu(fc1->forward(h)));
    mon.activation("tanh", ::torch::tanh(h));
    return fc2->forward(h);
  }
  ::torch::nn::Conv2d conv{nullptr};
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct TrainRun {
  std::vector<vigil::torch::FiredRule> firings;
  std::vector<vigil::Observation> observations;
  vigil::torch::MonitorStats stats;
};

// Steps with gaps (1-12, 15, 16, 30-45): at 13 and 17 the Monitor expects
// a step that does not come.
// `gather`: the engine combines tensor stats across processes (a one-process
// allgather), so the Monitor must hand the tensors over.
TrainRun train(bool in_forward, bool gather = false) {
  const std::string rules =
      "use std.dead_relu(tensor = activation{layer=~\".*relu.*\"}) do log\n"
      "rule zero_often: when activation.frac_zero > 0.45 do log\n"
      "rule dead_sampled: when activation.frac_dead_units(20) > 0.05 every 5 steps do log\n"
      "rule act_mean: when activation.mean > 0.05 every 4 steps do log\n"
      "rule outside: when activation.frac_outside(-0.5, 0.5) > 0.2 after 14 steps do log\n"
      "use std.vanishing_gradient() do log\n";
  auto compiled = vigil::compile_string(rules, "forward.rules");
  if (!compiled.ok()) throw std::runtime_error(compiled.format_diagnostics());
  ::torch::manual_seed(11);
  auto net = std::make_shared<Net>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.05));
  const auto x = ::torch::randn({16, 3, 16, 16});
  const auto y = ::torch::randint(0, 4, {16}, ::torch::kLong);
  vigil::EngineOptions engine_options;
  if (gather)
    engine_options.allgather = [](std::span<const double> local, std::vector<double>& all) {
      all.assign(local.begin(), local.end());
      return true;
    };
  vigil::Engine engine(*compiled.program, engine_options);
  MonitorOptions options;
  options.log = [](std::string_view) {};
  options.activation_stats_in_forward = in_forward;
  vigil::torch::Monitor mon(engine, *net, opt, options);
  TrainRun run;
  mon.record([&](const vigil::Observation& o) {
    vigil::Observation kept{o.step, o.mode, 0, {}};
    // The clock series differ from run to run; every other value must not.
    for (const auto& [key, value] : o.values)
      if (key != "step_time" && key != "run_time") kept.values.emplace_back(key, value);
    std::sort(kept.values.begin(), kept.values.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    run.observations.push_back(std::move(kept));
  });
  std::vector<std::int64_t> steps;
  for (std::int64_t s = 1; s <= 12; ++s) steps.push_back(s);
  steps.push_back(15);
  steps.push_back(16);
  for (std::int64_t s = 30; s <= 45; ++s) steps.push_back(s);
  for (const std::int64_t step : steps) {
    opt.zero_grad();
    auto loss = ::torch::nn::functional::cross_entropy(net->forward(x, mon), y);
    loss.backward();
    const auto d = mon.after_backward(step, loss.item<double>());
    run.firings.insert(run.firings.end(), d.firings.begin(), d.firings.end());
    if (!d.skip_step) opt.step();
    mon.after_step(step);
  }
  run.stats = mon.stats();
  return run;
}

TEST(MonitorForwardStats, SameObservationsAndFiringsAsReadingAfterBackward) {
  const TrainRun after = train(false);
  const TrainRun forward = train(true);
  EXPECT_EQ(after.stats.activations_in_forward, 0u);
  // The first step (no step expected yet) and the steps after a jump that
  // needed a stat not taken fall back to the kept tensor; most do not.
  EXPECT_GT(forward.stats.activations_in_forward, 3u * 20);
  EXPECT_EQ(forward.stats.tensors_observed, after.stats.tensors_observed);

  ASSERT_EQ(forward.observations.size(), after.observations.size());
  std::size_t derived = 0;
  for (std::size_t i = 0; i < after.observations.size(); ++i) {
    const auto& a = after.observations[i];
    const auto& f = forward.observations[i];
    EXPECT_EQ(f.step, a.step);
    ASSERT_EQ(f.values.size(), a.values.size()) << "step " << a.step;
    for (std::size_t j = 0; j < a.values.size(); ++j) {
      EXPECT_EQ(f.values[j].first, a.values[j].first) << "step " << a.step;
      EXPECT_TRUE(same(f.values[j].second, a.values[j].second))
          << a.values[j].first << " at step " << a.step << ": " << f.values[j].second << " vs "
          << a.values[j].second;
      derived += a.values[j].first.starts_with("activation_");
    }
  }
  EXPECT_GT(derived, 100u);  // the activation stats are there to compare

  ASSERT_EQ(forward.firings.size(), after.firings.size());
  EXPECT_GT(after.firings.size(), 10u);
  for (std::size_t i = 0; i < after.firings.size(); ++i) {
    EXPECT_EQ(forward.firings[i].rule, after.firings[i].rule) << i;
    EXPECT_EQ(forward.firings[i].step, after.firings[i].step) << i;
    EXPECT_EQ(forward.firings[i].labels, after.firings[i].labels) << i;
    EXPECT_TRUE(same(forward.firings[i].value, after.firings[i].value)) << i;
  }
}

// An engine with an allgather must get the activations themselves, to
// combine their stats across processes: none are taken in the forward pass.
TEST(MonitorForwardStats, AnEngineThatGathersGetsTheTensors) {
  const TrainRun gathered = train(true, true);
  EXPECT_EQ(gathered.stats.activations_in_forward, 0u);
  const TrainRun after = train(false);
  EXPECT_EQ(gathered.stats.tensors_observed, after.stats.tensors_observed);
  ASSERT_EQ(gathered.firings.size(), after.firings.size());
  for (std::size_t i = 0; i < after.firings.size(); ++i) {
    EXPECT_EQ(gathered.firings[i].rule, after.firings[i].rule) << i;
    EXPECT_EQ(gathered.firings[i].step, after.firings[i].step) << i;
  }
}

}  // namespace

// Heap allocations made by this process's operator new (the libtorch
// allocator for tensor memory is not counted: it is the model's).
namespace {
std::atomic<std::uint64_t> g_news{0};
}  // namespace
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// After warm-up (windows full, scratch vectors grown), a step of a healthy
// run allocates nothing in the Monitor: neither activation() (the stats are
// taken into reused buffers, no tensor handle is kept) nor after_backward /
// after_step (gradients read in place).
TEST(MonitorForwardStats, NoAllocationPerStepAfterWarmUp) {
  const std::string rules =
      "rule dead: when activation.frac_dead_units(1) > 2 or activation.frac_zero > 2 do log\n"
      "rule vanishing: when grad_abs_mean < 0 do log\n"
      "rule spike: when grad_norm > 1e6 * median(grad_norm[20 steps]) after 20 steps do log\n";
  auto compiled = vigil::compile_string(rules, "alloc.rules");
  ASSERT_TRUE(compiled.ok()) << compiled.format_diagnostics();
  ::torch::manual_seed(5);
  auto net = std::make_shared<Net>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.05));
  const auto x = ::torch::randn({16, 3, 16, 16});
  const auto y = ::torch::randint(0, 4, {16}, ::torch::kLong);
  vigil::Engine engine(*compiled.program);
  MonitorOptions options;
  options.log = [](std::string_view) {};
  vigil::torch::Monitor mon(engine, *net, opt, options);
  // The forward pass allocates (libtorch's autograd graph); only the
  // Monitor's calls are counted.
  std::uint64_t in_monitor = 0, first_step = 0;  // the first interns series: it allocates
  for (std::int64_t step = 1; step <= 40; ++step) {
    opt.zero_grad();
    auto h = ::torch::relu(net->conv->forward(x));
    std::uint64_t n0 = g_news.load();
    mon.activation("relu_conv", h);
    if (step > 30) in_monitor += g_news.load() - n0;
    if (step == 1) first_step += g_news.load() - n0;
    auto h2 = ::torch::relu(net->fc1->forward(::torch::max_pool2d(h, 2).flatten(1)));
    n0 = g_news.load();
    mon.activation("relu_fc", h2);
    if (step > 30) in_monitor += g_news.load() - n0;
    auto loss = ::torch::nn::functional::cross_entropy(net->fc2->forward(h2), y);
    loss.backward();
    const double value = loss.item<double>();
    n0 = g_news.load();
    const auto d = mon.after_backward(step, value);
    mon.after_step(step);
    if (step > 30) in_monitor += g_news.load() - n0;
    EXPECT_TRUE(d.firings.empty());
    opt.step();
  }
  EXPECT_EQ(mon.stats().activations_in_forward, 2u * 39);
  EXPECT_GT(first_step, 0u);  // the count sees the Monitor's allocations
  EXPECT_EQ(in_monitor, 0u);
}

}  // namespace
