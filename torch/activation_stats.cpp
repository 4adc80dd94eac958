// One pass for frac_zero and frac_dead_units (see activation_stats.hpp).
// No torch header: this file compiles in a second.
#include "activation_stats.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

namespace vigil::torch::detail {
namespace {

// Units in blocks, the batch outer (as the engine's frac_dead_units): each
// row contributes a contiguous stretch of `m` floats, compared twice (> 0
// into the unit's counter, == 0 into the zero count). The inner loop has no
// dependence between units, so the compiler turns it into vector compares;
// the clones pick AVX-512 or AVX2 at load time where the CPU has them.
constexpr std::int64_t block = 2048;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VIGIL_VECTOR_CLONES \
  [[gnu::target_clones("arch=x86-64-v4", "avx2", "default"), gnu::optimize("tree-vectorize")]]
#else
#define VIGIL_VECTOR_CLONES
#endif

VIGIL_VECTOR_CLONES std::int64_t count_block(const float* p, std::int64_t batch, std::int64_t stride, std::int64_t m,
                         std::int32_t* active) {
  std::int32_t zeros_lane[16] = {};
  for (std::int64_t b = 0; b < batch; ++b, p += stride) {
    std::int64_t u = 0;
    for (; u + 16 <= m; u += 16)
      for (int k = 0; k < 16; ++k) {
        const float x = p[u + k];
        active[u + k] += x > 0.0f;
        zeros_lane[k] += x == 0.0f;
      }
    for (; u < m; ++u) {
      active[u] += p[u] > 0.0f;
      zeros_lane[0] += p[u] == 0.0f;
    }
  }
  std::int64_t zeros = 0;
  for (std::int32_t z : zeros_lane) zeros += z;
  return zeros;
}

}  // namespace

void count_zeros_and_dead_units(const float* data, std::int64_t batch, std::int64_t units,
                                double threshold, std::int64_t& zeros, std::int64_t& dead) {
  zeros = 0;
  dead = 0;
  std::array<std::int32_t, block> active;
  // A lane's zero count is an int32 over one block: at most batch * block / 16
  // per lane, so split the batch if that could overflow.
  constexpr std::int64_t max_rows = (std::int64_t{1} << 30) / block;
  for (std::int64_t first = 0; first < units; first += block) {
    const std::int64_t m = std::min(block, units - first);
    std::fill_n(active.begin(), m, 0);
    for (std::int64_t b0 = 0; b0 < batch; b0 += max_rows) {
      const std::int64_t rows = std::min(max_rows, batch - b0);
      zeros += count_block(data + b0 * units + first, rows, units, m, active.data());
    }
    for (std::int64_t u = 0; u < m; ++u)
      dead += 100.0 * static_cast<double>(active[static_cast<std::size_t>(u)]) /
                  static_cast<double>(batch) <
              threshold;
  }
}

}  // namespace vigil::torch::detail
