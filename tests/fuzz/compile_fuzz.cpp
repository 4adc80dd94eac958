// libFuzzer target for the compiler and the engine: any bytes must compile
// to a program or to diagnostics with valid positions, never crash; a program
// that compiles must run over a short trace that feeds every series it reads
// (ordinary values, NaN, infinities; two modes; a clock tick) without crashing,
// and its state must survive save/restore.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "vigil/engine.hpp"
#include "vigil/program.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto result = vigil::compile_string(text, "fuzz.rules");
  for (const auto& d : result.diagnostics) {
    if (d.range.begin > d.range.end || d.range.end > result.sources[d.file].text.size()) std::abort();
  }
  (void)result.format_diagnostics();
  if (!result.ok()) return 0;

  vigil::EngineOptions options;
  options.unbound = vigil::UnboundActions::record;
  vigil::Engine engine(*result.program, options);
  std::vector<vigil::SeriesId> ids;
  for (const auto& use : result.program->series_uses())
    for (const char* labels : {"", "{layer=\"a\"}", "{layer=\"b\"}"})
      if (auto id = engine.series(use.name + labels)) ids.push_back(*id);
  constexpr double inf = std::numeric_limits<double>::infinity();
  const double values[] = {1, 0.5, 3, -2, std::nan(""), 1e6, inf, 0, -inf, 2};
  std::vector<vigil::Sample> samples;
  std::string saved;
  for (std::int64_t step = 0; step < 24; ++step) {
    samples.clear();
    for (std::size_t i = 0; i < ids.size(); ++i)
      samples.push_back({ids[i], values[(static_cast<std::size_t>(step) + i) % 10]});
    const bool eval = step % 5 == 4;
    (void)engine.observe(step, samples, {.mode = eval ? "eval" : "train", .time = 100.0 + step});
    if (step % 7 == 6) (void)engine.observe(step, {}, {.mode = "train", .time = 100.5 + step});
    if (step == 12) saved = engine.save_state();
  }
  vigil::Engine again(*result.program, options);
  again.restore_state(saved);
  return 0;
}
