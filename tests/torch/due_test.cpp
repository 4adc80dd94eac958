// The Monitor collects a tensor only when some rule needs it
// (Engine::tensor_stats_due), and its device path (batched_stats) gives the
// CPU kernels' stats. libtorch here is CPU-only: the device path is forced
// onto CPU tensors (MonitorOptions::DeviceStats::always).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

namespace {

using vigil::Stat;
using vigil::torch::MonitorOptions;

vigil::Program compile(const std::string& text) {
  auto r = vigil::compile_string(text, "due.rules");
  if (!r.ok()) throw std::runtime_error(r.format_diagnostics());
  return *r.program;
}

struct Net : ::torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", ::torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", ::torch::nn::Linear(16, 3));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x, vigil::torch::Monitor* mon) {
    auto h = ::torch::relu(fc1->forward(x));
    if (mon) mon->activation("relu1", h);
    return fc2->forward(h);
  }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct Fired {
  std::string rule;
  std::int64_t step;
  std::string labels;
  double value;
};

struct TrainRun {
  std::vector<Fired> firings;
  vigil::torch::MonitorStats stats;
  double final_loss = 0;
};

// 100 steps of SGD on a fixed random problem, the Monitor watching.
TrainRun train(const std::string& rules, MonitorOptions options) {
  ::torch::manual_seed(7);
  auto net = std::make_shared<Net>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.05));
  const auto x = ::torch::randn({64, 8});
  const auto y = ::torch::randint(0, 3, {64}, ::torch::kLong);
  vigil::Engine engine(compile(rules));
  options.log = [](std::string_view) {};
  vigil::torch::Monitor mon(engine, *net, opt, options);
  TrainRun run;
  for (std::int64_t step = 1; step <= 100; ++step) {
    opt.zero_grad();
    auto loss = ::torch::nn::functional::cross_entropy(net->forward(x, &mon), y);
    loss.backward();
    const auto d = mon.after_backward(step, loss.item<double>());
    for (const auto& f : d.firings) run.firings.push_back({f.rule, f.step, f.labels, f.value});
    if (!d.skip_step) opt.step();
    mon.after_step(step);
    run.final_loss = loss.item<double>();
  }
  run.stats = mon.stats();
  return run;
}

bool close(double a, double b, double rel) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= rel * std::max({std::abs(a), std::abs(b), 1e-300}) ||
         std::abs(a - b) <= 1e-12;
}

// Same rules, steps, labels; values equal (rel = 0) or within `rel`.
void expect_same_firings(const std::vector<Fired>& a, const std::vector<Fired>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].rule, b[i].rule) << i;
    EXPECT_EQ(a[i].step, b[i].step) << i;
    EXPECT_EQ(a[i].labels, b[i].labels) << i;
    if (rel == 0)
      EXPECT_TRUE(a[i].value == b[i].value || (std::isnan(a[i].value) && std::isnan(b[i].value)))
          << a[i].rule << "@" << a[i].step << ": " << a[i].value << " vs " << b[i].value;
    else
      EXPECT_TRUE(close(a[i].value, b[i].value, rel))
          << a[i].rule << "@" << a[i].step << ": " << a[i].value << " vs " << b[i].value;
  }
}

// 4 parameters (fc1/fc2 weight and bias): a rule `every 10 steps` on
// grad_norm has the Monitor hand over 4 gradients on 10 of the 100 steps.
TEST(MonitorDue, EveryTenStepsCollectsOneStepInTen) {
  const std::string rules =
      "rule sparse: when grad_norm > 0.05 every 10 steps cooldown 10 steps do log\n";
  MonitorOptions every_step;
  every_step.only_due_tensors = false;
  const TrainRun all = train(rules, every_step);
  const TrainRun due = train(rules, {});
  EXPECT_EQ(all.stats.tensors_observed, 4u * 100);
  EXPECT_EQ(due.stats.tensors_observed, 4u * 10);
  EXPECT_FALSE(due.firings.empty());
  expect_same_firings(all.firings, due.firings, 0);
  EXPECT_EQ(all.final_loss, due.final_loss);
}

// The recommended kind of rule set: windows and a stateful function keep
// every step's stats due, the every-N and eval-only rules do not add any.
TEST(MonitorDue, MixedRulesGiveTheFiringsOfCollectingEveryStep) {
  const std::string rules =
      "rule spike: when grad_norm > 1.2 * median(grad_norm[5 steps]) do log\n"
      "rule sparse: when grad_abs_max{layer=~\"fc2.*\"} > 0.01 every 7 steps cooldown 7 steps do log\n"
      "rule dead: when activation.frac_dead_units(1) > 0.3 every 5 steps cooldown 5 steps do log\n"
      "rule moved: when weight_update_ratio > 0.001 every 9 steps cooldown 9 steps do log\n"
      "rule val: when weight_norm > 0 in eval do log\n";
  MonitorOptions every_step;
  every_step.only_due_tensors = false;
  const TrainRun all = train(rules, every_step);
  const TrainRun due = train(rules, {});
  EXPECT_LT(due.stats.tensors_observed, all.stats.tensors_observed);
  EXPECT_GT(due.firings.size(), 3u);
  expect_same_firings(all.firings, due.firings, 0);
}

// A model with more parameter tensors than EngineOptions::max_label_sets
// allows: the ones past the limit are not watched (one log line, counted in
// label_limit_drops), the others are, and nothing crashes.
TEST(MonitorLimits, ParametersPastTheLabelSetLimitAreNotWatched) {
  ::torch::manual_seed(7);
  auto net = std::make_shared<Net>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.05));
  vigil::EngineOptions limits;
  limits.max_label_sets = 2;
  vigil::Engine engine(compile("rule g: when grad_norm > 0 do log\n"), limits);
  MonitorOptions options;
  std::vector<std::string> logged;
  options.log = [&](std::string_view msg) { logged.emplace_back(msg); };
  vigil::torch::Monitor mon(engine, *net, opt, options);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("2 parameter tensors are not watched"), std::string::npos) << logged[0];
  EXPECT_GT(engine.stats().label_limit_drops, 0u);
  const auto x = ::torch::randn({16, 8});
  const auto y = ::torch::randint(0, 3, {16}, ::torch::kLong);
  opt.zero_grad();
  auto loss = ::torch::nn::functional::cross_entropy(net->forward(x, &mon), y);
  loss.backward();
  const auto d = mon.after_backward(1, loss.item<double>());
  std::vector<std::string> layers;
  for (const auto& f : d.firings) layers.push_back(f.labels);
  std::sort(layers.begin(), layers.end());
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_NE(layers[0].find("fc1.bias"), std::string::npos) << layers[0];
  EXPECT_NE(layers[1].find("fc1.weight"), std::string::npos) << layers[1];
}

vigil::TensorStats cpu_stats(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  vigil::DType dtype = vigil::DType::float32;
  switch (c.scalar_type()) {
    case at::kDouble: dtype = vigil::DType::float64; break;
    case at::kHalf: dtype = vigil::DType::float16; break;
    case at::kBFloat16: dtype = vigil::DType::bfloat16; break;
    default: break;
  }
  const vigil::TensorView view{c.data_ptr(), dtype, {c.sizes().data(), c.sizes().size()}, {}};
  return vigil::compute_stats(view);
}

// The device path against the fused CPU stats, on every dtype the core
// reads, strided views, NaN, Inf, constant, empty and one-element tensors.
// Tolerance: 1e-9 relative (both accumulate in double, in different orders).
TEST(BatchedStats, EqualTheFusedCpuStats) {
  ::torch::manual_seed(3);
  std::vector<at::Tensor> ts;
  ts.push_back(::torch::randn({300, 70}));
  ts.push_back(::torch::randn({50, 40}, ::torch::kDouble).t());  // strided
  ts.push_back(::torch::randn({1000}).to(::torch::kHalf));
  ts.push_back(::torch::randn({513}).to(::torch::kBFloat16));
  auto with_nan = ::torch::randn({100});
  with_nan[17] = std::numeric_limits<float>::quiet_NaN();
  ts.push_back(with_nan);
  auto with_inf = ::torch::randn({100});
  with_inf[3] = std::numeric_limits<float>::infinity();
  with_inf[4] = -std::numeric_limits<float>::infinity();
  ts.push_back(with_inf);
  ts.push_back(::torch::full({64}, 0.1f));  // constant: variance exactly 0
  ts.push_back(::torch::empty({0}));
  ts.push_back(::torch::tensor({-2.5f}));
  ts.push_back(::torch::relu(::torch::randn({40, 30})));  // many zeros
  std::size_t bytes = 0;
  const auto got = vigil::torch::batched_stats(ts, ~vigil::StatMask{0}, &bytes);
  ASSERT_EQ(got.size(), ts.size());
  // 13 accumulators for the 9 non-empty tensors, one transfer.
  EXPECT_EQ(bytes, 13u * 9 * sizeof(double));
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const auto want = cpu_stats(ts[i]);
    for (std::size_t s = 0; s < static_cast<std::size_t>(Stat::update_norm); ++s)
      EXPECT_TRUE(close(got[i].values[s], want.values[s], 1e-9))
          << "tensor " << i << " " << vigil::stat_name(static_cast<Stat>(s)) << ": "
          << got[i].values[s] << " vs " << want.values[s];
    EXPECT_EQ(got[i][Stat::var] == 0, want[Stat::var] == 0) << i;
  }
  // Only what is wanted: the norm alone is one accumulator per tensor.
  const auto norm = vigil::torch::batched_stats(ts, vigil::stat_bit(Stat::norm), &bytes);
  EXPECT_EQ(bytes, 1u * 9 * sizeof(double));
  EXPECT_TRUE(close(norm[0][Stat::norm], got[0][Stat::norm], 0));
  EXPECT_TRUE(std::isnan(norm[0][Stat::sum]));
  EXPECT_EQ(norm[0][Stat::numel], 300.0 * 70);
}

// The Monitor on the device path gives the CPU path's firings (values within
// the tolerance above) and moves one small vector per step: 13 doubles per
// gradient; weights read through update_ratio stay on the engine's path.
TEST(BatchedStats, MonitorDevicePathGivesTheCpuPathsFirings) {
  const std::string rules =
      "rule big: when grad_norm > 0.05 cooldown 5 steps do log\n"
      "rule sparse: when grad_frac_zero > 0.1 cooldown 5 steps do log\n"
      "rule std: when grad_std > 0.005 cooldown 5 steps do log\n"
      "rule moved: when weight_update_ratio > 0.001 cooldown 9 steps do log\n";
  MonitorOptions cpu;
  cpu.device_stats = MonitorOptions::DeviceStats::never;
  MonitorOptions device;
  device.device_stats = MonitorOptions::DeviceStats::always;
  const TrainRun a = train(rules, cpu);
  const TrainRun b = train(rules, device);
  EXPECT_GT(a.firings.size(), 10u);
  expect_same_firings(a.firings, b.firings, 1e-9);
  EXPECT_EQ(a.stats.tensors_reduced_on_device, 0u);
  EXPECT_EQ(b.stats.tensors_reduced_on_device, 4u * 100);  // the gradients
  EXPECT_EQ(b.stats.device_batches, 100u);
  EXPECT_EQ(b.stats.device_bytes, 100u * 4 * 13 * sizeof(double));
  EXPECT_EQ(b.stats.tensors_observed, a.stats.tensors_observed);
}

}  // namespace
