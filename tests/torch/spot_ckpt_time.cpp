// Measures how long a Monitor checkpoint takes (docs/spot.md: what fits in a
// two-minute preemption notice). Not a test: run by hand.
//
//   torch_spot_ckpt_time DIR MILLIONS_OF_PARAMS...
//
// For each size: an MLP of 1024- or 4096-wide square layers with that many
// parameters, Adam after one step (so its state doubles the bytes), then
// three checkpoints (write to DIR, fsync, rename) and one resume, timed.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "vigil/engine.hpp"
#include "vigil/torch.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: torch_spot_ckpt_time DIR MILLIONS...\n");
    return 2;
  }
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  for (int i = 2; i < argc; ++i) {
    const double millions = std::atof(argv[i]);
    const std::int64_t width = millions >= 50 ? 4096 : 1024;
    const auto layers = static_cast<int>(millions * 1e6 / static_cast<double>(width * width) + 0.5);
    torch::nn::Sequential model;
    for (int l = 0; l < layers; ++l) model->push_back(torch::nn::Linear(width, width));
    std::int64_t params = 0;
    for (const auto& p : model->parameters()) params += p.numel();
    torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-4));
    opt.zero_grad();
    model->forward(torch::ones({2, width})).sum().backward();
    opt.step();
    const std::string dir = std::string(argv[1]) + "/m" + std::to_string(params);
    vigil::Engine engine(*vigil::compile_string("use std.spot_preemption()\n").program);
    vigil::torch::Monitor monitor(engine, *model, opt, {.checkpoint_dir = dir, .keep_last = 1});
    double best = 1e30;
    std::uintmax_t bytes = 0;
    for (int rep = 1; rep <= 3; ++rep) {
      const auto t0 = clock::now();
      const std::string path = monitor.checkpoint(rep);
      const auto t1 = clock::now();
      if (path.empty()) return 1;
      best = std::min(best, seconds(t0, t1));
      bytes = std::filesystem::file_size(path);
    }
    const auto t0 = clock::now();
    std::string error;
    if (monitor.resume(vigil::torch::Monitor::latest_checkpoint(dir), &error) < 0) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    const auto t1 = clock::now();
    std::printf(
        "%.1fM params (%d x %ldx%ld): checkpoint %.0f MB in %.2f s (best of 3), resume %.2f s\n",
        static_cast<double>(params) / 1e6, layers, static_cast<long>(width),
        static_cast<long>(width), static_cast<double>(bytes) / 1e6, best, seconds(t0, t1));
    std::filesystem::remove_all(dir);
  }
  return 0;
}
