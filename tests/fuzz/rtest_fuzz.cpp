// libFuzzer target for `.rtest` files (tools/rulecheck/test_format.*,
// docs/rtest.md): test files come from other people's rule libraries, so any
// bytes must parse into tests or into diagnostics with valid positions, never
// crash, hang or overflow (UBSan: `steps 9223372036854775800 every 5`). The
// series notation is also fed on its own, line by line. Evaluation is the
// engine's, fuzzed by compile_fuzz.
//
// The file's budget of expanded values is 4096 here instead of rulecheck's
// ten million (max_values_per_file): the same code path, but reached by a
// short input, and no input costs the fuzzer 160 MB and a pass over it. The
// per-token cap (999,999) stays; a line may still ask for that much once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/rulecheck/test_format.hpp"
#include "vigil/diagnostic.hpp"

namespace {
constexpr std::size_t kBudget = 4096;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  vigil::SourceSet sources;
  const std::uint32_t file = sources.add("fuzz.rtest", text);
  rulecheck::rtest::TestFile parsed;
  parsed.path = "fuzz.rtest";
  std::vector<vigil::Diagnostic> diagnostics;
  const bool ok = rulecheck::rtest::parse_test_file(sources, file, parsed, diagnostics, kBudget);
  if (!ok && diagnostics.empty()) std::abort();  // a failure must say why
  for (const auto& d : diagnostics) {
    if (d.file >= sources.size()) std::abort();
    // Within the text; a diagnostic at the very end (a line cut short at
    // the end of the file) is a one-character caret just past it, which
    // format_diagnostics clamps (the parser's convention, test_format.cpp).
    const auto& src = sources[d.file].text;
    if (d.range.begin > d.range.end || d.range.begin > src.size() || d.range.end > src.size() + 1)
      std::abort();
  }
  (void)vigil::format_diagnostics(diagnostics, sources);
  // The budget holds: series, times, steps and expected steps together.
  std::size_t values = 0;
  for (const auto& t : parsed.tests) {
    for (const auto& s : t.series) values += s.values.size();
    values += t.times.size() + (t.steps ? t.steps->size() : 0);
    for (const auto& e : t.expects) values += e.steps.size();
  }
  if (values > kBudget) std::abort();

  // Each line as series notation, and as one number.
  std::string_view rest(text);
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    std::vector<std::optional<double>> out;
    if (auto err = rulecheck::rtest::expand_values(line, out, kBudget)) {
      if (err->offset > line.size() || err->length > line.size() - err->offset) std::abort();
    } else if (out.size() > kBudget) {
      std::abort();
    }
    (void)rulecheck::rtest::parse_number(line);
  }
  return 0;
}
