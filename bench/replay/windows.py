"""Long windows as the issue measured them (issue 14 goal 1): one rule with a
window of 10,000 samples (steps, seconds) over a 100,000-step JSONL trace,
each run as a whole `rulecheck run` process, against a plain threshold rule
over the same trace. The trace is the one BM_WindowTrace replays in-process
(bench/engine_bench.cpp): a noisy decaying loss with ties and a rare spike,
one observation per step and per second.

    /usr/bin/python3 bench/replay/windows.py build/tools/rulecheck/rulecheck [ROUNDS]

Runs every case once per round, the cases in a fresh random order each
round (a burst of load then spreads over cases), and prints per case the
median and the minimum CPU time (user + sys) over the rounds and their ratios
to the threshold rule's. Exit status 1 when a case's firings are not those of
its first run (a rule that fires differently would compare unequal work).
"""
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile

CASES = {
    "threshold": "loss > 100",
    "delta": "delta(loss[10000]) > 100",
    "rel_change": "rel_change(loss[10000]) > 100",
    "changes": "changes(loss[10000]) > 20000",
    "max": "max(loss[10000]) > 100",
    "min": "min(loss[10000]) < -100",
    "sum": "sum(loss[10000]) > 1e9",
    "mean": "mean(loss[10000]) > 100",
    "count_over_condition": "count((loss > 3)[10000]) > 9999",
    "var": "var(loss[10000]) > 100",
    "std": "std(loss[10000]) > 100",
    "slope": "slope(loss[10000]) > 1",
    "zscore": "zscore(loss[10000]) > 1e6",
    "quantile": "quantile(loss[10000], 0.95) > 100",
    "iqr_outlier": "iqr_outlier(loss[10000], 30)",
    "median": "median(loss[10000]) > 100",
    "mean_steps": "mean(loss[10000 steps]) > 100",
    "max_seconds": "max(loss[10000s]) > 100",
    "median_seconds": "median(loss[10000s]) > 100",
}


def write_trace(path):
    rng = random.Random(14)
    with open(path, "w") as f:
        for i in range(100000):
            x = 2.0 + 3.0 * math.exp(-i / 20000.0) + rng.gauss(0, 0.05)
            if i % 7 == 0:
                x = round(x * 10) / 10  # ties
            if i % 33331 == 0:
                x += 50  # a spike
            f.write('{"step": %d, "time": %d, "values": {"loss": %r}}\n' % (i, 1000 + i, x))


def run(cmd):
    """Runs cmd; returns (stdout, child CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    rulecheck = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    with tempfile.TemporaryDirectory(prefix="vigil_windows_") as d:
        trace = os.path.join(d, "trace.jsonl")
        write_trace(trace)
        cmds = {}
        for name, when in CASES.items():
            rules = os.path.join(d, name + ".rules")
            with open(rules, "w") as f:
                f.write("rule r: when %s do log\n" % when)
            cmds[name] = [rulecheck, "run", rules, "--trace", trace, "--format", "json", "--jobs", "1"]
        first = {name: run(cmd)[0] for name, cmd in cmds.items()}  # warm the page cache too
        times = {name: [] for name in cmds}
        for _ in range(rounds):
            order = list(cmds)
            random.shuffle(order)
            for name in order:
                out, cpu = run(cmds[name])
                if out != first[name]:
                    print(f"{name}: firings differ between runs", file=sys.stderr)
                    return 1
                times[name].append(cpu * 1000)
    base_med = statistics.median(times["threshold"])
    base_min = min(times["threshold"])
    print(f"{'case':22s} {'median ms':>9s} {'ratio':>6s} {'min ms':>7s} {'ratio':>6s}")
    for name, t in times.items():
        med, low = statistics.median(t), min(t)
        print(f"{name:22s} {med:9.1f} {med / base_med:6.2f} {low:7.1f} {low / base_min:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
