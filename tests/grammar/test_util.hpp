// Helpers shared by the grammar tests: parse a string, and a structural dump
// of the AST (everything except byte ranges) for equality checks.
#pragma once

#include <string>

#include "grammar/parser.hpp"

namespace vigil::grammar::test {

struct Parsed {
  SourceSet sources;
  ParseResult result;
};

inline Parsed parse_text(std::string text, std::string name = "test.rules") {
  Parsed p;
  const auto id = p.sources.add(std::move(name), std::move(text));
  p.result = parse(p.sources, id);
  return p;
}

/// Every field of the tree except ranges, as an S-expression.
std::string dump(const ast::Expr& e);
std::string dump(const ast::File& f);

}  // namespace vigil::grammar::test
