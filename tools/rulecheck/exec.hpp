// Running a user's shell command for a firing (`rulecheck watch --exec`).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace rulecheck {

/// How a command ended, for the warning watch prints.
struct ExecOutcome {
  bool ok = false;       // exited with status 0
  std::string problem;   // otherwise: "exited with status 3", "timed out after 30 s, killed", ...
};

/// Runs `command` with `/bin/sh -c`, its environment being ours plus `env`
/// (which overrides variables of the same name), `input` written to its
/// stdin, its stdout sent to our stderr (so rulecheck's stdout stays
/// firings only). Waits for it at most `timeout_s` seconds, then kills its
/// process group. Never throws and never lets the command's failure (or a
/// command that does not read its stdin) affect the caller beyond the
/// returned outcome.
///
/// `stop_requested`, if given, is polled while waiting: once it is true the
/// command is asked to stop (SIGTERM, then SIGKILL a second later), so an
/// interrupted watch does not hang on a slow command.
///
///   ExecOutcome r = run_command("notify-send \"$VIGIL_RULE\"", {{"VIGIL_RULE", "nan_loss"}},
///                               "{...}\n", 30);
ExecOutcome run_command(const std::string& command,
                        const std::vector<std::pair<std::string, std::string>>& env,
                        const std::string& input, double timeout_s,
                        bool (*stop_requested)() = nullptr);

}  // namespace rulecheck
