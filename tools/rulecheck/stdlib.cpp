// `rulecheck stdlib [NAME] [--markdown]`: the standard library's templates
// and their documentation, read from the doc blocks of the embedded
// stdlib/*.rules files, so the docs live next to the rules they describe.
//
// Doc block format (a contract between stdlib/*.rules and this file):
//
//   ## NAME: one-line summary                 <- first line, NAME = the template's name
//   ## Section: text                          <- Section is a capitalised word (Anchor, Params,
//   ##   indented line                           Reads, Warm-up, Semantics, Deviation, Example)
//   rule NAME(PARAM = DEFAULT, ...):          <- directly after the block
//
// In `Params`, each line indented by two spaces is `name = default: meaning`
// (deeper indentation continues it), and the names must be exactly the
// template's parameters, in order. `Example` lines are rule text. In the
// other sections, indented lines continue the section's paragraph. A
// template without a block, a block without a template, or parameters that
// disagree are errors (exit status 2), so the docs cannot drift.
//
// Owns: the stdlib command. Must not touch: the templates themselves (stdlib/*.rules).

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "stdlib/functions.hpp"
#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "vigil/diagnostic.hpp"

namespace rulecheck {
namespace {

struct Section {
  std::string key;                 // "Params", "Semantics", ...
  std::string text;                // text on the key's line
  std::vector<std::string> lines;  // indented lines, indentation relative to "  " kept
};

struct Template {
  std::string name;
  std::string summary;
  std::string file;  // "std/sagemaker.rules"
  int line = 0;      // of the `rule` line
  std::vector<Section> sections;
  std::vector<std::string> doc;  // the block, "## " stripped
  std::string definition;        // the rule text
  std::vector<std::string> params;
};

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// The parameter names of a template header `rule NAME(a = 1, b = x{l="v, w"}):`
/// (commas inside strings and brackets do not separate).
std::vector<std::string> header_params(std::string_view header) {
  std::vector<std::string> names;
  std::size_t open = header.find('(');
  if (open == std::string_view::npos) return names;
  int depth = 0;
  bool in_string = false, expect_name = true;
  std::string current;
  for (std::size_t i = open + 1; i < header.size(); ++i) {
    char c = header[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') { in_string = true; continue; }
    if (c == '(' || c == '{' || c == '[') { ++depth; continue; }
    if ((c == ')' || c == '}' || c == ']') && depth > 0) { --depth; continue; }
    if (c == ')' && depth == 0) break;
    if (depth == 0 && c == ',') { expect_name = true; continue; }
    if (expect_name) {
      if (is_ident_char(c)) current += c;
      else if (!current.empty()) { names.push_back(current); current.clear(); expect_name = false; }
    }
  }
  if (!current.empty()) names.push_back(current);
  return names;
}

/// A section key line: "Word: text" or "Word-word:" at column 0.
bool section_key(const std::string& line, std::string& key, std::string& text) {
  if (line.empty() || !std::isupper(static_cast<unsigned char>(line[0]))) return false;
  std::size_t i = 0;
  while (i < line.size() && (std::isalpha(static_cast<unsigned char>(line[i])) || line[i] == '-')) ++i;
  if (i >= line.size() || line[i] != ':') return false;
  key = line.substr(0, i);
  text = trim(std::string_view(line).substr(i + 1));
  return true;
}

struct Library {
  std::vector<Template> templates;
  std::vector<std::string> errors;  // "std/x.rules:12: message"
};

Library read_library() {
  Library lib;
  for (const auto& file : vigil::stdlib::standard_rule_files()) {
    const std::string fname(file.name);
    const auto lines = split_lines(file.text);
    std::vector<std::string> block;  // pending doc block
    int block_line = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      const int lineno = static_cast<int>(i) + 1;
      if (line.rfind("##", 0) == 0) {
        if (block.empty()) block_line = lineno;
        std::string_view rest = std::string_view(line).substr(2);
        if (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
        block.emplace_back(rest);
        continue;
      }
      if (line.rfind("rule ", 0) == 0) {
        Template t;
        std::size_t b = 5;
        while (b < line.size() && line[b] == ' ') ++b;
        std::size_t e = b;
        while (e < line.size() && is_ident_char(line[e])) ++e;
        t.name = line.substr(b, e - b);
        t.file = fname;
        t.line = lineno;
        // The definition: the header (possibly over several lines) and the
        // clauses, up to the first blank or comment line.
        std::string header;
        std::size_t j = i;
        bool header_done = false;
        for (; j < lines.size(); ++j) {
          const std::string& l = lines[j];
          if (trim(l).empty() || l.rfind("#", 0) == 0) break;
          t.definition += l + "\n";
          if (!header_done) {
            header += l + "\n";
            if (l.find("):") != std::string::npos || (j == i && l.find('(') == std::string::npos))
              header_done = true;
          }
        }
        t.params = header_params(header);
        if (block.empty()) {
          lib.errors.push_back(fmt::format("{}:{}: template '{}' has no doc block", fname, lineno, t.name));
        } else {
          t.doc = block;
          std::string key, text;
          const std::string& first = block.front();
          const std::string prefix = t.name + ":";
          if (first.rfind(prefix, 0) != 0) {
            lib.errors.push_back(fmt::format("{}:{}: doc block must start with '## {}: summary'",
                                             fname, block_line, t.name));
          } else {
            t.summary = trim(std::string_view(first).substr(prefix.size()));
          }
          for (std::size_t k = 1; k < block.size(); ++k) {
            const std::string& l = block[k];
            if (section_key(l, key, text)) {
              t.sections.push_back({key, text, {}});
            } else if (!t.sections.empty() && l.rfind("  ", 0) == 0) {
              t.sections.back().lines.push_back(l.substr(2));
            } else {
              lib.errors.push_back(fmt::format("{}:{}: expected 'Section: text' or an indented line",
                                               fname, block_line + static_cast<int>(k)));
            }
          }
          // The documented parameters must be the template's.
          std::vector<std::string> documented;
          for (const auto& s : t.sections) {
            if (s.key != "Params") continue;
            for (const auto& l : s.lines) {
              if (l.empty() || l[0] == ' ') continue;  // continuation
              std::size_t n = 0;
              while (n < l.size() && is_ident_char(l[n])) ++n;
              documented.push_back(l.substr(0, n));
            }
          }
          if (documented != t.params) {
            lib.errors.push_back(fmt::format(
                "{}:{}: documented parameters ({}) differ from the template's ({})", fname,
                block_line, fmt::join(documented, ", "), fmt::join(t.params, ", ")));
          }
        }
        lib.templates.push_back(std::move(t));
        block.clear();
        i = j == i ? i : j - 1;
        continue;
      }
      if (!block.empty())
        lib.errors.push_back(fmt::format("{}:{}: doc block not followed by a template", fname, block_line));
      block.clear();
    }
  }
  return lib;
}

/// A section's paragraph: its text and indented lines joined by spaces.
std::string paragraph(const Section& s) {
  std::string out = s.text;
  for (const auto& l : s.lines) {
    if (!out.empty()) out += ' ';
    out += trim(l);
  }
  return out;
}

std::string render_text(const Template& t) {
  std::string out;
  for (const auto& l : t.doc) out += l + "\n";
  out += fmt::format("\nDefinition ({}:{}):\n", t.file, t.line);
  for (const auto& l : split_lines(t.definition))
    if (!l.empty()) out += "    " + l + "\n";
  return out;
}

std::string escape_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string render_markdown(const std::vector<Template>& templates) {
  std::string out;
  out +=
      "# The standard library (`std.`)\n\n"
      "<!-- Generated by `rulecheck stdlib --markdown` from the doc blocks of stdlib/*.rules;\n"
      "     do not edit. The test stdlib.docs compares it; regenerate with\n"
      "     VIGIL_UPDATE_GOLDEN=1 ctest -R stdlib.docs -->\n\n"
      "Every template below is written in the rule language itself, in `stdlib/*.rules`, and is\n"
      "used with the `std.` prefix: `use std.NAME(PARAM = VALUE, ...)`, optionally followed by\n"
      "`as NAME`, clauses (`in eval`, `after 100 steps`, ...) and `do ACTIONS`, which replace the\n"
      "template's ([language.md §17](language.md#17-use)). `rulecheck stdlib` lists them and\n"
      "`rulecheck stdlib NAME` prints one's documentation and definition.\n\n"
      "Rules over tensors read derived series ([tensors.md](tensors.md)) such as `grad_abs_mean`,\n"
      "which their parameters name. Where SageMaker Debugger, Keras, Lightning and PyTorch disagree\n"
      "or are vague, each rule's **Semantics** says which reading it follows and why; **Deviation**\n"
      "says where the language cannot express the original exactly and what is missing.\n\n"
      "A ready rule set for a typical run is [examples/recommended.rules](../examples/recommended.rules);\n"
      "what it reports on real training logs is in [stdlib-outcomes.md](stdlib-outcomes.md).\n\n"
      "This page is generated from `##` doc blocks written directly above each template: a first\n"
      "line `## NAME: summary`, then `## Section: text` lines (Anchor, Params, Reads, Warm-up,\n"
      "Semantics, Deviation, Example) continued by lines indented two spaces; each `Params` line is\n"
      "`name = default: meaning`, and the names must be the template's parameters in order\n"
      "(`rulecheck stdlib` refuses a block that disagrees, so the docs cannot drift).\n\n";
  out += "| template | file | summary |\n|---|---|---|\n";
  for (const auto& t : templates)
    out += fmt::format("| [`{}`](#{}) | `{}` | {} |\n", t.name, t.name, t.file,
                       escape_cell(t.summary));
  std::string current_file;
  for (const auto& t : templates) {
    if (t.file != current_file) {
      current_file = t.file;
      out += fmt::format("\n## `{}`\n", current_file);
    }
    out += fmt::format("\n<a id=\"{}\"></a>\n### {}\n\n{}\n", t.name, t.name, t.summary);
    for (const auto& s : t.sections) {
      if (s.key == "Params") {
        out += "\n| parameter | default | meaning |\n|---|---|---|\n";
        for (std::size_t i = 0; i < s.lines.size(); ++i) {
          const std::string& l = s.lines[i];
          if (l.empty() || l[0] == ' ') continue;
          std::string meaning;
          std::size_t colon = l.find(": ");
          std::string head = colon == std::string::npos ? l : l.substr(0, colon);
          if (colon != std::string::npos) meaning = l.substr(colon + 2);
          for (std::size_t k = i + 1; k < s.lines.size() && !s.lines[k].empty() && s.lines[k][0] == ' '; ++k)
            meaning += " " + trim(s.lines[k]);
          std::size_t eq = head.find(" = ");
          std::string name = eq == std::string::npos ? head : head.substr(0, eq);
          std::string def = eq == std::string::npos ? "(required)" : "`" + head.substr(eq + 3) + "`";
          out += fmt::format("| `{}` | {} | {} |\n", trim(name), def, escape_cell(meaning));
        }
      } else if (s.key == "Example") {
        out += "\n**Example:**\n\n```rules\n";
        for (const auto& l : s.lines) out += trim(l) + "\n";
        out += "```\n";
      } else {
        out += fmt::format("\n**{}:** {}\n", s.key, paragraph(s));
      }
    }
    out += fmt::format("\n**Definition** (`{}`):\n\n```rules\n{}```\n", t.file, t.definition);
  }
  return out;
}

}  // namespace

int run_stdlib(const StdlibOptions& opts) {
  const Library lib = read_library();
  for (const auto& e : lib.errors) print_err("rulecheck: " + e + "\n");
  if (!lib.errors.empty()) return exit_error;
  if (opts.markdown) {
    std::fputs(render_markdown(lib.templates).c_str(), stdout);
    return exit_ok;
  }
  if (opts.name.empty()) {
    std::size_t width = 0;
    for (const auto& t : lib.templates) width = std::max(width, t.name.size());
    std::string out;
    for (const auto& t : lib.templates) out += fmt::format("{:<{}}  {}\n", t.name, width, t.summary);
    std::fputs(out.c_str(), stdout);
    return exit_ok;
  }
  std::string name = opts.name;
  if (name.rfind("std.", 0) == 0) name = name.substr(4);
  for (const auto& t : lib.templates) {
    if (t.name == name) {
      std::fputs(render_text(t).c_str(), stdout);
      return exit_ok;
    }
  }
  std::vector<std::string> names;
  for (const auto& t : lib.templates) names.push_back(t.name);
  const std::string suggestion = vigil::closest_match(name, names);
  print_err(fmt::format("rulecheck: no standard template named '{}'{}\n", opts.name,
                        suggestion.empty() ? "" : fmt::format("; did you mean '{}'?", suggestion)));
  return exit_error;
}

}  // namespace rulecheck
