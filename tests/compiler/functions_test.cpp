// The function registry: every record's example compiles and runs, and
// docs/functions.md is exactly what the registry renders.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "stdlib/functions.hpp"
#include "vigil/engine.hpp"

namespace {

TEST(FunctionRegistry, EveryExampleCompilesAsACondition) {
  for (const auto& d : vigil::stdlib::standard_functions().all()) {
    std::string text = "when " + std::string(d.example) + " do log";
    auto r = vigil::compile_string(text, "example.rules");
    EXPECT_TRUE(r.ok()) << d.name << ": " << r.format_diagnostics();
  }
}

TEST(FunctionRegistry, OverloadsAreResolvedByArgumentShape) {
  // max over a vector (aggregate), over a range, and of two values.
  auto r = vigil::compile_string(
      "rule agg: when max(g) > 5 do log\n"
      "rule rng: when max(g[2]) > 5 do log\n"
      "rule two: when max(g, 1) > 5 do log\n",
      "t.rules");
  ASSERT_TRUE(r.ok()) << r.format_diagnostics();
  vigil::Engine e(*r.program, {.unbound = vigil::UnboundActions::record});
  e.observe(0, {{"g{l=\"a\"}", 6}, {"g{l=\"b\"}", 1}});
  auto fs = e.observe(1, {{"g{l=\"a\"}", 1}, {"g{l=\"b\"}", 2}});
  // At step 1: max over series = 2 (no), max over a's window {6,1} = 6 (yes,
  // already true at step 0? no: the window needed 2 samples), max(g, 1) <= 2.
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].rule_name(), "rng");
  EXPECT_EQ(fs[0].labels->at(0).second, "a");
}

TEST(FunctionReference, DocsMatchTheRegistry) {
  const std::string path = std::string(VIGIL_SOURCE_DIR) + "/docs/functions.md";
  const std::string rendered =
      vigil::stdlib::render_function_reference(vigil::stdlib::standard_functions());
  if (std::getenv("VIGIL_UPDATE_GOLDEN")) std::ofstream(path) << rendered;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), rendered)
      << "docs/functions.md is stale: run VIGIL_UPDATE_GOLDEN=1 ctest -R FunctionReference";
}

}  // namespace
