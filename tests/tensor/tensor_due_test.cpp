// Engine::tensor_stats_due: which tensors the next observation needs. The
// property: a host that hands over only the tensors due, with only their due
// stats, sees exactly the firings of one that hands over everything, over
// random rule sets (gates in steps, samples and seconds, modes, windows,
// stateful functions, update and parameterised stats, cooldowns) and random
// observation sequences (steps that jump, train and eval interleaved).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/tensor.hpp"

namespace {

using vigil::DType;
using vigil::Stat;
using vigil::StatMask;

vigil::Program compile(const std::string& text) {
  auto r = vigil::compile_string(text, "due.rules");
  if (!r.ok()) throw std::runtime_error(r.format_diagnostics());
  return *r.program;
}

TEST(TensorStatsDue, EveryTenStepsIsDueOneStepInTen) {
  vigil::Engine e(compile("rule sparse: when grad_norm > 100 every 10 steps do log\n"),
                  {.unbound = vigil::UnboundActions::record});
  const auto g = *e.tensor(R"(grad{layer="fc1"})");
  const std::int64_t shape[] = {2};
  const float x[] = {3, 4};
  std::vector<std::int64_t> due_at;
  for (std::int64_t step = 1; step <= 100; ++step) {
    const StatMask due = e.tensor_stats_due(g, step);
    EXPECT_EQ(due & ~vigil::stat_bit(Stat::norm), 0u);
    std::vector<vigil::TensorSample> ts;
    if (due != 0) {
      due_at.push_back(step);
      ts.push_back({g, {x, DType::float32, shape, {}}, due});
    }
    e.observe(step, {}, ts);
  }
  EXPECT_EQ(due_at, (std::vector<std::int64_t>{1, 11, 21, 31, 41, 51, 61, 71, 81, 91}));
}

TEST(TensorStatsDue, GatesModesAndState) {
  vigil::Engine e(compile("rule warm: when a_norm > 1 after 5 steps do log\n"
                          "rule early: when b_norm > 1 until 5 steps do log\n"
                          "rule val: when c_norm > 1 in eval do log\n"
                          "rule win: when max(d_norm[3]) > 1 every 10 steps do log\n"
                          "rule smooth: when ewma(e_norm, 0.5) > 1 every 10 steps do log\n"
                          "rule moved: when f_update_norm > 1 every 10 steps do log\n"
                          "rule calm: when g_norm > 1 cooldown 50 steps do log\n"
                          "rule fo: when h.frac_outside(-1, 1) > 0.5 every 10 steps do log\n"),
                  {.unbound = vigil::UnboundActions::record});
  auto due = [&](const char* key, std::int64_t step, std::string_view mode = "train") {
    return e.tensor_stats_due(*e.tensor(key), step, mode);
  };
  const StatMask norm = vigil::stat_bit(Stat::norm);
  EXPECT_EQ(due("a", 4), 0u);  // after 5 steps: closed before step 5
  EXPECT_EQ(due("a", 5), norm);
  EXPECT_EQ(due("b", 4), norm);  // until 5 steps: open before step 5
  EXPECT_EQ(due("b", 5), 0u);
  EXPECT_EQ(due("c", 1), 0u);  // in eval: not in train
  EXPECT_EQ(due("c", 1, "eval"), norm);
  // A window or a stateful function keeps every sample: due at every step.
  EXPECT_EQ(due("d", 1), norm);
  EXPECT_EQ(due("e", 1), norm);
  // Update stats compare with the previous observation: handed over always.
  EXPECT_TRUE(due("f", 1) & vigil::keep_previous_bit);
  EXPECT_EQ(due("g", 1), norm);  // cooldown does not stop evaluation
  EXPECT_EQ(due("h", 1), vigil::param_stats_bit);
  EXPECT_EQ(due("unread", 1), 0u);

  // After the every-10-steps rules evaluated at step 1, only the stateful
  // ones stay due before step 11, and the update tensor only to be kept.
  const std::int64_t shape[] = {2};
  const float x[] = {0.5f, 0.5f};
  std::vector<vigil::TensorSample> ts;
  for (const char* key : {"a", "b", "c", "d", "e", "f", "g", "h"})
    ts.push_back({*e.tensor(key), {x, DType::float32, shape, {}}});
  e.observe(1, {}, ts);
  EXPECT_EQ(due("d", 2), norm);
  EXPECT_EQ(due("e", 2), norm);
  EXPECT_EQ(due("f", 2), vigil::keep_previous_bit);
  EXPECT_EQ(due("h", 2), 0u);
  EXPECT_EQ(due("h", 11), vigil::param_stats_bit);
  EXPECT_TRUE(due("f", 11) & vigil::stat_bit(Stat::update_norm));
}

TEST(TensorStatsDue, PrecomputedStatsAreRefusedWhereTheEngineNeedsTheTensor) {
  vigil::Engine e(compile("when w_update_norm > 1 do log\nwhen g_norm > 1 do log\n"),
                  {.unbound = vigil::UnboundActions::record});
  const auto w = *e.tensor("w");
  const auto g = *e.tensor("g");
  vigil::TensorStats st;
  st.values[static_cast<std::size_t>(Stat::norm)] = 2;
  st.values[static_cast<std::size_t>(Stat::numel)] = 1;
  const vigil::TensorSample bad[] = {{w, {}, ~StatMask{0}, &st}};
  EXPECT_THROW(e.observe(1, {}, bad), vigil::Error);
  const vigil::TensorSample good[] = {{g, {}, ~StatMask{0}, &st}};
  const auto fired = e.observe(1, {}, good);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(*fired[0].value, 2.0);
}

// The candidate rules of the property: each exercises one way a sample can
// matter (or not) beyond its observation.
const char* const kRules[] = {
    "rule every10: when g_norm > 2 every 10 steps do log\n",
    "rule join: when g_norm{layer=\"a\"} > g_abs_max{layer=\"b\"} every 3 steps do log\n",
    "rule warm: when g_mean > 0 after 5 steps do log\n",
    "rule early: when g_max > 1 until 8 steps for 2 samples do log\n",
    "rule val: when g_frac_pos > 0.5 in eval do log\n",
    "rule cool: when g_norm > 1 cooldown 3 steps every 4 steps do log\n",
    "rule window: when median(g_norm[4]) > 1.5 every 5 steps do log\n",
    "rule smooth: when ewma(g_sum, 0.5) > 0 every 7 steps do log\n",
    "rule moved: when w_update_norm > 0.5 every 6 steps do log\n",
    "rule changed: when w.frac_changed(0.1, 0) > 0.5 every 4 steps do log\n",
    "rule outside: when g.frac_outside(-1, 1) > 0.3 every 4 steps do log\n",
    "rule mixed: when g_norm > 1 and loss > 0.5 every 5 steps for 2 samples do log\n",
    "rule samples: when g_min < -1 every 3 samples do log\n",
    "rule after_samples: when g_std > 1 after 4 samples every 2 steps do log\n",
    "rule timed: when g_abs_mean > 0.8 every 3s do log\n",
    "rule fallback: when default(g_var, 0) > 1 every 4 steps do log\n",
    "rule agg: when max(g_norm) > 2.5 every 4 steps do log escalate after 1 within 20 steps do alert(\"again\")\n",
    "rule eval_every: when g_frac_zero > 0.2 every 2 steps in eval do log\n",
};
constexpr int kRuleCount = sizeof(kRules) / sizeof(kRules[0]);

struct Fired {
  std::string rule;
  std::int64_t step;
  std::string labels;
  double value;
};

bool same(const Fired& a, const Fired& b) {
  const bool values = a.value == b.value || (std::isnan(a.value) && std::isnan(b.value));
  return a.rule == b.rule && a.step == b.step && a.labels == b.labels && values;
}

RC_GTEST_PROP(TensorStatsDue, HandingOverOnlyTheDueTensorsGivesTheSameFirings, ()) {
  // Small sets (each rule with probability 1/4), so that sets without an
  // always-due rule are common.
  std::string text;
  for (int i = 0; i < kRuleCount; ++i)
    if (*rc::gen::weightedElement<int>({{1, 1}, {3, 0}}) == 1) text += kRules[i];
  if (text.empty()) text = kRules[0];
  const vigil::Program program = compile(text);

  // One observation's inputs: the same for both engines.
  struct Obs {
    std::int64_t step;
    bool eval;
    double loss;
    std::vector<float> ga, gb, w;
  };
  const int n = *rc::gen::inRange(10, 60);
  std::vector<Obs> seq;
  std::int64_t step = *rc::gen::inRange(0, 3);
  auto values = [](int count) {
    std::vector<float> v;
    for (int i = 0; i < count; ++i) {
      const int kind = *rc::gen::inRange(0, 20);
      v.push_back(kind == 0 ? std::numeric_limits<float>::quiet_NaN()
                  : kind == 1 ? 0.0f
                              : static_cast<float>(*rc::gen::inRange(-300, 300)) / 100.0f);
    }
    return v;
  };
  for (int i = 0; i < n; ++i) {
    step += *rc::gen::weightedElement<int>({{8, 1}, {1, 0}, {2, 3}});
    Obs o{step, *rc::gen::weightedElement<int>({{4, 0}, {1, 1}}) == 1,
          static_cast<double>(*rc::gen::inRange(0, 100)) / 100.0, values(4), values(4), values(3)};
    seq.push_back(std::move(o));
  }

  vigil::Engine all(program, {.unbound = vigil::UnboundActions::record});
  vigil::Engine due(program, {.unbound = vigil::UnboundActions::record});
  const char* keys[] = {R"(g{layer="a"})", R"(g{layer="b"})", "w"};
  std::size_t handed_all = 0, handed_due = 0;
  for (const Obs& o : seq) {
    const std::int64_t four[] = {4}, three[] = {3};
    const vigil::TensorView views[] = {{o.ga.data(), DType::float32, four, {}},
                                       {o.gb.data(), DType::float32, four, {}},
                                       {o.w.data(), DType::float32, three, {}}};
    const vigil::ObserveOptions opts{.mode = o.eval ? "eval" : "train",
                                     .time = static_cast<double>(o.step)};
    std::vector<Fired> fa, fd;
    auto run = [&](vigil::Engine& e, bool only_due, std::vector<Fired>& out, std::size_t& handed) {
      const vigil::Sample samples[] = {{*e.series("loss"), o.loss}};
      std::vector<vigil::TensorSample> ts;
      for (int k = 0; k < 3; ++k) {
        const auto id = *e.tensor(keys[k]);
        if (e.tensor_stats_used(id) == 0) continue;
        const StatMask mask = only_due ? e.tensor_stats_due(id, o.step, opts.mode) : ~StatMask{0};
        if (mask == 0) continue;
        ts.push_back({id, views[k], mask});
        // The work: stats computed, and one for a tensor only kept.
        handed += 1 + std::popcount(mask & e.tensor_stats_used(id));
      }
      for (const auto& f : e.observe(o.step, samples, ts, opts))
        out.push_back({f.rule_name(), f.step, vigil::format_series_key("", *f.labels),
                       f.value ? *f.value : std::numeric_limits<double>::quiet_NaN()});
    };
    run(all, false, fa, handed_all);
    run(due, true, fd, handed_due);
    RC_ASSERT(fa.size() == fd.size());
    for (std::size_t i = 0; i < fa.size(); ++i) RC_ASSERT(same(fa[i], fd[i]));
    RC_ASSERT(all.pending() == due.pending());
  }
  RC_ASSERT(handed_due <= handed_all);
  RC_TAG(handed_due < handed_all ? "less work" : "as much work");
}

}  // namespace
