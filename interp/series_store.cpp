// Interning of label sets, series, tensor series and modes (see
// series_store.hpp). Must not touch evaluation, rule state or firings.
#include "interp/series_store.hpp"

#include <algorithm>

#include "interp/program_impl.hpp"

namespace vigil::interp {

namespace {

constexpr StatMask update_stats = stat_bit(Stat::update_norm) | stat_bit(Stat::update_ratio);

}  // namespace

SeriesStore::SeriesStore(Program program, std::size_t max_label_sets)
    : program_(std::move(program)), plan_(&program_.impl().plan), max_label_sets_(max_label_sets) {
  labelsets.push_back(std::make_unique<Labels>());
  labelset_ids_.emplace(labelsets.back().get(), 0);
  members.resize(plan_->selectors.size());
  selector_stamp.resize(plan_->selectors.size(), 0);
  selector_fresh.resize(plan_->selectors.size());
}

std::size_t SeriesStore::LabelsHash::operator()(const Labels* l) const {
  std::size_t h = l->size();
  for (const auto& [k, v] : *l) {
    h = h * 1000003u ^ std::hash<std::string>{}(k);
    h = h * 1000003u ^ std::hash<std::string>{}(v);
  }
  return h;
}

std::uint32_t SeriesStore::intern_labels(const Labels& labels) { return intern_labels(Labels(labels)); }

std::uint32_t SeriesStore::intern_labels(Labels&& labels) {
  // Keyed by the stored label set itself: no second copy of its text.
  if (auto it = labelset_ids_.find(&labels); it != labelset_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(labelsets.size());
  labelsets.push_back(std::make_unique<Labels>(std::move(labels)));
  labelset_ids_.emplace(labelsets.back().get(), id);
  return id;
}

SeriesId SeriesStore::add_series(std::string key, std::string name, Labels&& parsed) {
  Series s;
  s.name = std::move(name);
  s.labels = intern_labels(std::move(parsed));  // moved in: a label value can be megabytes
  const Labels& labels = *labelsets[s.labels];
  const auto id = static_cast<SeriesId>(series.size());
  for (std::size_t i = 0; i < plan_->selectors.size(); ++i) {
    const auto& sel = plan_->selectors[i];
    if (!sel.matches(s.name, labels)) continue;
    s.need.widen(sel.retention);
    s.selectors.push_back(static_cast<std::uint32_t>(i));
    auto& m = members[i];
    auto pos = std::lower_bound(m.begin(), m.end(), s.labels,
                                [&](SeriesId a, std::uint32_t l) { return series[a].labels < l; });
    m.insert(pos, id);
  }
  s.hist.reserve(initial_capacity(s.need.count));
  if (s.name == "epoch" && labels.empty()) epoch_series = id;
  ++label_sets_per_name_[s.name];
  series.push_back(std::move(s));
  series_ids_.emplace(std::move(key), id);
  return id;
}

std::optional<SeriesId> SeriesStore::intern_rule_series(std::string_view key) {
  if (auto it = series_ids_.find(key); it != series_ids_.end()) return it->second;
  std::string name;
  Labels labels;
  if (!parse_series_key(key, name, labels)) return std::nullopt;
  std::string canonical = format_series_key(name, labels);
  if (auto it = series_ids_.find(canonical); it != series_ids_.end()) return it->second;
  return add_series(std::move(canonical), name, std::move(labels));
}

// Aliases are one simultaneous renaming (`alias a = b` + `alias b = c` reads
// trace `c` as `b`, never as `a`): the trace-side cache keeps a trace key
// from being looked up as a rule name.
std::optional<SeriesId> SeriesStore::intern_series(std::string_view key) {
  if (auto it = trace_ids_.find(key); it != trace_ids_.end()) return it->second;
  // A canonical key of a series no alias touches is its own rule-side key:
  // found without parsing, and never copied into trace_ids_ (a key can be
  // tens of megabytes; issue 11 §3).
  if (auto it = series_ids_.find(key); it != series_ids_.end() && !alias_involved(series[it->second].name))
    return it->second;
  std::string name;
  Labels labels;
  if (!parse_series_key(key, name, labels)) return std::nullopt;
  const std::string_view rule_name = program_.resolve_alias(name);  // `alias loss = train/loss`
  const bool exact = rule_name == name;
  std::string canonical = format_series_key(rule_name, labels);
  if (!alias_involved(rule_name)) {
    // No other trace series can land on this name: no owner to track.
    std::optional<SeriesId> id;
    if (auto it = series_ids_.find(canonical); it != series_ids_.end()) {
      id = it->second;
    } else {
      if (!room_for(rule_name)) {
        ++label_limit_drops;  // not cached: a flood of new keys must not grow memory
        return std::nullopt;
      }
      const bool is_canonical = canonical == key;
      id = add_series(std::move(canonical), std::move(name), std::move(labels));
      if (is_canonical) return id;  // found through series_ids_ from now on
    }
    trace_ids_.emplace(std::string(key), id);  // another spelling of the key
    return id;
  }
  std::string trace_canonical = format_series_key(name, labels);
  std::optional<SeriesId> id;
  if (auto it = series_ids_.find(canonical); it == series_ids_.end()) {
    if (!room_for(rule_name)) {
      ++label_limit_drops;  // not cached: a flood of new keys must not grow memory
      return std::nullopt;
    }
    id = add_series(canonical, std::string(rule_name), std::move(labels));
    owners_.emplace(*id, TraceOwner{std::move(trace_canonical), exact, {std::string(key)}});
  } else {
    id = it->second;
    auto [o, added] = owners_.try_emplace(*id, TraceOwner{trace_canonical, exact, {}});
    if (!added && o->second.key != trace_canonical) {
      if (exact && !o->second.exact) {
        // The series' own name takes it over from the alias that had it.
        for (const auto& k : o->second.raw_keys) trace_ids_[k] = std::nullopt;
        o->second = TraceOwner{std::move(trace_canonical), true, {}};
      } else {
        id = std::nullopt;
      }
    }
    if (id) o->second.raw_keys.emplace_back(key);
  }
  trace_ids_.emplace(std::string(key), id);
  return id;
}

bool SeriesStore::room_for(std::string_view name) const {
  if (max_label_sets_ == 0) return true;
  auto n = label_sets_per_name_.find(name);
  return n == label_sets_per_name_.end() || n->second < max_label_sets_;
}

bool SeriesStore::alias_involved(std::string_view name) const {
  // Aliases are few (a rule file's `alias` lines): a scan is cheaper than a set.
  for (const auto& [from, to] : program_.aliases())
    if (from == name || to == name) return true;
  return false;
}

std::optional<TensorId> SeriesStore::intern_tensor(std::string_view key, bool bounded) {
  if (auto it = tensor_ids_.find(key); it != tensor_ids_.end()) return it->second;
  TensorSeries t;
  if (!parse_series_key(key, t.name, t.labels)) return std::nullopt;
  // The label-set limit holds for tensor series (per tensor name) and for
  // the derived series they would create (per derived name, shared with
  // trace series of that name): a flood of new tensor keys is refused and
  // counted like one of trace keys, and costs no memory (not remembered).
  derived_.clear();
  for (std::size_t i = 0; i < stat_count; ++i) {
    const auto stat = static_cast<Stat>(i);
    std::string derived = t.name + "_" + std::string(stat_name(stat));
    const bool read = std::any_of(plan_->selectors.begin(), plan_->selectors.end(),
                                  [&](const auto& sel) { return sel.selector.name == derived; });
    if (read) derived_.push_back(std::move(derived));
  }
  for (const auto& sel : plan_->selectors) {
    ParamStatRef ref;
    if (parse_param_stat_series(sel.selector.name, ref) && ref.tensor == t.name)
      derived_.push_back(sel.selector.name);
  }
  if (bounded && max_label_sets_ != 0) {
    bool room = tensors_per_name_[t.name] < max_label_sets_;
    for (const auto& name : derived_)
      room = room && (room_for(name) || series_ids_.contains(format_series_key(name, t.labels)));
    if (!room) {
      if (tensors_per_name_[t.name] == 0) tensors_per_name_.erase(t.name);
      ++label_limit_drops;
      return std::nullopt;
    }
  }
  ++tensors_per_name_[t.name];
  for (std::size_t i = 0; i < stat_count; ++i) {
    const auto stat = static_cast<Stat>(i);
    const std::string derived = t.name + "_" + std::string(stat_name(stat));
    if (std::find(derived_.begin(), derived_.end(), derived) == derived_.end()) continue;
    t.mask |= stat_bit(stat);
    t.derived[i] = *intern_rule_series(format_series_key(derived, t.labels));
  }
  t.needs_prev = (t.mask & update_stats) != 0;
  // Parameterised stats: the selector name is the canonical derived name
  // `T_stat(a,b)`, so the request (stat and arguments) is read back from it.
  for (const auto& sel : plan_->selectors) {
    ParamStatRef ref;
    if (!parse_param_stat_series(sel.selector.name, ref) || ref.tensor != t.name) continue;
    const SeriesId sid = *intern_rule_series(format_series_key(sel.selector.name, t.labels));
    if (std::any_of(t.params.begin(), t.params.end(),
                    [&](const auto& p) { return p.series == sid; }))
      continue;  // several selectors (other matchers) read the same series
    TensorSeries::ParamRequest req;
    req.stat = ref.stat;
    req.nargs = ref.nargs;
    std::copy(ref.args, ref.args + ref.nargs, req.args);
    req.series = sid;
    t.params.push_back(req);
    t.needs_prev |= ref.stat == ParamStat::frac_changed;
  }
  const auto id = static_cast<TensorId>(tensors.size());
  tensors.push_back(std::move(t));
  tensor_ids_.emplace(std::string(key), id);
  return id;
}

std::uint16_t SeriesStore::intern_mode(std::string_view m) {
  for (std::size_t i = 0; i < modes.size(); ++i)
    if (modes[i] == m) return static_cast<std::uint16_t>(i);
  modes.emplace_back(m);
  last_step_by_mode.push_back(INT64_MIN);
  return static_cast<std::uint16_t>(modes.size() - 1);
}

}  // namespace vigil::interp
