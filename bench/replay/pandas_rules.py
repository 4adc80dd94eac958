"""The ten rules of llmc.rules written by hand in pandas: what a user would
write instead of Vigil. Prints one `rule step` line per firing, in the order
the rules are written (bench/replay/compare.py compares them with Vigil's).

Semantics kept (docs/semantics.md): each series is its own samples (empty
cells are no sample); a rule is evaluated at each sample of its series where
its value is defined (a window of N samples needs N); an undefined
evaluation is skipped (neither fires nor re-arms); it fires when the
condition holds and the previous evaluation did not (edge-triggered).
"""
import sys

import numpy as np
import pandas as pd


def edges(cond, defined, steps):
    """Steps where cond turns true among the defined evaluations."""
    c = cond[defined]
    prev = c.shift(1, fill_value=False)
    fired = c & ~prev
    return steps[defined][fired].tolist()


def zscore(x, n):
    """(latest - mean) / std of the previous n - 1 samples (population std);
    0 when the difference is 0, +-inf when the std is 0."""
    prior = x.shift(1).rolling(n - 1)
    diff = x - prior.mean()
    sd = prior.std(ddof=0)
    z = diff / sd
    z[diff == 0] = 0.0
    return z


def main(path):
    df = pd.read_csv(path)
    out = []

    def series(name):
        s = df[["step", name]].dropna()
        return s["step"].reset_index(drop=True), s[name].reset_index(drop=True)

    st, loss = series("train_loss")
    med = loss.rolling(100).median()
    out += [("loss_spike", s) for s in edges(loss > 1.1 * med, med.notna(), st)]

    sg, grad = series("grad_norm")
    z = zscore(grad, 200)
    out += [("grad_zscore", s) for s in edges(z > 6, z.notna() | (np.arange(len(grad)) >= 199), sg)]

    steps_f = st.astype(float)
    slope = loss.rolling(500).cov(steps_f) / steps_f.rolling(500).var()
    out += [("loss_trend_up", s) for s in edges(slope > -0.00002, slope.notna(), st)]

    sv, val = series("val_loss")
    first = val.shift(2)
    rel = (val - first) / first.abs()
    out += [("val_rel_change", s) for s in edges(rel > -0.01, first.notna(), sv)]

    ew = loss.ewm(alpha=0.05, adjust=False).mean()
    mn = loss.rolling(1000).min()
    out += [("ewma_vs_min", s) for s in edges(ew > 1.05 * mn, mn.notna(), st)]

    sl, lr = series("lr")
    after = sl >= 1000
    out += [("lr_zero", s) for s in edges(lr == 0, after, sl)]

    vmin = val.rolling(10).min()
    out += [("val_vs_min", s) for s in edges(val > 0.995 * vmin, vmin.notna(), sv)]

    gmax = grad.rolling(50).max()
    out += [("grad_max", s) for s in edges(gmax > 1.0, gmax.notna(), sg)]

    zl = zscore(loss, 100)
    out += [("loss_zscore", s) for s in edges(zl > 5, np.arange(len(loss)) >= 99, st)]

    short, long = grad.rolling(100).mean(), grad.rolling(1000).mean()
    out += [("grad_mean_ratio", s) for s in edges(short > 1.2 * long, long.notna(), sg)]

    sys.stdout.write("".join(f"{r} {int(s)}\n" for r, s in out))


if __name__ == "__main__":
    main(sys.argv[1])
