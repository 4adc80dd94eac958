// Where rule text comes from: the one place that reads rule files, for the
// files compile_files() is given (program.cpp) and for `import` statements
// (the checker, which itself never touches the filesystem).
//
//   interp::FileLoader files;
//   if (auto text = files.read("train.rules")) ...
//   auto target = files.resolve("rules/", "common.rules");  // rules/common.rules
//
// Owns: path resolution and reading. Must not touch: parsing, checking.
// Loaders are stateless and may be shared between threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace vigil::interp {

/// The file an `import "path"` names.
struct ImportTarget {
  std::string path;  // to read
  std::string name;  // to show in positions (the path, normalised)
  std::string dir;   // where the imported file's own imports are resolved
  std::string key;   // the same for two spellings of one file (once-only imports, cycles)
};

class SourceLoader {
 public:
  virtual ~SourceLoader() = default;
  /// The file `import "path"` names when written in a file of directory `dir`.
  [[nodiscard]] virtual ImportTarget resolve(std::string_view dir, std::string_view path) const = 0;
  /// The file's text; nullopt if it cannot be read (missing, a directory).
  [[nodiscard]] virtual std::optional<std::string> read(const std::string& path) const = 0;
};

/// Files on disk: relative paths against `dir` (the importing file's folder),
/// keys by canonical path when the file exists.
class FileLoader final : public SourceLoader {
 public:
  [[nodiscard]] ImportTarget resolve(std::string_view dir, std::string_view path) const override;
  [[nodiscard]] std::optional<std::string> read(const std::string& path) const override;
  /// The folder a root file's imports are resolved against.
  [[nodiscard]] static std::string dir_of(const std::string& path);
};

}  // namespace vigil::interp
