// `rulecheck convert`: reads any trace open_trace reads and writes it as Vigil
// JSONL, long CSV or a TensorBoard event file, streaming (one observation in
// memory at a time). What each format cannot hold is said once, as a warning:
// CSV and TensorBoard store no mode (the reader derives it from series names),
// TensorBoard stores values as float.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <optional>

#include "tools/rulecheck/commands.hpp"
#include "tools/rulecheck/common.hpp"
#include "vigil/trace.hpp"

namespace rulecheck {
namespace {

namespace fs = std::filesystem;

enum class Target { jsonl, csv, tensorboard };

// The prefixes the CSV and TensorBoard readers map to a mode (docs/traces.md).
std::string_view mode_by_name(std::string_view key) {
  std::string lower(key.substr(0, 12));
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view p : {"eval/", "eval_", "val/", "val_", "valid_", "valid/", "validation_",
                             "validation/"})
    if (lower.starts_with(p)) return "eval";
  for (std::string_view p : {"test/", "test_"})
    if (lower.starts_with(p)) return "test";
  return "train";
}

// A CSV field: quoted when it holds a comma, quote or line break (RFC 4180).
std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);  // shortest form that reads back to the same double
}

// Buffered text output (JSONL, CSV) with errors as values.
class TextOut {
 public:
  bool open(const std::string& path) {
    file_ = std::fopen(path.c_str(), "wb");
    path_ = path;
    if (file_ == nullptr) error_ = std::strerror(errno);
    return file_ != nullptr;
  }
  ~TextOut() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool write(std::string_view text) {
    if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) error_ = std::strerror(errno);
    return error_.empty();
  }
  bool close() {
    if (file_ != nullptr && std::fclose(file_) != 0 && error_.empty()) error_ = std::strerror(errno);
    file_ = nullptr;
    return error_.empty();
  }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_, error_;
};

std::optional<Target> target_of(const ConvertOptions& opts) {
  if (opts.to == "jsonl") return Target::jsonl;
  if (opts.to == "csv") return Target::csv;
  if (opts.to == "tensorboard") return Target::tensorboard;
  const fs::path out(opts.output);
  std::error_code ec;
  if (out.extension() == ".jsonl") return Target::jsonl;
  if (out.extension() == ".csv") return Target::csv;
  if (out.filename().string().find("tfevents") != std::string::npos || fs::is_directory(out, ec) ||
      opts.output.ends_with('/'))
    return Target::tensorboard;
  return std::nullopt;
}

}  // namespace

int run_convert(const ConvertOptions& opts) {
  const auto target = target_of(opts);
  if (!target) {
    print_err(fmt::format("rulecheck: cannot tell the format to write from '{}': name it *.jsonl, "
                          "*.csv or a directory, or give --to jsonl|csv|tensorboard\n",
                          opts.output));
    return exit_error;
  }
  vigil::TraceError error;
  auto reader = vigil::open_trace(opts.input, error, {.step_column = opts.step_column});
  if (!reader) {
    print_err(error.format() + "\n");
    return exit_error;
  }

  std::string output = opts.output;
  TextOut text;
  std::unique_ptr<vigil::TensorBoardWriter> tb;
  if (*target == Target::tensorboard) {
    std::error_code ec;
    if (fs::path(output).filename().string().find("tfevents") == std::string::npos) {
      // A directory, as TensorBoard's --logdir takes it; the file name follows TensorBoard's.
      fs::create_directories(output, ec);
      output = (fs::path(output) / fmt::format("events.out.tfevents.{}.rulecheck", std::time(nullptr)))
                   .string();
    }
    tb = vigil::TensorBoardWriter::create(output, error);
    if (!tb) {
      print_err(error.format() + "\n");
      return exit_error;
    }
  } else if (!text.open(output)) {
    print_err(fmt::format("{}: cannot open for writing: {}\n", output, text.error()));
    return exit_error;
  }
  if (*target == Target::csv) text.write("tag,step,value,wall_time\n");

  std::uint64_t observations = 0, samples = 0;
  bool mode_warned = false;
  vigil::Observation obs;
  std::string buffer;
  bool ok = true;
  while (ok && reader->next(obs)) {
    ++observations;
    samples += obs.values.size();
    if (*target != Target::jsonl && !mode_warned)
      for (const auto& [key, _] : obs.values)
        if (mode_by_name(key) != obs.mode) {
          print_err(fmt::format("{}: warning: {} stores no mode: '{}' at step {} is {} in the input "
                                "but will read back as {} (see docs/traces.md, Modes)\n",
                                opts.input, *target == Target::csv ? "CSV" : "TensorBoard", key,
                                obs.step, obs.mode, mode_by_name(key)));
          mode_warned = true;
          break;
        }
    switch (*target) {
      case Target::jsonl:
        buffer = vigil::to_jsonl(obs);
        buffer += '\n';
        ok = text.write(buffer);
        break;
      case Target::csv: {
        buffer.clear();
        const std::string time = std::isnan(obs.time) ? "" : fmt::format("{}", obs.time);
        for (const auto& [key, value] : obs.values)
          buffer += fmt::format("{},{},{},{}\n", csv_field(key), obs.step, csv_number(value), time);
        ok = text.write(buffer);
        break;
      }
      case Target::tensorboard:
        ok = obs.values.empty() || tb->write(obs);
        break;
    }
  }
  if (tb) ok = tb->flush() && ok;
  else ok = text.close() && ok;
  if (!ok) {
    print_err(tb && tb->error() ? tb->error()->format() + "\n"
                                : fmt::format("{}: write failed: {}\n", output, text.error()));
    return exit_error;
  }
  print_err(fmt::format("wrote {}: {} observation{}, {} sample{}\n", output, observations,
                        observations == 1 ? "" : "s", samples, samples == 1 ? "" : "s"));
  if (const auto& e = reader->error()) {
    print_err(e->format() + " (the observations before it were written)\n");
    return exit_error;
  }
  return exit_ok;
}

}  // namespace rulecheck
