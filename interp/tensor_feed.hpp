// The tensor feed: turns the tensors a host hands to observe() into samples
// of their derived stat series (`grad_norm{...}`, `grad_frac_outside(-1,1)`),
// gathering and combining every process's stats first in multi-process jobs.
//
// Owns: its scratch buffers, and each TensorSeries' kept previous value.
// Must not touch: series histories, evaluation, rules. The stats themselves
// are computed by tensor_stats.cpp.
#pragma once

#include <span>
#include <vector>

#include "interp/series_store.hpp"

namespace vigil::interp {

class TensorFeed {
 public:
  /// Appends to `out` the derived samples of every tensor in `samples` that
  /// some rule reads (ids not of this store are ignored). With `allgather`,
  /// every process's stats are gathered and combined first; a failed gather
  /// falls back to this process's and counts in `stats.gather_failures`.
  void derive(std::span<const TensorSample> samples, SeriesStore& store, const AllGather& allgather,
              EngineStats& stats, std::vector<Sample>& out);

 private:
  // This process's stats of the tensors of one observe (a block per tensor:
  // its stat_count stats when read or gathered, then its parameterised
  // stats), every process's, and the tensors they belong to.
  std::vector<double> local_, all_;
  std::vector<TensorId> measured_;
  std::vector<TensorStats> parts_;
  std::vector<double> part_values_, part_numels_;
};

}  // namespace vigil::interp
