#!/usr/bin/python3
"""The faulty run of examples/torch_trainer, in Python: a 2-64-64-3 MLP on three
interleaved spirals, Adam, with two faults injected on purpose (a batch with a
NaN feature at step 120, the learning rate multiplied by 100 at step 250).

Without rules the NaN batch ruins the weights and the run ends NaN; with
examples/torch_trainer/trainer.rules a vigil.torch.Monitor skips the NaN step
and rolls back + halves the lr after the spike, and the run ends healthy.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/faulty_run.py

Exit status 0 when the run without rules is ruined and the one with rules
recovers (what `make demo` checks), 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import os
import sys
import tempfile
import time
from typing import List, Optional

import numpy as np
import torch
import torch.nn.functional as F

from vigil import series_key
from vigil.torch import Monitor, learning_rate, set_learning_rate

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_RULES = os.path.join(HERE, "..", "torch_trainer", "trainer.rules")
BATCH = 128
CLASSES = 3


@dataclasses.dataclass
class Config:
    rules: Optional[str] = None   # None: train without a monitor (the baseline)
    work_dir: Optional[str] = None
    steps: int = 400
    checkpoint_every: int = 25
    nan_batch_step: int = 120     # <0: no fault
    lr_spike_step: int = 250
    lr_spike_factor: float = 100.0
    record_jsonl: Optional[str] = None
    stop_after: int = -1          # checkpoint and return after this step (resume test)
    resume: bool = False          # continue from the newest checkpoint in work_dir


@dataclasses.dataclass
class Result:
    final_loss: float = math.nan
    final_accuracy: float = 0.0
    min_lr: float = 0.0
    final_lr: float = 0.0
    last_step: int = 0
    skipped_steps: int = 0
    rollbacks: int = 0
    stopped: bool = False
    seconds: float = 0.0
    firings: List[tuple] = dataclasses.field(default_factory=list)  # (rule, step, labels, value)


def make_spirals(per_class: int, seed: int):
    """Three noisy spiral arms, shuffled; numpy's PCG64 makes them the same everywhere."""
    rng = np.random.default_rng(seed)
    n = per_class * CLASSES
    c = np.repeat(np.arange(CLASSES), per_class)
    t = np.tile(np.arange(per_class) / per_class, CLASSES)
    r = 0.1 + 0.9 * t
    a = 4.0 * t + 2.0 * math.pi * c / CLASSES + 0.2 * rng.standard_normal(n)
    x = np.stack([r * np.cos(a), r * np.sin(a)], axis=1).astype(np.float32)
    order = rng.permutation(n)
    return torch.from_numpy(x[order]), torch.from_numpy(c[order])


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(2, 64)
        self.fc2 = torch.nn.Linear(64, 64)
        self.fc3 = torch.nn.Linear(64, CLASSES)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def batch_at(x, y, position: int):
    """Batch `position` (1-based) of the endless pass over the training set."""
    start = ((position - 1) * BATCH) % (x.shape[0] - BATCH + 1)
    return x[start:start + BATCH], y[start:start + BATCH]


def train(config: Config) -> Result:
    result = Result()
    t0 = time.monotonic()
    torch.set_num_threads(1)  # deterministic reductions; polite on a shared machine
    torch.manual_seed(1)
    x_train, y_train = make_spirals(1000, 7)
    x_test, y_test = make_spirals(300, 8)
    net = Net()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)

    monitor = None
    if config.rules:
        monitor = Monitor(net, optimizer, rules=config.rules, checkpoint_dir=config.work_dir,
                          checkpoint_every=config.checkpoint_every)
        monitor.activation("fc1", net.fc1)
        monitor.activation("fc2", net.fc2)
        if config.record_jsonl:
            monitor.record(config.record_jsonl)
        monitor.host_state["position"] = 1
    local = {"position": 1}
    state = monitor.host_state if monitor else local

    first = 1
    if config.resume:
        path = Monitor.latest_checkpoint(config.work_dir)
        if monitor is None or path is None:
            raise RuntimeError("no checkpoint to resume from")
        first = monitor.resume(path) + 1
        state = monitor.host_state

    result.min_lr = learning_rate(optimizer)
    for step in range(first, config.steps + 1):
        result.last_step = step
        if step == config.lr_spike_step:
            set_learning_rate(optimizer, learning_rate(optimizer) * config.lr_spike_factor)
        x, y = batch_at(x_train, y_train, state["position"])
        if step == config.nan_batch_step:
            x = x.clone()
            x[0, 0] = float("nan")
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        skip = False
        if monitor:
            d = monitor.after_backward(step, loss.item())
            result.firings += [(f.rule, f.step, f.labels, f.value) for f in d.firings]
            skip = d.skip_step or d.rolled_back
            result.rollbacks += d.rolled_back
            if d.stop:
                result.stopped = True
                break
            state = monitor.host_state  # a rollback replaces it with the checkpoint's
        if skip:
            result.skipped_steps += 1
        else:
            optimizer.step()
            state["position"] += 1
        result.min_lr = min(result.min_lr, learning_rate(optimizer))
        if monitor:
            monitor.after_step(step)
            if step == config.stop_after:
                monitor.checkpoint(step)
                break

    with torch.no_grad():
        net.eval()
        out = net(x_test)
        result.final_loss = F.cross_entropy(out, y_test).item()
        result.final_accuracy = out.argmax(1).eq(y_test).double().mean().item()
    result.final_lr = learning_rate(optimizer)
    result.seconds = time.monotonic() - t0
    return result


def describe(name: str, r: Result) -> str:
    return (f"{name}: final loss {r.final_loss:.4f}, accuracy {r.final_accuracy:.3f}, "
            f"lr {r.final_lr:g}, {r.skipped_steps} skipped, {r.rollbacks} rollbacks, "
            f"{len(r.firings)} firings, {r.seconds:.2f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", default=DEFAULT_RULES)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--verbose", action="store_true", help="print the monitor's log lines")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, format="  %(message)s")

    baseline = train(Config(steps=args.steps))
    print(describe("without rules", baseline))
    with tempfile.TemporaryDirectory(prefix="vigil-demo-") as work:
        guarded = train(Config(rules=args.rules, work_dir=work, steps=args.steps))
    print(describe("with " + os.path.relpath(args.rules), guarded))
    for rule, step, labels, value in guarded.firings:
        key = series_key(rule, labels)
        print(f"  step {step}: {key} (value {value:.4g})" if value is not None else f"  step {step}: {key}")
    ruined = not math.isfinite(baseline.final_loss)
    recovered = math.isfinite(guarded.final_loss) and guarded.final_accuracy > 0.9
    print(f"python demo: {'PASS' if ruined and recovered else 'FAIL'} "
          f"(baseline {'ends NaN' if ruined else 'did not end NaN'}, "
          f"monitored run {'recovered' if recovered else 'did not recover'})")
    return 0 if ruined and recovered else 1


if __name__ == "__main__":
    sys.exit(main())
