// Reading rule files from disk (see source_loader.hpp). Must not parse or check.
#include "interp/source_loader.hpp"

#include <filesystem>

#include "grammar/source_file.hpp"

namespace vigil::interp {

namespace fs = std::filesystem;

ImportTarget FileLoader::resolve(std::string_view dir, std::string_view path) const {
  const fs::path written(path);
  fs::path p = written.is_absolute() ? written : fs::path(dir) / written;
  std::error_code ec;
  if (!written.is_absolute() && !fs::exists(p, ec))
    for (const auto& root : import_paths_)
      if (fs::exists(fs::path(root) / written, ec)) {
        p = fs::path(root) / written;
        break;
      }
  fs::path canon = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) canon = fs::absolute(p, ec).lexically_normal();
  return {p.string(), p.lexically_normal().string(), p.parent_path().string(), canon.string()};
}

std::optional<std::string> FileLoader::read(const std::string& path, std::string& reason) const {
  std::string text;
  if (!grammar::read_source_file(path, text, reason)) return std::nullopt;
  return text;
}

bool FileLoader::within(const std::string& key, const std::string& dir) const {
  std::error_code ec;
  // absolute first: weakly_canonical leaves a relative path whose first
  // component does not exist relative.
  const auto base = fs::weakly_canonical(fs::absolute(dir.empty() ? "." : dir, ec), ec);
  if (ec) return false;
  const auto rel = fs::path(key).lexically_relative(base);
  return !rel.empty() && *rel.begin() != "..";
}

std::string FileLoader::dir_of(const std::string& path) {
  return fs::path(path).parent_path().string();
}

}  // namespace vigil::interp
