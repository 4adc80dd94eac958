// CSV traces (SPEC §6), wide and long.
//
// Wide: a header row names the columns; one column is the step (--step-column,
// else the first of step, global_step, iteration, epoch), an optional
// wall_time / time / timestamp column is the time, every other column is a
// series named exactly as its header. An empty cell is "no sample".
//
// Mode: a column named val_*, valid_*, validation_* or eval_* (also with '/'
// instead of '_', any case) holds eval samples, test_* / test/* test samples,
// as in the TensorBoard reader. Each row gives a train observation of its
// other samples, then an eval and a test observation of those, in that order,
// at the row's step and time; a row gives one observation per mode it has
// samples of, none if it has no samples. The columns
// named like a step (step, global_step, iteration, epoch) that are not the
// step column are "shared": their samples go into each observation of the row
// (Lightning writes `epoch` on its train and its val rows alike). This covers
// Lightning's sparse metrics.csv (train and val metrics on different rows of
// the same step) and Keras' CSVLogger (epoch,loss,...,val_loss,... in one row).
//
// Long: the header is exactly tag,step,value or tag,step,value,wall_time
// (`name` or `metric` for tag, `time` for wall_time). Consecutive rows with
// the same step and time make one observation (split into train and eval by
// the tag, as above); a tag seen twice in one group starts a new one. Rows are
// never reordered.
//
// Syntax: RFC 4180 (quoted fields with "" escapes and embedded newlines),
// LF or CRLF line ends, an optional UTF-8 BOM, blank lines skipped. Numbers are
// decimal (fast_float, correctly rounded) or nan / inf / infinity (any case,
// signed): trace/number.hpp. A step must be an integer (12.0 is accepted: some writers
// only have floats). The reader streams the file in chunks and stops at the
// first damaged row (wrong number of fields, bad number, bad step) with an
// error naming the file, the row's 1-based line and its byte offset; every
// row before it has been handed out.

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "trace/input.hpp"
#include "trace/io.hpp"
#include "trace/key_table.hpp"
#include "trace/number.hpp"
#include "vigil/trace.hpp"

namespace vigil {

namespace {

constexpr std::size_t chunk_size = 64 * 1024;

using trace_io::parse_number;
std::string_view trim(std::string_view s) { return trace_io::trim_blanks(s); }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

/// An integer step; an integral float (12.0, 1e3) is accepted.
bool parse_step(std::string_view text, std::int64_t& out) {
  std::string_view s = trim(text);
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc{} && ptr == s.data() + s.size()) return true;
  double d = 0;
  if (!parse_number(s, d)) return false;
  // 2^63 is exactly representable; anything at or above it is out of range.
  if (!std::isfinite(d) || d != std::floor(d) || d < -9223372036854775808.0 ||
      d >= 9223372036854775808.0)
    return false;
  out = static_cast<std::int64_t>(d);
  return true;
}

enum class Mode { train, eval, test };
constexpr std::string_view mode_names[] = {"train", "eval", "test"};

/// The mode a series' name says it belongs to (same prefixes as TensorBoard tags).
Mode mode_of(std::string_view name) {
  static constexpr std::string_view eval_prefixes[] = {
      "val_", "val/", "valid_", "valid/", "validation_", "validation/", "eval_", "eval/"};
  const auto starts = [&](std::string_view p) { return istarts_with(name, p); };
  if (std::any_of(std::begin(eval_prefixes), std::end(eval_prefixes), starts)) return Mode::eval;
  if (starts("test_") || starts("test/")) return Mode::test;
  return Mode::train;
}

constexpr std::string_view step_names[] = {"step", "global_step", "iteration", "epoch"};
bool is_step_name(std::string_view name) {
  return std::find(std::begin(step_names), std::end(step_names), name) != std::end(step_names);
}
bool is_time_name(std::string_view name) {
  return name == "wall_time" || name == "time" || name == "timestamp";
}

enum class Scan { complete, incomplete, bad };

/// Splits one record off the front of `data` (RFC 4180). `final` says no more
/// bytes will come, so an unterminated last line is a whole record. On
/// `complete`, `fields[0, count)` hold the unquoted fields, `consumed` the
/// record's bytes (with its line end) and `newlines` the line ends it spans.
/// On `bad`, `message` says why and `bad_at` where (relative to `data`).
/// The fields are views of `data` (a record without quotes, nearly every
/// one) or of the scanner's own copies (a record with quoted fields, which
/// are unescaped); they are valid until the next scan or until `data` changes.
struct RecordScanner {
  std::vector<std::string_view> fields;  // reused across records: no allocation once warm
  std::size_t count = 0;
  std::size_t consumed = 0;
  std::size_t newlines = 0;
  std::size_t bad_at = 0;
  bool first_quoted = false;  // fields[0] was quoted (so an empty one is not a blank line)
  std::string message;

  Scan scan(std::string_view data, bool final) {
    count = 0;
    newlines = 0;
    first_quoted = false;
    // A line without a quote character: its end and its commas are found
    // with memchr (SIMD in glibc) and the fields are views of the line.
    const char* b = data.data();
    const auto* nl = static_cast<const char*>(std::memchr(b, '\n', data.size()));
    const std::size_t line_end = nl != nullptr ? static_cast<std::size_t>(nl - b) : data.size();
    if (std::memchr(b, '"', line_end) == nullptr) {
      if (nl == nullptr && !final) return Scan::incomplete;
      std::size_t start = 0, i = 0;
#if defined(__SSE2__)
      // 16 bytes at a time: a bit per comma (fields are short, so one
      // memchr per field would cost a call per ~10 bytes).
      const __m128i comma = _mm_set1_epi8(',');
      for (; i + 16 <= line_end; i += 16) {
        const __m128i block = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
        auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(block, comma)));
        for (; mask != 0; mask &= mask - 1) {
          const std::size_t at = i + static_cast<std::size_t>(std::countr_zero(mask));
          add(std::string_view(b + start, at - start));
          start = at + 1;
        }
      }
#endif
      for (; i < line_end; ++i)
        if (b[i] == ',') {
          add(std::string_view(b + start, i - start));
          start = i + 1;
        }
      add(std::string_view(b + start, line_end - start));
      std::string_view& last = fields[count - 1];
      if (!last.empty() && last.back() == '\r') last.remove_suffix(1);
      consumed = nl != nullptr ? line_end + 1 : data.size();
      newlines = nl != nullptr ? 1 : 0;
      return Scan::complete;
    }
    return scan_quoted(data, final);
  }

 private:
  std::vector<std::string> copies_;  // the fields of a record with quotes, unescaped

  void add(std::string_view field) {
    if (fields.size() <= count) fields.emplace_back();
    fields[count++] = field;
  }

  std::string& start_field() {
    if (copies_.size() <= count) copies_.emplace_back();
    auto& f = copies_[count++];
    f.clear();
    return f;
  }

  // Character by character, with quoted fields, escapes and line ends inside
  // quotes; the fields are built in copies_ and viewed at the end.
  Scan scan_quoted(std::string_view data, bool final) {
    std::string* cur = &start_field();
    bool at_field_start = true;
    bool after_quote = false;  // the current field was quoted and has been closed
    std::size_t i = 0;
    auto finish = [&](std::size_t end) {
      if (!after_quote && !cur->empty() && cur->back() == '\r') cur->pop_back();
      consumed = end;
      if (fields.size() < count) fields.resize(count);
      for (std::size_t k = 0; k < count; ++k) fields[k] = copies_[k];
      return Scan::complete;
    };
    for (;;) {
      if (i == data.size()) return final ? finish(i) : Scan::incomplete;
      const char c = data[i];
      if (c == '"' && at_field_start) {
        if (count == 1) first_quoted = true;
        for (++i;; ++i) {
          if (i == data.size()) {
            if (!final) return Scan::incomplete;
            bad_at = 0;
            message = "unterminated quoted field";
            return Scan::bad;
          }
          if (data[i] == '"') {
            if (i + 1 == data.size() && !final) return Scan::incomplete;
            if (i + 1 < data.size() && data[i + 1] == '"') {
              *cur += '"';
              ++i;
              continue;
            }
            ++i;
            break;
          }
          if (data[i] == '\n') ++newlines;
          *cur += data[i];
        }
        at_field_start = false;
        after_quote = true;
        continue;
      }
      at_field_start = false;
      if (c == ',') {
        cur = &start_field();
        at_field_start = true;
        after_quote = false;
        ++i;
        continue;
      }
      if (c == '\n') {
        ++newlines;
        return finish(i + 1);
      }
      if (after_quote) {
        if (c == '\r') {  // CRLF after a closing quote
          ++i;
          continue;
        }
        bad_at = i;
        message = "unexpected character after a closing quote";
        return Scan::bad;
      }
      *cur += c;
      ++i;
    }
  }
};

class CsvReader final : public TraceReader {
 public:
  CsvReader(std::unique_ptr<trace_io::Input> in, TraceOptions options)
      : in_(std::move(in)), path_(in_->name()), size_(in_->size()), options_(std::move(options)) {
    // Mode ids in Mode's order: train (the base's 0), eval, test.
    for (std::size_t m = 1; m < mode_count; ++m) modes_->intern(mode_names[m]);
  }

  /// Reads the header if it is there (a followed file may still be empty).
  /// False with error() set if the header is unusable.
  bool start() { return read_header() || !error_; }

  bool next(Observation& out) override { return next_from_keyed(out); }

  bool next_keyed(KeyedObservation& out) override {
    for (;;) {
      if (ready_count_ > 0) {
        // `out`'s old buffers go to the ring, to be filled again.
        std::swap(out, ready_[ready_head_]);
        ready_head_ = (ready_head_ + 1) % ready_.size();
        --ready_count_;
        return true;
      }
      if (error_) return false;
      if (columns_.empty() && !read_header()) return false;
      if (!long_ && plain_wide_row()) continue;
      if (!read_record()) {
        // End of the data (for now) or damage: a long CSV's last group is
        // made of complete rows, so it is handed out.
        if (group_open_) flush_group();
        if (ready_count_ > 0) continue;
        return false;
      }
      if (long_) take_long_row();
      else take_wide_row();
      // The rows of a long CSV's open group before a damaged row are complete.
      if (error_ && group_open_) flush_group();
    }
  }

  [[nodiscard]] std::uint64_t position() const override { return base_ + pos_; }
  [[nodiscard]] std::uint64_t size() const override {
    return std::max(size_, base_ + end_);  // a pipe, or a followed file that grew
  }
  [[nodiscard]] std::string describe() const override { return description_; }

 private:
  enum class Role { step, time, series, shared, ignored, tag, value };
  static constexpr std::size_t mode_count = std::size(mode_names);

  bool fail(std::uint64_t line, std::uint64_t offset, std::string message) {
    error_ = TraceError{path_, line, offset, std::move(message)};
    return false;
  }
  bool fail_here(std::string message) { return fail(rec_line_, rec_offset_, std::move(message)); }

  /// Appends input to the buffer; false if nothing came. It reads at least
  /// as much as the unconsumed (incomplete record) bytes already held, so a
  /// record of n bytes is rescanned O(log n) times from its start with O(n)
  /// bytes scanned in all: a 4 MB cell stays linear.
  bool fill() {
    if (pos_ > 0 && pos_ * 2 >= end_) {  // drop what was consumed
      std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      end_ -= pos_;
      base_ += pos_;
      pos_ = 0;
    }
    const std::size_t old = end_;
    const std::size_t want = std::max(chunk_size, old - pos_);
    // The string only grows (its new bytes are zeroed once, not at every read).
    if (buf_.size() < old + want) buf_.resize(old + want);
    std::size_t got = 0;
    // Beyond one chunk the record is known to be incomplete: wait for the
    // whole request (one read(2) of a pipe may give a few bytes), so the
    // geometric growth above holds. A first chunk is whatever is there, so a
    // live producer's rows are not held back.
    while (got < want && (got == 0 || want > chunk_size)) {
      const std::size_t n = in_->read(buf_.data() + old + got, want - got);
      if (n == 0) break;
      got += n;
    }
    end_ = old + got;
    if (in_->failed()) fail(0, base_ + old + got, in_->failure());
    return got > 0;
  }

  /// The next non-blank record into scanner_; false at the end of the data
  /// (for now, when following) or at damage (error_ set).
  bool read_record() {
    for (;;) {
      if (error_) return false;
      if (base_ + pos_ == 0 && end_ >= 3 && std::string_view(buf_.data(), 3) == "\xEF\xBB\xBF") pos_ = 3;
      const std::string_view data(buf_.data() + pos_, end_ - pos_);
      const bool final = at_eof_ && !options_.follow;
      if (!data.empty() && !(base_ + pos_ == 0 && data.size() < 3 && !final &&
                             std::string_view("\xEF\xBB\xBF").starts_with(data))) {
        const Scan s = scanner_.scan(data, final);
        if (s == Scan::bad) {
          // Point at the record's line; the offset is where the damage is.
          return fail(line_, base_ + pos_ + scanner_.bad_at, scanner_.message);
        }
        if (s == Scan::complete) {
          if (scanner_.consumed > options_.max_line_bytes) return too_long();
          rec_line_ = line_;
          rec_offset_ = base_ + pos_;
          line_ += scanner_.newlines;
          pos_ += scanner_.consumed;
          if (blank()) continue;
          return true;
        }
      }
      if (final) return false;
      if (end_ - pos_ > options_.max_line_bytes) return too_long();
      if (!fill()) {
        if (error_ || options_.follow) return false;  // follow: keep the partial line
        at_eof_ = true;
      }
    }
  }

  bool too_long() {
    return fail(line_, base_ + pos_,
                fmt::format("record longer than {} bytes (the --max-line limit; see "
                            "docs/limits.md)",
                            options_.max_line_bytes));
  }

  [[nodiscard]] bool blank() const {
    return scanner_.count == 1 && !scanner_.first_quoted &&
           trim(scanner_.fields[0]).find_first_not_of("\r") == std::string_view::npos;
  }

  [[nodiscard]] std::string column_list() const {
    std::string list;
    for (std::size_t i = 0; i < scanner_.count; ++i) {
      if (i > 0) list += ", ";
      list += trim(scanner_.fields[i]);
    }
    return list;
  }

  bool read_header() {
    if (!read_record()) return false;
    const std::size_t n = scanner_.count;
    names_.clear();
    for (std::size_t i = 0; i < n; ++i) {
      std::string name(trim(scanner_.fields[i]));
      if (!name.empty() && std::find(names_.begin(), names_.end(), name) != names_.end())
        return fail_here(fmt::format("duplicate column '{}'", name));
      names_.push_back(std::move(name));
    }
    if (is_long_header()) return true;

    std::size_t step = n;
    if (!options_.step_column.empty()) {
      step = static_cast<std::size_t>(
          std::find(names_.begin(), names_.end(), options_.step_column) - names_.begin());
      if (step == n)
        return fail_here(fmt::format("no column '{}' for the step (columns: {})",
                                     options_.step_column, column_list()));
    } else {
      for (std::string_view candidate : step_names) {
        step = static_cast<std::size_t>(std::find(names_.begin(), names_.end(), candidate) -
                                        names_.begin());
        if (step < n) break;
      }
      if (step == n)
        return fail_here(fmt::format(
            "no step column: expected one of step, global_step, iteration, epoch (columns: {}); "
            "name it with --step-column",
            column_list()));
    }
    columns_.assign(n, Role::ignored);
    columns_[step] = Role::step;
    column_modes_.assign(n, Mode::train);
    std::size_t time = n, per_mode[mode_count] = {};
    for (std::size_t i = 0; i < n; ++i) {
      if (i == step || names_[i].empty()) continue;  // empty name: e.g. a pandas index column
      if (time == n && is_time_name(names_[i])) {
        columns_[i] = Role::time;
        time = i;
      } else if (is_step_name(names_[i])) {
        columns_[i] = Role::shared;
        ++per_mode[0];
      } else {
        columns_[i] = Role::series;
        column_modes_[i] = mode_of(names_[i]);
        ++per_mode[static_cast<std::size_t>(column_modes_[i])];
      }
    }
    // A column's index is its key id's index: interned once, here.
    key_ids_.assign(n, 0);
    for (std::size_t i = 0; i < n; ++i)
      if (columns_[i] == Role::shared || columns_[i] == Role::series) key_ids_[i] = keys_->intern(names_[i]);
    if (auto limit = key_limit_error(options_); !limit.empty()) return fail_here(std::move(limit));
    shared_columns_.clear();
    for (auto& list : series_columns_) list.clear();
    for (std::size_t i = 0; i < n; ++i) {
      if (columns_[i] == Role::shared) shared_columns_.push_back(i);
      if (columns_[i] == Role::series) series_columns_[static_cast<std::size_t>(column_modes_[i])].push_back(i);
    }
    description_ = fmt::format("wide CSV, step column '{}'{}, {} train and {} eval series{}",
                               names_[step],
                               time < n ? fmt::format(", time column '{}'", names_[time]) : "",
                               per_mode[0], per_mode[1],
                               per_mode[2] > 0 ? fmt::format(", {} test", per_mode[2]) : "");
    return true;
  }

  bool is_long_header() {
    const std::size_t n = names_.size();
    if (n != 3 && n != 4) return false;
    if (!(names_[0] == "tag" || names_[0] == "name" || names_[0] == "metric") ||
        names_[1] != "step" || names_[2] != "value" ||
        (n == 4 && names_[3] != "wall_time" && names_[3] != "time"))
      return false;
    if (!options_.step_column.empty() && options_.step_column != "step") return false;
    long_ = true;
    columns_ = {Role::tag, Role::step, Role::value};
    if (n == 4) columns_.push_back(Role::time);
    description_ = fmt::format("long CSV ({})", fmt::join(names_, ","));
    return true;
  }

  bool check_width() {
    if (scanner_.count == columns_.size()) return true;
    return fail_here(fmt::format("expected {} fields, got {}", columns_.size(), scanner_.count));
  }

  bool read_step(std::size_t i, std::int64_t& step) {
    const std::string_view cell = trim(scanner_.fields[i]);
    if (cell.empty()) return fail_here(fmt::format("empty step in column '{}'", names_[i]));
    if (!parse_step(cell, step))
      return fail_here(fmt::format("step '{}' is not an integer", cell));
    return true;
  }

  /// Empty cell: no value (true, `has` false); bad number: error.
  bool read_value(std::size_t i, double& value, bool& has) {
    std::string_view cell = scanner_.fields[i];
    // Trimmed only if it may need it: nearly every cell starts and ends
    // with a digit.
    if (cell.empty() || cell.front() <= ' ' || cell.back() <= ' ') cell = trim(cell);
    has = !cell.empty();
    if (!has) return true;
    if (!parse_number(cell, value))
      return fail_here(fmt::format("invalid number '{}' in column '{}'", cell, names_[i]));
    return true;
  }

  /// Empty observations, one per mode, at `step` and `time`.
  static void reset(std::array<KeyedObservation, mode_count>& obs, std::int64_t step, double time) {
    for (std::size_t m = 0; m < mode_count; ++m) {
      obs[m].values.clear();
      obs[m].step = step;
      obs[m].time = time;
      obs[m].mode = static_cast<ModeId>(m);
    }
  }

  /// The wide row at pos_ read in one pass over its bytes, if it is a plain
  /// one: a whole line in the buffer (within the --max-line limit) whose
  /// step cell is an integer of up to 18 digits and whose other cells are
  /// empty or a number fast_decimal takes whole (trace/number.hpp), with
  /// no quote, blank or other byte, and the header's number of fields.
  /// Then the row is consumed and its observations are queued, exactly as
  /// read_record + take_wide_row would have made them. Any other row
  /// (quotes, blanks, words, damage, a blank line, an incomplete last line)
  /// returns false with nothing consumed or queued, for the general path to
  /// judge.
  bool plain_wide_row() {
    const char* const row = buf_.data() + pos_;
    const char* const end = buf_.data() + end_;
    const char* p = row;
    const std::size_t n = columns_.size();
    // Without shared columns an observation's samples are its mode's series
    // in column order: each goes straight into it as it is read (its
    // storage is reused, so this does not allocate once warm). Shared ones
    // come first in every observation: the cells are kept for
    // assemble_wide_row.
    const bool direct = shared_columns_.empty();
    const bool nearest = fast_float::detail::rounds_to_nearest();  // asked once per row
    if (direct) {
      for (auto& obs : row_) obs.values.clear();
    } else {
      cells_.resize(n);
    }
    RowCells r;
    for (std::size_t i = 0; i < n; ++i) {
      const bool last = i + 1 == n;
      const char delimiter = last ? '\n' : ',';
      if (p == end) return false;
      const Role role = columns_[i];
      if (role == Role::ignored) {
        while (p != end && *p != ',' && *p != '\n' && *p != '"' && *p != '\r') ++p;
      } else if (*p == delimiter || (last && *p == '\r')) {
        if (role == Role::step) return false;  // an empty step: the general path's error
        if (!direct) cells_[i].has = false;
      } else if (role == Role::step) {
        const char* q = p;
        if (*q == '-') ++q;
        std::uint64_t u = 0;
        const char* e = trace_io::detail::digits(q, end, u);
        if (e == q || e - q > 18) return false;
        r.step = *p == '-' ? -static_cast<std::int64_t>(u) : static_cast<std::int64_t>(u);
        p = e;
      } else {
        double value;
        const char* e = trace_io::fast_decimal(p, end, value, nearest);
        if (e == nullptr) return false;
        p = e;
        if (!direct) cells_[i] = Cell{value, true};
        if (role == Role::time) {
          r.time = value;
        } else if (role == Role::shared) {
          r.any_shared = true;
        } else if (role == Role::series) {
          const auto m = static_cast<std::size_t>(column_modes_[i]);
          r.any = true;
          ++r.per_mode[m];
          if (direct) row_[m].values.push_back({key_ids_[i], value});
        }
      }
      if (last && p != end && *p == '\r') ++p;
      if (p == end || *p != delimiter) return false;
      ++p;
    }
    const auto consumed = static_cast<std::size_t>(p - row);
    if (consumed > options_.max_line_bytes) return false;
    rec_line_ = line_;
    rec_offset_ = base_ + pos_;
    ++line_;
    pos_ += consumed;
    if (!direct) {
      row_cells_ = r;
      assemble_wide_row();
      return true;
    }
    // As assemble_wide_row would: one observation per mode with samples.
    for (std::size_t m = 0; m < mode_count; ++m) {
      if (r.per_mode[m] == 0) continue;
      KeyedObservation& obs = row_[m];
      obs.step = r.step;
      obs.time = r.time;
      obs.mode = static_cast<ModeId>(m);
      push_ready(obs);
    }
    return true;
  }

  void take_wide_row() {
    if (!check_width()) return;
    // Every cell is read first, in column order, so that the first bad cell
    // is the one reported; then the observations are assembled.
    cells_.resize(columns_.size());
    RowCells r;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const Role role = columns_[i];
      if (role == Role::ignored) continue;
      if (role == Role::step) {
        if (!read_step(i, r.step)) return;
        continue;
      }
      Cell& c = cells_[i];
      if (!read_value(i, c.value, c.has)) return;
      if (!c.has) continue;
      if (role == Role::time) r.time = c.value;
      else if (role == Role::shared) r.any_shared = true;
      else if (role == Role::series) r.any = true, ++r.per_mode[static_cast<std::size_t>(column_modes_[i])];
    }
    row_cells_ = r;
    assemble_wide_row();
  }

  /// The observations of the wide row read into cells_ and row_cells_.
  void assemble_wide_row() {
    const RowCells& r = row_cells_;
    const std::int64_t step = r.step;
    const double time = r.time;
    const bool any = r.any, any_shared = r.any_shared;
    const auto& per_mode = r.per_mode;
    for (std::size_t m = 0; m < mode_count; ++m) {
      // A row holding only shared samples is a train observation of them.
      const bool only_shared = m == 0 && !any && any_shared;
      if (per_mode[m] == 0 && !only_shared) continue;
      KeyedObservation& obs = row_[m];
      obs.values.clear();  // keeps its capacity: no allocation once warm
      for (const std::size_t i : shared_columns_)
        if (cells_[i].has) obs.values.push_back({key_ids_[i], cells_[i].value});
      for (const std::size_t i : series_columns_[m])
        if (cells_[i].has) obs.values.push_back({key_ids_[i], cells_[i].value});
      obs.step = step;
      obs.time = time;
      obs.mode = static_cast<ModeId>(m);
      push_ready(obs);
    }
  }

  void take_long_row() {
    if (!check_width()) return;
    const std::string_view tag = trim(scanner_.fields[0]);
    if (tag.empty()) {
      fail_here("empty tag");
      return;
    }
    std::int64_t step = 0;
    if (!read_step(1, step)) return;
    double value = 0, time = std::numeric_limits<double>::quiet_NaN();
    bool has_value = false, has_time = false;
    if (!read_value(2, value, has_value)) return;
    if (columns_.size() == 4 && !read_value(3, time, has_time)) return;
    if (!has_time) time = std::numeric_limits<double>::quiet_NaN();

    const double group_time = row_[0].time;
    const bool same_time = (std::isnan(time) && std::isnan(group_time)) || time == group_time;
    const KeyId key = keys_->intern(tag);
    if (auto limit = key_limit_error(options_); !limit.empty()) [[unlikely]] {
      fail_here(std::move(limit));
      return;
    }
    const auto has_tag = [&](const KeyedObservation& o) {
      return std::any_of(o.values.begin(), o.values.end(),
                         [&](const KeyedSample& s) { return s.key == key; });
    };
    if (group_open_ && (step != row_[0].step || !same_time ||
                        std::any_of(row_.begin(), row_.end(), has_tag)))
      flush_group();
    if (!group_open_) {
      group_open_ = true;
      reset(row_, step, time);
    }
    if (!has_value) return;  // an empty value cell is no sample, as in a wide CSV
    row_[static_cast<std::size_t>(mode_of(tag))].values.push_back({key, value});
  }

  void flush_group() {
    group_open_ = false;
    for (auto& obs : row_)
      if (!obs.values.empty()) push_ready(obs);
  }

  /// Queues `obs` to be handed out by swapping it into the ring: `obs` gets
  /// that slot's old buffers to fill next, so nothing is copied or allocated.
  void push_ready(KeyedObservation& obs) {
    std::swap(ready_[(ready_head_ + ready_count_) % ready_.size()], obs);
    ++ready_count_;
  }

  std::unique_ptr<trace_io::Input> in_;
  std::string path_;
  std::uint64_t size_ = 0;
  TraceOptions options_;

  std::string buf_;           // file bytes from base_ on: [0, end_); the rest is room
  std::size_t end_ = 0;
  std::uint64_t base_ = 0;    // file offset of buf_[0]
  std::size_t pos_ = 0;       // first unconsumed byte in buf_
  std::uint64_t line_ = 1;    // line number at pos_
  bool at_eof_ = false;
  RecordScanner scanner_;
  std::uint64_t rec_line_ = 0, rec_offset_ = 0;  // the record in scanner_

  std::vector<std::string> names_;
  std::vector<KeyId> key_ids_;  // wide CSV: each series and shared column's key id
  std::vector<Role> columns_;  // empty until the header is read
  bool long_ = false;
  std::string description_;
  // Observations made from a row, not yet handed out: a ring, drained
  // before the next record is read. One record makes at most six (a long
  // CSV's group of three modes, then, at a damaged row, the new group's).
  std::array<KeyedObservation, 8> ready_;
  std::size_t ready_head_ = 0, ready_count_ = 0;

  std::vector<Mode> column_modes_;    // wide CSV: each series column's mode
  // The observations being made from a row (wide) or a group of rows (long),
  // one per mode; kept to reuse their storage.
  std::array<KeyedObservation, mode_count> row_;
  // Wide CSV: the shared columns and each mode's series columns, in order,
  // and the current row's cells.
  std::vector<std::size_t> shared_columns_;
  std::array<std::vector<std::size_t>, mode_count> series_columns_;
  struct Cell {
    double value = 0;
    bool has = false;
  };
  std::vector<Cell> cells_;
  // Wide CSV: what the current row's cells say beyond their values.
  struct RowCells {
    std::int64_t step = 0;
    double time = std::numeric_limits<double>::quiet_NaN();
    bool any = false, any_shared = false;  // a series / a shared sample
    std::size_t per_mode[mode_count] = {};  // series samples per mode
  };
  RowCells row_cells_;
  bool group_open_ = false;  // long CSV: row_ holds a group being gathered
};

}  // namespace

namespace trace_io {
std::unique_ptr<TraceReader> open_csv(std::unique_ptr<Input> in, TraceError& error,
                                      const TraceOptions& options) {
  in->set_follow(options.follow);
  auto reader = std::make_unique<CsvReader>(std::move(in), options);
  if (!reader->start()) {
    error = *reader->error();
    return nullptr;
  }
  return reader;
}
}  // namespace trace_io

std::unique_ptr<TraceReader> open_csv(const std::string& path, TraceError& error,
                                      const TraceOptions& options) {
  auto in = trace_io::Input::open(path, error);
  if (!in) return nullptr;
  return trace_io::open_csv(std::move(in), error, options);
}

}  // namespace vigil
