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
#include <vector>

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
  /// `key` is the absolute path with symlinks resolved (what within() compares).
  [[nodiscard]] virtual ImportTarget resolve(std::string_view dir, std::string_view path) const = 0;
  /// The file's text; nullopt if it cannot be read, with `reason` set to a
  /// short why that never quotes the content (missing, a directory, a device
  /// or FIFO, too large, binary data): see grammar/source_file.hpp.
  [[nodiscard]] virtual std::optional<std::string> read(const std::string& path,
                                                        std::string& reason) const = 0;
  /// Whether the file of key `key` lies in directory `dir` or below it.
  [[nodiscard]] virtual bool within(const std::string& key, const std::string& dir) const = 0;
};

/// Files on disk: relative paths against `dir` (the importing file's folder),
/// then, like a compiler's -I, against each import root when not found there
/// (CompileOptions::import_paths); keys by absolute canonical path. Reads go
/// through grammar::read_source_file (never blocks on a FIFO, size-capped).
class FileLoader final : public SourceLoader {
 public:
  FileLoader() = default;
  explicit FileLoader(std::vector<std::string> import_paths)
      : import_paths_(std::move(import_paths)) {}
  [[nodiscard]] ImportTarget resolve(std::string_view dir, std::string_view path) const override;
  [[nodiscard]] std::optional<std::string> read(const std::string& path,
                                                std::string& reason) const override;
  [[nodiscard]] bool within(const std::string& key, const std::string& dir) const override;
  /// The folder a root file's imports are resolved against.
  [[nodiscard]] static std::string dir_of(const std::string& path);

 private:
  std::vector<std::string> import_paths_;
};

}  // namespace vigil::interp
