// Many runs at once: `--trace DIR` over a directory of runs (a sweep), and the
// worker pool that evaluates runs in parallel while the caller consumes the
// results in input order (so output never depends on scheduling).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace rulecheck {

/// One run to evaluate: the trace to open (a file, or a TensorBoard
/// directory), or an error found while expanding a runs directory.
struct RunInput {
  std::string trace;
  std::string error;  // non-empty: this run cannot be read (message without the path)
};

/// Expands `--trace` arguments into runs, keeping their order. An argument is
/// one run unless it is a *runs directory*: a directory with no TensorBoard
/// event file directly inside it that holds at least one run. Its runs are its
/// entries, sorted by name, hidden ones (`.x`) skipped:
///  - a file whose trace format is recognised (other files, e.g. README, are skipped);
///  - a subdirectory: itself when TensorBoard event files lie anywhere below it,
///    else the one recognised trace file directly inside it (trace.jsonl,
///    metrics.csv, trainer_state.json, ...). Several: an error for that run.
///    None: a warning, and the subdirectory is skipped.
/// A directory holding event files directly is one TensorBoard run, as before.
/// `dirs_expanded` is set when some argument was a runs directory.
std::vector<RunInput> expand_runs(const std::vector<std::string>& args, bool& dirs_expanded);

/// Worker threads for `n` runs: `jobs` if positive, else the hardware's cores,
/// never more than n.
unsigned worker_count(std::size_t n, unsigned jobs);

/// Calls work(i) for i in [0, n) on `workers` threads, and done(i) on the
/// calling thread for i = 0, 1, ... in order, each as soon as work(0..i) have
/// finished. work must not throw (it reports errors in its result).
void ordered_parallel(std::size_t n, unsigned workers, const std::function<void(std::size_t)>& work,
                      const std::function<void(std::size_t)>& done);

}  // namespace rulecheck
