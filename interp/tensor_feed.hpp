// The tensor feed: turns the tensors a host hands to observe() into samples
// of their derived stat series (`grad_norm{...}`, `grad_frac_outside(-1,1)`),
// gathering and combining every process's stats first in multi-process jobs,
// and tells the host which tensors the next observation needs
// (Engine::tensor_stats_due).
//
// Owns: its scratch buffers, each TensorSeries' kept previous value, and the
// plan facts that decide when a derived series' sample matters. Must not
// touch: series histories, evaluation, rules. The stats themselves are
// computed by tensor_stats.cpp; whether a rule's gates are open, by
// rule_state.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "interp/plan.hpp"
#include "interp/series_store.hpp"

namespace vigil::interp {

class TensorFeed {
 public:
  /// Reads once which plan selectors feed state that outlives an observation
  /// (windows, stateful functions, ranges over expressions, clocks) and which
  /// rules read each selector through stateless nodes only.
  explicit TensorFeed(const Plan& plan);

  /// Appends to `out` the derived samples of every tensor in `samples` that
  /// some rule reads (ids not of this store are ignored): the stats in the
  /// sample's `due` mask, from its `stats` if given, else from its view. With
  /// `allgather`, every stat of every read tensor is gathered and combined
  /// first (`due` is ignored); a failed gather falls back to this process's
  /// and counts in `stats.gather_failures`. Throws vigil::Error, before
  /// anything changed, for precomputed stats of a tensor that keeps its
  /// previous value or has parameterised stats read.
  void derive(std::span<const TensorSample> samples, SeriesStore& store, const AllGather& allgather,
              EngineStats& stats, std::vector<Sample>& out);

  /// The stats of `t` that an observation needs, given which rules may
  /// evaluate at it (`rule_open`, parallel to the plan's rules): a stat whose
  /// derived series feeds state that outlives an observation is always
  /// needed; any other only when some rule reading it may evaluate. Plus
  /// param_stats_bit if one of its parameterised stats is needed, and
  /// keep_previous_bit whenever it keeps a previous value (update stats,
  /// frac_changed must compare with the previous observation's value).
  [[nodiscard]] StatMask due(const TensorSeries& t, const SeriesStore& store,
                             std::span<const std::uint8_t> rule_open) const;

 private:
  [[nodiscard]] bool series_due(SeriesId id, const SeriesStore& store,
                                std::span<const std::uint8_t> rule_open) const;

  // Per plan selector: its samples matter at every observation, and the
  // rules that read it otherwise.
  std::vector<std::uint8_t> selector_always_;
  std::vector<std::vector<std::uint32_t>> selector_rules_;

  // One handed-over tensor of an observe: what was measured into the buffer.
  struct Measured {
    TensorId id = 0;
    StatMask emit = 0;    // stats emitted (a block of stat_count when nonzero or gathering)
    bool params = false;  // its parameterised stats follow
  };
  // This process's stats of the tensors of one observe (a block per tensor:
  // its stat_count stats when read or gathered, then its parameterised
  // stats), every process's, and the tensors they belong to.
  std::vector<double> local_, all_;
  std::vector<Measured> measured_;
  std::vector<TensorStats> parts_;
  std::vector<double> part_values_, part_numels_;
};

}  // namespace vigil::interp
