// Readers not written yet: each gives a clear error until its file replaces
// this one's definition (tensorboard.cpp, csv.cpp, hf.cpp).
#include "vigil/trace.hpp"

namespace vigil {

namespace {
std::unique_ptr<TraceReader> not_yet(const std::string& path, TraceError& error,
                                     std::string_view format) {
  error = TraceError{path, 0, 0, std::string(format) + " traces are not supported yet"};
  return nullptr;
}
}  // namespace

std::unique_ptr<TraceReader> open_tensorboard(const std::string& path, TraceError& error,
                                              const TraceOptions&) {
  return not_yet(path, error, "TensorBoard");
}
std::unique_ptr<TraceReader> open_csv(const std::string& path, TraceError& error,
                                      const TraceOptions&) {
  return not_yet(path, error, "CSV");
}
std::unique_ptr<TraceReader> open_hf_trainer_state(const std::string& path, TraceError& error,
                                                   const TraceOptions&) {
  return not_yet(path, error, "Hugging Face trainer_state.json");
}

}  // namespace vigil
