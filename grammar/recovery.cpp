// Error recovery and error presentation for the parser: where a broken
// statement's error is shown, the extent of the token underlined, where
// parsing resumes (the next line starting a statement keyword), and "did you
// mean" for a misspelt keyword. Plain functions over the text: must not
// touch parser state.
#include "grammar/recovery.hpp"

#include <fmt/format.h>

#include "grammar/grammar.hpp"

namespace vigil::grammar::recovery {

namespace g = peg;

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Characters that can begin or continue some token of the language; an error
// at any other byte is reported as that unexpected character.
bool is_language_char(char c) {
  if (is_ident_char(c)) return true;
  return std::string_view(" \t\r\n\v\f#\"`()[]{},.:=<>!~+-*/%^").find(c) != std::string_view::npos;
}

// The extent of the token at `pos`, for the caret underline.
std::uint32_t token_end(std::string_view text, std::uint32_t pos) {
  if (pos >= text.size()) return pos;
  std::uint32_t e = pos;
  if (is_ident_char(text[pos])) {
    while (e < text.size() && (is_ident_char(text[e]) || text[e] == '.')) ++e;
    return e;
  }
  static constexpr std::string_view two[] = {"<=", ">=", "==", "!=", "=~", "!~"};
  for (auto t : two) {
    if (text.substr(pos, 2) == t) return pos + 2;
  }
  return pos + 1;
}

bool at_line_start(std::string_view text, std::size_t pos) {
  while (pos > 0 && (text[pos - 1] == ' ' || text[pos - 1] == '\t')) --pos;
  return pos == 0 || text[pos - 1] == '\n';
}

// A statement cut short at the end of the file, or by the next statement
// (`let w = (a +` followed by `rule ...`), is reported just past its last
// token, where the missing text belongs, rather than at the next statement.
std::uint32_t pull_back_to_last_token(std::string_view text, std::uint32_t pos) {
  bool cut = true;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') {
      cut = i == pos && at_line_start(text, pos) && starts_statement(text, pos);
      break;
    }
  }
  if (!cut) return pos;
  while (pos > 0) {
    const char c = text[pos - 1];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') break;
    --pos;
  }
  return pos;
}

std::string describe_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7F) return std::string(1, c);
  return fmt::format("\\x{:02x}", u);
}

bool starts_statement(std::string_view text, std::size_t pos) {
  static constexpr std::string_view words[] = {"rule", "when",   "use",    "param",
                                               "let",  "import", "action", "alias"};
  for (auto w : words) {
    if (text.substr(pos, w.size()) == w &&
        (pos + w.size() == text.size() || !is_ident_char(text[pos + w.size()]))) {
      return true;
    }
  }
  return false;
}

// The start of the first line after `pos` that begins (after blanks) with a
// statement keyword, or text.size().
std::size_t recovery_point(std::string_view text, std::size_t pos) {
  std::size_t line = text.find('\n', pos);
  while (line != std::string_view::npos) {
    std::size_t p = line + 1;
    while (p < text.size() && (text[p] == ' ' || text[p] == '\t' || text[p] == '\r')) ++p;
    if (starts_statement(text, p)) return p;
    line = text.find('\n', p);
  }
  return text.size();
}

// "did you mean" for a misspelt keyword where a clause or statement was expected.
std::string suggest_keyword(std::string_view text, std::uint32_t at, std::string_view message) {
  if (at >= text.size() || !is_ident_char(text[at])) return {};
  std::size_t e = at;
  while (e < text.size() && is_ident_char(text[e])) ++e;
  const std::string_view word = text.substr(at, e - at);
  if (message == g::error_message<g::do_clause>) {
    return closest_match(word,
                         {"do", "for", "after", "until", "every", "cooldown", "severity", "in"});
  }
  if (message == g::error_message<g::statement>) {
    return closest_match(word,
                         {"rule", "when", "use", "param", "let", "import", "action", "alias"});
  }
  return {};
}

}  // namespace vigil::grammar::recovery
