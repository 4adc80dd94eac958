// plateau_bad_evals, the stateful kernel behind std.reduce_lr_on_plateau:
// PyTorch ReduceLROnPlateau.step()'s counters worked by hand (the random
// differential test against torch itself is plateau_torch.py), and its
// string arguments checked at compile time.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "stdlib/functions.hpp"
#include "vigil/program.hpp"

namespace {

using vigil::stdlib::DetectorState;
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// c = {mode (0 min, 1 max), threshold, threshold_mode (0 rel, 1 abs), patience, cooldown}
std::vector<double> run(const std::vector<double>& xs, std::vector<double> c) {
  const auto defs = vigil::stdlib::standard_functions().lookup("plateau_bad_evals");
  EXPECT_EQ(defs.size(), 1u);
  if (defs.size() != 1) return {};
  DetectorState st;
  std::vector<double> out;
  for (double x : xs) out.push_back(defs[0]->stateful(st, x, c));
  return out;
}

using V = std::vector<double>;

TEST(PlateauBadEvals, CountsBadEvaluationsAndRestartsAfterExceedingPatience) {
  // patience 2: 3 > 2 at the 4th sample (a reduction), then counting restarts
  EXPECT_EQ(run({1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 2, 0}), (V{0, 1, 2, 3, 1, 2, 3}));
}

TEST(PlateauBadEvals, RelativeBoundaryIsNotAnImprovement) {
  // 1.0 * (1 - 0.01) == 0.99 exactly in double: not < , so bad (log space said better)
  EXPECT_EQ(run({1.0, 0.99}, {0, 0.01, 0, 0, 0}), (V{0, 1}));
  EXPECT_EQ(run({1.0, std::nextafter(0.99, 0.0)}, {0, 0.01, 0, 0, 0}), (V{0, 0}));
  // mode max: 2 * 1.5 == 3 is not better; the next double above is
  EXPECT_EQ(run({2, 3}, {1, 0.5, 0, 0, 0}), (V{0, 1}));
  EXPECT_EQ(run({2, std::nextafter(3.0, 4.0)}, {1, 0.5, 0, 0, 0}), (V{0, 0}));
}

TEST(PlateauBadEvals, AbsoluteThreshold) {
  EXPECT_EQ(run({1, 0.9, 0.89}, {0, 0.1, 1, 5, 0}), (V{0, 1, 0}));
  EXPECT_EQ(run({1, 1.1, 1.2}, {1, 0.1, 1, 5, 0}), (V{0, 1, 0}));
}

TEST(PlateauBadEvals, CooldownZeroesTheCountAndAnImprovementInsideItDoesNotRestartEarly) {
  // patience 1, cooldown 2: exceeds at 3rd sample; the next two are cooldown (0), even the
  // improvement at the 4th; then 1, 2 (reduction) again
  EXPECT_EQ(run({1, 1, 1, 0.5, 0.5, 0.5, 0.5}, {0, 1e-4, 0, 1, 2}), (V{0, 1, 2, 0, 0, 1, 2}));
}

TEST(PlateauBadEvals, PatienceZeroReducesAtEveryBadEvaluation) {
  EXPECT_EQ(run({3, 3, 2, 2}, {0, 0, 1, 0, 0}), (V{0, 1, 0, 1}));
}

TEST(PlateauBadEvals, NaNAndInfinityAreBadAsInPyTorch) {
  // best starts at +inf: a NaN first sample leaves it there and is bad
  EXPECT_EQ(run({nan, 1, nan, 2}, {0, 1e-4, 0, 5, 0}), (V{1, 0, 1, 2}));
  EXPECT_EQ(run({std::numeric_limits<double>::infinity()}, {0, 1e-4, 0, 5, 0}), (V{1}));
}

TEST(PlateauBadEvals, ThresholdModeIsCheckedAtCompileTime) {
  auto bad = vigil::compile_string(
      "use std.reduce_lr_on_plateau(threshold_mode = \"relative\")\n", "bad.rules");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.format_diagnostics().find("argument 'threshold_mode' of plateau_bad_evals must be "
                                          "\"rel\" or \"abs\""),
            std::string::npos)
      << bad.format_diagnostics();
  auto good = vigil::compile_string(
      "use std.reduce_lr_on_plateau(threshold_mode = \"abs\", mode = \"max\")\n", "good.rules");
  EXPECT_TRUE(good.ok()) << good.format_diagnostics();
}

}  // namespace
