// Evaluation semantics through the public API only (compile_string + Engine).
// Every expectation is computed by hand from SPEC §2; each test states the
// trace it feeds and why the firing steps are what they are.
//
// A recurring trick: `cooldown 1 samples` makes a rule fire at EVERY true
// evaluation, so the firing steps of such a rule are exactly the steps at which
// it was evaluated (gating tests), and the firing value is the left-hand side
// at each of them (function tests).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// Engine options for tests: actions are recorded, not called.
vigil::EngineOptions recording() {
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  return options;
}

/// One observation of a test trace.
struct Obs {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;
  std::string mode = "train";
  double time = nan;
};

/// A firing reduced to what the tests compare.
struct Fired {
  std::string rule;
  std::int64_t step = 0;
  std::string labels;  // `k=v,k2=v2`, empty for scalar rules
  std::optional<double> value;
  std::int64_t pending_since = 0;
  std::string mode;
  vigil::Severity severity = vigil::Severity::warning;
  std::vector<std::string> actions;
};

std::string labels_string(const vigil::Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

vigil::Program compile(std::string_view text, const vigil::CompileOptions& options = {},
                       std::string name = "test.rules") {
  auto result = vigil::compile_string(text, std::move(name), options);
  if (!result.ok()) {
    ADD_FAILURE() << "compile failed:\n" << result.format_diagnostics();
    throw std::runtime_error("compile failed");
  }
  return *result.program;
}

/// Feeds one observation and converts its firings.
std::vector<Fired> feed(vigil::Engine& engine, const Obs& obs) {
  std::vector<vigil::Sample> samples;
  for (const auto& [key, value] : obs.values) {
    auto id = engine.series(key);
    if (!id) {
      ADD_FAILURE() << "malformed series key " << key;
      continue;
    }
    samples.push_back({*id, value});
  }
  std::vector<Fired> out;
  for (const auto& f : engine.observe(obs.step, samples, {.mode = obs.mode, .time = obs.time})) {
    Fired r{f.rule_name(), f.step, labels_string(*f.labels), f.value, f.pending_since,
            std::string(f.mode), f.severity, {}};
    for (const auto& a : *f.actions) r.actions.push_back(a.name);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Fired> run(vigil::Engine& engine, const std::vector<Obs>& trace) {
  std::vector<Fired> all;
  for (const auto& obs : trace) {
    auto fired = feed(engine, obs);
    all.insert(all.end(), fired.begin(), fired.end());
  }
  return all;
}

std::vector<Fired> run(std::string_view text, const std::vector<Obs>& trace,
                       const vigil::CompileOptions& options = {}) {
  vigil::Engine engine(compile(text, options), recording());
  return run(engine, trace);
}

/// Firing steps of one rule (all rules when `rule` is empty).
std::vector<std::int64_t> steps(const std::vector<Fired>& fired, std::string_view rule = {}) {
  std::vector<std::int64_t> out;
  for (const auto& f : fired)
    if (rule.empty() || f.rule == rule) out.push_back(f.step);
  return out;
}

/// A trace of `x` only: x=values[i] at step first+i.
std::vector<Obs> series_x(const std::vector<double>& values, std::int64_t first = 1) {
  std::vector<Obs> out;
  for (std::size_t i = 0; i < values.size(); ++i)
    out.push_back({first + static_cast<std::int64_t>(i), {{"x", values[i]}}});
  return out;
}

/// Values of EXPR at every evaluation where it is defined and not NaN:
/// firing values of `when EXPR > -1e300 cooldown 1 samples`, with their steps.
std::vector<std::pair<std::int64_t, double>> values_of(std::string_view expr,
                                                       const std::vector<Obs>& trace) {
  std::string text = "rule probe: when " + std::string(expr) + " > -1e300 cooldown 1 samples do log";
  std::vector<std::pair<std::int64_t, double>> out;
  for (const auto& f : run(text, trace)) {
    EXPECT_TRUE(f.value.has_value()) << "firing without value at step " << f.step;
    out.emplace_back(f.step, f.value.value_or(nan));
  }
  return out;
}

using StepValues = std::vector<std::pair<std::int64_t, double>>;

// ---- for / edge / cooldown ---------------------------------------------------

TEST(ForSamples, FalseEvaluationResetsTheCount) {
  // true true FALSE true true true: the run restarts at step 4, third true at 6.
  auto fired = run("rule r: when x > 1 for 3 samples do log", series_x({2, 2, 0, 2, 2, 2}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{6}));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].pending_since, 4);
}

TEST(ForSamples, ObservationWithoutTheSeriesNeitherAdvancesNorResets) {
  // Step 2 carries only y: the rule is not evaluated there, so x's run
  // 1, 3, 4 is three consecutive true evaluations.
  std::vector<Obs> trace{{1, {{"x", 2}}}, {2, {{"y", 0}}}, {3, {{"x", 2}}}, {4, {{"x", 2}}}};
  auto fired = run("rule r: when x > 1 for 3 samples do log", trace);
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{4}));
  // Also: the y-only observation must not count as a true evaluation.
  std::vector<Obs> trace2{{1, {{"x", 2}}}, {2, {{"y", 0}}}, {3, {{"x", 2}}}};
  EXPECT_TRUE(run("rule r: when x > 1 for 3 samples do log", trace2).empty());
}

TEST(ForSamples, FiresOnceWhileConditionKeepsHolding) {
  auto fired = run("rule r: when x > 1 for 3 samples do log", series_x({2, 2, 2, 2, 2, 2, 2}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{3}));
}

TEST(Edge, TrueTrueFalseTrueFiresTwice) {
  auto fired = run("rule r: when x > 1 do log", series_x({2, 2, 0, 2}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{1, 4}));
}

TEST(Cooldown, SamplesRefiresEveryNEvaluations) {
  // Fires at 1; distance counts this element's evaluations since the firing:
  // step 2 -> 1, step 3 -> 2 (fire), 5 (fire); a false at 6 ends the run, and
  // the new run's first true (7) is 2 evaluations after the firing at 5: fires.
  auto fired = run("rule r: when x > 1 cooldown 2 samples do log", series_x({2, 2, 2, 2, 2, 0, 2, 2}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{1, 3, 5, 7}));
}

TEST(Cooldown, StepsWithForRefiresOnlyAfterDistance) {
  // for 2 samples: first firing at step 1 (second true evaluation).
  // cooldown 3 steps: next at step >= 4, then >= 7. The false at 8 resets the
  // run; 9 is the first true of a new run (for not met), 10 fires.
  auto fired = run("rule r: when x > 1 for 2 samples cooldown 3 steps do log",
                   series_x({2, 2, 2, 2, 2, 2, 2, 2, 0, 2, 2}, 0));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{1, 4, 7, 10}));
  // pending_since stays the start of the run across cooldown re-firings.
  ASSERT_EQ(fired.size(), 4u);
  EXPECT_EQ(fired[1].pending_since, 0);
  EXPECT_EQ(fired[3].pending_since, 9);
}

TEST(Cooldown, HoldsAcrossRuns) {
  // SPEC §2's example: a new run inside the cooldown waits for its end
  // (steps 1..8: 1 fires; the run from 3 fires at 6 = 1 + 5; the run at 8 is
  // inside the cooldown of 6).
  auto fired = run("rule r: when x > 0 cooldown 5 steps do log", series_x({1, 0, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{1, 6}));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[1].pending_since, 3);
}

TEST(Cooldown, StepsMeasuredOnStepNumbersWithGaps) {
  // Steps 0, 1, 2, 6, 7, 12: fire at 0, then the first step >= 5 (6), then >= 11 (12).
  std::vector<Obs> trace{{0, {{"x", 2}}}, {1, {{"x", 2}}}, {2, {{"x", 2}}},
                         {6, {{"x", 2}}}, {7, {{"x", 2}}}, {12, {{"x", 2}}}};
  EXPECT_EQ(steps(run("rule r: when x > 1 cooldown 5 steps do log", trace)),
            (std::vector<std::int64_t>{0, 6, 12}));
}

TEST(ForSteps, MeasuredByStepNumbersWithGaps) {
  // First true at step 10; satisfied when step - 10 >= 5: 14 no, 15 yes.
  std::vector<Obs> trace{{10, {{"x", 2}}}, {12, {{"x", 2}}}, {14, {{"x", 2}}},
                         {15, {{"x", 2}}}, {20, {{"x", 2}}}};
  auto fired = run("rule r: when x > 1 for 5 steps do log", trace);
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{15}));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].pending_since, 10);
  // A false evaluation restarts the span: true 10, false 12, true 14..19 -> fires at 19.
  std::vector<Obs> trace2{{10, {{"x", 2}}}, {12, {{"x", 0}}}, {14, {{"x", 2}}},
                          {18, {{"x", 2}}}, {19, {{"x", 2}}}};
  EXPECT_EQ(steps(run("rule r: when x > 1 for 5 steps do log", trace2)),
            (std::vector<std::int64_t>{19}));
}

TEST(ForTime, MeasuredBySecondsAndNeverWithoutTimes) {
  std::vector<Obs> trace{{1, {{"x", 2}}, "train", 100.0},
                         {2, {{"x", 2}}, "train", 105.0},
                         {3, {{"x", 2}}, "train", 109.5},
                         {4, {{"x", 2}}, "train", 110.0},
                         {5, {{"x", 2}}, "train", 111.0}};
  auto fired = run("rule r: when x > 1 for 10s do log", trace);
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(run("rule r: when x > 1 for 10s do log", series_x({2, 2, 2, 2, 2})).empty());
}

// ---- after / every -----------------------------------------------------------

TEST(After, Steps) {
  auto fired = run("rule r: when x > 0 after 3 steps cooldown 1 samples do log",
                   series_x({1, 1, 1, 1, 1}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{3, 4, 5}));
}

TEST(After, SamplesSkipsOpportunitiesOnly) {
  // Opportunities: 1, 3, 4, 5 (step 2 has no x). The first two are skipped.
  std::vector<Obs> trace{{1, {{"x", 1}}}, {2, {{"y", 1}}}, {3, {{"x", 1}}},
                         {4, {{"x", 1}}}, {5, {{"x", 1}}}};
  EXPECT_EQ(steps(run("rule r: when x > 0 after 2 samples cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{4, 5}));
}

TEST(After, SkippedOpportunitiesDoNotAdvanceFor) {
  // after 2 samples: 1 and 2 skipped; for 2 samples then counts 3, 4.
  EXPECT_EQ(steps(run("rule r: when x > 0 for 2 samples after 2 samples do log",
                      series_x({1, 1, 1, 1, 1}))),
            (std::vector<std::int64_t>{4}));
}

TEST(Every, Steps) {
  // Evaluated at 1, then first step >= 4 (4), >= 7 (7), >= 10 (10).
  std::vector<Obs> trace;
  for (std::int64_t s : {1, 2, 3, 4, 5, 7, 8, 10}) trace.push_back({s, {{"x", 1}}});
  EXPECT_EQ(steps(run("rule r: when x > 0 every 3 steps cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{1, 4, 7, 10}));
}

TEST(Every, Samples) {
  // Opportunities numbered 0..5 at steps 1..6; evaluated at 0, 2, 4.
  EXPECT_EQ(steps(run("rule r: when x > 0 every 2 samples cooldown 1 samples do log",
                      series_x({1, 1, 1, 1, 1, 1}))),
            (std::vector<std::int64_t>{1, 3, 5}));
}

TEST(Every, AfterAppliesFirst) {
  // after 1 samples skips step 1; remaining opportunities 2..7 numbered 0..5.
  EXPECT_EQ(steps(run("rule r: when x > 0 after 1 samples every 3 samples cooldown 1 samples do log",
                      series_x({1, 1, 1, 1, 1, 1, 1}))),
            (std::vector<std::int64_t>{2, 5}));
}

// ---- modes -------------------------------------------------------------------

TEST(Mode, InEvalComparesValidationWithRecentTrainingLoss) {
  // train loss 1 at steps 1..3; eval val_loss 2 at step 3: mean(loss over
  // steps (0,3]) = 1, 2 > 1. Train step 4 (loss 0): the `in eval` rule is not
  // evaluated, the unpinned rule is (loss is fresh) and fires. Eval step 5
  // (val_loss 2): mean over (2,5] = (1+0)/2 = 0.5.
  std::string text =
      "rule e: when val_loss > mean(loss[3 steps]) in eval cooldown 1 samples do log\n"
      "rule any: when val_loss > mean(loss[3 steps]) cooldown 1 samples do log\n";
  std::vector<Obs> trace{{1, {{"loss", 1}}},
                         {2, {{"loss", 1}}},
                         {3, {{"loss", 1}}},
                         {3, {{"val_loss", 2}}, "eval"},
                         {4, {{"loss", 0}}},
                         {5, {{"val_loss", 2}}, "eval"}};
  auto fired = run(text, trace);
  EXPECT_EQ(steps(fired, "e"), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(steps(fired, "any"), (std::vector<std::int64_t>{3, 4, 5}));
  for (const auto& f : fired) {
    if (f.rule == "e") {
      EXPECT_EQ(f.mode, "eval");
    }
  }
}

TEST(Mode, RuleOnValLossAloneRunsAtEvalObservationsOnly) {
  std::vector<Obs> trace{{1, {{"loss", 5}}},
                         {2, {{"val_loss", 5}}, "eval"},
                         {3, {{"loss", 5}}},
                         {4, {{"val_loss", 5}}, "eval"}};
  EXPECT_EQ(steps(run("rule r: when val_loss > 1 cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{2, 4}));
}

// ---- NaN ---------------------------------------------------------------------

TEST(NaN, ComparisonIsFalseAndResetsFor) {
  // 2, NaN, 2, 2: the NaN evaluation is false and resets; fires at 4.
  EXPECT_EQ(steps(run("rule r: when x > 1 for 2 samples do log", series_x({2, nan, 2, 2}))),
            (std::vector<std::int64_t>{4}));
}

TEST(NaN, NotEqualWithNaNIsFalse) {
  EXPECT_EQ(steps(run("rule r: when x != 1 cooldown 1 samples do log",
                      series_x({nan, 2, nan, 3, 1}))),
            (std::vector<std::int64_t>{2, 4}));
}

TEST(NaN, IsNanIsTrueAndHasNoValue) {
  auto fired = run("rule r: when is_nan(x) cooldown 1 samples do log", series_x({1, nan, 2, nan}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{2, 4}));
  for (const auto& f : fired) EXPECT_FALSE(f.value.has_value());
}

TEST(NaN, InsideRangeMakesMeanNaNButCountCounts) {
  auto trace = series_x({1, nan, 2, 3, 4, 5});
  EXPECT_EQ(steps(run("rule r: when is_nan(mean(x[3])) cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{3, 4}));
  // mean(x[3]) is defined from step 3 and NaN while the NaN is in the window.
  EXPECT_EQ(values_of("mean(x[3])", trace), (StepValues{{5, 3}, {6, 4}}));
  // count(x[3 steps]) at step s: samples with step in (s-3, s]; NaN counts.
  EXPECT_EQ(values_of("count(x[3 steps])", trace),
            (StepValues{{1, 1}, {2, 2}, {3, 3}, {4, 3}, {5, 3}, {6, 3}}));
}

TEST(NaN, InsideRangeMakesDeltaAndRelChangeNaN) {
  // delta and rel_change are numeric reductions, not among the exceptions
  // (count, first, last, changes): a NaN anywhere in the window makes them NaN,
  // even when first and last are numbers. first/last stay the samples.
  auto trace = series_x({1, nan, 0.5});
  EXPECT_EQ(values_of("delta(x[3])", trace), (StepValues{}));
  EXPECT_EQ(steps(run("rule r: when is_nan(delta(x[3])) do log", trace)),
            (std::vector<std::int64_t>{3}));
  // x[3 steps] holds 1, NaN at step 2 and 1, NaN, 0.5 at step 3.
  EXPECT_EQ(steps(run("rule r: when is_nan(rel_change(x[3 steps])) cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(values_of("first(x[3]) - last(x[3])", trace), (StepValues{{3, 0.5}}));
}

// ---- vectors -----------------------------------------------------------------

TEST(Vector, PerSeriesStateWithAlternatingLayers) {
  // conv1 and conv2 are sampled on alternating steps; each keeps its own run,
  // and a step without its sample does not reset it. myconv1 and fc are not
  // matched (the regex is anchored), although they are always > 1.
  std::vector<Obs> trace{
      {1, {{"g{layer=\"conv1\"}", 2}, {"g{layer=\"myconv1\"}", 5}, {"g{layer=\"fc\"}", 5}}},
      {2, {{"g{layer=\"conv2\"}", 2}, {"g{layer=\"myconv1\"}", 5}, {"g{layer=\"fc\"}", 5}}},
      {3, {{"g{layer=\"conv1\"}", 3}, {"g{layer=\"myconv1\"}", 5}}},
      {4, {{"g{layer=\"conv2\"}", 4}, {"g{layer=\"fc\"}", 5}}},
  };
  auto fired = run("rule r: when g{layer=~\"conv.*\"} > 1 for 2 samples do log", trace);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].step, 3);
  EXPECT_EQ(fired[0].labels, "layer=conv1");
  EXPECT_EQ(fired[0].value, 3.0);
  EXPECT_EQ(fired[0].pending_since, 1);
  EXPECT_EQ(fired[1].step, 4);
  EXPECT_EQ(fired[1].labels, "layer=conv2");
  EXPECT_EQ(fired[1].value, 4.0);
  EXPECT_EQ(fired[1].pending_since, 2);
}

TEST(Vector, NegativeMatchersAndLabelOrder) {
  std::vector<Obs> trace{{1,
                          {{"g{layer=\"fc\"}", 5},
                           {"g{layer=\"conv1\"}", 5},
                           {"g{layer=\"myconv1\"}", 5},
                           {"g{layer=\"conv2\"}", 0}}}};
  auto labels_of = [&](std::string_view text) {
    std::vector<std::string> out;
    for (const auto& f : run(text, trace)) out.push_back(f.labels);
    return out;
  };
  // Within a rule, elements fire in label-set order.
  EXPECT_EQ(labels_of("rule r: when g{layer!=\"fc\"} > 1 do log"),
            (std::vector<std::string>{"layer=conv1", "layer=myconv1"}));
  EXPECT_EQ(labels_of("rule r: when g{layer!~\"conv.*\"} > 1 do log"),
            (std::vector<std::string>{"layer=fc", "layer=myconv1"}));
  EXPECT_EQ(labels_of("rule r: when g{layer=~\"conv\"} > 1 do log"), (std::vector<std::string>{}));
  EXPECT_EQ(labels_of("rule r: when g > 1 do log"),
            (std::vector<std::string>{"layer=conv1", "layer=fc", "layer=myconv1"}));
}

TEST(Vector, MissingLabelMatchesAsEmptyString) {
  std::vector<Obs> trace{{1, {{"g", 5}, {"g{layer=\"fc\"}", 5}}}};
  auto fired = run("rule r: when g{layer=\"\"} > 1 do log", trace);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].labels, "");
}

TEST(Series, LastValueInOneObservationWins) {
  std::vector<Obs> trace{{1, {{"x", 5}, {"x", 0}}}, {2, {{"x", 0}, {"x", 5}}}};
  auto fired = run("rule r: when x > 1 cooldown 1 samples do log", trace);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 2);
  // ... and it is one sample, not two: x[2] is defined only at step 2.
  EXPECT_EQ(values_of("sum(x[2])", trace), (StepValues{{2, 5}}));
}

TEST(Vector, VectorOpVectorPairsIdenticalLabels) {
  // k=1: 3-1 = 2 > 0 fires; k=2: 1-2 < 0; k=3 exists only in b: dropped.
  std::vector<Obs> trace{{1,
                          {{"a{k=\"1\"}", 3},
                           {"a{k=\"2\"}", 1},
                           {"b{k=\"1\"}", 1},
                           {"b{k=\"2\"}", 2},
                           {"b{k=\"3\"}", 0}}}};
  auto fired = run("rule r: when a - b > 0 do log\nrule s: when b - a < 5 do log", trace);
  ASSERT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0].rule, "r");
  EXPECT_EQ(fired[0].labels, "k=1");
  EXPECT_EQ(fired[0].value, 2.0);
  EXPECT_EQ(fired[1].rule, "s");
  EXPECT_EQ(fired[1].labels, "k=1");
  EXPECT_EQ(fired[2].labels, "k=2");
}

TEST(Vector, AggregationGivesEmptyLabels) {
  std::vector<Obs> trace{{1, {{"g{layer=\"a\"}", 1}, {"g{layer=\"b\"}", 7}, {"g{layer=\"c\"}", 3}}}};
  auto fired = run("rule r: when max(g) > 4 do log\nrule s: when sum(g) == 11 do log\n"
                   "rule t: when count(g) == 3 do log\nrule u: when min(g) < 2 do log",
                   trace);
  ASSERT_EQ(fired.size(), 4u);
  EXPECT_EQ(fired[0].labels, "");
  EXPECT_EQ(fired[0].value, 7.0);
  EXPECT_EQ(fired[1].value, 11.0);
  EXPECT_EQ(fired[2].value, 3.0);
  EXPECT_EQ(fired[3].value, 1.0);
}

TEST(Vector, AnyAllAndMeanAggregations) {
  std::vector<Obs> trace{{1, {{"g{layer=\"a\"}", 1}, {"g{layer=\"b\"}", 7}, {"g{layer=\"c\"}", 4}}}};
  auto fired = run("rule any: when any(g > 5) do log\nrule all: when all(g > 5) do log\n"
                   "rule all0: when all(g > 0) do log\nrule mean: when mean(g) == 4 do log",
                   trace);
  std::vector<std::string> names;
  for (const auto& f : fired) names.push_back(f.rule + ":" + f.labels);
  EXPECT_EQ(names, (std::vector<std::string>{"any:", "all0:", "mean:"}));
}

TEST(Vector, InternedSeriesWithoutSampleHasNoElement) {
  vigil::Engine engine(compile("rule r: when count(g) >= 1 cooldown 1 samples do log\n"), recording());
  ASSERT_TRUE(engine.series("g{layer=\"never\"}").has_value());
  auto fired = feed(engine, {1, {{"g{layer=\"a\"}", 1}}});
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].value, 1.0);  // the interned but never observed series is not counted
}

TEST(Vector, ScalarBroadcastsAgainstVector) {
  // max(g) is a scalar; `g < max(g)` is evaluated per element of g.
  std::vector<Obs> trace{{1, {{"g{layer=\"a\"}", 1}, {"g{layer=\"b\"}", 7}, {"g{layer=\"c\"}", 3}}}};
  auto fired = run("rule r: when g < max(g) do log", trace);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].labels, "layer=a");
  EXPECT_EQ(fired[1].labels, "layer=c");
}

// ---- range functions ---------------------------------------------------------

TEST(Range, ReductionsOverLastNSamples) {
  // x = 1, 2, 4, 7 at steps 0..3; at step 3 the window x[4] is all of them.
  auto trace = series_x({1, 2, 4, 7}, 0);
  EXPECT_EQ(values_of("mean(x[4])", trace), (StepValues{{3, 3.5}}));
  EXPECT_EQ(values_of("median(x[4])", trace), (StepValues{{3, 3.0}}));
  // numpy linear: position 0.25 * 3 = 0.75 -> 1 + 0.75 * (2 - 1).
  EXPECT_EQ(values_of("quantile(x[4], 0.25)", trace), (StepValues{{3, 1.75}}));
  EXPECT_EQ(values_of("quantile(x[4], 1)", trace), (StepValues{{3, 7.0}}));
  // population: squared deviations 6.25 + 2.25 + 0.25 + 12.25 = 21, / 4.
  EXPECT_EQ(values_of("var(x[4])", trace), (StepValues{{3, 5.25}}));
  auto sd = values_of("std(x[4])", trace);
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_DOUBLE_EQ(sd[0].second, std::sqrt(5.25));
  // least squares against steps 0..3: Sxy = 10, Sxx = 5.
  EXPECT_EQ(values_of("slope(x[4])", trace), (StepValues{{3, 2.0}}));
  EXPECT_EQ(values_of("delta(x[4])", trace), (StepValues{{3, 6.0}}));
  EXPECT_EQ(values_of("rel_change(x[4])", trace), (StepValues{{3, 6.0}}));
  EXPECT_EQ(values_of("first(x[4]) + 10 * last(x[4])", trace), (StepValues{{3, 71.0}}));
  EXPECT_EQ(values_of("min(x[4]) + max(x[4]) + sum(x[4])", trace), (StepValues{{3, 22.0}}));
  // Window of 2 slides: defined from the 2nd sample.
  EXPECT_EQ(values_of("sum(x[2])", trace), (StepValues{{1, 3}, {2, 6}, {3, 11}}));
}

TEST(Range, VarianceOfEqualSamplesIsExactlyZero) {
  auto trace = series_x({0.1, 0.1, 0.1});
  EXPECT_EQ(values_of("var(x[3])", trace), (StepValues{{3, 0.0}}));
  EXPECT_EQ(values_of("std(x[3])", trace), (StepValues{{3, 0.0}}));
}

TEST(Range, SlopeAgainstStepNumbersWithGaps) {
  std::vector<Obs> trace{{0, {{"x", 1}}}, {2, {{"x", 2}}}, {4, {{"x", 3}}}, {6, {{"x", 4}}}};
  EXPECT_EQ(values_of("slope(x[4])", trace), (StepValues{{6, 0.5}}));
  EXPECT_EQ(values_of("rel_change(x[2])", series_x({-2, 1})), (StepValues{{2, 1.5}}));
}

TEST(Range, Changes) {
  EXPECT_EQ(values_of("changes(x[5])", series_x({1, 1, 2, 2, 1})), (StepValues{{5, 2}}));
  // NaN <-> number is a change, NaN -> NaN is not.
  EXPECT_EQ(values_of("changes(x[4])", series_x({1, nan, nan, 2})), (StepValues{{4, 2}}));
}

TEST(Range, StepWindowBoundariesAreHalfOpen) {
  // At step 5 the window x[4 steps] is (1, 5]: 20 + 50; at 6 it is (2, 6]: 50 + 60.
  std::vector<Obs> trace{{1, {{"x", 10}}}, {2, {{"x", 20}}}, {5, {{"x", 50}}}, {6, {{"x", 60}}}};
  EXPECT_EQ(values_of("sum(x[4 steps])", trace),
            (StepValues{{1, 10}, {2, 30}, {5, 70}, {6, 110}}));
  // delta needs two samples in the window: at 1 only one.
  EXPECT_EQ(values_of("delta(x[4 steps])", trace), (StepValues{{2, 10}, {5, 30}, {6, 10}}));
}

TEST(Range, StepWindowExcludesLaterStepsOfAnotherMode) {
  // Eval observations count their own steps (legal: steps only need to be
  // non-decreasing within a mode). At eval step 1 the window x[2 steps] is
  // (-1, 1]: the train samples of steps 10 and 11 are not in it.
  std::vector<Obs> trace{{10, {{"x", 5}}}, {11, {{"x", 7}}}, {1, {{"x", 1}}, "eval"}};
  EXPECT_EQ(values_of("sum(x[2 steps])", trace), (StepValues{{10, 5}, {11, 12}, {1, 1}}));
}

TEST(Range, StepWindowKeepsOldSamplesForALaterModeWithLowerSteps) {
  // Train reaches step 5 (x[2 steps] there is (3, 5]), then eval observes at
  // step 1: its window (-1, 1] must still hold the train sample of step 1.
  std::vector<Obs> trace{{1, {{"x", 1}}}, {5, {{"x", 5}}}, {1, {{"x", 10}}, "eval"}};
  EXPECT_EQ(values_of("sum(x[2 steps])", trace), (StepValues{{1, 1}, {5, 5}, {1, 11}}));
  // Eval counting its own steps from 0: exact once the mode has been seen
  // (here an empty eval observation opens the run), since history is kept for
  // the lowest latest step of the modes seen (docs/semantics.md).
  std::vector<Obs> trace2{{0, {}, "eval"}, {1, {{"x", 1}}}, {2, {{"x", 2}}}, {2, {{"x", 2}}},
                          {0, {{"x", 0}}, "eval"}, {1, {{"x", 3}}, "eval"}};
  EXPECT_EQ(values_of("sum(x[1 steps])", trace2),
            (StepValues{{1, 1}, {2, 2}, {2, 4}, {0, 0}, {1, 4}}));
}

TEST(Range, TimeWindowSkipsSamplesWithoutTime) {
  // The sample of step 2 has no time, so it is in no time window; the window
  // x[5s] at t=101 is (96, 101] and holds the samples of t=100 and t=101.
  // At step 2 itself the window is undefined (no current time).
  std::vector<Obs> trace{{1, {{"x", 1}}, "train", 100.0}, {2, {{"x", 2}}}, {3, {{"x", 3}}, "train", 101.0}};
  EXPECT_EQ(values_of("count(x[5s])", trace), (StepValues{{1, 1}, {3, 2}}));
  EXPECT_EQ(values_of("sum(x[5s])", trace), (StepValues{{1, 1}, {3, 4}}));
}

TEST(Range, StepWindowSeesOnlyCurrentStep) {
  // x[1 steps] at step s is (s-1, s]: the current sample only.
  EXPECT_EQ(values_of("sum(x[1 steps])", series_x({3, 4}, 7)), (StepValues{{7, 3}, {8, 4}}));
}

TEST(Range, EvalsWindowHoldsOnlyEvalSamples) {
  // x[2 evals]: the last 2 samples taken in eval observations; defined once
  // there are two of them (step 4), whatever the train samples in between.
  std::vector<Obs> trace{{1, {{"x", 1}}}, {2, {{"x", 5}}, "eval"}, {3, {{"x", 7}}},
                         {4, {{"x", 9}}, "eval"}, {5, {{"x", 11}}}};
  EXPECT_EQ(values_of("sum(x[2 evals])", trace), (StepValues{{4, 14}, {5, 14}}));
}

TEST(Range, AnyNan) {
  EXPECT_EQ(steps(run("rule r: when any_nan(x[3]) cooldown 1 samples do log",
                      series_x({1, nan, 2, 3, 4}))),
            (std::vector<std::int64_t>{3, 4}));
}

TEST(Detectors, ZscoreRobustZIqrOutlier) {
  // Others (the window without the latest) are 1, 2, 3; latest 6.
  auto trace = series_x({1, 2, 3, 6});
  // (6 - 2) / population std of (1, 2, 3) = 4 / sqrt(2/3).
  auto z = values_of("zscore(x[4])", trace);
  ASSERT_EQ(z.size(), 1u);
  EXPECT_EQ(z[0].first, 4);
  EXPECT_DOUBLE_EQ(z[0].second, 4 / std::sqrt(2.0 / 3.0));
  // 0.6745 * (6 - median 2) / MAD 1.
  auto rz = values_of("robust_z(x[4])", trace);
  ASSERT_EQ(rz.size(), 1u);
  EXPECT_DOUBLE_EQ(rz[0].second, 0.6745 * 4);
  // Others 1, 2, 3, 4: Q1 = 1.75, Q3 = 3.25, IQR 1.5, fences [-0.5, 5.5].
  EXPECT_EQ(steps(run("rule r: when iqr_outlier(x[5], 1.5) do log", series_x({1, 2, 3, 4, 6}))),
            (std::vector<std::int64_t>{5}));
  EXPECT_TRUE(run("rule r: when iqr_outlier(x[5], 1.5) do log", series_x({1, 2, 3, 4, 5.5})).empty());
}

TEST(Functions, ElementwiseAndOperators) {
  auto trace = series_x({2, -1, 0.5});
  EXPECT_EQ(values_of("clamp(x, 0, 1)", trace), (StepValues{{1, 1}, {2, 0}, {3, 0.5}}));
  EXPECT_EQ(values_of("max(x, 1)", trace), (StepValues{{1, 2}, {2, 1}, {3, 1}}));
  EXPECT_EQ(values_of("min(x, 1)", trace), (StepValues{{1, 1}, {2, -1}, {3, 0.5}}));
  // ^ is right-associative and binds tighter than unary minus.
  EXPECT_EQ(values_of("x * 0 + 2 ^ 3 ^ 2", series_x({1})), (StepValues{{1, 512}}));
  EXPECT_EQ(values_of("x * 0 - 2 ^ 2", series_x({1})), (StepValues{{1, -4}}));
  EXPECT_EQ(values_of("x % 3", series_x({-7, 7.5})), (StepValues{{1, -1}, {2, 1.5}}));
  EXPECT_EQ(values_of("abs(x) + sqrt(4) + exp(0) + log(1)", series_x({-3})), (StepValues{{1, 6}}));
}

TEST(After, TimeCountsFromTheFirstTimedObservation) {
  // The first observation with a time (t=100) has no x; `after 10s` skips
  // until t >= 110.
  std::vector<Obs> trace{{1, {{"y", 0}}, "train", 100.0},
                         {2, {{"x", 1}}, "train", 105.0},
                         {3, {{"x", 1}}, "train", 110.0},
                         {4, {{"x", 1}}, "train", 111.0}};
  EXPECT_EQ(steps(run("rule r: when x > 0 after 10s cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{3, 4}));
}

TEST(Cooldown, Seconds) {
  std::vector<Obs> trace;
  std::int64_t step = 0;
  for (double t : {0.0, 2.0, 5.0, 6.0, 10.0, 11.0}) trace.push_back({step++, {{"x", 1}}, "train", t});
  // Fires at t=0, then the first t >= 5 (step 2), then t >= 10 (step 4).
  EXPECT_EQ(steps(run("rule r: when x > 0 cooldown 5s do log", trace)),
            (std::vector<std::int64_t>{0, 2, 4}));
}

// ---- stateful functions ------------------------------------------------------

TEST(Stateful, Prev) {
  EXPECT_EQ(values_of("prev(x)", series_x({1, 3, 6})), (StepValues{{2, 1}, {3, 3}}));
}

TEST(Stateful, EwmaSkipsNaN) {
  // s0 = 2, s1 = 0.5*4 + 0.5*2 = 3, s2 = 0.5*8 + 0.5*3 = 5.5.
  EXPECT_EQ(values_of("ewma(x, 0.5)", series_x({2, 4, 8})), (StepValues{{1, 2}, {2, 3}, {3, 5.5}}));
  // The NaN leaves the state at 2: then 0.5*4 + 0.5*2.
  EXPECT_EQ(values_of("ewma(x, 0.5)", series_x({2, nan, 4})), (StepValues{{1, 2}, {3, 3}}));
}

TEST(Stateful, Best) {
  EXPECT_EQ(values_of("best(x, \"min\")", series_x({3, 1, 2})),
            (StepValues{{1, 3}, {2, 1}, {3, 1}}));
  EXPECT_EQ(values_of("best(x, \"max\")", series_x({3, 1, 4})),
            (StepValues{{1, 3}, {2, 3}, {3, 4}}));
}

TEST(Stateful, StepsSinceBest) {
  EXPECT_EQ(values_of("steps_since_best(x, 0, \"min\")", series_x({3, 1, 2, 2, 0.5})),
            (StepValues{{1, 0}, {2, 0}, {3, 1}, {4, 2}, {5, 0}}));
  // min_delta 0.5: 2.8 is not below 3 - 0.5; 2.0 is.
  EXPECT_EQ(values_of("steps_since_best(x, 0.5, \"min\")", series_x({3, 2.8, 2.0})),
            (StepValues{{1, 0}, {2, 1}, {3, 0}}));
  EXPECT_EQ(values_of("steps_since_best(x, 0, \"max\")", series_x({1, 2, 2, 1})),
            (StepValues{{1, 0}, {2, 0}, {3, 1}, {4, 2}}));
}

TEST(Stateful, NaNInputYieldsNaNAndLeavesStateUnchanged) {
  // The evaluation semantics: "a NaN input yields NaN and leaves the state unchanged",
  // for every stateful function, prev included, and also before any number
  // was seen (the element then exists, with value NaN).
  auto trace = series_x({nan, 2, nan, 4});
  EXPECT_EQ(steps(run("rule r: when is_nan(ewma(x, 0.5)) cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(steps(run("rule r: when is_nan(best(x, \"min\")) cooldown 1 samples do log", trace)),
            (std::vector<std::int64_t>{1, 3}));
  // prev over 1, NaN, 4: NaN at the NaN sample; at step 3 the state is still
  // 1 (the NaN did not replace it).
  auto trace2 = series_x({1, nan, 4});
  EXPECT_EQ(steps(run("rule r: when is_nan(prev(x)) cooldown 1 samples do log", trace2)),
            (std::vector<std::int64_t>{2}));
  EXPECT_EQ(values_of("prev(x)", trace2), (StepValues{{3, 1}}));
}

TEST(Stateful, UpdatedRegardlessOfRuleGating) {
  // The rule is gated to eval observations, but prev(x) follows every sample
  // of x: at the eval step 3, prev is the train sample of step 2.
  std::vector<Obs> trace{{1, {{"x", 1}}}, {2, {{"x", 2}}}, {3, {{"x", 3}}, "eval"}};
  auto fired = run("rule r: when prev(x) > 0 in eval cooldown 1 samples do log", trace);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 3);
  EXPECT_EQ(fired[0].value, 2.0);
}

// ---- templates, params, lets, names -----------------------------------------

TEST(Template, UseOverridesNameSeverityActionsAndTemplateDoesNotRun) {
  // median of the last 3: loss 1,1,1,100 would make the template fire by
  // itself (100 > 5 * 1); it must not, as a template does not run. val_loss
  // 1,1,1,3: 3 > 2 * median(1,1,3) = 2 fires as val_spike at step 4.
  std::string text =
      "rule spike(metric = loss, k = 5, window = 3):\n"
      "  when metric > k * median(metric[window]) do log\n"
      "use spike(metric = val_loss, k = 2) as val_spike severity critical do stop(reason = \"spike\")\n";
  std::vector<Obs> trace;
  std::vector<double> loss{1, 1, 1, 100}, val{1, 1, 1, 3};
  for (std::size_t i = 0; i < 4; ++i)
    trace.push_back({static_cast<std::int64_t>(i + 1), {{"loss", loss[i]}, {"val_loss", val[i]}}});
  auto program = compile(text);
  ASSERT_EQ(program.rules().size(), 1u);
  EXPECT_EQ(program.rules()[0].name, "val_spike");
  auto fired = run(text, trace);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].rule, "val_spike");
  EXPECT_EQ(fired[0].step, 4);
  EXPECT_EQ(fired[0].severity, vigil::Severity::critical);
  EXPECT_EQ(fired[0].actions, (std::vector<std::string>{"stop"}));
  EXPECT_EQ(fired[0].value, 3.0);
}

TEST(Template, UseWithoutAliasIsNamedAfterTheTemplate) {
  std::string text =
      "rule high(metric = loss, limit = 2):\n  when metric > limit do log\n"
      "use high(limit = 4)\n";
  auto fired = run(text, series_x({1}));  // x is not loss: nothing
  EXPECT_TRUE(fired.empty());
  std::vector<Obs> trace{{1, {{"loss", 3}}}, {2, {{"loss", 5}}}};
  EXPECT_EQ(steps(run(text, trace), "high"), (std::vector<std::int64_t>{2}));
}

TEST(Param, CompileOptionOverrideChangesFiring) {
  std::string text = "param limit = 5\nrule r: when x > limit cooldown 1 samples do log\n";
  auto trace = series_x({1, 3, 6});
  EXPECT_EQ(steps(run(text, trace)), (std::vector<std::int64_t>{3}));
  vigil::CompileOptions options;
  options.params["limit"] = 2.0;
  EXPECT_EQ(steps(run(text, trace, options)), (std::vector<std::int64_t>{2, 3}));
}

TEST(Let, NamedExpression) {
  std::string text = "let doubled = x * 2\nrule r: when doubled > 3 cooldown 1 samples do log\n";
  auto fired = run(text, series_x({1, 2, 1.5, 1.75}));
  EXPECT_EQ(steps(fired), (std::vector<std::int64_t>{2, 4}));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].value, 4.0);
  EXPECT_EQ(fired[1].value, 3.5);
}

TEST(Names, AnonymousRuleIsFileColonLineOfWhen) {
  std::string text = "# header\n\nwhen x > 1 do log\nrule named: when x > 1 do log\n";
  auto program = compile(text, {}, "t.rules");
  ASSERT_EQ(program.rules().size(), 2u);
  EXPECT_EQ(program.rules()[0].name, "t.rules:3");
  vigil::Engine engine(program, recording());
  auto fired = run(engine, series_x({2}));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].rule, "t.rules:3");
  EXPECT_EQ(fired[1].rule, "named");
  EXPECT_EQ(fired[0].severity, vigil::Severity::warning);
}

// ---- firing contents ---------------------------------------------------------

TEST(Firing, ValueIsLhsOfDecidingComparisonAndPendingSince) {
  auto fired = run("rule r: when x + 1 > 2 for 3 samples do log", series_x({2, 3, 4}, 5));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].step, 7);
  EXPECT_EQ(fired[0].value, 5.0);
  EXPECT_EQ(fired[0].pending_since, 5);
  // For `A and B` the value comes from A, even though B decides nothing else.
  std::vector<Obs> trace{{1, {{"x", 2}, {"y", 9}}}};
  auto both = run("rule r: when x * 10 > 1 and y > 1 do log", trace);
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(both[0].value, 20.0);
  // For `A or B` it comes from the side that holds: B when only B does, A
  // when both do.
  auto either = run("rule r: when x > 100 or y > 1 do log", trace);
  ASSERT_EQ(either.size(), 1u);
  EXPECT_EQ(either[0].value, 9.0);
  auto both_hold = run("rule r: when x > 1 or y > 1 do log", trace);
  ASSERT_EQ(both_hold.size(), 1u);
  EXPECT_EQ(both_hold[0].value, 2.0);
  // default(x, v) takes the value of the side it uses; a condition that is
  // no comparison (is_nan) has none.
  auto fallback = run("rule r: when default(z > 1, false) or y > 1 do log", trace);
  ASSERT_EQ(fallback.size(), 1u);
  EXPECT_EQ(fallback[0].value, 9.0);
  auto no_value = run("rule r: when is_nan(x) or x > 1 do log", trace);
  ASSERT_EQ(no_value.size(), 1u);
  EXPECT_EQ(no_value[0].value, 2.0);
  std::vector<Obs> nan_trace{{1, {{"x", nan}}}};
  auto nan_side = run("rule r: when is_nan(x) or x > 1 do log", nan_trace);
  ASSERT_EQ(nan_side.size(), 1u);
  EXPECT_FALSE(nan_side[0].value.has_value());
}

TEST(Firing, RulesFireInProgramOrder) {
  auto fired = run("rule b: when x > 0 do log\nrule a: when x > 0 do log\n", series_x({1}));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].rule, "b");
  EXPECT_EQ(fired[1].rule, "a");
}

// ---- engine state ------------------------------------------------------------

TEST(State, SaveRestoreContinuesExactly) {
  std::string text =
      "rule f: when x > 1 for 3 samples cooldown 2 samples do log\n"
      "rule m: when mean(x[4]) > 1.5 do log\n"
      "rule p: when x > prev(x) for 2 samples do log\n"
      "rule e: when ewma(x, 0.3) > 1.2 every 2 steps do log\n"
      "rule s: when sum(x[5 steps]) > 6 after 3 samples do log\n";
  std::vector<Obs> trace;
  std::vector<double> xs{0, 2, 2, 3, 4, 1, 2, 2, 5, 6, 7, 0, 2, 3, 4, 5, 1, 1, 2, 3};
  for (std::size_t i = 0; i < xs.size(); ++i)
    trace.push_back({static_cast<std::int64_t>(i * 2), {{"x", xs[i]}}});
  auto program = compile(text);
  vigil::Engine whole(program, recording());
  auto expected = run(whole, trace);
  ASSERT_FALSE(expected.empty());

  std::vector<Obs> first(trace.begin(), trace.begin() + 9), rest(trace.begin() + 9, trace.end());
  vigil::Engine a(program, recording());
  auto got = run(a, first);
  std::string bytes = a.save_state();
  vigil::Engine b(program, recording());
  b.restore_state(bytes);
  auto got_rest = run(b, rest);
  got.insert(got.end(), got_rest.begin(), got_rest.end());
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].rule, expected[i].rule) << i;
    EXPECT_EQ(got[i].step, expected[i].step) << i;
    EXPECT_EQ(got[i].value, expected[i].value) << i;
    EXPECT_EQ(got[i].pending_since, expected[i].pending_since) << i;
  }
  EXPECT_THROW(b.restore_state("not state bytes"), vigil::Error);
}

// ---- actions -----------------------------------------------------------------

TEST(Actions, UnboundActionThrowsWhenPolicyIsError) {
  auto program = compile("rule r: when x > 1 do reduce_lr(factor = 0.5)\n");
  vigil::Engine engine(program);  // default policy: error
  EXPECT_FALSE(engine.unbound_actions().empty());
  EXPECT_THROW(engine.observe(1, {{"x", 2.0}}), vigil::Error);
}

TEST(Actions, BoundCallbacksReceiveArguments) {
  auto program = compile(
      "rule r: when x > 1 do reduce_lr(factor = 0.5), log\n"
      "rule s: when x > 5 do reduce_lr(factor = 0.25)\n");
  vigil::Engine engine(program);
  std::vector<std::pair<std::string, double>> calls;
  engine.on("reduce_lr", [&](const vigil::Firing& f, const vigil::Action& a) {
    calls.emplace_back(f.rule_name(), a.number("factor", -1));
  });
  engine.on("log", [&](const vigil::Firing& f, const vigil::Action&) {
    calls.emplace_back("log:" + f.rule_name(), 0);
  });
  EXPECT_TRUE(engine.unbound_actions().empty());
  engine.observe(1, {{"x", 0.0}});
  EXPECT_TRUE(calls.empty());
  auto fired = engine.observe(2, {{"x", 6.0}});
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(calls, (std::vector<std::pair<std::string, double>>{
                       {"r", 0.5}, {"log:r", 0}, {"s", 0.25}}));
  EXPECT_EQ(engine.stats().firings, 2u);
  EXPECT_EQ(engine.stats().observations, 2u);
}

TEST(Engine, OutOfOrderObservationIsIgnoredAndCounted) {
  vigil::Engine engine(compile("rule r: when x > 1 cooldown 1 samples do log\n"),
                       recording());
  EXPECT_EQ(engine.observe(5, {{"x", 2.0}}).size(), 1u);
  EXPECT_EQ(engine.observe(4, {{"x", 2.0}}).size(), 0u);
  EXPECT_EQ(engine.stats().out_of_order, 1u);
  // Another mode has its own step order.
  EXPECT_EQ(engine.observe(1, {{"x", 2.0}}, {.mode = "eval"}).size(), 1u);
  EXPECT_EQ(engine.stats().out_of_order, 1u);
}

}  // namespace
