// The engine: evaluates a compiled Program over a stream of observations and
// dispatches firings to host callbacks.
//
//   vigil::Engine engine(program);
//   engine.on("reduce_lr", [&](const vigil::Firing& f, const vigil::Action& a) {
//     lr *= a.number("factor", 0.1);
//   });
//   for (int64_t step = 0;; ++step) {
//     ...
//     engine.observe(step, {{"loss", loss}, {"lr", lr}});   // evaluates, dispatches
//   }
//
// Threading: an Engine is single-threaded; use one per thread. Programs are
// shared freely.
//
// Data never makes the engine throw: NaN/Inf are values, unknown series are
// kept (rules may match them later), a step going backwards within a mode is
// counted in `stats().out_of_order` and the observation is ignored. Exceptions
// (vigil::Error) are only for misuse of the API: observing while an action is
// unbound (policy error), bad params, malformed state bytes, calling observe()
// from inside an action callback. An exception thrown by an action callback
// reaches the host from observe(), after every other action has run (see
// observe()).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "vigil/program.hpp"
#include "vigil/series_key.hpp"
#include "vigil/tensor.hpp"
#include "vigil/trace.hpp"

namespace vigil {

/// Thrown for misuse of the host API only (never for data).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A rule that became true. Its references (rule, mode, labels, actions)
/// point into the Engine and its Program: like the span observe() returns,
/// they are valid until the next observe() or restore_state() on that engine
/// (a new mode or label set may move what they point at). Copy what you keep.
struct Firing {
  const RuleInfo* rule = nullptr;
  std::int64_t step = 0;
  std::string_view mode;
  double time = std::numeric_limits<double>::quiet_NaN();  // NaN: none given
  Severity severity = Severity::warning;
  const Labels* labels = nullptr;  // the output series' labels; empty for scalar rules
  std::optional<double> value;     // lhs of the deciding comparison (docs/semantics.md §4)
  std::int64_t pending_since = 0;  // step of the first true evaluation of the current run
  const std::vector<Action>* actions = nullptr;  // the rule's, or an escalation's
  /// 0 for the rule's own actions; k for its k-th `escalate` clause.
  int escalation = 0;

  [[nodiscard]] const std::string& rule_name() const { return rule->name; }
};

/// Host callback for one action of a firing.
using ActionCallback = std::function<void(const Firing&, const Action&)>;

/// Interned series handle (see Engine::series). Stable for the engine's life.
using SeriesId = std::uint32_t;

struct Sample {
  SeriesId series;
  double value;
};

/// Interned tensor series handle (see Engine::tensor).
using TensorId = std::uint32_t;

/// A tensor observed at a step: its derived stat series (`T_norm{...}`, ...)
/// get samples as if the host had computed them.
struct TensorSample {
  TensorId tensor;
  TensorView view;
  /// The stats to produce (intersected with those some rule reads): the
  /// default, all of them; Engine::tensor_stats_due's answer for this
  /// observation, only those the rules need now.
  StatMask due = ~StatMask{0};
  /// Stats the host computed itself (e.g. reduced on the tensor's device,
  /// vigil::torch): used instead of reading `view`, which may then be empty.
  /// Every parameter-free stat but the update ones must be set. Not for a
  /// tensor that keeps its previous value or has parameterised stats read
  /// (observe throws vigil::Error). Must stay valid during observe.
  const TensorStats* stats = nullptr;
};

/// Set in Engine::tensor_stats_due when the tensor must be handed over even
/// if none of its stats is due: it keeps its previous value (update_*,
/// frac_changed compare with the value at the previous observation).
inline constexpr StatMask keep_previous_bit = StatMask{1} << 30;

struct ObserveOptions {
  std::string_view mode = "train";
  double time = std::numeric_limits<double>::quiet_NaN();
};

enum class UnboundActions {
  error,   // observing with an action no callback is bound to throws vigil::Error
  record,  // firings still carry the action; nothing is called (rulecheck)
};

/// Multi-process jobs: given this process's buffer, fills `all` with every
/// process's buffer, concatenated in rank order (all of one length); false on
/// failure. vigil::torch::allgather makes one over a c10d process group.
using AllGather = std::function<bool(std::span<const double> local, std::vector<double>& all)>;

/// EngineOptions::max_label_sets' default (docs/limits.md).
inline constexpr std::size_t default_max_label_sets = 100'000;

struct EngineOptions {
  /// Param overrides (recompiles the program's sources with them).
  std::map<std::string, Value> params;
  UnboundActions unbound = UnboundActions::error;
  /// Data-parallel training (SPEC §4): with it, each observe that hands over
  /// tensors some rule reads gathers every process's stats of those tensors
  /// and combines them into the stats of the whole tensor (combine_stats,
  /// combine_param_stat), so every process evaluates the same values and
  /// reaches the same decisions. Every process must hand over the same
  /// tensor series in the same order (one collective call per such observe).
  /// If the call fails, this process's own stats are used and
  /// EngineStats::gather_failures counts it.
  AllGather allgather;
  /// Cardinality bound, like Prometheus' sample and label limits: at most
  /// this many label sets per series name (`grad_norm{layer=...}` counts its
  /// layers). A key that would add one more is refused: series() returns
  /// std::nullopt for it (and its samples are not read), and
  /// EngineStats::label_limit_drops counts it. Refused
  /// keys are not remembered, so memory stays bounded however many arrive.
  /// 0: no bound. Costs: each label set held costs memory (its history and
  /// rule state); an observation costs the label sets it brings samples of
  /// (and, for windows by step or time, every label set such a window reads).
  /// Tensor series (tensor()) and the stat series they derive are bounded
  /// the same way.
  std::size_t max_label_sets = default_max_label_sets;
};

struct EngineStats {
  std::uint64_t observations = 0;
  std::uint64_t out_of_order = 0;
  std::uint64_t firings = 0;
  std::uint64_t gather_failures = 0;
  /// Series-key lookups refused by EngineOptions::max_label_sets (each
  /// refused call of series() counts; a host that looks up the key of every
  /// sample, as rulecheck does, counts the samples dropped).
  std::uint64_t label_limit_drops = 0;
};

class Engine {
 public:
  explicit Engine(Program program, EngineOptions options = {});
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  [[nodiscard]] const Program& program() const;

  /// Binds a callback to an action name (replacing a previous one).
  void on(std::string_view action, ActionCallback callback);

  /// Diagnostics for every `do` action no callback is bound to (positions in
  /// program().sources()). Empty when all are bound.
  [[nodiscard]] std::vector<Diagnostic> unbound_actions() const;

  /// Interns a series key (`loss`, `grad_norm{layer="fc1"}`) as the trace
  /// names it; aliases are applied (once, never chained). std::nullopt if the
  /// key is malformed, or if another trace series is read under the same
  /// name and wins (a series' own name beats an alias, else the first to
  /// appear; docs/language.md#alias). Calling it again with the same key
  /// returns the same id without allocating; an id handed out to an alias
  /// that an exact name later takes over is the exact name's from then on,
  /// so ask again rather than keep ids across such a takeover.
  std::optional<SeriesId> series(std::string_view key);
  std::optional<SeriesId> series(std::string_view name, const Labels& labels);

  /// Feeds one observation: the samples taken at `step`. Evaluates every
  /// rule whose inputs changed, dispatches callbacks in rule order, and
  /// returns the firings (valid until the next observe/restore).
  ///
  /// A callback that throws does not stop dispatch: every other action of
  /// every firing of this observation is still called, in order, and then
  /// the first exception is rethrown from observe() (later ones are
  /// dropped). By then the observation is complete: rule state, windows and
  /// stats() (firings included) have advanced exactly as without the
  /// exception, so the host must not feed the observation again; the next
  /// observe() continues normally.
  std::span<const Firing> observe(std::int64_t step, std::span<const Sample> samples,
                                  const ObserveOptions& options = {});
  /// With tensors: the stats that some rule reads (`grad_norm`, `grad_frac_nan`,
  /// ... for tensor series `grad`) are computed, all of one tensor in a single
  /// pass (each parameterised stat such as `grad_frac_outside(-1,1)` in a pass
  /// of its own), and observed with the samples. Tensors no rule reads cost nothing.
  std::span<const Firing> observe(std::int64_t step, std::span<const Sample> samples,
                                  std::span<const TensorSample> tensors,
                                  const ObserveOptions& options = {});

  /// Interns a tensor series key (`grad{layer="fc1.weight"}`); nullopt if
  /// malformed, or refused by EngineOptions::max_label_sets (counted in
  /// EngineStats::label_limit_drops). Which stats it yields is decided here,
  /// from the program.
  std::optional<TensorId> tensor(std::string_view key);
  /// True if EngineOptions::allgather is set: tensor stats handed to
  /// observe() are combined across processes, so a host must hand over the
  /// tensors, not stats it computed itself.
  [[nodiscard]] bool gathers() const;
  /// The stats of tensor series `id` that some rule reads, plus
  /// param_stats_bit if some rule reads a parameterised stat of it (0: the
  /// tensor is unused and need not be passed to observe).
  [[nodiscard]] StatMask tensor_stats_used(TensorId id) const;
  /// What the next observation needs of tensor series `id`, if it is at
  /// `step` in `mode`: the stats some rule may read there, plus
  /// param_stats_bit if one of its parameterised stats is needed and
  /// keep_previous_bit if it keeps its previous value. 0: do not hand it
  /// over (nor compute anything for it). A stat that feeds a window, a
  /// stateful function (ewma...) or age() is due at every observation;
  /// one read only by rules whose `every N steps`, `after N steps` or
  /// `until N steps` is closed at `step`, or that run `in` another mode, is
  /// not (a rule disabled by its cooldown still evaluates: it counts).
  /// Handing over at each observation exactly the tensors with a nonzero
  /// answer, with TensorSample::due set to it, gives the same firings (rule,
  /// step, labels, value) as handing over every tensor every time; the
  /// derived series of stats not due just have no sample there (a recorded
  /// trace replays to the same firings). Valid for the next observe (until it or
  /// restore_state); does not allocate after the first call.
  ///   const auto due = engine.tensor_stats_due(grad_id, step);
  ///   if (due != 0) tensors.push_back({grad_id, view, due});
  [[nodiscard]] StatMask tensor_stats_due(TensorId id, std::int64_t step,
                                          std::string_view mode = "train") const;
  /// Convenience form with keys; malformed keys are ignored (counted nowhere).
  std::span<const Firing> observe(std::int64_t step,
                                  std::initializer_list<std::pair<std::string_view, double>> values,
                                  const ObserveOptions& options = {});

  /// Hands every observation the engine evaluates to `recorder`, as a trace
  /// stores it: the samples under their series keys plus the derived tensor
  /// stats, so that replaying the recorded trace (`rulecheck run`) gives the
  /// same firings. An empty function stops recording. Recording allocates
  /// (it builds an Observation per call).
  void record(std::function<void(const Observation&)> recorder);

  /// Human-readable account of a firing just returned by observe: the
  /// values of every input (window contents for ranges) and the rule's
  /// pending timeline. Valid until the next observe.
  [[nodiscard]] std::string explain(const Firing& firing) const;

  /// Engine state (series windows, pending counts, detector state) as bytes
  /// a host can store in a checkpoint. A fresh engine over the same program
  /// that restores them continues exactly as this one would.
  [[nodiscard]] std::string save_state() const;
  /// Throws vigil::Error on bytes not produced by save_state of the same program.
  void restore_state(std::string_view bytes);

  [[nodiscard]] const EngineStats& stats() const;

  /// How often rule `rule` (an index into program().rules()) had its
  /// condition evaluated, per label set: every observation that gave the
  /// condition a value (true, false or NaN) for that label set counts; one
  /// whose inputs left it without a value does not. Lets a test tell "did not
  /// fire" from "never looked". Label sets never evaluated are not listed.
  /// Allocates; not for the hot path.
  struct RuleEvaluations {
    const Labels* labels = nullptr;  // valid for the engine's lifetime
    std::uint64_t count = 0;
  };
  [[nodiscard]] std::vector<RuleEvaluations> evaluations(std::size_t rule) const;

  /// True while some rule's condition is in a run of true evaluations for
  /// some series: pending (waiting for its `for`) or firing. A host takes a
  /// "known good" checkpoint only when this is false.
  [[nodiscard]] bool pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vigil
