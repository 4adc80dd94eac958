// Internal hooks of the tensor statistics kernels (interp/tensor_stats.cpp),
// for tests only: hosts choose nothing here.
#pragma once

namespace vigil::detail {

/// Which kernel reduces contiguous float32 tensors: the best this CPU runs
/// (AVX-512, else AVX2+FMA, else the general double path), or a lower one
/// when the CPU has it, so that tests on an AVX-512 machine also prove the
/// AVX2 kernel and the general path against the reference. Process-wide.
enum class StatsKernel { best, avx2, general };
void force_stats_kernel(StatsKernel kernel);

}  // namespace vigil::detail
