// Engine::Impl: how the engine's parts are composed. Internal to the library.
//
// The data flows one way through it at each observe():
//   samples (+ tensors -> TensorFeed) -> SeriesStore histories -> Executor
//   columns -> rule state machines (rule_state) -> firings -> actions.
// EngineState groups everything save_state() keeps; the rest of Impl is
// configuration (program, options, callbacks) or scratch reused between
// observations.
//
// Which file implements which member:
//   engine.cpp        composition, observe(), the public facade
//   actions.cpp       binding checks, dispatch of firings to callbacks
//   explain.cpp       explain() (read-only)
//   engine_state.cpp  save() / restore()
#pragma once

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "interp/executor.hpp"
#include "interp/program_impl.hpp"
#include "interp/rule_state.hpp"
#include "interp/series_store.hpp"
#include "interp/tensor_feed.hpp"
#include "vigil/engine.hpp"

namespace vigil {

/// Everything a saved engine state holds (engine_state.cpp writes each field
/// once, in one function for both directions). A fresh EngineState over the
/// same program is an engine that has seen nothing.
struct EngineState {
  EngineState(const Program& program, std::size_t max_label_sets)
      : store(program, max_label_sets), exec(program.impl().plan), rules(program.impl().plan.rules.size()) {}

  interp::SeriesStore store;             // ids, histories
  interp::Executor exec;                 // columns, detector slots, expression histories
  std::vector<interp::RuleState> rules;  // parallel to plan.rules
  std::uint64_t obs = 0;                 // observation counter (0: none yet)
  interp::Clock clock;                   // step, time, mode, low_step, last_time
  double first_time = std::numeric_limits<double>::quiet_NaN();  // first time given
  double epoch = std::numeric_limits<double>::quiet_NaN();       // latest `epoch` sample
  EngineStats stats;
};

struct Engine::Impl {
  Impl(Program p, EngineOptions o)
      : program(std::move(p)), plan(&program.impl().plan), options(std::move(o)),
        state(program, options.max_label_sets) {}

  // engine.cpp
  std::span<const Firing> observe(std::int64_t step, std::span<const Sample> samples,
                                  const ObserveOptions& o);
  void ingest(const Sample& smp);
  void evaluate_rules();
  void record(std::span<const Sample> samples);
  /// Interns a trace key (SeriesStore::intern_series), counting refusals.
  std::optional<SeriesId> intern(std::string_view key);
  // actions.cpp
  void check_bindings();
  [[nodiscard]] std::vector<Diagnostic> unbound_actions() const;
  void dispatch();
  // explain.cpp
  [[nodiscard]] std::string explain(const Firing& f) const;
  // engine_state.cpp
  [[nodiscard]] std::string save() const;
  void restore(std::string_view bytes);

  // Configuration.
  Program program;
  const interp::Plan* plan;  // program's (shared, so stable across moves)
  EngineOptions options;
  std::unordered_map<std::string, ActionCallback> callbacks;
  bool bindings_checked = false;
  bool dispatching = false;  // inside an action callback: observe() is not reentrant
  std::function<void(const Observation&)> recorder;

  EngineState state;

  // Scratch, reused between observations.
  interp::TensorFeed feed{*plan};
  // tensor_stats_due's answer of which rules may evaluate, for the
  // observation count, step and mode it was computed at.
  mutable std::vector<std::uint8_t> rule_open;
  mutable std::uint64_t open_obs = UINT64_MAX;
  mutable std::int64_t open_step = 0;
  mutable std::string open_mode;
  std::vector<Sample> with_tensors;  // samples + derived stats of one observe
  std::vector<interp::RuleHit> hits;
  std::vector<std::size_t> fresh_elements;  // advance_rule's scratch
  std::vector<Firing> firings;  // of the latest observe
  Observation recorded;         // reused by the recorder
};

}  // namespace vigil
