// The example trainer: a 2-64-64-3 MLP on three interleaved spirals, Adam,
// with two faults injected on purpose. See README.md for what the rules do.
#include "trainer.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <numbers>
#include <random>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"
#include "vigil/torch.hpp"
#include "vigil/trace.hpp"

namespace vigil_example {
namespace {

constexpr std::int64_t kBatch = 128;
constexpr int kClasses = 3;

struct Dataset {
  torch::Tensor x, y;  // [n, 2] float, [n] int64
};

// Three spiral arms with noise, shuffled. std::mt19937's output is fixed by
// the standard (its distributions are not), so the data are the same on
// every platform: uniforms and Box-Muller are done by hand.
Dataset make_spirals(std::int64_t per_class, std::uint32_t seed) {
  std::mt19937 gen(seed);
  auto uniform = [&] { return (static_cast<double>(gen()) + 0.5) / 4294967296.0; };
  auto normal = [&] {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2 * std::numbers::pi * uniform());
  };
  const std::int64_t n = per_class * kClasses;
  std::vector<float> xs(static_cast<std::size_t>(2 * n));
  std::vector<std::int64_t> ys(static_cast<std::size_t>(n));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = n - 1; i > 0; --i)  // Fisher-Yates with the same generator
    std::swap(order[static_cast<std::size_t>(i)], order[gen() % static_cast<std::uint32_t>(i + 1)]);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t c = i / per_class;
    const double t = static_cast<double>(i % per_class) / static_cast<double>(per_class);
    const double r = 0.1 + 0.9 * t;
    const double a = 4.0 * t + 2.0 * std::numbers::pi * static_cast<double>(c) / kClasses + 0.2 * normal();
    const auto at = static_cast<std::size_t>(order[static_cast<std::size_t>(i)]);
    xs[2 * at] = static_cast<float>(r * std::cos(a));
    xs[2 * at + 1] = static_cast<float>(r * std::sin(a));
    ys[at] = c;
  }
  return {torch::from_blob(xs.data(), {n, 2}, torch::kFloat).clone(),
          torch::from_blob(ys.data(), {n}, torch::kInt64).clone()};
}

struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{2, 64}, fc2{64, 64}, fc3{64, kClasses};
  vigil::torch::Monitor* monitor = nullptr;  // activations go to it while training

  NetImpl() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x));
    if (monitor) monitor->activation("fc1", x);
    x = torch::relu(fc2(x));
    if (monitor) monitor->activation("fc2", x);
    return fc3(x);
  }
};
TORCH_MODULE(Net);

// Batch `position` (1-based) of the endless pass over the shuffled training set.
std::pair<torch::Tensor, torch::Tensor> batch_at(const Dataset& d, std::int64_t position) {
  const std::int64_t n = d.x.size(0);
  const std::int64_t start = ((position - 1) * kBatch) % (n - kBatch + 1);
  return {d.x.narrow(0, start, kBatch), d.y.narrow(0, start, kBatch)};
}

}  // namespace

TrainResult train(const TrainConfig& config) {
  TrainResult result;
  const auto t0 = std::chrono::steady_clock::now();
  // One intra-op thread: deterministic reductions (resume and replay tests
  // compare firings exactly) and polite on a shared machine.
  torch::set_num_threads(1);
  torch::manual_seed(1);
  const Dataset train_set = make_spirals(1000, 7);
  const Dataset test_set = make_spirals(300, 8);
  Net net;
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(0.01));

  std::unique_ptr<vigil::Engine> engine;
  std::unique_ptr<vigil::torch::Monitor> monitor;
  std::unique_ptr<vigil::JsonlWriter> writer;
  if (!config.rules.empty()) {
    auto compiled = vigil::compile_file(config.rules);
    if (!compiled.ok()) {
      result.error = compiled.format_diagnostics();
      return result;
    }
    engine = std::make_unique<vigil::Engine>(std::move(*compiled.program));
    vigil::torch::MonitorOptions options;
    options.checkpoint_dir = config.work_dir;
    options.checkpoint_every = config.checkpoint_every;
    options.log = [&config](std::string_view msg) {
      if (config.verbose) std::cout << "  " << msg << '\n';
    };
    monitor = std::make_unique<vigil::torch::Monitor>(*engine, *net, optimizer, options);
    net->monitor = monitor.get();
    if (!config.record_jsonl.empty()) {
      vigil::TraceError error;
      writer = vigil::JsonlWriter::create(config.record_jsonl, error, /*append=*/config.resume);
      if (!writer) {
        result.error = error.format();
        return result;
      }
      monitor->record([w = writer.get()](const vigil::Observation& o) { w->write(o); });
    }
  }

  // The data position: the next batch to train on. It is host state, so a
  // rollback rewinds it with the model while the global step keeps counting.
  std::int64_t local_position = 1;
  auto position = [&]() -> std::int64_t& {
    return monitor ? monitor->host_state()["position"] : local_position;
  };
  position() = 1;
  std::int64_t first = 1;
  if (config.resume) {
    std::string error;
    const std::string path = vigil::torch::Monitor::latest_checkpoint(config.work_dir);
    const std::int64_t s = monitor && !path.empty() ? monitor->resume(path, &error) : -1;
    if (s < 0) {
      result.error = path.empty() ? "no checkpoint to resume from" : error;
      return result;
    }
    first = s + 1;
  }

  result.min_lr = vigil::torch::learning_rate(optimizer);
  for (std::int64_t step = first; step <= config.steps; ++step) {
    result.last_step = step;
    if (step == config.lr_spike_step)
      vigil::torch::set_learning_rate(optimizer, vigil::torch::learning_rate(optimizer) * config.lr_spike_factor);
    auto [x, y] = batch_at(train_set, position());
    if (step == config.nan_batch_step) {
      x = x.clone();
      x[0][0] = std::numeric_limits<float>::quiet_NaN();
    }
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    bool skip = false;
    if (monitor) {
      auto d = monitor->after_backward(step, loss.item<double>());
      for (auto& f : d.firings) result.firings.push_back({f.rule, f.step, f.labels, f.value});
      skip = d.skip_step;
      result.rollbacks += d.rolled_back;
      if (d.stop) {
        result.stopped = true;
        result.stop_reason = d.stop_reason;
        break;
      }
      // After a rollback the position is the checkpoint's; the batch is not consumed.
      if (d.rolled_back) skip = true;
    }
    if (skip) {
      ++result.skipped_steps;
    } else {
      optimizer.step();
      ++position();
    }
    result.min_lr = std::min(result.min_lr, vigil::torch::learning_rate(optimizer));
    if (monitor) {
      monitor->after_step(step);
      if (step == config.stop_after) {
        monitor->checkpoint(step);
        break;
      }
    }
  }

  net->monitor = nullptr;
  {
    torch::NoGradGuard no_grad;
    auto out = net->forward(test_set.x);
    result.final_loss = torch::nn::functional::cross_entropy(out, test_set.y).item<double>();
    result.final_accuracy = out.argmax(1).eq(test_set.y).to(torch::kDouble).mean().item<double>();
  }
  result.final_lr = vigil::torch::learning_rate(optimizer);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace vigil_example
