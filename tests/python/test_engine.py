"""The vigil extension module: compile, Engine, Firing, Action (SPEC §8)."""
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import vigil

torch.set_num_threads(1)


def test_spec_snippet_core(tmp_path):
    # SPEC §8, the engine part, as written there.
    text = 'param k = 3\nrule big: when loss > k do reduce_lr(factor = 0.5)\n'
    calls = []

    def fn(firing, action):
        calls.append((firing.rule, action.name, action.args))

    t = torch.ones(4, 3)
    prog = vigil.compile(text, params={"k": 3})
    eng = vigil.Engine(prog, unbound="error")
    eng.on("reduce_lr", fn)
    fired = eng.observe(1, {"loss": 5.0, 'grad_norm{layer="fc1"}': 0.3},
                        mode="train", time=None,
                        tensors={'grad{layer="fc1.weight"}': t})
    f = fired[0]
    assert (f.rule, f.step, f.mode, f.severity, f.labels, f.value, f.actions) == (
        "big", 1, "train", "warning", {}, 5.0, ["reduce_lr"])
    assert "loss = 5" in eng.explain(f)
    b = eng.save_state()
    assert isinstance(b, bytes)
    eng.restore_state(b)
    assert calls == [("big", "reduce_lr", {"factor": 0.5, "min_lr": 0.0})]

    path = tmp_path / "train.rules"
    path.write_text(text)
    prog2 = vigil.compile_file(str(path), params={"k": 10})
    assert prog2.params == {"k": 10.0}
    assert vigil.Engine(prog2, unbound="record").observe(1, {"loss": 5.0}) == []


def test_compile_error_renders_every_diagnostic():
    text = "rule a: when nosuch(loss) > 1 do log\nrule b: when loss > 1 do log(\n"
    with pytest.raises(vigil.CompileError) as info:
        vigil.compile(text, name="train.rules")
    message = str(info.value)
    assert "train.rules:2:" in message
    assert "^" in message
    assert info.value.diagnostics
    d = info.value.diagnostics[0]
    assert d["file"] == "train.rules" and d["level"] == "error" and d["line"] >= 1
    assert isinstance(info.value, vigil.Error)


def test_compile_error_lists_all_checker_errors():
    text = "rule a: when nosuch(loss) > 1 do log\nrule b: when loss > 1 for 3 samples do nope\n" \
           "rule c: when los > 1 do log\nparam q = 1\nrule d: when loss > qq do log\n"
    with pytest.raises(vigil.CompileError) as info:
        vigil.compile(text, name="x.rules")
    lines = [d["line"] for d in info.value.diagnostics if d["level"] == "error"]
    assert len(lines) >= 2, str(info.value)
    assert "x.rules:1:" in str(info.value)


def test_compile_file_imports_relative_to_the_file_and_lists(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "g.rules").write_text(
        "rule guard(metric = loss):\n    when not is_finite(metric) do stop(\"nan\")\n")
    (tmp_path / "a.rules").write_text('import "lib/g.rules"\nuse guard() as nan_guard\n')
    (tmp_path / "b.rules").write_text("rule big: when loss > 10 do log\n")
    prog = vigil.compile_file([tmp_path / "a.rules", tmp_path / "b.rules"])
    assert sorted(r["name"] for r in prog.rules) == ["big", "nan_guard"]
    assert prog.actions == ["log", "stop"]
    with pytest.raises(vigil.CompileError, match="cannot read rule file"):
        vigil.compile_file(tmp_path / "missing.rules")
    with pytest.raises(vigil.CompileError, match="undeclared|unknown|param"):
        vigil.compile("rule x: when loss > 1 do log", params={"nope": 1})


def test_unbound_actions_error_and_record():
    prog = vigil.compile("rule big: when loss > 1 do reduce_lr(factor = 0.5), stop(\"x\")")
    eng = vigil.Engine(prog)
    assert len(eng.unbound_actions()) == 2
    with pytest.raises(vigil.Error, match="reduce_lr"):
        eng.observe(1, {"loss": 2.0})
    rec = vigil.Engine(prog, unbound="record")
    fired = rec.observe(1, {"loss": 2.0})
    assert fired[0].actions == ["reduce_lr", "stop"]
    assert [a.args for a in fired[0].action_list] == [{"factor": 0.5, "min_lr": 0.0}, {"reason": "x"}]
    with pytest.raises(ValueError, match="unbound"):
        vigil.Engine(prog, unbound="ignore")
    with pytest.raises(vigil.Error, match="param"):
        vigil.Engine(prog, unbound="record", params={"nope": 1})


def test_engine_params_override():
    prog = vigil.compile("param k = 3\nrule big: when loss > k do log")
    eng = vigil.Engine(prog, unbound="record", params={"k": 1})
    assert [f.rule for f in eng.observe(1, {"loss": 2.0})] == ["big"]


def test_firing_fields_for_a_tensor_rule():
    prog = vigil.compile('rule exploding "grad too big": when grad_norm > 1 for 2 samples\n'
                         '    severity critical do log')
    eng = vigil.Engine(prog, unbound="record")
    g = {'grad{layer="fc1.weight"}': np.full(4, 1.0, dtype=np.float32),
         'grad{layer="fc2.weight"}': np.zeros(4, dtype=np.float32)}
    assert eng.observe(1, tensors=g, time=100.0) == []
    assert eng.pending
    fired = eng.observe(2, tensors=g, time=101.5)
    assert len(fired) == 1
    f = fired[0]
    assert f.labels == {"layer": "fc1.weight"}
    assert f.value == pytest.approx(2.0)
    assert f.severity == "critical" and f.time == 101.5 and f.pending_since == 1
    assert f.key == 'exploding{layer="fc1.weight"}'
    assert eng.stats.observations == 2 and eng.stats.firings == 1


def _max_rule():
    return vigil.Engine(vigil.compile("rule big: when x_max > 5 do log"), unbound="record")


def test_zero_copy_numpy_and_torch():
    # The engine reads the caller's memory: a change made in place after the
    # first observe is seen by the second, also through a strided view of it.
    for make in (lambda: np.zeros((8, 6), dtype=np.float32), lambda: torch.zeros(8, 6)):
        base = make()
        view = base[1:7:2, ::3]  # non-contiguous view into base
        eng = _max_rule()
        assert eng.observe(1, tensors={"x": view}) == []
        base[3, 3] = 42.0  # row 3 = view row 1, col 3 = view col 1
        fired = eng.observe(2, tensors={"x": view})
        assert [f.value for f in fired] == [42.0]
        base[3, 3] = 0.0
        assert eng.observe(3, tensors={"x": view}) == []
        base[3, 4] = 99.0  # not part of the view
        assert eng.observe(4, tensors={"x": view}) == []
        base[5, 0] = 7.0
        assert [f.value for f in eng.observe(5, tensors={"x": view})] == [7.0]


def _stats_engine():
    # Rules that read the stats; the values are taken from the recorder (a
    # rule fires when it becomes true, not at every true evaluation).
    prog = vigil.compile(
        "rule n: when x_norm > -1 do log\nrule m: when x_mean > -1e30 do log\n"
        "rule mx: when x_max > -1e30 do log\nrule c: when x_numel >= 0 do log\n"
        "rule z: when x_frac_nan >= 0 do log")
    eng = vigil.Engine(prog, unbound="record")
    seen = []
    eng.record(seen.append)
    return eng, seen


def _read_stats(engine, step, t):
    eng, seen = engine
    eng.observe(step, tensors={"x": t})
    v = seen[-1]["values"]
    return {"n": v["x_norm"], "m": v["x_mean"], "mx": v["x_max"], "c": v["x_numel"]}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_dtypes_and_strides(dtype):
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(6, 10, generator=gen).to(dtype)
    cases = [base, base.t(), base[::2, 1::3], base.unsqueeze(0).expand(3, 6, 10), base[2, 4],
             base[:, :0], torch.nn.Parameter(base.clone())]
    eng = _stats_engine()
    for step, t in enumerate(cases, 1):
        ref = t.detach().double()
        got = _read_stats(eng, step, t)
        assert got["c"] == ref.numel()
        if ref.numel():
            assert got["n"] == pytest.approx(torch.linalg.vector_norm(ref).item(), rel=1e-12)
            assert got["m"] == pytest.approx(ref.mean().item(), rel=1e-12, abs=1e-12)
            assert got["mx"] == ref.max().item()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_numpy_dtypes_and_strides(dtype):
    base = np.random.default_rng(5).standard_normal((7, 9)).astype(dtype)
    readonly = base.copy()
    readonly.setflags(write=False)
    cases = [base, base.T, base[::-1, ::2], base[3], np.float64(2.5) * np.ones((), dtype), readonly,
             np.broadcast_to(base[0], (4, 9))]
    eng = _stats_engine()
    for step, t in enumerate(cases, 1):
        ref = np.asarray(t, dtype=np.float64)
        got = _read_stats(eng, step, t)
        assert got["c"] == ref.size
        assert got["n"] == pytest.approx(float(np.linalg.norm(ref.ravel())), rel=1e-12)
        assert got["mx"] == ref.max()


def test_nan_is_a_value_not_an_error():
    eng = vigil.Engine(vigil.compile('rule nan: when not is_finite(loss) do stop("nan")\n'
                                     'rule g: when x_frac_nan > 0 do log'), unbound="record")
    x = np.array([1.0, float("nan"), 3.0, 4.0])
    fired = eng.observe(1, {"loss": float("nan")}, tensors={"x": x})
    assert sorted(f.rule for f in fired) == ["g", "nan"]
    assert [f.value for f in fired if f.rule == "g"] == [0.25]


def test_bad_inputs_raise_clear_python_errors():
    eng = _max_rule()
    with pytest.raises(TypeError, match=r"tensor 'x'.*unsupported dtype int64"):
        eng.observe(1, tensors={"x": torch.arange(3)})
    with pytest.raises(TypeError, match=r"unsupported element format"):
        eng.observe(1, tensors={"x": np.arange(3)})
    with pytest.raises(TypeError, match=r"tensor 'x'.*not list"):
        eng.observe(1, tensors={"x": [1.0, 2.0]})
    with pytest.raises(TypeError, match=r"value of 'loss' must be a number, not str"):
        eng.observe(1, {"loss": "high"})
    with pytest.raises(TypeError, match=r"value of 'loss' must be a number, not NoneType"):
        eng.observe(1, {"loss": None})
    with pytest.raises(TypeError, match=r"series keys must be str, not int"):
        eng.observe(1, {3: 1.0})
    with pytest.raises(ValueError, match=r"malformed series key 'grad_norm\{layer='"):
        eng.observe(1, {"grad_norm{layer=": 1.0})
    with pytest.raises(ValueError, match=r"malformed tensor series key"):
        eng.observe(1, tensors={"x{": np.zeros(2)})
    with pytest.raises(TypeError, match=r"values must be a dict"):
        eng.observe(1, [("loss", 1.0)])
    with pytest.raises(TypeError, match=r"tensors must be a dict"):
        eng.observe(1, tensors=np.zeros(3))
    with pytest.raises(TypeError, match=r"time must be a number"):
        eng.observe(1, {"loss": 1.0}, time="now")
    with pytest.raises(TypeError):
        eng.observe("one", {"loss": 1.0})
    with pytest.raises(vigil.Error, match="state"):
        eng.restore_state(b"not a state")
    with pytest.raises(TypeError):
        eng.on("log", 3)
    # Nothing above was observed; a well-formed series no rule reads is kept
    # (SPEC §4: rules may match it later), numbers of any kind are accepted.
    assert eng.stats.observations == 0
    assert eng.observe(1, {"never_read": 1.0, "b": True, "n": np.float32(2), "t": torch.tensor(3.0)}) == []
    fired = eng.observe(2, tensors={"x": np.array([7.0]), "unused": [1, 2]})  # unused: not even read
    assert [f.value for f in fired] == [7.0]


def test_explain_only_until_the_next_observe():
    eng = _max_rule()
    f = eng.observe(1, tensors={"x": np.array([9.0])})[0]
    assert "x_max" in eng.explain(f)
    eng.observe(2, {})
    with pytest.raises(vigil.Error, match="earlier observe"):
        eng.explain(f)
    other = _max_rule()
    g = other.observe(1, tensors={"x": np.array([9.0])})[0]
    with pytest.raises(vigil.Error, match="another engine"):
        eng.explain(g)


RULES_FOR = "rule spike: when loss > 1 for 3 samples do reduce_lr(factor = 0.5)\n" \
            "rule low: when loss < 0 do log\n"
LOSSES = [2, 2, 2, 2, -1, 2, 2, 2, 2, 0.5, 2]


def _run(engine, steps):
    out = []
    for step in steps:
        out += [(f.rule, f.step, f.value) for f in engine.observe(step, {"loss": LOSSES[step - 1]})]
    return out


def test_callback_exception_propagates_and_state_stays_consistent():
    prog = vigil.compile(RULES_FOR)
    ref = vigil.Engine(prog)
    seen_ref = []
    ref.on("reduce_lr", lambda f, a: seen_ref.append(f.step))
    ref.on("log", lambda f, a: seen_ref.append(("log", f.step)))
    expected = _run(ref, range(1, 12))

    eng = vigil.Engine(prog)
    seen = []

    class Boom(Exception):
        pass

    def cb(f, a):
        seen.append(f.step)
        if f.step == 3:
            raise Boom("callback failed at step 3")

    eng.on("reduce_lr", cb)
    eng.on("log", lambda f, a: seen.append(("log", f.step)))
    got = _run(eng, [1, 2])
    with pytest.raises(Boom, match="step 3"):
        eng.observe(3, {"loss": LOSSES[2]})
    got += [("spike", 3, 2.0)]  # the firing of the raising observation
    got += _run(eng, range(4, 12))
    assert got == expected
    assert seen == seen_ref
    assert eng.save_state() == ref.save_state()
    assert eng.stats.observations == 11


def test_a_raising_callback_does_not_swallow_the_other_actions():
    # A failing alert of one rule must not keep another rule's stop (or its own second action)
    # from being called; observe() raises the first exception after all of them ran.
    prog = vigil.compile("rule a: when loss > 1 do alert(message = \"x\"), log\n"
                         "rule b: when loss > 2 do alert(message = \"y\")\n"
                         "rule c: when loss > 3 do stop(reason = \"z\")\n")
    eng = vigil.Engine(prog)
    calls = []

    def alert(f, a):
        calls.append(("alert", f.rule))
        raise RuntimeError(f"webhook down for {f.rule}")

    eng.on("alert", alert)
    eng.on("log", lambda f, a: calls.append(("log", f.rule)))
    eng.on("stop", lambda f, a: calls.append(("stop", f.rule)))
    with pytest.raises(RuntimeError, match="webhook down for a"):
        eng.observe(1, {"loss": 5.0})
    assert calls == [("alert", "a"), ("log", "a"), ("alert", "b"), ("stop", "c")]
    assert eng.stats.firings == 3
    calls.clear()
    assert eng.observe(2, {"loss": 0.0}) == []  # the engine goes on; the runs end
    assert calls == [] and eng.stats.observations == 2


def test_callback_may_not_reenter_the_engine():
    eng = vigil.Engine(vigil.compile("rule big: when loss > 1 do log"))
    eng.on("log", lambda f, a: eng.observe(f.step + 1, {"loss": 0.0}))
    with pytest.raises(vigil.Error, match="from an action callback"):
        eng.observe(1, {"loss": 2.0})
    eng.on("log", lambda f, a: eng.on("log", None))
    eng.observe(2, {"loss": 0.0})
    with pytest.raises(vigil.Error, match="from an action callback"):
        eng.observe(3, {"loss": 2.0})
    eng.on("log", lambda f, a: None)
    eng.observe(4, {"loss": 0.0})
    assert len(eng.observe(5, {"loss": 2.0})) == 1


def test_callback_sees_the_firing_and_can_explain_it():
    eng = vigil.Engine(vigil.compile("rule big: when loss > 1 do alert(\"high\")"))
    texts = []
    eng.on("alert", lambda f, a: texts.append((a.args["message"], eng.explain(f))))
    eng.observe(1, {"loss": 3.0})
    assert texts[0][0] == "high" and "loss = 3" in texts[0][1]


def test_out_of_order_steps_are_counted_not_raised():
    eng = _max_rule()
    eng.observe(5, {"loss": 1.0})
    assert eng.observe(4, {"loss": 1.0}) == []
    assert eng.stats.out_of_order == 1


CHILD = textwrap.dedent("""
    import sys, vigil
    prog = vigil.compile(sys.argv[1])
    eng = vigil.Engine(prog, unbound="record")
    state, first, last = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    losses = [float(x) for x in sys.argv[5].split(",")]
    if first > 1:
        eng.restore_state(open(state, "rb").read())
    for step in range(first, last + 1):
        for f in eng.observe(step, {"loss": losses[step - 1]}):
            print(f.rule, f.step, f.value)
    open(state, "wb").write(eng.save_state())
""")


def test_save_and_restore_across_processes(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    state = tmp_path / "state.bin"
    losses = ",".join(str(x) for x in LOSSES)

    def child(first, last):
        r = subprocess.run([sys.executable, str(script), RULES_FOR, str(state), str(first), str(last), losses],
                           capture_output=True, text=True, check=True, env=os.environ.copy())
        return r.stdout.splitlines()

    split = child(1, 2) + child(3, 7) + child(8, 11)
    whole = child(1, 11)
    assert split == whole
    assert whole == ["spike 3 2.0", "low 5 -1.0", "spike 8 2.0"]


def test_record_replays_through_rulecheck_to_the_same_firings(tmp_path, rulecheck):
    rules = tmp_path / "r.rules"
    rules.write_text(
        "rule big_grad: when grad_norm > 3 for 2 samples do log\n"
        "rule loss_up: when loss > 1.5 * ewma(loss, 0.3) do log\n"
        "rule nan_w: when weight_frac_nan > 0 do log\n"
        "rule eval_bad: when val_loss > 0.8\n    in eval\n    do log\n")
    eng = vigil.Engine(vigil.compile_file(rules))
    eng.on("log", lambda f, a: None)
    trace = tmp_path / "trace.jsonl"
    eng.record(trace)
    gen = torch.Generator().manual_seed(11)
    live = []
    w = torch.randn(8, 8, generator=gen)
    for step in range(1, 41):
        g = torch.randn(8, 8, generator=gen) * (2.0 if step % 7 < 3 else 0.1)
        if step == 30:
            w[2, 2] = float("nan")
        loss = 1.0 + 0.5 * math.sin(step) + (3.0 if step == 20 else 0.0)
        tensors = {'grad{layer="a"}': g, 'weight{layer="a"}': w, 'grad{layer="b"}': g.t() * 0.5}
        for f in eng.observe(step, {"loss": loss}, time=1000.0 + step, tensors=tensors):
            live.append((f.rule, f.step, f.mode, f.labels, f.value))
        if step % 10 == 0:
            for f in eng.observe(step, {"val_loss": 0.5 + step / 50}, mode="eval"):
                live.append((f.rule, f.step, f.mode, f.labels, f.value))
    eng.record(None)
    assert {r for r, *_ in live} == {"big_grad", "loss_up", "nan_w", "eval_bad"}
    r = subprocess.run([rulecheck, "run", str(rules), "--trace", str(trace), "--format", "json"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    replay = []
    for line in r.stdout.splitlines():
        j = json.loads(line)
        replay.append((j["rule"], j["step"], j["mode"], j["labels"], j["value"]))
    assert replay == live


def test_record_to_a_callable():
    eng = _max_rule()
    seen = []
    eng.record(seen.append)
    eng.observe(1, {"loss": 0.5}, tensors={"x": np.array([1.0, 6.0])}, time=3.0)
    assert seen == [{"step": 1, "mode": "train", "time": 3.0, "values": {"loss": 0.5, "x_max": 6.0}}]

    def bad(obs):
        raise KeyError("recorder failed")

    eng.record(bad)
    with pytest.raises(KeyError):
        eng.observe(2, {"loss": 0.5})
    assert eng.stats.observations == 2
    with pytest.raises(ValueError, match="record"):
        eng.record("/nonexistent-dir/x/trace.jsonl")


def test_series_key_and_tensor_used():
    assert vigil.series_key("grad", {"layer": "fc1.weight"}) == 'grad{layer="fc1.weight"}'
    assert vigil.series_key("loss") == "loss"
    eng = vigil.Engine(vigil.compile("rule g: when grad_norm > 1 do log"), unbound="record")
    assert eng.tensor_used('grad{layer="x"}') and not eng.tensor_used('weight{layer="x"}')


def test_a_second_thread_on_a_busy_engine_gets_an_error_not_a_crash():
    import threading
    eng = vigil.Engine(vigil.compile("rule big: when loss > 1 do log"))
    inside, release = threading.Event(), threading.Event()

    def cb(f, a):
        inside.set()
        release.wait()

    eng.on("log", cb)
    worker = threading.Thread(target=lambda: eng.observe(1, {"loss": 2.0}))
    worker.start()
    assert inside.wait(60)  # the worker is inside observe (its callback)
    try:
        with pytest.raises(vigil.Error, match="in use by another thread"):
            eng.observe(2, {"loss": 0.0})
        with pytest.raises(vigil.Error, match="in use by another thread"):
            eng.save_state()
    finally:
        release.set()
        worker.join()
    assert eng.stats.observations == 1
    assert eng.observe(2, {"loss": 0.0}) == []


def test_aliases_rename_trace_series():
    prog = vigil.compile("rule x: when loss > 1 do log", aliases={"train/loss": "loss"})
    eng = vigil.Engine(prog, unbound="record")
    assert [f.rule for f in eng.observe(1, {"train/loss": 2.0})] == ["x"]


class _OnDevice:
    """A DLPack producer whose memory is on an accelerator (device type 2)."""

    def __init__(self, cpu_copy):
        self.cpu_copy = cpu_copy

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("device memory must not be read in place")

    def cpu(self):
        return self.cpu_copy


def test_a_tensor_on_an_accelerator_is_copied_with_a_one_time_note():
    eng = _max_rule()
    with pytest.warns(RuntimeWarning, match="copied to the CPU"):
        fired = eng.observe(1, tensors={"x": _OnDevice(torch.tensor([1.0, 8.0]))})
    assert [f.value for f in fired] == [8.0]
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eng.observe(2, tensors={"x": _OnDevice(torch.tensor([1.0]))})  # noted once only

    class NoCpu:
        __dlpack_device__ = _OnDevice.__dlpack_device__
        __dlpack__ = _OnDevice.__dlpack__

    with pytest.raises(TypeError, match="tensor 'x': tensor is not on the CPU"):
        eng.observe(3, tensors={"x": NoCpu()})
    with pytest.raises(TypeError, match="tensor 'x': expected a torch.Tensor or numpy array"):
        eng.observe(4, tensors={"x": _OnDevice(None)})  # cpu() gave nothing readable


def test_keys_built_anew_each_step_and_many_distinct_keys():
    eng = vigil.Engine(vigil.compile("rule x: when s0 > 1 do log"), unbound="record")
    for step in range(1, 7):  # 6000 distinct keys: past the key cache's bound
        values = {f"k{step}_{i}": 1.0 for i in range(1000)}
        values["s" + str(0)] = 0.5
        assert eng.observe(step, values) == []
    assert [f.rule for f in eng.observe(7, {"s0": 2})] == ["x"]
    assert eng.observe(8, {"s0": 0.5}) == []
    assert [f.rule for f in eng.observe(9, {"".join(["s", "0"]): 3.0})] == ["x"]


def test_the_gil_is_released_while_the_engine_evaluates():
    eng = _max_rule()
    held = []
    eng.on("log", lambda f, a: held.append(True))
    eng.observe(1, tensors={"x": np.array([9.0])})
    assert held == [True]  # the callback ran, with the GIL taken back
    assert eng._gil_held_in_last_evaluation is False


def test_a_failing_allgather_falls_back_to_this_process_stats():
    def gone(local):
        raise ConnectionError("peer gone")

    eng = vigil.Engine(vigil.compile("rule m: when x_max > 5 do log"), unbound="record", allgather=gone)
    with pytest.warns(RuntimeWarning, match="peer gone"):
        fired = eng.observe(1, tensors={"x": np.array([7.0])})
    assert [f.value for f in fired] == [7.0]
    assert eng.stats.gather_failures == 1
    # A gather that returns a buffer of the wrong length fails the same way.
    short = vigil.Engine(vigil.compile("rule m: when x_max > 5 do log"), unbound="record",
                         allgather=lambda local: list(local)[:-1])
    assert [f.value for f in short.observe(1, tensors={"x": np.array([7.0])})] == [7.0]
    assert short.stats.gather_failures == 1
    with pytest.raises(TypeError, match="allgather must be callable"):
        vigil.Engine(vigil.compile("rule m: when x_max > 5 do log"), allgather=3)
