// Action dispatch when a callback throws (engine.hpp, observe()): every
// other action of the observation is still called, in order, then the first
// exception reaches the host; the engine's state is what it would have been
// had no callback thrown.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"

namespace {

constexpr const char* kRules =
    "rule a: when loss > 1 do alert(message = \"a\"), log\n"
    "rule b: when loss > 2 do alert(message = \"b\")\n"
    "rule c: when loss > 3 do stop(reason = \"c\"), checkpoint\n";

vigil::Program program() {
  auto r = vigil::compile_string(kRules, "dispatch.rules");
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
  return *r.program;
}

using Calls = std::vector<std::pair<std::string, std::string>>;  // (action, rule)

void bind_all(vigil::Engine& e, Calls& calls, bool alert_throws) {
  for (const char* name : {"alert", "log", "stop", "checkpoint"}) {
    e.on(name, [&calls, name, alert_throws](const vigil::Firing& f, const vigil::Action&) {
      calls.emplace_back(name, f.rule_name());
      if (alert_throws && std::string(name) == "alert")
        throw std::runtime_error("webhook down for " + f.rule_name());
    });
  }
}

TEST(Dispatch, AThrowingCallbackDoesNotSwallowTheOtherActions) {
  vigil::Engine e(program());
  Calls calls;
  bind_all(e, calls, true);
  try {
    (void)e.observe(1, {{"loss", 5.0}});
    FAIL() << "observe() did not rethrow the callback's exception";
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "webhook down for a");  // the first one
  }
  const Calls want{{"alert", "a"}, {"log", "a"}, {"alert", "b"}, {"stop", "c"}, {"checkpoint", "c"}};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(e.stats().firings, 3u);
  EXPECT_EQ(e.stats().observations, 1u);
}

TEST(Dispatch, StateAfterAThrowIsAsIfNoCallbackThrew) {
  vigil::Engine thrown(program()), clean(program());
  Calls thrown_calls, clean_calls;
  bind_all(thrown, thrown_calls, true);
  bind_all(clean, clean_calls, false);
  const double losses[] = {5, 5, 0, 2.5, 5, 0.5};
  int throws = 0;
  for (int i = 0; i < 6; ++i) {
    (void)clean.observe(i, {{"loss", losses[i]}});
    try {
      (void)thrown.observe(i, {{"loss", losses[i]}});
    } catch (const std::runtime_error&) {
      ++throws;
    }
  }
  EXPECT_EQ(throws, 2);  // steps 0 and 3 fire an alert (4 fires only c)
  EXPECT_EQ(thrown_calls, clean_calls);
  EXPECT_EQ(thrown.save_state(), clean.save_state());
  EXPECT_EQ(thrown.stats().firings, clean.stats().firings);
  EXPECT_FALSE(thrown.pending());
}

TEST(Dispatch, ObserveFromACallbackStillThrowsAndTheFlagIsCleared) {
  vigil::Engine e(program());
  bool reentered = false;
  e.on("alert", [&](const vigil::Firing&, const vigil::Action&) {
    reentered = true;
    (void)e.observe(99, {{"loss", 0.0}});
  });
  e.on("log", [](const vigil::Firing&, const vigil::Action&) {});
  e.on("stop", [](const vigil::Firing&, const vigil::Action&) {});
  e.on("checkpoint", [](const vigil::Firing&, const vigil::Action&) {});
  EXPECT_THROW((void)e.observe(1, {{"loss", 1.5}}), vigil::Error);
  EXPECT_TRUE(reentered);
  e.on("alert", [](const vigil::Firing&, const vigil::Action&) {});
  EXPECT_NO_THROW((void)e.observe(2, {{"loss", 0.0}}));  // not left "dispatching"
}

}  // namespace
