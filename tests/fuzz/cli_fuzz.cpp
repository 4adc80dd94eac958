// libFuzzer target for rulecheck's argument and alias layer
// (tools/rulecheck/common.*): `--param KEY=VALUE` and `--alias NEW=OLD`
// values and the series keys of a trace come from scripts and other tools,
// and together decide which trace series a rule reads (one simultaneous
// renaming, never chained; an exact name beats an alias; docs/language.md).
// Input: lines; a line starting with 'p' is a --param value, with 'a' an
// --alias value, anything else a trace series key. Rejected arguments must
// be rejected with a message; accepted ones compile a fixed rule file with
// them, and the keys are replayed (two observations, two modes) through
// rulecheck's Replay: no crash, no sanitizer report, no hang.
//
// Most mutations change trace keys, not arguments, so the compiled program
// is cached per distinct set of --param/--alias values (compilation is
// deterministic; the cache is bounded): the fixed rule file is compiled once
// per argument set instead of once per input, which keeps the target fast
// enough for a campaign of millions of executions.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tools/rulecheck/common.hpp"
#include "vigil/program.hpp"

namespace {

constexpr std::string_view kRules =
    "param k = 1\n"
    "alias loss = train_loss\n"
    "rule r: when loss > k or max(grad_norm) > 2 do log\n"
    "rule s: when val_loss > 0 cooldown 1 samples in eval do log\n"
    "rule t: when count(lr) >= 1 and lr{group=~\"a.*\"} >= 0 do log\n";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> params, aliases, keys;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    std::string line(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (!line.empty() && line[0] == 'p') params.push_back(line.substr(1));
    else if (!line.empty() && line[0] == 'a') aliases.push_back(line.substr(1));
    else keys.push_back(std::move(line));
  }

  std::string messages;  // print_err output: kept off the fuzzer's stderr
  rulecheck::ErrCapture capture(messages);
  vigil::CompileOptions options;
  if (!rulecheck::parse_params(params, options.params) ||
      !rulecheck::parse_aliases(aliases, options.aliases)) {
    if (messages.empty()) std::abort();  // a rejection must say why
    return 0;
  }
  std::string cache_key;
  for (const auto& p : params) cache_key += "p" + p + '\n';
  for (const auto& a : aliases) cache_key += "a" + a + '\n';
  static std::map<std::string, vigil::CompileResult> cache;
  auto it = cache.find(cache_key);
  if (it == cache.end()) {
    if (cache.size() >= 4096) cache.clear();
    it = cache.emplace(cache_key, vigil::compile_string(kRules, "cli.rules", options)).first;
  }
  const vigil::CompileResult& result = it->second;
  (void)result.format_diagnostics();
  if (!result.ok()) {
    if (result.diagnostics.empty()) std::abort();
    return 0;
  }
  rulecheck::Replay replay(*result.program, "fuzz.jsonl");
  for (int round = 0; round < 2; ++round) {
    vigil::Observation obs;
    obs.step = round;
    obs.mode = round == 0 ? "train" : "eval";
    obs.time = 10.0 + round;
    double v = 0.5;
    for (const auto& key : keys) obs.values.emplace_back(key, v += 1.25);
    (void)replay.feed(obs);
  }
  rulecheck::warn_missing_series(*result.program, "fuzz.jsonl", replay.names_seen());
  return 0;
}
