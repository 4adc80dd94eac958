// Multi-process training with the libtorch adapter (SPEC §4): the helpers
// that make every process of a data-parallel job evaluate the same values,
// over the job's own c10d process group (Gloo on CPU; NCCL where present).
//
//   auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
//   vigil::Engine engine(program, {.allgather = vigil::torch::allgather(pg)});
//   vigil::torch::Monitor monitor(engine, *model, optimizer,
//       {.reduce_loss = [&](double x) { return vigil::torch::mean_across(*pg, x); }});
//
// Tensor stats are gathered and combined by the engine (EngineOptions::
// allgather); the loss, which each process computes on its own shard, is
// averaged by the Monitor (MonitorOptions::reduce_loss). Both are collective
// calls: every process must make them, in the same order, which the Monitor
// does when every process runs the same rules over the same model.
//
// Only this header pulls in c10d; include it where the process group is made.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "vigil/engine.hpp"

namespace vigil::torch {

/// An EngineOptions::allgather over `group`: one all-gather of a float64
/// tensor per call. A failure of the collective (a process group error, a
/// length that differs between processes) returns false, never throws.
AllGather allgather(c10::intrusive_ptr<c10d::ProcessGroup> group);

/// The mean of `x` over the group's processes (an all-reduce). NaN if the
/// collective fails.
double mean_across(c10d::ProcessGroup& group, double x);

}  // namespace vigil::torch
