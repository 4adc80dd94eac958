// The rulecheck subcommands, one source file each; main.cpp parses the
// command line (CLI11) and calls them.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace rulecheck {

struct RunOptions {
  std::vector<std::string> rules;
  std::vector<std::string> traces;
  std::string format = "text";
  std::vector<std::string> params;
  bool explain = false;
  std::int64_t from = std::numeric_limits<std::int64_t>::min();
  std::int64_t to = std::numeric_limits<std::int64_t>::max();
};

int run_check(const std::vector<std::string>& rules);
int run_run(const RunOptions& opts);

}  // namespace rulecheck
