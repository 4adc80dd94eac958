// Tensor stats -> derived samples (see tensor_feed.hpp), single- and
// multi-process through one path: measure every tensor into a buffer, then
// emit it as is or gathered and combined. Must not touch histories or rules.
#include "interp/tensor_feed.hpp"

#include <algorithm>
#include <iterator>

namespace vigil::interp {

namespace {

void emit_stats(const TensorSeries& t, const double* values, std::vector<Sample>& out) {
  for (std::size_t i = 0; i < stat_count; ++i)
    if (t.mask & stat_bit(static_cast<Stat>(i))) out.push_back({t.derived[i], values[i]});
}

void keep_previous(TensorSeries& t, const TensorView& v) {
  if (!t.needs_prev) return;
  t.has_prev = pack_tensor(v, t.prev);
  t.prev_dtype = v.dtype;
  t.prev_shape.assign(v.shape.begin(), v.shape.end());
}

/// Appends t's block to `block`: all stats (if `all_stats` or some are read;
/// one pass), then each parameterised stat; then keeps the value as the
/// previous one.
void measure(TensorSeries& t, const TensorView& v, bool all_stats, std::vector<double>& block) {
  const TensorView prev = t.previous();
  const TensorView* previous = t.has_previous() ? &prev : nullptr;
  if (all_stats || t.mask != 0) {
    // Alone, a process computes only what its rules read; gathered stats
    // are combined, which needs them all (numel, sums, norms).
    const TensorStats st = compute_stats(v, all_stats ? ~StatMask{0} : t.mask, previous);
    block.insert(block.end(), std::begin(st.values), std::end(st.values));
  }
  for (const auto& p : t.params)
    block.push_back(
        compute_param_stat(p.stat, std::span<const double>(p.args, p.nargs), v, previous));
  keep_previous(t, v);
}

}  // namespace

void TensorFeed::derive(std::span<const TensorSample> samples, SeriesStore& store,
                        const AllGather& allgather, EngineStats& stats, std::vector<Sample>& out) {
  // Multi-process: every stat of every tensor some rule reads is gathered,
  // since combining needs them all (numel, sums, norms).
  const bool gathering = static_cast<bool>(allgather);
  local_.clear();
  measured_.clear();
  for (const auto& ts : samples) {
    if (ts.tensor >= store.tensors.size()) continue;  // not an id of this engine: ignored
    TensorSeries& t = store.tensors[ts.tensor];
    if (!t.used()) continue;
    measure(t, ts.view, gathering, local_);
    measured_.push_back(ts.tensor);
  }
  if (measured_.empty()) return;
  if (!gathering) {
    std::size_t at = 0;
    for (TensorId id : measured_) {
      const TensorSeries& t = store.tensors[id];
      if (t.mask != 0) {
        emit_stats(t, local_.data() + at, out);
        at += stat_count;
      }
      for (const auto& p : t.params) out.push_back({p.series, local_[at++]});
    }
    return;
  }
  const std::size_t len = local_.size();
  std::size_t ranks = 1;
  const double* all = local_.data();
  if (allgather(local_, all_) && !all_.empty() && all_.size() % len == 0) {
    ranks = all_.size() / len;
    all = all_.data();
  } else {
    ++stats.gather_failures;
  }
  parts_.resize(ranks);
  part_values_.resize(ranks);
  part_numels_.resize(ranks);
  std::size_t at = 0;
  for (TensorId id : measured_) {
    TensorSeries& t = store.tensors[id];
    for (std::size_t r = 0; r < ranks; ++r) {
      std::copy_n(all + r * len + at, stat_count, parts_[r].values);
      part_numels_[r] = parts_[r][Stat::numel];
    }
    const TensorStats whole = combine_stats(parts_, t.combined_norm);
    t.combined_norm = whole[Stat::norm];
    emit_stats(t, whole.values, out);
    at += stat_count;
    for (const auto& p : t.params) {
      for (std::size_t r = 0; r < ranks; ++r) part_values_[r] = all[r * len + at];
      out.push_back({p.series, combine_param_stat(p.stat, part_values_, part_numels_)});
      ++at;
    }
  }
}

}  // namespace vigil::interp
