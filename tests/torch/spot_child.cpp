// Child of the Spot resume tests (torch_test.cpp, SpotResume.*): trains a
// small MLP deterministically on CPU for STEPS steps in DIR, resuming from the
// newest checkpoint there, with std.spot_preemption, a step-cadence checkpoint
// rule and two stateful rules that fire a few times.
//
//   torch_spot_child DIR STEPS HOLD
//
// Protocol on stdout, one line each, flushed: `resumed R` (if a checkpoint was
// resumed), `fire RULE STEP LABELS VALUE` for every firing (value as %a, so
// it compares bit for bit), `step K` after every completed step, `stopped K
// REASON` when a rule stopped it, `done` after the last step (the final model
// and optimizer state are then in DIR/final.bin). After step HOLD the child
// reads standard input until EOF before going on: the parent sends its signal
// before that, so the signal always lands before the run could end.
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

namespace {

constexpr const char* kRules = R"(
rule periodic: when loss >= 0 every 25 steps cooldown 1 samples do checkpoint
rule loss_up: when loss > 1.02 * ewma(loss, 0.2) for 2 samples cooldown 10 steps do log
rule improving: when mean(loss[5]) < 0.97 * max(loss[20]) cooldown 30 steps do log
use std.spot_preemption()
)";

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 32));
    drop = register_module("drop", torch::nn::Dropout(0.2));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};

void append(std::string& out, const torch::Tensor& t) {
  const torch::Tensor c = t.detach().contiguous();
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: torch_spot_child DIR STEPS HOLD\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::int64_t steps = std::atoll(argv[2]);
  const std::int64_t hold = std::atoll(argv[3]);
  torch::set_num_threads(1);
  torch::manual_seed(7);  // the initial model; a resume overwrites it (RNG included)

  // Fixed data: 256 points of 8 features, 4 classes.
  const auto idx = torch::arange(256, torch::kFloat).unsqueeze(1);
  const auto feat = torch::arange(8, torch::kFloat).unsqueeze(0);
  const auto data_x = torch::sin(idx * 0.37 + feat * 1.3) + 0.1 * torch::cos(idx * feat * 0.05);
  const auto data_y = (torch::arange(256, torch::kLong) * 7).div(3, "floor").remainder(4);

  auto model = std::make_shared<Net>();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.01));
  auto compiled = vigil::compile_string(kRules);
  if (!compiled.program) {
    std::fprintf(stderr, "torch_spot_child: rules do not compile\n");
    return 2;
  }
  vigil::Engine engine(std::move(*compiled.program));
  vigil::torch::Monitor monitor(
      engine, *model, optimizer,
      {.checkpoint_dir = dir, .keep_last = 3, .log = [](std::string_view) {}});
  std::int64_t start = 1;
  if (const std::string latest = vigil::torch::Monitor::latest_checkpoint(dir); !latest.empty()) {
    std::string error;
    const std::int64_t r = monitor.resume(latest, &error);
    if (r < 0) {
      std::fprintf(stderr, "torch_spot_child: %s\n", error.c_str());
      return 1;
    }
    say("resumed " + std::to_string(r));
    start = r + 1;
  }
  model->train();
  for (std::int64_t step = start; step <= steps; ++step) {
    // The batch comes from the CPU generator, as does dropout: the RNG state
    // is part of what a resume must restore.
    const auto batch = torch::randperm(256, torch::kLong).slice(0, 0, 32);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(data_x.index_select(0, batch)),
                                                     data_y.index_select(0, batch));
    loss.backward();
    const auto d = monitor.after_backward(step, loss.item<double>());
    for (const auto& f : d.firings) {
      char value[64];
      std::snprintf(value, sizeof value, "%a", f.value);
      say("fire " + f.rule + " " + std::to_string(f.step) + " " +
          (f.labels.empty() ? "-" : f.labels) + " " + value);
    }
    for (const auto& e : d.errors) std::fprintf(stderr, "torch_spot_child: %s\n", e.c_str());
    if (d.stop) {
      say("stopped " + std::to_string(step) + " " + d.stop_reason);
      return 0;
    }
    if (!d.skip_step) optimizer.step();
    monitor.after_step(step);
    say("step " + std::to_string(step));
    if (step == hold) {
      char buf[64];
      while (::read(STDIN_FILENO, buf, sizeof buf) > 0) {
      }
    }
  }
  std::string state;
  for (const auto& p : model->parameters()) append(state, p);
  for (const auto& p : model->parameters()) {
    auto& s = static_cast<torch::optim::AdamParamState&>(
        *optimizer.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
    state += std::to_string(s.step()) + ";";
    append(state, s.exp_avg());
    append(state, s.exp_avg_sq());
  }
  append(state, at::detail::getDefaultCPUGenerator().get_state());
  std::ofstream(dir + "/final.bin", std::ios::binary) << state;
  say("done");
  return 0;
}
