// An engine fed tensors and scalars records a Vigil JSONL trace; replaying
// that trace through a fresh engine gives exactly the live firings (rule,
// step, labels, value): SPEC §1 "online evaluation and replay of the recorded
// trace must produce identical firings".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/support/files.hpp"
#include "vigil/engine.hpp"
#include "vigil/trace.hpp"

namespace {

struct Fired {
  std::string rule;
  std::int64_t step;
  std::string labels;
  double value;
  bool operator==(const Fired& o) const {
    return rule == o.rule && step == o.step && labels == o.labels &&
           (value == o.value || (std::isnan(value) && std::isnan(o.value)));
  }
};

void collect(std::span<const vigil::Firing> fs, std::vector<Fired>& out) {
  for (const auto& f : fs)
    out.push_back({f.rule_name(), f.step, vigil::format_series_key("", *f.labels),
                   f.value ? *f.value : -12345.0});
}

TEST(RecordReplay, RecordedTraceReplaysToTheSameFirings) {
  const char* rules =
      "rule grad_high: when grad_norm{layer=~\"l.*\"} > 1.05 * median(grad_norm{layer=~\"l.*\"}[5]) do log\n"
      "rule grad_nan: when grad_frac_nan > 0 do skip_step\n"
      "rule moving: when weight_update_ratio > 0.2 for 2 samples do log\n"
      "rule loss_up: when loss > ewma(loss, 0.3) * 1.1 do log\n"
      "rule val: when val_loss > min(val_loss[3]) in eval do log\n"
      // Parameterised stats: their canonical names go through the JSONL trace.
      "rule wide: when grad{layer=~\"l.*\"}.frac_outside(-1.5, 1.5) > 0.15 do log\n"
      "rule still: when weight.frac_changed(1e-5, 0.005) < 0.5 do log\n"
      "rule dead: when grad.frac_dead_units(30) > 0.1 do log\n";
  auto r = vigil::compile_string(rules, "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  const auto dir = vigil::test::make_temp_dir("record_replay");
  const auto path = dir / "trace.jsonl";

  std::vector<Fired> live;
  {
    vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
    vigil::TraceError err;
    auto writer = vigil::JsonlWriter::create(path.string(), err);
    ASSERT_TRUE(writer) << err.format();
    e.record([&](const vigil::Observation& o) { writer->write(o); });
    const auto g1 = *e.tensor("grad{layer=\"l1\"}"), g2 = *e.tensor("grad{layer=\"l2\"}");
    const auto w = *e.tensor("weight");
    const auto loss = *e.series("loss"), val = *e.series("val_loss");
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0, 1);
    std::vector<float> a(64), b(32), wt(16, 1.0f);
    const std::int64_t sa[] = {8, 8}, sb[] = {32}, sw[] = {4, 4};
    const std::int64_t transposed[] = {1, 8};  // a strided view of `a`
    for (std::int64_t step = 0; step < 200; ++step) {
      for (auto& x : a) x = noise(rng) * (step % 37 == 0 ? 5.0f : 1.0f);
      for (auto& x : b) x = noise(rng);
      if (step % 53 == 0) b[3] = std::nanf("");
      for (auto& x : wt) x += noise(rng) * (step % 29 == 0 ? 0.5f : 0.01f);
      const vigil::Sample samples[] = {{loss, 2.0 + std::sin(step * 0.3) + (step % 41 == 0)}};
      const vigil::TensorSample tensors[] = {
          {g1, {a.data(), vigil::DType::float32, sa, transposed}},
          {g2, {b.data(), vigil::DType::float32, sb, {}}},
          {w, {wt.data(), vigil::DType::float32, sw, {}}}};
      collect(e.observe(step, samples, tensors), live);
      if (step % 10 == 9) {
        const vigil::Sample v[] = {{val, 1.0 + 0.1 * std::cos(step * 0.7)}};
        collect(e.observe(step, v, {.mode = "eval"}), live);
      }
    }
    ASSERT_FALSE(writer->error());
  }
  ASSERT_GT(live.size(), 10u);
  for (const char* rule : {"wide", "still", "dead"})  // each parameterised stat decided something
    EXPECT_TRUE(std::any_of(live.begin(), live.end(), [&](const Fired& f) { return f.rule == rule; }))
        << rule;

  std::vector<Fired> replayed;
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  vigil::TraceError err;
  auto reader = vigil::open_trace(path.string(), err);
  ASSERT_TRUE(reader) << err.format();
  vigil::Observation obs;
  std::size_t count = 0;
  while (reader->next(obs)) {
    ++count;
    std::vector<vigil::Sample> samples;
    for (const auto& [key, value] : obs.values) samples.push_back({*e.series(key), value});
    collect(e.observe(obs.step, samples, {.mode = obs.mode, .time = obs.time}), replayed);
  }
  ASSERT_FALSE(reader->error()) << reader->error()->format();
  EXPECT_EQ(count, 220u);
  EXPECT_EQ(replayed, live);
  std::filesystem::remove_all(dir);
}

}  // namespace
