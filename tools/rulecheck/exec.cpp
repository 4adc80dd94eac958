// `--exec` commands: posix_spawn of /bin/sh with a pipe for stdin, and a
// bounded wait. The watch loop is single-threaded, so everything here polls
// (10 ms steps) instead of blocking: a command that never reads its stdin or
// never exits must not stop the watch.
//
// Owns: running commands. Must not touch: firings beyond formatting their environment.
#include "tools/rulecheck/exec.hpp"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

extern char** environ;  // NOLINT: POSIX declares it nowhere

namespace rulecheck {
namespace {

using Clock = std::chrono::steady_clock;

// Our environment without the variables `env` sets, then `env`.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const auto eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    bool overridden = false;
    for (const auto& [k, v] : env) overridden = overridden || k == name;
    if (!overridden) out.emplace_back(entry);
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "ended abnormally";
}

// Owns a file descriptor; closes it once.
struct Fd {
  int fd = -1;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

}  // namespace

ExecOutcome run_command(const std::string& command,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        const std::string& input, double timeout_s, bool (*stop_requested)()) {
  ExecOutcome outcome;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    outcome.problem = fmt::format("cannot create a pipe: {}", std::strerror(errno));
    return outcome;
  }
  Fd read_end{fds[0]}, write_end{fds[1]};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, read_end.fd, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);

  // The child gets default handling of the signals watch changes (ignored
  // SIGPIPE would otherwise be inherited), an empty mask, and its own process
  // group so a timeout kills `sh` and whatever it started.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM}) sigaddset(&defaults, sig);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> env_strings = child_environment(env);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string sh = "sh", dash_c = "-c", cmd = command;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawn_error != 0) {
    outcome.problem = fmt::format("cannot run /bin/sh: {}", std::strerror(spawn_error));
    return outcome;
  }
  read_end.reset();

  // Non-blocking writes: a command that does not read its stdin fills the
  // pipe (or exits, EPIPE) without blocking us.
  ::fcntl(write_end.fd, F_SETFL, ::fcntl(write_end.fd, F_GETFL) | O_NONBLOCK);
  std::size_t written = 0;
  if (input.empty()) write_end.reset();

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  bool killed_for_timeout = false;
  std::optional<Clock::time_point> sigterm_sent;
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      outcome.problem = fmt::format("cannot wait for the command: {}", std::strerror(errno));
      return outcome;
    }
    if (write_end.fd >= 0) {
      const ssize_t n = ::write(write_end.fd, input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      // EPIPE: the command closed its stdin; that is its choice, not a failure.
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == input.size())
        write_end.reset();
    }
    const auto now = Clock::now();
    if (now >= deadline && !killed_for_timeout) {
      ::kill(-pid, SIGKILL);
      killed_for_timeout = true;
    }
    if (stop_requested != nullptr && stop_requested() && !killed_for_timeout) {
      if (!sigterm_sent) {
        ::kill(-pid, SIGTERM);
        sigterm_sent = now;
      } else if (now - *sigterm_sent > std::chrono::seconds(1)) {
        ::kill(-pid, SIGKILL);
      }
    }
    // Sleep 10 ms, or less if the pipe becomes writable.
    pollfd p{write_end.fd, POLLOUT, 0};
    ::poll(&p, write_end.fd >= 0 ? 1 : 0, 10);
  }

  if (killed_for_timeout) {
    outcome.problem = fmt::format("timed out after {} s, killed", timeout_s);
    return outcome;
  }
  outcome.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!outcome.ok) outcome.problem = describe_status(status);
  return outcome;
}

}  // namespace rulecheck
