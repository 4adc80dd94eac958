// Series keys (include/vigil/series_key.hpp): parsing and formatting only.
// Must not touch engine or program state: tools and the torch adapter call
// these on their own.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include "vigil/series_key.hpp"

namespace vigil {

namespace {

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':';
}

// At rest[j] == 'u' of a \uXXXX escape: appends the code point as UTF-8 and
// leaves j on the escape's last hex digit. A high surrogate must be followed
// by \u and a low one. False if malformed.
bool decode_unicode_escape(std::string_view rest, std::size_t& j, std::string& out) {
  auto hex4 = [&](std::size_t at, std::uint32_t& v) {
    if (at + 4 > rest.size()) return false;
    v = 0;
    for (std::size_t k = at; k < at + 4; ++k) {
      const char c = rest[k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + static_cast<std::uint32_t>(d);
    }
    return true;
  };
  std::uint32_t cp = 0;
  if (!hex4(j + 1, cp)) return false;
  j += 4;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    std::uint32_t low = 0;
    if (j + 2 >= rest.size() || rest[j + 1] != '\\' || rest[j + 2] != 'u' || !hex4(j + 3, low) ||
        low < 0xDC00 || low > 0xDFFF)
      return false;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    j += 6;
  } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
    return false;
  }
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return true;
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
        if (rest[j] == 'u') {
          // \uXXXX (and a surrogate pair), as JSON and Prometheus write
          // label values: decoded to UTF-8, never dropped.
          if (!decode_unicode_escape(rest, j, value)) return false;
          continue;
        }
        value += rest[j] == 'n' ? '\n' : rest[j] == 't' ? '\t' : rest[j];
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
