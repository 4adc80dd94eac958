#!/usr/bin/python3
"""Scores rule sets on the labelled fault benchmark (traces/, labels/) and
writes docs/detection.md. Replays every trace with `rulecheck run --format
json` (docs/rulecheck.md: one JSON object per firing), for the recommended set
(examples/recommended.rules), every standard template at its defaults, and
the anchors (anchors/*.rules, each alone and all together).

    /usr/bin/python3 bench/faults/score.py RULECHECK            # rewrite docs/detection.md
    /usr/bin/python3 bench/faults/score.py RULECHECK --check    # the ctest: fails when a target
                                                                # is missed or the page is stale

Only the standard library is needed (json, gzip, subprocess): no torch.
"""

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "detection.md")
NOTES = os.path.join(HERE, "notes.md")


def rule_sets(tmp, rulecheck):
    names = [l.split()[0] for l in subprocess.run([rulecheck, "stdlib"], capture_output=True, text=True,
                                                    check=True).stdout.splitlines() if l.strip()]
    defaults = os.path.join(tmp, "stdlib_defaults.rules")
    with open(defaults, "w") as f:
        f.write("".join(f"use std.{n}()\n" for n in names))
    a = os.path.join(HERE, "anchors")
    anchors = [os.path.join(a, n) for n in ("sagemaker.rules", "lightning.rules", "llm_foundry.rules",
                                             "torchtitan.rules")]
    return [
        ("recommended", "examples/recommended.rules", [os.path.join(ROOT, "examples", "recommended.rules")]),
        ("stdlib defaults", "every standard template at its defaults", [defaults]),
        ("SageMaker", "anchors/sagemaker.rules", [anchors[0]]),
        ("Lightning", "anchors/lightning.rules", [anchors[1]]),
        ("llm-foundry", "anchors/llm_foundry.rules", [anchors[2]]),
        ("TorchTitan", "anchors/torchtitan.rules", [anchors[3]]),
        ("all anchors", "the four anchor files together", anchors),
    ]


def load_runs(tmp):
    runs = []
    trace_dir = os.path.join(tmp, "traces")
    os.makedirs(trace_dir)
    for name in sorted(os.listdir(os.path.join(HERE, "labels"))):
        with open(os.path.join(HERE, "labels", name)) as f:
            label = json.load(f)
        path = os.path.join(trace_dir, label["run"] + ".jsonl")
        with gzip.open(os.path.join(HERE, "traces", label["run"] + ".jsonl.gz")) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        label["path"] = path
        runs.append(label)
    return runs


def replay(rulecheck, rule_files, runs):
    """rule -> firings of every run, by run name."""
    cmd = [rulecheck, "run", *rule_files, "--format", "json", "--jobs", "2", "--trace"]
    cmd += [r["path"] for r in runs]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[:4])}...: exit {p.returncode}\n{p.stderr}")
    by_path = {r["path"]: r["run"] for r in runs}
    firings = {r["run"]: [] for r in runs}
    for line in p.stdout.splitlines():
        f = json.loads(line)
        firings[by_path[f["trace"]]].append(f)
    for fs in firings.values():
        fs.sort(key=lambda f: (f["step"], f["rule"]))
    return firings


def allowed(rule, label):
    return any(k in rule for k in label["allowed"])


def score_run(label, fs):
    """The outcome of one run under one rule set."""
    if label["fault"] == "healthy":
        return {"alarms": fs, "stops": [f for f in fs if {"stop", "rollback"} & set(f["actions"])]}
    onset, symptom = label["onset"], label["symptom"]
    early = [f for f in fs if f["step"] < onset]
    catch = next((f for f in fs if f["step"] >= onset and allowed(f["rule"], label)), None)
    out = {"early": early, "catch": catch, "latency": None}
    if catch is not None:
        out["latency"] = max(0, catch["step"] - symptom)
    return out


def summarise(runs, results):
    faults = [r for r in runs if r["fault"] != "healthy"]
    healthy = [r for r in runs if r["fault"] == "healthy"]
    lat = [results[r["run"]]["latency"] for r in faults if results[r["run"]]["latency"] is not None]
    return {
        "caught": len(lat), "faults": len(faults),
        "median": statistics.median(lat) if lat else None, "max": max(lat) if lat else None,
        "healthy": len(healthy),
        "alarmed": sum(1 for r in healthy if results[r["run"]]["alarms"]),
        "healthy_firings": sum(len(results[r["run"]]["alarms"]) for r in healthy),
        "stopped": sum(1 for r in healthy if results[r["run"]]["stops"]),
        "early": sum(1 for r in faults if results[r["run"]]["early"]),
    }


def fmt_lat(x):
    return "—" if x is None else (f"{x:g}")


def cell(label, res):
    if label["fault"] == "healthy":
        if not res["alarms"]:
            return "quiet"
        rules = sorted({f["rule"] for f in res["alarms"]})
        first = res["alarms"][0]
        more = f" +{len(res['alarms']) - 1}" if len(res["alarms"]) > 1 else ""
        stop = " **stop/rollback**" if res["stops"] else ""
        return f"`{first['rule']}`@{first['step']}{more} ({', '.join(rules)}){stop}".replace("(" + first['rule'] + ")", "")
    s = "missed" if res["catch"] is None else f"`{res['catch']['rule']}`@{res['catch']['step']} (+{res['latency']})"
    if res["early"]:
        s += f"; **{len(res['early'])} before onset** (`{res['early'][0]['rule']}`@{res['early'][0]['step']})"
    return s


def render(runs, sets, all_results):
    out = []
    w = out.append
    w("# Detection quality: the labelled fault benchmark")
    w("")
    w("<!-- Generated by bench/faults/score.py from bench/faults/traces and labels; do not edit.")
    w("     Regenerate: /usr/bin/python3 bench/faults/score.py build/tools/rulecheck/rulecheck")
    w("     The test faults.scoreboard fails when this page is stale or a target is missed. -->")
    w("")
    faults = [r for r in runs if r["fault"] != "healthy"]
    healthy = [r for r in runs if r["fault"] == "healthy"]
    kinds = sorted({r["fault"] for r in faults})
    w(f"{len(runs)} real CPU training runs ([bench/faults/](../bench/faults/README.md)): {len(faults)} with "
      f"an injected fault ({len(kinds)} kinds) and {len(healthy)} healthy ones, replayed with "
      "`rulecheck run --format json`. A fault is **caught** by the first firing, at or after the "
      "fault's onset, of a rule whose kind its label allows; the **latency** is the steps from "
      "the step where the symptom first shows in the trace (0 when the rule fires at or before it). "
      "A firing before the onset is a false alarm; on a healthy run every firing is an alarm.")
    w("")
    w("## Totals")
    w("")
    w("| rule set | faults caught | median latency (steps) | max latency | healthy runs alarmed (firings) | healthy runs with stop/rollback | fault runs alarmed before onset |")
    w("|---|---|---|---|---|---|---|")
    for (name, desc, _), results in zip(sets, all_results):
        s = summarise(runs, results)
        w(f"| {name} ({desc}) | {s['caught']}/{s['faults']} | {fmt_lat(s['median'])} | {fmt_lat(s['max'])} | "
          f"{s['alarmed']}/{s['healthy']} ({s['healthy_firings']}) | {s['stopped']}/{s['healthy']} | "
          f"{s['early']}/{s['faults']} |")
    w("")
    w("## By fault kind")
    w("")
    w("Caught / runs, and the median latency in steps.")
    w("")
    w("| fault | runs | " + " | ".join(n for n, _, _ in sets) + " |")
    w("|---|---|" + "---|" * len(sets))
    for k in kinds:
        rs = [r for r in faults if r["fault"] == k]
        cells = []
        for results in all_results:
            lat = [results[r["run"]]["latency"] for r in rs if results[r["run"]]["latency"] is not None]
            cells.append(f"{len(lat)}/{len(rs)}" + (f" ({statistics.median(lat):g})" if lat else ""))
        w(f"| {k} | {len(rs)} | " + " | ".join(cells) + " |")
    w("")
    w("## Every run")
    w("")
    w("Fault runs: the catching firing `rule`@step (+latency); healthy runs: the first alarm, the "
      "count of further firings and the rules that fired.")
    w("")
    for (name, desc, _), results in zip(sets, all_results):
        w(f"### {name}")
        w("")
        w("| run | fault | onset | symptom | outcome |")
        w("|---|---|---|---|---|")
        for r in runs:
            w(f"| `{r['run']}` | {r['fault']} | {r['onset'] if r['onset'] is not None else '—'} | "
              f"{r['symptom'] if r['symptom'] is not None else '—'} | {cell(r, results[r['run']])} |")
        w("")
    if os.path.exists(NOTES):
        with open(NOTES) as f:
            w(f.read().rstrip("\n"))
    return "\n".join(out) + "\n"


def targets(runs, sets, all_results):
    """The targets of issue 10; returns the failures."""
    fails = []
    rec = all_results[0]
    s = summarise(runs, rec)
    for r in runs:
        res = rec[r["run"]]
        if r["fault"] == "healthy":
            for f in res["alarms"]:
                fails.append(f"recommended: healthy run {r['run']}: {f['rule']} fired at {f['step']}")
        else:
            if res["catch"] is None:
                fails.append(f"recommended: {r['run']} ({r['fault']}) not caught")
            elif res["latency"] > 10:
                fails.append(f"recommended: {r['run']} caught {res['latency']} steps after the symptom (> 10)")
            for f in res["early"]:
                fails.append(f"recommended: {r['run']}: {f['rule']} fired at {f['step']}, before the onset {r['onset']}")
    if s["median"] is not None and s["median"] > 2:
        fails.append(f"recommended: median latency {s['median']} > 2")
    for r in runs:
        if r["fault"] == "healthy":
            for f in all_results[1][r["run"]]["stops"]:
                fails.append(f"stdlib defaults: healthy run {r['run']}: {f['rule']} ({'+'.join(f['actions'])}) at {f['step']}")
    return fails


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rulecheck")
    ap.add_argument("--check", action="store_true", help="compare with docs/detection.md instead of writing it")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vigil-faults-")
    try:
        runs = load_runs(tmp)
        sets = rule_sets(tmp, os.path.abspath(args.rulecheck))
        all_results = []
        for name, _, files in sets:
            firings = replay(args.rulecheck, files, runs)
            all_results.append({r["run"]: score_run(r, firings[r["run"]]) for r in runs})
        page = render(runs, sets, all_results)
        fails = targets(runs, sets, all_results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in fails:
        print("target missed:", f)
    if args.check:
        old = open(DOC).read() if os.path.exists(DOC) else ""
        if old != page:
            print("docs/detection.md is stale: regenerate with "
                  "/usr/bin/python3 bench/faults/score.py build/tools/rulecheck/rulecheck")
            fails.append("stale")
    else:
        with open(DOC, "w") as f:
            f.write(page)
        print(f"wrote {DOC}")
    s = summarise(runs, all_results[0])
    print(f"recommended: {s['caught']}/{s['faults']} caught, median latency {fmt_lat(s['median'])}, "
          f"max {fmt_lat(s['max'])}, {s['alarmed']}/{s['healthy']} healthy runs alarmed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
