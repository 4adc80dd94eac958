// Every ```rules block in the docs and the README is a valid rule file: the
// reference cannot drift from the language. Blocks with an `import` are
// compiled from examples/, where the docs say they are saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "vigil/program.hpp"

namespace {

namespace fs = std::filesystem;

struct Block {
  std::string doc;
  int line = 0;
  std::string text;
};

std::vector<Block> rule_blocks(const fs::path& doc) {
  std::ifstream in(doc);
  std::vector<Block> out;
  std::string line;
  int n = 0;
  Block* open = nullptr;
  while (std::getline(in, line)) {
    ++n;
    if (open == nullptr && line == "```rules") {
      out.push_back({doc.filename().string(), n + 1, {}});
      open = &out.back();
    } else if (open != nullptr && line.starts_with("```")) {
      open = nullptr;
    } else if (open != nullptr) {
      open->text += line + "\n";
    }
  }
  return out;
}

TEST(DocExamples, EveryRulesBlockCompilesWithoutWarnings) {
  const fs::path root = VIGIL_SOURCE_DIR;
  std::vector<fs::path> docs = {root / "README.md"};
  for (const auto& entry : fs::directory_iterator(root / "docs"))
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  std::size_t blocks = 0;
  const fs::path cwd = fs::current_path();
  fs::current_path(root / "examples");  // where `import` examples live
  for (const auto& doc : docs) {
    for (const auto& b : rule_blocks(doc)) {
      ++blocks;
      const std::string name = b.doc + ":" + std::to_string(b.line);
      auto r = vigil::compile_string(b.text, name);
      EXPECT_TRUE(r.ok() && r.diagnostics.empty())
          << name << ": example does not check\n" << r.format_diagnostics();
    }
  }
  fs::current_path(cwd);
  EXPECT_GE(blocks, 30u);  // the language reference has one per construct
}

}  // namespace
