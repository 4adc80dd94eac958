// Error recovery and presentation for the parser (recovery.cpp): plain
// functions over the file's text, no parser state. Internal to grammar/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vigil::grammar::recovery {

/// A character of an identifier or keyword.
bool is_ident_char(char c);
/// Whether `c` can begin or continue some token of the language; an error at
/// any other byte is reported as that unexpected character.
bool is_language_char(char c);
/// The end of the token at `pos`, for the caret underline.
std::uint32_t token_end(std::string_view text, std::uint32_t pos);
/// Only blanks precede `pos` on its line.
bool at_line_start(std::string_view text, std::size_t pos);
/// Where to show an error detected at `pos`: just past the last token when
/// the statement was cut short by the end of the file or the next statement.
std::uint32_t pull_back_to_last_token(std::string_view text, std::uint32_t pos);
/// `c` printable, or as \xNN.
std::string describe_char(char c);
/// A statement keyword (rule, when, use, param, let, import, action, alias)
/// starts at `pos`.
bool starts_statement(std::string_view text, std::size_t pos);
/// The start of the first line after `pos` that begins (after blanks) with a
/// statement keyword, or text.size(): where parsing resumes after an error.
std::size_t recovery_point(std::string_view text, std::size_t pos);
/// "did you mean" for a misspelt keyword at `at`, where the error `message`
/// says a clause or statement was expected; empty if none.
std::string suggest_keyword(std::string_view text, std::uint32_t at, std::string_view message);

}  // namespace vigil::grammar::recovery
