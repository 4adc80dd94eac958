// The engine's composition (engine_impl.hpp), observe(), and the public
// facade (include/vigil/engine.hpp). observe() is the only place that knows
// the order of the stages: feed tensors, ingest samples into the series
// store, evaluate the plan, advance the rule state machines, build firings,
// dispatch actions. Each stage lives in its own file; this one must not grow
// their logic back.
//
// Allocation: columns, ring buffers and per-label state grow while new series
// and labels appear (warm-up); once every series has been seen and windows
// are full, observe() does not allocate.
#include <algorithm>
#include <cmath>

#include "interp/engine_impl.hpp"
#include "interp/program_impl.hpp"

namespace vigil {

CompileResult recompile_with(const Program& program, const std::map<std::string, Value>& params);

void Engine::Impl::ingest(const Sample& smp) {
  auto& store = state.store;
  if (smp.series >= store.series.size()) return;  // not an id of this engine: ignored
  interp::Series& s = store.series[smp.series];
  auto& h = s.hist;
  if (s.stamp == state.obs && h.size > 0) {  // same series twice in one observation: last wins
    std::size_t p = h.newest();
    h.value[p] = h.value[p + h.cap] = smp.value;
    return;
  }
  interp::push(h, s.need, smp.value, state.clock);
  s.stamp = state.obs;
  for (const auto sel : s.selectors) {
    if (store.selector_stamp[sel] != state.obs) {
      store.selector_stamp[sel] = state.obs;
      store.selector_fresh[sel].clear();
    }
    store.selector_fresh[sel].push_back(smp.series);
  }
  if (store.epoch_series && *store.epoch_series == smp.series) state.epoch = smp.value;
}

void Engine::Impl::evaluate_rules() {
  const auto& store = state.store;
  // Room for every rule to fire for every element of its condition at once,
  // so the observation where everything goes wrong does not allocate (and a
  // rule over `loss` does not reserve for the label sets of other series).
  // Grown geometrically: reserving exactly `room` when one new label set
  // arrives per observation copied every firing slot each time (quadratic).
  std::size_t room = 0, widest = 0;
  for (const auto& pr : plan->rules) {
    const std::size_t n = state.exec.column(pr.root).values.size();
    room += n;
    widest = std::max(widest, n);
  }
  if (firings.capacity() < room) firings.reserve(std::max(room, 2 * firings.capacity()));
  if (hits.capacity() < widest) hits.reserve(std::max(widest, 2 * hits.capacity()));
  const interp::RuleClock clock{state.obs,        state.clock.step, state.clock.time,
                                state.first_time, state.epoch,      store.modes[state.clock.mode]};
  for (std::size_t ri = 0; ri < plan->rules.size(); ++ri) {
    const auto& pr = plan->rules[ri];
    hits.clear();
    interp::advance_rule(pr, state.rules[ri], state.exec.column(pr.root), clock, hits,
                         fresh_elements);
    if (hits.empty()) continue;
    const RuleInfo& info = program.rules()[ri];
    const std::size_t first_firing = firings.size();
    for (const auto& hit : hits) {
      Firing f;
      f.rule = &info;
      f.step = clock.step;
      f.mode = clock.mode;
      f.time = clock.time;
      f.severity = pr.rule.info.severity;
      f.labels = store.labelsets[hit.label].get();
      f.value = interp::firing_value(pr, state.exec, hit.label);
      f.pending_since = hit.pending_since;
      f.escalation = hit.escalation;
      f.actions =
          hit.escalation == 0 ? &info.actions : &info.escalations[hit.escalation - 1].actions;
      firings.push_back(f);
    }
    // Columns are ordered by label id (first-seen order); report a rule's
    // series in label order so output does not depend on arrival order.
    std::sort(firings.begin() + static_cast<std::ptrdiff_t>(first_firing), firings.end(),
              [](const Firing& a, const Firing& b) { return *a.labels < *b.labels; });
  }
}

std::span<const Firing> Engine::Impl::observe(std::int64_t st, std::span<const Sample> samples,
                                              const ObserveOptions& o) {
  if (dispatching) throw Error("observe() called from an action callback");
  check_bindings();
  firings.clear();
  auto& store = state.store;
  auto& clock = state.clock;
  const std::uint16_t m = store.intern_mode(o.mode);
  if (st < store.last_step_by_mode[m]) {
    ++state.stats.out_of_order;
    return {};
  }
  store.last_step_by_mode[m] = st;
  clock.low_step = st;
  for (auto last : store.last_step_by_mode)
    if (last != INT64_MIN) clock.low_step = std::min(clock.low_step, last);
  if (!std::isnan(o.time)) clock.last_time = o.time;
  ++state.obs;
  ++state.stats.observations;
  clock.step = st;
  clock.mode = m;
  clock.time = o.time;
  if (std::isnan(state.first_time) && !std::isnan(clock.time)) state.first_time = clock.time;
  for (const auto& s : samples) ingest(s);
  if (recorder) record(samples);
  state.exec.evaluate(store, {state.obs, clock});
  evaluate_rules();
  state.stats.firings += firings.size();
  dispatch();
  return firings;
}

void Engine::Impl::record(std::span<const Sample> samples) {
  const auto& store = state.store;
  recorded.step = state.clock.step;
  recorded.mode = store.modes[state.clock.mode];
  recorded.time = state.clock.time;
  recorded.values.clear();
  for (const auto& s : samples) {
    if (s.series >= store.series.size()) continue;
    recorded.values.emplace_back(store.key(s.series), s.value);
  }
  recorder(recorded);
}

// ---- facade --------------------------------------------------------------------

Engine::Engine(Program program, EngineOptions options) {
  if (!options.params.empty()) {
    auto result = recompile_with(program, options.params);
    if (!result.ok()) throw Error("bad engine params:\n" + result.format_diagnostics());
    program = *result.program;
  }
  impl_ = std::make_unique<Impl>(std::move(program), std::move(options));
}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const Program& Engine::program() const { return impl_->program; }

void Engine::on(std::string_view action, ActionCallback callback) {
  impl_->callbacks[std::string(action)] = std::move(callback);
}

std::vector<Diagnostic> Engine::unbound_actions() const { return impl_->unbound_actions(); }

std::optional<SeriesId> Engine::Impl::intern(std::string_view key) {
  auto id = state.store.intern_series(key);
  state.stats.label_limit_drops = state.store.label_limit_drops;
  return id;
}

std::optional<SeriesId> Engine::series(std::string_view key) { return impl_->intern(key); }

std::optional<SeriesId> Engine::series(std::string_view name, const Labels& labels) {
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  return impl_->intern(format_series_key(name, sorted));
}

std::span<const Firing> Engine::observe(std::int64_t step, std::span<const Sample> samples,
                                        const ObserveOptions& options) {
  return impl_->observe(step, samples, options);
}

std::span<const Firing> Engine::observe(
    std::int64_t step, std::initializer_list<std::pair<std::string_view, double>> values,
    const ObserveOptions& options) {
  std::vector<Sample> samples;
  samples.reserve(values.size());
  for (const auto& [key, v] : values)
    if (auto id = impl_->intern(key)) samples.push_back({*id, v});
  return impl_->observe(step, samples, options);
}

std::span<const Firing> Engine::observe(std::int64_t step, std::span<const Sample> samples,
                                        std::span<const TensorSample> tensors,
                                        const ObserveOptions& options) {
  auto& buf = impl_->with_tensors;
  buf.assign(samples.begin(), samples.end());
  impl_->feed.derive(tensors, impl_->state.store, impl_->options.allgather, impl_->state.stats,
                     buf);
  return impl_->observe(step, buf, options);
}

std::optional<TensorId> Engine::tensor(std::string_view key) {
  auto id = impl_->state.store.intern_tensor(key);
  impl_->state.stats.label_limit_drops = impl_->state.store.label_limit_drops;
  return id;
}

void Engine::record(std::function<void(const Observation&)> recorder) {
  impl_->recorder = std::move(recorder);
}

bool Engine::gathers() const { return static_cast<bool>(impl_->options.allgather); }

StatMask Engine::tensor_stats_used(TensorId id) const {
  const auto& tensors = impl_->state.store.tensors;
  if (id >= tensors.size()) return 0;
  const auto& t = tensors[id];
  return t.mask | (t.params.empty() ? 0 : param_stats_bit);
}

StatMask Engine::tensor_stats_due(TensorId id, std::int64_t step, std::string_view mode) const {
  const Impl& m = *impl_;
  const auto& store = m.state.store;
  if (id >= store.tensors.size() || !store.tensors[id].used()) return 0;
  // Which rules may evaluate depends on the rule states, which only observe
  // and restore change (both move the observation count): computed once per
  // (observation, step, mode) for all tensors of a step.
  if (m.open_obs != m.state.obs || m.open_step != step || m.open_mode != mode) {
    m.rule_open.resize(m.plan->rules.size());
    for (std::size_t ri = 0; ri < m.plan->rules.size(); ++ri)
      m.rule_open[ri] = interp::may_evaluate(m.plan->rules[ri], m.state.rules[ri], step, mode);
    m.open_obs = m.state.obs;
    m.open_step = step;
    m.open_mode.assign(mode);
  }
  return m.feed.due(store.tensors[id], store, m.rule_open);
}

std::string Engine::explain(const Firing& firing) const { return impl_->explain(firing); }
std::string Engine::save_state() const { return impl_->save(); }
void Engine::restore_state(std::string_view bytes) { impl_->restore(bytes); }
const EngineStats& Engine::stats() const { return impl_->state.stats; }

std::vector<Engine::RuleEvaluations> Engine::evaluations(std::size_t rule) const {
  std::vector<RuleEvaluations> out;
  const auto& rules = impl_->state.rules;
  if (rule >= rules.size()) return out;
  const auto& elems = rules[rule].elems;
  for (std::size_t label = 0; label < elems.size(); ++label)
    if (elems[label].evals > 0)
      out.push_back({impl_->state.store.labelsets[label].get(), elems[label].evals});
  return out;
}

bool Engine::pending() const {
  const auto& rules = impl_->state.rules;
  return std::any_of(rules.begin(), rules.end(), [](const auto& r) { return r.pending(); });
}

}  // namespace vigil
