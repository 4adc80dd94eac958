// libFuzzer target for the trace readers: any bytes, read as each format
// (and as whatever open_trace detects), must give observations and at most
// one error with a position, never crash, hang or read past the data. The
// first byte picks the reader (% 5), a small line cap (bit 3: 64 bytes, so
// the cap's error paths are reached with short inputs) and follow mode
// (bit 4); the rest is the file. tests/fuzz/replay_main.cpp feeds the kept
// corpus (tests/fuzz/corpus/trace) through this same entry point in
// `make test`.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vigil/trace.hpp"

namespace {

const std::string& scratch_file() {
  static const std::string path = [] {
    std::atexit([] { std::remove(("/tmp/vigil-trace-fuzz-" + std::to_string(::getpid())).c_str()); });
    return "/tmp/vigil-trace-fuzz-" + std::to_string(::getpid());
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string& path = scratch_file();
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return 0;
    std::fwrite(data + 1, 1, size - 1, f);
    std::fclose(f);
  }
  vigil::TraceError error;
  std::unique_ptr<vigil::TraceReader> reader;
  vigil::TraceOptions options;
  if (data[0] & 0x08) options.max_line_bytes = 64;
  options.follow = (data[0] & 0x10) != 0;
  switch (data[0] % 5) {
    case 0: reader = vigil::open_trace(path, error, options); break;
    case 1: reader = vigil::open_jsonl(path, error, options); break;
    case 2: reader = vigil::open_csv(path, error, options); break;
    case 3: reader = vigil::open_tensorboard(path, error, options); break;
    case 4: reader = vigil::open_hf_trainer_state(path, error, options); break;
  }
  if (!reader) return 0;
  vigil::Observation obs;
  std::size_t n = 0;
  while (reader->next(obs)) {
    // A CSV row of two bytes can hold train, eval and test values (three
    // observations); far more observations than bytes is a loop that never ends.
    if (++n > 4 * size + 4) std::abort();
  }
  if (const auto& e = reader->error()) (void)e->format();
  return 0;
}
