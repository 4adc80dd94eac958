// A child that reports success and then leaks: in a LeakSanitizer build it
// exits 23 after printing a passing summary. The run_and_match tests use it
// to show that such a run fails its ctest test instead of passing on the
// summary line.
#include <cstdio>

namespace {
void* volatile sink = nullptr;
}

int main() {
  sink = new char[64];
  sink = nullptr;  // the only pointer to the block is gone: a leak at exit
  std::puts("1 passed, 0 failed");
  return 0;
}
