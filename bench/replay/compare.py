"""Replay vs pandas (issue 14 goal 2): the ten rules of llmc.rules over the
llm.c GPT-2 124M log, run as `rulecheck run` and as the same rules written
in pandas (pandas_rules.py), each as a whole process. Checks that both fire
at the same (rule, step) pairs, then times each process REPEAT times and
prints the medians of wall and CPU (user + sys) time and their ratios.

    /usr/bin/python3 bench/replay/compare.py build/tools/rulecheck/rulecheck [REPEAT]

Exit status 1 when the firings differ (the ratio would compare unequal work).
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRACE = os.path.join(ROOT, "tests", "csvhf", "data", "logs", "llmc_gpt2_124m_baseline.csv")
RULES = os.path.join(HERE, "llmc.rules")
PANDAS = os.path.join(HERE, "pandas_rules.py")
PYTHON = "/usr/bin/python3"  # the interpreter with pandas


def timed(cmd):
    """Runs cmd; returns (stdout, wall seconds, child CPU seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.decode(), wall, cpu


def main():
    rulecheck = sys.argv[1]
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    vigil_cmd = [rulecheck, "run", RULES, "--trace", TRACE, "--format", "json", "--jobs", "1"]
    pandas_cmd = [PYTHON, PANDAS, TRACE]

    out, _, _ = timed(vigil_cmd)
    vigil = sorted((f["rule"], f["step"]) for f in map(json.loads, out.splitlines()) if f)
    out, _, _ = timed(pandas_cmd)
    pandas = sorted((r, int(s)) for r, s in (line.split() for line in out.splitlines()))
    if vigil != pandas:
        only_v = sorted(set(vigil) - set(pandas))[:10]
        only_p = sorted(set(pandas) - set(vigil))[:10]
        print(f"firings differ: vigil {len(vigil)}, pandas {len(pandas)}; "
              f"only vigil {only_v}; only pandas {only_p}")
        return 1
    per_rule = {}
    for r, _ in vigil:
        per_rule[r] = per_rule.get(r, 0) + 1
    print(f"identical firings: {len(vigil)} ({', '.join(f'{r} {n}' for r, n in sorted(per_rule.items()))})")

    runs = {"vigil": [], "pandas": []}
    for _ in range(repeat):
        for name, cmd in (("vigil", vigil_cmd), ("pandas", pandas_cmd)):
            _, wall, cpu = timed(cmd)
            runs[name].append((wall, cpu))
    med = {n: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
           for n, r in runs.items()}
    for n, (w, c) in med.items():
        print(f"{n:7s} median of {repeat}: wall {w * 1000:8.1f} ms  cpu {c * 1000:8.1f} ms")
    print(f"pandas / vigil: wall {med['pandas'][0] / med['vigil'][0]:.1f}x  "
          f"cpu {med['pandas'][1] / med['vigil'][1]:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
