// Reading rule files from disk (see source_loader.hpp). Must not parse or check.
#include "interp/source_loader.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace vigil::interp {

namespace fs = std::filesystem;

ImportTarget FileLoader::resolve(std::string_view dir, std::string_view path) const {
  const fs::path p = fs::path(dir) / fs::path(path);
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(p, ec);
  return {p.string(), p.lexically_normal().string(), p.parent_path().string(),
          ec ? p.string() : canon.string()};
}

std::optional<std::string> FileLoader::read(const std::string& path) const {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  if (!in || fs::is_directory(path, ec)) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FileLoader::dir_of(const std::string& path) {
  return fs::path(path).parent_path().string();
}

}  // namespace vigil::interp
