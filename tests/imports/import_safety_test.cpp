// Issue 11 §2: rule files cannot read what they should not. Each case was a
// leak or a hang before: `import "/proc/self/environ"` printed the
// environment inside a diagnostic, `import "../../x"` a line of any file,
// `import "/dev/zero"` read until memory ran out, `import "fifo"` hung.
// Cases that hung run rulecheck under `timeout` (a deadlock guard only).

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/files.hpp"
#include "vigil/program.hpp"

namespace {

namespace fs = std::filesystem;

class ImportTest : public vigil::test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    write("root/lib/ok.rules", "when loss > 2 do log\n");
    write("outside/secret.rules", "when secret_series > 1 do log\n");
  }
  vigil::CompileResult compile(const std::string& main_text, vigil::CompileOptions options = {}) {
    return vigil::compile_file(write("root/main.rules", main_text), options);
  }
};

TEST_F(ImportTest, RelativeImportsBelowTheRootFileAreRead) {
  const auto r = compile("import \"lib/ok.rules\"\n");
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
}

TEST_F(ImportTest, PathsLeavingTheRootDirectoryNeedAnImportRoot) {
  auto r = compile("import \"../outside/secret.rules\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("outside the root rule file's directory"), std::string::npos)
      << r.format_diagnostics();
  vigil::CompileOptions allow;
  allow.import_paths = {(dir_ / "outside").string()};
  r = compile("import \"../outside/secret.rules\"\n", allow);
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
  // An import root is also searched, like -I.
  r = compile("import \"secret.rules\"\n", allow);
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
}

TEST_F(ImportTest, AbsolutePathsNeedAnImportRoot) {
  const auto secret = (dir_ / "outside" / "secret.rules").string();
  auto r = compile(fmt::format("import \"{}\"\n", secret));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("is an absolute path"), std::string::npos);
  EXPECT_EQ(r.format_diagnostics().find("secret_series"), std::string::npos);
  vigil::CompileOptions allow;
  allow.import_paths = {(dir_ / "outside").string()};
  r = compile(fmt::format("import \"{}\"\n", secret), allow);
  EXPECT_TRUE(r.ok()) << r.format_diagnostics();
}

TEST_F(ImportTest, ASymlinkOutOfTheRootIsOutside) {
  fs::create_symlink(dir_ / "outside" / "secret.rules", dir_ / "root" / "link.rules");
  const auto r = compile("import \"link.rules\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("outside the root rule file's directory"), std::string::npos);
}

TEST_F(ImportTest, BinaryFilesGetOneErrorAndNoneOfTheirContent) {
  constexpr char bytes[] = "when x > 1 do log\nSECRET\0\x01\x02 more SECRET";
  write("root/bin.rules", std::string(bytes, sizeof bytes - 1));  // the NUL inside, not the last
  const auto r = compile("import \"bin.rules\"\n");
  ASSERT_FALSE(r.ok());
  const auto text = r.format_diagnostics();
  EXPECT_NE(text.find("is not rule text (binary data at byte 24)"), std::string::npos) << text;
  EXPECT_EQ(text.find("SECRET"), std::string::npos) << text;
  EXPECT_EQ(r.diagnostics.size(), 1u);
}

TEST_F(ImportTest, ProcEnvironIsNotPrintedEvenWhenAllowed) {
  ::setenv("VIGIL_IMPORT_TEST_SECRET", "hunter2", 1);
  vigil::CompileOptions allow;
  allow.import_paths = {"/proc/self"};
  auto r = compile("import \"/proc/self/environ\"\n", allow);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.format_diagnostics().find("hunter2"), std::string::npos) << r.format_diagnostics();
  r = compile("import \"/proc/self/environ\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.format_diagnostics().find("hunter2"), std::string::npos);
}

TEST_F(ImportTest, FilesOverSixteenMebibytesAreRefused) {
  {
    std::ofstream out(dir_ / "root" / "big.rules");
    const std::string line(1023, '#');
    for (int i = 0; i < 17 * 1024; ++i) out << line << '\n';
  }
  const auto r = compile("import \"big.rules\"\n");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.format_diagnostics().find("is larger than 16777216 bytes"), std::string::npos)
      << r.format_diagnostics();
}

TEST_F(ImportTest, DiagnosticsEchoAtMostTwoHundredColumnsOfOneLine) {
  const auto r = compile("let x = " + std::string(5000, 'a') + " + \x7f + " + std::string(5000, 'b') + "\n");
  ASSERT_FALSE(r.ok());
  const auto text = r.format_diagnostics();
  const auto first_nl = text.find('\n');
  const auto second_nl = text.find('\n', first_nl + 1);
  const std::string shown = text.substr(first_nl + 1, second_nl - first_nl - 1);
  EXPECT_LE(shown.size(), 4u + 200u + 6u + 3u) << shown;  // indent, 200 columns, "...", \xNN
  EXPECT_NE(shown.find("\\x7f"), std::string::npos) << shown;
  EXPECT_EQ(text.find('\x7f'), std::string::npos);
  // The caret still points at the byte.
  const std::string caret = text.substr(second_nl + 1, text.find('\n', second_nl + 1) - second_nl - 1);
  EXPECT_EQ(caret.find('^'), shown.find("\\x7f"));
}

TEST_F(ImportTest, AnImportCycleIsOneErrorWithoutSpuriousDuplicates) {
  // Old: the root file was loaded a second time through the cycle, so every
  // let and rule in it was also "already defined".
  write("root/b.rules", "import \"main.rules\"\n");
  const auto r = compile("import \"b.rules\"\nlet x = 1\nwhen loss > x do log\n");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.diagnostics.size(), 1u) << r.format_diagnostics();
  EXPECT_NE(r.format_diagnostics().find("b.rules:1:8: error: import cycle through 'main.rules'"),
            std::string::npos)
      << r.format_diagnostics();
}

#ifdef RULECHECK_PATH
vigil::test::Result rulecheck(const fs::path& dir, const std::string& args) {
  // timeout: the old reader hung on a FIFO and read /dev/zero until killed.
  return vigil::test::run_shell(dir, "timeout 60 '" RULECHECK_PATH "' " + args);
}

TEST_F(ImportTest, DevicesAndFifosAreRefusedWithoutReadingThem) {
  ASSERT_EQ(::mkfifo((dir_ / "root" / "fifo.rules").c_str(), 0600), 0);
  write("root/main.rules", "import \"fifo.rules\"\nimport \"/dev/zero\"\n");
  auto r = rulecheck(dir_, "check root/main.rules --import-path /dev");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot read imported file 'fifo.rules': is not a regular file"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot read imported file '/dev/zero': is not a regular file"),
            std::string::npos)
      << r.err;
  // Root files the same.
  r = rulecheck(dir_, "check /dev/zero root/fifo.rules");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot read rule file '/dev/zero': is not a regular file"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot read rule file 'root/fifo.rules': is not a regular file"),
            std::string::npos)
      << r.err;
}

TEST_F(ImportTest, ImportPathFlag) {
  write("root/main.rules", "import \"../outside/secret.rules\"\n");
  auto r = rulecheck(dir_, "check root/main.rules");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--import-path"), std::string::npos) << r.err;
  r = rulecheck(dir_, "check root/main.rules --import-path outside");
  EXPECT_EQ(r.status, 0) << r.err;
}
#endif

}  // namespace
