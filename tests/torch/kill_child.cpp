// Child of the kill test (torch_test.cpp): checkpoints forever into DIR until
// SIGKILLed, saying `checkpointed` on stdout after its first checkpoint. The state at step S is a pure function of S, so the parent can
// check any checkpoint bit for bit: every parameter element i is
// S * 0.001f + i, the Adam state comes from one real step on that model, the
// CPU RNG is seeded with S, and host_state()["step"] is S.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

namespace {

void fill_for_step(torch::nn::Module& model, std::int64_t step) {
  torch::NoGradGuard no_grad;
  float base = static_cast<float>(step) * 0.001f;
  for (auto& p : model.parameters()) {
    auto flat = p.view({-1});
    for (std::int64_t i = 0; i < flat.numel(); ++i) flat[i] = base + static_cast<float>(i);
    base += 0.5f;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: torch_kill_child DIR\n");
    return 2;
  }
  torch::set_num_threads(1);
  torch::nn::Linear model(16, 16);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(0.001));
  auto compiled = vigil::compile_string("rule never: when loss > 1e30 do skip_step\n");
  vigil::Engine engine(std::move(*compiled.program));
  vigil::torch::Monitor monitor(engine, *model, optimizer,
                                {.checkpoint_dir = argv[1], .keep_last = 3});
  std::int64_t step = 1;
  const std::string latest = vigil::torch::Monitor::latest_checkpoint(argv[1]);
  if (!latest.empty()) {
    std::string error;
    const std::int64_t s = monitor.resume(latest, &error);
    if (s < 0) {
      std::fprintf(stderr, "torch_kill_child: %s\n", error.c_str());
      return 1;
    }
    step = s + 1;
  }
  bool announced = false;
  for (;; ++step) {
    fill_for_step(*model, step);
    optimizer.zero_grad();
    auto loss = model->forward(torch::ones({4, 16})).sum();
    loss.backward();
    monitor.after_backward(step, loss.item<double>());
    optimizer.step();
    fill_for_step(*model, step);
    torch::manual_seed(static_cast<std::uint64_t>(step));
    monitor.host_state()["step"] = step;
    std::string error;
    if (monitor.checkpoint(step, &error).empty()) {
      std::fprintf(stderr, "torch_kill_child: %s\n", error.c_str());
      return 1;
    }
    if (!announced) {
      // The parent starts its kill clock only now: every kill lands after a
      // checkpoint exists, however slowly this process started.
      std::fputs("checkpointed\n", stdout);
      std::fflush(stdout);
      announced = true;
    }
  }
}
