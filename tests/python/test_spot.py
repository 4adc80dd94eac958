"""Spot training with vigil.torch.Monitor (docs/spot.md): the preemption
notice as a series, run_time and cost, the checkpoint written before
after_backward returns, and exact resume across SIGTERM and SIGKILL."""
import os
import random
import select
import signal
import subprocess
import sys

import pytest
import torch

import vigil
from vigil.torch import Monitor

torch.set_num_threads(1)
HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "spot_child.py")
STEPS = 200


def _rig(rules, tmp_path, **kw):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, opt, rules=vigil.compile(rules, kw.pop("params", None)),
                  checkpoint_dir=str(tmp_path / "ckpt"), **kw)
    return model, opt, mon


def _step(model, opt, mon, step):
    opt.zero_grad()
    loss = model(torch.ones(2, 4)).pow(2).sum()
    loss.backward()
    d = mon.after_backward(step, loss)
    if d.stop:
        return d
    if not d.skip_step:
        opt.step()
    mon.after_step(step)
    return d


def _weights(model):
    return b"".join(p.detach().numpy().tobytes() for p in model.parameters())


def test_sigterm_is_a_series_and_a_stop_with_a_checkpoint(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    model, opt, mon = _rig("use std.spot_preemption()\n", tmp_path)
    try:
        assert signal.getsignal(signal.SIGTERM) is not before
        for s in (1, 2, 3):
            assert not _step(model, opt, mon, s).stop
        saved = _weights(model)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        assert mon.preempted
        d = _step(model, opt, mon, 4)
        assert d.stop and d.stop_reason == "preempted"
        assert [f.rule for f in d.firings] == ["spot_preemption"]
        latest = Monitor.latest_checkpoint(tmp_path / "ckpt")
        assert os.path.basename(latest) == "ckpt-000000000003.pt"
    finally:
        mon.close()
    assert signal.getsignal(signal.SIGTERM) is before

    model2, opt2, mon2 = _rig("use std.spot_preemption()\n", tmp_path)
    try:
        assert not mon2.preempted
        assert mon2.resume(latest) == 3
        assert _weights(model2) == saved
        repeat = _step(model2, opt2, mon2, 4)  # already observed: no firing again
        assert repeat.firings == [] and not repeat.stop
        assert not _step(model2, opt2, mon2, 5).stop
    finally:
        mon2.close()


def test_no_rule_reads_preempted_no_handler(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    _, _, mon = _rig("rule r: when loss > 1e30 do stop\n", tmp_path)
    assert signal.getsignal(signal.SIGTERM) is before
    mon.close()


def test_notice_file(tmp_path):
    notice = tmp_path / "notice"
    model, opt, mon = _rig("use std.spot_preemption()\n", tmp_path, preemption_signals=(),
                           preemption_file=str(notice))
    assert not _step(model, opt, mon, 1).stop
    notice.write_text("terminate\n")
    assert _step(model, opt, mon, 2).stop
    assert os.path.basename(Monitor.latest_checkpoint(tmp_path / "ckpt")) == "ckpt-000000000001.pt"


def test_run_time_cost_and_limits(tmp_path):
    rules = ("param price_per_hour = 36\nparam processes = 2\n"
             "use std.max_run(limit = 1e9)\nuse std.budget(limit = 1e9)\n")
    model, opt, mon = _rig(rules, tmp_path)
    seen = []
    mon.record(seen.append)
    for s in (1, 2, 3):
        _step(model, opt, mon, s)
    assert len(seen) == 3
    for obs in seen:
        values = obs["values"]
        assert obs["time"] == values["run_time"]
        assert values["preempted"] == 0
        assert values["cost"] == pytest.approx(values["run_time"] / 3600 * 72)
    saved = mon.run_time
    mon.checkpoint(3)
    model2, opt2, mon2 = _rig(rules, tmp_path)
    mon2.resume(Monitor.latest_checkpoint(tmp_path / "ckpt"))
    assert mon2.run_time >= saved

    for rules, reason in (("use std.max_run(limit = 0)\n", "max_run"),
                          ("param price_per_hour = 10\nuse std.budget(limit = 0)\n", "budget")):
        sub = tmp_path / reason
        sub.mkdir()
        model, opt, mon = _rig(rules, sub)
        d = _step(model, opt, mon, 1)
        assert d.stop and d.stop_reason == reason
        assert os.path.basename(Monitor.latest_checkpoint(sub / "ckpt")) == "ckpt-000000000000.pt"


# -- exact resume across processes --------------------------------------------

def _train(directory, signals, seed):
    """Trains to STEPS, interrupting one child per entry of `signals` at a step
    drawn from `seed` (sent when the child reports that step; the child holds
    a few steps later until its stdin closes, so the signal lands before the
    run could end). Returns (final state bytes, firings, stops)."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    firings, resumed, killed, stops = [], [], set(), 0
    reached = 0
    for round_ in range(len(signals) + 1):
        sig = signals[round_] if round_ < len(signals) else None
        k = hold = STEPS
        if sig is not None:
            k = rng.randint(reached + 1, reached + 30)
            hold = k + rng.randint(0, 8)
        child = subprocess.Popen([sys.executable, CHILD, str(directory), str(STEPS), str(hold)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        if sig is None:
            child.stdin.close()
        signalled, done, start = False, False, 0
        for line in child.stdout:
            word, *rest = line.split()
            if word == "fire":
                firings.append((round_, int(rest[1]), " ".join(rest)))
            elif word == "resumed":
                start = int(rest[0])
            elif word == "stopped":
                stops += 1
            elif word == "done":
                done = True
            elif word == "step":
                reached = int(rest[0])
                if sig is not None and not signalled and reached >= k:
                    child.send_signal(sig)
                    signalled = True
                    child.stdin.close()
        status = child.wait(timeout=600)
        resumed.append(start)
        if sig == signal.SIGKILL:
            assert status == -signal.SIGKILL
            killed.add(round_)
        else:
            assert status == 0
        assert done == (sig is None), f"round {round_}: finished={done} signal={sig}"
    joined = [text for child, step, text in firings
              if not text.startswith("spot_preemption ")
              and not (child in killed and child + 1 < len(resumed) and step > resumed[child + 1])]
    with open(os.path.join(directory, "final.bin"), "rb") as f:
        return f.read(), joined, stops


def test_sigterm_and_sigkill_resume_bit_for_bit(tmp_path):
    full_state, full_firings, _ = _train(tmp_path / "full", [], 0)
    assert len(full_firings) > 10
    cut_state, cut_firings, stops = _train(
        tmp_path / "cut", [signal.SIGTERM, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL], 2026)
    assert stops == 2
    assert cut_state == full_state
    assert cut_firings == full_firings
