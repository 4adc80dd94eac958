// JSONL follow mode (TraceOptions::follow, used by `rulecheck watch`): the end
// of the data is "nothing yet", a last line without its newline is kept until
// the newline arrives, and reading goes on with whatever is appended.

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

class JsonlFollow : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             (std::string("vigil_follow_") + info->name() + "_" + std::to_string(::getpid()) +
              ".jsonl"))
                .string();
    std::ofstream(path_, std::ios::binary);  // exists, empty
  }
  void TearDown() override { fs::remove(path_); }

  void append(const std::string& text) {
    std::ofstream out(path_, std::ios::binary | std::ios::app);
    out << text;
  }

  std::unique_ptr<vigil::TraceReader> open(bool follow = true) {
    vigil::TraceError error;
    auto reader = vigil::open_jsonl(path_, error, {.follow = follow});
    EXPECT_TRUE(reader) << error.format();
    return reader;
  }

  std::string path_;
};

TEST_F(JsonlFollow, EndOfDataIsNotAnErrorAndAppendedLinesAreRead) {
  auto reader = open();
  vigil::Observation obs;
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error());

  append("{\"step\": 1, \"values\": {\"loss\": 1.5}}\n{\"step\": 2, \"values\": {\"loss\": 1.25}}\n");
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 1);
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 2);
  ASSERT_EQ(obs.values.size(), 1u);
  EXPECT_EQ(obs.values[0].second, 1.25);
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error());

  append("{\"step\": 3, \"mode\": \"eval\", \"values\": {\"loss\": 2}}\n");
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 3);
  EXPECT_EQ(obs.mode, "eval");
}

TEST_F(JsonlFollow, LineWrittenInTwoHalvesIsReadOnceComplete) {
  const std::string first = "{\"step\": 7, \"values\": {\"lo";
  const std::string second = "ss\": 0.5, \"acc\": 0.75}}\n";
  append("{\"step\": 6, \"values\": {\"loss\": 0.625}}\n");
  const std::uint64_t first_line = 39;  // bytes of the line above, newline included
  auto reader = open();
  vigil::Observation obs;
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 6);
  EXPECT_EQ(reader->position(), first_line);

  append(first);
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error()) << reader->error()->format();
  EXPECT_EQ(reader->position(), first_line) << "an incomplete line is not consumed yet";
  EXPECT_FALSE(reader->next(obs)) << "still incomplete on a second look";
  EXPECT_FALSE(reader->error());

  append(second);
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 7);
  ASSERT_EQ(obs.values.size(), 2u);
  EXPECT_EQ(obs.values[0], (std::pair<std::string, double>("acc", 0.75)));
  EXPECT_EQ(obs.values[1], (std::pair<std::string, double>("loss", 0.5)));
  EXPECT_EQ(reader->position(), first_line + first.size() + second.size());
  EXPECT_EQ(reader->size(), reader->position()) << "size() follows the growing file";
}

TEST_F(JsonlFollow, LineSplitBetweenCarriageReturnAndNewline) {
  auto reader = open();
  vigil::Observation obs;
  append("{\"step\": 1, \"values\": {}}\r");
  EXPECT_FALSE(reader->next(obs));
  EXPECT_FALSE(reader->error());
  append("\n{\"step\": 2, \"values\": {}}\r\n");
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 1);
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 2);
}

TEST_F(JsonlFollow, DamageIsStillAnErrorWithItsLineNumber) {
  // Line 2 arrives in two halves; the line numbers of later damage must count it once.
  append("{\"step\": 1, \"values\": {}}\n{\"step\": 2,");
  auto reader = open();
  vigil::Observation obs;
  ASSERT_TRUE(reader->next(obs));
  EXPECT_FALSE(reader->next(obs));
  append(" \"values\": {}}\n\n{\"step\": 3, \"values\": oops}\n{\"step\": 4, \"values\": {}}\n");
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 2);
  EXPECT_FALSE(reader->next(obs));
  ASSERT_TRUE(reader->error());
  EXPECT_EQ(reader->error()->line, 4u);
  EXPECT_EQ(reader->error()->offset, 53u);  // 26 + 26 bytes of lines 1-2, 1 of the empty line 3
  EXPECT_EQ(reader->error()->file, path_);
  EXPECT_FALSE(reader->next(obs)) << "a damaged trace stays stopped";
}

TEST_F(JsonlFollow, WithoutFollowAnUnfinishedLastLineIsTruncation) {
  append("{\"step\": 1, \"values\": {}}\n{\"step\": 2, \"val");
  auto reader = open(/*follow=*/false);
  vigil::Observation obs;
  ASSERT_TRUE(reader->next(obs));
  EXPECT_FALSE(reader->next(obs));
  ASSERT_TRUE(reader->error());
  EXPECT_EQ(reader->error()->line, 2u);
  EXPECT_NE(reader->error()->message.find("truncated"), std::string::npos)
      << reader->error()->message;
}

TEST_F(JsonlFollow, OpenTraceDetectsAndFollows) {
  append("{\"step\": 10, \"values\": {\"x\": 1}}\n");
  vigil::TraceError error;
  auto reader = vigil::open_trace(path_, error, {.follow = true});
  ASSERT_TRUE(reader) << error.format();
  vigil::Observation obs;
  ASSERT_TRUE(reader->next(obs));
  EXPECT_FALSE(reader->next(obs));
  append("{\"step\": 11, \"values\": {\"x\": NaN}}\n");
  ASSERT_TRUE(reader->next(obs));
  EXPECT_EQ(obs.step, 11);
  EXPECT_TRUE(std::isnan(obs.values.at(0).second));
}

}  // namespace
