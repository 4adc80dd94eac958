// MonitorOptions::stats_on_calling_thread: with the process-wide stats
// threading asking for a worker on every large tensor, a Monitor that keeps
// its stats on the calling thread starts no thread, and it hands the engine
// exactly the observations (every derived value, bit for bit) and gets
// exactly the firings of one that lets the stats pool split its gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"
#include "vigil/torch.hpp"

namespace {

std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// fc1's weight gradient is 2 M floats (8 MiB): with the threading below the
// pool would split it, and the other gradients too.
struct Wide : ::torch::nn::Module {
  Wide() {
    fc1 = register_module("fc1", ::torch::nn::Linear(1024, 2048));
    fc2 = register_module("fc2", ::torch::nn::Linear(2048, 4));
  }
  ::torch::Tensor forward(const ::torch::Tensor& x, vigil::torch::Monitor* mon) {
    auto h = ::torch::relu(fc1->forward(x));
    if (mon) mon->activation("relu1", h);
    return fc2->forward(h);
  }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct TrainRun {
  std::vector<vigil::Observation> observations;
  std::vector<vigil::torch::FiredRule> firings;
  std::size_t threads_started = 0;
};

// `monitored`: false trains the same steps without a Monitor (libtorch's
// own lazily started threads, if any, start there).
TrainRun train(bool monitored, bool on_calling_thread) {
  // Rules that fire on this model: its gradients' norms and mean absolute
  // values and its ReLU output, every step.
  const char* rules =
      "rule big_grad: when grad_norm > 1e-3 do log\n"
      "rule small_grad: when grad_abs_mean < 1 do log\n"
      "rule grad_max: when grad.abs_max > 0 do log\n"
      "use std.dead_relu(tensor = activation{layer=\"relu1\"}, threshold_layer = 1) do log\n";
  auto compiled = vigil::compile_string(rules, "threads.rules");
  if (!compiled.ok()) throw std::runtime_error(compiled.format_diagnostics());
  ::torch::manual_seed(5);
  auto net = std::make_shared<Wide>();
  ::torch::optim::SGD opt(net->parameters(), ::torch::optim::SGDOptions(0.01));
  const auto x = ::torch::randn({32, 1024});
  const auto y = ::torch::randint(0, 4, {32}, ::torch::kLong);
  vigil::Engine engine(*compiled.program);
  vigil::torch::MonitorOptions options;
  options.log = [](std::string_view) {};
  options.stats_on_calling_thread = on_calling_thread;
  vigil::torch::Monitor mon(engine, *net, opt, options);
  TrainRun run;
  mon.record([&](const vigil::Observation& o) {
    vigil::Observation kept{o.step, o.mode, 0, {}};
    for (const auto& [key, value] : o.values)  // the clocks differ from run to run
      if (key != "step_time" && key != "run_time") kept.values.emplace_back(key, value);
    std::sort(kept.values.begin(), kept.values.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    run.observations.push_back(std::move(kept));
  });
  const std::size_t before = thread_count();
  for (std::int64_t step = 1; step <= 4; ++step) {
    opt.zero_grad();
    auto loss = ::torch::nn::functional::cross_entropy(net->forward(x, monitored ? &mon : nullptr), y);
    loss.backward();
    if (monitored) {
      const auto d = mon.after_backward(step, loss.item<double>());
      run.firings.insert(run.firings.end(), d.firings.begin(), d.firings.end());
    }
    opt.step();
    if (monitored) mon.after_step(step);
  }
  run.threads_started = thread_count() - before;
  return run;
}

TEST(MonitorStatsThreads, CallingThreadOnlyStartsNoWorkerAndObservesTheSame) {
  const vigil::StatsThreading saved = vigil::stats_threading();
  vigil::set_stats_threading({2, std::size_t{1} << 16});  // a worker for every tensor >= 64 KiB
  train(false, true);  // warm-up: libtorch's threads, if it starts any
  // ctest runs each test in a process of its own, so the stats pool has not
  // started yet: a Monitor that used it would start its worker here.
  const TrainRun calling = train(true, true);
  EXPECT_EQ(calling.threads_started, 0u);
  const TrainRun pooled = train(true, false);
  vigil::set_stats_threading(saved);
  // And one that lets the pool split its gradients starts its worker (the
  // check above would pass vacuously if nothing started one).
  EXPECT_EQ(pooled.threads_started, 1u);

  ASSERT_EQ(calling.observations.size(), 4u);
  ASSERT_EQ(pooled.observations.size(), calling.observations.size());
  std::size_t grads = 0;
  for (std::size_t i = 0; i < calling.observations.size(); ++i) {
    const auto& c = calling.observations[i];
    const auto& p = pooled.observations[i];
    ASSERT_EQ(c.values.size(), p.values.size()) << "step " << c.step;
    for (std::size_t j = 0; j < c.values.size(); ++j) {
      EXPECT_EQ(c.values[j].first, p.values[j].first);
      EXPECT_TRUE(same(c.values[j].second, p.values[j].second))
          << c.values[j].first << " at step " << c.step << ": " << c.values[j].second << " vs "
          << p.values[j].second;
      grads += c.values[j].first.starts_with("grad_");
    }
  }
  EXPECT_EQ(grads, 4u * 4 * 3);  // 4 steps x 4 parameters x norm, abs_mean, abs_max
  ASSERT_EQ(calling.firings.size(), pooled.firings.size());
  EXPECT_GE(calling.firings.size(), 4u);  // firings to compare
  for (std::size_t i = 0; i < calling.firings.size(); ++i) {
    EXPECT_EQ(calling.firings[i].rule, pooled.firings[i].rule) << i;
    EXPECT_EQ(calling.firings[i].step, pooled.firings[i].step) << i;
    EXPECT_EQ(calling.firings[i].labels, pooled.firings[i].labels) << i;
    EXPECT_TRUE(same(calling.firings[i].value, pooled.firings[i].value)) << i;
  }
}

}  // namespace
