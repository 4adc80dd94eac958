// libFuzzer target for the parser: any bytes must give statements or
// diagnostics without crashing, and whatever parses must survive the
// print -> parse -> print round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "grammar/parser.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  vigil::SourceSet sources;
  const auto id = sources.add("fuzz.rules", std::string(reinterpret_cast<const char*>(data), size));
  const auto result = vigil::grammar::parse(sources, id);
  for (const auto& d : result.diagnostics) {
    if (d.range.begin > d.range.end || d.range.end > size) std::abort();
    (void)vigil::format_diagnostic(d, sources);
  }
  if (result.ok()) {
    const std::string printed = vigil::grammar::print(result.file);
    vigil::SourceSet again_sources;
    const auto again_id = again_sources.add("printed.rules", printed);
    const auto again = vigil::grammar::parse(again_sources, again_id);
    if (!again.ok()) std::abort();
    if (vigil::grammar::print(again.file) != printed) std::abort();
  }
  return 0;
}
