// The compiler end to end (checker + planner) through the public API:
// what the plan shares and folds, how errors are collected, how imports and
// the standard library resolve, and that hostile input gives diagnostics,
// never a crash.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace {

vigil::Program compile_ok(std::string_view text) {
  auto r = vigil::compile_string(text, "t.rules");
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
  if (!r.ok()) throw std::runtime_error("compile failed");
  return *r.program;
}

std::size_t error_count(const vigil::CompileResult& r) {
  std::size_t n = 0;
  for (const auto& d : r.diagnostics) n += d.level == vigil::DiagLevel::error;
  return n;
}

TEST(Planner, SharesCommonSubexpressionsAcrossRules) {
  auto one = compile_ok("when loss > 2 * mean(loss[10]) do log");
  // The second rule repeats the whole comparison and adds `and x > 1`:
  // only x, 1, gt and `and` are new.
  auto two = compile_ok(
      "when loss > 2 * mean(loss[10]) do log\n"
      "when loss > 2 * mean(loss[10]) and x > 1 do log\n");
  EXPECT_EQ(one.plan_size(), 5u);  // loss, 2, mean(loss[10]), *, >
  EXPECT_EQ(two.plan_size(), one.plan_size() + 4);
}

TEST(Planner, FoldsConstants) {
  // 2 * 3 + 1 folds to one constant: plan = loss, 7, >.
  auto p = compile_ok("when loss > 2 * 3 + 1 do log");
  EXPECT_EQ(p.plan_size(), 3u);
  // Folded value is used: 7 does not fire, 8 does.
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  EXPECT_TRUE(e.observe(0, {{"loss", 7}}).empty());
  EXPECT_EQ(e.observe(1, {{"loss", 8}}).size(), 1u);
}

TEST(Planner, ParamsFoldIntoThePlanAndEngineParamsRecompile) {
  auto p = compile_ok("param k = 5\nwhen loss > k do log");
  vigil::Engine plain(p, {.unbound = vigil::UnboundActions::record});
  vigil::Engine tuned(p, {.params = {{"k", 1.0}}, .unbound = vigil::UnboundActions::record});
  EXPECT_TRUE(plain.observe(0, {{"loss", 3}}).empty());
  EXPECT_EQ(tuned.observe(0, {{"loss", 3}}).size(), 1u);
  EXPECT_EQ(std::get<double>(tuned.program().params().at("k")), 1.0);
  EXPECT_THROW(vigil::Engine(p, {.params = {{"nope", 1.0}}}), vigil::Error);
}

TEST(Checker, ReportsEveryErrorOfEveryStatement) {
  auto r = vigil::compile_string(
      "when meen(loss[5]) > 1 do log\n"
      "when loss > 1 severity hgih do log\n"
      "when loss do stoop\n"
      "when ewma(loss) > 1 do log\n",
      "t.rules");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(error_count(r), 5u) << r.format_diagnostics();
}

TEST(Checker, StopsAtTheErrorCap) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += "when meen(loss[5]) > 1 do log\n";
  vigil::CompileOptions options;
  options.max_errors = 20;
  auto r = vigil::compile_string(text, "t.rules", options);
  EXPECT_EQ(error_count(r), 20u);
}

TEST(Checker, SeriesUsesNameWhereEachSeriesIsRead) {
  auto p = compile_ok("let g = grad_norm(layer=~\"conv.*\")\nwhen g > 1 and max(loss[5]) > 2 do log");
  std::vector<std::string> names;
  for (const auto& u : p.series_uses()) names.push_back(u.name);
  EXPECT_EQ(names, (std::vector<std::string>{"grad_norm", "loss"}));
}

TEST(Checker, WarnsWhenASeriesNameIsATypoOfADeclaredName) {
  auto r = vigil::compile_string("param lr_factor = 0.5\nwhen loss > lr_factr do log", "t.rules");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u);
  EXPECT_EQ(r.diagnostics[0].level, vigil::DiagLevel::warning);
  EXPECT_EQ(r.diagnostics[0].suggestion, "lr_factor");
}

TEST(Checker, UnknownParamOverrideIsAnError) {
  vigil::CompileOptions options;
  options.params["windw"] = 3.0;
  auto r = vigil::compile_string("param window = 10\nwhen mean(loss[window]) > 1 do log", "t.rules",
                                 options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.diagnostics[0].suggestion, "window");
}

TEST(Checker, StandardLibraryTemplatesAndActions) {
  auto p = compile_ok(
      "use std.loss_spike(metric = val_loss, k = 3, window = 4, n = 1) as vs\n"
      "use std.terminate_on_nan(metric = loss)\n");
  ASSERT_EQ(p.rules().size(), 2u);
  EXPECT_EQ(p.rules()[0].name, "vs");
  EXPECT_EQ(p.rules()[1].name, "terminate_on_nan");
  EXPECT_EQ(p.rules()[1].severity, vigil::Severity::critical);
  ASSERT_EQ(p.rules()[1].actions.size(), 1u);
  EXPECT_EQ(p.rules()[1].actions[0].name, "stop");
  // Defaults of standard actions are filled in.
  auto q = compile_ok("when loss > 1 do reduce_lr");
  EXPECT_EQ(q.rules()[0].actions[0].number("factor"), 0.1);
  EXPECT_EQ(q.rules()[0].actions[0].number("min_lr", -1), 0.0);
}

// The standard library's template files are parsed on first use, once per
// process (interp/checker.cpp). Each test runs in its own process, so here
// the first uses race: threads compiling files that use templates of
// different standard files, and one that uses none, must get what the same
// compiles give one after another.
TEST(Checker, StandardTemplatesLoadOnFirstUseFromManyThreads) {
  const std::vector<std::string> sources = {
      "use std.loss_spike(metric = val_loss, k = 3, window = 4, n = 1) as vs\n",
      "use std.terminate_on_nan(metric = loss)\nuse std.spot_preemption()\n",
      "use std.vanishing_gradient()\nuse std.cusum_shift(metric = loss)\n",
      "when loss > 1 do reduce_lr\n",
      "use loss_spike(metric = loss)\n",  // an error: the user module has no such template
  };
  auto signature = [](const std::string& text) {
    auto r = vigil::compile_string(text, "t.rules");
    std::string out;
    for (const auto& d : r.diagnostics) out += d.message + " [" + d.suggestion + "]\n";
    if (!r.program) return out;
    for (const auto& rule : r.program->rules()) {
      out += rule.name + " " + std::string(vigil::to_string(rule.severity)) + " " +
             rule.template_name + " reads";
      for (const auto& name : rule.reads) out += " " + name;
      for (const auto& a : rule.actions) out += " do " + a.name;
      out += "\n";
    }
    return out;
  };
  std::vector<std::string> concurrent(sources.size());
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < sources.size(); ++i)
      threads.emplace_back([&, i] { concurrent[i] = signature(sources[i]); });
    for (auto& t : threads) t.join();
  }
  for (std::size_t i = 0; i < sources.size(); ++i)
    EXPECT_EQ(concurrent[i], signature(sources[i])) << sources[i];
  EXPECT_NE(concurrent[0].find("vs warning loss_spike reads val_loss do alert"), std::string::npos)
      << concurrent[0];
  EXPECT_NE(concurrent[2].find("cusum_shift"), std::string::npos) << concurrent[2];
  // An unknown user template that the standard library has: the suggestion
  // needs the template files even though no rule loaded them.
  EXPECT_NE(concurrent[4].find("[std.loss_spike]"), std::string::npos) << concurrent[4];
}

TEST(Checker, ImportsResolveRelativeToTheImportingFileAndDetectCycles) {
  namespace fs = std::filesystem;
  const fs::path dir = vigil::test::make_temp_dir("import");
  fs::create_directories(dir / "team");
  std::ofstream(dir / "main.rules") << "import \"team/common.rules\"\nuse spike(k = 2) do log\n";
  std::ofstream(dir / "team" / "common.rules")
      << "import \"more.rules\"\nrule spike(metric = loss, k = 5):\n  when metric > k do alert\n";
  std::ofstream(dir / "team" / "more.rules") << "when grad_norm > 10 do log\n";
  auto r = vigil::compile_file((dir / "main.rules").string());
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  ASSERT_EQ(r.program->rules().size(), 2u);  // the imported anonymous rule runs too
  EXPECT_EQ(r.program->rules()[1].name, "spike");

  std::ofstream(dir / "team" / "more.rules") << "import \"common.rules\"\n";
  auto cyc = vigil::compile_file((dir / "main.rules").string());
  ASSERT_FALSE(cyc.ok());
  EXPECT_EQ(cyc.diagnostics[0].code, "import-cycle") << cyc.format_diagnostics();
  fs::remove_all(dir);
}

TEST(Checker, MissingRuleFileIsADiagnostic) {
  auto r = vigil::compile_file("/nonexistent/x.rules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("cannot read rule file"), std::string::npos);
}

// ---- hostile input: errors, never crashes ---------------------------------

TEST(Robustness, HundredThousandNestedParentheses) {
  std::string text = "when " + std::string(100000, '(') + "loss" + std::string(100000, ')') +
                     " > 1 do log";
  auto r = vigil::compile_string(text, "deep.rules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("nested too deeply"), std::string::npos);
}

TEST(Robustness, HugeNumberIsAnError) {
  auto r = vigil::compile_string("when loss > 1e999999 do log", "big.rules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("out of range"), std::string::npos);
}

TEST(Robustness, OneMegabyteRuleFileCompiles) {
  std::string text;
  int n = 0;
  while (text.size() < (1u << 20)) {
    text += "rule r" + std::to_string(n) + " \"generated\":\n    when loss{run=\"" +
            std::to_string(n % 50) + "\"} > " + std::to_string(n) +
            " * median(loss[" + std::to_string(1 + n % 20) + "]) for 3 samples\n    do log\n";
    ++n;
  }
  auto r = vigil::compile_string(text, "big.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics().substr(0, 500);
  EXPECT_EQ(r.program->rules().size(), static_cast<std::size_t>(n));
}

TEST(Robustness, LongLetChainsAreBoundedNotRecursedForever) {
  std::string text = "let a0 = loss\n";
  for (int i = 1; i < 5000; ++i)
    text += "let a" + std::to_string(i) + " = a" + std::to_string(i - 1) + " + 1\n";
  text += "when a4999 > 1 do log\n";
  auto r = vigil::compile_string(text, "lets.rules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("nested too deeply"), std::string::npos);
}

TEST(Robustness, EngineStateBytesAreValidated) {
  auto p = compile_ok("when mean(loss[3]) > 1 do log");
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  e.observe(0, {{"loss", 1}});
  std::string state = e.save_state();
  vigil::Engine other(p, {.unbound = vigil::UnboundActions::record});
  EXPECT_THROW(other.restore_state("garbage"), vigil::Error);
  for (std::size_t cut = 0; cut < state.size(); cut += 7)
    EXPECT_THROW(other.restore_state(state.substr(0, cut)), vigil::Error) << cut;
  auto different = compile_ok("when mean(loss[4]) > 1 do log\nwhen x > 1 do log");
  vigil::Engine third(different, {.unbound = vigil::UnboundActions::record});
  EXPECT_THROW(third.restore_state(state), vigil::Error);
  other.restore_state(state);  // the intact bytes restore
  EXPECT_EQ(other.stats().observations, 1u);
}

TEST(SeriesKeys, ParseAndFormatRoundTrip) {
  std::string name;
  vigil::Labels labels;
  ASSERT_TRUE(vigil::parse_series_key(R"(grad_norm{layer="conv1.weight",rank="0"})", name, labels));
  EXPECT_EQ(name, "grad_norm");
  ASSERT_EQ(labels.size(), 2u);
  EXPECT_EQ(labels[0], (std::pair<std::string, std::string>{"layer", "conv1.weight"}));
  // Labels are sorted; quotes and backslashes escaped.
  ASSERT_TRUE(vigil::parse_series_key(R"(x{b="q\"uote",a="back\\slash"})", name, labels));
  EXPECT_EQ(vigil::format_series_key(name, labels), R"(x{a="back\\slash",b="q\"uote"})");
  for (const char* bad : {"", "{a=\"b\"}", "x{a=b}", "x{a=\"b\"", "x{a=\"b\",a=\"c\"}", "x{=\"b\"}"})
    EXPECT_FALSE(vigil::parse_series_key(bad, name, labels)) << bad;
}

TEST(Values, ParseValue) {
  EXPECT_EQ(std::get<double>(vigil::parse_value("0.5")), 0.5);
  EXPECT_EQ(std::get<double>(vigil::parse_value("5%")), 0.05);
  EXPECT_EQ(std::get<bool>(vigil::parse_value("true")), true);
  EXPECT_EQ(std::get<std::string>(vigil::parse_value("val_loss")), "val_loss");
  EXPECT_EQ(std::get<std::string>(vigil::parse_value("1e999999")), "1e999999");
}

TEST(Explain, ARuleMadeByUseNamesItsArgumentsFirst) {
  auto p = compile_ok("rule spike(metric = loss, k = 5):\n  when metric > k * median(metric[3]) do log\n"
                      "use spike(metric = val_loss, k = 2) as val_spike\n");
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  for (double v : {1.0, 1.0, 1.0}) e.observe(1, {{"val_loss", v}});
  auto fs = e.observe(2, {{"val_loss", 9}});
  ASSERT_EQ(fs.size(), 1u);
  const std::string text = e.explain(fs[0]);
  EXPECT_TRUE(text.starts_with("    use spike(metric = val_loss, k = 2) as val_spike (t.rules:3)\n"))
      << text;
  EXPECT_NE(text.find("median(metric[3]) over val_loss: 3 samples [1@1 1@1 9@2]"), std::string::npos)
      << text;
}

TEST(Explain, ShowsWindowsAndThePendingTimeline) {
  auto p = compile_ok("rule r:\n  when loss > 2 * mean(loss[3]) for 2 samples\n  do log");
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  e.observe(1, {{"loss", 1}});
  e.observe(2, {{"loss", 1}});
  e.observe(3, {{"loss", 1}});
  e.observe(4, {{"loss", 10}});  // 10 > 2 * 4
  auto fs = e.observe(5, {{"loss", 40}});  // 40 > 2 * 17
  ASSERT_EQ(fs.size(), 1u);
  std::string text = e.explain(fs[0]);
  EXPECT_NE(text.find("loss = 40 (step 5)"), std::string::npos) << text;
  EXPECT_NE(text.find("[1@3 10@4 40@5]"), std::string::npos) << text;
  EXPECT_NE(text.find("pending since step 4: 2 consecutive true evaluations (4, 5)"),
            std::string::npos)
      << text;
}

// The first number after `key` in `text` (NaN if absent).
double number_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  if (at == std::string::npos) return std::nan("");
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

TEST(Explain, AnEwmaChartFiringShowsItsEwmaAndControlLimits) {
  // The chart's verdict alone (value=1) does not say why: explain must show
  // the EWMA and the limits it left, recomputed here from the definition
  // (Roberts' chart over the samples before the current one).
  auto p = compile_ok("rule shift:\n  when ewma_chart(loss, 0.5, 2) do log\n");
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  const std::vector<double> xs = {1, 2, 1, 2, 1.5, 1, 2, 9};
  const double lambda = 0.5, L = 2;
  double z = 0, mean = 0, m2 = 0, centre = 0, width = 0;
  std::optional<std::size_t> expected_at;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    z = i == 0 ? xs[0] : lambda * xs[i] + (1 - lambda) * z;
    if (i >= 2 && !expected_at) {
      mean = 0, m2 = 0;
      for (std::size_t j = 0; j < i; ++j) mean += xs[j] / static_cast<double>(i);
      for (std::size_t j = 0; j < i; ++j) m2 += (xs[j] - mean) * (xs[j] - mean);
      const double t = static_cast<double>(i);
      centre = mean;
      width = L * std::sqrt(m2 / t) *
              std::sqrt(lambda / (2 - lambda) * (1 - std::pow(1 - lambda, 2 * t)));
      if (std::abs(z - centre) > width) expected_at = i;
    }
    auto fs = e.observe(static_cast<std::int64_t>(i), {{"loss", xs[i]}});
    if (expected_at == i) {
      ASSERT_EQ(fs.size(), 1u) << "step " << i;
      const std::string text = e.explain(fs[0]);
      const std::string line_key = "ewma_chart(loss, 0.5, 2) over loss: EWMA = ";
      ASSERT_NE(text.find(line_key), std::string::npos) << text;
      EXPECT_NEAR(number_after(text, line_key), z, 1e-4 * std::abs(z)) << text;
      EXPECT_NEAR(number_after(text, "mean +- L*sigma_ewma = "), centre, 1e-4 * centre) << text;
      const std::string chart = text.substr(text.find("L*sigma_ewma = "));
      EXPECT_NEAR(number_after(chart, " +- "), width, 1e-4 * width) << text;
      const std::string limits = text.substr(text.find("= ["));
      EXPECT_NEAR(number_after(limits, "= ["), centre - width, 1e-4 * centre) << text;
      EXPECT_NEAR(number_after(limits, ", "), centre + width, 1e-4 * centre) << text;
      EXPECT_NEAR(number_after(text, "(L = "), L, 0) << text;
      return;
    }
    EXPECT_TRUE(fs.empty()) << "step " << i;
  }
  FAIL() << "the independent computation expected a firing";
}

TEST(Explain, ACusumFiringShowsItsStatisticAndThreshold) {
  auto p = compile_ok("rule shift:\n  when cusum(loss, 0.5, 3) do log\n");
  vigil::Engine e(p, {.unbound = vigil::UnboundActions::record});
  const std::vector<double> xs = {1, 2, 1, 2, 30};
  // Page's tabular CUSUM of each sample standardised by the samples before it.
  double up = 0, down = 0;
  for (std::size_t i = 2; i < xs.size(); ++i) {
    double mean = 0, m2 = 0;
    for (std::size_t j = 0; j < i; ++j) mean += xs[j] / static_cast<double>(i);
    for (std::size_t j = 0; j < i; ++j) m2 += (xs[j] - mean) * (xs[j] - mean);
    const double z = (xs[i] - mean) / std::sqrt(m2 / static_cast<double>(i));
    up = std::max(0.0, up + z - 0.5);
    down = std::max(0.0, down - z - 0.5);
  }
  for (std::size_t i = 0; i + 1 < xs.size(); ++i)
    EXPECT_TRUE(e.observe(static_cast<std::int64_t>(i), {{"loss", xs[i]}}).empty());
  auto fs = e.observe(static_cast<std::int64_t>(xs.size() - 1), {{"loss", xs.back()}});
  ASSERT_EQ(fs.size(), 1u);
  const std::string text = e.explain(fs[0]);
  EXPECT_NEAR(number_after(text, "cusum(loss, 0.5, 3) over loss: S+ = "), up, 1e-4 * up) << text;
  EXPECT_NEAR(number_after(text, "S- = "), down, 1e-4) << text;
  EXPECT_NEAR(number_after(text, "threshold h = "), 3, 0) << text;
}

}  // namespace

namespace {

TEST(Durations, EpochsAreMeasuredByTheEpochSeries) {
  auto r = vigil::compile_string("when loss > 1 for 2 epochs do log", "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  // True from step 0 (epoch 0.0); the span reaches 2 epochs at epoch 2.0.
  std::vector<std::int64_t> fired;
  const double epochs[] = {0, 0.5, 1, 1.5, 2, 2.5};
  for (int s = 0; s < 6; ++s)
    for (const auto& f : e.observe(s, {{"epoch", epochs[s]}, {"loss", 3}})) fired.push_back(f.step);
  EXPECT_EQ(fired, (std::vector<std::int64_t>{4}));
}

}  // namespace

namespace {

TEST(HostMisuse, ObserveFromACallbackIsAnErrorNotACrash) {
  auto r = vigil::compile_string("when loss > 1 do stop", "t.rules");
  ASSERT_TRUE(r.ok());
  vigil::Engine e(*r.program);
  bool threw = false;
  e.on("stop", [&](const vigil::Firing&, const vigil::Action&) {
    try {
      e.observe(99, {{"loss", 5}});
    } catch (const vigil::Error&) {
      threw = true;
    }
  });
  EXPECT_EQ(e.observe(1, {{"loss", 5}}).size(), 1u);
  EXPECT_TRUE(threw);
  EXPECT_EQ(e.observe(2, {{"loss", 0}}).size(), 0u);  // usable afterwards
}

TEST(HostMisuse, ExtremeStepNumbersDoNotOverflow) {
  auto r = vigil::compile_string(
      "when loss > 1 for 10 steps cooldown 5 steps do log\n"
      "when sum(loss[100 steps]) > 1 every 3 steps do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok());
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const std::int64_t steps[] = {INT64_MIN, INT64_MIN + 1, -1, 0, INT64_MAX - 1, INT64_MAX};
  std::size_t fired = 0;
  for (auto s : steps) fired += e.observe(s, {{"loss", 5}}).size();
  // for 10 steps: met once the span from INT64_MIN reaches 10 (at -1); the
  // sum rule fires at the first evaluation and its windows stay defined.
  EXPECT_GE(fired, 2u);
  EXPECT_EQ(e.stats().out_of_order, 0u);
}

}  // namespace

namespace {

TEST(Aliases, TraceSeriesAreReadUnderTheirAliasWithLabelsKept) {
  auto r = vigil::compile_string(
      "alias loss = `train/loss`, train_loss\n"
      "alias grad_norm = `grad/norm`\n"
      "when loss > 1 do log\n"
      "when grad_norm{layer=\"fc\"} > 5 do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  EXPECT_EQ(r.program->resolve_alias("train/loss"), "loss");
  EXPECT_EQ(r.program->resolve_alias("val_loss"), "val_loss");
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  EXPECT_EQ(e.observe(1, {{"train/loss", 2}}).size(), 1u);
  EXPECT_EQ(e.observe(2, {{"train/loss", 0}}).size(), 0u);  // resets
  // Issue 11 §4: two trace series landing on `loss` are not merged. A second
  // alias to appear is ignored (the first keeps the name) ...
  EXPECT_EQ(e.observe(3, {{"train_loss", 5}}).size(), 0u);
  EXPECT_EQ(e.series("train_loss"), std::nullopt);
  // ... and the trace's own `loss` beats an alias from its first appearance.
  EXPECT_EQ(e.observe(4, {{"loss", 3}}).size(), 1u);
  EXPECT_EQ(e.series("train/loss"), std::nullopt);
  auto fs = e.observe(5, {{"grad/norm{layer=\"fc\"}", 9}});
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].labels->at(0).second, "fc");
}

TEST(Aliases, OptionsOverrideFileAliasesAndConflictsAreErrors) {
  vigil::CompileOptions options;
  options.aliases = {{"tl", "loss"}, {"train/loss", "other"}};
  auto r = vigil::compile_string("alias loss = `train/loss`\nwhen loss > 1 do log", "t.rules", options);
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  EXPECT_EQ(r.program->resolve_alias("tl"), "loss");
  EXPECT_EQ(r.program->resolve_alias("train/loss"), "other");
  auto bad = vigil::compile_string("alias loss = x\nalias val_loss = x\n", "t.rules");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.format_diagnostics().find("series 'x' is already an alias of 'loss'"),
            std::string::npos)
      << bad.format_diagnostics();
}

}  // namespace

namespace {

std::vector<std::pair<std::int64_t, std::string>> fired_actions(vigil::Engine& e,
                                                                 const std::vector<double>& losses) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  for (std::size_t i = 0; i < losses.size(); ++i)
    for (const auto& f : e.observe(static_cast<std::int64_t>(i), {{"loss", losses[i]}})) {
      std::string names;
      for (const auto& a : *f.actions) names += (names.empty() ? "" : ",") + a.name;
      out.emplace_back(f.step, names + "@" + std::to_string(f.escalation));
    }
  return out;
}

TEST(Escalation, RepeatedFiringsWithinTheSpanEscalate) {
  auto r = vigil::compile_string(
      "rule diverging:\n"
      "    when loss > 10\n"
      "    do rollback, reduce_lr(factor = 0.5)\n"
      "    escalate after 2 within 5 steps do stop(\"keeps diverging\")\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  ASSERT_EQ(r.program->rules()[0].escalations.size(), 1u);
  EXPECT_EQ(r.program->rules()[0].escalations[0].after, 2u);
  EXPECT_EQ(r.program->rules()[0].escalations[0].unit, "steps");
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  // Edge-triggered firings at 1, 3, 5 (each within 5 steps of the last): the
  // third has two earlier firings in its chain and escalates. At 12 the chain
  // is broken (7 steps after 5): back to the rule's own actions.
  const std::vector<double> loss = {0, 11, 0, 11, 0, 11, 0, 0, 0, 0, 0, 0, 11};
  EXPECT_EQ(fired_actions(e, loss),
            (std::vector<std::pair<std::int64_t, std::string>>{{1, "rollback,reduce_lr@0"},
                                                               {3, "rollback,reduce_lr@0"},
                                                               {5, "stop@1"},
                                                               {12, "rollback,reduce_lr@0"}}));
}

TEST(Escalation, SeveralLevelsAndUseOverridesAndUnboundChecks) {
  auto r = vigil::compile_string(
      "rule spike(k = 10):\n"
      "    when loss > k do log\n"
      "    escalate after 1 within 3 samples do alert(\"again\")\n"
      "use spike(k = 5) as s escalate after 1 within 10 steps do checkpoint\n"
      "    escalate after 2 within 10 steps do stop\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  const auto& info = r.program->rules()[0];
  ASSERT_EQ(info.escalations.size(), 2u);
  EXPECT_EQ(info.escalations[0].actions[0].name, "checkpoint");
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const std::vector<double> loss = {6, 0, 6, 0, 6, 0, 6};
  EXPECT_EQ(fired_actions(e, loss),
            (std::vector<std::pair<std::int64_t, std::string>>{
                {0, "log@0"}, {2, "checkpoint@1"}, {4, "stop@2"}, {6, "stop@2"}}));
  // Escalation actions must be bound too.
  vigil::Engine strict(*r.program);
  strict.on("log", [](auto&, auto&) {});
  strict.on("checkpoint", [](auto&, auto&) {});
  const auto unbound = strict.unbound_actions();
  ASSERT_EQ(unbound.size(), 1u);
  EXPECT_NE(unbound[0].message.find("'stop'"), std::string::npos);
}

TEST(Escalation, CountMustBeAWholeNumber) {
  auto r = vigil::compile_string("when loss > 1 do log escalate after 0.5 within 3 steps do stop",
                                 "t.rules");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("whole number of earlier firings"), std::string::npos);
}

}  // namespace

namespace {

TEST(TensorStatMembers, TemplatesTakeATensorAndReadAnyOfItsStats) {
  auto r = vigil::compile_string(
      "rule vanishing(tensor = grad, threshold = 1e-7):\n"
      "    when tensor.abs_mean < threshold do alert\n"
      "use vanishing(tensor = weight{layer=~\"fc.*\"}, threshold = 0.5) as tiny_weights\n"
      "when grad{layer=\"conv1\"}.norm > 2 * median(grad{layer=\"conv1\"}.norm[3]) do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  std::vector<std::string> uses;
  for (const auto& u : r.program->series_uses()) uses.push_back(u.name);
  EXPECT_EQ(uses, (std::vector<std::string>{"weight_abs_mean", "grad_norm", "grad_norm"}));
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  const auto w = *e.tensor("weight{layer=\"fc1\"}");
  EXPECT_EQ(e.tensor_stats_used(w), vigil::stat_bit(vigil::Stat::abs_mean));
  auto fs = e.observe(1, {{"weight_abs_mean{layer=\"fc1\"}", 0.1}, {"weight_abs_mean{layer=\"x\"}", 0.1}});
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].rule_name(), "tiny_weights");
  EXPECT_EQ(fs[0].labels->at(0).second, "fc1");
}

}  // namespace

namespace {

TEST(RuleInfo, ReadsListsTheSeriesOfTheCondition) {
  auto r = vigil::compile_string(
      "rule spike(metric = loss, k = 2): when metric > k * median(metric[5]) do log\n"
      "use spike(metric = val_loss) as vs\n"
      "when grad.norm > 1 and lr > 0 do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  EXPECT_EQ(r.program->rules()[0].reads, (std::vector<std::string>{"val_loss"}));
  EXPECT_EQ(r.program->rules()[1].reads, (std::vector<std::string>{"grad_norm", "lr"}));
}

}  // namespace

namespace {

TEST(EnginePending, TrueWhileAConditionRunsTrue) {
  auto r = vigil::compile_string("when loss > 1 for 3 samples do log", "t.rules");
  ASSERT_TRUE(r.ok());
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  EXPECT_FALSE(e.pending());
  e.observe(1, {{"loss", 2}});
  EXPECT_TRUE(e.pending());  // pending: 1 of 3
  e.observe(2, {{"loss", 2}});
  e.observe(3, {{"loss", 2}});
  EXPECT_TRUE(e.pending());  // firing
  e.observe(4, {{"loss", 0}});
  EXPECT_FALSE(e.pending());
}

}  // namespace

namespace {

TEST(TemplateParameters, StringsChooseConditionsModesAndDurationArithmetic) {
  auto r = vigil::compile_string(
      "rule stop_at(monitor = val_loss, threshold = 0.5, mode = \"min\", when_mode = \"eval\",\n"
      "             patience = 2):\n"
      "    when (mode == \"min\" and monitor < threshold) or (mode == \"max\" and monitor > threshold)\n"
      "    for (patience + 1) samples\n"
      "    in when_mode\n"
      "    do stop\n"
      "use stop_at() as low\n"
      "use stop_at(mode = \"max\", threshold = 0.9) as high\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  EXPECT_EQ(r.program->rules()[0].mode, "eval");
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  std::vector<std::string> fired;
  const double values[] = {0.4, 0.4, 0.4, 0.95, 0.95, 0.95};
  for (int s = 0; s < 6; ++s)
    for (const auto& f : e.observe(s, {{"val_loss", values[s]}}, {.mode = "eval"}))
      fired.push_back(f.rule_name() + "@" + std::to_string(f.step));
  EXPECT_EQ(fired, (std::vector<std::string>{"low@2", "high@5"}));
  // Train observations are not evaluated (in when_mode = "eval").
  EXPECT_TRUE(e.observe(6, {{"val_loss", 0.1}}).empty());
}

}  // namespace
