// TensorBoard event files (SPEC §6): TFRecord-framed `Event` protobufs.
//
// Without follow, every file is read and decoded at open time (a directory's
// runs must be merged in step order, which needs all of them), observations
// are kept compactly (interned tags, one flat value array) and handed out in
// (step, wall time) order; the first damage found is reported after the last
// good observation. With follow, each next() that runs dry reads what was
// appended to each file (and any new file) since, and hands out the records
// completed meanwhile; an incomplete last record is simply not written yet.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include <google/protobuf/stubs/logging.h>

#include "trace/event.pb.h"
#include "trace/input.hpp"
#include "trace/tensorboard_record.hpp"
#include "vigil/trace.hpp"

namespace vigil {

namespace {

namespace fs = std::filesystem;

bool istarts_with(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && istarts_with(a, b);
}

// Mode of a tag, from the prefixes trainers give evaluation metrics: Hugging
// Face writes `eval/loss`, Lightning `val_loss` or `val/loss`, Keras-style
// code `validation_loss`; test metrics (`test/`, `test_`) get mode "test".
// Empty if the tag says nothing.
std::string_view mode_of_tag(std::string_view tag) {
  static constexpr std::string_view eval[] = {"eval/", "eval_", "val/", "val_", "valid/",
                                              "valid_", "validation/", "validation_"};
  for (auto p : eval)
    if (istarts_with(tag, p)) return "eval";
  if (istarts_with(tag, "test/") || istarts_with(tag, "test_")) return "test";
  return {};
}

// Mode implied by the directories between the root and a file: Keras'
// TensorBoard callback writes `train/` and `validation/` runs with the same
// tags (`epoch_loss`).
std::string_view mode_of_dirs(const fs::path& relative_dir) {
  std::string_view mode;
  for (const auto& part : relative_dir) {
    const std::string name = part.string();
    if (iequals(name, "validation") || iequals(name, "eval") || iequals(name, "val") ||
        iequals(name, "valid"))
      mode = "eval";
    else if (iequals(name, "test"))
      mode = "test";
    else if (iequals(name, "train"))
      mode = "train";
  }
  return mode;
}

// Tags name series and go to the terminal and to --exec variables: text that
// is not UTF-8 is damage, as it is to TensorBoard itself.
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (i + n >= s.size()) return false;  // cut short
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr std::uint32_t min_of[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_of[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// The text fields of `e` (declared bytes in event.proto) that are not UTF-8,
// named for the error; empty if all are.
std::string_view bad_text_field(const tb::Event& e) {
  if (e.has_summary())
    for (const auto& v : e.summary().value()) {
      if (!valid_utf8(v.tag())) return "summary tag";
      if (v.has_metadata() && !valid_utf8(v.metadata().plugin_data().plugin_name()))
        return "plugin name";
    }
  return {};
}

double half_to_double(std::uint32_t bits) {
  const std::uint32_t sign = (bits >> 15) & 1u, exponent = (bits >> 10) & 0x1Fu,
                      mantissa = bits & 0x3FFu;
  double v;
  if (exponent == 0) v = std::ldexp(static_cast<double>(mantissa), -24);  // subnormal or zero
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                                        : std::numeric_limits<double>::infinity();
  else v = std::ldexp(static_cast<double>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -v : v;
}

double bfloat16_to_double(std::uint32_t bits) {
  const std::uint32_t f32 = (bits & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &f32, 4);
  return f;
}

template <typename T>
double load_le(const std::string& bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof(T));
  return static_cast<double>(v);
}

// The value of a tensor with exactly one element of a numeric type, from the
// typed repeated field or from tensor_content; nullopt for anything else
// (histograms, images, text, vectors), which is skipped, not an error.
std::optional<double> tensor_scalar(const tb::TensorProto& t) {
  const auto& shape = t.tensor_shape();
  if (shape.unknown_rank()) return std::nullopt;
  for (const auto& dim : shape.dim())
    if (dim.size() != 1) return std::nullopt;
  const std::string& content = t.tensor_content();
  auto from_content = [&](std::size_t width, auto load) -> std::optional<double> {
    if (content.size() != width) return std::nullopt;
    return load(content);
  };
  auto one = [](const auto& field) -> std::optional<double> {
    if (field.size() != 1) return std::nullopt;
    return static_cast<double>(field.Get(0));
  };
  const bool packed = !content.empty();
  switch (t.dtype()) {
    case tb::DT_FLOAT:
      return packed ? from_content(4, load_le<float>) : one(t.float_val());
    case tb::DT_DOUBLE:
      return packed ? from_content(8, load_le<double>) : one(t.double_val());
    case tb::DT_INT32:
      return packed ? from_content(4, load_le<std::int32_t>) : one(t.int_val());
    case tb::DT_INT16:
      return packed ? from_content(2, load_le<std::int16_t>) : one(t.int_val());
    case tb::DT_INT8:
      return packed ? from_content(1, load_le<std::int8_t>) : one(t.int_val());
    case tb::DT_UINT8:
      return packed ? from_content(1, load_le<std::uint8_t>) : one(t.int_val());
    case tb::DT_INT64:
      return packed ? from_content(8, load_le<std::int64_t>) : one(t.int64_val());
    case tb::DT_BOOL:
      return packed ? from_content(1, load_le<std::uint8_t>) : one(t.bool_val());
    case tb::DT_HALF:
    case tb::DT_BFLOAT16: {
      const auto convert = t.dtype() == tb::DT_HALF ? half_to_double : bfloat16_to_double;
      if (packed) {
        if (content.size() != 2) return std::nullopt;
        return convert(static_cast<std::uint8_t>(content[0]) |
                       (static_cast<std::uint32_t>(static_cast<std::uint8_t>(content[1])) << 8));
      }
      if (t.half_val_size() != 1) return std::nullopt;
      return convert(static_cast<std::uint32_t>(t.half_val(0)));
    }
    default:
      return std::nullopt;
  }
}

// One event file being read.
struct EventFile {
  std::string path;
  std::string_view dir_mode;   // from mode_of_dirs
  std::uint64_t consumed = 0;  // file offset just past the last whole record
  std::string pending;         // bytes read past `consumed` (an incomplete record)
  std::uint64_t size = 0;      // bytes seen so far
  bool done = false;           // damaged: read no further
  // A file named on its own (open_trace's input, which may be a pipe) is
  // read from its one open descriptor; a directory's files are opened by
  // path at each read.
  std::unique_ptr<trace_io::Input> input;
  // Tags whose first metadata named a plugin other than scalars (TensorBoard
  // writes the metadata once per tag and file, with the first value).
  std::unordered_map<std::string, bool> non_scalar_tag;
};

class TensorBoardReader final : public TraceReader {
 public:
  TensorBoardReader(std::string root, bool is_dir, bool follow,
                    std::unique_ptr<trace_io::Input> input = nullptr)
      : root_(std::move(root)), is_dir_(is_dir), follow_(follow), input_(std::move(input)) {
    modes_.emplace_back("train");
  }

  /// Lists the files (and, without follow, reads them all). False with
  /// `error` set if there is nothing to read.
  bool start(TraceError& error) {
    if (!scan(error)) return false;
    if (!follow_ && files_.empty()) {
      error = TraceError{root_, 0, 0,
                         "no TensorBoard event files (names containing 'tfevents') here"};
      return false;
    }
    if (!follow_) {
      for (std::size_t i = 0; i < files_.size(); ++i) read_more(i);
      sort_queue();
      total_ = queue_.size();
    }
    return true;
  }

  bool next(Observation& out) override {
    if (head_ == queue_.size()) {
      if (!follow_ || error_ || deferred_error_) return finish();
      queue_.clear();
      values_.clear();
      head_ = 0;
      TraceError scan_error;
      if (is_dir_ && !scan(scan_error)) return false;
      for (std::size_t i = 0; i < files_.size(); ++i) read_more(i);
      sort_queue();
      if (queue_.empty()) return finish();
    }
    const Pending& p = queue_[head_++];
    out.step = p.step;
    out.time = p.time;
    out.mode = modes_[p.mode];
    out.values.clear();
    out.values.reserve(p.end - p.begin);
    for (std::uint32_t i = p.begin; i < p.end; ++i)
      out.values.emplace_back(names_[values_[i].first], values_[i].second);
    return true;
  }

  [[nodiscard]] std::uint64_t position() const override {
    if (follow_) {
      std::uint64_t n = 0;
      for (const auto& f : files_) n += f.consumed;
      return n;
    }
    // Everything was read at open; progress is the share handed out.
    return total_ == 0 ? size() : size() * head_ / total_;
  }

  [[nodiscard]] std::string describe() const override {
    return fmt::format("TensorBoard, {} event file{}, {} series so far", files_.size(),
                       files_.size() == 1 ? "" : "s", names_.size());
  }

  [[nodiscard]] std::uint64_t size() const override {
    std::uint64_t n = 0;
    for (const auto& f : files_) n += f.size;
    return n;
  }

 private:
  struct Pending {
    std::int64_t step;
    double time;
    std::uint64_t order;  // arrival order, for a stable merge
    std::uint32_t mode;   // index into modes_
    std::uint32_t begin, end;  // range in values_
  };

  bool finish() {
    if (deferred_error_ && !error_) error_ = std::move(deferred_error_);
    deferred_error_.reset();
    return false;
  }

  // Finds event files not seen yet. Directory order is unspecified, so new
  // files are added in path order (Lightning's version_0, version_1, ...).
  bool scan(TraceError& error) {
    std::error_code ec;
    if (!is_dir_) {
      if (files_.empty()) {
        files_.emplace_back();
        files_.back().path = root_;
        files_.back().input = std::move(input_);
      }
      return true;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
    if (ec) {
      error = TraceError{root_, 0, 0, fmt::format("cannot open: {}", ec.message())};
      return false;
    }
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      const auto& entry = *it;
      std::error_code type_ec;
      if (!entry.is_regular_file(type_ec)) continue;
      if (entry.path().filename().string().find("tfevents") == std::string::npos) continue;
      if (known_.contains(entry.path().string())) continue;
      found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end());
    for (const auto& p : found) {
      known_.emplace(p.string(), files_.size());
      EventFile f;
      f.path = p.string();
      f.dir_mode = mode_of_dirs(p.parent_path().lexically_relative(root_));
      files_.push_back(std::move(f));
    }
    return true;
  }

  void fail(EventFile& f, std::uint64_t offset, std::string message) {
    f.done = true;
    // The first damage (in file order) is the one reported, after all good records.
    if (!deferred_error_) deferred_error_ = TraceError{f.path, 0, offset, std::move(message)};
  }

  // Reads what file `index` holds past what was read, decodes its whole records.
  void read_more(std::size_t index) {
    EventFile& f = files_[index];
    if (f.done) return;
    if (!f.input) {
      TraceError open_error;
      f.input = trace_io::Input::open(f.path, open_error);
      if (!f.input) {
        // A file listed a moment ago may be rotated away by its writer; only
        // a file named on the command line must exist.
        if (!is_dir_ || !follow_) fail(f, 0, open_error.message);
        return;
      }
      f.input->set_follow(follow_);
      if (is_dir_ && follow_) {
        // Keep no descriptor between polls: a directory may hold many files.
        const std::uint64_t read_from = f.consumed + f.pending.size();
        if (read_from > 0 && ::lseek(f.input->fd(), static_cast<off_t>(read_from), SEEK_SET) < 0) {
          f.input.reset();
          return fail(f, read_from, fmt::format("cannot seek: {}", std::strerror(errno)));
        }
      }
    }
    // Chunk by chunk, so memory stays at one chunk plus one record whatever
    // the file's size.
    std::vector<char> chunk(1u << 20);
    for (;;) {
      const std::size_t n = f.input->read(chunk.data(), chunk.size());
      if (n == 0) break;
      f.pending.append(chunk.data(), n);
      f.size = f.consumed + f.pending.size();
      if (!decode_records(f, /*at_end=*/false)) break;
    }
    const bool read_error = f.input->failed();
    const std::string failure = read_error ? f.input->failure() : std::string();
    if (is_dir_) f.input.reset();
    if (f.done) return;
    if (read_error) return fail(f, f.size, failure);
    decode_records(f, /*at_end=*/true);
  }

  // Decodes the whole records at the start of f.pending and drops their bytes.
  // At the end of the data, bytes left over are a truncated record (unless
  // following: the writer is not done with it). False at damage.
  bool decode_records(EventFile& f, bool at_end) {
    std::string_view bytes = f.pending;
    std::size_t used = 0;
    bool ok = true;
    while (used < bytes.size()) {
      const std::uint64_t offset = f.consumed + used;
      const tb::RecordView r = tb::parse_record(bytes.substr(used));
      if (r.status == tb::RecordStatus::need_more) {
        if (at_end && !follow_) {
          fail(f, offset, "truncated record");
          ok = false;
        }
        break;
      }
      if (r.status != tb::RecordStatus::ok) {
        fail(f, offset,
             r.status == tb::RecordStatus::bad_length_crc ? "corrupt record: length crc mismatch"
             : r.status == tb::RecordStatus::bad_data_crc ? "corrupt record: data crc mismatch"
                                                           : "corrupt record: length too large");
        ok = false;
        break;
      }
      bool parsed;
      {
        // Whatever protobuf would still log about a bad record goes nowhere:
        // the failure is reported below as this reader's positioned error.
        // (LogSilencer, unlike SetLogHandler, is safe in library code.)
        google::protobuf::LogSilencer quiet;
        parsed = event_.ParseFromArray(r.data.data(), static_cast<int>(r.data.size()));
      }
      if (!parsed) {
        fail(f, offset, "corrupt record: not an event protobuf");
        ok = false;
        break;
      }
      if (const auto field = bad_text_field(event_); !field.empty()) {
        fail(f, offset, fmt::format("corrupt record: {} is not valid UTF-8", field));
        ok = false;
        break;
      }
      used += r.size;
      add_event(f);
    }
    f.consumed += used;
    f.pending.erase(0, used);
    return ok;
  }

  // Heterogeneous lookup: interning a known tag does not allocate.
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Ids = std::unordered_map<std::string, std::uint32_t, Hash, std::equal_to<>>;

  std::uint32_t intern(std::vector<std::string>& names, Ids& ids, std::string_view s) {
    if (auto it = ids.find(s); it != ids.end()) return it->second;
    const auto id = static_cast<std::uint32_t>(names.size());
    names.emplace_back(s);
    ids.emplace(std::string(s), id);
    return id;
  }

  // Queues the scalars of event_: one observation per mode present.
  void add_event(EventFile& f) {
    if (!event_.has_summary()) return;
    const double time = event_.wall_time();
    scratch_.clear();
    for (const auto& v : event_.summary().value()) {
      if (v.has_metadata()) {
        const std::string& plugin = v.metadata().plugin_data().plugin_name();
        f.non_scalar_tag.emplace(v.tag(), !plugin.empty() && plugin != "scalars");
      }
      std::optional<double> x;
      if (v.value_case() == tb::Summary::Value::kSimpleValue) {
        x = v.simple_value();
      } else if (v.value_case() == tb::Summary::Value::kTensor) {
        if (auto it = f.non_scalar_tag.find(v.tag()); it != f.non_scalar_tag.end() && it->second)
          continue;
        x = tensor_scalar(v.tensor());
      }
      if (!x || v.tag().empty()) continue;
      std::string_view mode = mode_of_tag(v.tag());
      if (mode.empty()) mode = f.dir_mode.empty() ? std::string_view("train") : f.dir_mode;
      scratch_.push_back({intern(modes_, mode_ids_, mode), intern(names_, name_ids_, v.tag()), *x});
    }
    // Group by mode in order of first appearance (nearly always one mode).
    for (std::size_t i = 0; i < scratch_.size(); ++i) {
      const std::uint32_t mode = scratch_[i].mode;
      if (mode == kTaken) continue;
      Pending p{event_.step(), time, arrivals_++, mode, static_cast<std::uint32_t>(values_.size()), 0};
      for (std::size_t j = i; j < scratch_.size(); ++j) {
        if (scratch_[j].mode != mode) continue;
        values_.emplace_back(scratch_[j].name, scratch_[j].value);
        scratch_[j].mode = kTaken;
      }
      p.end = static_cast<std::uint32_t>(values_.size());
      queue_.push_back(p);
    }
  }

  void sort_queue() {
    auto key_time = [](double t) { return std::isnan(t) ? -std::numeric_limits<double>::infinity() : t; };
    std::sort(queue_.begin() + static_cast<std::ptrdiff_t>(head_), queue_.end(),
              [&](const Pending& a, const Pending& b) {
                if (a.step != b.step) return a.step < b.step;
                const double ta = key_time(a.time), tb = key_time(b.time);
                if (ta != tb) return ta < tb;
                return a.order < b.order;
              });
  }

  static constexpr std::uint32_t kTaken = std::numeric_limits<std::uint32_t>::max();
  struct Scalar {
    std::uint32_t mode, name;
    double value;
  };

  std::string root_;
  bool is_dir_;
  bool follow_;
  std::unique_ptr<trace_io::Input> input_;  // a single file's input, until scan() takes it
  std::vector<EventFile> files_;
  std::unordered_map<std::string, std::size_t> known_;
  tb::Event event_;  // reused: parsing into it keeps its allocations
  std::vector<std::string> names_, modes_;
  Ids name_ids_, mode_ids_{{"train", 0}};
  std::vector<Scalar> scratch_;
  std::vector<Pending> queue_;
  std::vector<std::pair<std::uint32_t, double>> values_;
  std::size_t head_ = 0, total_ = 0;
  std::uint64_t arrivals_ = 0;
  std::optional<TraceError> deferred_error_;
};

}  // namespace

std::unique_ptr<TraceReader> open_tensorboard(const std::string& path, TraceError& error,
                                              const TraceOptions& options) {
  std::error_code ec;
  if (path != "-" && fs::is_directory(path, ec)) {
    auto reader = std::make_unique<TensorBoardReader>(path, true, options.follow);
    if (!reader->start(error)) return nullptr;
    return reader;
  }
  auto in = trace_io::Input::open(path, error);
  if (!in) return nullptr;
  return trace_io::open_tensorboard_file(std::move(in), error, options);
}

namespace trace_io {
std::unique_ptr<TraceReader> open_tensorboard_file(std::unique_ptr<Input> in, TraceError& error,
                                                   const TraceOptions& options) {
  in->set_follow(options.follow);
  std::string name = in->name();
  auto reader = std::make_unique<TensorBoardReader>(std::move(name), false, options.follow,
                                                    std::move(in));
  if (!reader->start(error)) return nullptr;
  return reader;
}
}  // namespace trace_io

// ---- writer ----------------------------------------------------------------

struct TensorBoardWriter::Impl {
  std::string path;
  std::FILE* file = nullptr;
  std::string buffer;  // framed records not yet written
  tb::Event event;
  std::string data;
  std::optional<TraceError> error;

  bool write_out() {
    if (error) return false;
    if (!buffer.empty() && std::fwrite(buffer.data(), 1, buffer.size(), file) != buffer.size()) {
      error = TraceError{path, 0, 0, fmt::format("write error: {}", std::strerror(errno))};
      return false;
    }
    buffer.clear();
    return true;
  }

  void append(const tb::Event& e) {
    data.clear();
    e.SerializeToString(&data);
    tb::append_record(buffer, data);
  }
};

TensorBoardWriter::TensorBoardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TensorBoardWriter::~TensorBoardWriter() {
  if (impl_->file != nullptr) {
    impl_->write_out();
    std::fclose(impl_->file);
  }
}

std::unique_ptr<TensorBoardWriter> TensorBoardWriter::create(const std::string& path,
                                                             TraceError& error) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = std::fopen(path.c_str(), "wbe");  // close-on-exec
  if (impl->file == nullptr) {
    error = TraceError{path, 0, 0, fmt::format("cannot open: {}", std::strerror(errno))};
    return nullptr;
  }
  tb::Event header;
  header.set_wall_time(0);
  header.set_file_version("brain.Event:2");
  impl->append(header);
  return std::unique_ptr<TensorBoardWriter>(new TensorBoardWriter(std::move(impl)));
}

bool TensorBoardWriter::write(const Observation& obs) {
  Impl& w = *impl_;
  if (w.error) return false;
  if (obs.values.empty()) return true;
  w.event.Clear();
  w.event.set_step(obs.step);
  w.event.set_wall_time(std::isnan(obs.time) ? 0.0 : obs.time);
  auto* summary = w.event.mutable_summary();
  for (const auto& [name, value] : obs.values) {
    auto* v = summary->add_value();
    v->set_tag(name);
    v->set_simple_value(static_cast<float>(value));
  }
  w.append(w.event);
  // Keep memory bounded on long runs without a syscall per record.
  if (w.buffer.size() >= (1u << 16)) return w.write_out();
  return true;
}

bool TensorBoardWriter::flush() {
  if (!impl_->write_out()) return false;
  if (std::fflush(impl_->file) != 0) {
    impl_->error = TraceError{impl_->path, 0, 0, fmt::format("write error: {}", std::strerror(errno))};
    return false;
  }
  return true;
}

const std::optional<TraceError>& TensorBoardWriter::error() const { return impl_->error; }

}  // namespace vigil
