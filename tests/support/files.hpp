// File helpers shared by the reader tests: read a whole file, and a fixture
// giving each test its own temporary directory (removed afterwards).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace vigil::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A new, empty directory under the temporary directory, unique to this call
/// (mkdtemp): concurrent runs of the same test, in this tree or another one,
/// never share one. `tag` only makes it recognisable.
inline std::filesystem::path make_temp_dir(const std::string& tag) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("vigil_" + tag + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  return pattern;
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = make_temp_dir(std::string(info->test_suite_name()) + "_" + info->name());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Writes `bytes` to NAME (subdirectories created) in the test's directory.
  std::string write(const std::string& name, const std::string& bytes) {
    const auto path = dir_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }

  std::filesystem::path dir_;
};

}  // namespace vigil::test

namespace vigil::test {

/// Exit status and captured output of a shell command.
struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

/// Runs `command` (shell text) with /bin/sh in `dir`, stdin from /dev/null,
/// and returns its status (128 + signal if killed) and output.
inline Result run_shell(const std::filesystem::path& dir, const std::string& command) {
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const auto out = tmp / ("vigil_run_out_" + tag), err = tmp / ("vigil_run_err_" + tag);
  const std::string cmd = "cd '" + dir.string() + "' && " + command + " >'" + out.string() +
                          "' 2>'" + err.string() + "' </dev/null";
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

}  // namespace vigil::test
