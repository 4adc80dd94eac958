// The built-in function registry: one record per function overload with its
// name, signature, kernel, documentation, example and warm-up. The checker
// resolves calls against it, the executor runs its kernels, and the docs are
// generated from it, so a function's signature is written down exactly once.
//
// The registry is immutable after construction; `standard_functions()`
// returns the one with every built-in. Kernels are plain function pointers
// over plain data so the executor can call them once per element without
// virtual dispatch, and so detector state is trivially copyable (engine
// state save/restore is a memcpy of it).
//
// Owns: the registry's types. Must not touch: checking or the executor's columns.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vigil::stdlib {

/// How a function consumes its first argument.
enum class FnKind {
  elementwise,  // f(a, b, ...) per element of vectors / scalars
  aggregate,    // f(vector) -> scalar across series
  range,        // f(x[window], consts...) per series, over its window
  stateful,     // f(x, consts...) per series, over its whole history
  fallback,     // default(x, v): x where it has a value, else v
  clock,        // age(x): per series, read from its latest sample's time at every observation
};

/// Static kinds of arguments and results.
enum class ArgType {
  number,
  boolean,
  range,   // a window of numbers: x[...] or (expression)[...]
  condition_range,  // a window of a boolean expression: (x > 1)[...]
  series,  // a series itself (a selector), not an expression of it
  string,  // constant string (e.g. mode "min")
};

struct Param {
  std::string_view name;
  ArgType type;
  bool constant = false;  // must be a compile-time constant (folded at plan time)
  /// For constant strings: the allowed words, '|'-separated ("min|max"); the
  /// kernel receives the word's index as a double.
  std::string_view choices = {};
  /// For constant numbers: the allowed range, lo and hi included unless
  /// open. Every constant number must also be finite. The checker rejects
  /// others at compile time with the argument's position; the docs show the
  /// range (range_text).
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;

  /// Whether constant `x` is an allowed value of this parameter.
  [[nodiscard]] bool accepts(double x) const {
    return std::isfinite(x) && (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
  }
};

/// A constant number parameter's range as text: "0 < alpha <= 1",
/// "h > 0", "any finite number".
std::string range_text(const Param& p);

/// A window of one series: the last `n` samples in time order.
/// `scratch` has room for 2n doubles (kernels that sort use it).
struct Window {
  const double* values;
  const std::int64_t* steps;
  std::size_t n;
  double* scratch;
};

/// Per-series state of a stateful function. Plain data: copied bytewise by
/// save/restore. `s` holds running sums/statistics, `n` sample counts.
struct DetectorState {
  double s[6] = {0, 0, 0, 0, 0, 0};
  std::int64_t n = 0;
  std::int64_t k = 0;
};

using ElementwiseKernel = double (*)(std::span<const double> args);
using AggregateKernel = double (*)(std::span<const double> values);
using RangeKernel = double (*)(const Window& w, std::span<const double> consts);
/// Feeds one new sample `x`; returns the function's value after it (NaN while warming up).
using StatefulKernel = double (*)(DetectorState& st, double x, std::span<const double> consts);
/// What a stateful function last computed, for --explain: reads `st` right
/// after a kernel call (never changes it) and says what the result was
/// compared with, e.g. "EWMA = 4.1, limits 2 +- 0.9 = [1.1, 2.9]".
using StatefulDescribe = std::string (*)(const DetectorState& st, std::span<const double> consts);

struct FunctionDef {
  std::string_view name;
  FnKind kind;
  std::vector<Param> params;
  bool variadic = false;  // the last param repeats (any_nan(a, b, ...))
  ArgType result = ArgType::number;
  /// Range functions: minimum window samples (1, or 2 for slope/std/...).
  /// Stateful functions: samples fed before the value is defined.
  std::size_t min_samples = 1;
  /// Range functions: the kernel gets the one sample just older than the
  /// window instead of the window (`before(x[N steps])`).
  bool preceding = false;
  ElementwiseKernel elementwise = nullptr;
  AggregateKernel aggregate = nullptr;
  RangeKernel range = nullptr;
  StatefulKernel stateful = nullptr;
  StatefulDescribe describe = nullptr;  // optional, stateful functions only
  std::string_view doc;
  std::string_view example;
  std::string_view warmup;  // empty: defined as soon as its inputs are
};

class FunctionRegistry {
 public:
  explicit FunctionRegistry(std::vector<FunctionDef> defs);
  /// Every overload named `name` (empty if none).
  [[nodiscard]] std::vector<const FunctionDef*> lookup(std::string_view name) const;
  [[nodiscard]] const std::vector<FunctionDef>& all() const { return defs_; }
  /// Distinct names, for "did you mean".
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  std::vector<FunctionDef> defs_;
};

/// The registry of all built-in functions.
const FunctionRegistry& standard_functions();

/// Built-in rule files (stdlib/*.rules), embedded at build time.
struct EmbeddedFile {
  std::string_view name;  // e.g. "std/loss.rules"
  std::string_view text;
};
std::span<const EmbeddedFile> standard_rule_files();
/// Declarations of the standard actions (`action reduce_lr(...)`), as rule text.
std::string_view standard_actions_source();

}  // namespace vigil::stdlib

namespace vigil::stdlib {

/// The function reference in Markdown (docs/functions.md), generated from the
/// registry records so the docs cannot drift from the signatures.
std::string render_function_reference(const FunctionRegistry& registry);

}  // namespace vigil::stdlib
