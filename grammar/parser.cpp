// Rule text -> AST: the driver. PEGTL parses one statement at a time with
// the actions of actions_expressions.hpp, actions_clauses.hpp and
// actions_statements.hpp building into State (parse_state.hpp); after an
// error, recovery.cpp decides where it is shown and where parsing resumes.
// See parser.hpp for the contract. Must not check names or types.
#include "grammar/actions_clauses.hpp"
#include "grammar/actions_expressions.hpp"
#include "grammar/actions_statements.hpp"
#include "grammar/recovery.hpp"

namespace vigil::grammar {

namespace {

using namespace recovery;  // NOLINT: the driver is recovery's one user

Diagnostic make_error(std::uint32_t file, std::string message, std::uint32_t begin,
                      std::uint32_t end) {
  Diagnostic d;
  d.level = DiagLevel::error;
  d.code = "parse";
  d.message = std::move(message);
  d.file = file;
  d.range = {begin, end};
  return d;
}

}  // namespace

ParseResult parse(const SourceSet& sources, std::uint32_t file) {
  ParseResult result;
  result.file.file = file;
  if (file >= sources.size()) {
    result.diagnostics.push_back(make_error(file, "no such source file", 0, 0));
    return result;
  }
  const std::string& text = sources[file].text;
  if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
    result.diagnostics.push_back(make_error(file, "file too large (4 GiB limit)", 0, 0));
    return result;
  }
  const std::string_view view(text);

  State st;
  st.base = text.data();
  st.out = &result.file;

  // A UTF-8 byte order mark (editors on Windows write one; the CSV reader
  // accepts it too) is not rule text: parsing starts after it. Offsets stay
  // offsets into the whole text, so positions are unchanged.
  constexpr std::string_view bom = "\xEF\xBB\xBF";
  std::size_t pos = view.starts_with(bom) ? bom.size() : 0;
  while (pos <= text.size() && result.diagnostics.size() < max_errors) {
    Input in(text.data() + pos, text.data() + text.size(), sources[file].name.c_str());
    std::optional<Diagnostic> error;
    std::uint32_t resume_at = 0;  // where the failure was detected, for recovery
    try {
      pegtl::parse<g::next_statement, action, g::control>(in, st);
      if (!st.exprs.empty() || !st.ops.empty()) {
        throw SyntaxError{g::error_message<g::internal_error>, st.offset(in.current()),
                          st.offset(in.current())};
      }
      if (in.empty()) break;
      pos = static_cast<std::size_t>(in.current() - text.data());
    } catch (const pegtl::parse_error& e) {
      auto at = static_cast<std::uint32_t>(pos + e.positions().front().byte);
      std::string message(e.message());
      if (at < text.size() && !is_language_char(text[at])) {
        message = fmt::format(fmt::runtime(g::error_message<g::unexpected_character>),
                              describe_char(text[at]));
      }
      const std::uint32_t shown = pull_back_to_last_token(view, at);
      error = make_error(file, std::move(message), shown, token_end(view, shown));
      error->suggestion = suggest_keyword(view, at, e.message());
      resume_at = at;
    } catch (const SyntaxError& e) {
      error = make_error(file, e.message, e.begin, e.end);
      resume_at = e.begin;
    } catch (const std::bad_alloc&) {
      error = make_error(file, "out of memory", static_cast<std::uint32_t>(pos),
                         static_cast<std::uint32_t>(pos));
      resume_at = static_cast<std::uint32_t>(pos);
    } catch (const std::exception&) {
      // Nothing else is expected to throw; if it does, it is still a value.
      error = make_error(file, g::error_message<g::internal_error>, static_cast<std::uint32_t>(pos),
                         static_cast<std::uint32_t>(pos));
      resume_at = static_cast<std::uint32_t>(pos);
    }
    st.reset();
    if (error) {
      const std::uint32_t at = resume_at;
      result.diagnostics.push_back(std::move(*error));
      // An error right at a statement keyword that starts its line (e.g. a
      // missing ')' noticed at the next `rule`) leaves that statement intact.
      if (at > pos && at_line_start(view, at) && starts_statement(view, at)) {
        pos = at;
        continue;
      }
      pos = recovery_point(view, std::max<std::size_t>(at, pos));
      if (pos >= text.size()) break;
    }
  }
  return result;
}

}  // namespace vigil::grammar
