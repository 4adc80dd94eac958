// PEGTL's static analysis of the grammar: no rule can loop forever without
// consuming input (e.g. a star<> over something that may match empty).
#include <gtest/gtest.h>

#include <tao/pegtl/contrib/analyze.hpp>

#include "grammar/grammar.hpp"

namespace vigil::grammar {
namespace {

TEST(GrammarAnalyze, NoInfiniteLoops) {
  EXPECT_EQ(tao::pegtl::analyze<peg::next_statement>(1), 0u);
}

}  // namespace
}  // namespace vigil::grammar
