// Rule text -> AST. The grammar (PEGTL 3.2) lives in grammar.hpp next to this
// file, one struct per production with its EBNF in a comment; error messages
// come from one table keyed by grammar rule.
//
// Contract:
// - Never throws and never crashes on any input bytes; problems come back as
//   diagnostics (code "parse") with the position of the failure.
// - After an error the parser skips to the next line that starts a statement
//   (`rule`, `when`, `use`, `param`, `let`, `import`, `action`, `alias`;
//   starts_statement in parser.cpp has the list) and goes on,
//   so one call reports the errors of every broken statement (up to
//   `max_errors`). Statements that parsed are returned even if others failed.
// - Nesting deeper than `max_nesting` (parentheses, unary operators,
//   calls) is an error ("expression nested too deeply"), which bounds the
//   depth of the AST for every later recursive walk.
//   Left-associative chains count too (`1 + 1 + ...` builds a deep tree), so
//   no expression tree is deeper than max_nesting.
// - Numbers are parsed with std::from_chars; a literal out of double range
//   (`1e999999`, `1e-400`) is an error ("number out of range"), not inf or 0.
// - A `when` that begins a line starts a new anonymous rule; it is not a
//   `when` override of a `use` on the lines before it.
// - An error found at a statement keyword that begins a line (`let w = (a +`
//   followed by `rule ...`) is shown just past the last token before it, and
//   parsing resumes at that keyword. Errors at the end of the file likewise
//   point just past the last token.
//
// Example:
//   SourceSet sources;
//   auto id = sources.add("train.rules", "when loss > 10 do stop\n");
//   ParseResult r = grammar::parse(sources, id);
//   if (!r.ok()) std::cerr << format_diagnostics(r.diagnostics, sources);
//
// Owns: the parser's contract. Must not touch: checking.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/ast.hpp"
#include "vigil/diagnostic.hpp"

namespace vigil::grammar {

inline constexpr std::size_t max_nesting = 256;
inline constexpr std::size_t max_errors = 50;

struct ParseResult {
  ast::File file;
  std::vector<Diagnostic> diagnostics;
  [[nodiscard]] bool ok() const { return diagnostics.empty(); }
};

/// Parses `sources[file]`.
ParseResult parse(const SourceSet& sources, std::uint32_t file);

/// Prints a file back as canonical rule text. Parsing the output gives an AST
/// equal to the input's (ranges aside): the round-trip property the tests check.
/// Canonical form: named rules one clause per line (4-space indent), anonymous
/// rules and `use` on one line, clauses in the order when/for/after/every/
/// cooldown/severity/in/do, selectors with braces (`x{l="v"}`), binary
/// operators spaced, parentheses only where precedence needs them, numbers in
/// shortest round-trip form (`1e-07`), units plural (`1 samples`).
/// e.g. print of `when a+b*c>(1) do log` is "when a + b * c > 1 do log\n".
std::string print(const ast::File& file);
std::string print(const ast::Expr& expr);

}  // namespace vigil::grammar
