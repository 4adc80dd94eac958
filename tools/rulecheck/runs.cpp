// Runs directories and the ordered worker pool (runs.hpp).
#include "tools/rulecheck/runs.hpp"

#include <filesystem>
#include <fmt/format.h>

#include "tools/rulecheck/common.hpp"
#include "vigil/trace.hpp"

namespace rulecheck {
namespace {

namespace fs = std::filesystem;

bool is_event_file(const fs::path& p) {
  return p.filename().string().find("tfevents") != std::string::npos;
}

bool hidden(const fs::path& p) { return p.filename().string().starts_with('.'); }

// Sorted by name, so the order of runs (and of the output) never depends on
// the file system's directory order.
std::vector<fs::directory_entry> entries(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (!hidden(it->path())) out.push_back(*it);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  return out;
}

bool regular(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_regular_file(ec);
}

bool directory(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_directory(ec);
}

bool has_events_directly(const fs::path& dir) {
  for (const auto& e : entries(dir))
    if (regular(e) && is_event_file(e.path())) return true;
  return false;
}

bool has_events_below(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec))
    if (is_event_file(it->path()) && regular(*it)) return true;
  return false;
}

bool recognised(const fs::path& file) {
  vigil::TraceError ignored;
  return vigil::detect_trace_format(file.string(), ignored).has_value();
}

// The runs inside a runs directory; empty if `dir` is not one.
std::vector<RunInput> runs_in(const fs::path& dir) {
  std::vector<RunInput> runs;
  for (const auto& e : entries(dir)) {
    if (regular(e)) {
      if (!is_event_file(e.path()) && recognised(e.path())) runs.push_back({e.path().string(), {}});
      continue;
    }
    if (!directory(e)) continue;
    if (has_events_below(e.path())) {
      runs.push_back({e.path().string(), {}});
      continue;
    }
    std::vector<std::string> found;
    for (const auto& f : entries(e.path()))
      if (regular(f) && recognised(f.path())) found.push_back(f.path().filename().string());
    if (found.size() == 1) {
      runs.push_back({(e.path() / found.front()).string(), {}});
    } else if (found.empty()) {
      print_err(fmt::format("{}: warning: no trace in this run directory, skipped\n",
                            e.path().string()));
    } else {
      runs.push_back({e.path().string(),
                      fmt::format("several traces in one run directory ({}); pass the one to read "
                                  "with --trace",
                                  fmt::join(found, ", "))});
    }
  }
  return runs;
}

}  // namespace

std::vector<RunInput> expand_runs(const std::vector<std::string>& args, bool& dirs_expanded) {
  dirs_expanded = false;
  std::vector<RunInput> out;
  for (const auto& arg : args) {
    std::error_code ec;
    if (arg != "-" && fs::is_directory(arg, ec) && !has_events_directly(arg)) {
      auto runs = runs_in(arg);
      if (!runs.empty()) {
        dirs_expanded = true;
        for (auto& r : runs) out.push_back(std::move(r));
        continue;
      }
    }
    out.push_back({arg, {}});
  }
  return out;
}

unsigned worker_count(std::size_t n, unsigned jobs) {
  unsigned w = jobs > 0 ? jobs : std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::min<std::size_t>(w, std::max<std::size_t>(n, 1)));
}

void ordered_parallel(std::size_t n, unsigned workers, const std::function<void(std::size_t)>& work,
                      const std::function<void(std::size_t)>& done) {
  if (workers <= 1 || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) {
      work(i);
      done(i);
    }
    return;
  }
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::vector<char> finished(n, 0);
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (unsigned t = 0; t < workers; ++t)
    threads.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        work(i);
        {
          std::lock_guard lock(mutex);
          finished[i] = 1;
        }
        finished_cv.notify_all();
      }
    });
  for (std::size_t i = 0; i < n; ++i) {
    std::unique_lock lock(mutex);
    finished_cv.wait(lock, [&] { return finished[i] != 0; });
    lock.unlock();
    done(i);
  }
  for (auto& t : threads) t.join();
}

}  // namespace rulecheck
