// AST -> checked IR.
//
// The checker takes the root files' text, loads their imports through the
// SourceLoader it is given (it never reads files itself), parses them
// (grammar/), then resolves every name (params, lets, template parameters,
// actions, the standard library), type-checks expressions against the
// function registry it is given (never a global one), instantiates templates
// for each `use`, and produces fully bound rules.
// Every problem becomes a Diagnostic; checking goes on after an error so that
// all errors of all files are reported (up to options.max_errors).
//
// Owns: the checker's interface. Must not touch: planning or evaluation.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "interp/ir.hpp"
#include "interp/source_loader.hpp"
#include "vigil/diagnostic.hpp"
#include "vigil/program.hpp"

namespace vigil::interp {

struct RootFile {
  std::string name;  // as the user gave it (used in positions and rule names)
  std::string text;
  std::string dir;   // where relative imports are resolved
};

struct CheckResult {
  std::vector<ir::Rule> rules;                // in program order
  std::map<std::string, Value> params;        // final param values
  std::vector<SeriesUse> series_uses;         // every series name read, where
  std::vector<std::pair<std::string, std::string>> aliases;  // (trace name, rule name)
};

/// What the checker reads besides the roots, passed in explicitly.
struct CheckEnv {
  const stdlib::FunctionRegistry& functions;  // what calls resolve against
  const SourceLoader& loader;                 // what `import` reads through
};

/// Checks `roots` as one program. Appends files to `sources` and problems to
/// `diags`; the result is meaningful only if no error was added.
CheckResult check(const std::vector<RootFile>& roots, const CompileOptions& options,
                  const CheckEnv& env, SourceSet& sources, std::vector<Diagnostic>& diags);

}  // namespace vigil::interp
