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
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sys/mman.h>
#include <unistd.h>
#include <limits>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>

#include "trace/event.pb.h"  // the writer's; reading decodes the wire format itself
#include "trace/input.hpp"
#include "trace/key_table.hpp"
#include "trace/tensorboard_fast.hpp"
#include "trace/tensorboard_record.hpp"
#include "trace/tensorboard_wire.hpp"
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

// Heterogeneous lookup: finding a known tag by the record's bytes does not
// allocate.
struct Hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using TagMap = std::unordered_map<std::string, V, Hash, std::equal_to<>>;

// Bytes read from a file and not yet decoded: [begin, end) of `data`. A plain
// array rather than a std::string, so that a read goes straight into it
// (std::string would zero the space first).
struct ReadBuffer {
  std::unique_ptr<char[]> data;
  std::size_t capacity = 0, begin = 0, end = 0;

  [[nodiscard]] std::string_view bytes() const { return {data.get() + begin, end - begin}; }
  [[nodiscard]] std::size_t size() const { return end - begin; }
  void consume(std::size_t n) { begin += n; }
  /// Gives the memory back when nothing is held (a directory may hold many
  /// files: each keeps only its incomplete record between reads).
  void release_if_empty() {
    if (size() > 0) return;
    data.reset();
    capacity = begin = end = 0;
  }
  /// Room for at least `n` more bytes after the held ones, which move to the
  /// front (at most one incomplete record: records are decoded as they come).
  char* room(std::size_t n) {
    const std::size_t held = size();
    if (capacity - held < n) {
      const std::size_t grown = std::max(held + n, capacity * 2);
      auto bigger = std::make_unique_for_overwrite<char[]>(grown);
      if (held > 0) std::memcpy(bigger.get(), data.get() + begin, held);
      data = std::move(bigger);
      capacity = grown;
    } else if (begin > 0) {
      if (held > 0) std::memmove(data.get(), data.get() + begin, held);
    }
    begin = 0;
    end = held;
    return data.get() + end;
  }
};

// Storage for the queue of observations, which holds a whole event file's
// worth (tens of MB): large blocks are mapped with transparent huge pages
// requested (MADV_HUGEPAGE), so that touching them costs one page fault per
// 2 MiB instead of one per 4 KiB. Page faults were most of the reader's time
// on a virtual machine before this. Small blocks come from the heap.
template <typename T>
struct BigAllocator {
  using value_type = T;
  static constexpr std::size_t kMapped = std::size_t{4} << 20;
  BigAllocator() = default;
  template <typename U>
  BigAllocator(const BigAllocator<U>&) {}  // NOLINT: allocators convert implicitly
  static std::size_t mapped_size(std::size_t n) {
    const std::size_t huge = std::size_t{2} << 20;
    return (n * sizeof(T) + huge - 1) / huge * huge;
  }
  T* allocate(std::size_t n) {
    if (n * sizeof(T) < kMapped) return std::allocator<T>().allocate(n);
    void* p = ::mmap(nullptr, mapped_size(n), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    ::madvise(p, mapped_size(n), MADV_HUGEPAGE);  // a hint: without THP, plain pages
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    if (n * sizeof(T) < kMapped) return std::allocator<T>().deallocate(p, n);
    ::munmap(p, mapped_size(n));
  }
  template <typename U>
  bool operator==(const BigAllocator<U>&) const { return true; }
};

// One event file being read.
struct EventFile {
  std::string path;
  std::string_view dir_mode;   // from mode_of_dirs
  std::uint32_t dir_mode_id = std::numeric_limits<std::uint32_t>::max();  // interned, once used
  std::uint64_t consumed = 0;  // file offset just past the last whole record
  ReadBuffer pending;          // bytes read past `consumed` (an incomplete record)
  std::uint64_t size = 0;      // bytes seen so far
  bool done = false;           // damaged: read no further
  // A file named on its own (open_trace's input, which may be a pipe) is
  // read from its one open descriptor; a directory's files are opened by
  // path at each read.
  std::unique_ptr<trace_io::Input> input;
  // Tags whose first metadata named a plugin other than scalars (TensorBoard
  // writes the metadata once per tag and file, with the first value).
  TagMap<bool> non_scalar_tag;
};

class TensorBoardReader final : public TraceReader {
 public:
  TensorBoardReader(std::string root, bool is_dir, const TraceOptions& options,
                    std::unique_ptr<trace_io::Input> input = nullptr)
      : root_(std::move(root)),
        is_dir_(is_dir),
        follow_(options.follow),
        options_(options),
        input_(std::move(input)) {}

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
      // One entry per observation, reserved from the files' sizes (a record
      // with a scalar takes at least ~28 bytes): growing the queue by
      // doubling would copy it and fault in fresh pages again and again.
      std::uint64_t bytes = 0;
      for (const auto& f : files_) {
        std::error_code ec;
        bytes += f.input ? f.input->size() : fs::file_size(f.path, ec);
      }
      queue_.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(bytes / 28, std::uint64_t{1} << 26)));
      for (std::size_t i = 0; i < files_.size(); ++i) read_more(i);
      sort_queue();
      total_ = queue_.size();
    }
    return true;
  }

  bool next(Observation& out) override { return next_from_keyed(out); }

  bool next_keyed(KeyedObservation& out) override {
    if (head_ == queue_.size() && !refill()) [[unlikely]]
      return false;
    const Pending& p = queue_[head_++];
    out.step = p.step;
    out.time = p.time;
    out.mode = p.mode();
    const std::uint32_t n = p.count();
    if (out.values.size() != n) out.values.resize(n);
    if (n == 1) {
      out.values[0] = {p.first, p.value};
      return true;
    }
    for (std::uint32_t i = 0; i < n; ++i)
      out.values[i] = {values_[p.first + i].first, values_[p.first + i].second};
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
                       files_.size() == 1 ? "" : "s", keys_->size());
  }

  [[nodiscard]] std::uint64_t size() const override {
    std::uint64_t n = 0;
    for (const auto& f : files_) n += f.size;
    return n;
  }

 private:
  // One observation waiting to be handed out: 32 bytes, as a file of a
  // million scalars makes a million of them. Most records hold one scalar,
  // kept here; several go to values_.
  struct Pending {
    std::int64_t step;
    double time;
    double value;         // the scalar, when count() == 1
    std::uint32_t first;  // its name id when count() == 1, else its first index in values_
    std::uint32_t count_mode;  // mode (its ModeId, < 4) << 30 | count
    [[nodiscard]] std::uint32_t count() const { return count_mode & ((1u << 30) - 1); }
    [[nodiscard]] std::uint32_t mode() const { return count_mode >> 30; }
    static std::uint32_t pack(std::uint32_t mode, std::uint32_t count) { return mode << 30 | count; }
  };

  // The queue is empty: false at the end (the deferred error, if any, is
  // now the error); with follow, reads what was appended meanwhile.
  [[gnu::noinline]] bool refill() {
    if (!follow_ || error_ || deferred_error_) return finish();
    clear_queue();
    TraceError scan_error;
    if (is_dir_ && !scan(scan_error)) return false;
    for (std::size_t i = 0; i < files_.size(); ++i) read_more(i);
    sort_queue();
    if (queue_.empty()) return finish();
    return true;
  }

  void clear_queue() {
    queue_.clear();
    values_.clear();
    head_ = 0;
    out_of_order_ = false;
    last_step_ = std::numeric_limits<std::int64_t>::min();
    last_time_ = -std::numeric_limits<double>::infinity();
  }

  // The wall time as the merge orders it: an unknown (NaN) time first.
  static double order_time(double t) { return std::isnan(t) ? -std::numeric_limits<double>::infinity() : t; }

  // Queues `p`, noting whether the queue is still in (step, time) order, so
  // that sort_queue need not read it all back to find out.
  [[gnu::always_inline]] void push(const Pending& p) {
    const double t = order_time(p.time);
    if (p.step < last_step_ || (p.step == last_step_ && t < last_time_)) out_of_order_ = true;
    last_step_ = p.step;
    last_time_ = t;
    queue_.push_back(p);
  }

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
    constexpr std::size_t kChunk = std::size_t{1} << 20;
    for (;;) {
      char* to = f.pending.room(kChunk);
      const std::size_t n = f.input->read(to, kChunk);
      if (n == 0) break;
      f.pending.end += n;
      f.size = f.consumed + f.pending.size();
      if (!decode_records(f, /*at_end=*/false)) break;
    }
    const bool read_error = f.input->failed();
    const std::string failure = read_error ? f.input->failure() : std::string();
    if (is_dir_) f.input.reset();
    if (f.done) {  // damaged: never read again
      f.pending = ReadBuffer{};
      return;
    }
    if (read_error) return fail(f, f.size, failure);
    decode_records(f, /*at_end=*/true);
    f.pending.release_if_empty();
  }

  // Decodes the whole records at the start of f.pending and drops their bytes.
  // At the end of the data, bytes left over are a truncated record (unless
  // following: the writer is not done with it). False at damage.
  bool decode_records(EventFile& f, bool at_end) {
    const std::string_view bytes = f.pending.bytes();
    std::size_t used = 0;
    bool ok = true;
    while (used < bytes.size()) {
#if VIGIL_TB_FAST_RECORDS
      // Runs of plain scalar records of known tags: queued as below (as
      // add_known_scalar would), each in one inlined pass.
      if (fast_records_) {
        used += tb::take_plain_scalars(
            bytes.substr(used), trace_io::KeyTable::kNone,
            [&](std::string_view tag) { return tag.empty() ? trace_io::KeyTable::kNone : keys_->find(tag); },
            [&](const tb::PlainScalar& s, std::uint32_t name) {
              push(Pending{s.step, s.wall_time, s.value, name, Pending::pack(mode_of(f, name), 1)});
            });
        if (used == bytes.size()) break;
      }
#endif
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
      if (!tb::decode_event(r.data, event_)) {
        fail(f, offset, "corrupt record: not an event protobuf");
        ok = false;
        break;
      }
      if (add_known_scalar(f)) {
        used += r.size;
        continue;
      }
      if (const auto field = bad_text_field(); !field.empty()) {
        fail(f, offset, fmt::format("corrupt record: {} is not valid UTF-8", field));
        ok = false;
        break;
      }
      used += r.size;
      add_event(f);
      // The key tables only grow: the limits are checked when they did.
      if (const std::size_t known = keys_->size() + modes_->size(); known != checked_keys_) [[unlikely]] {
        checked_keys_ = known;
        if (auto limit = key_limit_error(options_); !limit.empty()) {
          fail(f, offset, std::move(limit));
          ok = false;
          break;
        }
      }
    }
    f.consumed += used;
    f.pending.consume(used);
    return ok;
  }

  // The text fields of event_ that are not UTF-8, named for the error; empty
  // if all are. A tag already interned was checked when it was first seen;
  // tag_ids_ keeps what the lookup found for add_event.
  std::string_view bad_text_field() {
    tag_ids_.clear();
    if (!event_.has_summary) return {};
    for (const auto& v : event_.values) {
      const std::uint32_t id = keys_->find(v.tag);
      tag_ids_.push_back(id);
      if (id == trace_io::KeyTable::kNone && !valid_utf8(v.tag)) return "summary tag";
      if (v.has_metadata && !valid_utf8(v.plugin_name)) return "plugin name";
    }
    return {};
  }

  // Nearly every record: one simple_value of a tag seen before (its UTF-8
  // checked then), no metadata. Queued as add_event would queue it, without
  // its per-record vectors; false (nothing done) for any other record. The
  // key tables do not grow here, so there is no limit to check.
  bool add_known_scalar(EventFile& f) {
    if (!event_.has_summary || event_.values.size() != 1) return false;
    const tb::WireValue& v = event_.values[0];
    if (v.kind != tb::WireValue::Kind::simple || v.has_metadata || v.tag.empty()) return false;
    const std::uint32_t name = keys_->find(v.tag);
    if (name == trace_io::KeyTable::kNone) return false;
    push(Pending{event_.step, event_.wall_time, v.simple, name, Pending::pack(mode_of(f, name), 1)});
    return true;
  }

  // The mode of series `name` read from file `f`: its tag's, else the
  // file's directory's (interned when first needed).
  std::uint32_t mode_of(EventFile& f, std::uint32_t name) {
    if (const std::uint32_t mode = tag_modes_[name]; mode != kUnknown) return mode;
    if (f.dir_mode_id == kUnknown) f.dir_mode_id = f.dir_mode.empty() ? 0 : modes_->intern(f.dir_mode);
    return f.dir_mode_id;
  }

  // A series name's id, and the mode its tag implies (kUnknown: none).
  std::uint32_t intern_tag(std::string_view tag) {
    if (const auto id = keys_->find(tag); id != trace_io::KeyTable::kNone) return id;
    const auto id = keys_->add(tag);
    const std::string_view mode = mode_of_tag(tag);
    tag_modes_.push_back(mode.empty() ? kUnknown : modes_->intern(mode));
    return id;
  }

  // Queues the scalars of event_: one observation per mode present.
  void add_event(EventFile& f) {
    if (!event_.has_summary) return;
    const double time = event_.wall_time;
    scratch_.clear();
    for (std::size_t i = 0; i < event_.values.size(); ++i) {
      const tb::WireValue& v = event_.values[i];
      if (v.has_metadata && !f.non_scalar_tag.contains(v.tag))
        f.non_scalar_tag.emplace(std::string(v.tag), !v.plugin_name.empty() && v.plugin_name != "scalars");
      std::optional<double> x;
      if (v.kind == tb::WireValue::Kind::simple) {
        x = v.simple;
      } else if (v.kind == tb::WireValue::Kind::tensor) {
        if (auto it = f.non_scalar_tag.find(v.tag); it != f.non_scalar_tag.end() && it->second)
          continue;
        x = tb::tensor_scalar(v.tensor);
      }
      if (!x || v.tag.empty()) continue;
      const std::uint32_t name = tag_ids_[i] != kUnknown ? tag_ids_[i] : intern_tag(v.tag);
      scratch_.push_back({mode_of(f, name), name, *x});
    }
    // Group by mode in order of first appearance (nearly always one mode).
    for (std::size_t i = 0; i < scratch_.size(); ++i) {
      const std::uint32_t mode = scratch_[i].mode;
      if (mode == kTaken) continue;
      std::size_t n = 0;
      for (std::size_t j = i; j < scratch_.size(); ++j) n += scratch_[j].mode == mode;
      Pending p{event_.step, time, scratch_[i].value, scratch_[i].name,
                Pending::pack(mode, static_cast<std::uint32_t>(n))};
      if (n == 1) {
        scratch_[i].mode = kTaken;
      } else {
        p.first = static_cast<std::uint32_t>(values_.size());
        for (std::size_t j = i; j < scratch_.size(); ++j) {
          if (scratch_[j].mode != mode) continue;
          values_.emplace_back(scratch_[j].name, scratch_[j].value);
          scratch_[j].mode = kTaken;
        }
      }
      push(p);
    }
  }

  // Sorts the queue (all of it: it is sorted only right after being filled
  // from empty) by (step, time); ties keep their arrival order (stable). One
  // file written in step order (the usual case) is sorted already, as push
  // noted.
  void sort_queue() {
    if (!out_of_order_) return;
    auto before = [&](const Pending& a, const Pending& b) {
      if (a.step != b.step) return a.step < b.step;
      return order_time(a.time) < order_time(b.time);
    };
    std::stable_sort(queue_.begin() + static_cast<std::ptrdiff_t>(head_), queue_.end(), before);
    out_of_order_ = false;
    if (!queue_.empty()) {
      last_step_ = queue_.back().step;
      last_time_ = order_time(queue_.back().time);
    }
  }

  static constexpr std::uint32_t kTaken = std::numeric_limits<std::uint32_t>::max();
  static constexpr std::uint32_t kUnknown = std::numeric_limits<std::uint32_t>::max();
  struct Scalar {
    std::uint32_t mode, name;
    double value;
  };

  std::string root_;
  bool is_dir_;
  bool follow_;
  TraceOptions options_;  // the key limits
  std::size_t checked_keys_ = 0;  // keys + modes when the limits were last checked
  const bool fast_records_ = tb::crc32c_hardware();  // take_plain_scalars may run
  std::unique_ptr<trace_io::Input> input_;  // a single file's input, until scan() takes it
  std::vector<EventFile> files_;
  std::unordered_map<std::string, std::size_t> known_;
  tb::WireEvent event_;  // reused: decoding into it keeps its allocations
  std::vector<std::uint32_t> tag_ids_;  // per value of event_: its name id, or kUnknown
  // The base's modes_ holds at most "train", "eval" and "test" (mode_of_tag,
  // mode_of_dirs): Pending keeps the id in two bits. Series names are the
  // base's keys_.
  std::vector<std::uint32_t> tag_modes_;  // per name: the mode its tag implies, or kUnknown
  std::vector<Scalar> scratch_;
  std::vector<Pending, BigAllocator<Pending>> queue_;
  std::vector<std::pair<std::uint32_t, double>> values_;
  std::size_t head_ = 0, total_ = 0;
  // Whether some push since the queue was last empty or sorted came before
  // the one before it, and that one's step and order_time.
  bool out_of_order_ = false;
  std::int64_t last_step_ = std::numeric_limits<std::int64_t>::min();
  double last_time_ = -std::numeric_limits<double>::infinity();
  std::optional<TraceError> deferred_error_;
};

}  // namespace

std::unique_ptr<TraceReader> open_tensorboard(const std::string& path, TraceError& error,
                                              const TraceOptions& options) {
  std::error_code ec;
  if (path != "-" && fs::is_directory(path, ec)) {
    auto reader = std::make_unique<TensorBoardReader>(path, true, options);
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
  auto reader = std::make_unique<TensorBoardReader>(std::move(name), false, options,
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
