// The executor: one forward pass over the plan per observation, computing
// each touched node's value as a whole column of (label set, value) pairs.
// Dispatch on the node kind happens once per node (executor.cpp); ranges
// (execute_range.cpp) and operators and elementwise joins
// (execute_operator.cpp) each have their own file.
//
// Owns: the columns, stateful-function slots, histories of ranges over
// expressions, and its scratch (argument buffer, window reader). Must not
// touch: series identity or samples (reads the SeriesStore only), rule state,
// firings, actions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "interp/plan.hpp"
#include "interp/series_store.hpp"
#include "interp/window.hpp"
#include "interp/window_state.hpp"

namespace vigil::interp {

/// One node's value: a column of (label set, value) sorted by label set id.
///
/// A column is kept from one observation to the next and updated where its
/// inputs changed (executor.cpp, "sparse"): at observation `computed`,
/// either every element may have changed (`full`: it was recomputed whole),
/// or only the elements whose labels are in `delta` changed, appeared or
/// disappeared. Fresh elements are always among the changed ones. So an
/// observation that brings one new label set costs O(1) (amortised, plus
/// log of the label sets held) per node, not a pass over every label set.
struct Column {
  std::vector<std::uint32_t> labels;
  std::vector<double> values;
  std::vector<std::uint8_t> fresh;  // computed from a sample of this observation
  std::uint64_t computed = 0;       // observation number of the last computation
  bool full = true;                 // at `computed`: recomputed whole
  bool was_lone = false;            // lone (see Executor::lone) before `computed`
  std::vector<std::uint32_t> delta;  // not full: the labels changed at `computed`, sorted
  void clear() {
    labels.clear();
    values.clear();
    fresh.clear();
  }
  void push(std::uint32_t l, double v, bool f) {
    labels.push_back(l);
    values.push_back(v);
    fresh.push_back(f);
  }
};

/// A stateful function's state for one label set. Plain data (saved bytewise).
struct StatefulSlot {
  stdlib::DetectorState state;
  double out = std::numeric_limits<double>::quiet_NaN();
  bool defined = false;  // warmed up, or just fed a NaN (which yields NaN)
};

/// The values of an expression that a range reads (`(x > 1)[10]`), for one
/// label set.
struct ExprHistory {
  std::uint32_t labels = 0;
  History hist;
  std::uint64_t stamp = 0;  // observation number of the newest sample
  RunningWindow run;        // the range function's running state (not saved: rebuilt)
};

/// What one observation is evaluated at.
struct Observe {
  std::uint64_t obs = 0;  // observation number (1 for the first)
  Clock clock;
};

class Executor {
 public:
  explicit Executor(const Plan& plan);

  /// Recomputes every node whose inputs changed at observation `at` (every
  /// node after construction or force_all()). Allocates only while new
  /// series and label sets appear.
  void evaluate(const SeriesStore& store, const Observe& at);
  /// The next evaluate() recomputes every node (state was restored).
  void force_all() { force_ = true; }

  [[nodiscard]] const Column& column(std::uint32_t node) const { return columns_[node]; }
  /// Element `label` of node `id`'s column (a scalar's, or a lone element's,
  /// whatever the label).
  [[nodiscard]] std::optional<double> element(std::uint32_t id, std::uint32_t label) const;

  // Per-label state, saved and restored by engine_state.cpp.
  std::vector<std::vector<StatefulSlot>> slots;     // per stateful node, by label id
  std::vector<std::vector<ExprHistory>> expr_hist;  // per range-over-expression node, by labels

 private:
  [[nodiscard]] bool fresh_at(std::uint32_t node, std::size_t i) const {
    return columns_[node].computed == at_.obs && columns_[node].fresh[i];
  }
  [[nodiscard]] bool touched(std::uint32_t id) const;
  /// A vector whose only element has no labels (`loss`): it pairs with
  /// every element of a labelled vector, as a scalar would.
  [[nodiscard]] bool lone(std::uint32_t in) const {
    const Column& c = columns_[in];
    return c.labels.size() == 1 && c.labels[0] == 0;
  }
  void copy_fresh(std::uint32_t in, Column& out) const;

  // Sparse updates (executor.cpp): a node whose inputs changed at a few
  // label sets recomputes those elements only.
  /// One element's new state.
  struct Update {
    std::uint32_t label;
    double value;
    bool present, fresh;
  };
  /// Updates node `id` at the labels that changed in its inputs; false when
  /// it must be recomputed whole (nothing changed then).
  bool sparse(std::uint32_t id, const PlanNode& n, Column& out);
  /// The changed labels of input `in` at this observation (none if it was
  /// not recomputed); false if it was recomputed whole.
  bool input_delta(std::uint32_t in, bool fresh_only);
  bool lone_series(std::uint32_t id, const PlanNode& n, Column& out);
  /// Element `label` of node n computed from its inputs' elements.
  void sparse_element(std::uint32_t id, const PlanNode& n, std::uint32_t label);
  void sparse_elementwise(const PlanNode& n, std::uint32_t label);
  [[nodiscard]] std::uint32_t elementwise_driver(const PlanNode& n) const;
  void apply(Column& out);
  /// The index of `label` in `c`, or npos.
  static std::size_t find(const Column& c, std::uint32_t label);
  /// The member of `selector` with label set `label`, or nullopt.
  [[nodiscard]] std::optional<std::size_t> member(std::uint32_t selector, std::uint32_t label) const;

  // executor.cpp
  void eval_selector(const PlanNode& n, Column& out);
  void eval_fallback(std::uint32_t id, const PlanNode& n, Column& out);
  void eval_aggregate(const PlanNode& n, Column& out);
  void eval_stateful(std::uint32_t id, const PlanNode& n, Column& out);
  // execute_range.cpp
  /// `run`: the running window of a running kind, else null.
  void reduce(const PlanNode& n, RunKind kind, RunningWindow* run, const History& h,
              std::uint32_t labels, bool fresh, Column& out);
  void eval_range(std::uint32_t id, const PlanNode& n, Column& out);
  void eval_age(const PlanNode& n, Column& out);
  void eval_expr_range(std::uint32_t id, const PlanNode& n, Column& out);
  // execute_operator.cpp
  bool eval_scalar(const PlanNode& n, Column& out);
  bool eval_operator(const PlanNode& n, Column& out);
  void eval_elementwise(const PlanNode& n, Column& out);

  const Plan* plan_;
  std::vector<Column> columns_;  // per plan node
  // Valid during evaluate().
  const SeriesStore* store_ = nullptr;
  Observe at_;
  bool force_ = true;  // recompute every node (first observation, after restore)
  std::vector<double> args_;
  WindowReader reader_;
  /// Per range node: its running kind, and its running windows parallel to
  /// its selector's members (running_ids_: the series of each; ranges over
  /// expressions keep theirs in ExprHistory). Not saved: a running window is
  /// a function of its window's samples and is rebuilt from the restored
  /// histories (window_state.hpp).
  std::vector<RunKind> run_kind_;
  std::vector<std::vector<RunningWindow>> running_;
  std::vector<std::vector<SeriesId>> running_ids_;
  /// Per node: an operator or elementwise call (eval_scalar applies).
  std::vector<std::uint8_t> elementwise_;
  /// Per default() node: the input its column was taken from (no_node: none yet).
  std::vector<std::uint32_t> fallback_from_;
  // Sparse scratch: the changed labels, the updates, a one-element column
  // (reduce() writes into a column) and the merge target.
  std::vector<std::uint32_t> changed_;
  std::vector<Update> updates_;
  Column one_, merged_;
};

}  // namespace vigil::interp
