#!/usr/bin/python3
"""Generates the labelled fault benchmark: small models really trained with
Debian's python3-torch on small real datasets (python3-sklearn's digits, wine,
breast cancer and diabetes; the GPL-3 text of /usr/share/common-licenses for a
char-level GRU/LSTM), each run watched by Vigil's Python Monitor and recorded
as a Vigil JSONL trace (traces/RUN.jsonl.gz), with a label file per run
(labels/RUN.json: fault kind, onset step, symptom step, the rule kinds that
may fire). See README.md.

    PYTHONPATH=build/python nice -n 19 /usr/bin/python3 bench/faults/generate.py [--only RUN...]

Deterministic: every run seeds torch, numpy and random, uses one thread, and
its step times come from a simulated clock (the Monitor's clock is replaced),
so a slow loader (step time x50) or a stalled one is recorded without
sleeping, and healthy runs have a realistic, seeded jitter instead of the
machine's load.
"""

import argparse
import gzip
import json
import math
import os
import random
import sys
import time as real_time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn import datasets

import vigil
import vigil.torch as vt

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 250
EVAL_EVERY = 10
TEXT = "/usr/share/common-licenses/GPL-3"


# -- the simulated clock -------------------------------------------------

class Clock:
    """Stands in for the `time` module inside vigil.torch: the Monitor
    measures step_time as the difference of monotonic() between two
    after_backward calls, and stamps observations with time()."""

    def __init__(self):
        self.t = 0.0

    def monotonic(self):
        return self.t

    def time(self):
        return 1.7e9 + self.t


# -- data ----------------------------------------------------------------

def tabular(name, rng, n_train=None):
    loader = {"digits": datasets.load_digits, "wine": datasets.load_wine,
              "breast_cancer": datasets.load_breast_cancer,
              "diabetes": datasets.load_diabetes}[name]
    d = loader()
    x = d.data.astype(np.float32)
    y = d.target
    idx = rng.permutation(len(x))
    x, y = x[idx], y[idx]
    n_val = len(x) // 5
    xv, yv, xt, yt = x[:n_val], y[:n_val], x[n_val:], y[n_val:]
    if n_train:
        xt, yt = xt[:n_train], yt[:n_train]
    mu, sd = xt.mean(0), xt.std(0)
    # Pixels that are constant in the training split (the digits' corners) are
    # left unscaled: dividing by their ~0 deviation makes a validation pixel 1e6.
    sd[sd < 0.1] = 1.0
    xt, xv = (xt - mu) / sd, (xv - mu) / sd
    regression = name == "diabetes"
    if regression:
        ym, ys = yt.mean(), yt.std()
        yt, yv = ((yt - ym) / ys).astype(np.float32), ((yv - ym) / ys).astype(np.float32)
        n_out = 1
    else:
        yt, yv = yt.astype(np.int64), yv.astype(np.int64)
        n_out = int(y.max()) + 1
    return (torch.tensor(xt), torch.tensor(yt), torch.tensor(xv), torch.tensor(yv),
            x.shape[1], n_out, regression)


def text_data():
    with open(TEXT, encoding="utf-8") as f:
        s = f.read()
    chars = sorted(set(s))
    ids = torch.tensor([chars.index(c) for c in s], dtype=torch.int64)
    n_val = len(ids) // 10
    return ids[n_val:], ids[:n_val], len(chars)


# -- models ----------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, n_in, n_out, width, depth, act, init_std=None, bias_init=None):
        super().__init__()
        self.act = act
        dims = [n_in] + [width] * depth
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.acts = nn.ModuleList({"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[act]()
                                  for _ in range(depth))
        self.out = nn.Linear(width, n_out)
        for fc in self.fcs:
            if init_std is not None:
                nn.init.normal_(fc.weight, 0, init_std)
            if bias_init is not None:
                nn.init.constant_(fc.bias, bias_init)

    def forward(self, x):
        for fc, act in zip(self.fcs, self.acts):
            x = act(fc(x))
        return self.out(x)

    def watched(self):
        n = len(self.acts)
        picks = sorted({0, n // 2, n - 1})
        # Named after the activation function, as SageMaker's DeadRelu finds
        # its layers (tensor_regex ".*relu_output"): relu0, sigmoid3, ...
        return [(f"{self.act}{i}", self.acts[i]) for i in picks]

    def hidden_weights(self):
        return [fc.weight for fc in self.fcs]


class CNN(nn.Module):
    """For the 8x8 digits."""

    def __init__(self, n_out, act="relu", init_std=None, bias_init=None, depth=2):
        super().__init__()
        self.act = act
        chans = [1] + [8] + [16] * (depth - 1)
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(chans, chans[1:]))
        self.acts = nn.ModuleList({"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[act]()
                                  for _ in range(depth))
        self.fc = nn.Linear(chans[-1] * 16, n_out)
        for c in self.convs:
            if init_std is not None:
                nn.init.normal_(c.weight, 0, init_std)
            if bias_init is not None:
                nn.init.constant_(c.bias, bias_init)

    def forward(self, x):
        x = x.view(-1, 1, 8, 8)
        for c, a in zip(self.convs, self.acts):
            x = a(c(x))
        x = F.max_pool2d(x, 2)
        return self.fc(x.flatten(1))

    def watched(self):
        return [(f"{self.act}{i}", a) for i, a in enumerate(self.acts)]

    def hidden_weights(self):
        return [c.weight for c in self.convs]


class CharRNN(nn.Module):
    def __init__(self, vocab, cell, hidden=64):
        super().__init__()
        self.cell = cell
        self.emb = nn.Embedding(vocab, 16)
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell](16, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)
        self.monitor = None

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        if self.monitor is not None and self.training:
            self.monitor.activation(self.cell, h)
        return self.out(h)

    def watched(self):
        return []

    def hidden_weights(self):
        return [self.rnn.weight_hh_l0]


# -- one run ---------------------------------------------------------------

def schedule_lr(kind, base, step, steps):
    if kind == "constant":
        return base
    if kind == "step":
        return base * (0.1 ** (step // 100))
    if kind == "cosine":
        warm = steps // 10
        if step < warm:
            return base * (step + 1) / warm
        p = (step - warm) / max(1, steps - warm)
        return base * 0.5 * (1 + math.cos(math.pi * p))
    raise ValueError(kind)


def make_optimizer(name, params, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    raise ValueError(name)


def run(spec, out_dir):
    """Trains one run and returns (trace lines, per-step facts for the label)."""
    seed = spec["seed"]
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    rng = np.random.RandomState(seed)
    fault = spec.get("fault", "healthy")
    onset = spec.get("onset", 1)
    arch = spec["arch"]

    if arch in ("gru", "lstm"):
        train_ids, val_ids, vocab = text_data()
        model = CharRNN(vocab, arch)
        seq, batch = 32, 32

        def get_batch(step, split=False):
            src = val_ids if split else train_ids
            g = torch.Generator().manual_seed(seed * 100003 + step * (2 if split else 1))
            starts = torch.randint(0, len(src) - seq - 1, (batch,), generator=g)
            x = torch.stack([src[s:s + seq] for s in starts])
            y = torch.stack([src[s + 1:s + seq + 1] for s in starts])
            return x, y

        def loss_fn(out, y):
            return F.cross_entropy(out.reshape(-1, vocab), y.reshape(-1))

        def val_loss():
            model.eval()
            with torch.no_grad():
                x, y = get_batch(0, split=True)
                v = loss_fn(model(x), y).item()
            model.train()
            return v
        base_time = 0.031
        n_classes = vocab
    else:
        xt, yt, xv, yv, n_in, n_out, regression = tabular(spec["data"], rng, spec.get("n_train"))
        if arch == "cnn":
            model = CNN(n_out, spec.get("act", "relu"), spec.get("init_std"), spec.get("bias_init"),
                        spec.get("depth", 2))
            base_time = 0.012
        else:
            model = MLP(n_in, n_out, spec.get("width", 64), spec.get("depth", 2),
                        spec.get("act", "relu"), spec.get("init_std"), spec.get("bias_init"))
            base_time = 0.002 * spec.get("depth", 2) + 0.002
        batch = spec.get("batch", 32)
        labels_t = yt.clone()

        def get_batch(step, split=False):
            g = torch.Generator().manual_seed(seed * 100003 + step)
            idx = torch.randint(0, len(xt), (min(batch, len(xt)),), generator=g)
            return xt[idx], labels_t[idx]

        def loss_fn(out, y):
            if regression:
                return F.mse_loss(out.squeeze(-1), y)
            return F.cross_entropy(out, y)

        def val_loss():
            model.eval()
            with torch.no_grad():
                v = loss_fn(model(xv), yv).item()
            model.train()
            return v
        n_classes = n_out

    base_lr = spec["lr"]
    opt = make_optimizer(spec["opt"], model.parameters(), base_lr)
    clock = Clock()
    vt.time = clock  # the Monitor's step_time and observation times come from the clock
    mon = vt.Monitor(model, opt, rules=os.path.join(HERE, "record.rules"), watch_weights=False)
    if isinstance(model, CharRNN):
        model.monitor = mon
    for name, module in model.watched():
        mon.activation(name, module)
    lines = []

    def recorder(obs):
        lines.append(compact(obs))
    mon.record(recorder)

    facts = {"loss": {}, "grad_norm": {}, "frac_zero": {}, "lr": {}, "val_loss": {}, "step_time": {}}
    for step in range(1, STEPS + 1):
        lr = schedule_lr(spec.get("schedule", "constant"), base_lr, step, STEPS)
        if fault == "lr_spike" and onset <= step < onset + spec.get("spike_steps", 3):
            lr *= spec["factor"]
        if fault in ("high_lr", "lr_burst_dead_relu") and step >= onset:
            lr *= spec["factor"] if fault == "high_lr" or step < onset + 3 else 1
        if fault == "lr_collapse" and step >= onset:
            lr *= 1e-7
        for g in opt.param_groups:
            g["lr"] = lr
        if fault == "exploding" and step == onset:
            with torch.no_grad():
                for w in model.hidden_weights():
                    w.mul_(spec["factor"])
        if fault == "label_noise" and step == onset:
            g = torch.Generator().manual_seed(seed)
            flip = torch.rand(len(labels_t), generator=g) < spec.get("noise", 0.8)
            labels_t[flip] = torch.randint(0, n_classes, (int(flip.sum()),), generator=g)

        x, y = get_batch(step)
        if fault == "nan_batch" and step == onset:
            x = x.float() if x.dtype != torch.int64 else x
            if x.dtype == torch.int64:
                # A char batch has no float input: the NaN comes in through the
                # embedding, as a corrupted embedding row would.
                with torch.no_grad():
                    model.emb.weight[x[0, 0]] = float(spec.get("value", "nan"))
            else:
                x = x.clone()
                x[0, 0] = float(spec.get("value", "nan"))

        # The simulated step time: the compute time of this model with a
        # seeded log-normal jitter (sigma 0.1) and rare 1.5x blips.
        dt = base_time * math.exp(rng.normal(0, 0.1)) * (1.5 if rng.rand() < 0.02 else 1.0)
        if fault == "throughput_drop" and step >= onset:
            dt *= 50
        if fault == "stall" and step == onset:
            dt += spec.get("stall_s", 2400)
        clock.t += dt

        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        mon.after_backward(step, loss)
        opt.step()
        mon.after_step(step)
        if step % EVAL_EVERY == 0:
            v = val_loss()
            mon.engine.observe(step, {"val_loss": v}, mode="eval", time=clock.time())
    mon.record(None)
    return lines


def compact(obs):
    """The recorder's observation with tensor stats rounded to 4 significant
    digits and scalars to 6 (the traces stay small; the rules read the rounded
    values; scalars keep enough digits that a slowly improving validation loss
    does not round to ties, which patience-based rules count as no improvement)."""
    o = dict(obs)
    vals = {}
    for k, v in o.get("values", {}).items():
        if isinstance(v, float) and math.isfinite(v) and v != 0:
            v = float(f"{v:.4g}") if "{" in k else float(f"{v:.6g}")
        vals[k] = v
    o["values"] = vals
    if o.get("time") is not None:
        o["time"] = round(o["time"], 3)
    return vigil.to_jsonl(o)


# -- the oracle: where each fault's symptom first shows in the recorded data --

def read_trace(lines):
    train, evals = [], []
    for line in lines:
        o = json.loads(line)
        (evals if o.get("mode") == "eval" else train).append(o)
    return train, evals


def num(v):
    if isinstance(v, str):
        return float(v)
    return float("nan") if v is None else float(v)


def symptom_step(spec, lines):
    fault, onset = spec.get("fault", "healthy"), spec.get("onset", 1)
    if fault == "healthy":
        return None
    train, evals = read_trace(lines)

    def series(o, prefix):
        return [num(v) for k, v in o["values"].items() if k == prefix or k.startswith(prefix + "{")]
    pre = [o for o in train if onset - 20 <= o["step"] < onset]
    pre_loss = float(np.median([num(o["values"]["loss"]) for o in pre])) if pre else None
    pre_gn = float(np.median([max(series(o, "grad_norm")) for o in pre])) if pre else None
    for o in train if fault != "overfit" else evals:
        s = o["step"]
        if s < onset:
            continue
        if fault in ("throughput_drop", "stall", "lr_collapse"):
            return s  # visible at once in step_time / lr
        if fault == "vanishing":
            return s  # present from the first step
        loss = num(o["values"].get("loss", 0))
        gn = series(o, "grad_norm")
        if fault == "nan_batch":
            if not math.isfinite(loss) or not all(math.isfinite(g) for g in gn):
                return s
            continue
        if fault in ("dead_relu", "lr_burst_dead_relu"):
            if any(f >= 0.99 for f in series(o, "activation_frac_zero")):
                return s
            continue
        if fault == "overfit":
            vals = [num(e["values"]["val_loss"]) for e in evals if e["step"] <= s]
            if len(vals) >= 2 and vals[-1] > 1.1 * min(vals):
                return s
            continue
        # A loss or gradient symptom: non-finite, the loss 1.5x its level
        # before the onset, or some layer's gradient norm 5x its level.
        if not math.isfinite(loss) or any(not math.isfinite(g) for g in gn):
            return s
        if pre_loss is not None and loss > 1.5 * pre_loss:
            return s
        if pre_gn is not None and gn and max(gn) > 5 * pre_gn:
            return s
    return None


# -- the catalogue -----------------------------------------------------------

# Rule kinds a firing may come from for each fault (firings of other rules
# after the onset are reported but neither catch nor count against it).
ALLOWED = {
    "nan_batch": ["nan", "non_finite", "divergence", "spike", "exploding"],
    "lr_spike": ["spike", "divergence", "nan", "non_finite", "exploding", "loss", "update"],
    "high_lr": ["spike", "divergence", "nan", "non_finite", "exploding", "loss", "update"],
    "exploding": ["spike", "divergence", "nan", "non_finite", "exploding", "loss", "update"],
    "vanishing": ["vanishing", "poor_weight", "loss_not_decreasing", "plateau"],
    "dead_relu": ["dead_relu", "all_zero", "vanishing", "plateau", "loss_not_decreasing"],
    "lr_burst_dead_relu": ["dead_relu", "all_zero", "vanishing", "spike", "divergence", "plateau",
                           "loss", "nan", "non_finite"],
    "lr_collapse": ["lr_collapse", "plateau", "loss_not_decreasing", "unchanged"],
    "overfit": ["overfit", "val_loss", "overtraining", "plateau", "early_stopping"],
    "label_noise": ["spike", "divergence", "loss", "val_loss", "overfit", "overtraining", "plateau",
                    "early_stopping"],
    "throughput_drop": ["throughput", "step", "stall"],
    "stall": ["stall", "throughput", "step"],
}


def catalogue():
    runs = []

    def add(name, **spec):
        spec["name"] = name
        runs.append(spec)

    # Healthy runs: three optimizers, three schedules, five architectures.
    add("healthy_mlp_digits_sgd_step", arch="mlp", data="digits", opt="sgd", lr=0.05, schedule="step", seed=1)
    add("healthy_mlp_digits_adam_cosine", arch="mlp", data="digits", opt="adam", lr=2e-3, schedule="cosine", seed=2)
    add("healthy_mlp_digits_adamw_const", arch="mlp", data="digits", opt="adamw", lr=1e-3, seed=3)
    add("healthy_deepmlp_digits_adam_cosine", arch="mlp", data="digits", opt="adam", lr=1e-3, depth=6,
        schedule="cosine", seed=4)
    add("healthy_cnn_digits_sgd_cosine", arch="cnn", data="digits", opt="sgd", lr=0.01, schedule="cosine", seed=5)
    add("healthy_cnn_digits_adam_step", arch="cnn", data="digits", opt="adam", lr=3e-3, schedule="step", seed=6)
    add("healthy_mlp_cancer_adamw_cosine", arch="mlp", data="breast_cancer", opt="adamw", lr=1e-3,
        schedule="cosine", seed=7)
    add("healthy_mlp_wine_sgd_const", arch="mlp", data="wine", opt="sgd", lr=0.01, seed=8)
    add("healthy_mlp_diabetes_adam_const", arch="mlp", data="diabetes", opt="adam", lr=1e-3, seed=9)
    add("healthy_gru_text_adam_cosine", arch="gru", opt="adam", lr=5e-3, schedule="cosine", seed=10)
    add("healthy_lstm_text_adamw_step", arch="lstm", opt="adamw", lr=5e-3, schedule="step", seed=11)
    add("healthy_gru_text_sgd_const", arch="gru", opt="sgd", lr=0.5, seed=12)

    # Faults, each on two or more architectures and seeds.
    add("nan_batch_mlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3, fault="nan_batch",
        onset=140, seed=21)
    add("inf_batch_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.01, fault="nan_batch",
        onset=170, value="inf", seed=22)
    add("nan_batch_gru_text", arch="gru", opt="adam", lr=5e-3, fault="nan_batch", onset=120, seed=23)

    add("lr_spike_mlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3, fault="lr_spike",
        onset=150, factor=100, seed=31)
    add("lr_spike_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.01, fault="lr_spike",
        onset=130, factor=100, seed=32)
    add("lr_spike_lstm_text", arch="lstm", opt="adam", lr=5e-3, fault="lr_spike", onset=160,
        factor=40, seed=33)

    add("high_lr_mlp_cancer", arch="mlp", data="breast_cancer", opt="sgd", lr=0.01, fault="high_lr",
        onset=120, factor=300, seed=41)
    add("high_lr_cnn_digits", arch="cnn", data="digits", opt="adam", lr=1e-3, fault="high_lr",
        onset=150, factor=100, seed=42)
    add("high_lr_gru_text", arch="gru", opt="sgd", lr=0.5, fault="high_lr", onset=140, factor=40, seed=43)

    add("exploding_deepmlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3, depth=8,
        fault="exploding", onset=140, factor=3, seed=51)
    add("exploding_gru_text", arch="gru", opt="sgd", lr=0.5, fault="exploding", onset=150, factor=6,
        seed=52)
    add("exploding_lstm_text", arch="lstm", opt="adam", lr=3e-3, fault="exploding", onset=130,
        factor=8, seed=53)

    add("vanishing_sigmoid_mlp_digits", arch="mlp", data="digits", opt="sgd", lr=0.05, depth=8,
        act="sigmoid", init_std=0.01, fault="vanishing", onset=1, seed=61)
    add("vanishing_tanh_mlp_wine", arch="mlp", data="wine", opt="adam", lr=1e-3, depth=8, act="tanh",
        init_std=0.01, fault="vanishing", onset=1, seed=62)
    add("vanishing_sigmoid_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.05, depth=5,
        act="sigmoid", init_std=0.01, fault="vanishing", onset=1, seed=63)

    add("dead_relu_bias_mlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3, bias_init=-8.0,
        fault="dead_relu", onset=1, seed=71)
    add("dead_relu_bias_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.05, bias_init=-8.0,
        fault="dead_relu", onset=1, seed=72)
    add("dead_relu_lr_burst_mlp_cancer", arch="mlp", data="breast_cancer", opt="sgd", lr=0.01,
        fault="lr_burst_dead_relu", onset=130, factor=3000, seed=73)
    add("dead_relu_lr_burst_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.02,
        fault="lr_burst_dead_relu", onset=120, factor=500, seed=74)

    add("lr_collapse_mlp_digits", arch="mlp", data="digits", opt="sgd", lr=0.05, fault="lr_collapse",
        onset=110, seed=81)
    add("lr_collapse_cnn_digits", arch="cnn", data="digits", opt="adam", lr=3e-3, schedule="cosine",
        fault="lr_collapse", onset=130, seed=82)
    add("lr_collapse_gru_text", arch="gru", opt="adam", lr=5e-3, fault="lr_collapse", onset=100, seed=83)

    add("overfit_tiny_mlp_digits", arch="mlp", data="digits", opt="adam", lr=3e-3, width=256,
        n_train=30, fault="overfit", onset=1, seed=91)
    add("overfit_tiny_mlp_cancer", arch="mlp", data="breast_cancer", opt="adam", lr=3e-3, width=256,
        n_train=20, fault="overfit", onset=1, seed=92)
    add("overfit_tiny_cnn_digits", arch="cnn", data="digits", opt="adam", lr=5e-3, n_train=30,
        fault="overfit", onset=1, seed=93)

    add("label_noise_mlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3, fault="label_noise",
        onset=150, seed=101)
    add("label_noise_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.01, fault="label_noise",
        onset=140, seed=102)
    add("label_noise_mlp_wine", arch="mlp", data="wine", opt="adam", lr=1e-3, fault="label_noise",
        onset=130, seed=103)

    add("throughput_drop_mlp_digits", arch="mlp", data="digits", opt="adam", lr=1e-3,
        fault="throughput_drop", onset=160, seed=111)
    add("throughput_drop_gru_text", arch="gru", opt="adam", lr=5e-3, fault="throughput_drop", onset=140,
        seed=112)
    add("throughput_drop_cnn_digits", arch="cnn", data="digits", opt="sgd", lr=0.01,
        fault="throughput_drop", onset=180, seed=113)

    add("stall_mlp_cancer", arch="mlp", data="breast_cancer", opt="adamw", lr=1e-3, fault="stall",
        onset=150, seed=121)
    add("stall_lstm_text", arch="lstm", opt="adam", lr=5e-3, fault="stall", onset=170, stall_s=3600,
        seed=122)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="run names (default: all)")
    ap.add_argument("--out", default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.makedirs(os.path.join(args.out, "traces"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "labels"), exist_ok=True)
    t0 = real_time.time()
    for spec in catalogue():
        if args.only and spec["name"] not in args.only:
            continue
        t = real_time.time()
        lines = run(spec, args.out)
        sym = symptom_step(spec, lines)
        fault = spec.get("fault", "healthy")
        label = {"run": spec["name"], "fault": fault, "onset": spec.get("onset") if fault != "healthy" else None,
                 "symptom": sym, "allowed": ALLOWED.get(fault, []),
                 "spec": {k: v for k, v in spec.items() if k != "name"}}
        with gzip.GzipFile(os.path.join(args.out, "traces", spec["name"] + ".jsonl.gz"), "wb",
                           mtime=0) as f:
            f.write(("\n".join(lines) + "\n").encode())
        with open(os.path.join(args.out, "labels", spec["name"] + ".json"), "w") as f:
            json.dump(label, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"{spec['name']}: {fault} onset {label['onset']} symptom {sym} "
              f"({real_time.time() - t:.1f} s)", flush=True)
        if fault != "healthy" and sym is None:
            print(f"  warning: no symptom found for {spec['name']}", file=sys.stderr)
    print(f"total {real_time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
