// rulecheck's Replay fed by the reader's ids (feed(reader, KeyedObservation))
// does exactly what it does fed Observations by name: the same firings, the
// same names and modes seen, the same warnings, over every real trace in
// tests/ and examples/ and rule sets that read their series, alias them,
// label them and misspell them. Compiled with tools/rulecheck/common.cpp.

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/files.hpp"
#include "tools/rulecheck/common.hpp"
#include "vigil/program.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;
const fs::path source_dir = VIGIL_SOURCE_DIR;

struct Replayed {
  std::vector<std::string> firings;
  std::set<std::string> names, modes;
  std::string messages;
  std::size_t observations = 0;
};

std::string describe(const vigil::Firing& f) {
  return fmt::format("{} step {} [{}] time {:016x} value {}", f.rule_name(), f.step, f.mode,
                     std::bit_cast<std::uint64_t>(f.time),
                     f.value ? fmt::format("{:016x}", std::bit_cast<std::uint64_t>(*f.value)) : "-");
}

// Replays `trace` through `program`, by name or by id; every third
// observation only noted (as `rulecheck run --from` does outside its range).
Replayed replay(const vigil::Program& program, const std::string& trace, bool keyed) {
  Replayed run;
  rulecheck::ErrCapture capture(run.messages);
  vigil::TraceError error;
  auto reader = vigil::open_trace(trace, error);
  if (!reader) return run;
  rulecheck::Replay replay(program, trace, /*max_label_sets=*/3);
  auto take = [&](std::span<const vigil::Firing> firings) {
    for (const auto& f : firings) run.firings.push_back(describe(f));
  };
  if (keyed) {
    vigil::KeyedObservation obs;
    while (reader->next_keyed(obs)) {
      if (++run.observations % 3 == 0) replay.note(*reader, obs);
      else take(replay.feed(*reader, obs));
    }
  } else {
    vigil::Observation obs;
    while (reader->next(obs)) {
      if (++run.observations % 3 == 0) replay.note(obs);
      else take(replay.feed(obs));
    }
  }
  take(replay.tick(replay.last_time() + 1000));
  run.names.insert(replay.names_seen().begin(), replay.names_seen().end());
  run.modes.insert(replay.modes_seen().begin(), replay.modes_seen().end());
  return run;
}

std::vector<std::string> traces() {
  std::vector<std::string> out;
  for (const char* top : {"tests", "examples"})
    for (const auto& e : fs::recursive_directory_iterator(source_dir / top)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || e.path().string().find("/fuzz/") != std::string::npos) continue;
      if (name.ends_with(".jsonl") || name.ends_with(".csv") || name == "trainer_state.json")
        out.push_back(e.path().string());
      if (name.find("tfevents") != std::string::npos) out.push_back(e.path().parent_path().string());
    }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

TEST(ReplayKeyed, SameFiringsNamesModesAndWarningsAsByName) {
  struct RuleSet {
    std::string text;
    std::vector<std::pair<std::string, std::string>> aliases;  // (old, new)
  };
  const std::vector<RuleSet> sets = {
      {"rule a: when loss > 1 do log\n"
       "rule b: when val_loss > 0.3 do log\n"
       "rule c: when grad_norm > 2 * median(grad_norm[20]) do log\n"
       "rule d: when train_loss > 2 * min(train_loss[50]) do log\n"
       "rule e: when age(loss) > 100 do log\n"
       "rule f: when eval_loss > 0.25 in eval do log\n"
       "rule g: when `train/loss` > 3 do log\n"
       "rule h: when grad_nrom < 0 do log\n",
       {}},
      // Aliases: two trace series read as one name (collision warnings).
      {"rule a: when loss > 0.5 do log\nrule b: when acc < 0.9 do log\n",
       {{"train_loss", "loss"}, {"val_acc", "acc"}, {"eval_loss", "loss"}}},
      {vigil::test::slurp(source_dir / "tests/tb/rules/lightning_overfit.rules"), {}},
      {vigil::test::slurp(source_dir / "tests/csvhf/data/e2e/val_loss.rules"), {}},
      {vigil::test::slurp(source_dir / "tests/csvhf/data/e2e/eval_loss.rules"), {}},
      {vigil::test::slurp(source_dir / "tests/cli/data/basic.rules"), {}},
  };
  std::size_t compared = 0, firings = 0;
  for (const auto& set : sets) {
    vigil::CompileOptions options;
    options.aliases = set.aliases;
    const auto result = vigil::compile_string(set.text, "t.rules", options);
    ASSERT_TRUE(result.ok()) << result.format_diagnostics() << "\n" << set.text;
    for (const auto& trace : traces()) {
      SCOPED_TRACE(trace);
      const Replayed by_name = replay(*result.program, trace, false);
      const Replayed by_id = replay(*result.program, trace, true);
      EXPECT_EQ(by_name.observations, by_id.observations);
      EXPECT_EQ(by_name.firings, by_id.firings);
      EXPECT_EQ(by_name.names, by_id.names);
      EXPECT_EQ(by_name.modes, by_id.modes);
      EXPECT_EQ(by_name.messages, by_id.messages);
      ++compared;
      firings += by_name.firings.size();
    }
  }
  EXPECT_GT(compared, 200u);
  EXPECT_GT(firings, 100u);  // the rules did fire: the comparison means something
}

// Labelled keys, a label-set limit (3) that refuses new sets, malformed keys
// of a series a rule reads, and names taken over from an alias mid-trace.
TEST(ReplayKeyed, LabelLimitMalformedKeysAndTakeovers) {
  const auto dir = vigil::test::make_temp_dir("replay_keyed");
  const auto path = (dir / "t.jsonl").string();
  {
    std::ofstream out(path);
    for (int step = 0; step < 60; ++step) {
      out << fmt::format(R"({{"step": {}, "values": {{"g{{layer=\"l{}\"}}": {}, "g{{bad": 1, "old": {}{}}}}})",
                         step, step % 7, step * 0.5, step % 5, step >= 30 ? ", \"new\": 9" : "")
          << "\n";
    }
  }
  vigil::CompileOptions options;
  options.aliases = {{"old", "new"}};
  const auto result = vigil::compile_string(
      "rule a: when g > 10 do log\nrule b: when new > 3 do log\n", "t.rules", options);
  ASSERT_TRUE(result.ok()) << result.format_diagnostics();
  const Replayed by_name = replay(*result.program, path, false);
  const Replayed by_id = replay(*result.program, path, true);
  EXPECT_EQ(by_name.firings, by_id.firings);
  EXPECT_EQ(by_name.names, by_id.names);
  EXPECT_EQ(by_name.messages, by_id.messages);
  EXPECT_NE(by_name.messages.find("label sets"), std::string::npos) << by_name.messages;
  EXPECT_NE(by_name.messages.find("malformed"), std::string::npos) << by_name.messages;
  EXPECT_FALSE(by_name.firings.empty());
  fs::remove_all(dir);
}

}  // namespace
