// Tensor stats -> derived samples (see tensor_feed.hpp), single- and
// multi-process through one path: measure every tensor into a buffer, then
// emit it as is or gathered and combined. And the plan facts behind
// Engine::tensor_stats_due. Must not touch histories or rules.
#include "interp/tensor_feed.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

namespace vigil::interp {

namespace {

constexpr StatMask all_stat_bits = (StatMask{1} << stat_count) - 1;

void emit_stats(const TensorSeries& t, StatMask emit, const double* values,
                std::vector<Sample>& out) {
  for (std::size_t i = 0; i < stat_count; ++i)
    if (emit & stat_bit(static_cast<Stat>(i))) out.push_back({t.derived[i], values[i]});
}

void keep_previous(TensorSeries& t, const TensorView& v) {
  if (!t.needs_prev) return;
  t.has_prev = pack_tensor(v, t.prev);
  t.prev_dtype = v.dtype;
  t.prev_shape.assign(v.shape.begin(), v.shape.end());
}

/// Appends t's block to `block`: the stats in `wanted` (one pass; all of
/// them when gathering, since combining needs numel, sums and norms), or the
/// host's precomputed ones, then each parameterised stat if `params`; then
/// keeps the value as the previous one.
void measure(TensorSeries& t, const TensorSample& ts, StatMask wanted, bool stats_block,
             bool params, std::vector<double>& block) {
  const TensorView prev = t.previous();
  const TensorView* previous = t.has_previous() ? &prev : nullptr;
  if (stats_block) {
    const TensorStats st = ts.stats ? *ts.stats : compute_stats(ts.view, wanted, previous);
    block.insert(block.end(), std::begin(st.values), std::end(st.values));
  }
  if (params)
    for (const auto& p : t.params)
      block.push_back(
          compute_param_stat(p.stat, std::span<const double>(p.args, p.nargs), ts.view, previous));
  keep_previous(t, ts.view);
}

/// Inserts `v` into the sorted set `set`.
void insert_sorted(std::vector<std::uint32_t>& set, std::uint32_t v) {
  auto it = std::lower_bound(set.begin(), set.end(), v);
  if (it == set.end() || *it != v) set.insert(it, v);
}

}  // namespace

TensorFeed::TensorFeed(const Plan& plan)
    : selector_always_(plan.selectors.size(), 0), selector_rules_(plan.selectors.size()) {
  // The selectors each node reads, through any path. A sample of a series
  // matters beyond its own observation only through nodes that keep it:
  // ranges read the series' history (or an expression's), stateful
  // functions fold every fresh value into their state, clocks (age) read
  // when it came. Everything else (selectors, operators, elementwise calls,
  // aggregates over label sets, default) is recomputed from the latest
  // samples, so its value matters only where a rule evaluates it.
  std::vector<std::vector<std::uint32_t>> reads(plan.nodes.size());
  for (std::size_t id = 0; id < plan.nodes.size(); ++id) {
    const PlanNode& n = plan.nodes[id];
    auto& r = reads[id];
    if (n.selector != no_node) insert_sorted(r, n.selector);
    for (auto in : n.inputs)
      for (auto sel : reads[in]) insert_sorted(r, sel);
    const bool keeps = n.op == ir::Op::range_call || n.time_dependent ||
                       (n.op == ir::Op::call && n.fn && n.fn->kind == stdlib::FnKind::stateful);
    if (keeps)
      for (auto sel : r) selector_always_[sel] = 1;
  }
  for (std::uint32_t ri = 0; ri < plan.rules.size(); ++ri) {
    const auto root = plan.rules[ri].root;
    if (root == no_node) continue;
    for (auto sel : reads[root]) selector_rules_[sel].push_back(ri);
  }
}

bool TensorFeed::series_due(SeriesId id, const SeriesStore& store,
                            std::span<const std::uint8_t> rule_open) const {
  const auto& selectors = store.series[id].selectors;
  // Read by a rule but through no selector of the plan (cannot happen for a
  // derived series the rules name): needed, to be safe.
  if (selectors.empty()) return true;
  for (auto sel : selectors) {
    if (selector_always_[sel]) return true;
    for (auto rule : selector_rules_[sel])
      if (rule < rule_open.size() && rule_open[rule]) return true;
  }
  return false;
}

StatMask TensorFeed::due(const TensorSeries& t, const SeriesStore& store,
                         std::span<const std::uint8_t> rule_open) const {
  StatMask due = 0;
  for (std::size_t i = 0; i < stat_count; ++i) {
    const StatMask bit = stat_bit(static_cast<Stat>(i));
    if ((t.mask & bit) && series_due(t.derived[i], store, rule_open)) due |= bit;
  }
  for (const auto& p : t.params)
    if (series_due(p.series, store, rule_open)) {
      due |= param_stats_bit;
      break;
    }
  if (t.needs_prev) due |= keep_previous_bit;
  return due;
}

void TensorFeed::derive(std::span<const TensorSample> samples, SeriesStore& store,
                        const AllGather& allgather, EngineStats& stats, std::vector<Sample>& out) {
  // Misuse is refused before any tensor's previous value has moved on.
  for (const auto& ts : samples) {
    if (!ts.stats || ts.tensor >= store.tensors.size()) continue;
    const TensorSeries& t = store.tensors[ts.tensor];
    if (t.needs_prev || !t.params.empty())
      throw Error(fmt::format("observe: precomputed stats for tensor '{}', which {}: hand over "
                              "its view instead",
                              format_series_key(t.name, t.labels),
                              t.needs_prev ? "keeps its previous value (update stats, frac_changed)"
                                           : "has parameterised stats read"));
  }
  // Multi-process: every stat of every tensor some rule reads is gathered,
  // since combining needs them all (numel, sums, norms); every process then
  // hands over the same buffer layout whatever its `due` masks.
  const bool gathering = static_cast<bool>(allgather);
  local_.clear();
  measured_.clear();
  for (const auto& ts : samples) {
    if (ts.tensor >= store.tensors.size()) continue;  // not an id of this engine: ignored
    TensorSeries& t = store.tensors[ts.tensor];
    if (!t.used()) continue;
    const StatMask emit = t.mask & (gathering ? all_stat_bits : ts.due);
    const bool params = !t.params.empty() && (gathering || (ts.due & param_stats_bit) != 0);
    const bool stats_block = gathering || emit != 0;
    measure(t, ts, gathering ? ~StatMask{0} : emit, stats_block, params, local_);
    if (stats_block || params) measured_.push_back({ts.tensor, emit, params});
  }
  if (measured_.empty()) return;
  if (!gathering) {
    std::size_t at = 0;
    for (const Measured& m : measured_) {
      const TensorSeries& t = store.tensors[m.id];
      if (m.emit != 0) {
        emit_stats(t, m.emit, local_.data() + at, out);
        at += stat_count;
      }
      if (m.params)
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
  for (const Measured& m : measured_) {
    TensorSeries& t = store.tensors[m.id];
    for (std::size_t r = 0; r < ranks; ++r) {
      std::copy_n(all + r * len + at, stat_count, parts_[r].values);
      part_numels_[r] = parts_[r][Stat::numel];
    }
    const TensorStats whole = combine_stats(parts_, t.combined_norm);
    t.combined_norm = whole[Stat::norm];
    emit_stats(t, t.mask, whole.values, out);
    at += stat_count;
    for (const auto& p : t.params) {
      for (std::size_t r = 0; r < ranks; ++r) part_values_[r] = all[r * len + at];
      out.push_back({p.series, combine_param_stat(p.stat, part_values_, part_numels_)});
      ++at;
    }
  }
}

}  // namespace vigil::interp
