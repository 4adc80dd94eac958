#!/usr/bin/python3
"""Independent reference for what examples/demo.rules should fire on demo.jsonl.

This is a hand translation of the rules in demo.rules into Python, evaluated
with the rule semantics of docs/semantics.md (freshness, range warm-up,
`in`, `after`, `every`, `for`, edge triggering, `cooldown`). It shares no code
with the engine, so agreement between the two is evidence for both. It prints
one JSON object per firing, in the field layout of `rulecheck run --format
json` (without "time": the demo trace has none, and without "trace").

    /usr/bin/python3 examples/demo_expected.py [TRACE] [--param spike_k=V]

Standard library only. If you change demo.rules, change the RULES table below.
"""

import json
import math
import sys

RULES_FILE = "examples/demo.rules"


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def mean(xs):
    return math.fsum(xs) / len(xs)


def slope(points):
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = mean(xs), mean(ys)
    den = math.fsum((x - mx) ** 2 for x in xs)
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


class Series:
    """History of one series: (step, mode, value) per sample."""

    def __init__(self):
        self.samples = []

    def last(self, n):
        return [v for _, _, v in self.samples[-n:]] if len(self.samples) >= n else None

    def last_evals(self, n):
        vs = [v for _, m, v in self.samples if m == "eval"][-n:]
        return vs if len(vs) >= n else None

    def steps_window(self, cur, n, minimum=1):
        pts = [(s, v) for s, _, v in self.samples if cur - n < s <= cur]
        return pts if len(pts) >= minimum else None

    def latest(self):
        return self.samples[-1][2] if self.samples else None


def anonymous_rule_names():
    """`FILE:LINE` of each anonymous one-liner (a line starting with `when`)."""
    with open(RULES_FILE) as f:
        return [f"{RULES_FILE}:{n}" for n, line in enumerate(f, start=1)
                if line.startswith("when ")]


def rules(spike_k):
    """Each rule: name, reads, severity, actions, mode, after, every, for,
    cooldown, and cond(db, step) -> None (undefined) or (bool, lhs value)."""

    def gn_typical(db):
        w = db["grad_norm"].last(200)
        return None if w is None else median(w)

    def grad_norm_spike(db, step):
        t = gn_typical(db)
        g = db["grad_norm"].latest()
        return None if t is None or g is None else (g > spike_k * t, g)

    def grad_elevated(db, step):
        t = gn_typical(db)
        g = db["grad_norm"].latest()
        return None if t is None or g is None else (g > 1.15 * t, g)

    def train_loss_spike(db, step):
        w = db["train_loss"].last(200)
        x = db["train_loss"].latest()
        return None if w is None else (x > 1.08 * median(w), x)

    def val_progress_slow(db, step):
        w = db["val_loss"].last_evals(5)
        if w is None:
            return None
        rc = (w[-1] - w[0]) / abs(w[0])
        return (rc > -0.0082, rc)

    def overfit(db, step):
        v = db["val_loss"].latest()
        w = db["train_loss"].steps_window(step, 250)
        if v is None or w is None:
            return None
        return (v > 1.02 * mean([y for _, y in w]), v)

    def loss_trend_up(db, step):
        w = db["train_loss"].steps_window(step, 1000, minimum=2)
        if w is None:
            return None
        s = slope(w)
        return (s > 0, s)

    def non_finite(db, step):
        a, b = db["train_loss"].latest(), db["grad_norm"].latest()
        if a is None or b is None:
            return None
        # `not is_finite(a) or not is_finite(b)`: no comparison, so no value.
        return (not math.isfinite(a) or not math.isfinite(b), None)

    def rule(name, reads, cond, severity="warning", actions=(), mode=None, after=None,
             every=None, for_=None, cooldown=None):
        return dict(name=name, reads=reads, cond=cond, severity=severity, actions=list(actions),
                    mode=mode, after=after, every=every, for_=for_, cooldown=cooldown)

    elevated_name, non_finite_name = anonymous_rule_names()
    return [
        rule("grad_norm_spike", {"grad_norm"}, grad_norm_spike, "error",
             ["skip_step", "alert"]),
        rule(elevated_name, {"grad_norm"}, grad_elevated, actions=["pause_and_snapshot"],
             for_=("samples", 3)),
        rule("train_loss_spike", {"train_loss"}, train_loss_spike, actions=["alert"]),
        rule("val_progress_slow", {"val_loss"}, val_progress_slow, "info", ["log"],
             mode="eval", cooldown=("evals", 2)),
        rule("overfit", {"val_loss", "train_loss"}, overfit, actions=["alert"], mode="eval"),
        rule("loss_trend_up", {"train_loss"}, loss_trend_up, "critical",
             ["checkpoint", "stop"], after=("samples", 1000), every=("steps", 100)),
        rule(non_finite_name, {"train_loss", "grad_norm"}, non_finite,
             actions=["skip_step"]),
    ]


def run(trace, spike_k):
    db = {}
    state = {}
    table = rules(spike_k)
    for r in table:
        db.update({name: Series() for name in r["reads"]})
        state[r["name"]] = dict(opportunities=0, last_eval_step=None, run=0, first=None,
                                fired=False, ever_fired=False, last_fire_step=None, evals_since_fire=0)
    firings = []
    with open(trace) as f:
        for line in f:
            obs = json.loads(line)
            step, mode = obs["step"], obs.get("mode", "train")
            fresh = set()
            for name, v in obs["values"].items():
                v = float(v)  # "NaN"/"Infinity" strings become floats
                db.setdefault(name, Series()).samples.append((step, mode, v))
                fresh.add(name)
            for r in table:
                st = state[r["name"]]
                if r["mode"] and r["mode"] != mode:
                    continue
                if not (r["reads"] & fresh):
                    continue
                result = r["cond"](db, step)
                if result is None:
                    continue
                # An opportunity. `after N samples` skips the first N.
                st["opportunities"] += 1
                if r["after"] and st["opportunities"] <= r["after"][1]:
                    continue
                if r["every"]:
                    if st["last_eval_step"] is not None and step < st["last_eval_step"] + r["every"][1]:
                        continue
                    st["last_eval_step"] = step
                holds, value = result
                st["evals_since_fire"] += 1
                if not holds:
                    st.update(run=0, fired=False)
                    continue
                st["run"] += 1
                if st["run"] == 1:
                    st["first"] = step
                if r["for_"] and st["run"] < r["for_"][1]:
                    continue
                # Edge-triggered; a cooldown also holds across runs (SPEC §2): nothing
                # fires within it after the last firing, re-fire or new run alike.
                if r["cooldown"] and st["ever_fired"]:
                    if st["evals_since_fire"] < r["cooldown"][1]:
                        continue
                elif st["fired"]:
                    continue
                st.update(fired=True, ever_fired=True, evals_since_fire=0)
                firings.append({"rule": r["name"], "step": step, "mode": mode,
                                "severity": r["severity"], "labels": {}, "value": value,
                                "actions": r["actions"], "pending_since": st["first"]})
    return firings


def main(argv):
    trace = "examples/traces/demo.jsonl"
    spike_k = 2.5
    for a in argv:
        if a == "--param":
            continue
        if a.startswith("spike_k="):
            spike_k = float(a.split("=", 1)[1])
        else:
            trace = a
    firings = run(trace, spike_k)
    for f in firings:
        print(json.dumps(f))
    return 1 if firings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
