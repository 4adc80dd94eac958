// docs/functions.md, rendered from the registry.
//
// Owns: rendering the registry as Markdown. Must not touch: the registry's contents.
#include <fmt/format.h>

#include "stdlib/functions.hpp"

namespace vigil::stdlib {
namespace {

std::string signature(const FunctionDef& d) {
  std::string ps;
  for (const auto& p : d.params) {
    if (!ps.empty()) ps += ", ";
    if (p.type == ArgType::range || p.type == ArgType::condition_range)
      ps += fmt::format("{}[N]", p.name);
    else if (p.type == ArgType::series)
      ps += fmt::format("{} (a series)", p.name);
    else if (!p.choices.empty())
      ps += fmt::format("{}: \"{}\"", p.name, p.choices);
    else if (p.constant)
      ps += fmt::format("{} (constant, {})", p.name, range_text(p));
    else
      ps += p.name;
  }
  if (d.variadic) ps += ", ...";
  return fmt::format("{}({}) -> {}", d.name, ps, d.result == ArgType::boolean ? "bool" : "number");
}

}  // namespace

std::string render_function_reference(const FunctionRegistry& registry) {
  struct Family {
    FnKind kind;
    std::string_view title, intro;
  };
  static constexpr Family families[] = {
      {FnKind::elementwise, "Elementwise functions",
       "Applied to each element of a vector (or to a scalar); vectors combine by identical label "
       "sets."},
      {FnKind::aggregate, "Aggregations across series",
       "Reduce a vector to one scalar with empty labels. An empty vector is undefined: the rule "
       "is not evaluated."},
      {FnKind::range, "Range functions",
       "Reduce each series' window `x[N]`, `x[N steps]`, `x[N evals]`, `x[10m]` (or an "
       "expression's, `(x - y)[N]`, `(x > 1)[N]`) to one value. A NaN in the window makes "
       "numeric reductions NaN, except `count`, `first`, `last`, `changes`."},
      {FnKind::stateful, "Stateful functions",
       "Follow each series over its whole history; the state advances at every new sample of the "
       "argument, whether or not the rule is evaluated then. A NaN sample yields NaN and leaves "
       "the state unchanged."},
      {FnKind::fallback, "Undefined values",
       "An operand without a value (a series never fed, a window not yet full, an aggregation "
       "of an empty vector) makes the whole condition undefined; `default` gives such an "
       "operand a value instead."},
      {FnKind::clock, "The clock",
       "Values that change with time alone. A rule that reads one is evaluated at every "
       "observation with a time, including observations without samples (the ticks of "
       "`rulecheck watch` and `rulecheck run --tick`, or a host's `observe` with no samples): "
       "that is how a stall is seen while it lasts."},
  };
  std::string out =
      "# Function reference\n\n"
      "Generated from the function registry (`stdlib/functions.cpp`) by\n"
      "`VIGIL_UPDATE_GOLDEN=1 ctest -R FunctionReference`; do not edit by hand.\n";
  for (const auto& f : families) {
    out += fmt::format("\n## {}\n\n{}\n\n| signature | meaning | example | warm-up |\n|---|---|---|---|\n",
                       f.title, f.intro);
    for (const auto& d : registry.all()) {
      if (d.kind != f.kind) continue;
      std::string warm(d.warmup);
      if (warm.empty() && d.kind == FnKind::range && d.min_samples > 1)
        warm = fmt::format("needs {} samples in the window", d.min_samples);
      out += fmt::format("| `{}` | {} | `{}` | {} |\n", signature(d), d.doc, d.example,
                         warm.empty() ? "-" : warm);
    }
  }
  return out;
}

}  // namespace vigil::stdlib
