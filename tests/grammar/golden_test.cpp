// Golden diagnostics: every tests/golden/parse/NAME.rules is parsed under the
// bare file name NAME.rules and its formatted diagnostics must equal
// NAME.expected byte for byte. VIGIL_UPDATE_GOLDEN=1 rewrites the .expected
// files instead (review the diff before committing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/parser.hpp"

namespace vigil::grammar {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> golden_inputs() {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(VIGIL_GOLDEN_PARSE_DIR)) {
    if (entry.path().extension() == ".rules") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GoldenParse, DiagnosticsMatchExpectedFiles) {
  const char* update_env = std::getenv("VIGIL_UPDATE_GOLDEN");
  const bool update = update_env != nullptr && std::string(update_env) == "1";
  const auto inputs = golden_inputs();
  ASSERT_GE(inputs.size(), 15u) << "golden directory: " << VIGIL_GOLDEN_PARSE_DIR;
  for (const auto& input : inputs) {
    SCOPED_TRACE(input.filename().string());
    SourceSet sources;
    const auto id = sources.add(input.filename().string(), read_file(input));
    const ParseResult result = parse(sources, id);
    // Each golden file is about a syntax error; a file that parses cleanly is a broken test.
    EXPECT_FALSE(result.diagnostics.empty());
    const std::string actual = format_diagnostics(result.diagnostics, sources);
    fs::path expected_path = input;
    expected_path.replace_extension(".expected");
    if (update) {
      std::ofstream(expected_path, std::ios::binary) << actual;
      continue;
    }
    ASSERT_TRUE(fs::exists(expected_path)) << "missing " << expected_path << " (run with VIGIL_UPDATE_GOLDEN=1)";
    EXPECT_EQ(actual, read_file(expected_path));
  }
}

}  // namespace
}  // namespace vigil::grammar
