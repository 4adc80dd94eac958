// libFuzzer target for the trace readers: any bytes, read as each format
// (and as whatever open_trace detects), must give observations and at most
// one error with a position, never crash, hang or read past the data. The
// first byte picks the reader (% 5), a small line cap (bit 3: 64 bytes, so
// the cap's error paths are reached with short inputs) and follow mode
// (bit 4); the rest is the file. tests/fuzz/replay_main.cpp feeds the kept
// corpus (tests/fuzz/corpus/trace) through this same entry point in
// `make test`.
//
// The readers take a path (include/vigil/trace.hpp), so the input lives in
// one anonymous in-memory file (memfd_create), rewritten per input and opened
// as /proc/self/fd/N: a regular file to every reader, with no disk write per
// execution (the previous per-input temporary file capped the campaign at
// ~220 executions/s) and no fixed name in /tmp.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "vigil/trace.hpp"

namespace {

struct Scratch {
  int fd = -1;
  std::string path;
};

const Scratch& scratch() {
  static const Scratch s = [] {
    Scratch out;
    out.fd = ::memfd_create("vigil-trace-fuzz", MFD_CLOEXEC);
    if (out.fd < 0) {
      std::perror("trace_fuzz: memfd_create");
      std::abort();  // a target that cannot run must not pass silently
    }
    out.path = "/proc/self/fd/" + std::to_string(out.fd);
    return out;
  }();
  return s;
}

// Replaces the in-memory file's content with `data`.
void store(int fd, const std::uint8_t* data, std::size_t size) {
  if (::ftruncate(fd, 0) != 0) std::abort();
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Scratch& file = scratch();
  store(file.fd, data + 1, size - 1);
  const std::string& path = file.path;
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
