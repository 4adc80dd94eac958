// The ReLU-output stats the Monitor takes in Monitor::activation(), while
// the tensor the forward pass has just written is still in cache: the zero
// count of `frac_zero` and the dead units of `frac_dead_units(threshold)` in
// one pass over the elements, instead of the engine's two (compute_stats,
// then compute_param_stat) after backward.
//
// Owns: this one kernel. Must not touch: the engine's kernels
// (interp/tensor_stats.*), which define what the values must equal.
#pragma once

#include <cstdint>

namespace vigil::torch::detail {

/// Over a contiguous row-major float32 tensor of `batch` rows of `units`
/// elements (1 <= batch < 2^31, units >= 1): `zeros` = the elements equal to 0
/// (-0 included, NaN not), `dead` = the units (columns) positive in less
/// than `threshold` percent of the rows, decided as compute_param_stat does
/// (`100.0 * active / batch < threshold`, NaN not positive). So
/// zeros / (batch * units) is frac_zero and dead / units frac_dead_units,
/// bit for bit. Never allocates (its counters are on the stack).
void count_zeros_and_dead_units(const float* data, std::int64_t batch, std::int64_t units,
                                double threshold, std::int64_t& zeros, std::int64_t& dead);

}  // namespace vigil::torch::detail
