// Internal hooks of the tensor statistics kernels (interp/tensor_stats.cpp):
// the kernel choice for tests, and the per-thread switch the libtorch
// adapter (torch/monitor.cpp) uses. Hosts choose nothing here.
#pragma once

namespace vigil::detail {

/// Which kernel reduces contiguous float32 tensors: the best this CPU runs
/// (AVX-512, else AVX2+FMA, else the general double path), or a lower one
/// when the CPU has it, so that tests on an AVX-512 machine also prove the
/// AVX2 kernel and the general path against the reference. Process-wide.
enum class StatsKernel { best, avx2, general };
void force_stats_kernel(StatsKernel kernel);

/// While an instance lives, compute_stats on the thread that made it reduces
/// every tensor on that thread alone, whatever set_stats_threading says; the
/// stats are bit-identical either way (the split into chunks depends only on
/// the length). Nests; other threads are unaffected. For a host whose own
/// work keeps the other cores busy (a training step): handing it half a
/// gradient costs it a wake-up and the worker CPU time and saves nothing
/// (docs/performance.md, goal 5).
class StatsOnCallingThread {
 public:
  StatsOnCallingThread();
  ~StatsOnCallingThread();
  StatsOnCallingThread(const StatsOnCallingThread&) = delete;
  StatsOnCallingThread& operator=(const StatsOnCallingThread&) = delete;

 private:
  bool saved_;
};

}  // namespace vigil::detail
