// c10d helpers for multi-process jobs (include/vigil/torch_distributed.hpp).
//
// Owns: c10d glue. Must not touch: the monitor or the engine.
#include "vigil/torch_distributed.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <exception>
#include <limits>

namespace vigil::torch {

AllGather allgather(c10::intrusive_ptr<c10d::ProcessGroup> group) {
  return [group = std::move(group)](std::span<const double> local, std::vector<double>& all) {
    try {
      const auto n = static_cast<std::int64_t>(local.size());
      const auto opts = at::TensorOptions().dtype(at::kDouble);
      std::vector<at::Tensor> input{at::empty({n}, opts)};
      std::memcpy(input[0].data_ptr<double>(), local.data(), local.size() * sizeof(double));
      std::vector<std::vector<at::Tensor>> output(1);
      for (int r = 0; r < group->getSize(); ++r) output[0].push_back(at::empty({n}, opts));
      group->allgather(output, input)->wait();
      all.resize(output[0].size() * local.size());
      for (std::size_t r = 0; r < output[0].size(); ++r) {
        const at::Tensor& part = output[0][r];
        if (part.numel() != n) return false;
        std::memcpy(all.data() + r * local.size(), part.data_ptr<double>(), local.size() * sizeof(double));
      }
      return true;
    } catch (const std::exception&) {
      return false;  // the engine falls back to this process's stats and counts it
    }
  };
}

double mean_across(c10d::ProcessGroup& group, double x) {
  try {
    std::vector<at::Tensor> t{at::full({1}, x, at::TensorOptions().dtype(at::kDouble))};
    group.allreduce(t)->wait();
    return t[0].item<double>() / group.getSize();
  } catch (const std::exception&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace vigil::torch
