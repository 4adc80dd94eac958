// SourceSet line/column mapping, diagnostic rendering and suggestions.
#include <gtest/gtest.h>

#include "vigil/diagnostic.hpp"

namespace vigil {
namespace {

Diagnostic diag(std::uint32_t begin, std::uint32_t end, std::string message) {
  Diagnostic d;
  d.code = "test";
  d.message = std::move(message);
  d.range = {begin, end};
  return d;
}

TEST(SourceSet, LineColFromLineStartTable) {
  SourceSet s;
  EXPECT_EQ(s.add("a.rules", "ab\ncd\n\nxyz"), 0u);
  EXPECT_EQ(s.add("b.rules", ""), 1u);
  auto lc = [&](std::uint32_t file, std::uint32_t off) {
    const auto r = s.line_col(file, off);
    return std::to_string(r.line) + ":" + std::to_string(r.col);
  };
  EXPECT_EQ(lc(0, 0), "1:1");
  EXPECT_EQ(lc(0, 2), "1:3");  // the newline itself belongs to line 1
  EXPECT_EQ(lc(0, 3), "2:1");
  EXPECT_EQ(lc(0, 6), "3:1");
  EXPECT_EQ(lc(0, 7), "4:1");
  EXPECT_EQ(lc(0, 10), "4:4");   // end of file
  EXPECT_EQ(lc(0, 999), "4:4");  // clamped
  EXPECT_EQ(lc(1, 0), "1:1");
  EXPECT_EQ(s[0].name, "a.rules");
  EXPECT_EQ(s.size(), 2u);
}

TEST(FormatDiagnostic, ClangStyleWithSuggestionAndNotes) {
  SourceSet s;
  s.add("train.rules", "rule r:\n  when val_los > 2 do log\n");
  auto d = diag(15, 22, "unknown series 'val_los'");
  d.suggestion = "val_loss";
  d.notes = {"series seen: loss, val_loss", "second note"};
  EXPECT_EQ(format_diagnostic(d, s),
            "train.rules:2:8: error: unknown series 'val_los'; did you mean 'val_loss'?\n"
            "      when val_los > 2 do log\n"
            "           ^~~~~~~\n"
            "    note: series seen: loss, val_loss\n"
            "    note: second note\n");
}

TEST(FormatDiagnostic, LevelsTabsEmptyRangesAndClipping) {
  SourceSet s;
  s.add("t.rules", "\twhen\tx > 1\nnext line\n");
  auto d = diag(6, 7, "w");
  d.level = DiagLevel::warning;
  EXPECT_EQ(format_diagnostic(d, s), "t.rules:1:7: warning: w\n    \twhen\tx > 1\n    \t    \t^\n");
  d = diag(1, 1, "empty range");
  d.level = DiagLevel::note;
  EXPECT_EQ(format_diagnostic(d, s), "t.rules:1:2: note: empty range\n    \twhen\tx > 1\n    \t^\n");
  // A range running past the end of its line is clipped there.
  d = diag(8, 20, "clipped");
  EXPECT_EQ(format_diagnostic(d, s), "t.rules:1:9: error: clipped\n    \twhen\tx > 1\n    \t    \t  ^~~\n");
  // At the very end of the file: an empty last line, one caret.
  d = diag(22, 22, "at eof");
  EXPECT_EQ(format_diagnostic(d, s), "t.rules:3:1: error: at eof\n    \n    ^\n");
}

TEST(FormatDiagnostic, CrLfAndUnknownFile) {
  SourceSet s;
  s.add("w.rules", "let x = 1\r\nlet y = @\r\n");
  EXPECT_EQ(format_diagnostic(diag(19, 20, "bad"), s), "w.rules:2:9: error: bad\n    let y = @\n            ^\n");
  auto d = diag(0, 0, "no file");
  d.file = 7;
  EXPECT_EQ(format_diagnostic(d, s), "error: no file\n");
}

TEST(FormatDiagnostic, MultipleInOrder) {
  SourceSet s;
  s.add("m.rules", "a\nb\n");
  EXPECT_EQ(format_diagnostics({diag(0, 1, "one"), diag(2, 3, "two")}, s),
            "m.rules:1:1: error: one\n    a\n    ^\n"
            "m.rules:2:1: error: two\n    b\n    ^\n");
}

TEST(EditDistance, CountsEditsAndAdjacentSwaps) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("val_los", "val_loss"), 1u);
  EXPECT_EQ(edit_distance("flaw", "lawn"), 2u);
  EXPECT_EQ(edit_distance("spkie", "spike"), 1u);  // one swap, not two substitutions
  EXPECT_EQ(edit_distance("medain", "median"), 1u);
  EXPECT_EQ(edit_distance("ab", "ba"), 1u);
  EXPECT_EQ(edit_distance("abc", "ca"), 3u);  // OSA: no edits of a swapped pair
}

TEST(ClosestMatch, PlausibleTyposOnly) {
  const std::vector<std::string> names = {"loss", "val_loss", "grad_norm", "critical"};
  EXPECT_EQ(closest_match("val_los", names), "val_loss");
  EXPECT_EQ(closest_match("critcal", names), "critical");
  EXPECT_EQ(closest_match("lss", names), "loss");          // len 3 -> distance 1 allowed
  EXPECT_EQ(closest_match("throughput", names), "");       // nothing close
  EXPECT_EQ(closest_match("grad_nrm_xy", names), "");      // distance 4 > 11/3
  EXPECT_EQ(closest_match("anything", {}), "");
  EXPECT_EQ(closest_match("lost", {"lose", "loss"}), "lose");  // first of equals wins
}

}  // namespace
}  // namespace vigil
