// Replays a kept fuzz corpus through a libFuzzer target's entry point without
// libFuzzer: every file given (or every file in a directory given) is one
// input. Built with any compiler, so `make test` runs the corpora in the
// plain tree and under ASan+UBSan; a crash, a sanitizer report or a hang
// (ctest's timeout) fails the test. Prints how many inputs ran, and fails on
// none (an empty or missing corpus would otherwise pass).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.push_back(p);
    }
  }
  std::size_t ran = 0;
  for (const auto& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", p.c_str());
      return 1;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++ran;
  }
  std::printf("%zu inputs replayed\n", ran);
  return ran > 0 ? 0 : 1;
}
