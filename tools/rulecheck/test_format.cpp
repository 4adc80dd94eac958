// Parser for `.rtest` files and the compact series notation (docs/rtest.md).
//
// The format is line based: every line is one statement, `#` starts a
// comment (outside quotes), and `rules inline:` takes the following lines
// verbatim up to a line `end`. Each malformed line gives one diagnostic and
// parsing goes on, so a file shows all its mistakes at once.
//
// Owns: the .rtest syntax. Must not touch: engines.
#include "tools/rulecheck/test_format.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace rulecheck::rtest {

namespace {

// Upper bound on the values one notation token or step range expands to: a
// typo like `1x1000000000` must be an error, not an allocation failure.
constexpr std::uint64_t max_repeat = 1'000'000;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }
bool is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string over_budget_message(std::string_view token, std::size_t limit) {
  return fmt::format("'{}' expands the file past {} values (the limit for one .rtest file, "
                     "series values and steps together; split the tests into several files)",
                     token, limit);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

/// The part of a line before its comment: `#` outside a quoted string.
std::string_view strip_comment(std::string_view line) {
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '\\') ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == '#' && !quoted) return line.substr(0, i);
  }
  return line;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// `name{a="x", b="y"}` without the blanks outside quotes, as
/// parse_series_key wants it (tests may space label sets for reading).
std::string without_blanks(std::string_view key) {
  std::string out;
  bool quoted = false;
  for (std::size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    if (quoted && c == '\\' && i + 1 < key.size()) {
      out += c;
      out += key[++i];
      continue;
    }
    if (c == '"') quoted = !quoted;
    if (quoted || !is_space(c)) out += c;
  }
  return out;
}

/// A cursor over one line (comment already stripped); offsets are absolute
/// in the file so that errors can point at the exact token.
struct Cursor {
  std::string_view line;
  std::uint32_t base = 0;
  std::size_t pos = 0;

  void skip_ws() {
    while (pos < line.size() && is_space(line[pos])) ++pos;
  }
  bool done() {
    skip_ws();
    return pos >= line.size();
  }
  [[nodiscard]] std::uint32_t offset() const { return base + static_cast<std::uint32_t>(pos); }
  [[nodiscard]] char peek() const { return pos < line.size() ? line[pos] : '\0'; }
  /// Consumes `c` (after blanks) if it is next.
  bool punct(char c) {
    skip_ws();
    if (peek() != c) return false;
    ++pos;
    return true;
  }
  /// Consumes the identifier `kw` (after blanks) if it is next as a whole word.
  bool keyword(std::string_view kw) {
    skip_ws();
    if (line.substr(pos, kw.size()) != kw) return false;
    const std::size_t end = pos + kw.size();
    if (end < line.size() && is_ident(line[end])) return false;
    pos = end;
    return true;
  }
  /// An identifier-like word ([A-Za-z0-9_]+), or empty.
  std::string_view ident() {
    skip_ws();
    const std::size_t start = pos;
    while (pos < line.size() && is_ident(line[pos])) ++pos;
    return line.substr(start, pos - start);
  }
  /// A run of characters up to a blank or one of `stops`.
  std::string_view token(std::string_view stops = "") {
    skip_ws();
    const std::size_t start = pos;
    while (pos < line.size() && !is_space(line[pos]) && stops.find(line[pos]) == std::string_view::npos)
      ++pos;
    return line.substr(start, pos - start);
  }
  /// A `"..."` string with \" \\ \n escapes; false if not at a quote or unterminated.
  bool quoted(std::string& out) {
    skip_ws();
    if (peek() != '"') return false;
    std::size_t i = pos + 1;
    out.clear();
    for (; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        out += line[i] == 'n' ? '\n' : line[i];
      } else {
        out += line[i];
      }
    }
    if (i >= line.size()) return false;
    pos = i + 1;
    return true;
  }
  /// A `{...}` group (quotes respected), returned with its braces; empty if
  /// not at `{` or unbalanced.
  std::string_view braces() {
    skip_ws();
    if (peek() != '{') return {};
    bool quoted_text = false;
    for (std::size_t i = pos; i < line.size(); ++i) {
      const char c = line[i];
      if (quoted_text && c == '\\') ++i;
      else if (c == '"') quoted_text = !quoted_text;
      else if (c == '}' && !quoted_text) {
        const auto out = line.substr(pos, i + 1 - pos);
        pos = i + 1;
        return out;
      }
    }
    return {};
  }
};

class Parser {
 public:
  Parser(const vigil::SourceSet& sources, std::uint32_t file, TestFile& out,
         std::vector<vigil::Diagnostic>& diagnostics, std::size_t max_values)
      : text_(sources[file].text), file_(file), out_(out), diagnostics_(diagnostics),
        max_values_(max_values), values_left_(max_values) {
    out_.path = sources[file].name;
    dir_ = std::filesystem::path(out_.path).parent_path();
  }

  bool parse() {
    const std::size_t errors_before = diagnostics_.size();
    std::size_t begin = 0;
    std::uint32_t number = 0;
    while (begin <= text_.size()) {
      std::size_t end = text_.find('\n', begin);
      if (end == std::string_view::npos) end = text_.size();
      lines_.push_back({text_.substr(begin, end - begin), static_cast<std::uint32_t>(begin), ++number});
      begin = end + 1;
    }
    for (next_ = 0; next_ < lines_.size();) {
      const Line line = lines_[next_++];
      statement(line);
    }
    if (test_) {
      error(test_offset_, test_offset_ + 4,
            fmt::format("test \"{}\" has no 'end'", test_->name));
      finish_test();
    }
    for (std::size_t i = 0; i < out_.tests.size(); ++i) merge_settings(out_.tests[i], own_[i]);
    return diagnostics_.size() == errors_before;
  }

 private:
  struct Line {
    std::string_view text;
    std::uint32_t offset = 0;
    std::uint32_t number = 0;
  };

  // What a test set itself (the rest comes from the file at the end).
  struct Own {
    bool rules = false;
    std::uint32_t line_offset = 0;
    std::uint32_t steps_offset = 0;
  };

  void error(std::uint32_t begin, std::uint32_t end, std::string message,
             std::string suggestion = {}) {
    vigil::Diagnostic d;
    d.code = "rtest";
    d.message = std::move(message);
    d.file = file_;
    d.range = {begin, std::max(end, begin + 1)};
    d.suggestion = std::move(suggestion);
    diagnostics_.push_back(std::move(d));
  }
  void error_at(const Cursor& c, std::string message) {
    const auto rest = c.line.substr(std::min(c.pos, c.line.size()));
    const auto word = rest.substr(0, std::min(rest.find_first_of(" \t"), rest.size()));
    error(c.offset(), c.offset() + static_cast<std::uint32_t>(word.size()), std::move(message));
  }

  Settings& settings() { return test_ ? test_->settings : out_.settings; }

  void statement(const Line& line) {
    Cursor c{strip_comment(line.text), line.offset};
    if (c.done()) return;
    const std::uint32_t start = c.offset();
    const std::string_view word = c.ident();
    if (word.empty()) {
      error_at(c, "expected a statement");
      return;
    }
    if (word == "rules") return rules(c, line, start);
    if (word == "param") return param(c);
    if (word == "strict") {
      settings().strict = true;
      if (!c.done()) error_at(c, "unexpected text after 'strict'");
      return;
    }
    if (word == "test") return begin_test(c, line, start);
    if (word == "end") {
      if (!test_) return error(start, start + 3, "'end' outside a test");
      if (!c.done()) error_at(c, "unexpected text after 'end'");
      return finish_test();
    }
    static const std::vector<std::string> in_test{"series", "steps", "times", "expect"};
    if (std::find(in_test.begin(), in_test.end(), word) != in_test.end()) {
      if (!test_) return error(start, start + static_cast<std::uint32_t>(word.size()),
                               fmt::format("'{}' outside a test", word));
      if (word == "series") return series(c);
      if (word == "steps") return steps(c, start);
      if (word == "times") return times(c);
      return expect(c, line);
    }
    static const std::vector<std::string> all{"rules", "param", "strict", "test",  "end",
                                              "series", "steps", "times", "expect"};
    error(start, start + static_cast<std::uint32_t>(word.size()),
          fmt::format("unknown statement '{}'", word), vigil::closest_match(word, all));
  }

  void rules(Cursor& c, const Line& line, std::uint32_t start) {
    if (test_ && !own_.back().rules) {
      own_.back().rules = true;  // a test's own rules replace the file's
      test_->settings.rule_files.clear();
      test_->settings.rule_files_as_written.clear();
      test_->settings.inline_rules.reset();
    }
    Settings& s = settings();
    const bool is_inline = c.keyword("inline");
    if (is_inline ? !s.rule_files.empty() : s.inline_rules.has_value())
      error(start, start + 5, "rule files and inline rules cannot be mixed; use one kind");
    if (is_inline) {
      c.punct(':');
      if (!c.done()) error_at(c, "unexpected text after 'rules inline:'");
      // The block's lines, verbatim, up to a line `end`.
      std::string& text = s.inline_rules ? *s.inline_rules : s.inline_rules.emplace();
      std::uint32_t lines_in_text = static_cast<std::uint32_t>(std::count(text.begin(), text.end(), '\n'));
      while (next_ < lines_.size() && trim(strip_comment(lines_[next_].text)) != "end") {
        const Line& l = lines_[next_++];
        text.append(l.number - 1 - lines_in_text, '\n');  // pad up to this line
        text += l.text;
        text += '\n';
        lines_in_text = l.number;
      }
      if (next_ >= lines_.size()) {
        error(start, start + 5, "inline rules have no 'end'");
        return;
      }
      ++next_;  // the `end`
      (void)line;
      return;
    }
    std::string path;
    if (!c.quoted(path)) return error_at(c, "expected a quoted rule file path or 'inline:'");
    if (!c.done()) error_at(c, "unexpected text after the rule file path");
    const auto joined = std::filesystem::path(path).is_absolute() ? std::filesystem::path(path)
                                                                  : dir_ / path;
    s.rule_files.push_back(joined.lexically_normal().string());
    s.rule_files_as_written.push_back(path);
  }

  void param(Cursor& c) {
    const std::uint32_t name_at = c.offset();
    const auto name = c.ident();
    if (name.empty()) return error_at(c, "expected a param name");
    if (!c.punct('=')) return error_at(c, "expected '=' after the param name");
    c.skip_ws();
    const std::uint32_t value_at = c.offset();
    vigil::Value value;
    std::string str;
    if (c.peek() == '"') {
      if (!c.quoted(str)) return error_at(c, "unterminated string");
      value = str;
    } else {
      const auto raw = trim(c.line.substr(c.pos));
      if (raw.empty()) return error(value_at, value_at + 1, "expected a param value");
      value = vigil::parse_value(raw);
      c.pos = c.line.size();
    }
    if (!c.done()) return error_at(c, "unexpected text after the param value");
    (void)name_at;
    settings().params[std::string(name)] = std::move(value);
  }

  void begin_test(Cursor& c, const Line& line, std::uint32_t start) {
    if (test_) {
      error(start, start + 4, fmt::format("test inside test \"{}\" (missing 'end'?)", test_->name));
      finish_test();
    }
    std::string name;
    if (!c.quoted(name)) return error_at(c, "expected a quoted test name");
    c.punct(':');
    if (!c.done()) error_at(c, "unexpected text after the test name");
    test_.emplace();
    test_->name = std::move(name);
    test_->line = line.number;
    test_offset_ = start;
    own_.push_back({.line_offset = start});
  }

  void finish_test() {
    TestCase& t = *test_;
    const std::uint32_t at = test_offset_;
    std::size_t columns = 0;
    for (const auto& s : t.series) columns = std::max(columns, s.values.size());
    // Past the file's value budget, lines are dropped silently (the budget
    // was reported once): a test left empty by that is no second error.
    if (t.series.empty() && !budget_reported_)
      error(at, at + 4, fmt::format("test \"{}\" has no series", t.name));
    if (t.expects.empty() && !budget_reported_)
      error(at, at + 4, fmt::format("test \"{}\" has no expectations", t.name));
    if (t.steps && t.steps->size() < columns) {
      const auto o = own_.back().steps_offset;
      error(o, o + 5, fmt::format("'steps:' lists {} steps but a series has {} values",
                                  t.steps->size(), columns));
    }
    // `steps START every STRIDE` numbers the columns START + i * STRIDE: the
    // last one must be an int64 step, not a signed overflow.
    std::int64_t last = 0;
    if (!t.steps && columns > 0 &&
        (__builtin_mul_overflow(static_cast<std::int64_t>(columns - 1), t.step_stride, &last) ||
         __builtin_add_overflow(t.step_start, last, &last))) {
      const auto o = own_.back().steps_offset ? own_.back().steps_offset : at;
      error(o, o + 5,
            fmt::format("'steps {} every {}' over {} values passes the largest step ({})",
                        t.step_start, t.step_stride, columns,
                        std::numeric_limits<std::int64_t>::max()));
    }
    out_.tests.push_back(std::move(t));
    test_.reset();
  }

  void merge_settings(TestCase& t, const Own& own) {
    const Settings& file = out_.settings;
    if (!own.rules) {
      t.settings.rule_files = file.rule_files;
      t.settings.rule_files_as_written = file.rule_files_as_written;
      t.settings.inline_rules = file.inline_rules;
    }
    for (const auto& [k, v] : file.params) t.settings.params.try_emplace(k, v);  // test wins
    t.settings.strict = t.settings.strict || file.strict;
    const auto at = own.line_offset;
    if (t.settings.rule_files.empty() && !t.settings.inline_rules)
      error(at, at + 4, fmt::format("test \"{}\" has no rules (add 'rules \"FILE\"' or 'rules inline:')", t.name));
  }

  // `series KEY [in MODE]: VALUES`
  void series(Cursor& c) {
    SeriesSpec s;
    s.offset = c.offset();
    c.skip_ws();
    std::string key;
    if (c.peek() == '"') {
      if (!c.quoted(key)) return error_at(c, "unterminated series key");
    } else {
      // The name, then an optional `{...}` label set that may hold ':' and blanks.
      const std::size_t begin = c.pos;
      c.token(":{");
      if (c.peek() == '{' && c.braces().empty()) return error_at(c, "unbalanced '{' in series key");
      key = std::string(c.line.substr(begin, c.pos - begin));
    }
    vigil::Labels labels;
    if (key.empty() || !vigil::parse_series_key(without_blanks(key), s.name, labels))
      return error(s.offset, s.offset + static_cast<std::uint32_t>(std::max<std::size_t>(key.size(), 1)),
                   fmt::format("malformed series key '{}'", key));
    s.key = vigil::format_series_key(s.name, labels);
    if (c.keyword("in")) {
      const auto mode = c.ident();
      if (mode.empty()) return error_at(c, "expected a mode after 'in'");
      s.mode = mode;
    }
    if (!c.punct(':')) return error_at(c, "expected ':' before the series values");
    for (const auto& other : test_->series)
      if (other.key == s.key && other.mode == s.mode)
        return error(s.offset, s.offset + static_cast<std::uint32_t>(key.size()),
                     fmt::format("series '{}' in {} given twice", s.key, s.mode));
    if (!values(c, s.values)) return;
    if (s.values.empty()) return error_at(c, "expected series values");
    test_->series.push_back(std::move(s));
  }

  bool values(Cursor& c, std::vector<std::optional<double>>& out) {
    c.skip_ws();
    const auto rest = c.line.substr(c.pos);
    const std::size_t before = out.size();
    if (auto e = expand_values(rest, out, values_left_)) {
      const auto at = c.offset() + static_cast<std::uint32_t>(e->offset);
      // The budget is reported once per file; later lines are still
      // checked for other errors (with nothing left to expand into).
      if (!e->over_budget || !budget_reported_)
        error(at, at + static_cast<std::uint32_t>(e->length),
              e->over_budget ? over_budget_message(rest.substr(e->offset, e->length), max_values_)
                             : e->message);
      if (e->over_budget) {
        values_left_ = 0;
        budget_reported_ = true;
      }
      out.clear();  // nothing held from a line that failed
      out.shrink_to_fit();
      return false;
    }
    values_left_ -= out.size() - before;
    c.pos = c.line.size();
    return true;
  }

  // `steps START [every STRIDE]` or `steps: LIST`
  void steps(Cursor& c, std::uint32_t start) {
    own_.back().steps_offset = start;
    if (c.punct(':')) {
      const std::uint32_t at = c.offset();
      std::vector<std::optional<double>> raw;
      if (!values(c, raw)) return;
      std::vector<std::int64_t> list;
      for (const auto& v : raw) {
        if (!v || !std::isfinite(*v) || *v != std::floor(*v) || std::fabs(*v) > 9e15)
          return error(at, at + 1, "'steps:' takes whole step numbers");
        list.push_back(static_cast<std::int64_t>(*v));
      }
      test_->steps = std::move(list);
      return;
    }
    c.skip_ws();
    const std::uint32_t first_at = c.offset();
    const auto first_text = c.token();
    const auto first = parse_int(first_text);
    if (!first)
      return error(first_at, first_at + static_cast<std::uint32_t>(first_text.size()),
                   "expected a first step number or ':'");
    test_->step_start = *first;
    if (c.keyword("every")) {
      const std::uint32_t at = c.offset();
      const auto stride = parse_int(c.token());
      if (!stride || *stride <= 0) return error(at, at + 1, "expected a positive step stride after 'every'");
      test_->step_stride = *stride;
    }
    if (!c.done()) error_at(c, "unexpected text after the steps");
  }

  void times(Cursor& c) {
    if (!c.punct(':')) return error_at(c, "expected ':' after 'times'");
    values(c, test_->times);
  }

  // `expect fire RULE at STEPS [clauses]` / `expect no fire RULE [clauses]` /
  // `expect no eval RULE [clauses]`
  void expect(Cursor& c, const Line& line) {
    Expectation e;
    e.line = line.number;
    if (c.keyword("no")) {
      e.fire = false;
      e.no_eval = c.keyword("eval");
      if (!e.no_eval && !c.keyword("fire"))
        return error_at(c, "expected 'fire' or 'eval' after 'expect no'");
    } else if (!c.keyword("fire")) {
      return error_at(c, "expected 'fire', 'no fire' or 'no eval' after 'expect'");
    }
    c.skip_ws();
    const std::uint32_t rule_at = c.offset();
    std::string rule;
    if (c.peek() == '"') {
      if (!c.quoted(rule)) return error_at(c, "unterminated rule name");
    } else {
      rule = std::string(c.token(","));
    }
    if (rule.empty()) return error_at(c, "expected a rule name");
    e.rule = std::move(rule);
    e.rule_range = {rule_at, c.offset()};
    if (e.fire) {
      if (!c.keyword("at")) return error_at(c, "expected 'at STEPS' after the rule name");
      if (!step_list(c, e.steps)) return;
    }
    while (!c.done()) {
      const std::uint32_t at = c.offset();
      const auto word = c.ident();
      if (word == "labels") {
        const auto group = c.braces();
        vigil::Labels labels;
        std::string name;
        if (group.empty() || !vigil::parse_series_key("x" + without_blanks(group), name, labels))
          return error_at(c, "expected a label set like {layer=\"conv1\"} after 'labels'");
        e.labels = std::move(labels);
      } else if (word == "in") {
        const auto mode = c.ident();
        if (mode.empty()) return error_at(c, "expected a mode after 'in'");
        e.mode = std::string(mode);
      } else if (e.fire && word == "actions") {
        std::vector<std::string> names;
        do {
          const auto name = c.ident();
          if (name.empty()) return error_at(c, "expected an action name");
          names.emplace_back(name);
        } while (c.punct(','));
        e.actions = std::move(names);
      } else if (e.fire && word == "severity") {
        const auto s = c.ident();
        const std::pair<std::string_view, vigil::Severity> levels[] = {
            {"info", vigil::Severity::info}, {"warning", vigil::Severity::warning},
            {"error", vigil::Severity::error}, {"critical", vigil::Severity::critical}};
        const auto it = std::find_if(std::begin(levels), std::end(levels),
                                     [&](const auto& l) { return l.first == s; });
        if (it == std::end(levels)) return error_at(c, "expected info, warning, error or critical");
        e.severity = it->second;
      } else if (e.fire && word == "value") {
        const std::uint32_t v_at = c.offset();
        const auto v = c.token();
        if (v == "none") {
          e.value.emplace(std::nullopt);
        } else if (const auto n = parse_number(v)) {
          e.value.emplace(*n);
        } else {
          return error(v_at, v_at + static_cast<std::uint32_t>(std::max<std::size_t>(v.size(), 1)),
                       "expected a number or 'none' after 'value'");
        }
      } else if (e.fire && word == "pending_since") {
        const std::uint32_t v_at = c.offset();
        const auto v = parse_int(c.token());
        if (!v) return error(v_at, v_at + 1, "expected a step after 'pending_since'");
        e.pending_since = *v;
      } else {
        static const std::vector<std::string> fire_clauses{"labels", "in", "actions", "severity",
                                                           "value", "pending_since"};
        static const std::vector<std::string> no_fire_clauses{"labels", "in"};
        const auto& known = e.fire ? fire_clauses : no_fire_clauses;
        const std::string shown = word.empty() ? std::string(c.token()) : std::string(word);
        return error(at, at + static_cast<std::uint32_t>(std::max<std::size_t>(shown.size(), 1)),
                     fmt::format("unexpected '{}' in expectation (expected {})", shown,
                                 e.fire ? "labels, in, actions, severity, value or pending_since"
                                        : "labels or in"),
                     vigil::closest_match(shown, known));
      }
    }
    test_->expects.push_back(std::move(e));
  }

  // `5`, `5, 7`, `5..8` (inclusive), mixed.
  bool step_list(Cursor& c, std::vector<std::int64_t>& out) {
    do {
      c.skip_ws();
      const std::uint32_t at = c.offset();
      const auto item = c.token(",");
      const auto dots = item.find("..");
      const auto first = parse_int(item.substr(0, dots));
      std::optional<std::int64_t> last = first;
      if (dots != std::string_view::npos) last = parse_int(item.substr(dots + 2));
      const auto item_end = at + static_cast<std::uint32_t>(std::max<std::size_t>(item.size(), 1));
      if (!first || !last || *last < *first ||
          static_cast<std::uint64_t>(*last) - static_cast<std::uint64_t>(*first) >= max_repeat) {
        error(at, item_end, fmt::format("expected a step or a range FIRST..LAST, got '{}'", item));
        return false;
      }
      // Step lists count toward the file's budget like series values.
      const auto n = static_cast<std::uint64_t>(*last) - static_cast<std::uint64_t>(*first) + 1;
      if (n > values_left_) {
        if (!budget_reported_) error(at, item_end, over_budget_message(item, max_values_));
        values_left_ = 0;
        budget_reported_ = true;
        return false;
      }
      values_left_ -= n;
      for (std::int64_t s = *first;; ++s) {
        out.push_back(s);
        if (s == *last) break;  // not `s <= last`: ++s past INT64_MAX would overflow
      }
    } while (c.punct(','));
    return true;
  }

  std::string_view text_;
  std::uint32_t file_;
  TestFile& out_;
  std::vector<vigil::Diagnostic>& diagnostics_;
  std::filesystem::path dir_;
  std::vector<Line> lines_;
  std::size_t next_ = 0;
  std::optional<TestCase> test_;
  std::uint32_t test_offset_ = 0;
  std::vector<Own> own_;  // parallel to out_.tests (and the open test)
  std::size_t max_values_;
  std::size_t values_left_;  // of max_values_, for the rest of the file
  bool budget_reported_ = false;
};

}  // namespace

std::optional<double> parse_number(std::string_view text) {
  if (text.empty()) return std::nullopt;
  const std::string l = lower(text);
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (l == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (l == "inf" || l == "+inf" || l == "infinity" || l == "+infinity") return inf;
  if (l == "-inf" || l == "-infinity") return -inf;
  std::string_view s = text;
  if (s.front() == '+') s.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<NotationError> expand_values(std::string_view text,
                                           std::vector<std::optional<double>>& out,
                                           std::size_t budget) {
  const std::size_t limit = out.size() + std::min(budget, out.max_size() - out.size());
  std::size_t pos = 0;
  while (true) {
    while (pos < text.size() && is_space(text[pos])) ++pos;
    if (pos >= text.size()) return std::nullopt;
    const std::size_t start = pos;
    while (pos < text.size() && !is_space(text[pos])) ++pos;
    const std::string_view tok = text.substr(start, pos - start);
    auto fail = [&](std::string message) {
      return NotationError{start, tok.size(), std::move(message)};
    };
    // Checked before anything is appended, so a token past the budget
    // costs no memory.
    auto over = [&](std::uint64_t n) { return n > limit - out.size(); };
    auto too_many = [&] {
      auto e = fail(fmt::format("'{}' expands past the {} values allowed", tok, budget));
      e.over_budget = true;
      return e;
    };

    if (tok == "_") {
      if (over(1)) return too_many();
      out.emplace_back();
      continue;
    }
    const auto x = tok.rfind('x');
    if (x == std::string_view::npos) {
      const auto v = parse_number(tok);
      if (!v) return fail(fmt::format("invalid value '{}'", tok));
      if (over(1)) return too_many();
      out.emplace_back(*v);
      continue;
    }
    // Expanding notation: HEADxN.
    const auto count = parse_int(tok.substr(x + 1));
    if (!count || *count < 0) return fail(fmt::format("invalid repeat count in '{}'", tok));
    if (static_cast<std::uint64_t>(*count) >= max_repeat)
      return fail(fmt::format("repeat count too large in '{}'", tok));
    const std::string_view head = tok.substr(0, x);
    if (head == "_") {
      if (over(static_cast<std::uint64_t>(*count))) return too_many();
      out.insert(out.end(), static_cast<std::size_t>(*count), std::nullopt);
      continue;
    }
    // The operator of A+B / A-B: a sign that is not the first character and
    // not part of an exponent (`1e-3+1e-4x5`).
    std::size_t op = std::string_view::npos;
    for (std::size_t i = 1; i < head.size(); ++i) {
      if ((head[i] == '+' || head[i] == '-') && head[i - 1] != 'e' && head[i - 1] != 'E') {
        op = i;
        break;
      }
    }
    const auto a = parse_number(head.substr(0, op));
    if (!a) return fail(fmt::format("invalid value '{}'", tok));
    if (op == std::string_view::npos) {  // AxN: N copies of A
      if (over(static_cast<std::uint64_t>(*count))) return too_many();
      out.insert(out.end(), static_cast<std::size_t>(*count), *a);
      continue;
    }
    const auto b = parse_number(head.substr(op + 1));
    if (!b) return fail(fmt::format("invalid increment in '{}'", tok));
    const double inc = head[op] == '+' ? *b : -*b;
    if (over(static_cast<std::uint64_t>(*count) + 1)) return too_many();
    // A + i*B rather than repeated addition, so long runs do not drift.
    for (std::int64_t i = 0; i <= *count; ++i) out.emplace_back(*a + static_cast<double>(i) * inc);
  }
}

bool parse_test_file(const vigil::SourceSet& sources, std::uint32_t file, TestFile& out,
                     std::vector<vigil::Diagnostic>& diagnostics, std::size_t max_values) {
  return Parser(sources, file, out, diagnostics, max_values).parse();
}

}  // namespace rulecheck::rtest
