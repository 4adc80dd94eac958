// torch_trainer: runs the example twice, with the same faults, without and
// with Vigil's rules, and prints a before/after summary (`make demo`).
//
//   torch_trainer [--rules FILE] [--work DIR] [--steps N] [--record FILE] [--quiet]
// Exit status: 0 if the rules brought the run back (its final loss is good
// and far below the unguarded run's), 1 if not, 2 on usage errors.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "trainer.hpp"

namespace {

std::string describe(const vigil_example::TrainResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "final held-out loss %-8.4g accuracy %5.1f%%  (%.2f s)",
                r.final_loss, 100 * r.final_accuracy, r.seconds);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  vigil_example::TrainConfig config;
  config.rules = VIGIL_TRAINER_RULES;  // the rule file next to the sources
  config.work_dir = (std::filesystem::temp_directory_path() / "vigil-torch-trainer").string();
  config.verbose = true;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "torch_trainer: %s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--rules") config.rules = value();
    else if (arg == "--work") config.work_dir = value();
    else if (arg == "--steps") config.steps = std::stoll(value());
    else if (arg == "--record") config.record_jsonl = value();
    else if (arg == "--quiet") config.verbose = false;
    else {
      std::fprintf(stderr, "usage: torch_trainer [--rules FILE] [--work DIR] [--steps N] [--record FILE] [--quiet]\n");
      return 2;
    }
  }
  std::filesystem::remove_all(config.work_dir);

  std::printf("torch_trainer: MLP on 3 spirals, %lld steps; faults: NaN batch at step %lld, lr x%g at step %lld\n",
              static_cast<long long>(config.steps), static_cast<long long>(config.nan_batch_step),
              config.lr_spike_factor, static_cast<long long>(config.lr_spike_step));
  vigil_example::TrainConfig plain = config;
  plain.rules.clear();
  plain.record_jsonl.clear();
  const auto before = vigil_example::train(plain);
  std::printf("without rules: %s\n", describe(before).c_str());
  std::printf("with rules (%s):\n", config.rules.c_str());
  const auto after = vigil_example::train(config);
  if (!after.error.empty()) {
    std::fprintf(stderr, "torch_trainer: %s\n", after.error.c_str());
    return 2;
  }
  std::printf("with rules:    %s\n", describe(after).c_str());
  std::printf("               %zu firings, %lld skipped steps, %lld rollbacks, lr %g -> %g\n",
              after.firings.size(), static_cast<long long>(after.skipped_steps),
              static_cast<long long>(after.rollbacks), 0.01, after.final_lr);
  const bool recovered = std::isfinite(after.final_loss) && after.final_loss < 0.5 &&
                         (!std::isfinite(before.final_loss) || before.final_loss > 2 * after.final_loss);
  std::printf("torch_trainer: %s\n", recovered ? "PASS (the rules kept the run alive)"
                                               : "FAIL (the rules did not bring the run back)");
  return recovered ? 0 : 1;
}
