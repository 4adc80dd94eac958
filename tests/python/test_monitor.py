"""vigil.torch.Monitor: series, actions for real, checkpoints, recovery (SPEC §8)."""
import json
import logging
import math
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

import vigil
from vigil.torch import Monitor, learning_rate

torch.set_num_threads(1)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
import faulty_run  # noqa: E402

TRAINER_RULES = os.path.join(ROOT, "examples", "torch_trainer", "trainer.rules")


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _setup(rules_text, tmp_path, **kw):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rules = tmp_path / "r.rules"
    rules.write_text(rules_text)
    mon = Monitor(model, opt, rules=str(rules), **kw)
    return model, opt, mon


def _step(model, opt, mon, step, scale=1.0, nan=False):
    x = torch.randn(16, 4) * scale
    if nan:
        x[0, 0] = float("nan")
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    d = mon.after_backward(step, loss)
    if not d.skip_step:
        opt.step()
    d2 = mon.after_step(step)
    return d, d2


def test_spec_snippet_monitor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.rules").write_text(
        'rule nan: when not is_finite(grad_norm) do skip_step\n'
        'rule save: when loss >= 0 do checkpoint\n'
        'rule end: when loss > 1e6 do stop("diverged")\n')
    torch.manual_seed(0)
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps_done = []
    # SPEC §8, as written there.
    from vigil.torch import Monitor
    mon = Monitor(model, optimizer, rules="train.rules", checkpoint_dir="ckpt")
    for step in range(1, 6):
        optimizer.zero_grad()
        x = torch.randn(8, 4)
        if step == 3:
            x[1, 2] = float("nan")
        loss = model(x).pow(2).mean()
        loss.backward()
        d = mon.after_backward(step, loss)              # d.skip_step, d.stop, d.rolled_back,
        if not d.skip_step: optimizer.step()            # d.restored_step, d.lr_changed, d.firings
        steps_done.append((step, d.skip_step, d.rolled_back, d.restored_step, d.lr_changed))
        if mon.after_step(step).stop or d.stop: break
    assert [s for s, skip, *_ in steps_done if skip] == [3]
    assert os.path.exists(os.path.join("ckpt", "ckpt-000000000001.pt"))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_only_series_some_rule_reads_are_observed(tmp_path):
    model, opt, mon = _setup("rule g: when grad_norm > 1e9 do log\n"
                             "rule a: when activation_frac_zero > 2 do log\n", tmp_path)
    assert [k for k, _ in mon._grads] == ['grad{layer="fc1.weight"}', 'grad{layer="fc1.bias"}',
                                          'grad{layer="fc2.weight"}', 'grad{layer="fc2.bias"}']
    assert mon._weights == []
    assert mon.activation("fc1", model.fc1) is not None
    seen = []
    mon.record(seen.append)
    mon.scalar("accuracy", 0.5)
    _step(model, opt, mon, 1)
    values = seen[-1]["values"]
    # loss, lr and the Spot clock and notice (docs/spot.md) are always there
    assert set(values) == {"loss", "lr", "run_time", "preempted", "accuracy",
                           'activation_frac_zero{layer="fc1"}',
                           'grad_norm{layer="fc1.weight"}', 'grad_norm{layer="fc1.bias"}',
                           'grad_norm{layer="fc2.weight"}', 'grad_norm{layer="fc2.bias"}'}
    assert values["lr"] == 0.1
    expected = torch.linalg.vector_norm(model.fc2.bias.grad.double()).item()
    assert values['grad_norm{layer="fc2.bias"}'] == pytest.approx(expected, rel=1e-12)
    # A forward in eval mode is not recorded; step_time appears from the 2nd step.
    model.eval()
    model(torch.randn(2, 4))
    model.train()
    opt.zero_grad()
    model(torch.randn(3, 4)).sum().backward()
    mon.after_backward(2, 1.0)
    assert "step_time" in seen[-1]["values"]
    assert 'activation_frac_zero{layer="fc1"}' in seen[-1]["values"]
    mon.after_backward(3, 1.0)  # no forward since: no activation
    assert 'activation_frac_zero{layer="fc1"}' not in seen[-1]["values"]


def _run_sparse(tmp_path, only_due):
    rules = ("rule sparse: when grad_norm > 0.05 every 10 steps cooldown 10 steps do log\n"
             "rule window: when max(grad_norm{layer=\"fc2.bias\"}[3]) > 1e9 do log\n")
    tmp_path.mkdir(parents=True, exist_ok=True)
    model, opt, mon = _setup(rules, tmp_path, only_due_tensors=only_due)
    seen = []
    mon.record(seen.append)
    firings = []
    torch.manual_seed(1)
    for step in range(1, 101):
        d, _ = _step(model, opt, mon, step)
        firings += [(f.rule, f.step, f.labels, f.value) for f in d.firings]
    stats_at = {key: [o["step"] for o in seen if key in o["values"]]
                for key in ('grad_norm{layer="fc1.weight"}', 'grad_norm{layer="fc2.bias"}')}
    return firings, stats_at, float(model.fc1.weight.sum())


def test_tensors_are_collected_only_at_the_steps_some_rule_needs_them(tmp_path):
    # `every 10 steps` needs fc1.weight's gradient on 1 step in 10; the window
    # over fc2.bias needs it every step. The firings are those of collecting
    # every step.
    every, every_at, every_w = _run_sparse(tmp_path / "every", only_due=False)
    due, due_at, due_w = _run_sparse(tmp_path / "due", only_due=True)
    assert every_at['grad_norm{layer="fc1.weight"}'] == list(range(1, 101))
    assert due_at['grad_norm{layer="fc1.weight"}'] == list(range(1, 101, 10))
    assert due_at['grad_norm{layer="fc2.bias"}'] == list(range(1, 101))
    assert due and due == every
    assert due_w == every_w


def test_engine_tensor_due():
    e = vigil.Engine(vigil.compile("rule r: when g_norm > 1 every 10 steps do log\n"), "record")
    assert e.tensor_due("g", 1)
    e.observe(1, tensors={"g": torch.ones(2)}, only_due=True)
    assert not e.tensor_due("g", 2)
    assert e.tensor_due("g", 11)
    assert not e.tensor_due("h", 11)  # no rule reads it
    with pytest.raises(ValueError):
        e.tensor_due("g{", 1)


def test_reduce_lr_on_every_param_group_and_log_alert(tmp_path, caplog):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.Adam([{"params": model.fc1.parameters(), "lr": 0.01},
                            {"params": model.fc2.parameters(), "lr": 0.002}])
    rules = tmp_path / "r.rules"
    rules.write_text('rule high: when loss > 1 do reduce_lr(factor = 0.5, min_lr = 0.0015), '
                     'alert("loss high"), log\n')
    mon = Monitor(model, opt, rules=str(rules))
    caplog.set_level(logging.INFO, logger="vigil")
    d = mon.after_backward(1, 5.0)
    assert d.lr_changed and [g["lr"] for g in opt.param_groups] == [0.005, 0.0015]
    assert "ALERT step 1: high: loss high" in caplog.text
    assert "step 1: high fired (value 5.0)" in caplog.text
    mon.after_backward(2, 0.5)
    d = mon.after_backward(3, 5.0)
    assert [g["lr"] for g in opt.param_groups] == [0.0025, 0.0015]  # not below min_lr


def test_stop_skip_and_errors_are_decisions_not_exceptions(tmp_path):
    model, opt, mon = _setup('rule end: when loss > 100 do stop("diverged")\n'
                             'rule back: when loss < 0 do rollback\n'
                             'rule save: when loss == 7 do checkpoint\n', tmp_path)
    assert mon.activation("fc1", model.fc1) is None  # no rule reads activations: no hook
    assert mon._grads == [] and mon._weights == []
    d = mon.after_backward(1, 1000.0)
    assert d.stop and d.stop_reason == "diverged"
    d = mon.after_backward(2, -1.0)
    assert not d.rolled_back and d.errors == ['rollback(to="last_good"): no checkpoint to roll back to']
    mon.after_backward(3, 7.0)
    d = mon.after_step(3)
    assert d.errors == ["checkpoint: no checkpoint_dir configured"]
    with pytest.raises(ValueError, match="standard action"):
        mon.on("stop", lambda f, a: None)
    with pytest.raises(vigil.CompileError):
        _setup("rule x: when > 1 do log", tmp_path)


def _state(model, opt):
    return ({k: v.clone() for k, v in model.state_dict().items()},
            json.dumps(opt.state_dict()["param_groups"]))


def test_rollback_restores_model_optimizer_rng_and_host_state(tmp_path):
    model, opt, mon = _setup("rule back: when loss < 0 do rollback(to = \"best\")\n", tmp_path,
                             checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    opt = mon.optimizer
    for step in range(1, 5):
        mon.host_state["position"] = step * 10
        _step(model, opt, mon, step)
    # Steps 2 and 4 were saved; the best (lowest loss) is one of them.
    best = mon.best
    assert best is not None and best.step in (2, 4)
    saved = torch.load(best.path)
    after = torch.rand(3)  # what the RNG gives right after the checkpoint...
    for step in range(5, 8):
        mon.host_state["position"] = step * 10
        _step(model, opt, mon, step, scale=3.0)
    opt.param_groups[0]["lr"] = 123.0
    d = mon.after_backward(8, -1.0)
    assert d.rolled_back and d.restored_step == best.step and d.skip_step
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved["model"][k])
    assert opt.param_groups[0]["lr"] == 0.1
    assert mon.host_state == {"position": best.step * 10}
    if best.step == 4:  # the RNG comes back to where it was at the checkpoint
        assert torch.equal(torch.rand(3), after)
    # Checkpoints after the target were dropped with the abandoned trajectory.
    assert all(c.step <= best.step for c in mon.checkpoints)


def test_rng_state_is_restored_bit_for_bit(tmp_path):
    model, opt, mon = _setup("rule back: when loss < 0 do rollback\n", tmp_path, checkpoint_dir=tmp_path / "ck",
                             quiet_steps=0)
    _step(model, opt, mon, 1)
    mon.checkpoint(1)
    expected = (torch.rand(4), torch.randn(2))
    torch.rand(100)
    assert mon.rollback("last_good", 5) == 1
    assert torch.equal(torch.rand(4), expected[0]) and torch.equal(torch.randn(2), expected[1])


def test_pruning_keeps_last_n_plus_last_good_and_best(tmp_path):
    model, opt, mon = _setup("rule hot: when loss > 50 do log, skip_step\n", tmp_path,
                             checkpoint_dir=tmp_path / "ck", keep_last=2, quiet_steps=1)
    losses = {1: 0.5, 2: 0.1, 3: 0.4, 4: 0.3, 5: 100, 6: 0.35, 7: 100, 8: 100}
    for step, loss in losses.items():
        mon.after_backward(step, loss)
        mon.checkpoint(step)
    steps = [c.step for c in mon.checkpoints]
    # last 2 (7, 8); last good: 3 (4 is next to the alarm at 5, 6 between alarms); best: 2
    assert steps == [2, 3, 7, 8]
    assert mon.last_good.step == 3 and mon.best.step == 2
    assert sorted(os.listdir(tmp_path / "ck")) == [f"ckpt-{s:012d}.pt" for s in steps]


def test_pause_and_snapshot_writes_a_snapshot_and_obeys_resume_or_stop(tmp_path):
    ck = tmp_path / "ck"
    model, opt, mon = _setup("rule odd: when loss > 10 do pause_and_snapshot\n", tmp_path, checkpoint_dir=ck)
    # The snapshot directory is known in advance: answer before the pause.
    (ck / "snapshots" / "step-2").mkdir(parents=True)
    (ck / "snapshots" / "step-2" / "resume").write_text("")
    (ck / "snapshots" / "step-4").mkdir(parents=True)
    (ck / "snapshots" / "step-4" / "stop").write_text("")
    mon.after_backward(1, 1.0)
    d = mon.after_backward(2, 100.0)
    assert not d.stop and d.firings[0].rule == "odd"
    snap = ck / "snapshots" / "step-2"
    assert {"README.txt", "explanation.txt", "window.jsonl", "ckpt-000000000002.pt"} <= set(os.listdir(snap))
    window = [json.loads(line) for line in (snap / "window.jsonl").read_text().splitlines()]
    assert [w["step"] for w in window] == [1, 2]
    assert "rule odd fired at step 2" in (snap / "explanation.txt").read_text()
    mon.after_backward(3, 1.0)
    d = mon.after_backward(4, 100.0)
    assert d.stop and d.stop_reason == "stopped after pause_and_snapshot"


def test_faulty_run_recovers_with_rules_and_ends_nan_without(tmp_path):
    baseline = faulty_run.train(faulty_run.Config())
    assert math.isnan(baseline.final_loss)
    r = faulty_run.train(faulty_run.Config(rules=TRAINER_RULES, work_dir=str(tmp_path)))
    assert math.isfinite(r.final_loss) and r.final_accuracy > 0.9
    assert r.rollbacks == 1 and r.skipped_steps == 2
    assert {(rule, step) for rule, step, _, _ in r.firings} >= {("nonfinite_grad", 120), ("loss_spike", 251)}
    assert r.min_lr < 0.01 and r.final_lr == pytest.approx(0.005)


def test_resume_continues_exactly_and_the_recorded_trace_replays(tmp_path, rulecheck):
    whole_trace = tmp_path / "whole.jsonl"
    whole = faulty_run.train(faulty_run.Config(rules=TRAINER_RULES, work_dir=str(tmp_path / "a"),
                                               record_jsonl=str(whole_trace)))
    first = faulty_run.train(faulty_run.Config(rules=TRAINER_RULES, work_dir=str(tmp_path / "b"),
                                               stop_after=200))
    second = faulty_run.train(faulty_run.Config(rules=TRAINER_RULES, work_dir=str(tmp_path / "b"),
                                                resume=True))
    assert first.firings + second.firings == whole.firings
    assert second.final_loss == whole.final_loss
    r = subprocess.run([rulecheck, "run", TRAINER_RULES, "--trace", str(whole_trace), "--format", "json"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    replay = [(j["rule"], j["step"], j["labels"]) for j in map(json.loads, r.stdout.splitlines())]
    assert replay == [(rule, step, labels) for rule, step, labels, _ in whole.firings]


# A child that checkpoints at steps 1, 2, 3 and is killed (SIGKILL) inside the
# third checkpoint's write: at the fsync of the temp file, or at the rename.
KILL_CHILD = textwrap.dedent("""
    import os, sys, torch
    sys.path.insert(0, sys.argv[3])
    from test_monitor import Tiny
    import vigil.torch as vt
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rules = os.path.join(sys.argv[1], "r.rules")
    open(rules, "w").write("rule x: when loss > 1e9 do log\\n")
    mon = vt.Monitor(model, opt, rules=rules, checkpoint_dir=os.path.join(sys.argv[1], "ck"))
    where = sys.argv[2]
    real = getattr(os, where)
    def blocked(*args):
        if mon._checkpoints and mon._checkpoints[-1].step == 3:
            print("in", where, flush=True)
            sys.stdin.readline()   # the parent kills us here
        return real(*args)
    setattr(os, where, blocked)
    for step in (1, 2, 3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(step))
        mon.host_state["position"] = step
        mon.after_backward(step, 0.5)
        mon.checkpoint(step)
        print("saved", step, flush=True)
""")


@pytest.mark.parametrize("where", ["fsync", "replace"])
def test_kill_9_during_checkpoint_leaves_the_previous_one_usable(tmp_path, where):
    script = tmp_path / "child.py"
    script.write_text(KILL_CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path), where, os.path.dirname(__file__)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stdout:  # wait for the event, not for a time
        lines.append(line.strip())
        if line.startswith("in "):
            break
    assert lines == ["saved 1", "saved 2", f"in {where}"]
    os.kill(child.pid, signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL
    child.stdin.close()
    child.stdout.close()
    ck = tmp_path / "ck"
    names = sorted(os.listdir(ck))
    temp = [n for n in names if ".tmp." in n]
    assert temp == [f".ckpt-000000000003.pt.tmp.{child.pid}"]
    assert Monitor.latest_checkpoint(ck) == str(ck / "ckpt-000000000002.pt")
    # A restarted process resumes from checkpoint 2 and clears the dead writer's temp file.
    torch.manual_seed(5)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mon = Monitor(model, opt, rules=str(tmp_path / "r.rules"), checkpoint_dir=ck)
    assert not [n for n in os.listdir(ck) if ".tmp." in n]
    assert mon.resume(Monitor.latest_checkpoint(ck)) == 2
    assert mon.host_state == {"position": 2}
    torch.manual_seed(0)
    reference = Tiny()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(1.0)
            p.add_(2.0)
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    assert [c.step for c in mon.checkpoints] == [1, 2]


DIST_CHILD = textwrap.dedent("""
    import json, sys, torch, torch.distributed as dist
    import vigil, vigil.torch as vt
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    full = torch.arange(1.0, 9.0).reshape(4, 2)
    shard = full[2 * rank:2 * rank + 2]          # each process holds half of the tensor
    prog = vigil.compile("rule g: when grad_norm > 0 do log\\nrule m: when grad_max > 7.5 do log\\n"
                         "rule l: when loss > 0.25 do log")
    out = {}
    for mode in ("alone", "gathered"):
        eng = vigil.Engine(prog, unbound="record", allgather=vt.allgather() if mode == "gathered" else None)
        loss = vt.mean_across(float(rank)) if mode == "gathered" else float(rank)
        fired = eng.observe(1, {"loss": loss}, tensors={'grad{layer="w"}': shard})
        out[mode] = sorted([f.rule, round(f.value, 9)] for f in fired)
    print(json.dumps(out))
    dist.destroy_process_group()
""")


def test_multi_process_stats_are_combined_so_every_process_decides_alike(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(DIST_CHILD)
    store = tmp_path / "store"
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), str(store)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    outs = []
    for p in ranks:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    whole = round(math.sqrt(sum(x * x for x in range(1, 9))), 9)
    for out in outs:
        assert out["gathered"] == [["g", whole], ["l", 0.5], ["m", 8.0]]
    assert outs[0]["alone"] == [["g", round(math.sqrt(1 + 4 + 9 + 16), 9)]]
    assert outs[1]["alone"] == [["g", round(math.sqrt(25 + 36 + 49 + 64), 9)], ["l", 1.0], ["m", 8.0]]
