#!/usr/bin/python3
"""The two measurements of the Python binding (docs/python.md, "Overhead").

1. observe() of 100 scalars from Python vs the same observations made by the
   C++ engine directly (series interned once, as a C++ host does), on the same
   engine kind, program and data: the difference is the binding's own cost.
2. vigil.torch.Monitor with examples/recommended.rules on a ~4.2M-parameter
   MLP vs the same loop without it, in the same run: blocks of steps with and
   without the Monitor alternate, and the medians are compared.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/bench_python.py
"""

import argparse
import logging
import os
import random
import statistics
import tempfile
import time

import torch

import vigil
from vigil import _vigil
from vigil.torch import Monitor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def bench_observe(calls: int):
    # 100 series, 100 rules (one per series, with a `for`): the shape of
    # bench/engine_bench.cpp's BM_Observe_100x100.
    text = "\n".join(f"rule r{i}: when s{i} > 0.999 for 2 samples do log" for i in range(100))
    prog = vigil.compile(text)
    rng = random.Random(1)
    pool = [{f"s{i}": rng.random() for i in range(100)} for _ in range(64)]
    results = {}
    for rep in range(5):
        py_eng = vigil.Engine(prog, unbound="record")
        cpp_eng = vigil.Engine(prog, unbound="record")
        for step in range(200):  # warm-up: windows full, keys interned
            py_eng.observe(step, pool[step % 64])
        _vigil._observe_loop(cpp_eng, 0, 200, pool)
        t0 = time.perf_counter()
        fired = 0
        observe = py_eng.observe
        for i in range(calls):
            fired += len(observe(200 + i, pool[i % 64]))
        py_s = time.perf_counter() - t0
        cpp_s, cpp_fired = _vigil._observe_loop(cpp_eng, 200, calls, pool)
        assert fired == cpp_fired, (fired, cpp_fired)
        results.setdefault("py", []).append(py_s / calls * 1e6)
        results.setdefault("cpp", []).append(cpp_s / calls * 1e6)
    py_us, cpp_us = min(results["py"]), min(results["cpp"])
    print(f"observe, 100 scalars, 100 rules ({calls} calls, best of 5):")
    print(f"  Python Engine.observe(dict) : {py_us:7.2f} us/call")
    print(f"  C++ Engine::observe(span)   : {cpp_us:7.2f} us/call")
    print(f"  binding's own cost          : {py_us - cpp_us:7.2f} us/call "
          f"({(py_us - cpp_us) / 100 * 1000:.0f} ns per scalar)")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(512, 1536), torch.nn.ReLU(),
            torch.nn.Linear(1536, 1536), torch.nn.ReLU(),
            torch.nn.Linear(1536, 512), torch.nn.ReLU(),
            torch.nn.Linear(512, 10))

    def forward(self, x):
        return self.net(x)


def bench_monitor(rounds: int, block: int, batch: int):
    torch.manual_seed(0)
    model = MLP()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(batch, 512)
    y = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    with tempfile.TemporaryDirectory(prefix="vigil-bench-") as work:
        mon = Monitor(model, optimizer, rules=os.path.join(ROOT, "examples", "recommended.rules"),
                      checkpoint_dir=work)
        watched = len(mon._grads) + len(mon._weights)
        times = {"without": [], "with": []}
        inside = []  # seconds spent in the Monitor's calls, per monitored step
        step = 0
        for r in range(rounds + 1):  # round 0 warms up
            for kind in ("without", "with") if r % 2 else ("with", "without"):
                for _ in range(block):
                    step += 1
                    t0 = time.perf_counter()
                    optimizer.zero_grad()
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    skip = False
                    spent = 0.0
                    if kind == "with":
                        value = loss.item()
                        t1 = time.perf_counter()
                        d = mon.after_backward(step, value)
                        spent += time.perf_counter() - t1
                        skip = d.skip_step
                    else:
                        loss.item()  # the same host sync as the monitored loop
                    if not skip:
                        optimizer.step()
                    if kind == "with":
                        t1 = time.perf_counter()
                        mon.after_step(step)
                        spent += time.perf_counter() - t1
                    if r:
                        times[kind].append(time.perf_counter() - t0)
                        if kind == "with":
                            inside.append(spent)
    without = statistics.median(times["without"])
    with_ = statistics.median(times["with"])
    print(f"Monitor overhead, MLP with {params / 1e6:.2f}M parameters, batch {batch}, Adam, "
          f"examples/recommended.rules ({watched} tensor series read), {torch.get_num_threads()} "
          f"torch thread(s), {rounds} alternating blocks of {block} steps:")
    print(f"  without Monitor: {without * 1e3:8.2f} ms/step (median)")
    print(f"  with Monitor   : {with_ * 1e3:8.2f} ms/step (median)")
    print(f"  overhead       : {(with_ - without) * 1e3:8.2f} ms/step = {(with_ / without - 1) * 100:+.2f}% "
          f"(difference of medians; noisy on a loaded machine)")
    spent = statistics.median(inside)
    print(f"  time inside after_backward + after_step: {spent * 1e3:.3f} ms/step (median) = "
          f"{spent / without * 100:.2f}% of a step without the Monitor")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.getLogger("vigil").setLevel(logging.ERROR)  # the rules do fire on this run: keep the output to the numbers
    bench_observe(args.calls)
    bench_monitor(args.rounds, args.block, args.batch)


if __name__ == "__main__":
    main()
