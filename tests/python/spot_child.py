"""Child of test_spot.py's resume tests: trains a small MLP deterministically
on CPU for STEPS steps in DIR with vigil.torch.Monitor, resuming from the
newest checkpoint there (the Python twin of tests/torch/spot_child.cpp).

    python3 spot_child.py DIR STEPS HOLD

Prints, one line each, flushed: `resumed R`, `fire RULE STEP LABELS VALUE`
(value.hex()), `step K` after every completed step, `stopped K REASON`,
`done` (the final state is then in DIR/final.bin). After step HOLD it reads
standard input until EOF: the parent signals before closing it.
"""
import math
import os
import random
import sys

import torch

import vigil
from vigil.torch import Monitor

RULES = """
rule periodic: when loss >= 0 every 25 steps cooldown 1 samples do checkpoint
rule loss_up: when loss > 1.02 * ewma(loss, 0.2) for 2 samples cooldown 10 steps do log
rule improving: when mean(loss[5]) < 0.97 * max(loss[20]) cooldown 30 steps do log
use std.spot_preemption()
"""


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    directory, steps, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(7)
    random.seed(7)
    idx = torch.arange(256, dtype=torch.float32).unsqueeze(1)
    feat = torch.arange(8, dtype=torch.float32).unsqueeze(0)
    data_x = torch.sin(idx * 0.37 + feat * 1.3) + 0.1 * torch.cos(idx * feat * 0.05)
    data_y = (torch.arange(256) * 7 // 3) % 4
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    mon = Monitor(model, opt, rules=vigil.compile(RULES), checkpoint_dir=directory, keep_last=3)
    start = 1
    latest = Monitor.latest_checkpoint(directory)
    if latest:
        r = mon.resume(latest)
        say(f"resumed {r}")
        start = r + 1
    model.train()
    for step in range(start, steps + 1):
        # The batch uses torch's and Python's generators, dropout torch's: a
        # resume must restore both.
        batch = torch.randperm(256)[:32]
        if random.random() < 0.5:
            batch = batch.flip(0)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data_x[batch]), data_y[batch])
        loss.backward()
        d = mon.after_backward(step, loss)
        for f in d.firings:
            labels = ",".join(f"{k}={v}" for k, v in sorted(f.labels.items())) or "-"
            value = "none" if f.value is None or math.isnan(f.value) else float(f.value).hex()
            say(f"fire {f.rule} {f.step} {labels} {value}")
        if d.stop:
            say(f"stopped {step} {d.stop_reason}")
            return 0
        if not d.skip_step:
            opt.step()
        mon.after_step(step)
        say(f"step {step}")
        if step == hold:
            while os.read(0, 64):
                pass
    state = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    for p in model.parameters():
        s = opt.state[p]
        state += str(int(s["step"])).encode() + b";"
        state += s["exp_avg"].numpy().tobytes() + s["exp_avg_sq"].numpy().tobytes()
    state += torch.get_rng_state().numpy().tobytes() + repr(random.getstate()).encode()
    with open(os.path.join(directory, "final.bin"), "wb") as f:
        f.write(state)
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
