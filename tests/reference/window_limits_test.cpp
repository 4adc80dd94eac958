// Issue 11 edges of windows:
// §3: a window's storage grows with the samples it actually holds:
//     `max(x[10000000])` over one observation took 515 MB (the history
//     reserved its full length at the first sample). Measured on a forked
//     child (wait4's rusage), bound ~10x above what one observation needs.
//     A window by count holds its count, not the next power of two: the
//     ring writes all of its capacity, and memory is what costs here.
// §4: steps are int64 everywhere: with nanosecond timestamps as steps
//     (1.7e18, where a double has a 256-step granularity) step windows,
//     `for`, `every` and `cooldown` in steps were computed in double and
//     `max(loss[100 steps])` never fired.

#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "interp/window.hpp"
#include "tests/support/child_cost.hpp"
#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace {

constexpr std::int64_t ns_base = 1'700'000'000'000'000'000;  // 2023 in ns

std::vector<std::int64_t> fired_steps(const std::string& rules, const std::vector<std::int64_t>& steps,
                                      const std::vector<double>& loss) {
  auto compiled = vigil::compile_string(rules, "ns.rules");
  EXPECT_TRUE(compiled.ok()) << compiled.format_diagnostics();
  if (!compiled.ok()) return {};
  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*compiled.program, options);
  const auto id = *engine.series("loss");
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const vigil::Sample s{id, loss[i]};
    for (const auto& f : engine.observe(steps[i], {&s, 1})) out.push_back(f.step);
  }
  return out;
}

TEST(NanosecondSteps, StepWindowsAreExact) {
  // Steps 10 ns apart; loss 2 at the 21st observation only. A window of 100
  // steps holds the 10 newest samples, so max > 1 for ten observations.
  std::vector<std::int64_t> steps;
  std::vector<double> loss;
  for (int i = 0; i < 50; ++i) {
    steps.push_back(ns_base + 10 * i);
    loss.push_back(i == 20 ? 2 : 0);
  }
  std::vector<std::int64_t> want;
  for (int i = 20; i < 30; ++i) want.push_back(ns_base + 10 * i);
  EXPECT_EQ(fired_steps("rule r: when max(loss[100 steps]) > 1 cooldown 1 samples do log\n", steps, loss), want);
  // before(): the newest sample at least 100 steps older.
  std::vector<std::int64_t> want_before;
  for (int i = 30; i < 31; ++i) want_before.push_back(ns_base + 10 * i);
  EXPECT_EQ(fired_steps("rule r: when before(loss[100 steps]) > 1 cooldown 1 samples do log\n", steps, loss),
            want_before);
  // A running sum (window_state) over the same window.
  EXPECT_EQ(fired_steps("rule r: when sum(loss[100 steps]) > 1 cooldown 1 samples do log\n", steps, loss), want);
  // slope against nanosecond steps: 1 per 10 steps is 0.1 per step.
  std::vector<double> ramp;
  for (int i = 0; i < 50; ++i) ramp.push_back(i);
  const auto sloped =
      fired_steps("rule r: when slope(loss[100 steps]) > 0.0999 and slope(loss[100 steps]) < 0.1001 cooldown 1 samples do log\n",
                  steps, ramp);
  EXPECT_EQ(sloped.size(), 49u);
}

TEST(NanosecondSteps, ForEveryAndCooldownInSteps) {
  std::vector<std::int64_t> steps;
  std::vector<double> loss;
  for (int i = 0; i < 10; ++i) {
    steps.push_back(ns_base + 10 * i);
    loss.push_back(2);
  }
  // for 25 steps: true since the first step, 25 steps later is the 4th (30).
  EXPECT_EQ(fired_steps("rule r: when loss > 1 for 25 steps cooldown 1 samples do log\n", steps, loss),
            (std::vector<std::int64_t>{ns_base + 30, ns_base + 40, ns_base + 50, ns_base + 60,
                                       ns_base + 70, ns_base + 80, ns_base + 90}));
  // every 30 steps: evaluated at 0, 30, 60, 90.
  EXPECT_EQ(fired_steps("rule r: when loss > 1 every 30 steps cooldown 1 samples do log\n", steps, loss),
            (std::vector<std::int64_t>{ns_base, ns_base + 30, ns_base + 60, ns_base + 90}));
  // cooldown 35 steps: fires at 0, then at the first step 35 or more later (40), then 80.
  EXPECT_EQ(fired_steps("rule r: when loss > 1 cooldown 35 steps do log\n", steps, loss),
            (std::vector<std::int64_t>{ns_base, ns_base + 40, ns_base + 80}));
}

using vigil::test::ChildCost;
using vigil::test::in_child;
using vigil::test::own_max_rss_kib;

TEST(WindowMemory, LongWindowsOverShortTracesStaySmall) {
  // Ten rules with windows of ten million samples, steps and seconds, one
  // observation each: the old history reserved 10 M samples per window
  // (~300 MB per series here); now a few samples.
  const std::string rules =
      "rule a: when max(x[10000000 steps]) > 1 cooldown 1 samples do log\n"
      "rule b: when mean(y[10000000]) > 1 cooldown 1 samples do log\n"
      "rule c: when median(z[10000000 steps]) > 1 cooldown 1 samples do log\n"
      "rule d: when max(w[10000000]) > 1 cooldown 1 samples do log\n"
      "rule e: when count((x > 1)[10000000 steps]) > 1 cooldown 1 samples do log\n"
      "rule f: when sum(w[10000000s]) > 1 cooldown 1 samples do log\n";
  auto compiled = vigil::compile_string(rules, "long.rules");
  ASSERT_TRUE(compiled.ok()) << compiled.format_diagnostics();
  const long baseline = own_max_rss_kib();
  const ChildCost cost = in_child([&] {
    vigil::EngineOptions options;
    options.unbound = vigil::UnboundActions::record;
    vigil::Engine engine(*compiled.program, options);
    for (int step = 0; step < 3; ++step)
      engine.observe(step, {{"x", 2.0}, {"y", 2.0}, {"z", 2.0}, {"w", 2.0}});
    const std::string state = engine.save_state();
    vigil::Engine restored(*compiled.program, options);
    restored.restore_state(state);
    return restored.observe(3, {{"x", 2.0}}).size() == 2 ? 0 : 1;  // rules a and e
  });
  EXPECT_EQ(cost.exit_code, 0);
  // A few KiB of histories; 32 MiB above the parent is far above that and
  // far below the old 1.5 GB.
  EXPECT_LT(cost.max_rss_kib - baseline, 32 * 1024) << "peak " << cost.max_rss_kib << " KiB";
}

/// The capacity a history reaches after `n` observations under `need`
/// (one sample each, one second apart).
std::size_t capacity_after(const vigil::interp::Retention& need, int n) {
  vigil::interp::History h;
  h.reserve(vigil::interp::initial_capacity(need.count));
  vigil::interp::Clock clock;
  for (int i = 0; i < n; ++i) {
    clock.step = clock.low_step = i;
    clock.time = clock.last_time = 1000.0 + i;
    vigil::interp::push(h, need, static_cast<double>(i), clock);
  }
  EXPECT_LE(h.size, h.cap);
  return h.cap;
}

TEST(WindowMemory, AHistoryByCountHoldsItsCountExactly) {
  vigil::interp::Retention by_count;
  by_count.count = 10001;  // a running 10,000-sample window
  EXPECT_EQ(capacity_after(by_count, 30000), 10001u);
  // On the way it doubles (64, 128, ..., 4096), and goes straight to the
  // count from the first capacity at least a quarter of it.
  EXPECT_EQ(capacity_after(by_count, 1000), 1024u);
  EXPECT_EQ(capacity_after(by_count, 3000), 4096u);
  EXPECT_EQ(capacity_after(by_count, 4097), 10001u);
  by_count.count = 100000;
  EXPECT_EQ(capacity_after(by_count, 30000), 32768u);
  // A time window's count is not known: doubling, as long as samples are needed.
  vigil::interp::Retention by_time;
  by_time.seconds = 10000;
  by_time.preceding_seconds = true;
  EXPECT_EQ(capacity_after(by_time, 30000), 16384u);
}

}  // namespace
