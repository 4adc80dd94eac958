// The cost of running some code, measured on a forked child: its peak
// resident memory and CPU time from wait4's rusage. Cost-bound tests
// (issue 11 §3) run the work in a child so that the parent's own memory and
// earlier tests do not count, and check a bound ~10x above the expected
// cost, so the bound holds on a loaded machine and under sanitizers while
// still catching quadratic or exponential behaviour.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

namespace vigil::test {

struct ChildCost {
  long max_rss_kib = 0;    // peak resident memory of the child
  double cpu_seconds = 0;  // user + system time of the child
  int exit_code = -1;      // 128 + signal if killed
};

/// This process's peak resident memory so far: a forked child starts with
/// it, so bounds on a child's memory are relative to it.
inline long own_max_rss_kib() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/// Runs `body` in a forked child and returns its cost; body's return value
/// is the child's exit code (0: the child's own checks passed). The child
/// exits with _exit: no atexit handlers or gtest reporting run twice.
template <class Body>
ChildCost in_child(Body body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  ChildCost cost;
  int status = 0;
  rusage ru{};
  if (pid < 0 || ::wait4(pid, &status, 0, &ru) != pid) return cost;
  cost.max_rss_kib = ru.ru_maxrss;
  cost.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  cost.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return cost;
}

}  // namespace vigil::test
