// One process of the two-process test in torch_test.cpp: joins a Gloo
// process group over a TCPStore on 127.0.0.1:PORT as RANK (rank 0: PORT 0,
// printed once bound), runs three steps
// of a Monitor whose engine gathers tensor stats across the group and whose
// loss is averaged, and writes every firing as `rule step value` to OUT.
// Each rank feeds different activations and losses; both must report the
// same firings with the job-wide values.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "vigil/torch.hpp"
#include "vigil/torch_distributed.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: torch_dist_worker RANK PORT OUT\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const auto port = static_cast<std::uint16_t>(std::atoi(argv[2]));
  torch::set_num_threads(1);

  // Rank 0 serves the store on a port the kernel picks (PORT 0) and tells the
  // test which, on stdout, before the process group's rendezvous: no port is
  // chosen ahead of time, so nothing else can take it in between. The group's
  // constructor waits for both ranks through the store.
  c10d::TCPStoreOptions store_opts;
  store_opts.port = port;
  store_opts.isServer = rank == 0;
  store_opts.timeout = std::chrono::seconds(120);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_opts);
  if (rank == 0) {
    std::printf("port %u\n", static_cast<unsigned>(store->getPort()));
    std::fflush(stdout);
  }
  auto pg_opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  pg_opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, pg_opts);

  auto compiled = vigil::compile_string(
      "rule act_big: when activation{layer=\"h\"}.abs_max > 5 do log\n"
      "rule act_mean: when activation{layer=\"h\"}.mean > -100 cooldown 1 samples do log\n"
      "rule loss_mean: when loss > -1 cooldown 1 samples do log\n",
      "dist.rules");
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s", compiled.format_diagnostics().c_str());
    return 1;
  }
  vigil::Engine engine(*compiled.program, {.allgather = vigil::torch::allgather(pg)});
  torch::nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  vigil::torch::MonitorOptions opts;
  opts.reduce_loss = [&](double x) { return vigil::torch::mean_across(*pg, x); };
  opts.log = [](std::string_view) {};
  vigil::torch::Monitor monitor(engine, *model, optimizer, opts);

  std::ofstream out(argv[3]);
  for (std::int64_t step = 1; step <= 3; ++step) {
    // Rank 0's activations stay small; rank 1's reach 10 at step 2.
    const double scale = rank == 0 ? 1.0 : (step == 2 ? 10.0 : 2.0);
    const auto act = rank == 0 ? torch::tensor({1.0, 2.0, 3.0}) * scale
                               : torch::tensor({1.0, -0.4}) * scale;
    monitor.activation("h", act);
    const double loss = rank == 0 ? 1.0 * step : 3.0 * step;
    const auto d = monitor.after_backward(step, loss);
    for (const auto& f : d.firings) out << f.rule << ' ' << f.step << ' ' << f.value << '\n';
  }
  out << "gather_failures " << engine.stats().gather_failures << '\n';
  return 0;
}
