// Trace reader benchmarks (Google Benchmark). What is measured, how to run it
// and the latest numbers are in docs/performance.md ("Trace reading").
//
//   BM_ReadTensorBoard           open_tensorboard + next_keyed() over a ~50 MB event file,
//                                each new key id mapped once (what a replay pays)
//   BM_ReadTensorBoard_Observation  the same with next(Observation&) (names as strings)
//   BM_ReadTensorBoard_Baseline  the same file's bytes: fread into a buffer + CRC32C of
//                                every byte (the least any checking reader must do)
//   BM_ReadJsonl[_Observation]   open_jsonl + next_keyed() / next() over a ~50 MB JSONL file
//   BM_ReadJsonl_Baseline        the same file's bytes: fread + newline count
//   BM_ReadCsv[_Observation]     open_csv + next_keyed() / next() over a ~50 MB wide CSV
//   BM_ReadCsv_Baseline          the same file's bytes: fread + newline count
//
// The TensorBoard and JSONL files are generated at start into the temp
// directory from the real Lightning run in tests/tb/data (its records
// repeated with shifted steps, so the content is what a trainer writes); the
// CSV file is a Lightning-style metrics.csv of 10 numeric columns (step,
// time, 6 train series written every row, 2 eval series every 10th row, as
// a logger writes them: shortest round-trip decimals). All are removed at
// the end.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/verify.hpp"
#include "trace/event.pb.h"
#include "trace/tensorboard_record.hpp"
#include "vigil/trace.hpp"

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kTargetBytes = 50u << 20;

// VIGIL_SOURCE_DIR, not __FILE__: with ccache's base_dir, __FILE__ is relative.
const fs::path kRealRun = fs::path(VIGIL_SOURCE_DIR) / "tests/tb/data/" /
                          "lightning_lstm_textgen/events.out.tfevents.1716735746.99c8c45923de.3769.0";

struct Files {
  std::string tensorboard, jsonl, csv;
  std::uint64_t tensorboard_bytes = 0, jsonl_bytes = 0, csv_bytes = 0;
  // What each file holds, known from how it was written: a reader that
  // returns fewer observations did less work and its time would mean nothing.
  std::uint64_t tensorboard_observations = 0, jsonl_observations = 0, csv_observations = 0;
};

enum class Format { tensorboard, jsonl, csv };

Files& files() {
  static Files f;
  return f;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool generate(const fs::path& tmp) {
  Files& f = files();
  fs::create_directories(tmp);
  f.tensorboard = (tmp / "events.out.tfevents.bench").string();
  f.jsonl = (tmp / "bench.jsonl").string();

  const std::string real = slurp(kRealRun);
  if (real.empty()) {
    std::fprintf(stderr, "cannot read %s\n", kRealRun.c_str());
    return false;
  }
  std::vector<vigil::tb::Event> events;
  for (std::string_view rest = real; !rest.empty();) {
    const auto r = vigil::tb::parse_record(rest);
    if (r.status != vigil::tb::RecordStatus::ok) return false;
    events.emplace_back().ParseFromArray(r.data.data(), static_cast<int>(r.data.size()));
    rest.remove_prefix(r.size);
  }
  const std::int64_t span = events.back().step() + 1;

  // The observations the TensorBoard reader makes of the real run: each
  // round of the generated file (steps shifted past the previous round's)
  // holds as many.
  vigil::TraceError error;
  auto reader = vigil::open_tensorboard(kRealRun.string(), error);
  if (!reader) return false;
  std::vector<vigil::Observation> observations;
  vigil::Observation obs;
  while (reader->next(obs)) observations.push_back(obs);

  std::string out, data;
  vigil::tb::append_record(out, events.front().SerializeAsString());  // file_version
  for (std::int64_t round = 0; out.size() < kTargetBytes; ++round) {
    for (std::size_t i = 1; i < events.size(); ++i) {
      vigil::tb::Event e = events[i];
      e.set_step(e.step() + round * span);
      e.SerializeToString(&data);
      vigil::tb::append_record(out, data);
    }
    f.tensorboard_observations += observations.size();
  }
  std::ofstream(f.tensorboard, std::ios::binary) << out;
  f.tensorboard_bytes = out.size();

  // The JSONL file holds the same observations, repeated up to the same
  // size: one per line.
  std::string text;
  for (std::int64_t round = 0; text.size() < kTargetBytes; ++round)
    for (auto o : observations) {
      o.step += round * span;
      o.time += static_cast<double>(round) * 5000.0;
      text += vigil::to_jsonl(o);
      text += '\n';
      ++f.jsonl_observations;
    }
  std::ofstream(f.jsonl, std::ios::binary) << text;
  f.jsonl_bytes = text.size();

  // The wide CSV: every row a train observation, every 10th also an eval one.
  f.csv = (tmp / "metrics.csv").string();
  std::string csv = "step,wall_time,loss,lr,grad_norm,acc,tokens_per_s,mem_gb,val_loss,val_acc\n";
  char number[64];
  auto put = [&](double v) {
    const auto end = std::to_chars(number, number + sizeof number, v).ptr;
    csv.append(number, end);
  };
  for (std::int64_t step = 0; csv.size() < kTargetBytes; ++step) {
    const double x = static_cast<double>(step);
    csv += std::to_string(step);
    for (double v : {1716735746.0 + x * 0.137, 2.5 / (1.0 + x * 1e-4) + 0.01 * std::sin(x),
                     3e-4 * std::cos(x * 1e-5), 1.0 + 0.5 * std::sin(x * 0.01), 0.5 + x * 1e-8,
                     41234.5 + std::fmod(x * 7.3, 1000.0), 17.25 + std::fmod(x, 3.0)}) {
      csv += ',';
      put(v);
    }
    if (step % 10 == 0) {
      csv += ',';
      put(2.6 / (1.0 + x * 1e-4));
      csv += ',';
      put(0.4 + x * 1e-8);
      f.csv_observations += 2;
    } else {
      csv += ",,";
      f.csv_observations += 1;
    }
    csv += '\n';
  }
  std::ofstream(f.csv, std::ios::binary) << csv;
  f.csv_bytes = csv.size();
  return true;
}

enum class Api { keyed, observation };

/// Reads `reader` to the end through `api`; returns the observations. The
/// keyed consumer is what a replay is: each key id mapped to its own handle
/// once (here the name's length, standing in for an engine lookup), then one
/// vector index per sample.
std::uint64_t drain(vigil::TraceReader& reader, Api api) {
  std::uint64_t n = 0;
  if (api == Api::observation) {
    vigil::Observation obs;
    while (reader.next(obs)) {
      benchmark::DoNotOptimize(obs.values.data());
      ++n;
    }
    return n;
  }
  vigil::KeyedObservation obs;
  std::vector<std::size_t> handle;
  std::size_t sum = 0;
  while (reader.next_keyed(obs)) {
    while (handle.size() < reader.key_count())
      handle.push_back(reader.key_name(static_cast<vigil::KeyId>(handle.size())).size());
    for (const auto& sample : obs.values) sum += handle[sample.key];
    ++n;
  }
  benchmark::DoNotOptimize(sum);
  return n;
}

void read_trace(benchmark::State& state, Format format, Api api) {
  const Files& f = files();
  const std::string& path = format == Format::tensorboard ? f.tensorboard
                            : format == Format::jsonl     ? f.jsonl
                                                          : f.csv;
  const std::uint64_t expected = format == Format::tensorboard ? f.tensorboard_observations
                                 : format == Format::jsonl     ? f.jsonl_observations
                                                               : f.csv_observations;
  std::uint64_t observations = 0;
  for (auto _ : state) {
    vigil::TraceError error;
    auto reader = format == Format::tensorboard ? vigil::open_tensorboard(path, error)
                  : format == Format::jsonl     ? vigil::open_jsonl(path, error)
                                                : vigil::open_csv(path, error);
    if (!reader) {
      state.SkipWithError(error.format().c_str());
      return;
    }
    observations = drain(*reader, api);
    if (reader->error()) {
      state.SkipWithError(reader->error()->format().c_str());
      return;
    }
    if (!vigil::bench::expect(state, observations == expected,
                              std::to_string(observations) + " observations read, " +
                                  std::to_string(expected) + " written"))
      return;
  }
  const auto bytes = format == Format::tensorboard ? f.tensorboard_bytes
                     : format == Format::jsonl     ? f.jsonl_bytes
                                                   : f.csv_bytes;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["observations"] = static_cast<double>(observations);
}

// Reads the whole file in 1 MiB chunks; `touch` sees every chunk.
template <typename Touch>
void read_bytes(benchmark::State& state, const std::string& path, std::uint64_t bytes, Touch touch) {
  std::vector<char> buffer(1u << 20);
  for (auto _ : state) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    std::uint64_t acc = 0;
    std::size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0)
      acc += touch(std::string_view(buffer.data(), n));
    std::fclose(file);
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void BM_ReadTensorBoard(benchmark::State& state) { read_trace(state, Format::tensorboard, Api::keyed); }
void BM_ReadTensorBoard_Observation(benchmark::State& state) {
  read_trace(state, Format::tensorboard, Api::observation);
}

void BM_ReadTensorBoard_Baseline(benchmark::State& state) {
  read_bytes(state, files().tensorboard, files().tensorboard_bytes,
             [](std::string_view chunk) { return vigil::tb::crc32c(chunk); });
}

void BM_ReadJsonl(benchmark::State& state) { read_trace(state, Format::jsonl, Api::keyed); }
void BM_ReadJsonl_Observation(benchmark::State& state) { read_trace(state, Format::jsonl, Api::observation); }

void BM_ReadJsonl_Baseline(benchmark::State& state) {
  read_bytes(state, files().jsonl, files().jsonl_bytes, [](std::string_view chunk) {
    return static_cast<std::uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
  });
}

void BM_ReadCsv(benchmark::State& state) { read_trace(state, Format::csv, Api::keyed); }
void BM_ReadCsv_Observation(benchmark::State& state) { read_trace(state, Format::csv, Api::observation); }

void BM_ReadCsv_Baseline(benchmark::State& state) {
  read_bytes(state, files().csv, files().csv_bytes, [](std::string_view chunk) {
    return static_cast<std::uint64_t>(std::count(chunk.begin(), chunk.end(), '\n'));
  });
}

BENCHMARK(BM_ReadTensorBoard)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadTensorBoard_Observation)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadTensorBoard_Baseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadJsonl)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadJsonl_Observation)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadJsonl_Baseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadCsv)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadCsv_Observation)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReadCsv_Baseline)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reads `path` to the end with one reader and one API, for counting
// instructions under callgrind (`--toggle-collect=*drain_once*`: only the
// reading, not the file generation or start-up); returns the observations.
[[gnu::noinline]] std::uint64_t drain_once(const std::string& format, const std::string& api,
                                           const std::string& path) {
  vigil::TraceError error;
  auto reader = format == "tensorboard" ? vigil::open_tensorboard(path, error)
                : format == "jsonl"     ? vigil::open_jsonl(path, error)
                                        : vigil::open_csv(path, error);
  if (!reader) return 0;
  const std::uint64_t n = drain(*reader, api == "observation" ? Api::observation : Api::keyed);
  return reader->error() ? 0 : n;
}

}  // namespace

// Two modes for measuring outside Google Benchmark (docs/performance.md):
//   --write-files=DIR                     writes the three files into DIR and keeps them
//   --drain=FORMAT,API,PATH               reads PATH once (FORMAT jsonl|csv|tensorboard,
//                                         API keyed|observation), prints the observations
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--write-files=")) {
      if (!generate(fs::path(arg.substr(14)))) return 1;
      const Files& f = files();
      std::printf("%s\n%s\n%s\n", f.tensorboard.c_str(), f.jsonl.c_str(), f.csv.c_str());
      return 0;
    }
    if (arg.starts_with("--drain=")) {
      const std::string spec(arg.substr(8));
      const auto a = spec.find(','), b = spec.find(',', a + 1);
      if (a == std::string::npos || b == std::string::npos) return 1;
      std::printf("%llu observations\n",
                  static_cast<unsigned long long>(drain_once(spec.substr(0, a), spec.substr(a + 1, b - a - 1),
                                                             spec.substr(b + 1))));
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!generate(fs::temp_directory_path() / ("vigil_trace_bench_" + std::to_string(::getpid())))) {
    std::fprintf(stderr, "trace_bench: could not generate the benchmark files\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  fs::remove_all(fs::path(files().tensorboard).parent_path());
  return vigil::bench::any_mismatch() ? 1 : 0;
}
