// Tensor statistics (SPEC §1): plain tensor views in, scalar stats out.
//
// Rules never see tensors. A tensor series `T{labels}` handed to the engine
// yields derived scalar series `T_<stat>{labels}` (`grad_norm{layer="fc1"}`)
// for the stats some rule reads; all of one tensor's stats come from a single
// pass over its memory, accumulated in double. The core takes views (pointer,
// dtype, shape, strides) so it does not depend on any tensor library.
#pragma once

#include <cstddef>
#include <cstring>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vigil {

enum class DType { float32, float64, float16, bfloat16 };

/// A strided view of tensor memory. Strides are in elements (as torch's
/// `stride()`); empty strides mean contiguous row-major. A 0-d tensor has an
/// empty shape and one element. The memory must stay valid during the call
/// that receives the view.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::float32;
  std::span<const std::int64_t> shape;
  std::span<const std::int64_t> strides;

  [[nodiscard]] std::int64_t numel() const;
  [[nodiscard]] bool contiguous() const;
};

/// The parameter-free stats, in the order of their bits in a StatMask.
enum class Stat : std::uint8_t {
  norm, sum, abs_sum, mean, abs_mean, var, std, min, max, abs_max,
  frac_zero, frac_pos, frac_neg, frac_nan, frac_inf, nan_count, inf_count, numel,
  update_norm, update_ratio,
};
inline constexpr std::size_t stat_count = 20;
using StatMask = std::uint32_t;
inline constexpr StatMask stat_bit(Stat s) { return StatMask{1} << static_cast<unsigned>(s); }

/// `norm`, `abs_mean`, ... (the suffix of the derived series name).
std::string_view stat_name(Stat s);
/// The stat named by `suffix`, if any.
bool parse_stat(std::string_view suffix, Stat& out);

/// All stats of one tensor. `update_*` need the previous value of the same
/// tensor series and are NaN without one.
struct TensorStats {
  double values[stat_count] = {};
  [[nodiscard]] double operator[](Stat s) const { return values[static_cast<std::size_t>(s)]; }
};

/// Computes every stat of `t` in one pass (double accumulation; NaN and Inf
/// are counted and propagate into sums as IEEE says; var/std are population
/// statistics; min/max/abs_max are NaN if any element is NaN). If `previous`
/// is given (same shape, any dtype/strides), also the update stats.
/// Never throws; a view with a null pointer or a negative extent gives NaN
/// stats and numel 0.
TensorStats compute_stats(const TensorView& t, const TensorView* previous = nullptr);

/// The stats in `wanted` only (the others are NaN; numel is always set):
/// what a rule set reads costs only its own accumulators. A contiguous
/// float32 tensor takes a SIMD path specialised for the set (AVX-512, else
/// AVX2, chosen at run time), as accurate as the full pass (every element is
/// added in double), and a large one may use several threads
/// (set_stats_threading; the result does not depend on it). The update stats
/// are computed only when asked for.
///   auto s = vigil::compute_stats(view, vigil::stat_bit(vigil::Stat::norm));
TensorStats compute_stats(const TensorView& t, StatMask wanted,
                          const TensorView* previous = nullptr);

/// How compute_stats may spread one large tensor over several cores. A
/// contiguous float32 tensor of at least `min_bytes` is reduced by `threads`
/// threads in all (the caller and `threads - 1` workers of a persistent pool
/// that the first such call starts; later calls do not allocate). The split
/// into chunks and the order in which their partial sums are added depend
/// only on the tensor's length, so the stats are bit-identical whatever these
/// settings are and however the threads are scheduled. If the pool is busy
/// (another thread is using it) or the process has forked since it started,
/// the caller reduces the chunks alone. Process-wide; safe to change at any
/// time from any thread.
struct StatsThreading {
  /// Threads per tensor, the caller included: 0 = the hardware's
  /// (std::thread::hardware_concurrency), 1 = the calling thread only (off).
  unsigned threads = 0;
  /// Tensors smaller than this (in bytes) use the calling thread only:
  /// below a few MiB waking the workers costs more than it saves.
  std::size_t min_bytes = std::size_t{4} << 20;
};
void set_stats_threading(const StatsThreading& options);
[[nodiscard]] StatsThreading stats_threading();

/// Stats that take compile-time numeric arguments: `T.frac_outside(lo, hi)`
/// reads the derived series `T_frac_outside(lo,hi){labels}` (the canonical
/// name, param_stat_suffix). Exact definitions in docs/tensors.md.
enum class ParamStat : std::uint8_t { frac_outside, frac_changed, frac_dead_units };
inline constexpr std::size_t param_stat_count = 3;
inline constexpr std::size_t max_param_stat_args = 2;

/// Set in Engine::tensor_stats_used (beside the Stat bits) when some rule
/// reads a parameterised stat of the tensor, so "is this tensor used" stays
/// `mask != 0`.
inline constexpr StatMask param_stats_bit = StatMask{1} << 31;

/// `frac_outside`, ...; the stat named `name`, if any.
std::string_view param_stat_name(ParamStat s);
bool parse_param_stat(std::string_view name, ParamStat& out);
/// How many arguments the stat takes, and their names for messages
/// (`"lo, hi"`).
std::size_t param_stat_arity(ParamStat s);
std::string_view param_stat_params(ParamStat s);

/// The canonical suffix of the derived series name: the stat name and its
/// arguments, each printed shortest-round-trip (fmt `{}`), no spaces:
/// `param_stat_suffix(ParamStat::frac_outside, {{-9.4999, 9.4999}})` is
/// `frac_outside(-9.4999,9.4999)`.
std::string param_stat_suffix(ParamStat s, std::span<const double> args);
/// The inverse: splits a derived series name `T_stat(a,b)` into its tensor
/// name, stat and arguments. False unless `name` ends in a known
/// parameterised stat with the right number of well-formed arguments.
struct ParamStatRef {
  std::string_view tensor;
  ParamStat stat = ParamStat::frac_outside;
  std::size_t nargs = 0;
  double args[max_param_stat_args] = {};
};
bool parse_param_stat_series(std::string_view name, ParamStatRef& out);

/// One parameterised stat of `t` (`args` as many as param_stat_arity).
///   frac_outside(lo, hi): fraction of elements with x < lo or x > hi.
///   frac_changed(rtol, atol): fraction of elements not close to `previous`
///     by numpy.isclose (equal_nan = false); NaN without `previous` or when
///     its shape differs.
///   frac_dead_units(threshold): dim 0 is the batch; fraction of units (one
///     index over the other dims) positive in less than `threshold` percent
///     of the batch entries.
/// NaN for an empty or invalid view or a wrong argument count. Never throws
/// and never allocates.
double compute_param_stat(ParamStat s, std::span<const double> args, const TensorView& t,
                          const TensorView* previous = nullptr);

/// The stats of a tensor split into disjoint parts (the shards that the
/// processes of a data-parallel job hold), from the stats of each part:
/// counts and sums add, norms add in squares, extrema take the extreme,
/// fractions are weighted by numel, the variance combines by the parallel
/// formula (NaN if any part's is), update_norm adds in squares. Parts with
/// numel 0 contribute only their counts. update_ratio is update_norm over
/// `previous_norm`, the whole tensor's norm at its previous observation (a
/// ratio per part cannot be combined). Exact up to rounding.
TensorStats combine_stats(std::span<const TensorStats> parts,
                          double previous_norm = std::numeric_limits<double>::quiet_NaN());
/// A parameterised stat of the whole from the parts' values, weighted by
/// each part's numel: exact for frac_outside and frac_changed; for
/// frac_dead_units the weighted mean of each part's dead fraction (a unit's
/// activity over the whole batch is not derivable from the parts').
double combine_param_stat(ParamStat s, std::span<const double> values,
                          std::span<const double> numels);

/// Copies the elements of `t` into `out` as a packed row-major array of the
/// same dtype (reusing out's capacity). False (and `out` empty) for an
/// invalid view.
bool pack_tensor(const TensorView& t, std::vector<std::byte>& out);

}  // namespace vigil
