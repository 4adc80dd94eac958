// Series keys (include/vigil/series_key.hpp): parsing and formatting only.
// Must not touch engine or program state: tools and the torch adapter call
// these on their own.
#include <algorithm>
#include <cctype>

#include "vigil/series_key.hpp"

namespace vigil {

namespace {

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':';
}

}  // namespace

bool parse_series_key(std::string_view key, std::string& name, Labels& labels) {
  labels.clear();
  auto brace = key.find('{');
  name.assign(key.substr(0, brace));
  if (name.empty()) return false;
  if (brace == std::string_view::npos) return true;
  if (key.back() != '}') return false;
  std::string_view rest = key.substr(brace + 1, key.size() - brace - 2);
  while (!rest.empty()) {
    std::size_t i = 0;
    while (i < rest.size() && is_ident_char(rest[i])) ++i;
    if (i == 0 || i + 1 >= rest.size() || rest[i] != '=' || rest[i + 1] != '"') return false;
    std::string label(rest.substr(0, i)), value;
    std::size_t j = i + 2;
    for (; j < rest.size() && rest[j] != '"'; ++j) {
      if (rest[j] == '\\') {
        if (++j >= rest.size()) return false;
        value += rest[j] == 'n' ? '\n' : rest[j];
      } else {
        value += rest[j];
      }
    }
    if (j >= rest.size()) return false;
    labels.emplace_back(std::move(label), std::move(value));
    rest = rest.substr(j + 1);
    if (!rest.empty()) {
      if (rest[0] != ',') return false;
      rest.remove_prefix(1);
    }
  }
  std::sort(labels.begin(), labels.end());
  for (std::size_t i = 1; i < labels.size(); ++i)
    if (labels[i].first == labels[i - 1].first) return false;
  return true;
}

std::string format_series_key(std::string_view name, const Labels& labels) {
  std::string out(name);
  if (labels.empty()) return out;
  out += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace vigil
