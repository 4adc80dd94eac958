// SourceSet, diagnostic rendering and "did you mean" suggestions.
//
// Owns: diagnostic rendering and suggestions. Must not touch: any stage's logic.
#include "vigil/diagnostic.hpp"

#include "grammar/source_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace vigil {

std::uint32_t SourceSet::add(std::string name, std::string text) {
  std::vector<std::uint32_t> starts{0};
  // Offsets are 32-bit everywhere (SourceRange); the parser rejects larger
  // files, so line starts past that limit are never looked up.
  const std::size_t limit = std::min<std::size_t>(text.size(), std::numeric_limits<std::uint32_t>::max());
  for (std::size_t i = 0; i < limit; ++i) {
    if (text[i] == '\n') starts.push_back(static_cast<std::uint32_t>(i + 1));
  }
  files_.push_back(SourceFile{std::move(name), std::move(text)});
  line_starts_.push_back(std::move(starts));
  return static_cast<std::uint32_t>(files_.size() - 1);
}

std::optional<std::uint32_t> SourceSet::load(const std::string& path, std::string& error) {
  std::string text;
  if (!grammar::read_source_file(path, text, error)) return std::nullopt;
  return add(path, std::move(text));
}

LineCol SourceSet::line_col(std::uint32_t file, std::uint32_t offset) const {
  const auto& text = files_.at(file).text;
  const auto& starts = line_starts_.at(file);
  if (offset > text.size()) offset = static_cast<std::uint32_t>(std::min<std::size_t>(text.size(), std::numeric_limits<std::uint32_t>::max()));
  // The last line start <= offset.
  auto it = std::upper_bound(starts.begin(), starts.end(), offset);
  const auto line = static_cast<std::uint32_t>(it - starts.begin());  // >= 1: starts[0] == 0
  // A leading UTF-8 byte order mark takes no column (the parser skips it).
  const std::uint32_t bom =
      line == 1 && offset >= 3 && std::string_view(text).starts_with("\xEF\xBB\xBF") ? 3 : 0;
  return LineCol{line, offset - starts[line - 1] - bom + 1};
}

namespace {

const char* level_word(DiagLevel level) {
  switch (level) {
    case DiagLevel::error: return "error";
    case DiagLevel::warning: return "warning";
    case DiagLevel::note: return "note";
  }
  return "error";
}

// UTF-8 continuation bytes take no column on screen; skipping them keeps the
// caret under the right character when the line holds non-ASCII text.
bool is_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

std::string format_diagnostic(const Diagnostic& d, const SourceSet& sources) {
  std::string out;
  std::string message = d.message;
  if (!d.suggestion.empty()) message += "; did you mean '" + d.suggestion + "'?";

  if (d.file >= sources.size()) {
    // A diagnostic without a known file still renders, just without a location.
    out += std::string(level_word(d.level)) + ": " + message + "\n";
  } else {
    const SourceFile& f = sources[d.file];
    const LineCol lc = sources.line_col(d.file, d.range.begin);
    out += f.name + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.col) + ": " +
           level_word(d.level) + ": " + message + "\n";

    const std::size_t begin = std::min<std::size_t>(d.range.begin, f.text.size());
    const std::size_t line_begin = begin - (lc.col - 1);
    std::size_t line_end = f.text.find('\n', line_begin);
    if (line_end == std::string::npos) line_end = f.text.size();
    if (line_end > line_begin && f.text[line_end - 1] == '\r') --line_end;

    // One line of the file at most, and at most ~200 columns of it around
    // the caret, with bytes a terminal would act on shown as \xNN: a
    // diagnostic must not become a way to print a file (or to drive the
    // terminal) whatever the file holds.
    constexpr std::size_t max_shown = 200;
    std::size_t shown_begin = line_begin, shown_end = line_end;
    if (line_end - line_begin > max_shown) {
      shown_begin = begin > line_begin + max_shown / 4 ? begin - max_shown / 4 : line_begin;
      while (shown_begin < begin && is_continuation(f.text[shown_begin])) ++shown_begin;
      shown_end = std::min(line_end, shown_begin + max_shown);
      while (shown_end > shown_begin && shown_end < line_end && is_continuation(f.text[shown_end]))
        --shown_end;
    }
    auto shown = [](char c) {
      const auto u = static_cast<unsigned char>(c);
      return (u < 0x20 && c != '\t') || u == 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, c);
    };
    std::string line = shown_begin > line_begin ? "..." : "";
    std::string caret(line.size(), ' ');
    for (std::size_t i = shown_begin; i < shown_end; ++i) line += shown(f.text[i]);
    if (shown_end < line_end) line += "...";

    for (std::size_t i = shown_begin; i < std::min(begin, shown_end); ++i) {
      const char c = f.text[i];
      if (c == '\t') caret += '\t';
      else if (!is_continuation(c)) caret.append(shown(c).size(), ' ');
    }
    caret += '^';
    if (begin < shown_end) caret.append(shown(f.text[begin]).size() - 1, '~');
    const std::size_t end = std::min<std::size_t>(std::max<std::size_t>(d.range.end, begin), shown_end);
    for (std::size_t i = begin + 1; i < end; ++i) {
      if (!is_continuation(f.text[i])) caret.append(shown(f.text[i]).size(), '~');
    }
    out += "    ";
    out += line;
    out += "\n    " + caret + "\n";
  }
  for (const auto& note : d.notes) out += "    note: " + note + "\n";
  return out;
}

std::string format_diagnostics(const std::vector<Diagnostic>& ds, const SourceSet& sources) {
  std::string out;
  for (const auto& d : ds) out += format_diagnostic(d, sources);
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus adjacent transpositions, the
  // commonest typo (`meidan`, `spkie`). Three rows, O(|b|) memory.
  std::vector<std::size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  const std::size_t limit = std::max<std::size_t>(1, word.size() / 3);
  const std::string* best = nullptr;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: skipping those
    // keeps the answer and makes a huge candidate (a trace's 60 MB series
    // name) cost nothing.
    const std::size_t gap = c.size() > word.size() ? c.size() - word.size() : word.size() - c.size();
    if (gap >= best_distance) continue;
    const std::size_t dist = edit_distance(word, c);
    if (dist < best_distance) {  // strict: the first of equally close candidates wins
      best = &c;
      best_distance = dist;
    }
  }
  return best != nullptr ? *best : std::string();
}

}  // namespace vigil
