// What a compiled Program holds. Internal to the library.
//
// Owns: the Program's contents. Must not touch: engine state (an engine holds its own).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "interp/checker.hpp"
#include "interp/plan.hpp"
#include "vigil/program.hpp"

namespace vigil::detail {

struct ProgramImpl {
  SourceSet sources;
  std::vector<interp::RootFile> roots;  // to recompile with other params
  CompileOptions options;
  interp::Plan plan;
  std::vector<RuleInfo> rules;          // parallel to plan.rules
  std::vector<SeriesUse> series_uses;
  std::map<std::string, Value> params;
  std::vector<std::pair<std::string, std::string>> aliases;  // (trace name, rule name), sorted
  /// Identifies the plan's shape; saved engine state only restores into an
  /// engine over a program with the same fingerprint.
  std::uint64_t fingerprint = 0;
};

}  // namespace vigil::detail
